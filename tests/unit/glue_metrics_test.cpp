// GLUE metrics against hand-computed values (the Spearman and Pearson values also agree with
// SciPy 1.10's spearmanr / pearsonr to 1e-12).
#include <gtest/gtest.h>

#include <cmath>

#include "tasks/glue_metrics.h"

namespace ropelab::tasks {
namespace {

TEST(GlueMetrics, BinaryAccuracyF1AndMatthews) {
  // TP 2, FP 1, FN 1, TN 1.
  std::vector<int64_t> pred = {1, 1, 0, 0, 1}, gold = {1, 0, 0, 1, 1};
  EXPECT_DOUBLE_EQ(accuracy(pred, gold), 0.6);
  EXPECT_DOUBLE_EQ(f1_positive(pred, gold), 4.0 / 6.0);  // 2TP / (2TP + FP + FN)
  // (TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = 1 / sqrt(3 * 3 * 2 * 2)
  EXPECT_NEAR(matthews(pred, gold), 1.0 / 6.0, 1e-12);
  EXPECT_NEAR(matthews(gold, gold), 1.0, 1e-12);
  std::vector<int64_t> flipped = {0, 1, 1, 0, 0};
  EXPECT_NEAR(matthews(flipped, gold), -1.0, 1e-12);
}

TEST(GlueMetrics, ZeroDenominatorsGiveZero) {
  // One predicted class: (s^2 - sum p_k^2) = 0.
  EXPECT_EQ(matthews({1, 1, 1}, {0, 1, 1}), 0.0);
  // One true class.
  EXPECT_EQ(matthews({0, 1, 1}, {1, 1, 1}), 0.0);
  // No positives predicted or present.
  EXPECT_EQ(f1_positive({0, 0}, {0, 0}), 0.0);
  EXPECT_EQ(pearson({1, 1, 1}, {1, 2, 3}), 0.0);
}

TEST(GlueMetrics, MulticlassMatthewsIsSklearnsForm) {
  // c = 3, s = 4, t = {1, 2, 1}, p = {1, 1, 2}: (12 - 5) / sqrt((16 - 6) (16 - 6)) = 0.7
  EXPECT_NEAR(matthews({0, 1, 2, 2}, {0, 1, 1, 2}), 0.7, 1e-12);
}

TEST(GlueMetrics, PearsonAndSpearmanWithTies) {
  EXPECT_NEAR(pearson({1, 2, 3}, {2, 4, 7}), 5.0 / std::sqrt(2.0 * 114.0 / 9.0), 1e-12);
  EXPECT_NEAR(pearson({1, 2, 3}, {2, 4, 7}), 0.9933992677987828, 1e-12);
  EXPECT_EQ(average_ranks({10, 20, 20, 30}), (std::vector<double>{1, 2.5, 2.5, 4}));
  EXPECT_EQ(average_ranks({3, 1, 3, 3}), (std::vector<double>{3, 1, 3, 3}));
  // ranks {1, 2.5, 2.5, 4} vs {1, 3, 2, 4}: 4.5 / sqrt(4.5 * 5)
  EXPECT_NEAR(spearman({1, 2, 2, 3}, {1, 3, 2, 4}), 4.5 / std::sqrt(22.5), 1e-12);
  EXPECT_NEAR(spearman({1, 2, 2, 3}, {1, 3, 2, 4}), 0.9486832980505139, 1e-12);
  // Spearman is invariant to a monotone transform; Pearson is not.
  EXPECT_NEAR(spearman({1, 2, 3, 4}, {1, 8, 27, 64}), 1.0, 1e-12);
  EXPECT_LT(pearson({1, 2, 3, 4}, {1, 8, 27, 64}), 0.99);
}

TEST(GlueMetrics, EachTaskReportsGluesMetrics) {
  std::vector<int64_t> p = {1, 0}, g = {1, 1};
  auto keys = [](const std::map<std::string, double>& m) {
    std::string s;
    for (const auto& [k, v] : m) s += k + " ";
    return s;
  };
  auto task = [](const char* name) { return corpora::glue_task(name); };
  EXPECT_EQ(keys(glue_metrics(task("CoLA"), p, g, {}, {})), "acc mcc ");
  EXPECT_EQ(keys(glue_metrics(task("MRPC"), p, g, {}, {})), "acc f1 ");
  EXPECT_EQ(keys(glue_metrics(task("QQP"), p, g, {}, {})), "acc f1 ");
  EXPECT_EQ(keys(glue_metrics(task("SST-2"), p, g, {}, {})), "acc ");
  EXPECT_EQ(keys(glue_metrics(task("STS-B"), {}, {}, {1, 2, 3}, {1, 2, 4})), "pearson spearman ");
  EXPECT_EQ(glue_main_metric(task("MRPC")), "f1");
  EXPECT_EQ(glue_main_metric(task("STS-B")), "spearman");
  EXPECT_EQ(glue_main_metric(task("CoLA")), "mcc");
  EXPECT_EQ(glue_main_metric(task("MNLI")), "acc");
  EXPECT_EQ(task("MNLI").leaderboard_file, "MNLI-m.tsv");
  EXPECT_EQ(task("MNLI").leaderboard_file_mismatched, "MNLI-mm.tsv");
  EXPECT_EQ(task("RTE").leaderboard_file, "RTE.tsv");
  // A layout the config describes: by rule (two classes: acc, f1 and mcc; selected by acc).
  corpora::GlueTask binary;
  binary.label_names = {"no", "yes"};
  binary.metrics = corpora::GlueMetrics::kBinary;
  EXPECT_EQ(keys(glue_metrics(binary, p, g, {}, {})), "acc f1 mcc ");
  EXPECT_EQ(glue_main_metric(binary), "acc");
}

}  // namespace
}  // namespace ropelab::tasks
