// `ropelab bleu`: sacreBLEU 2.x's metrics behind one interface (a segment's sufficient
// statistics, and the score of summed statistics), its corpus and sentence scores, and its paired
// significance tests between systems, with sacreBLEU's signatures.
//
//   BLEU  scoring/bleu.h    [correct 1-4, total 1-4, hyp length, ref length]
//   chrF  scoring/bleu.h    [hyp, ref, match] per order: characters 1-6, then words (chrF++)
//   TER   scoring/ter.h     [edits, average reference length]
//
// The statistics of every segment are what the paired tests resample (scoring/significance.h).
// Torch-free.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "scoring/bleu.h"
#include "scoring/significance.h"
#include "scoring/ter.h"

namespace ropelab::scoring {

struct ScoreOptions {
  std::vector<std::string> metrics = {"bleu", "chrf"};  // bleu, chrf, ter (in this order)
  BleuOptions bleu;
  bool force = false;  // no warning for hypotheses that look tokenized
  ChrfOptions chrf;
  TerOptions ter;
  bool sentence_level = false;
  std::string paired = "both";  // with several systems: bs, ar or both
  int paired_bs_n = 1000, paired_ar_n = 10000;
  uint64_t seed = 12345;  // sacreBLEU's default (its $SACREBLEU_SEED)
};

class Metric {
 public:
  virtual ~Metric() = default;
  virtual std::string name() const = 0;  // BLEU, chrF2, chrF2++, TER
  virtual std::string signature(size_t nrefs) const = 0;
  virtual std::vector<double> stats(const std::string& hyp,
                                    const std::vector<std::string>& refs) const = 0;
  virtual double score(const std::vector<double>& summed) const = 0;
  // What sacreBLEU prints after "NAME|signature = ": the score with 2 decimals, and for BLEU
  // its precisions, brevity penalty and lengths.
  virtual std::string describe(const std::vector<double>& summed) const;
};

// bleu, chrf or ter, with the options; UserError for another name. With `sentence_level`,
// BLEU uses effective order (as sacreBLEU's sentence scores).
std::unique_ptr<Metric> make_metric(const std::string& name, const ScoreOptions& o);
// Checks the options (metric names, tokenizer, chrF word order, paired test, sample counts).
void check_score_options(const ScoreOptions& o);

// The statistics of every segment; refs[r][i] is reference stream r's line i.
SegmentStats corpus_stats(const Metric& m, const std::vector<std::string>& hyps,
                          const std::vector<std::vector<std::string>>& refs);

struct Scored {
  std::string text;                   // what to print on stdout
  std::vector<std::string> warnings;  // sacreBLEU's warnings (e.g. tokenized hypotheses)
};
// `ropelab bleu`: scores one hypothesis file (corpus scores, or with sentence_level one line per
// segment and metric), or several (the first is the baseline; each other system is compared
// with it by the paired tests). Files have one segment per line, UTF-8, equal line counts:
// otherwise a UserError naming the files.
Scored score_files(const std::vector<std::string>& hyp_paths,
                   const std::vector<std::string>& ref_paths, const ScoreOptions& o = {});

// "NAME|nrefs:N|bs:1000|seed:12345|...": a metric's signature with a paired test's fields
// (test "bs" or "ar", n resamples or trials), where sacreBLEU puts them.
std::string paired_signature(const Metric& m, size_t nrefs, const std::string& test, int n,
                             uint64_t seed);

// The paired test table of already loaded systems (names[0] is the baseline); used by
// score_files and by `compare`/`ablate` for translation runs. Markdown when `md`.
std::string paired_table(const std::vector<std::string>& names,
                         const std::vector<std::vector<std::string>>& systems,
                         const std::vector<std::vector<std::string>>& refs, const ScoreOptions& o,
                         bool md);

}  // namespace ropelab::scoring
