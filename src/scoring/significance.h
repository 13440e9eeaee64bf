// Paired significance tests between translation systems, as sacreBLEU 2.x runs them
// (sacrebleu --paired-bs / --paired-ar), so that the p-values and intervals are the same ones a
// sacreBLEU user gets for the same seed:
//
// - paired bootstrap resampling (Koehn 2004): n resamples of the segment indices, drawn with
//   replacement; each system's corpus score on each resample; p = (c + 1) / (n + 1), where c
//   counts the resamples whose |score_sys - score_base|, centred on its mean over the
//   resamples, exceeds the observed difference. The bootstrap estimate of the mean and the 95%
//   interval's half-width (the 2.5% and 97.5% order statistics) come with each score.
// - approximate randomization (Riezler & Maxwell 2005): n trials, each swapping every segment's
//   statistics between the two systems with probability 1/2; c counts the trials whose
//   |score_a - score_b| exceeds the observed difference.
//
// The draws are NumPy's: `numpy.random.default_rng(seed)` (SeedSequence -> PCG64) and the
// bounded integers of its Generator (Lemire's method on 32-bit draws for choice(n), one bit per
// draw from a 32-bit buffer for integers(2, dtype=bool)). sacreBLEU seeds it with 12345, or
// $SACREBLEU_SEED. The segment statistics are summed in float32, as sacreBLEU's numpy arrays.
// Torch-free.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ropelab::scoring {

// numpy.random.default_rng(seed) for a non-negative integer seed.
class NumpyRng {
 public:
  explicit NumpyRng(uint64_t seed);
  uint64_t next64();  // bit_generator.random_raw()
  uint32_t next32();  // PCG64's 32-bit draw (half of a 64-bit one, the high half kept)
  // Generator.integers(0, n) / Generator.choice(n): uniform in [0, n), n >= 1.
  uint64_t below(uint64_t n);
  // Generator.integers(2, dtype=bool), element by element (a 32-bit buffer, one bit per draw).
  bool coin();

 private:
  __extension__ using u128 = unsigned __int128;
  u128 state_ = 0, inc_ = 0;
  bool has32_ = false;
  uint32_t buf32_ = 0;
  int coin_left_ = 0;
  uint32_t coin_buf_ = 0;
  void step();
};

// One system's segment statistics (rows) and the metric that turns summed statistics into a
// score.
using SegmentStats = std::vector<std::vector<double>>;
using ScoreFn = std::function<double(const std::vector<double>&)>;

// The corpus statistics: the column sums.
std::vector<double> sum_stats(const SegmentStats& s);

struct PairedResult {
  double score = 0;
  double p_value = -1;      // < 0 for the baseline
  double mean = 0, ci = 0;  // bootstrap mean and 95% half-width (has_ci)
  bool has_ci = false;
};

// sacreBLEU's estimate_ci: the mean of the scores and half the distance between the n/40-th
// smallest and largest.
void estimate_ci(std::vector<double> scores, double& mean, double& ci);

// The baseline's own bootstrap interval (n resamples, a fresh generator from `seed`).
PairedResult bootstrap_baseline(const SegmentStats& base, const ScoreFn& score, int n,
                                uint64_t seed);
// Paired bootstrap resampling of `sys` against `base` (n resamples).
PairedResult paired_bootstrap(const SegmentStats& base, const SegmentStats& sys,
                              const ScoreFn& score, int n, uint64_t seed);
// Paired approximate randomization (n trials; no interval, as sacreBLEU's command line).
PairedResult paired_randomization(const SegmentStats& base, const SegmentStats& sys,
                                  const ScoreFn& score, int n, uint64_t seed);

}  // namespace ropelab::scoring
