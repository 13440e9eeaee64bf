#include "corpora/glue.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>

#include "util/error.h"
#include "util/fs.h"

namespace ropelab::corpora {

const std::vector<GlueTask>& glue_tasks() {
  using M = GlueMetrics;
  auto task = [](const char* name, bool regression, std::vector<std::string> labels, bool pair,
                 M metrics) {
    GlueTask t;
    t.name = name, t.regression = regression, t.label_names = std::move(labels), t.pair = pair;
    t.metrics = metrics;
    t.leaderboard_file = t.name + ".tsv";
    return t;
  };
  static const std::vector<GlueTask> kTasks = [&] {
    std::vector<GlueTask> v = {
        task("CoLA", false, {"0", "1"}, false, M::kMccAccuracy),
        task("SST-2", false, {"0", "1"}, false, M::kAccuracy),
        task("MRPC", false, {"0", "1"}, true, M::kF1Accuracy),
        task("STS-B", true, {}, true, M::kCorrelation),
        task("QQP", false, {"0", "1"}, true, M::kF1Accuracy),
        task("MNLI", false, {"entailment", "neutral", "contradiction"}, true, M::kAccuracy),
        task("QNLI", false, {"entailment", "not_entailment"}, true, M::kAccuracy),
        task("RTE", false, {"entailment", "not_entailment"}, true, M::kAccuracy),
        task("WNLI", false, {"0", "1"}, true, M::kAccuracy),
    };
    v[5].leaderboard_file = "MNLI-m.tsv";
    v[5].leaderboard_file_mismatched = "MNLI-mm.tsv";
    return v;
  }();
  return kTasks;
}

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> cols;
  size_t start = 0;
  while (true) {
    size_t tab = line.find('\t', start);
    cols.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  return cols;
}

int find_col(const std::vector<std::string>& header, std::initializer_list<const char*> names) {
  for (const char* n : names)
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == n) return static_cast<int>(i);
  return -1;
}
}  // namespace

const GlueTask& glue_task(const std::string& name) {
  // "SST-2", "sst2" and "Sst-2" all name the same task.
  auto norm = [](const std::string& s) {
    std::string n = lower(s);
    n.erase(std::remove(n.begin(), n.end(), '-'), n.end());
    return n;
  };
  for (const auto& t : glue_tasks())
    if (norm(t.name) == norm(name)) return t;
  std::string all;
  for (const auto& t : glue_tasks()) all += (all.empty() ? "" : ", ") + t.name;
  throw UserError("unknown GLUE task '" + name + "' (one of: " + all + ")");
}

std::string glue_file_name(const GlueTask& task, const std::string& split) {
  if (task.name == "MNLI" && split == "dev") return "dev_matched.tsv";
  return split + ".tsv";
}

GlueFile read_glue_tsv(const std::string& path, const GlueTask& task) {
  return parse_glue_tsv(fs::read_file(path), path, task);
}

