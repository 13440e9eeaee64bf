#include "train/metrics.h"

#include <cmath>
#include <filesystem>

#include <spdlog/spdlog.h>

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
}  // namespace

MetricsLog::MetricsLog(const std::string& run_dir, const std::map<std::string, std::string>& attrs,
                       int64_t resume_step) {
  std::string path = (stdfs::path(run_dir) / "metrics.h5").string();
  path_ = path;
  bool fresh = resume_step <= 0 || !fs::exists(path);
  if (!fresh) {
    try {
      file_ = h5::open_file(path, true);
      truncate_group(file_.id(), "train", resume_step, path);
      truncate_group(file_.id(), "valid", resume_step, path);
    } catch (const UserError&) {
      fresh = true;  // unreadable (killed before its first flush): start it again
    }
  }
  if (fresh) file_ = h5::create_file(path);
  h5::set_attr(file_.id(), "format", std::string("ropelab.metrics"));
  h5::set_attr(file_.id(), "format_version", static_cast<int64_t>(1));
  h5::set_attr(file_.id(), "ropelab_version", std::string(ROPELAB_VERSION));
  for (const auto& [k, v] : attrs) h5::set_attr(file_.id(), k, v);
  std::string jpath = (stdfs::path(run_dir) / "metrics.jsonl").string();
  jpath_ = jpath;
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
  auto& g = groups_[group];
  if (!g.valid()) {
    g = h5::exists(file_.id(), group)
            ? h5::Handle(H5Gopen2(file_.id(), group.c_str(), H5P_DEFAULT), H5Gclose)
            : h5::create_group(file_.id(), group, "metrics.h5");
  }
  std::string json = "{\"split\":\"" + group + "\"";
  for (const auto& [k, v] : row) {
    auto& s = series_[group][k];
    if (!s) s = std::make_unique<h5::Series>(g.id(), k);
    s->append(v);
    char buf[64];
    std::snprintf(buf, sizeof buf, std::isfinite(v) ? "%.9g" : "null", v);
    json += ",\"" + k + "\":" + buf;
  }
  std::fprintf(jsonl_, "%s}\n", json.c_str());
  if (++since_flush_ >= 20) flush();
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
  for (const char* k : {"position", "task", "arch", "attention", "params", "config", "name"})
    if (h5::has_attr(f.id(), k)) out[k] = h5::get_attr_str(f.id(), k, path);
  return out;
}

// ---- the trainer's metrics logger

MetricsLogger::MetricsLogger(std::string run_dir, std::map<std::string, std::string> attrs,
                             RowOf row_of, int64_t log_every, int64_t max_steps,
                             std::vector<Note> notes)
    : run_dir_(std::move(run_dir)),
      attrs_(std::move(attrs)),
      row_of_(std::move(row_of)),
      log_every_(log_every),
      max_steps_(max_steps),
      notes_(std::move(notes)) {}

MetricsLogger::~MetricsLogger() {
  if (log_) log::drop_log_files();
}

void MetricsLogger::open(int64_t step, double tokens) {
  log::add_log_file((stdfs::path(run_dir_) / "train.log").string());
  log_ = std::make_unique<MetricsLog>(run_dir_, attrs_, step);
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
  bar_ = std::make_unique<Progress>("train", max_steps_, "step");
  bar_->update(step);
  t_log_ = clock::now();
  tokens_at_log_ = tokens;
}

void MetricsLogger::train_step(const tasks::StepSums& sums, int64_t step, double tokens, double lr,
                               double grad_norm) {
  window_.add(sums);
  if (step % log_every_ != 0 && step != max_steps_) return;
  double secs = std::chrono::duration<double>(clock::now() - t_log_).count();
  double tps = secs > 0 ? (tokens - tokens_at_log_) / secs : 0.0;
  auto row = row_of_(window_.read());  // loss and the task's metrics over the window
  double loss = row["loss"];
  row["step"] = static_cast<double>(step);
  row["tokens"] = tokens;
  row["lr"] = lr;
  row["grad_norm"] = grad_norm;
  row["tokens_per_s"] = tps;
  if (log_) log_->log("train", row);
  if (bar_) bar_->update(step, fmt::format("loss {:.4f} lr {:.2e} {:.0f} tok/s", loss, lr, tps));
  window_ = tasks::StepSums{};
  t_log_ = clock::now();
  tokens_at_log_ = tokens;
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

void MetricsLogger::finish() {
  if (bar_) bar_->finish();
  if (log_) log_->flush();
}

}  // namespace ropelab::train
