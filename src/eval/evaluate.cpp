#include "eval/evaluate.h"

#include <sstream>

#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "config/loader.h"
#include "data/prepare.h"
#include "model/position/rope_frequencies.h"
#include "model/span.h"
#include "run/run.h"
#include "run/tensorboard.h"
#include "tasks/task.h"
#include "util/device.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/signals.h"
#include "weights/weights.h"

namespace ropelab::eval {

namespace stdfs = std::filesystem;

// ---- evaluation of a finished run

namespace {
// METHOD:VALUE[@KIND,...]: a scaling method and its factor, or `base:B` (a base change, after Liu
// et al. 2023), for the layout kinds named after @ (empty = the default targets).
struct ScalingSpec {
  std::string method, value;
  std::vector<std::string> kinds;
};
const std::vector<std::string> kScalingMethods = {"linear", "ntk",      "dynamic", "yarn",
                                                  "llama3", "longrope", "base"};

ScalingSpec parse_scaling(const std::string& spec) {
  const auto at = spec.find('@');
  const std::string body = spec.substr(0, at);
  auto colon = body.find(':');
  ScalingSpec out;
  out.method = body.substr(0, colon);
  const std::string usage =
      "--rope-scaling '" + spec +
      "': expected METHOD:FACTOR[@KIND,...], METHOD one of linear, ntk, dynamic, yarn, llama3, "
      "longrope, or base:BASE for a base change (e.g. yarn:4, base:500000, or linear:8@global "
      "for the layout kind 'global' only)";
  if (colon == std::string::npos || std::find(kScalingMethods.begin(), kScalingMethods.end(),
                                              out.method) == kScalingMethods.end())
    throw UserError(usage);
  out.value = body.substr(colon + 1);
  char* end = nullptr;
  double f = std::strtod(out.value.c_str(), &end);
  const double least = out.method == "base" ? 2.0 : 1.0;
  if (out.value.empty() || *end != '\0' || !(f >= least) || !std::isfinite(f))
    throw UserError(usage + (out.method == "base" ? "; the base must be a number >= 2"
                                                  : "; the factor must be a number >= 1"));
  if (at != std::string::npos) {
    std::stringstream ss(spec.substr(at + 1));
    for (std::string k; std::getline(ss, k, ',');) out.kinds.push_back(k);
    if (out.kinds.empty() || std::find(out.kinds.begin(), out.kinds.end(), "") != out.kinds.end())
      throw UserError(usage + "; name the kinds after @");
  }
  return out;
}

bool rotates(const config::PositionConfig& p) {
  return std::holds_alternative<config::RopeConfig>(p.opts);
}

std::string yaml_list(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + fmt::format("{:.17g}", v[i]);
  return s + "]";
}

// The overrides of `s` for the position section at `key` ("model.position." or a layout kind's).
// longrope without a search: per-pair factors seeded as LongRoPE's search seeds them, from YaRN's
// frequencies at the same factor (theta_i / yarn_i), and short factors of 1 (the model as
// trained up to original_len).
std::vector<std::string> method_overrides(const ScalingSpec& s, const std::string& key,
                                          const config::PositionConfig& pos, int64_t head_dim,
                                          int64_t original_len) {
  if (s.method == "base") return {key + "base=" + s.value};
  std::vector<std::string> out = {key + "scaling.type=" + s.method,
                                  key + "scaling.factor=" + s.value};
  if (s.method != "longrope") return out;
  const auto& rope = std::get<config::RopeConfig>(pos.opts);
  const int64_t d = rope.rotary_dim > 0 ? rope.rotary_dim : head_dim;
  config::RopeScalingConfig yarn;
  config::YarnScaling y;
  y.factor = std::strtod(s.value.c_str(), nullptr);
  y.original_len = original_len;
  yarn.opts = y;
  auto theta = model::rope_theta(rope.base, d);
  auto scaled = model::rope_frequencies(yarn, rope.base, d, original_len).theta;
  std::vector<double> long_factor(theta.size()), short_factor(theta.size(), 1.0);
  for (size_t i = 0; i < theta.size(); ++i) long_factor[i] = theta[i] / scaled[i];
  out.push_back(key + "scaling.long_factor=" + yaml_list(long_factor));
  out.push_back(key + "scaling.short_factor=" + yaml_list(short_factor));
  out.push_back(key + "scaling.original_len=" + std::to_string(original_len));
  return out;
}
}  // namespace

void check_rope_scaling_spec(const std::string& spec) { parse_scaling(spec); }

std::vector<std::string> rope_scaling_overrides(const std::string& spec,
                                                const config::ModelConfig& m,
                                                int64_t original_len) {
  auto s = parse_scaling(spec);
  const auto& kinds = m.layout.kinds;
  const int64_t head_dim = config::head_dim_of(m);
  if (kinds.empty()) {
    if (!s.kinds.empty())
      throw UserError("--rope-scaling '" + spec + "': the model has no layout kinds to name");
    if (!rotates(m.position))
      throw UserError(std::string("--rope-scaling needs a RoPE model (its position module is ") +
                      m.position.type() + ")");
    return method_overrides(s, "model.position.", m.position, head_dim, original_len);
  }
  // By default the global RoPE kinds (no window or chunk: a local layer never sees a distance
  // beyond its span; Gemma 3 scales only its global layers), else every RoPE kind.
  std::vector<std::string> targets = s.kinds, global, every;
  for (const auto& [name, k] : kinds) {
    if (!rotates(k.position)) continue;
    every.push_back(name);
    if (model::Span::of(k, true).global()) global.push_back(name);
  }
  if (targets.empty()) targets = global.empty() ? every : global;
  if (targets.empty())
    throw UserError("--rope-scaling needs a RoPE model: none of its layout kinds rotates");
  std::vector<std::string> out;
  for (const auto& name : targets) {
    auto it = kinds.find(name);
    if (it == kinds.end())
      throw UserError("--rope-scaling '" + spec + "': the model has no layout kind '" + name + "'");
    if (!rotates(it->second.position))
      throw UserError("--rope-scaling '" + spec + "': layout kind '" + name + "' has position " +
                      it->second.position.type() + ", not rope");
    auto more = method_overrides(s, "model.layout.kinds." + name + ".position.",
                                 it->second.position, head_dim, original_len);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

bool has_rope(const config::ModelConfig& m) {
  if (m.layout.kinds.empty()) return rotates(m.position);
  return std::any_of(m.layout.kinds.begin(), m.layout.kinds.end(),
                     [](const auto& kind) { return rotates(kind.second.position); });
}

std::string rope_scaling_tag(const std::string& spec) {
  std::string t = "rope-" + spec;
  for (char& ch : t)
    if (ch == ':' || ch == '@' || ch == ',') ch = '-';
  return t;
}

std::vector<std::string> run_rope_scaling_overrides(const std::string& run_dir,
                                                    const std::string& spec) {
  if (spec.empty()) return {};
  if (!stdfs::is_regular_file(stdfs::path(run_dir) / "config.yaml"))
    throw UserError(run_dir + ": not a ropelab run (no config.yaml)");
  auto trained = config::load_config((stdfs::path(run_dir) / "config.yaml").string());
  try {
    return rope_scaling_overrides(spec, trained.model, trained.task.seq_len);
  } catch (const UserError& e) {
    throw UserError(run_dir + ": " + e.what());
  }
}

EvalReport evaluate_run(const std::string& run_dir, const std::string& split,
                        const std::vector<int64_t>& lengths, int64_t max_tokens, bool use_best,
                        const std::string& rope_scaling, bool save) {
  if (!fs::exists((stdfs::path(run_dir) / "config.yaml").string()))
    throw UserError(run_dir + ": not a ropelab run (no config.yaml)");
  fs::DirLock lock;
  if (save)
    lock = fs::DirLock::acquire(run_dir, "eval", fs::DirLock::Wait::kNo,
                                "`eval --no-save` only prints, and needs no lock");
  auto rm = run::open_trained(run_dir, run::DataUse::kOpen, use_best,
                              run_rope_scaling_overrides(run_dir, rope_scaling));
  const config::Config& c = rm.config;
  const torch::Device dev = rm.device;
  if (!rm.data->has_split(split))
    throw UserError(run_dir + ": its data has no '" + split + "' split");
  auto ds = rm.data->split(split);
  const auto& task = rm.task;
  tasks::EvalOptions o{0, dev, c.train.precision == config::Precision::kBf16, /*full=*/true};

  EvalReport r;
  r.run_dir = run_dir;
  r.checkpoint = rm.checkpoint;
  r.step = rm.step;
  r.split = split;
  r.rope_scaling = rope_scaling;
  r.train_seq_len = c.task.seq_len;
  auto full = task->evaluate(*rm.model, ds,
                             *task->stream(ds, false, c.task.seq_len, c.train.batch_size), o);
  const std::string stopped = "evaluation of " + run_dir;
  const std::string kept = "nothing written (a partial evaluation would be wrong)";
  signals::throw_if_stopped(stopped, kept);
  r.metrics = full.metrics;
  o.full = false;  // the length rows: likelihood only
  int64_t max_len = rm.model->backbone->position().max_len();
  for (int64_t L : lengths) {
    LengthRow row;
    row.length = L;
    if (max_len > 0 && L > max_len) {
      row.applicable = false;
      r.lengths.push_back(row);
      continue;
    }
    // The same token budget at every length: fewer, longer sequences.
    int64_t batch = std::max<int64_t>(1, c.train.batch_size * c.task.seq_len / L);
    std::unique_ptr<data::BatchStream> s;
    try {
      s = task->stream(ds, false, L, batch);
    } catch (const UserError& e) {
      row.applicable = false;  // the split is shorter than one window of this length
      r.lengths.push_back(row);
      continue;
    }
    o.max_batches = std::max<int64_t>(1, max_tokens / (batch * L));
    auto out = task->evaluate(*rm.model, ds, *s, o);
    signals::throw_if_stopped(stopped, kept);
    row.metrics = out.metrics;
    row.tokens = static_cast<int64_t>(out.tokens);
    r.lengths.push_back(row);
  }
  if (!save) return r;
  if (!full.predictions_file.empty()) {
    // Per split (and evaluation-time RoPE scaling, which gives other outputs).
    auto dir = stdfs::path(run_dir) / "predictions" /
               (split + (rope_scaling.empty() ? "" : "-" + rope_scaling_tag(rope_scaling)));
    fs::make_dirs(dir.string());
    r.predictions_path = (dir / full.predictions_file).string();
    auto lines = [](const std::vector<std::string>& v) {
      std::string text;
      for (const auto& line : v) text += line + "\n";
      return text;
    };
    if (stdfs::path(full.predictions_file).extension() == ".tsv") {
      // The GLUE leaderboard layout: a header, then one `index<TAB>prediction` row per example.
      std::string tsv = "index\tprediction\n";
      for (size_t i = 0; i < full.predictions.size(); ++i)
        tsv += fmt::format("{}\t{}\n", i, full.predictions[i]);
      fs::write_file_atomic(r.predictions_path, tsv);
    } else {
      fs::write_file_atomic(r.predictions_path, lines(full.predictions));
      if (!full.references.empty())
        fs::write_file_atomic((dir / "references.txt").string(), lines(full.references));
    }
  }
  nlohmann::json j;
  j["checkpoint"] = r.checkpoint;
  j["step"] = r.step;
  j["split"] = split;
  if (!rope_scaling.empty()) j["rope_scaling"] = rope_scaling;
  j["metrics"] = r.metrics;
  if (!r.predictions_path.empty()) j["predictions"] = r.predictions_path;
  for (const auto& row : r.lengths)
    j["lengths"].push_back({{"length", row.length},
                            {"applicable", row.applicable},
                            {"metrics", row.metrics},
                            {"tokens", row.tokens}});
  std::string name = "eval-" + split +
                     (rope_scaling.empty() ? "" : "-" + rope_scaling_tag(rope_scaling)) + ".json";
  fs::write_file_atomic((stdfs::path(run_dir) / name).string(), j.dump(2) + "\n");
  run::append_results(run_dir, "eval/" + stdfs::path(name).stem().string(), j, r.step);
  return r;
}

std::string format_eval(const EvalReport& r) {
  std::string s = fmt::format("run {} ({} split, {}{})\n", r.run_dir, r.split,
                              stdfs::path(r.checkpoint).filename().string(),
                              r.rope_scaling.empty() ? "" : ", RoPE scaling " + r.rope_scaling);
  s += fmt::format("  {}\n", r.metrics.empty() ? "(unlabeled split: no metrics)"
                                               : tasks::format_metrics(r.metrics));
  if (!r.predictions_path.empty()) s += fmt::format("  predictions: {}\n", r.predictions_path);
  if (r.lengths.empty()) return s;
  // Columns: whatever metrics the task reported, "loss" first.
  std::vector<std::string> names = {"loss"};
  for (const auto& [k, v] : r.metrics)
    if (k != "loss") names.push_back(k);
  s += fmt::format("\nlength extrapolation (trained at {} tokens):\n", r.train_seq_len);
  s += fmt::format("  {:>8}", "length");
  for (const auto& n : names) s += fmt::format("  {:>10}", n);
  s += fmt::format("  {:>10}\n", "tokens");
  for (const auto& row : r.lengths) {
    s += fmt::format("  {:>8}", row.length);
    for (const auto& n : names) {
      auto it = row.metrics.find(n);
      s += row.applicable && it != row.metrics.end() ? fmt::format("  {:>10.4f}", it->second)
                                                     : fmt::format("  {:>10}", "n/a");
    }
    s += row.applicable ? fmt::format("  {:>10}\n", row.tokens) : fmt::format("  {:>10}\n", "-");
  }
  return s;
}

}  // namespace ropelab::eval
