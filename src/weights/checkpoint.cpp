#include "weights/checkpoint.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/loader.h"
#include "dist/world.h"
#include "util/device.h"
#include "util/error.h"
#include "util/fs.h"
#include "weights/manifest.h"

namespace ropelab::weights {

namespace stdfs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%09ld", static_cast<long>(step));
  return buf;
}

int64_t step_of(const std::string& name) {
  if (name.rfind("step-", 0) != 0) return -1;
  try {
    return std::stoll(name.substr(5));
  } catch (...) {
    return -1;
  }
}

void write_raw(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw UserError(path + ": cannot write (" + std::strerror(errno) + ")");
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0;
  int err = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw UserError(path + ": write failed (" + std::strerror(err) + ")");
  fs::fsync_path(path);
}

// Why a checkpoint directory cannot be used ("" if it verifies).
std::string problem_of(const stdfs::path& dir) {
  auto mpath = dir / "MANIFEST.json";
  if (!stdfs::exists(mpath)) return "no MANIFEST.json (incomplete save)";
  try {
    auto m = parse_manifest(fs::read_file(mpath.string()));
    for (const auto& [name, hash] : m.files) {
      auto p = dir / name;
      if (!stdfs::exists(p)) return name + " is missing";
      if (fs::hex64(fs::hash_file(p.string())) != hash)
        return name + " does not match its checksum";
    }
  } catch (const UserError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("MANIFEST.json is unreadable (") + e.what() + ")";
  }
  return "";
}

bool verify(const stdfs::path& dir) { return problem_of(dir).empty(); }

std::vector<std::pair<int64_t, stdfs::path>> list(const std::string& run_dir) {
  std::vector<std::pair<int64_t, stdfs::path>> out;
  stdfs::path root = stdfs::path(run_dir) / "checkpoints";
  if (!stdfs::exists(root)) return out;
  for (const auto& e : stdfs::directory_iterator(root)) {
    int64_t s = step_of(e.path().filename().string());
    if (s >= 0 && e.is_directory()) out.emplace_back(s, e.path());
  }
  std::sort(out.begin(), out.end());  // by step number, never by mtime
  return out;
}

}  // namespace

void save_checkpoint(const std::string& run_dir, torch::nn::Module& model,
                     torch::optim::Optimizer* opt, const TrainState& st, int64_t keep_last) {
  stdfs::path root = stdfs::path(run_dir) / "checkpoints";
  fs::make_dirs(root.string());
  std::string name = step_name(st.step);
  stdfs::path tmp = root / ("." + name + ".tmp");
  stdfs::path final_dir = root / name;
  std::error_code ec;
  stdfs::remove_all(tmp, ec);
  stdfs::create_directories(tmp);
  try {
    std::map<std::string, std::string> files;
    {
      torch::serialize::OutputArchive a;
      model.save(a);
      std::ostringstream os;
      a.save_to(os);
      files["model.pt"] = os.str();
    }
    if (opt != nullptr) {
      torch::serialize::OutputArchive a;
      opt->save(a);
      std::ostringstream os;
      a.save_to(os);
      files["optim.pt"] = os.str();
    }
    {
      torch::serialize::OutputArchive a;
      for (const auto& [gen, state] : device::rng_states(st.device)) a.write("rng/" + gen, state);
      std::ostringstream os;
      a.save_to(os);
      files["rng.pt"] = os.str();
    }
    json s = {{"step", st.step},
              {"micro", st.micro},
              {"tokens", st.tokens},
              {"best_valid", st.best_valid},
              {"best_step", st.best_step},
              {"skipped", st.skipped},
              {"threads", st.threads},
              {"world", st.world},
              {"config_hash", st.config_hash},
              {"vocab", st.vocab},
              {"source_vocab", st.source_vocab},
              {"eval_pending", st.eval_pending},
              {"log_window", st.log_window}};
    files["state.json"] = s.dump(2);
    Manifest manifest{st.step, {}};
    for (const auto& [fname, bytes] : files) {
      write_raw((tmp / fname).string(), bytes);
      manifest.files[fname] = fs::hex64(fs::hash_bytes(bytes));
    }
    write_raw((tmp / "MANIFEST.json").string(), manifest_json(manifest));
    fs::fsync_path(tmp.string());
    if (stdfs::exists(final_dir)) stdfs::remove_all(final_dir);
    stdfs::rename(tmp, final_dir);
    fs::fsync_path(root.string());
  } catch (const std::exception& e) {
    stdfs::remove_all(tmp, ec);
    throw UserError(final_dir.string() + ": checkpoint not written: " + e.what());
  }
  // Prune: keep the newest keep_last and the best; the new one is committed already.
  auto all = list(run_dir);
  int64_t kept = 0;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->first == st.best_step) continue;
    if (++kept > keep_last) stdfs::remove_all(it->second, ec);
  }
}

