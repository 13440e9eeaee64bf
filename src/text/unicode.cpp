#include "text/unicode.h"

#include <algorithm>
#include <iterator>

#include "text/pystr.h"

namespace ropelab::text::unicode {

namespace {

#include "text/unicode_tables.inc"

// Whether `c` lies in one of the sorted, disjoint [lo, hi] ranges.
template <size_t N>
bool in_ranges(const uint32_t (&r)[N][2], uint32_t c) {
  auto it = std::lower_bound(std::begin(r), std::end(r), c,
                             [](const uint32_t(&x)[2], uint32_t v) { return x[1] < v; });
  return it != std::end(r) && (*it)[0] <= c;
}

// The row of a table sorted by its first column whose key is `c`, or nullptr.
template <size_t N, size_t W>
const uint32_t* row_of(const uint32_t (&t)[N][W], uint32_t c) {
  auto it = std::lower_bound(std::begin(t), std::end(t), c,
                             [](const uint32_t(&x)[W], uint32_t v) { return x[0] < v; });
  return it != std::end(t) && (*it)[0] == c ? *it : nullptr;
}

uint32_t ccc(uint32_t c) {
  const uint32_t* r = row_of(kUCcc, c);
  return r ? r[1] : 0;
}

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

// The primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  auto it = std::lower_bound(std::begin(kUCompose), std::end(kUCompose), std::pair{a, b},
                             [](const uint32_t(&x)[3], std::pair<uint32_t, uint32_t> v) {
                               return x[0] < v.first || (x[0] == v.first && x[1] < v.second);
                             });
  return it != std::end(kUCompose) && (*it)[0] == a && (*it)[1] == b ? (*it)[2] : 0;
}

}  // namespace

std::vector<uint32_t> decode_utf8(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    const int len = b0 < 0x80         ? 1
                    : (b0 >> 5) == 6  ? 2
                    : (b0 >> 4) == 14 ? 3
                    : (b0 >> 3) == 30 ? 4
                                      : 0;
    uint32_t c = len == 1 ? b0 : len == 2 ? (b0 & 0x1Fu) : len == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u);
    bool ok = len > 0 && i + static_cast<size_t>(len) <= n;
    for (int k = 1; ok && k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      ok = (b & 0xC0u) == 0x80u;
      c = (c << 6) | (b & 0x3Fu);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (ok && (c < kMin[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))) ok = false;
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(c);
    i += static_cast<size_t>(len);
  }
  return out;
}

std::string encode_utf8(const std::vector<uint32_t>& cps, size_t from, size_t to) {
  std::string s;
  for (size_t i = from; i < to; ++i) append_utf8(s, cps[i]);
  return s;
}

bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}
bool is_other(uint32_t c) { return in_ranges(kUOther, c); }
bool is_punctuation(uint32_t c) { return in_ranges(kUPunct, c); }
bool is_nonspacing_mark(uint32_t c) { return in_ranges(kUMark, c); }
bool is_letter(uint32_t c) { return in_ranges(kULetter, c); }
bool is_number(uint32_t c) { return in_ranges(kUNumber, c); }

std::vector<uint32_t> nfd(const std::vector<uint32_t>& in) {
  std::vector<uint32_t> out;
  out.reserve(in.size());
  for (uint32_t c : in) {
    if (c >= kSBase && c < kSBase + kSCount) {  // Hangul: L V (T)
      const uint32_t s = c - kSBase;
      out.push_back(kLBase + s / kNCount);
      out.push_back(kVBase + (s % kNCount) / kTCount);
      if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    } else if (const uint32_t* r = row_of(kUDecomp, c)) {
      out.insert(out.end(), kUDecompCps + r[1], kUDecompCps + r[1] + r[2]);
    } else {
      out.push_back(c);
    }
  }
  // Canonical order: each run of combining marks stably sorted by combining class.
  for (size_t i = 0; i < out.size();) {
    if (ccc(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && ccc(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i),
                     out.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  return out;
}

std::vector<uint32_t> nfc(const std::vector<uint32_t>& in) {
  auto d = nfd(in);
  std::vector<uint32_t> out;
  out.reserve(d.size());
  size_t starter = SIZE_MAX;  // index in out of the last starter
  for (uint32_t c : d) {
    const uint32_t cc = ccc(c);
    if (starter != SIZE_MAX) {
      // c may join the starter unless a character between them blocks it: after canonical
      // ordering the last one has the highest class, so it blocks when its class is 0 or not
      // lower than c's.
      const bool adjacent = starter + 1 == out.size();
      const uint32_t last = adjacent ? 0 : ccc(out.back());
      if (adjacent || (last != 0 && last < cc)) {
        if (uint32_t comp = compose(out[starter], c)) {
          out[starter] = comp;
          continue;
        }
      }
    }
    if (cc == 0) starter = out.size();
    out.push_back(c);
  }
  return out;
}

void append_lower(uint32_t c, std::vector<uint32_t>& out) {
  if (const uint32_t* r = row_of(kULower, c)) {
    out.push_back(r[1]);
    if (r[2] != 0) out.push_back(r[2]);
  } else {
    out.push_back(c);
  }
}

}  // namespace ropelab::text::unicode
