// Translation Edit Rate (Snover et al. 2006) as sacreBLEU 2.x computes it (its TER metric, a
// re-implementation of Tercom): the fewest edits (insertions, deletions, substitutions of one
// word, and shifts of a contiguous block of words) that turn the hypothesis into the closest
// reference, divided by the average reference length; 100 * sum(edits) / sum(average reference
// lengths) over the corpus.
//
// Tercom's search, with sacreBLEU's limits: shifts are found greedily, each time the one that
// lowers the edit distance most (ties: the longer block, then the earlier block, then the
// earlier target, then the word sequence that sorts first), among blocks of up to 10 words that
// match the reference within 50 positions of their own, that are misaligned and whose target is
// misaligned; at most 1000 candidate shifts per segment. The edit distance is a beam (25 wide
// around the length-ratio diagonal) Levenshtein distance whose trace prefers match or
// substitution, then deletion, then insertion.
//
// Tokenization (sacreBLEU's TercomTokenizer): lowercased unless case-sensitive (Python's
// str.lower()); `normalized` splits punctuation as mteval's tokenizer does, plus possessive 's;
// `no_punct` removes . , ? : ; ! " ( ); `asian_support` adds the CJK splits and punctuation.
// Signature: nrefs:N|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:2.x.
// Torch-free.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace ropelab::scoring {

struct TerOptions {
  bool case_sensitive = false, normalized = false, no_punct = false, asian_support = false;
};

std::string tercom_tokenize(const std::string& sent, const TerOptions& o = {});
// (edits, reference length) of one tokenized hypothesis against one tokenized reference.
std::pair<double, double> translation_edit_rate(const std::vector<std::string>& hyp,
                                                const std::vector<std::string>& ref);
// [fewest edits over the references, average reference length] of one segment.
std::vector<double> ter_stats(const std::string& hyp, const std::vector<std::string>& refs,
                              const TerOptions& o = {});
double ter_from(const std::vector<double>& summed);  // 0..100 (and beyond)
std::string ter_signature(size_t nrefs, const TerOptions& o = {});

}  // namespace ropelab::scoring
