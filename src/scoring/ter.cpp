#include "scoring/ter.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

#include "scoring/bleu.h"
#include "text/pystr.h"

namespace ropelab::scoring {

namespace {

constexpr int kMaxShiftSize = 10, kMaxShiftDist = 50, kBeamWidth = 25, kMaxCandidates = 1000;
constexpr int64_t kInf = 10000000000000000;  // sacreBLEU's int(1e16)

enum Op : char { kNop = ' ', kSub = 's', kIns = 'i', kDel = 'd', kUndef = 'x' };

bool in(uint32_t c, uint32_t lo, uint32_t hi) { return c >= lo && c <= hi; }

// Pads every character for which `pick` holds with a space on each side.
template <typename Pred>
std::string pad_chars(const std::string& s, Pred pick) {
  std::string out;
  for (uint32_t c : text::code_points(s)) {
    if (pick(c)) {
      out += ' ';
      text::append_utf8(out, c);
      out += ' ';
    } else {
      text::append_utf8(out, c);
    }
  }
  return out;
}

template <typename Pred>
std::string drop_chars(const std::string& s, Pred pick) {
  std::string out;
  for (uint32_t c : text::code_points(s))
    if (!pick(c)) text::append_utf8(out, c);
  return out;
}

bool asian_punct(uint32_t c) {
  return c == 0x3001 || c == 0x3002 || in(c, 0x3008, 0x3011) || in(c, 0x3014, 0x301F) ||
         in(c, 0xFF61, 0xFF65) || c == 0x30FB;
}
bool full_width_punct(uint32_t c) {
  return c == 0xFF0E || c == 0xFF0C || c == 0xFF1F || c == 0xFF1A || c == 0xFF1B || c == 0xFF01 ||
         c == 0xFF02 || c == 0xFF08 || c == 0xFF09;
}

// Tercom's normalisation of Western text (the mteval rules plus possessives).
std::string normalize_western(std::string s) {
  text::replace_all(s, "\n-", "");
  text::replace_all(s, "\n", " ");
  text::replace_all(s, "&quot;", "\"");
  text::replace_all(s, "&amp;", "&");
  text::replace_all(s, "&lt;", "<");
  text::replace_all(s, "&gt;", ">");
  std::string padded = mteval_pad_punct(" " + s + " ");
  text::replace_all(padded, "'s ", " 's ");
  if (padded.size() >= 2 && padded.compare(padded.size() - 2, 2, "'s") == 0)
    padded.insert(padded.size() - 2, " ");
  padded = mteval_split_numbers(padded);
  return padded;
}

// The CJK splits of Tercom's Asian support. (Its three kana rules only ever match a segment that
// is all kana, and then only add spaces at its ends, so they change nothing.)
std::string normalize_asian(const std::string& s) {
  return pad_chars(s, [](uint32_t c) {
    return in(c, 0x4E00, 0x9FFF) || in(c, 0x3400, 0x4DBF) || in(c, 0x31C0, 0x31EF) ||
           in(c, 0x2E80, 0x2EFF) || in(c, 0x3300, 0x33FF) || in(c, 0xF900, 0xFAFF) ||
           in(c, 0xFE30, 0xFE4F) || in(c, 0x3200, 0x3F22) || asian_punct(c) || full_width_punct(c);
  });
}

// The beam edit distance of one hypothesis against the reference, with its trace.
struct EditDistance {
  const std::vector<std::string>& ref;
  std::pair<int64_t, std::string> operator()(const std::vector<std::string>& hyp) const {
    const size_t nh = hyp.size(), nr = ref.size();
    std::vector<std::vector<std::pair<int64_t, char>>> dist(
        nh + 1, std::vector<std::pair<int64_t, char>>(nr + 1, {kInf, kUndef}));
    for (size_t j = 0; j <= nr; ++j) dist[0][j] = {static_cast<int64_t>(j), kIns};
    double ratio = nh ? static_cast<double>(nr) / static_cast<double>(nh) : 1.0;
    int64_t beam = kBeamWidth < ratio / 2 ? static_cast<int64_t>(std::ceil(ratio / 2 + kBeamWidth))
                                          : kBeamWidth;
    for (size_t i = 1; i <= nh; ++i) {
      auto diag = static_cast<int64_t>(std::floor(static_cast<double>(i) * ratio));
      int64_t lo = std::max<int64_t>(0, diag - beam);
      int64_t hi = std::min<int64_t>(static_cast<int64_t>(nr) + 1, diag + beam);
      if (i == nh) hi = static_cast<int64_t>(nr) + 1;
      for (int64_t jj = lo; jj < hi; ++jj) {
        auto j = static_cast<size_t>(jj);
        if (j == 0) {
          dist[i][0] = {dist[i - 1][0].first + 1, kDel};
          continue;
        }
        bool same = hyp[i - 1] == ref[j - 1];
        const std::pair<int64_t, char> ops[3] = {
            {dist[i - 1][j - 1].first + (same ? 0 : 1), same ? kNop : kSub},
            {dist[i - 1][j].first + 1, kDel},
            {dist[i][j - 1].first + 1, kIns}};
        for (const auto& op : ops)
          if (dist[i][j].first > op.first) dist[i][j] = op;
      }
    }
    std::string trace;
    for (size_t i = nh, j = nr; i > 0 || j > 0;) {
      char op = dist[i][j].second;
      trace += op;
      if (op == kSub || op == kNop)
        --i, --j;
      else if (op == kIns)
        --j;
      else
        --i;  // kDel (the beam always leaves a path to the corner)
    }
    std::reverse(trace.begin(), trace.end());
    return {dist[nh][nr].first, trace};
  }
};

std::vector<std::string> perform_shift(const std::vector<std::string>& w, size_t start, size_t len,
                                       size_t target) {
  std::vector<std::string> out;
  out.reserve(w.size());
  auto put = [&](size_t a, size_t b) {  // w[a:b], clamped as Python's slices are
    a = std::min(a, w.size()), b = std::min(b, w.size());
    if (a < b)
      out.insert(out.end(), w.begin() + static_cast<std::ptrdiff_t>(a),
                 w.begin() + static_cast<std::ptrdiff_t>(b));
  };
  if (target < start) {
    put(0, target), put(start, start + len), put(target, start), put(start + len, w.size());
  } else if (target > start + len) {
    put(0, start), put(start + len, target), put(start, start + len), put(target, w.size());
  } else {
    put(0, start), put(start + len, len + target), put(start, start + len),
        put(len + target, w.size());
  }
  return out;
}

// The best shift of `h` (Tercom's ranking), or a zero gain.
std::pair<int64_t, std::vector<std::string>> best_shift(const std::vector<std::string>& h,
                                                        const std::vector<std::string>& r,
                                                        const EditDistance& ed, int& checked) {
  auto [pre_score, inv_trace] = ed(h);
  // The alignment of reference positions to hypothesis positions, rewriting the reference into
  // the hypothesis (the trace with insertions and deletions swapped).
  std::vector<int64_t> align(r.size(), -1);
  std::vector<int> ref_err, hyp_err;
  int64_t ph = -1, pr = -1;
  for (char op : inv_trace) {
    char flipped = op == kIns ? static_cast<char>(kDel) : op == kDel ? static_cast<char>(kIns) : op;
    if (flipped == kNop || flipped == kSub) {
      ++ph, ++pr;
      align[static_cast<size_t>(pr)] = ph;
      hyp_err.push_back(flipped == kSub), ref_err.push_back(flipped == kSub);
    } else if (flipped == kIns) {
      ++ph;
      hyp_err.push_back(1);
    } else {
      ++pr;
      align[static_cast<size_t>(pr)] = ph;
      ref_err.push_back(1);
    }
  }
  bool have = false;
  std::tuple<int64_t, size_t, int64_t, int64_t> best_key{};
  std::vector<std::string> best_words;
  auto errors = [](const std::vector<int>& e, size_t a, size_t n) {
    int s = 0;
    for (size_t k = a; k < a + n && k < e.size(); ++k) s += e[k];
    return s;
  };
  const size_t nh = h.size(), nr = r.size();
  for (size_t sh = 0; sh < nh; ++sh) {
    for (size_t sr = 0; sr < nr; ++sr) {
      if (std::abs(static_cast<int64_t>(sr) - static_cast<int64_t>(sh)) > kMaxShiftDist) continue;
      for (size_t len = 1; len <= static_cast<size_t>(kMaxShiftSize) && sh + len <= nh &&
                           sr + len <= nr && h[sh + len - 1] == r[sr + len - 1];
           ++len) {
        // A candidate block h[sh, sh+len) == r[sr, sr+len).
        if (errors(hyp_err, sh, len) == 0 || errors(ref_err, sr, len) == 0) continue;
        auto a = align[sr];
        if (static_cast<int64_t>(sh) <= a && a < static_cast<int64_t>(sh + len)) continue;
        int64_t prev = -1;
        for (int64_t off = -1; off < static_cast<int64_t>(len); ++off) {
          int64_t idx = static_cast<int64_t>(sr) + off == -1
                            ? 0
                            : align[static_cast<size_t>(static_cast<int64_t>(sr) + off)] + 1;
          if (idx == prev) continue;
          prev = idx;
          auto shifted = perform_shift(h, sh, len, static_cast<size_t>(idx));
          std::tuple<int64_t, size_t, int64_t, int64_t> key{pre_score - ed(shifted).first, len,
                                                            -static_cast<int64_t>(sh), -idx};
          ++checked;
          if (!have || key > best_key || (key == best_key && shifted > best_words)) {
            have = true;
            best_key = key;
            best_words = std::move(shifted);
          }
        }
        if (checked >= kMaxCandidates) break;
      }
      if (checked >= kMaxCandidates) break;
    }
    if (checked >= kMaxCandidates) break;
  }
  if (!have) return {0, h};
  return {std::get<0>(best_key), best_words};
}

}  // namespace

std::string tercom_tokenize(const std::string& sent_in, const TerOptions& o) {
  if (sent_in.empty()) return "";
  std::string s = o.case_sensitive ? sent_in : text::py_lower(sent_in);
  if (o.normalized) {
    s = normalize_western(s);
    if (o.asian_support) s = normalize_asian(s);
  }
  if (o.no_punct) {
    s = drop_chars(s, [](uint32_t c) {
      return c == '.' || c == ',' || c == '?' || c == ':' || c == ';' || c == '!' || c == '"' ||
             c == '(' || c == ')';
    });
    if (o.asian_support)
      s = drop_chars(s, [](uint32_t c) { return asian_punct(c) || full_width_punct(c); });
  }
  return text::py_squeeze(s);
}

std::pair<double, double> translation_edit_rate(const std::vector<std::string>& hyp,
                                                const std::vector<std::string>& ref) {
  if (ref.empty()) return {static_cast<double>(hyp.size()), 0.0};
  EditDistance ed{ref};
  int64_t shifts = 0;
  int checked = 0;
  std::vector<std::string> words = hyp;
  while (true) {
    auto [gain, shifted] = best_shift(words, ref, ed, checked);
    if (checked >= kMaxCandidates || gain <= 0) break;
    ++shifts;
    words = std::move(shifted);
  }
  return {static_cast<double>(shifts + ed(words).first), static_cast<double>(ref.size())};
}

std::vector<double> ter_stats(const std::string& hyp, const std::vector<std::string>& refs,
                              const TerOptions& o) {
  auto h = text::py_split(tercom_tokenize(text::py_rstrip(hyp), o));
  double best = std::numeric_limits<double>::infinity(), ref_lengths = 0;
  for (const auto& r : refs) {
    // sacreBLEU tokenizes each reference twice (when it caches the references, and again when
    // it splits them into words); only the normalisation's possessive rule sees a difference.
    auto twice = tercom_tokenize(text::py_rstrip(tercom_tokenize(text::py_rstrip(r), o)), o);
    auto [edits, len] = translation_edit_rate(h, text::py_split(twice));
    ref_lengths += len;
    best = std::min(best, edits);
  }
  return {refs.empty() ? 0.0 : best,
          refs.empty() ? 0.0 : ref_lengths / static_cast<double>(refs.size())};
}

double ter_from(const std::vector<double>& s) {
  if (s[1] > 0) return 100.0 * s[0] / s[1];
  return s[0] > 0 ? 100.0 : 0.0;
}

std::string ter_signature(size_t nrefs, const TerOptions& o) {
  auto yn = [](bool b) { return b ? "yes" : "no"; };
  return "nrefs:" + std::to_string(nrefs) + "|case:" + (o.case_sensitive ? "mixed" : "lc") +
         "|tok:tercom|norm:" + yn(o.normalized) + "|punct:" + yn(!o.no_punct) +
         "|asian:" + yn(o.asian_support) + "|version:2.x";
}

}  // namespace ropelab::scoring
