#include "scoring/bleu.h"

#include <locale.h>
#include <algorithm>
#include <cctype>
#include <clocale>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cwctype>
#include <map>

#include "text/lines.h"
#include "util/error.h"

namespace ropelab::scoring {

namespace {

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
    for (size_t k = 0; k < n; ++k)
      key += (k ? " " : "") + toks[i + k];  // tokens never hold a space
    c[key] += 1;
  }
  return c;
}

double my_log(double x) { return x == 0 ? -9999999999.0 : std::log(x); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

}  // namespace

std::string mteval_pad_punct(const std::string& line) {
  std::string padded;
  for (char c : line) {
    if (is_13a_punct(c)) {
      padded += ' ';
      padded += c;
      padded += ' ';
    } else {
      padded += c;
    }
  }
  return padded;
}

std::string mteval_split_numbers(const std::string& padded) {
  auto not_digit = [](char c) { return !is_digit(c); };
  auto is_dash = [](char c) { return c == '-'; };
  std::string s = pass(padded, +not_digit, is_dot_comma, "", " ", " ");  // ([^0-9])([\.,])
  s = pass(s, is_dot_comma, +not_digit, " ", " ", "");                   // ([\.,])([^0-9])
  return pass(s, is_digit, +is_dash, "", " ", " ");                      // ([0-9])(-)
}

namespace {
// The regular-expression part that 13a and zh share (sacreBLEU's TokenizerRegexp).
std::string tokenize_re(const std::string& line) {
  return text::py_squeeze(mteval_split_numbers(mteval_pad_punct(line)));
}

// sacreBLEU's zh tokenizer's "Chinese characters". Its table writes two supplementary-plane
// ranges as "\u20000"-"\u2a6d6" and "\u2f800"-"\u2fa1d", which Python reads as two-character
// strings; compared with one character they select U+2001-U+2A6D and U+2F81-U+2FA1 (general
// punctuation, arrows and mathematical symbols among them). This reproduces that, since the
// point is to score as sacreBLEU does.
bool zh_char(uint32_t c) {
  static const uint32_t ranges[][2] = {
      {0x3400, 0x4DB5}, {0x4E00, 0x9FA5}, {0x9FA6, 0x9FBB}, {0xF900, 0xFA2D}, {0xFA30, 0xFA6A},
      {0xFA70, 0xFAD9}, {0x2001, 0x2A6D}, {0x2F81, 0x2FA1}, {0xFF00, 0xFFEF}, {0x2E80, 0x2EFF},
      {0x3000, 0x303F}, {0x31C0, 0x31EF}, {0x2F00, 0x2FDF}, {0x2FF0, 0x2FFF}, {0x3100, 0x312F},
      {0x31A0, 0x31BF}, {0xFE10, 0xFE1F}, {0xFE30, 0xFE4F}, {0x2600, 0x26FF}, {0x2700, 0x27BF},
      {0x3200, 0x32FF}, {0x3300, 0x33FF}};
  for (const auto& r : ranges)
    if (c >= r[0] && c <= r[1]) return true;
  return false;
}
}  // namespace

std::vector<std::string> segment_refs(const std::vector<std::vector<std::string>>& refs, size_t i) {
  std::vector<std::string> r;
  r.reserve(refs.size());
  for (const auto& stream : refs) r.push_back(stream.at(i));
  return r;
}

std::string tokenize_13a(const std::string& line_in) {
  std::string line = line_in;
  text::replace_all(line, "<skipped>", "");
  text::replace_all(line, "-\n", "");
  text::replace_all(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    text::replace_all(line, "&quot;", "\"");
    text::replace_all(line, "&amp;", "&");
    text::replace_all(line, "&lt;", "<");
    text::replace_all(line, "&gt;", ">");
  }
  return tokenize_re(" " + line + " ");
}

