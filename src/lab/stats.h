// Statistics for multi-seed comparisons: Student-t confidence intervals and the paired t-test
// over seeds (the same seeds give the same data order and initialisation to both variants, so
// per-seed differences are paired). Torch-free, checked against hand-computed values.
#pragma once
#include <cstddef>
#include <vector>

namespace ropelab::lab::stats {

struct Summary {
  size_t n = 0;
  double mean = 0, sd = 0;         // sample standard deviation (n - 1)
  double ci_low = 0, ci_high = 0;  // 95% interval of the mean (Student t); = mean when n < 2
};
Summary summarize(const std::vector<double>& x);

// Regularised incomplete beta function I_x(a, b).
double incomplete_beta(double a, double b, double x);
// P(|T| >= |t|) for Student's t with `df` degrees of freedom.
double t_two_sided_p(double t, double df);
// The q-quantile of Student's t (0 < q < 1).
double t_quantile(double q, double df);

struct Paired {
  size_t n = 0;          // pairs
  double mean_diff = 0;  // mean of (x - baseline)
  double ci_low = 0, ci_high = 0;
  double t = 0, p = 1;  // two-sided; p = 1 when n < 2
};
// Paired t-test of x against baseline (equal lengths, element i of each from the same seed).
Paired paired_t(const std::vector<double>& x, const std::vector<double>& baseline);

}  // namespace ropelab::lab::stats
