// Python's str semantics on UTF-8 strings, for the scorers that must tokenize exactly as
// sacreBLEU (a Python program) does: str.isspace, str.split, str.strip/rstrip, str.lower.
// A byte that is not valid UTF-8 stands for itself. Torch-free.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ropelab::text {

std::vector<uint32_t> code_points(const std::string& s);
void append_utf8(std::string& out, uint32_t cp);
// str.isspace() of one character.
bool py_space(uint32_t c);
// str.split(): the whitespace-separated words.
std::vector<std::string> py_split(const std::string& s);
// ' '.join(s.split()).
std::string py_squeeze(const std::string& s);
std::string py_rstrip(const std::string& s);
std::string py_strip(const std::string& s);
// str.lower(): the C.UTF-8 locale's simple case mapping, plus the two context rules Python
// applies (U+0130 becomes "i\u0307"; a final capital sigma becomes a final small sigma).
std::string py_lower(const std::string& s);
// str.replace(from, to).
void replace_all(std::string& s, const std::string& from, const std::string& to);

}  // namespace ropelab::text
