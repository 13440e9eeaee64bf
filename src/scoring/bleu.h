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
// Options, with sacreBLEU's names and signature fields: BLEU's tokenizer (`--tokenize` 13a,
// intl, zh, char or none; tok:NAME), lowercasing (`--lowercase`; case:lc) and, for sentence
// scores, effective order (eff:yes: the mean runs over the orders the hypothesis has n-grams of);
// chrF's lowercasing (`--chrf-lowercase`; case:lc) and word n-grams (`--chrf-word-order`, chrF++;
// nw:N). Lowercasing is Python's str.lower() (text/pystr.h). The zh tokenizer pads sacreBLEU's
// "Chinese" characters with spaces, then applies 13a's rules; intl splits Unicode punctuation
// (category P) next to a non-number and every symbol (category S), as mteval-v14's
// international tokenizer (the category tables: text/unicode_classes.inc, from the Python
// `regex` module sacreBLEU uses).
// Torch-free (the sanitizer tier tests it).
#pragma once
#include <array>
#include <string>
#include <vector>

#include "text/pystr.h"

namespace ropelab::scoring {

// sacreBLEU's tokenizers 13a, zh and intl (the input is one segment).
std::string tokenize_13a(const std::string& line_in);
std::string tokenize_zh(const std::string& line);
std::string tokenize_intl(const std::string& line);

// The two halves of mteval's Western tokenization (13a's rules; Tercom's normalisation runs
// its possessive rule between them), each one left-to-right pass per rule as Python's re.sub:
// ASCII punctuation but . , - padded with spaces; then a period or comma split off unless a
// digit precedes it, or follows it, and a dash after a digit split off. Byte-wise (every pattern
// is ASCII, and "any character but a digit" only decides where a space goes).
std::string mteval_pad_punct(const std::string& s);
std::string mteval_split_numbers(const std::string& s);

struct BleuOptions {
  std::string tokenize = "13a";  // 13a, intl, zh, char or none
  bool lowercase = false;
  bool effective_order = false;  // sentence-level BLEU
};
// UserError naming the option unless `name` is a tokenizer ropelab has.
void check_tokenizer(const std::string& name);

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
Bleu bleu_from(const BleuStats& s, bool effective_order = false);
// The references of segment i, one from each stream (refs[r][i] is stream r's line i).
std::vector<std::string> segment_refs(const std::vector<std::vector<std::string>>& refs, size_t i);
// refs[r][i] is reference stream r's line i; every stream has hyps.size() lines.
Bleu corpus_bleu(const std::vector<std::string>& hyps,
                 const std::vector<std::vector<std::string>>& refs, const BleuOptions& o = {});
std::string bleu_signature(size_t nrefs, const BleuOptions& o = {});

struct ChrfOptions {
  bool lowercase = false;
  int word_order = 0;  // 2: chrF++
};
struct ChrfStats {
  std::vector<double> v;  // per order (characters 1-6, then words): hyp n-grams, ref, matches
};
ChrfStats chrf_stats(const std::string& hyp, const std::vector<std::string>& refs,
                     const ChrfOptions& o = {});
double chrf_from(const ChrfStats& s);  // 0..100
double corpus_chrf(const std::vector<std::string>& hyps,
                   const std::vector<std::vector<std::string>>& refs, const ChrfOptions& o = {});
std::string chrf_name(const ChrfOptions& o = {});  // chrF2, chrF2++ for word order 2
std::string chrf_signature(size_t nrefs, const ChrfOptions& o = {});

}  // namespace ropelab::scoring
