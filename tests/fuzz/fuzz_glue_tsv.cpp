// The GLUE TSV reader on arbitrary bytes, for each of the nine GLUE layouts and the layouts a
// config can describe (classification, regression, ranking). The first byte picks the layout
// and whether the file is a training file. Examples or a UserError, nothing else; every
// example it returns has a line number and a label in range.
#include <cmath>

#include "corpora/glue.h"
#include "fuzz_util.h"
#include "util/error.h"

namespace {
std::vector<ropelab::corpora::GlueTask> layouts() {
  std::vector<ropelab::corpora::GlueTask> out = ropelab::corpora::glue_tasks();
  ropelab::corpora::GlueTask cls{"Mine", false, {"no", "yes"}, true, "text", "other", "", "y"};
  ropelab::corpora::GlueTask reg{"Score", true, {}, false, "text", "", "", "score"};
  ropelab::corpora::GlueTask rank{"SCM", false, {"B", "C"}, true, "A", "B", "C", "label"};
  out.push_back(cls), out.push_back(reg), out.push_back(rank);
  return out;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tasks = layouts();
  if (size == 0) return 0;
  const auto& task = tasks[data[0] % tasks.size()];
  const bool train = ((data[0] / tasks.size()) % 2) != 0;
  const std::string name = train ? "train.tsv" : "dev.tsv";
  try {
    auto f = ropelab::corpora::parse_glue_tsv(fuzz::as_string(data + 1, size - 1), name, task);
    for (const auto& e : f.examples) {
      if (e.line < 1) fuzz::violated("an example without a line number");
      if (!f.labeled) continue;
      if (task.regression ? !std::isfinite(e.label)
                          : (e.label < 0 || e.label >= static_cast<float>(task.label_names.size())))
        fuzz::violated(task.name + ": label out of range at line " + std::to_string(e.line));
    }
  } catch (const ropelab::UserError&) {
  }
  return 0;
}
