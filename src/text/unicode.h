// Unicode properties and normalisation forms for the tokenizers of imported checkpoints
// (tokenizers/wordpiece.h, tokenizers/bpe.h), from tables generated out of Python's unicodedata
// (Unicode 14.0; scripts/gen_unicode_tables.py): the same answers on every platform, whatever its C
// library or locale. Torch-free.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ropelab::text::unicode {

// UTF-8 to code points; each byte of an invalid sequence (overlong, surrogate, truncated, out of
// range) becomes U+FFFD.
std::vector<uint32_t> decode_utf8(const std::string& s);
// Code points [from, to) as UTF-8.
std::string encode_utf8(const std::vector<uint32_t>& cps, size_t from, size_t to);
inline std::string encode_utf8(const std::vector<uint32_t>& cps) {
  return encode_utf8(cps, 0, cps.size());
}

bool is_white_space(uint32_t c);      // the White_Space property (Rust's char::is_whitespace)
bool is_other(uint32_t c);            // general category C* (control, format, unassigned, ...)
bool is_punctuation(uint32_t c);      // P*
bool is_nonspacing_mark(uint32_t c);  // Mn
bool is_letter(uint32_t c);           // L* (regex \p{L})
bool is_number(uint32_t c);           // N* (regex \p{N})

// Canonical decomposition (NFD) and canonical composition (NFC) of a whole text.
std::vector<uint32_t> nfd(const std::vector<uint32_t>& cps);
std::vector<uint32_t> nfc(const std::vector<uint32_t>& cps);
// Appends c's full lowercase mapping (1 or 2 code points), without context (a final capital
// sigma becomes σ), as Rust's char::to_lowercase.
void append_lower(uint32_t c, std::vector<uint32_t>& out);

}  // namespace ropelab::text::unicode
