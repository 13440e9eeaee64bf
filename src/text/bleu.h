// Corpus BLEU and chrF exactly as sacreBLEU 2.x computes them by default, so users can compare
// with published numbers.
//
// BLEU (Papineni et al. 2002; sacreBLEU, Post 2018): mixed case; the "13a" tokenizer of
// mteval-v13a; n-grams up to 4; counts clipped by the maximum count over the references; the
// closest reference length (the shorter on a tie); statistics summed over the corpus; brevity
// penalty; "exp" smoothing (each order with no match gets 100 / (2^k * total), k counting such
// orders). Signature: nrefs:N|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x.
// chrF (Popović 2015; sacreBLEU's CHRF): character n-grams of orders 1-6 with whitespace
// removed, beta = 2; per sentence the reference with the best score is used; corpus
// statistics summed; precision and recall averaged over the orders that occur, then F-beta.
// Signature: nrefs:N|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.x.
// Options, with sacreBLEU's names and signature fields: BLEU's tokenizer (`--tokenize` 13a, none
// or char; tok:NAME) and lowercasing (`--lowercase`; case:lc), chrF's lowercasing
// (`--chrf-lowercase`; case:lc). Lowercasing follows Python's str.lower(): the C.UTF-8
// locale's simple case mapping, plus the two context rules Python applies (U+0130 becomes
// "i\u0307"; a final capital sigma becomes a final small sigma).
// Torch-free (the sanitizer tier tests it).
#pragma once
#include <array>
#include <string>
#include <vector>

namespace ropelab::text {

// sacreBLEU's tokenizer 13a (the input is one segment).
std::string tokenize_13a(const std::string& line_in);

struct BleuOptions {
  std::string tokenize = "13a";  // 13a, none or char
  bool lowercase = false;
};
// UserError naming the option unless `name` is a tokenizer ropelab has.
void check_tokenizer(const std::string& name);
// Python's str.lower() (see above).
std::string py_lower(const std::string& s);

struct BleuStats {
  std::array<double, 4> correct{}, total{};
  double hyp_len = 0, ref_len = 0;
};
struct Bleu {
  double score = 0;                    // 0..100
  std::array<double, 4> precisions{};  // percent
  double bp = 0, ratio = 0, hyp_len = 0, ref_len = 0;
  std::string line() const;  // "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = ...)"
};

// Sentence statistics, and the corpus score from summed statistics.
BleuStats bleu_stats(const std::string& hyp, const std::vector<std::string>& refs,
                     const BleuOptions& o = {});
Bleu bleu_from(const BleuStats& s);
// refs[r][i] is reference stream r's line i; every stream has hyps.size() lines.
Bleu corpus_bleu(const std::vector<std::string>& hyps,
                 const std::vector<std::vector<std::string>>& refs, const BleuOptions& o = {});
std::string bleu_signature(size_t nrefs, const BleuOptions& o = {});

struct ChrfStats {
  std::array<double, 18> v{};  // per order: hyp n-grams, ref n-grams, matches
};
ChrfStats chrf_stats(const std::string& hyp, const std::vector<std::string>& refs,
                     bool lowercase = false);
double chrf_from(const ChrfStats& s);  // 0..100
double corpus_chrf(const std::vector<std::string>& hyps,
                   const std::vector<std::vector<std::string>>& refs, bool lowercase = false);
std::string chrf_signature(size_t nrefs, bool lowercase = false);

// `ropelab bleu`: scores a hypothesis file against one or more reference files (one segment
// per line, UTF-8, equal line counts: otherwise a UserError naming the files). Returns
// sacreBLEU's text output: "BLEU|<signature> = <score line>" and "chrF2|<signature> = <score>".
std::string score_files(const std::string& hyp_path, const std::vector<std::string>& ref_paths,
                        const BleuOptions& bleu = {}, bool chrf_lowercase = false);

}  // namespace ropelab::text