namespace {
#include "text/unicode_classes.inc"

template <size_t N>
bool in_class(const uint32_t (&table)[N][2], uint32_t c) {
  size_t lo = 0, hi = N;  // the first range whose end is >= c
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (table[mid][1] < c)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < N && table[lo][0] <= c;
}

// One left-to-right, non-overlapping pass of re.sub("(A)(B)", ...) over code points.
template <typename F, typename G>
std::vector<uint32_t> pair_pass(const std::vector<uint32_t>& s, F first, G second,
                                bool space_before, bool space_after) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    if (i + 1 < s.size() && first(s[i]) && second(s[i + 1])) {
      if (space_before) out.push_back(' ');
      out.push_back(s[i]);
      out.push_back(' ');
      out.push_back(s[i + 1]);
      if (space_after) out.push_back(' ');
      i += 2;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}
}  // namespace

std::string tokenize_intl(const std::string& line) {
  auto not_number = [](uint32_t c) { return !in_class(kNumber, c); };
  auto punct = [](uint32_t c) { return in_class(kPunct, c); };
  auto cps = pair_pass(text::code_points(line), not_number, punct, false, true);  // (\P{N})(\p{P})
  cps = pair_pass(cps, punct, not_number, true, false);                           // (\p{P})(\P{N})
  std::string out;
  for (uint32_t c : cps) {  // (\p{S})
    bool symbol = in_class(kSymbol, c);
    if (symbol) out += ' ';
    text::append_utf8(out, c);
    if (symbol) out += ' ';
  }
  return text::py_squeeze(out);
}

std::string tokenize_zh(const std::string& line) {
  std::string spaced;
  for (uint32_t c : text::code_points(text::py_strip(line))) {
    if (zh_char(c)) spaced += ' ';
    text::append_utf8(spaced, c);
    if (zh_char(c)) spaced += ' ';
  }
  return tokenize_re(spaced);
}

void check_tokenizer(const std::string& name) {
  if (name != "13a" && name != "none" && name != "char" && name != "zh" && name != "intl")
    throw UserError("--tokenize " + name +
                    ": not a tokenizer ropelab has (13a, intl, zh, char, none; sacreBLEU's "
                    "ja-mecab, ko-mecab and spm need MeCab or a SentencePiece model it downloads)");
}

