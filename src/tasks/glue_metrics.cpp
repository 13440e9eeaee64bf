#include "tasks/glue_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace ropelab::tasks {

namespace {
void check_sizes(size_t a, size_t b) {
  if (a != b) throw std::invalid_argument("metric inputs differ in length");
}
}  // namespace

double accuracy(const std::vector<int64_t>& pred, const std::vector<int64_t>& gold) {
  check_sizes(pred.size(), gold.size());
  if (gold.empty()) return 0.0;
  size_t hit = 0;
  for (size_t i = 0; i < gold.size(); ++i) hit += pred[i] == gold[i];
  return static_cast<double>(hit) / static_cast<double>(gold.size());
}

double f1_positive(const std::vector<int64_t>& pred, const std::vector<int64_t>& gold) {
  check_sizes(pred.size(), gold.size());
  double tp = 0, fp = 0, fn = 0;
  for (size_t i = 0; i < gold.size(); ++i) {
    tp += pred[i] == 1 && gold[i] == 1;
    fp += pred[i] == 1 && gold[i] != 1;
    fn += pred[i] != 1 && gold[i] == 1;
  }
  double den = 2 * tp + fp + fn;
  return den > 0 ? 2 * tp / den : 0.0;
}

double matthews(const std::vector<int64_t>& pred, const std::vector<int64_t>& gold) {
  check_sizes(pred.size(), gold.size());
  // Multi-class MCC: (c*s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2) (s^2 - sum_k t_k^2)),
  // with t_k / p_k the true / predicted counts of class k, c the correct ones, s all.
  std::map<int64_t, double> t, p;
  double c = 0, s = static_cast<double>(gold.size());
  for (size_t i = 0; i < gold.size(); ++i) {
    t[gold[i]] += 1;
    p[pred[i]] += 1;
    c += pred[i] == gold[i];
  }
  double pt = 0, pp = 0, tt = 0;
  for (const auto& [k, n] : p) {
    pp += n * n;
    auto it = t.find(k);
    if (it != t.end()) pt += n * it->second;
  }
  for (const auto& [k, n] : t) tt += n * n;
  double den = (s * s - pp) * (s * s - tt);
  return den > 0 ? (c * s - pt) / std::sqrt(den) : 0.0;
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  check_sizes(x.size(), y.size());
  if (x.empty()) return 0.0;
  double n = static_cast<double>(x.size());
  double mx = std::accumulate(x.begin(), x.end(), 0.0) / n;
  double my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0.0;
}

std::vector<double> average_ranks(const std::vector<double>& x) {
  std::vector<size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> rank(x.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
    double r = (static_cast<double>(i) + static_cast<double>(j)) / 2.0 + 1.0;  // mean of i+1..j+1
    for (size_t k = i; k <= j; ++k) rank[order[k]] = r;
    i = j + 1;
  }
  return rank;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  return pearson(average_ranks(x), average_ranks(y));
}

std::map<std::string, double> glue_metrics(const corpora::GlueTask& task,
                                           const std::vector<int64_t>& pred,
                                           const std::vector<int64_t>& gold,
                                           const std::vector<double>& pred_score,
                                           const std::vector<double>& gold_score) {
  using M = corpora::GlueMetrics;
  switch (task.metrics) {
    case M::kCorrelation:
      return {{"pearson", pearson(pred_score, gold_score)},
              {"spearman", spearman(pred_score, gold_score)}};
    case M::kMccAccuracy:
      return {{"mcc", matthews(pred, gold)}, {"acc", accuracy(pred, gold)}};
    case M::kF1Accuracy:
      return {{"f1", f1_positive(pred, gold)}, {"acc", accuracy(pred, gold)}};
    case M::kBinary:
      return {{"acc", accuracy(pred, gold)},
              {"f1", f1_positive(pred, gold)},
              {"mcc", matthews(pred, gold)}};
    case M::kAccuracy:
      break;
  }
  return {{"acc", accuracy(pred, gold)}};
}

std::string glue_main_metric(const corpora::GlueTask& task) {
  using M = corpora::GlueMetrics;
  switch (task.metrics) {
    case M::kCorrelation:
      return "spearman";
    case M::kMccAccuracy:
      return "mcc";
    case M::kF1Accuracy:
      return "f1";
    case M::kBinary:
    case M::kAccuracy:
      break;
  }
  return "acc";
}

}  // namespace ropelab::tasks
