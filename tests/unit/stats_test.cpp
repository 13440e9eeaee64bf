// Multi-seed statistics against reference values (scipy.stats 1.10, Debian bookworm's
// python3-scipy: t.sf, t.ppf, beta.cdf, ttest_rel).
#include <gtest/gtest.h>

#include "lab/stats.h"

namespace ropelab::lab::stats {
namespace {

TEST(Stats, IncompleteBetaAndStudentT) {
  EXPECT_NEAR(incomplete_beta(2.5, 0.5, 0.3), 0.018927124071945658, 1e-12);
  EXPECT_NEAR(t_two_sided_p(2.0, 4), 0.1161165235168155, 1e-12);
  EXPECT_NEAR(t_two_sided_p(-2.0, 4), 0.1161165235168155, 1e-12);
  EXPECT_DOUBLE_EQ(t_two_sided_p(0.0, 7), 1.0);
  EXPECT_NEAR(t_quantile(0.975, 1), 12.706204736432095, 1e-9);
  EXPECT_NEAR(t_quantile(0.975, 2), 4.302652729911275, 1e-9);
  EXPECT_NEAR(t_quantile(0.975, 4), 2.7764451051977987, 1e-9);
  EXPECT_NEAR(t_quantile(0.975, 29), 2.045229642132703, 1e-9);
  EXPECT_NEAR(t_quantile(0.025, 4), -2.7764451051977987, 1e-9);
}

TEST(Stats, MeanStdAndInterval) {
  auto s = summarize({5.0, 5.2, 4.9, 5.1});
  EXPECT_EQ(s.n, 4u);
  EXPECT_NEAR(s.mean, 5.05, 1e-12);
  EXPECT_NEAR(s.sd, 0.12909944487358047, 1e-12);
  EXPECT_NEAR(s.ci_low, 4.844573974323912, 1e-9);
  EXPECT_NEAR(s.ci_high, 5.255426025676088, 1e-9);
  auto one = summarize({3.0});  // one seed: no interval
  EXPECT_EQ(one.sd, 0.0);
  EXPECT_EQ(one.ci_low, 3.0);
  EXPECT_EQ(one.ci_high, 3.0);
}

TEST(Stats, PairedTTestOverSeeds) {
  auto p = paired_t({4.10, 4.05, 4.20}, {4.30, 4.12, 4.25});
  EXPECT_EQ(p.n, 3u);
  EXPECT_NEAR(p.mean_diff, -0.10666666666666676, 1e-12);
  EXPECT_NEAR(p.t, -2.268419856026674, 1e-9);
  EXPECT_NEAR(p.p, 0.15140556354588797, 1e-9);
  EXPECT_NEAR(p.ci_low, -0.30898795357682374, 1e-9);
  EXPECT_NEAR(p.ci_high, 0.09565462024349024, 1e-9);
  // The same difference on every seed: certain; no difference: nothing.
  EXPECT_EQ(paired_t({1, 2, 3}, {0.5, 1.5, 2.5}).p, 0.0);
  EXPECT_EQ(paired_t({1, 2, 3}, {1, 2, 3}).p, 1.0);
  EXPECT_EQ(paired_t({1}, {2}).p, 1.0);  // one pair: no test
  EXPECT_THROW(paired_t({1, 2}, {1}), std::invalid_argument);
}

}  // namespace
}  // namespace ropelab::lab::stats
