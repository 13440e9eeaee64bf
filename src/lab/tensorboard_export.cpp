// `ropelab export-tensorboard` (see tensorboard_export.h).
#include "lab/tensorboard_export.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "run/tensorboard.h"
#include "train/metrics.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::lab {

namespace stdfs = std::filesystem;

namespace {

// eval-*.json and probe.json of a run, by name.
std::vector<stdfs::path> result_files(const std::string& run_dir) {
  std::vector<stdfs::path> out;
  for (const auto& e : stdfs::directory_iterator(run_dir)) {
    const std::string name = e.path().filename().string();
    const bool eval = name.rfind("eval-", 0) == 0 && e.path().extension() == ".json";
    if (e.is_regular_file() && (eval || name == "probe.json")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t write_group(tb::EventWriter& w, const std::string& group,
                    const std::map<std::string, std::vector<double>>& series) {
  auto steps = series.find("step");
  if (steps == series.end()) return 0;
  int64_t n = 0;
  for (size_t i = 0; i < steps->second.size(); ++i) {
    const auto step = static_cast<int64_t>(steps->second[i]);
    for (const auto& [k, v] : series) {
      if (k == "step" || i >= v.size()) continue;
      w.scalar(group + "/" + k, step, v[i]);
      ++n;
    }
  }
  return n;
}

// Writes the event files into `dir` (new); the summary's counts.
ExportSummary write_all(const std::string& run_dir, const std::string& dir) {
  const auto run = stdfs::path(run_dir);
  const std::string h5 = (run / "metrics.h5").string();
  ExportSummary s;
  tb::EventWriter w(dir);
  const std::string config = fs::read_file((run / "config.yaml").string());
  run::write_run_header(w, config, 0);
  int64_t last = 0;
  for (const char* group : {"train", "valid"}) {
    auto series = train::read_metrics(h5, group);
    s.scalars += write_group(w, group, series);
    if (auto st = series.find("step"); st != series.end() && !st->second.empty())
      last = std::max(last, static_cast<int64_t>(st->second.back()));
  }
  for (const auto& p : result_files(run_dir)) {
    nlohmann::json j = nlohmann::json::parse(fs::read_file(p.string()), nullptr, false);
    if (j.is_discarded()) throw UserError(p.string() + ": not JSON; nothing was exported");
    const int64_t step = j.contains("step") && j["step"].is_number_integer()
                             ? j["step"].get<int64_t>()
                             : last;  // written before results named their step
    const std::string stem = p.stem().string();
    run::write_results(w, stem == "probe" ? "probe" : "eval/" + stem, j, step);
    ++s.results;
  }
  // A finished run: its last train row is at train.max_steps.
  const auto hp = run::hparams_of(config);
  const auto max_steps = hp.find("train.max_steps");
  if (max_steps != hp.end() && std::holds_alternative<double>(max_steps->second) &&
      static_cast<double>(last) >= std::get<double>(max_steps->second))
    w.session_end(true);
  return s;
}

}  // namespace

ExportSummary export_tensorboard(const std::string& run_dir) {
  const auto run = stdfs::path(run_dir);
  if (!fs::exists((run / "config.yaml").string()) || !fs::exists((run / "metrics.h5").string()))
    throw UserError(run_dir + ": not a ropelab run (no config.yaml and metrics.h5)");
  auto lock = fs::DirLock::acquire(run_dir, "export-tensorboard", fs::DirLock::Wait::kNo,
                                   "a run being trained writes its own event files");
  const std::string dir = run::tensorboard_dir(run_dir);
  const std::string tmp = dir + ".export-tmp", old = dir + ".export-old";
  stdfs::remove_all(tmp);
  stdfs::remove_all(old);
  ExportSummary s;
  try {
    s = write_all(run_dir, tmp);
  } catch (...) {
    stdfs::remove_all(tmp);
    throw;
  }
  s.dir = dir;
  s.replaced = stdfs::exists(dir);
  if (s.replaced) stdfs::rename(dir, old);
  stdfs::rename(tmp, dir);
  stdfs::remove_all(old);
  fs::fsync_path(run.string());
  return s;
}

}  // namespace ropelab::lab