bool has_checkpoints(const std::string& run_dir) { return !list(run_dir).empty(); }

std::vector<std::string> verified_checkpoints(const std::string& run_dir) {
  std::vector<std::string> out;
  for (const auto& [step, p] : list(run_dir))
    if (verify(p)) out.push_back(p.string());
  return out;
}

std::vector<std::pair<std::string, std::string>> damaged_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [step, p] : list(run_dir))
    if (auto why = problem_of(p); !why.empty()) out.emplace_back(p.filename().string(), why);
  return out;
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  auto all = list(run_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (verify(it->second)) return it->second.string();
    spdlog::warn("{}: damaged or incomplete checkpoint, skipped", it->second.string());
  }
  return std::nullopt;
}

std::optional<std::string> checkpoint_for_step(const std::string& run_dir, int64_t step) {
  for (const auto& [s, p] : list(run_dir))
    if (s == step && verify(p)) return p.string();
  return std::nullopt;
}

TrainState load_checkpoint(const std::string& dir, torch::nn::Module& model,
                           torch::optim::Optimizer* opt) {
  stdfs::path d(dir);
  if (!verify(d))
    throw UserError(dir + ": checkpoint is damaged or incomplete (checksum mismatch)");
  try {
    torch::serialize::InputArchive a;
    a.load_from((d / "model.pt").string());
    model.load(a);
    // A model-only checkpoint (averaged weights, an imported Hugging Face checkpoint) has no
    // optimizer state: training from it starts the optimizer fresh.
    if (opt != nullptr && !stdfs::exists(d / "optim.pt")) {
      spdlog::info("{}: a model-only checkpoint; the optimizer starts fresh", dir);
    } else if (opt != nullptr) {
      torch::serialize::InputArchive o;
      o.load_from((d / "optim.pt").string());
      opt->load(o);
      torch::serialize::InputArchive r;
      r.load_from((d / "rng.pt").string());
      std::map<std::string, torch::Tensor> states;
      for (const auto& key : r.keys()) {
        if (key.rfind("rng/", 0) != 0) continue;
        torch::Tensor state;
        r.read(key, state);
        states[key.substr(4)] = state;
      }
      device::set_rng_states(states);
    }
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    throw UserError(dir + ": cannot load checkpoint (" + msg.substr(0, msg.find('\n')) +
                    "); does the config match the one it was trained with?");
  }
  auto s = json::parse(fs::read_file((d / "state.json").string()));
  TrainState st;
  st.step = s.at("step");
  st.micro = s.at("micro");
  st.tokens = s.at("tokens");
  st.best_valid = s.at("best_valid");
  st.best_step = s.at("best_step");
  st.skipped = s.at("skipped");
  st.threads = s.at("threads");
  st.world = s.value("world", 1);
  st.config_hash = s.at("config_hash");
  st.vocab = s.value("vocab", 0);
  st.source_vocab = s.value("source_vocab", 0);
  st.eval_pending = s.value("eval_pending", false);
  st.log_window = s.value("log_window", std::vector<double>{});
  return st;
}

}  // namespace ropelab::weights