namespace {
// A segment as sacreBLEU's BLEU sees it: lowercased (optionally), right-stripped, tokenized,
// split on whitespace.
std::vector<std::string> bleu_tokens(const std::string& line, const BleuOptions& o) {
  std::string s = text::py_rstrip(o.lowercase ? text::py_lower(line) : line);
  if (o.tokenize == "13a") return text::py_split(tokenize_13a(s));
  if (o.tokenize == "none") return text::py_split(s);
  if (o.tokenize == "zh") return text::py_split(tokenize_zh(s));
  if (o.tokenize == "intl") return text::py_split(tokenize_intl(s));
  if (o.tokenize == "char") {  // every character a token; the spaces between them split away
    std::vector<std::string> out;
    for (uint32_t c : text::code_points(s))
      if (!text::py_space(c)) out.emplace_back(), text::append_utf8(out.back(), c);
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

Bleu bleu_from(const BleuStats& s, bool effective_order) {
  Bleu b;
  b.hyp_len = s.hyp_len;
  b.ref_len = s.ref_len;
  b.ratio = s.ref_len > 0 ? s.hyp_len / s.ref_len : 0.0;
  b.bp =
      s.hyp_len < s.ref_len ? (s.hyp_len > 0 ? std::exp(1.0 - s.ref_len / s.hyp_len) : 0.0) : 1.0;
  double matched = s.correct[0] + s.correct[1] + s.correct[2] + s.correct[3];
  if (matched == 0) return b;
  double smooth = 1.0;
  size_t orders = 4;  // with effective order: the orders the hypothesis has n-grams of
  for (size_t n = 0; n < 4; ++n) {
    if (s.total[n] == 0) break;
    if (effective_order) orders = n + 1;
    if (s.correct[n] == 0) {
      smooth *= 2;
      b.precisions[n] = 100.0 / (smooth * s.total[n]);
    } else {
      b.precisions[n] = 100.0 * s.correct[n] / s.total[n];
    }
  }
  double log_sum = 0;
  for (size_t n = 0; n < orders; ++n) log_sum += my_log(b.precisions[n]);
  b.score = b.bp * std::exp(log_sum / static_cast<double>(orders));
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
  return bleu_from(total, o.effective_order);
}

std::string bleu_signature(size_t nrefs, const BleuOptions& o) {
  return "nrefs:" + std::to_string(nrefs) + "|case:" + (o.lowercase ? "lc" : "mixed") +
         "|eff:" + (o.effective_order ? "yes" : "no") + "|tok:" + o.tokenize +
         "|smooth:exp|version:2.x";
}

// ---- chrF

namespace {
constexpr size_t kCharOrder = 6;
constexpr double kBeta = 2.0;

using Grams = std::map<std::u32string, double>;

void char_ngrams(const std::string& s, std::vector<Grams>& out) {
  std::u32string chars;
  for (uint32_t c : text::code_points(s))
    if (!text::py_space(c)) chars += static_cast<char32_t>(c);
  for (size_t n = 1; n <= kCharOrder; ++n) {
    out.emplace_back();
    for (size_t i = 0; i + n <= chars.size(); ++i) out.back()[chars.substr(i, n)] += 1;
  }
}

// chrF++'s words: split on whitespace, one punctuation character split off the end, or else
// off the start, of every word longer than one character.
bool chrf_punct(uint32_t c) { return c < 0x80 && std::ispunct(static_cast<int>(c)) != 0; }
void word_ngrams(const std::string& s, int order, std::vector<Grams>& out) {
  std::vector<std::u32string> words;
  for (const auto& w : text::py_split(s)) {
    auto cps = text::code_points(w);
    std::u32string u(cps.begin(), cps.end());
    if (u.size() == 1) {
      words.push_back(u);
    } else if (chrf_punct(u.back())) {
      words.push_back(u.substr(0, u.size() - 1)), words.push_back(u.substr(u.size() - 1));
    } else if (chrf_punct(u.front())) {
      words.push_back(u.substr(0, 1)), words.push_back(u.substr(1));
    } else {
      words.push_back(u);
    }
  }
  for (int n = 1; n <= order; ++n) {
    out.emplace_back();
    for (size_t i = 0; i + static_cast<size_t>(n) <= words.size(); ++i) {
      std::u32string key;
      for (size_t k = 0; k < static_cast<size_t>(n); ++k) key += (k ? U" " : U"") + words[i + k];
      out.back()[key] += 1;
    }
  }
}

std::vector<Grams> chrf_ngrams(const std::string& line, const ChrfOptions& o) {
  std::string s = o.lowercase ? text::py_lower(line) : line;
  std::vector<Grams> g;
  char_ngrams(s, g);
  if (o.word_order > 0) word_ngrams(s, o.word_order, g);
  return g;
}
}  // namespace

double chrf_from(const ChrfStats& s) {
  const double eps = 1e-16, factor = kBeta * kBeta;
  double avg_prec = 0, avg_rec = 0;
  int effective = 0;
  for (size_t n = 0; 3 * n + 2 < s.v.size(); ++n) {
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

ChrfStats chrf_stats(const std::string& hyp, const std::vector<std::string>& refs,
                     const ChrfOptions& o) {
  auto h = chrf_ngrams(hyp, o);
  ChrfStats best;
  best.v.assign(3 * h.size(), 0.0);
  double best_f = -1;
  for (const auto& r : refs) {
    auto rg = chrf_ngrams(r, o);
    ChrfStats st;
    st.v.assign(3 * h.size(), 0.0);
    for (size_t n = 0; n < h.size(); ++n) {
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
                   const std::vector<std::vector<std::string>>& refs, const ChrfOptions& o) {
  ChrfStats total;
  for (size_t i = 0; i < hyps.size(); ++i) {
    auto s = chrf_stats(hyps[i], segment_refs(refs, i), o);
    total.v.resize(s.v.size(), 0.0);
    for (size_t k = 0; k < s.v.size(); ++k) total.v[k] += s.v[k];
  }
  return chrf_from(total);
}

std::string chrf_name(const ChrfOptions& o) {
  return "chrF2" + std::string(static_cast<size_t>(std::max(0, o.word_order)), '+');
}

std::string chrf_signature(size_t nrefs, const ChrfOptions& o) {
  return "nrefs:" + std::to_string(nrefs) + "|case:" + (o.lowercase ? "lc" : "mixed") +
         "|eff:yes|nc:6|nw:" + std::to_string(o.word_order) + "|space:no|version:2.x";
}

}  // namespace ropelab::scoring
