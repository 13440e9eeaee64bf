#include "eval/export.h"

#include <spdlog/fmt/fmt.h>
#include <unistd.h>

#include <filesystem>

#include "config/loader.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/h5.h"
#include "weights/checkpoint.h"
#include "weights/weights.h"

namespace ropelab::eval {

namespace stdfs = std::filesystem;

std::string average_checkpoints(const std::string& run_dir, int64_t last, const std::string& out) {
  if (last < 1) throw UserError("average: --last must be at least 1");
  if (stdfs::exists(out)) throw UserError(out + ": already exists; choose another --out");
  if (!stdfs::is_directory(run_dir)) throw UserError(run_dir + ": no such run directory");
  auto lock = fs::DirLock::acquire(run_dir, "average");  // no trainer prunes what it reads
  auto all = weights::verified_checkpoints(run_dir);
  if (all.empty()) throw UserError(run_dir + ": no checkpoint to average");
  if (static_cast<int64_t>(all.size()) < last)
    throw UserError(
        fmt::format("{}: has {} checkpoint(s), fewer than --last {}; HINT: train with "
                    "train.keep_last >= {} and train.checkpoint_every set",
                    run_dir, all.size(), last, last));
  std::vector<std::string> used(all.end() - last, all.end());
  auto avg = weights::load_run_model(used.back());
  weights::TrainState st =
      weights::load_checkpoint(used.back(), *avg.model, nullptr);  // step, vocab, ...
  st.vocab = avg.vocab;
  st.source_vocab = avg.source_vocab;
  auto sum = weights::state_dict(*avg.model);
  torch::NoGradGuard ng;
  std::map<std::string, torch::Tensor> acc;
  for (const auto& [name, t] : sum) acc[name] = t.to(torch::kFloat64);
  for (size_t i = 0; i + 1 < used.size(); ++i) {
    auto m = weights::load_run_model(used[i]);
    for (const auto& [name, t] : weights::state_dict(*m.model)) acc[name] += t.to(torch::kFloat64);
  }
  for (auto& [name, t] : sum)
    t.copy_((acc[name] / static_cast<double>(used.size())).to(t.scalar_type()));

  std::string tmp = out + ".tmp";
  std::error_code ec;
  stdfs::remove_all(tmp, ec);
  try {
    fs::make_dirs(tmp);
    fs::write_file_atomic((stdfs::path(tmp) / "config.yaml").string(), config::dump(avg.config));
    weights::save_checkpoint(tmp, *avg.model, nullptr, st, 1);
    stdfs::rename(tmp, out);
  } catch (...) {
    stdfs::remove_all(tmp, ec);
    throw;
  }
  std::string steps;
  for (const auto& u : used)
    steps += (steps.empty() ? "" : ", ") + stdfs::path(u).filename().string();
  return fmt::format("averaged {} checkpoints of {} ({}) into {}", used.size(), run_dir, steps,
                     out);
}

std::string export_weights(const std::string& source, const std::string& out_path) {
  stdfs::path src(source);
  fs::DirLock lock;  // the run's, so no trainer prunes the checkpoint it reads
  if (stdfs::exists(src / "MANIFEST.json"))
    lock = fs::DirLock::acquire(src.parent_path().parent_path().string(), "export");
  else if (stdfs::exists(src / "config.yaml"))
    lock = fs::DirLock::acquire(source, "export");
  auto r = weights::load_run_model(source);
  const auto& c = r.config;
  int64_t n = 0;
  fs::commit_atomic(out_path, [&](const std::string& tmp) {
    auto f = h5::create_file(tmp);
    h5::set_attr(f.id(), "format", std::string("ropelab.weights"));
    h5::set_attr(f.id(), "format_version", static_cast<int64_t>(2));
    h5::set_attr(f.id(), "config", config::dump(c));
    h5::set_attr(f.id(), "arch", std::string(config::to_string(c.model.arch)));
    h5::set_attr(f.id(), "position", std::string(c.model.position.type()));
    h5::set_attr(f.id(), "attention", std::string(config::to_string(c.model.attention.kernel)));
    h5::set_attr(f.id(), "task", std::string(c.task.type()));
    h5::set_attr(f.id(), "vocab_size", r.vocab);
    if (r.source_vocab > 0) h5::set_attr(f.id(), "source_vocab_size", r.source_vocab);
    h5::set_attr(f.id(), "step", r.step);
    for (const auto& [name, t] : weights::state_dict(*r.model)) {
      std::string path = name;
      std::replace(path.begin(), path.end(), '.', '/');
      auto x = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
      h5::write_f32_nd(f.id(), path, x.data_ptr<float>(),
                       std::vector<hsize_t>(x.sizes().begin(), x.sizes().end()));
      ++n;
    }
  });
  return fmt::format("wrote {} tensors from {} to {}", n, r.checkpoint, out_path);
}

}  // namespace ropelab::eval
