#include "text/pystr.h"

#include <locale.h>
#include <cctype>
#include <clocale>
#include <cwctype>

namespace ropelab::text {

std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + static_cast<size_t>(n) > s.size()) n = 1;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += static_cast<size_t>(n);
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::vector<std::string> py_split(const std::string& s) {
  std::vector<std::string> words;
  std::string cur;
  for (uint32_t c : code_points(s)) {
    if (py_space(c)) {
      if (!cur.empty()) words.push_back(std::move(cur)), cur.clear();
    } else {
      append_utf8(cur, c);
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

std::string py_rstrip(const std::string& s) {
  auto cps = code_points(s);
  while (!cps.empty() && py_space(cps.back())) cps.pop_back();
  std::string out;
  for (uint32_t c : cps) append_utf8(out, c);
  return out;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size())
    s.replace(p, from.size(), to);
}

std::string py_squeeze(const std::string& s) {
  std::string out;
  for (const auto& w : py_split(s)) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::string py_strip(const std::string& s) {
  auto cps = code_points(s);
  size_t b = 0, e = cps.size();
  while (b < e && py_space(cps[b])) ++b;
  while (e > b && py_space(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) append_utf8(out, cps[i]);
  return out;
}

std::string py_lower(const std::string& s) {
  static locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  auto cps = code_points(s);
  auto cased = [&](size_t i) {
    if (utf8 == static_cast<locale_t>(nullptr)) return cps[i] < 0x80 && std::isalpha(cps[i]) != 0;
    return iswalpha_l(static_cast<wint_t>(cps[i]), utf8) &&
           (towlower_l(static_cast<wint_t>(cps[i]), utf8) != static_cast<wint_t>(cps[i]) ||
            towupper_l(static_cast<wint_t>(cps[i]), utf8) != static_cast<wint_t>(cps[i]));
  };
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    uint32_t c = cps[i];
    if (c < 0x80) {
      out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    } else if (c == 0x130) {  // Python's full mapping: i + combining dot above
      out += "i\xcc\x87";
    } else if (c == 0x3A3) {  // Final_Sigma: after a cased letter, not before one
      bool after = i > 0 && cased(i - 1);
      bool before = i + 1 < cps.size() && cased(i + 1);
      append_utf8(out, after && !before ? 0x3C2 : 0x3C3);
    } else if (utf8 != static_cast<locale_t>(nullptr)) {
      append_utf8(out, static_cast<uint32_t>(towlower_l(static_cast<wint_t>(c), utf8)));
    } else {
      append_utf8(out, c);
    }
  }
  return out;
}

}  // namespace ropelab::text
