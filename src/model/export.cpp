#include "model/export.h"

#include <spdlog/fmt/fmt.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "config/loader.h"
#include "model/transformer.h"
#include "train/checkpoint.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/h5.h"

namespace ropelab::model {

namespace stdfs = std::filesystem;

std::string export_weights(const std::string& source, const std::string& out_path) {
  stdfs::path src(source);
  std::string run_dir, ck;
  if (stdfs::exists(src / "MANIFEST.json")) {
    ck = src.string();
    run_dir = src.parent_path().parent_path().string();
  } else if (stdfs::exists(src / "config.yaml")) {
    run_dir = src.string();
    auto latest = train::latest_checkpoint(run_dir);
    if (!latest) throw UserError(source + ": the run has no checkpoint");
    ck = *latest;
  } else {
    throw UserError(source +
                    ": neither a run directory (config.yaml) nor a checkpoint (MANIFEST.json)");
  }
  std::string cfg_path = (stdfs::path(run_dir) / "config.yaml").string();
  auto c = config::load_config(cfg_path);
  auto state = nlohmann::json::parse(fs::read_file((stdfs::path(ck) / "state.json").string()));
  int64_t vocab = state.value("vocab", 0);
  if (vocab <= 0) throw UserError(ck + ": state.json lacks the vocabulary size");
  Transformer m(c.model, vocab);
  train::load_checkpoint(ck, *m, nullptr);
  int64_t n = 0;
  fs::commit_atomic(out_path, [&](const std::string& tmp) {
    auto f = h5::create_file(tmp);
    h5::set_attr(f.id(), "format", std::string("ropelab.weights"));
    h5::set_attr(f.id(), "format_version", static_cast<int64_t>(1));
    h5::set_attr(f.id(), "config", config::dump(c));
    h5::set_attr(f.id(), "arch", c.model.arch);
    h5::set_attr(f.id(), "position", c.model.position.type);
    h5::set_attr(f.id(), "attention", c.model.attention.kernel);
    h5::set_attr(f.id(), "vocab_size", vocab);
    h5::set_attr(f.id(), "step", static_cast<int64_t>(state.value("step", 0)));
    auto write = [&](const std::string& name, const torch::Tensor& t) {
      std::string path = name;
      std::replace(path.begin(), path.end(), '.', '/');
      auto x = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
      h5::write_f32_nd(f.id(), path, x.data_ptr<float>(),
                       std::vector<hsize_t>(x.sizes().begin(), x.sizes().end()));
      ++n;
    };
    for (const auto& p : m->named_parameters()) write(p.key(), p.value());
    for (const auto& b : m->named_buffers()) write(b.key(), b.value());
  });
  return fmt::format("wrote {} tensors from {} to {}", n, ck, out_path);
}

}  // namespace ropelab::model
