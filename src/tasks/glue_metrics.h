// GLUE's metrics, as the benchmark defines them (Wang et al. 2019; the reference scorer uses
// scikit-learn and SciPy):
//   accuracy           fraction of predictions equal to the label;
//   f1                 F1 of the positive class (label 1): 2TP / (2TP + FP + FN), 0 if no
//                      positives are predicted or present;
//   matthews           Matthews correlation from the confusion matrix (multi-class form,
//                      sklearn's matthews_corrcoef); 0 when a denominator is 0;
//   pearson            Pearson's r; 0 when either side is constant;
//   spearman           Pearson's r of the average ranks (ties share the mean of their ranks).
// Plus which of them each GLUE task reports (CoLA: matthews; MRPC, QQP: f1 and accuracy; STS-B:
// pearson and spearman; the others: accuracy) and the one that picks its best checkpoint.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "corpora/glue.h"

namespace ropelab::tasks {

double accuracy(const std::vector<int64_t>& pred, const std::vector<int64_t>& gold);
double f1_positive(const std::vector<int64_t>& pred, const std::vector<int64_t>& gold);
double matthews(const std::vector<int64_t>& pred, const std::vector<int64_t>& gold);
double pearson(const std::vector<double>& x, const std::vector<double>& y);
double spearman(const std::vector<double>& x, const std::vector<double>& y);
// 1-based ranks, ties averaged (scipy.stats.rankdata's "average").
std::vector<double> average_ranks(const std::vector<double>& x);

// The metrics `task` reports (its GlueMetrics, fixed when the task was looked up), by name:
// "acc", "f1", "mcc", "pearson", "spearman". Classification tasks pass labels as integers in
// `gold`/`pred`; regression tasks (STS-B) pass scores in `gold_score`/`pred_score`.
std::map<std::string, double> glue_metrics(const corpora::GlueTask& task,
                                           const std::vector<int64_t>& pred,
                                           const std::vector<int64_t>& gold,
                                           const std::vector<double>& pred_score,
                                           const std::vector<double>& gold_score);
// The metric that selects checkpoints and learning rates (the one the paper's Table 2 reports):
// f1 for MRPC and QQP, spearman for STS-B (and described regression), mcc for CoLA, acc
// otherwise.
std::string glue_main_metric(const corpora::GlueTask& task);

}  // namespace ropelab::tasks
