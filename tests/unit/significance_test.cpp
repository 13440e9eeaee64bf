// The paired significance tests' generator against NumPy 1.24's own draws (values printed by
// numpy.random.default_rng on Debian 12), and properties of the tests themselves. Their
// agreement with sacreBLEU's p-values on real systems is in sacrebleu_conformance_test.cpp.
// Torch-free: the sanitizer tier runs these too.
#include <gtest/gtest.h>

#include <cmath>

#include "scoring/significance.h"

namespace ropelab::scoring {
namespace {

TEST(NumpyRng, RawDrawsMatchNumpy) {
  // default_rng(12345).bit_generator.random_raw(3)
  NumpyRng rng(12345);
  EXPECT_EQ(rng.next64(), 4193609425186963869ULL);
  EXPECT_EQ(rng.next64(), 5843160025838961886ULL);
  EXPECT_EQ(rng.next64(), 14708796524633321433ULL);
  // A seed wider than 32 bits enters SeedSequence as two words.
  EXPECT_EQ(NumpyRng(1099511627781ULL).next64(), 87427594128977387ULL);  // 2**40 + 5
}

TEST(NumpyRng, BoundedDrawsMatchNumpy) {
  // default_rng(0).choice(1000, size=8): Lemire's method on 32-bit halves.
  NumpyRng a(0);
  for (uint64_t want : {850, 636, 511, 269, 307, 40, 75, 16}) EXPECT_EQ(a.below(1000), want);
  // choice(2**32): a whole 32-bit draw; choice(2**32 + 3): Lemire on 64-bit draws.
  NumpyRng b(7);
  for (uint64_t want : {4058335883ULL, 2684764585ULL, 2938530453ULL, 3853503932ULL})
    EXPECT_EQ(b.below(1ULL << 32), want);
  NumpyRng c(7);
  for (uint64_t want : {2684764587ULL, 3853503935ULL, 3331544673ULL, 967257516ULL})
    EXPECT_EQ(c.below((1ULL << 32) + 3), want);
  // integers(2, size=40, dtype=bool): one bit of a 32-bit draw per coin.
  NumpyRng d(12345);
  const int bits[] = {1, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1,
                      1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 1};
  for (int want : bits) EXPECT_EQ(d.coin() ? 1 : 0, want);
}

// A toy metric: the mean of the first statistic (a per-segment "accuracy").
double mean_score(const std::vector<double>& v) { return v[1] > 0 ? 100.0 * v[0] / v[1] : 0.0; }

SegmentStats accuracy_stats(const std::vector<int>& right) {
  SegmentStats s;
  for (int r : right) s.push_back({static_cast<double>(r), 1.0});
  return s;
}

TEST(PairedTests, IdenticalSystemsGetOneOverNPlusOneAsInSacrebleu) {
  auto base = accuracy_stats({1, 0, 1, 1, 0, 1, 0, 0, 1, 1});
  // Every resampled difference is 0 and none exceeds the observed 0: p = 1 / (n + 1), as
  // sacreBLEU computes it (a strict >, and +1 so that p is never 0). The tables mark such a row
  // "(equal)" rather than significant.
  auto bs = paired_bootstrap(base, base, mean_score, 1000, 12345);
  EXPECT_DOUBLE_EQ(bs.p_value, 1.0 / 1001);
  auto ar = paired_randomization(base, base, mean_score, 500, 12345);
  EXPECT_DOUBLE_EQ(ar.p_value, 1.0 / 501);
  EXPECT_DOUBLE_EQ(ar.score, 60.0);
}

TEST(PairedTests, ALargeDifferenceIsSignificantAndASmallOneIsNot) {
  std::vector<int> a(200, 0), b(200, 0), c(200, 0);
  for (size_t i = 0; i < 200; ++i) {
    a[i] = i % 2 == 0;   // 50%
    b[i] = i % 10 != 0;  // 90%
    c[i] = a[i];
  }
  // c differs from a on 10 segments: 6 right where a is wrong, 4 the other way (51%).
  for (size_t i : {1, 3, 5, 7, 9, 11}) c[i] = 1;
  for (size_t i : {0, 2, 4, 6}) c[i] = 0;
  auto base = accuracy_stats(a);
  for (bool bootstrap : {true, false}) {
    SCOPED_TRACE(bootstrap ? "bootstrap" : "randomization");
    auto run = [&](const std::vector<int>& s) {
      return bootstrap ? paired_bootstrap(base, accuracy_stats(s), mean_score, 1000, 1)
                       : paired_randomization(base, accuracy_stats(s), mean_score, 2000, 1);
    };
    auto big = run(b), small = run(c);
    EXPECT_DOUBLE_EQ(big.score, 90.0);
    EXPECT_LT(big.p_value, 0.01);
    // Under the null, |difference| > 2 segments has probability 0.34 (10 fair signs).
    EXPECT_GT(small.p_value, 0.2);
  }
  // The bootstrap interval of a 90% accuracy on 200 segments: about +-1.96 * sqrt(.09/200).
  auto r = paired_bootstrap(base, accuracy_stats(b), mean_score, 1000, 3);
  EXPECT_NEAR(r.mean, 90.0, 0.5);
  EXPECT_NEAR(r.ci, 196.0 * std::sqrt(0.09 / 200), 1.0);
}

TEST(PairedTests, EstimateCiUsesTheOrderStatistics) {
  std::vector<double> s;
  for (int i = 0; i < 80; ++i) s.push_back(79 - i);  // 0..79, unsorted
  double mean = 0, ci = 0;
  estimate_ci(s, mean, ci);
  EXPECT_DOUBLE_EQ(mean, 39.5);
  EXPECT_DOUBLE_EQ(ci, 0.5 * (77 - 2));  // indices 80 // 40 = 2 and 80 - 2 - 1 = 77
}

}  // namespace
}  // namespace ropelab::scoring
