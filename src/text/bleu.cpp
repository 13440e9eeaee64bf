#include "text/bleu.h"

#include <locale.h>
#include <algorithm>
#include <cctype>
#include <clocale>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cwctype>
#include <map>

#include "text/corpus.h"
#include "util/error.h"

namespace ropelab::text {

namespace {

// UTF-8 -> code points (a stray byte stands for itself).
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

// Python's str.isspace(): what str.split() and str.rstrip() split and strip on.
bool py_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// str.split(): the whitespace-separated words.
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

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_dot_comma(char c) { return c == '.' || c == ','; }
// The ASCII punctuation of 13a's first rule: { - ~, [ - `, space - &, ( - +, : - @, and /.
bool is_13a_punct(char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
         (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}

// The three two-character rules of 13a, each one left-to-right, non-overlapping pass (like
// Python's re.sub). Working on bytes gives the same result as on characters: every pattern
// character is ASCII, and "any character but a digit" only decides where a space goes.
std::string pass(const std::string& s, bool (*first)(char), bool (*second)(char),
                 const char* before, const char* middle, const char* after) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (i + 1 < s.size() && first(s[i]) && second(s[i + 1])) {
      out += before;
      out += s[i];
      out += middle;
      out += s[i + 1];
      out += after;
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

using Counts = std::map<std::string, double>;

Counts ngrams(const std::vector<std::string>& toks, size_t n) {
  Counts c;
  for (size_t i = 0; i + n <= toks.size(); ++i) {
    std::string key;
    for (size_t k = 0; k < n; ++k) key += (k ? "\x01" : "") + toks[i + k];
    c[key] += 1;
  }
  return c;
}

// The references of segment i, one from each stream.
std::vector<std::string> segment_refs(const std::vector<std::vector<std::string>>& refs, size_t i) {
  std::vector<std::string> r;
  r.reserve(refs.size());
  for (const auto& stream : refs) r.push_back(stream.at(i));
  return r;
}

double my_log(double x) { return x == 0 ? -9999999999.0 : std::log(x); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::string tokenize_13a(const std::string& line_in) {
  std::string line = line_in;
  replace_all(line, "<skipped>", "");
  replace_all(line, "-\n", "");
  replace_all(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    replace_all(line, "&quot;", "\"");
    replace_all(line, "&amp;", "&");
    replace_all(line, "&lt;", "<");
    replace_all(line, "&gt;", ">");
  }
  std::string padded;
  for (char c : " " + line + " ") {
    if (is_13a_punct(c)) {
      padded += ' ';
      padded += c;
      padded += ' ';
    } else {
      padded += c;
    }
  }
  auto not_digit = [](char c) { return !is_digit(c); };
  auto is_dash = [](char c) { return c == '-'; };
  std::string s = pass(padded, +not_digit, is_dot_comma, "", " ", " ");  // ([^0-9])([\.,])
  s = pass(s, is_dot_comma, +not_digit, " ", " ", "");                   // ([\.,])([^0-9])
  s = pass(s, is_digit, +is_dash, "", " ", " ");                         // ([0-9])(-)
  std::string out;
  for (const auto& w : py_split(s)) out += (out.empty() ? "" : " ") + w;
  return out;
}

void check_tokenizer(const std::string& name) {
  if (name != "13a" && name != "none" && name != "char")
    throw UserError("--tokenize " + name + ": not a tokenizer ropelab has (13a, none, char; " +
                    "sacreBLEU's zh and intl need Unicode category tables and are not in yet)");
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

namespace {
// A segment as sacreBLEU's BLEU sees it: lowercased (optionally), right-stripped, tokenized,
// split on whitespace.
std::vector<std::string> bleu_tokens(const std::string& line, const BleuOptions& o) {
  std::string s = py_rstrip(o.lowercase ? py_lower(line) : line);
  if (o.tokenize == "13a") return py_split(tokenize_13a(s));
  if (o.tokenize == "none") return py_split(s);
  if (o.tokenize == "char") {  // every character a token; the spaces between them split away
    std::vector<std::string> out;
    for (uint32_t c : code_points(s))
      if (!py_space(c)) out.emplace_back(), append_utf8(out.back(), c);
    return out;
  }
  check_tokenizer(o.tokenize);
  return {};
}
}  // namespace

BleuStats bleu_stats(const std::string& hyp, const std::vector<std::string>& refs,
                     const BleuOptions& o) {
  BleuStats st;
  auto h = bleu_tokens(hyp, o);
  st.hyp_len = static_cast<double>(h.size());
  std::array<Counts, 4> ref_max;
  double closest = -1;
  for (const auto& r : refs) {
    auto toks = bleu_tokens(r, o);
    auto len = static_cast<double>(toks.size());
    double d = std::abs(len - st.hyp_len), best = std::abs(closest - st.hyp_len);
    if (closest < 0 || d < best || (d == best && len < closest)) closest = len;
    for (size_t n = 1; n <= 4; ++n)
      for (const auto& [g, c] : ngrams(toks, n)) ref_max[n - 1][g] = std::max(ref_max[n - 1][g], c);
  }
  st.ref_len = std::max(0.0, closest);
  for (size_t n = 1; n <= 4; ++n) {
    for (const auto& [g, c] : ngrams(h, n)) {
      st.total[n - 1] += c;
      auto it = ref_max[n - 1].find(g);
      if (it != ref_max[n - 1].end()) st.correct[n - 1] += std::min(c, it->second);
    }
  }
  return st;
}

Bleu bleu_from(const BleuStats& s) {
  Bleu b;
  b.hyp_len = s.hyp_len;
  b.ref_len = s.ref_len;
  b.ratio = s.ref_len > 0 ? s.hyp_len / s.ref_len : 0.0;
  b.bp =
      s.hyp_len < s.ref_len ? (s.hyp_len > 0 ? std::exp(1.0 - s.ref_len / s.hyp_len) : 0.0) : 1.0;
  double matched = s.correct[0] + s.correct[1] + s.correct[2] + s.correct[3];
  if (matched == 0) return b;
  double smooth = 1.0;
  for (size_t n = 0; n < 4; ++n) {
    if (s.total[n] == 0) break;
    if (s.correct[n] == 0) {
      smooth *= 2;
      b.precisions[n] = 100.0 / (smooth * s.total[n]);
    } else {
      b.precisions[n] = 100.0 * s.correct[n] / s.total[n];
    }
  }
  double log_sum = 0;
  for (double p : b.precisions) log_sum += my_log(p);
  b.score = b.bp * std::exp(log_sum / 4.0);
  return b;
}

std::string Bleu::line() const {
  return "BLEU = " + fmt("%.2f", score) + " " + fmt("%.1f", precisions[0]) + "/" +
         fmt("%.1f", precisions[1]) + "/" + fmt("%.1f", precisions[2]) + "/" +
         fmt("%.1f", precisions[3]) + " (BP = " + fmt("%.3f", bp) +
         " ratio = " + fmt("%.3f", ratio) + " hyp_len = " + fmt("%.0f", hyp_len) +
         " ref_len = " + fmt("%.0f", ref_len) + ")";
}

Bleu corpus_bleu(const std::vector<std::string>& hyps,
                 const std::vector<std::vector<std::string>>& refs, const BleuOptions& o) {
  check_tokenizer(o.tokenize);
  BleuStats total;
  for (size_t i = 0; i < hyps.size(); ++i) {
    auto s = bleu_stats(hyps[i], segment_refs(refs, i), o);
    for (size_t n = 0; n < 4; ++n) total.correct[n] += s.correct[n], total.total[n] += s.total[n];
    total.hyp_len += s.hyp_len;
    total.ref_len += s.ref_len;
  }
  return bleu_from(total);
}

std::string bleu_signature(size_t nrefs, const BleuOptions& o) {
  return "nrefs:" + std::to_string(nrefs) + "|case:" + (o.lowercase ? "lc" : "mixed") +
         "|eff:no|tok:" + o.tokenize + "|smooth:exp|version:2.x";
}

// ---- chrF

namespace {
constexpr size_t kCharOrder = 6;
constexpr double kBeta = 2.0;

std::array<std::map<std::u32string, double>, kCharOrder> char_ngrams(const std::string& s) {
  std::u32string chars;
  for (uint32_t c : code_points(s))
    if (!py_space(c)) chars += static_cast<char32_t>(c);
  std::array<std::map<std::u32string, double>, kCharOrder> out;
  for (size_t n = 1; n <= kCharOrder; ++n)
    for (size_t i = 0; i + n <= chars.size(); ++i) out[n - 1][chars.substr(i, n)] += 1;
  return out;
}
}  // namespace

double chrf_from(const ChrfStats& s) {
  const double eps = 1e-16, factor = kBeta * kBeta;
  double avg_prec = 0, avg_rec = 0;
  int effective = 0;
  for (size_t n = 0; n < kCharOrder; ++n) {
    double hyp = s.v[3 * n], ref = s.v[3 * n + 1], match = s.v[3 * n + 2];
    avg_prec += hyp > 0 ? match / hyp : eps;
    avg_rec += ref > 0 ? match / ref : eps;
    if (hyp > 0 && ref > 0) ++effective;
  }
  if (effective == 0) return 0.0;
  avg_prec /= effective;
  avg_rec /= effective;
  if (avg_prec + avg_rec == 0) return 0.0;
  return 100.0 * (1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec);
}

ChrfStats chrf_stats(const std::string& hyp, const std::vector<std::string>& refs, bool lowercase) {
  auto h = char_ngrams(lowercase ? py_lower(hyp) : hyp);
  ChrfStats best;
  double best_f = -1;
  for (const auto& r : refs) {
    auto rg = char_ngrams(lowercase ? py_lower(r) : r);
    ChrfStats st;
    for (size_t n = 0; n < kCharOrder; ++n) {
      double hyp_count = 0;
      for (const auto& [g, c] : h[n]) {
        hyp_count += c;
        auto it = rg[n].find(g);
        if (it != rg[n].end()) st.v[3 * n + 2] += std::min(c, it->second);
      }
      // As sacreBLEU: an order the reference has no n-grams of (an empty or short reference)
      // counts none of the hypothesis's either.
      st.v[3 * n] = rg[n].empty() ? 0 : hyp_count;
      for (const auto& [g, c] : rg[n]) st.v[3 * n + 1] += c;
    }
    double f = chrf_from(st);
    if (f > best_f) best_f = f, best = st;
  }
  return best;
}

double corpus_chrf(const std::vector<std::string>& hyps,
                   const std::vector<std::vector<std::string>>& refs, bool lowercase) {
  ChrfStats total;
  for (size_t i = 0; i < hyps.size(); ++i) {
    auto s = chrf_stats(hyps[i], segment_refs(refs, i), lowercase);
    for (size_t k = 0; k < total.v.size(); ++k) total.v[k] += s.v[k];
  }
  return chrf_from(total);
}

std::string chrf_signature(size_t nrefs, bool lowercase) {
  return "nrefs:" + std::to_string(nrefs) + "|case:" + (lowercase ? "lc" : "mixed") +
         "|eff:yes|nc:6|nw:0|space:no|version:2.x";
}

std::string score_files(const std::string& hyp_path, const std::vector<std::string>& ref_paths,
                        const BleuOptions& bleu, bool chrf_lowercase) {
  check_tokenizer(bleu.tokenize);
  if (ref_paths.empty()) throw UserError("bleu: give at least one --ref file");
  auto hyps = read_lines(hyp_path);
  std::vector<std::vector<std::string>> refs;
  for (const auto& p : ref_paths) {
    refs.push_back(read_lines(p));
    if (refs.back().size() != hyps.size())
      throw UserError(p + ": has " + std::to_string(refs.back().size()) + " lines but " + hyp_path +
                      " has " + std::to_string(hyps.size()) +
                      " (one segment per line; the files must align)");
  }
  if (hyps.empty()) throw UserError(hyp_path + ": no segments (the file is empty)");
  auto b = corpus_bleu(hyps, refs, bleu);
  char chrf[32];
  std::snprintf(chrf, sizeof chrf, "%.2f", corpus_chrf(hyps, refs, chrf_lowercase));
  return "BLEU|" + bleu_signature(refs.size(), bleu) + " = " + b.line().substr(7) + "\nchrF2|" +
         chrf_signature(refs.size(), chrf_lowercase) + " = " + chrf + "\n";
}

}  // namespace ropelab::text