GlueFile parse_glue_tsv(const std::string& data, const std::string& path, const GlueTask& task) {
  GlueFile out;
  std::istringstream in(data);
  std::string line;
  int64_t lineno = 0;
  // Column layout: CoLA train/dev have no header; everything else is found by header name.
  int col_a = -1, col_b = -1, col_c = -1, col_label = -1, col_id = -1;
  size_t ncols = 0;
  bool is_train = path.size() >= 9 && path.compare(path.size() - 9, 9, "train.tsv") == 0;
  auto fail = [&](const std::string& msg) {
    throw UserError(path + ":" + std::to_string(lineno) + ": " + msg);
  };
  bool header_done = false;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lineno == 1 && line.size() >= 3 && line.compare(0, 3, "\xEF\xBB\xBF") == 0)
      line.erase(0, 3);
    if (line.empty()) continue;
    auto cols = split_tabs(line);
    if (!header_done && task.described()) {
      header_done = true;
      ncols = cols.size();
      int* want[] = {&col_a, &col_b, &col_c, &col_label};
      const std::string* names[] = {&task.col_a, &task.col_b, &task.col_c, &task.col_label};
      for (size_t k = 0; k < 4; ++k) {
        if (names[k]->empty()) continue;
        *want[k] = find_col(cols, {names[k]->c_str()});
        if (*want[k] < 0 && k < 3)  // the label may be missing (unlabeled test files)
          fail("no column '" + *names[k] + "' in the header (columns: " + line + ")");
      }
      col_id = find_col(cols, {"index", "id"});
      out.labeled = col_label >= 0;
      continue;
    }
    if (!header_done) {
      header_done = true;
      bool cola_no_header = task.name == "CoLA" && cols.size() == 4;
      if (cola_no_header) {
        ncols = 4, col_a = 3, col_label = 1;
      } else {
        ncols = cols.size();
        col_id = find_col(cols, {"index", "id"});
        col_a = find_col(cols, {"sentence1", "question1", "#1 String", "question", "sentence"});
        col_b =
            task.pair ? find_col(cols, {"sentence2", "question2", "#2 String", "sentence"}) : -1;
        if (task.pair && col_b == col_a) col_b = -1;
        if (task.name == "QNLI")
          col_a = find_col(cols, {"question"}), col_b = find_col(cols, {"sentence"});
        col_label = find_col(cols, {"gold_label", "label", "score", "is_duplicate", "Quality"});
        if (col_a < 0 || (task.pair && col_b < 0))
          fail("header does not look like GLUE " + task.name + " (columns: " + line + ")");
        out.labeled = col_label >= 0;
        continue;
      }
      out.labeled = true;
    }
    if (cols.size() != ncols) {
      if (task.name == "QQP" && is_train) {
        ++out.skipped_rows;
        continue;
      }
      fail("expected " + std::to_string(ncols) + " tab-separated columns, found " +
           std::to_string(cols.size()));
    }
    GlueExample ex;
    ex.line = lineno;
    ex.a = cols[col_a];
    if (col_b >= 0) ex.b = cols[col_b];
    if (col_c >= 0) ex.c = cols[col_c];
    if (col_id >= 0) ex.id = cols[col_id];
    if (col_label >= 0) {
      const std::string& l = cols[col_label];
      if (task.regression) {
        char* end = nullptr;
        ex.label = std::strtof(l.c_str(), &end);
        if (l.empty() || *end != '\0' || !std::isfinite(ex.label))
          fail("label '" + l + "' is not a (finite) number");
      } else {
        auto it = std::find(task.label_names.begin(), task.label_names.end(), l);
        if (it == task.label_names.end()) {
          std::string names;
          for (const auto& n : task.label_names) names += (names.empty() ? "" : ", ") + n;
          fail("label '" + l + "' is not one of: " + names);
        }
        ex.label = static_cast<float>(it - task.label_names.begin());
      }
    }
    out.examples.push_back(std::move(ex));
  }
  if (out.examples.empty()) throw UserError(path + ": no examples");
  return out;
}

std::string write_glue_tsv(const GlueTask& task, const std::vector<GlueExample>& examples,
                           bool with_labels) {
  std::ostringstream os;
  auto label = [&](const GlueExample& e) {
    return task.regression ? std::to_string(e.label)
                           : task.label_names.at(static_cast<size_t>(e.label));
  };
  if (task.described()) {
    // Header of the named columns, then one row per example (an index column for test files).
    os << (with_labels ? "" : "index\t") << task.col_a;
    for (const auto* c : {&task.col_b, &task.col_c})
      if (!c->empty()) os << '\t' << *c;
    if (with_labels) os << '\t' << task.col_label;
    os << '\n';
    for (size_t i = 0; i < examples.size(); ++i) {
      const auto& e = examples[i];
      if (!with_labels) os << i << '\t';
      os << e.a;
      if (!task.col_b.empty()) os << '\t' << e.b;
      if (!task.col_c.empty()) os << '\t' << e.c;
      if (with_labels) os << '\t' << label(e);
      os << '\n';
    }
  } else if (task.name == "MRPC") {
    os << (with_labels ? "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                       : "index\t#1 ID\t#2 ID\t#1 String\t#2 String\n");
    for (size_t i = 0; i < examples.size(); ++i) {
      const auto& e = examples[i];
      os << (with_labels ? label(e) : std::to_string(i)) << '\t' << 2 * i << '\t' << 2 * i + 1
         << '\t' << e.a << '\t' << e.b << '\n';
    }
  } else if (task.name == "SST-2") {
    os << (with_labels ? "sentence\tlabel\n" : "index\tsentence\n");
    for (size_t i = 0; i < examples.size(); ++i) {
      const auto& e = examples[i];
      if (with_labels)
        os << e.a << '\t' << label(e) << '\n';
      else
        os << i << '\t' << e.a << '\n';
    }
  } else if (task.name == "CoLA") {
    // No header in train/dev: source, label, original author's mark ("*" = unacceptable),
    // sentence. The test file has the header `index<TAB>sentence`.
    if (!with_labels) os << "index\tsentence\n";
    for (size_t i = 0; i < examples.size(); ++i) {
      const auto& e = examples[i];
      if (with_labels)
        os << "bible\t" << label(e) << '\t' << (e.label == 0.0f ? "*" : "") << '\t' << e.a << '\n';
      else
        os << i << '\t' << e.a << '\n';
    }
  } else {
    throw UserError("writing GLUE " + task.name + " files is not supported");
  }
  return os.str();
}

}  // namespace ropelab::corpora
