#include "lab/stats.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace ropelab::lab::stats {

namespace {
// Continued fraction of the incomplete beta (modified Lentz's method).
double beta_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300, kEps = 1e-15;
  double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
  if (std::abs(d) < kTiny) d = kTiny;
  d = 1.0 / d;
  double h = d;
  for (int m = 1; m <= 500; ++m) {
    double m2 = 2.0 * m;
    double num = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
    d = 1.0 + num * d;
    c = 1.0 + num / c;
    if (std::abs(d) < kTiny) d = kTiny;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    h *= d * c;
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
    d = 1.0 + num * d;
    c = 1.0 + num / c;
    if (std::abs(d) < kTiny) d = kTiny;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    double step = d * c;
    h *= step;
    if (std::abs(step - 1.0) < kEps) break;
  }
  return h;
}
}  // namespace

double incomplete_beta(double a, double b, double x) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) +
                          b * std::log1p(-x));
  // The fraction converges fast for x < (a + 1) / (a + b + 2); use the symmetry otherwise.
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_fraction(a, b, x) / a;
  return 1.0 - front * beta_fraction(b, a, 1.0 - x) / b;
}

double t_two_sided_p(double t, double df) {
  if (!std::isfinite(t)) return 0.0;
  return incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
}

double t_quantile(double q, double df) {
  if (!(q > 0.0 && q < 1.0)) throw std::invalid_argument("t_quantile: q must be in (0, 1)");
  if (q == 0.5) return 0.0;
  // CDF(t) = 1 - p/2 for t > 0; bisection on the monotone two-sided p.
  double target = 2.0 * std::min(q, 1.0 - q);  // two-sided tail mass
  double lo = 0.0, hi = 1.0;
  while (t_two_sided_p(hi, df) > target) hi *= 2.0;
  for (int i = 0; i < 200; ++i) {
    double mid = 0.5 * (lo + hi);
    (t_two_sided_p(mid, df) > target ? lo : hi) = mid;
  }
  double t = 0.5 * (lo + hi);
  return q > 0.5 ? t : -t;
}

Summary summarize(const std::vector<double>& x) {
  Summary s;
  s.n = x.size();
  if (s.n == 0) return s;
  for (double v : x) s.mean += v;
  s.mean /= static_cast<double>(s.n);
  double ss = 0;
  for (double v : x) ss += (v - s.mean) * (v - s.mean);
  s.sd = s.n > 1 ? std::sqrt(ss / static_cast<double>(s.n - 1)) : 0.0;
  s.ci_low = s.ci_high = s.mean;
  if (s.n > 1) {
    double half = t_quantile(0.975, static_cast<double>(s.n - 1)) * s.sd /
                  std::sqrt(static_cast<double>(s.n));
    s.ci_low = s.mean - half;
    s.ci_high = s.mean + half;
  }
  return s;
}

Paired paired_t(const std::vector<double>& x, const std::vector<double>& baseline) {
  if (x.size() != baseline.size())
    throw std::invalid_argument("paired_t: the two samples differ in length");
  std::vector<double> d(x.size());
  for (size_t i = 0; i < x.size(); ++i) d[i] = x[i] - baseline[i];
  Summary s = summarize(d);
  Paired p;
  p.n = s.n;
  p.mean_diff = s.mean;
  p.ci_low = s.ci_low;
  p.ci_high = s.ci_high;
  if (s.n < 2) return p;
  if (s.sd == 0.0) {
    p.t = s.mean == 0.0 ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), s.mean);
    p.p = s.mean == 0.0 ? 1.0 : 0.0;
    return p;
  }
  p.t = s.mean / (s.sd / std::sqrt(static_cast<double>(s.n)));
  p.p = t_two_sided_p(p.t, static_cast<double>(s.n - 1));
  return p;
}

}  // namespace ropelab::lab::stats
