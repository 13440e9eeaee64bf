// GLUE readers for the official TSV layouts of all nine tasks (data/README.md): train, dev
// (MNLI: dev_matched / dev_mismatched) and unlabeled test files.
//
// Files are split on TAB only, with no quote handling (SST-2 and MRPC contain bare `"`), a
// trailing \r is stripped, and files with a header find their columns by name, so train, dev
// and test layouts of one task are read by the same code. A row with the wrong column count is
// an error naming the file and line, except in QQP's train file, whose few malformed rows the
// reference loaders skip (we skip and count them too).
//
// A layout the config describes (data.tsv) names its columns in a header: text a, optional
// text b, optional text c (ranking triplets: is b or c closer to a?) and the label.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ropelab::corpora {

// The metrics a task reports over a whole split, fixed when the task is looked up: GLUE's own
// choice for its nine tasks, a rule for a layout the config describes (tasks/glue_metrics.h).
enum class GlueMetrics {
  kAccuracy,     // acc (SST-2, MNLI, QNLI, RTE, WNLI; described, 3+ classes)
  kF1Accuracy,   // f1 and acc (MRPC, QQP)
  kMccAccuracy,  // mcc and acc (CoLA)
  kCorrelation,  // pearson and spearman (STS-B; described regression)
  kBinary,       // acc, f1 and mcc (described, two classes)
};

struct GlueTask {
  std::string name;                      // "CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", ...
  bool regression = false;               // STS-B
  std::vector<std::string> label_names;  // class index = position (empty for regression)
  bool pair = false;                     // sentence pairs?
  // A described layout: the header names of its columns (empty col_a: GLUE's own layout).
  std::string col_a, col_b, col_c, col_label;
  GlueMetrics metrics = GlueMetrics::kAccuracy;
  // The leaderboard's prediction files ("CoLA.tsv"); MNLI has one per validation set
  // ("MNLI-m.tsv", and "MNLI-mm.tsv" for its mismatched splits).
  std::string leaderboard_file, leaderboard_file_mismatched;
  bool described() const { return !col_a.empty(); }
  bool ranking() const { return !col_c.empty(); }  // (a, b, c); label 0: b closer, 1: c closer
};

// Looks a task up by its GLUE name (case-insensitive); UserError listing the nine otherwise.
const GlueTask& glue_task(const std::string& name);
const std::vector<GlueTask>& glue_tasks();

struct GlueExample {
  std::string a, b, c;  // b empty for single-sentence tasks; c only for ranking
  float label = -1.0f;  // class index, or the score for STS-B; -1 for unlabeled test rows
  int64_t line = 0;     // 1-based line in the file
  std::string id;       // the index column where the file has one (test predictions need it)
};

struct GlueFile {
  std::vector<GlueExample> examples;
  int64_t skipped_rows = 0;  // malformed rows skipped (QQP train only)
  bool labeled = false;
};

// Reads one GLUE TSV file of `task`. Errors name the file and line.
GlueFile read_glue_tsv(const std::string& path, const GlueTask& task);
// The same on the file's bytes; `path` names it in errors, and a name ending in "train.tsv"
// marks a training file (QQP's malformed training rows are skipped, not errors).
GlueFile parse_glue_tsv(const std::string& data, const std::string& path, const GlueTask& task);

// File name of a split in a GLUE task directory: "train.tsv", "dev.tsv",
// "dev_matched.tsv"/"dev_mismatched.tsv" (MNLI: split "dev_matched"/"dev_mismatched"), "test.tsv".
std::string glue_file_name(const GlueTask& task, const std::string& split);

// Writes examples in the task's official layout (used to make the built-in GLUE-style tasks).
std::string write_glue_tsv(const GlueTask& task, const std::vector<GlueExample>& examples,
                           bool with_labels);

}  // namespace ropelab::corpora
