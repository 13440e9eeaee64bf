#include "train/metrics.h"

#include "config/layout.h"

#include <cmath>
#include <filesystem>
#include <functional>

#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "config/loader.h"
#include "run/tensorboard.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"

namespace ropelab::train {

namespace stdfs = std::filesystem;

namespace {
// Shrinks every series of a group to the rows with step <= max_step.
void truncate_group(hid_t file, const std::string& group, int64_t max_step,
                    const std::string& path) {
  if (!h5::exists(file, group)) return;
  h5::Handle g(H5Gopen2(file, group.c_str(), H5P_DEFAULT), H5Gclose);
  if (!h5::exists(g.id(), "step")) return;
  auto steps = h5::read_f64(g.id(), "step", path);
  hsize_t keep = 0;
  while (keep < steps.size() && steps[keep] <= static_cast<double>(max_step)) ++keep;
  H5G_info_t info;
  H5Gget_info(g.id(), &info);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[256];
    H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
    h5::Handle ds(H5Dopen2(g.id(), name, H5P_DEFAULT), H5Dclose);
    H5Dset_extent(ds.id(), &keep);
  }
}
// metrics.h5 opened to append to, waiting up to 5 s for a reader that has it open (a reader
// holds the run's lock shared only while it reads). An invalid handle: the file is not HDF5
// (killed before its first flush), and is kept aside as metrics.h5.unreadable-N.
h5::Handle open_for_append(const std::string& path) {
  for (int attempt = 0;; ++attempt) {
    if (H5Fis_hdf5(path.c_str()) <= 0 && attempt == 0) {
      int n = 1;
      while (fs::exists(path + ".unreadable-" + std::to_string(n))) ++n;
      std::string aside = path + ".unreadable-" + std::to_string(n);
      stdfs::rename(path, aside);
      spdlog::warn(
          "{}: not a readable HDF5 file (killed before its first flush?); kept as {}, "
          "and the metrics start again from the checkpoint",
          path, aside);
      return {};
    }
    try {
      return h5::open_file(path, true);
    } catch (const UserError&) {
      if (attempt >= 50)
        throw UserError(path +
                        ": cannot open it to append (another program, e.g. h5py in a notebook, "
                        "may have it open); nothing was changed");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

// Keeps the rows of metrics.jsonl up to `max_step` (atomically rewritten).
// The complete lines of a metrics.jsonl text, each with its 1-based number, its text (newline
// included) and its parsed row (null where the line is not JSON). A partial last line (being
// written, or cut by a kill) is left out.
void each_jsonl_row(
    const std::string& text,
    const std::function<void(int64_t, const std::string&, const nlohmann::json*)>& fn) {
  int64_t line_no = 0;
  for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos;
       start = end + 1) {
    const std::string line = text.substr(start, end - start + 1);
    nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    fn(++line_no, line, row.is_discarded() ? nullptr : &row);
  }
}

double row_step(const nlohmann::json& row) {
  return row.contains("step") && row["step"].is_number() ? row["step"].get<double>() : NAN;
}

// Keeps the rows up to `max_step` (a resumed run rewrites what came after its checkpoint).
void truncate_jsonl(const std::string& path, int64_t max_step) {
  std::string text = fs::read_file(path), kept;
  each_jsonl_row(text, [&](int64_t, const std::string& line, const nlohmann::json* row) {
    if (row != nullptr && row_step(*row) <= static_cast<double>(max_step)) kept += line;
  });
  if (kept.size() != text.size()) fs::write_file_atomic(path, kept);
}

}  // namespace

MetricsLog::MetricsLog(const std::string& run_dir, const std::map<std::string, std::string>& attrs,
                       int64_t resume_step, bool tensorboard)
    : run_dir_(run_dir),
      resume_step_(std::max<int64_t>(0, resume_step)),
      tensorboard_(tensorboard) {
  if (auto it = attrs.find("config"); it != attrs.end()) config_ = it->second;
  std::string path = (stdfs::path(run_dir) / "metrics.h5").string();
  path_ = path;
  bool fresh = resume_step <= 0 || !fs::exists(path);
  if (!fresh) file_ = open_for_append(path);
  if (!file_.valid()) {
    fresh = true;
  } else {
    truncate_group(file_.id(), "train", resume_step, path);
    truncate_group(file_.id(), "valid", resume_step, path);
  }
  if (fresh) file_ = h5::create_file(path);
  h5::set_attr(file_.id(), "format", std::string("ropelab.metrics"));
  h5::set_attr(file_.id(), "format_version", static_cast<int64_t>(1));
  h5::set_attr(file_.id(), "ropelab_version", std::string(ROPELAB_VERSION));
  for (const auto& [k, v] : attrs) h5::set_attr(file_.id(), k, v);
  std::string jpath = (stdfs::path(run_dir) / "metrics.jsonl").string();
  jpath_ = jpath;
  // The jsonl copy drops the rows past the checkpoint too (they are logged again), so it never
  // holds a (split, step) twice.
  if (!fresh && fs::exists(jpath)) truncate_jsonl(jpath, resume_step);
  jsonl_ = std::fopen(jpath.c_str(), fresh ? "w" : "a");
  if (jsonl_ == nullptr) throw UserError(jpath + ": cannot open for writing");
  std::setvbuf(jsonl_, nullptr, _IOLBF, 0);
  H5Fflush(file_.id(), H5F_SCOPE_GLOBAL);
}

MetricsLog::~MetricsLog() {
  flush();
  series_.clear();
  groups_.clear();
  if (jsonl_ != nullptr) std::fclose(jsonl_);
}

void MetricsLog::log(const std::string& group, const std::map<std::string, double>& row) {
  if (tensorboard_) log_tensorboard(group, row);
  auto& g = groups_[group];
  if (!g.valid()) {
    g = h5::exists(file_.id(), group)
            ? h5::Handle(H5Gopen2(file_.id(), group.c_str(), H5P_DEFAULT), H5Gclose)
            : h5::create_group(file_.id(), group, "metrics.h5");
  }
  std::string line = "{\"split\":\"" + group + "\"";
  for (const auto& [k, v] : row) {
    auto& s = series_[group][k];
    if (!s) s = std::make_unique<h5::Series>(g.id(), k);
    s->append(v);
    char buf[64];
    std::snprintf(buf, sizeof buf, std::isfinite(v) ? "%.9g" : "null", v);
    line += ",\"" + k + "\":" + buf;
  }
  std::fprintf(jsonl_, "%s}\n", line.c_str());
  if (++since_flush_ >= 20) flush();
}

void MetricsLog::log_tensorboard(const std::string& group,
                                 const std::map<std::string, double>& row) {
  if (!tb_) {
    // Opened with the first row: a finished run run again (ablate) logs none and adds no file.
    tb_ = std::make_unique<tb::EventWriter>(run::tensorboard_dir(run_dir_));
    run::write_run_header(*tb_, config_, resume_step_ > 0 ? resume_step_ + 1 : 0);
  }
  auto step = row.find("step");
  if (step == row.end()) return;
  for (const auto& [k, v] : row)
    if (k != "step") tb_->scalar(group + "/" + k, static_cast<int64_t>(step->second), v);
}

void MetricsLog::finished() {
  if (tb_) tb_->session_end(true);
}

void MetricsLog::flush() {
  if (file_.valid()) H5Fflush(file_.id(), H5F_SCOPE_GLOBAL);
  since_flush_ = 0;
}

void MetricsLog::sync() {
  if (file_.valid() && H5Fflush(file_.id(), H5F_SCOPE_GLOBAL) < 0)
    throw UserError(path_ + ": cannot flush the metrics");
  since_flush_ = 0;
  if (jsonl_ != nullptr && std::fflush(jsonl_) != 0)
    throw UserError(jpath_ + ": cannot flush the metrics");
  fs::fsync_path(path_);
  fs::fsync_path(jpath_);
}

std::map<std::string, std::vector<double>> read_metrics(const std::string& path,
                                                        const std::string& group) {
  auto f = h5::open_file(path, false);
  std::map<std::string, std::vector<double>> out;
  if (!h5::exists(f.id(), group)) return out;
  h5::Handle g(H5Gopen2(f.id(), group.c_str(), H5P_DEFAULT), H5Gclose);
  H5G_info_t info;
  H5Gget_info(g.id(), &info);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[256];
    H5Lget_name_by_idx(g.id(), ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
    out[name] = h5::read_f64(g.id(), name, path);
  }
  return out;
}

std::map<std::string, std::string> read_metric_attrs(const std::string& path) {
  auto f = h5::open_file(path, false);
  std::map<std::string, std::string> out;
  for (const char* k :
       {"position", "task", "arch", "attention", "params", "config", "name", "origin"})
    if (h5::has_attr(f.id(), k)) out[k] = h5::get_attr_str(f.id(), k, path);
  return out;
}

std::map<std::string, std::vector<double>> read_metrics_jsonl(const std::string& path,
                                                              const std::string& split) {
  std::map<double, nlohmann::json> rows;  // by step; a later row replaces an earlier one
  each_jsonl_row(fs::read_file(path),
                 [&](int64_t line_no, const std::string&, const nlohmann::json* row) {
                   if (row == nullptr)
                     throw UserError(fmt::format("{}:{}: not a JSON row", path, line_no));
                   const double step = row_step(*row);
                   if (row->value("split", "") == split && !std::isnan(step)) rows[step] = *row;
                 });
  std::map<std::string, std::vector<double>> out;
  size_t n = 0;
  for (const auto& [step, j] : rows) {
    for (const auto& [k, v] : j.items()) {
      if (k == "split") continue;
      auto& series = out[k];
      series.resize(n, NAN);  // a column that starts late (every row has the same keys)
      series.push_back(v.is_number() ? v.get<double>() : NAN);
    }
    ++n;
  }
  for (auto& [k, series] : out) series.resize(n, NAN);
  return out;
}

RunMetrics read_run_metrics(const std::string& run_dir) {
  const stdfs::path dir(run_dir);
  const std::string h5_path = (dir / "metrics.h5").string();
  const std::string jsonl_path = (dir / "metrics.jsonl").string();
  RunMetrics m;
  fs::ReadLock lock(run_dir);
  m.writer = lock.writer();
  if (!m.writer) {
    if (!fs::exists(h5_path)) throw UserError(run_dir + ": not a ropelab run (no metrics.h5)");
    m.attrs = read_metric_attrs(h5_path);
    m.train = read_metrics(h5_path, "train");
    m.valid = read_metrics(h5_path, "valid");
    return m;
  }
  // Being trained: the jsonl copy, whose lines are written whole, and config.yaml (written
  // atomically) for what the table names.
  if (!fs::exists(jsonl_path))
    throw UserError(run_dir + ": being written by " + m.writer->describe() +
                    ", and no metrics yet");
  m.train = read_metrics_jsonl(jsonl_path, "train");
  m.valid = read_metrics_jsonl(jsonl_path, "valid");
  const std::string cfg = (dir / "config.yaml").string();
  if (fs::exists(cfg)) {
    auto c = config::load_config(cfg);
    m.attrs = {{"name", c.run.name},
               {"position", config::position_summary(c.model)},
               {"task", c.task.type()},
               {"arch", config::to_string(c.model.arch)},
               {"attention", config::to_string(c.model.attention.kernel)}};
  }
  return m;
}

// ---- the trainer's metrics logger

MetricsLogger::MetricsLogger(std::string run_dir, std::map<std::string, std::string> attrs,
                             RowOf row_of, int64_t log_every, int64_t max_steps,
                             std::vector<Note> notes, bool tensorboard)
    : run_dir_(std::move(run_dir)),
      attrs_(std::move(attrs)),
      row_of_(std::move(row_of)),
      log_every_(log_every),
      max_steps_(max_steps),
      notes_(std::move(notes)),
      tensorboard_(tensorboard) {}

MetricsLogger::~MetricsLogger() {
  if (log_) log::drop_log_files();
}

void MetricsLogger::open(int64_t step, double tokens, const std::vector<double>& window) {
  restored_ = window;
  log::add_log_file((stdfs::path(run_dir_) / "train.log").string());
  log_ = std::make_unique<MetricsLog>(run_dir_, attrs_, step, tensorboard_);
  for (const auto& n : notes_) {
    if (n.warning)
      spdlog::warn("{}", n.text);
    else
      spdlog::info("{}", n.text);
  }
  tokens_at_log_ = tokens;
}

std::map<std::string, double> MetricsLogger::final_valid(int64_t step) const {
  std::map<std::string, double> out;
  std::string path = (stdfs::path(run_dir_) / "metrics.h5").string();
  if (!fs::exists(path)) return out;
  try {
    auto valid = read_metrics(path, "valid");
    const auto& steps = valid["step"];
    for (size_t i = steps.size(); i-- > 0;) {
      if (static_cast<int64_t>(steps[i]) != step) continue;
      for (const auto& [k, v] : valid)
        if (k != "step" && k != "tokens" && k != "lr" && k != "tokens_per_s" && i < v.size())
          out[k] = v[i];
      break;
    }
  } catch (const UserError&) {
    out.clear();  // unreadable: evaluate again
  }
  return out;
}

void MetricsLogger::start(int64_t step, double tokens) {
  bar_ = std::make_unique<Progress>("train", max_steps_, "step", step);
  t_log_ = clock::now();
  tokens_at_log_ = tokens;
}

void MetricsLogger::train_step(const tasks::StepSums& sums, int64_t step, double tokens, double lr,
                               double grad_norm) {
  if (!restored_.empty() && !sums.empty()) {
    // The saved window on the sums' device, exactly the values it had (float64).
    window_ = tasks::StepSums(sums.tensor().device());
    for (size_t f = 0; f < restored_.size(); ++f)
      window_.set(static_cast<tasks::Sum>(f), restored_[f]);
    restored_.clear();
  }
  window_.add(sums);
  if (step % log_every_ != 0 && step != max_steps_) return;
  // Loss and the task's metrics over the window. Reading them waits for the window's steps to
  // finish (on a GPU they are queued), so the clock is read after it.
  auto row = row_of_(window_.read());
  // The window runs from the previous row's clock reading to this one's, so writing a row counts
  // as training time (as in the progress bar's step/s); evaluation and saving are paused out.
  const auto now = clock::now();
  double secs = std::chrono::duration<double>(now - t_log_).count();
  double tps = secs > 0 ? (tokens - tokens_at_log_) / secs : 0.0;
  double loss = row["loss"];
  row["step"] = static_cast<double>(step);
  row["tokens"] = tokens;
  row["lr"] = lr;
  row["grad_norm"] = grad_norm;
  row["tokens_per_s"] = tps;
  if (log_) log_->log("train", row);
  if (bar_) bar_->update(step, fmt::format("loss {:.4f} lr {:.2e} {:.0f} tok/s", loss, lr, tps));
  window_ = tasks::StepSums{};
  t_log_ = now;
  tokens_at_log_ = tokens;
}

std::vector<double> MetricsLogger::window() const {
  if (!restored_.empty()) return restored_;  // no step since the resume
  if (window_.empty()) return {};
  auto h = window_.read();
  return {h.nll, h.targets, h.correct, h.tokens, h.examples, h.exact};
}

void MetricsLogger::valid(const std::map<std::string, double>& metrics, int64_t step, double tokens,
                          double lr, double tokens_per_s) {
  auto row = metrics;
  row["step"] = static_cast<double>(step);
  row["tokens"] = tokens;
  row["lr"] = lr;
  row["tokens_per_s"] = tokens_per_s;  // evaluation speed
  if (!log_) return;
  log_->log("valid", row);
  log_->flush();
}

void MetricsLogger::sync() {
  if (log_) log_->sync();
}

void MetricsLogger::finish(bool completed) {
  if (bar_) bar_->finish();
  if (!log_) return;
  log_->flush();
  if (completed) log_->finished();
}

}  // namespace ropelab::train
