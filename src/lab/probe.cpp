#include "lab/probe.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "config/loader.h"
#include "data/synthetic.h"
#include "eval/evaluate.h"
#include "lab/stats.h"
#include "run/run.h"
#include "run/tensorboard.h"
#include "tasks/task.h"
#include "train/trainer.h"
#include "util/device.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/platform.h"
#include "util/signals.h"
#include "weights/weights.h"

namespace ropelab::lab {

namespace stdfs = std::filesystem;
using config::DataSource;

namespace {

const double kDepths[] = {0.0, 0.25, 0.5, 0.75, 1.0};

const char* size_unit(DataSource s) {
  switch (s) {
    case DataSource::kSyntheticCopy:
    case DataSource::kSyntheticReverse:
      return "symbols";
    case DataSource::kSyntheticAddition:
      return "digits";
    case DataSource::kSyntheticMqar:
      return "pairs";
    case DataSource::kSyntheticSelectiveCopy:
      return "positions";
    case DataSource::kSyntheticCounting:
      return "letters";
    case DataSource::kSyntheticFlipflop:
      return "instructions";
    default:
      return "tokens";
  }
}

nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}
double number_or_nan(const nlohmann::json& j) { return j.is_number() ? j.get<double>() : NAN; }

// Draws PATH's .png next to it; false (with a warning) when it could not.
bool draw_plot(const std::string& what, const std::string& path) {
  std::string py = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  std::string cmd = py + " " + platform::shell_quote(platform::script_path("plot_card.py")) + " " +
                    platform::shell_quote(path) + " 2>&1";
  int rc = std::system(cmd.c_str());
  if (rc == 0 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0) return true;
  spdlog::warn("the {} plot was not drawn (python3 with matplotlib is needed)", what);
  return false;
}

// Exact match (and answer-token accuracy) of a synthetic run on `examples`.
std::pair<double, double> score_examples(const tasks::Task& task, model::ModelImpl& m,
                                         const config::Config& c,
                                         const std::vector<data::synthetic::Example>& ex,
                                         torch::Device dev) {
  auto ds = data::synthetic::to_dataset(ex, "probe");
  int64_t longest = 1;
  for (const auto& e : ex)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(e.tokens.size()));
  // About the training batch's tokens per batch.
  const int64_t batch = std::max<int64_t>(1, c.train.batch_size * c.task.seq_len / longest);
  tasks::EvalOptions o{0, dev, c.train.precision == config::Precision::kBf16, /*full=*/true};
  auto out = task.evaluate(m, ds, *task.stream(ds, false, longest, batch), o);
  return {out.metrics.at("exact"), out.metrics.at("acc")};
}

ProbeReport probe_synthetic(const std::string& run_dir, const ProbeOptions& o) {
  auto rm = run::open_trained(run_dir, run::DataUse::kNone, /*best=*/true);
  const config::Config& c = rm.config;
  const torch::Device dev = rm.device;
  const auto& task = rm.task;
  const DataSource src = c.data.source;
  const int64_t L = c.data.synthetic.size, lo_min = data::synthetic::min_size(src);
  const int64_t max_len = rm.model->backbone->position().max_len();
  const bool needle = data::synthetic::has_depth(src);  // passkey, niah: a depth grid
  ProbeReport r;
  r.run_dir = run_dir;
  r.step = rm.step;
  r.task = config::to_string(src);
  r.metric = "exact";
  r.higher = true;
  r.train_size = L;
  r.size_unit = size_unit(src);
  r.multipliers = o.multipliers;
  if (needle) {
    r.depths.assign(std::begin(kDepths), std::end(kDepths));
    r.grid.assign(r.depths.size(), {});
  }
  const auto seed = static_cast<uint64_t>(c.data.synthetic.seed) ^ 0x9E0BE0ull;
  for (size_t k = 0; k < o.multipliers.size(); ++k) {
    const int64_t hi = o.multipliers[k] * L;
    r.sizes.push_back(hi);
    const bool fits = hi <= data::synthetic::max_size(src) &&
                      (max_len <= 0 || data::synthetic::max_tokens(src, hi) - 1 <= max_len);
    if (!fits) {
      r.value.push_back(NAN);
      r.token_acc.push_back(NAN);
      for (auto& row : r.grid) row.push_back(NAN);
      spdlog::info("probe {}x ({} {}): n/a", o.multipliers[k], hi, r.size_unit);
      continue;
    }
    double exact = 0, acc = 0;
    if (needle) {
      for (size_t d = 0; d < r.depths.size(); ++d) {
        auto ex = data::synthetic::make_examples(src, data::synthetic::Split::kTest, o.examples, hi,
                                                 hi, seed + 131 * k + d, r.depths[d]);
        auto [e, a] = score_examples(*task, *rm.model, c, ex, dev);
        r.grid[d].push_back(e);
        exact += e / static_cast<double>(r.depths.size());
        acc += a / static_cast<double>(r.depths.size());
      }
    } else {
      const int64_t lo = std::min(hi, std::max(lo_min, hi / 2 + 1));
      auto ex = data::synthetic::make_examples(src, data::synthetic::Split::kTest, o.examples, lo,
                                               hi, seed + 131 * k);
      std::tie(exact, acc) = score_examples(*task, *rm.model, c, ex, dev);
    }
    signals::throw_if_stopped("probe of " + run_dir, "nothing written");
    r.value.push_back(exact);
    r.token_acc.push_back(acc);
    spdlog::info("probe {}x ({} {}): exact {:.3f}, answer-token accuracy {:.3f}", o.multipliers[k],
                 hi, r.size_unit, exact, acc);
  }
  return r;
}

ProbeReport probe_text(const std::string& run_dir, const config::Config& c, const ProbeOptions& o) {
  ProbeReport r;
  r.run_dir = run_dir;
  r.task = config::to_string(c.data.source);
  r.metric = "ppl";
  r.higher = false;
  r.train_size = c.task.seq_len;
  r.size_unit = "tokens";
  r.multipliers = o.multipliers;
  std::vector<int64_t> lengths;
  for (auto m : o.multipliers) lengths.push_back(m * c.task.seq_len);
  r.sizes = lengths;
  auto rep = eval::evaluate_run(run_dir, "valid", lengths, o.eval_tokens, /*use_best=*/true);
  r.step = rep.step;
  for (const auto& row : rep.lengths) {
    auto it = row.metrics.find("ppl");
    r.value.push_back(row.applicable && it != row.metrics.end() ? it->second : NAN);
  }
  return r;
}

// Table rows are built as "| a | b | "; Markdown wants "| a | b |".
std::string trim_rows(std::string md) {
  for (size_t at = md.find(" \n"); at != std::string::npos; at = md.find(" \n", at))
    md.erase(at, 1);
  return md;
}

std::string metric_cell(double v, const std::string& metric) {
  if (!std::isfinite(v)) return "n/a";
  return metric == "exact" ? fmt::format("{:.1f}%", 100 * v) : fmt::format("{:.2f}", v);
}

}  // namespace

ProbeReport probe_run(const std::string& run_dir, const ProbeOptions& o) {
  const std::string cfg = (stdfs::path(run_dir) / "config.yaml").string();
  if (!fs::exists(cfg)) throw UserError(run_dir + ": not a ropelab run (no config.yaml)");
  auto lock = fs::DirLock::acquire(run_dir, "probe");  // it writes probe.md and probe.json
  if (o.multipliers.empty()) throw UserError("probe: give at least one size multiplier");
  for (auto m : o.multipliers)
    if (m < 1)
      throw UserError("probe: size multipliers must be >= 1 (got " + std::to_string(m) + ")");
  auto c = config::load_config(cfg);
  ProbeReport r;
  if (config::kind_of(c.data.source) == config::DataKind::kSynthetic)
    r = probe_synthetic(run_dir, o);
  else if (std::holds_alternative<config::ClmTaskConfig>(c.task.opts) ||
           std::holds_alternative<config::MlmTaskConfig>(c.task.opts))
    r = probe_text(run_dir, c, o);
  else
    throw UserError(run_dir +
                    ": probe needs a synthetic-* run (task answer) or a language model "
                    "(task clm or mlm); this run's task is " +
                    c.task.type());
  nlohmann::json j;
  j["task"] = r.task;
  j["step"] = r.step;
  j["metric"] = r.metric;
  j["higher_is_better"] = r.higher;
  j["train_size"] = r.train_size;
  j["size_unit"] = r.size_unit;
  j["multipliers"] = r.multipliers;
  j["sizes"] = r.sizes;
  for (double v : r.value) j["value"].push_back(finite_or_null(v));
  for (double v : r.token_acc) j["token_acc"].push_back(finite_or_null(v));
  if (!r.depths.empty()) {
    j["depths"] = r.depths;
    for (const auto& row : r.grid) {
      nlohmann::json jr = nlohmann::json::array();
      for (double v : row) jr.push_back(finite_or_null(v));
      j["grid"].push_back(jr);
    }
  }
  const auto dir = stdfs::path(run_dir);
  fs::write_file_atomic((dir / "probe.json").string(), j.dump(1) + "\n");
  run::append_results(run_dir, "probe", j, r.step);
  std::string md = probe_markdown(r);
  if (o.plot) {
    if (draw_plot("probe", (dir / "probe.json").string())) md += "\n![probe](probe.png)\n";
  }
  fs::write_file_atomic((dir / "probe.md").string(), md);
  return r;
}

ProbeReport read_probe(const std::string& run_dir) {
  const std::string path = (stdfs::path(run_dir) / "probe.json").string();
  if (!fs::exists(path))
    throw UserError(path + ": missing; HINT: run `ropelab probe " + run_dir + "`");
  ProbeReport r;
  try {
    auto j = nlohmann::json::parse(fs::read_file(path));
    r.run_dir = run_dir;
    r.task = j.at("task").get<std::string>();
    r.metric = j.at("metric").get<std::string>();
    r.higher = j.at("higher_is_better").get<bool>();
    r.train_size = j.at("train_size").get<int64_t>();
    r.size_unit = j.at("size_unit").get<std::string>();
    r.multipliers = j.at("multipliers").get<std::vector<int64_t>>();
    r.sizes = j.at("sizes").get<std::vector<int64_t>>();
    for (const auto& v : j.at("value")) r.value.push_back(number_or_nan(v));
    if (r.value.size() != r.multipliers.size())
      throw UserError(path + ": 'value' and 'multipliers' differ in length");
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": malformed probe report (" + e.what() + ")");
  }
  return r;
}

std::string probe_markdown(const ProbeReport& r) {
  const bool exact = r.metric == "exact";
  std::string md = fmt::format(
      "## Probe: {} ({})\n\n{}, trained at sizes up to {} {}.\n\n| | ", r.task, r.run_dir,
      exact ? "Teacher-forced exact match of whole answers on fresh test-split examples"
            : "Validation perplexity at each length, the same token budget at every length",
      r.train_size, r.size_unit);
  std::string sep = "|:--|";
  for (size_t k = 0; k < r.multipliers.size(); ++k) {
    md += fmt::format("{}x ({}) | ", r.multipliers[k], r.sizes[k]);
    sep += "--:|";
  }
  md += "\n" + sep + "\n| " + (exact ? "exact match" : "perplexity") + " | ";
  for (double v : r.value) md += metric_cell(v, r.metric) + " | ";
  md += "\n";
  if (!r.token_acc.empty()) {
    md += "| answer-token accuracy | ";
    for (double v : r.token_acc) md += metric_cell(v, "exact") + " | ";
    md += "\n";
  }
  if (!r.depths.empty()) {
    md +=
        "\nExact match by the needle's depth (rows) and prompt length in tokens (columns):\n\n| "
        "depth | ";
    for (auto s : r.sizes) md += fmt::format("{} | ", s);
    md += "\n" + sep + "\n";
    for (size_t d = 0; d < r.depths.size(); ++d) {
      md += fmt::format("| {:.2f} | ", r.depths[d]);
      for (double v : r.grid[d]) md += metric_cell(v, "exact") + " | ";
      md += "\n";
    }
  }
  return trim_rows(md);
}

int64_t effective_multiplier(const std::vector<double>& means, const std::vector<int64_t>& mult,
                             bool higher) {
  if (means.empty() || mult.empty() || !std::isfinite(means[0])) return 0;
  if (higher && means[0] < 0.1) return 0;
  int64_t best = 0;
  for (size_t k = 0; k < means.size() && k < mult.size(); ++k) {
    const double v = means[k];
    const bool kept = std::isfinite(v) && (higher ? v >= 0.85 * means[0] : means[0] >= 0.85 * v);
    if (!kept) break;
    best = mult[k];
  }
  return best;
}

std::string card_markdown(const std::vector<CardEntry>& entries, const std::string& baseline) {
  std::vector<std::string> tasks, variants;
  for (const auto& e : entries) {
    if (std::find(tasks.begin(), tasks.end(), e.report.task) == tasks.end())
      tasks.push_back(e.report.task);
    if (std::find(variants.begin(), variants.end(), e.variant) == variants.end())
      variants.push_back(e.variant);
  }
  const std::string base = baseline.empty() && !variants.empty() ? variants[0] : baseline;
  std::string md =
      "\n## Length-generalisation card\n\nEach cell: mean ± sample std over seeds (n in "
      "brackets when below the most). Synthetic tasks: teacher-forced exact match of whole "
      "answers, at 1x the training size and beyond (higher is better); text: validation "
      "perplexity at 1x-8x the training length (lower is better). `*`: differs from " +
      base +
      " with p < 0.05 in a paired t-test over seeds. n/a: a size the model cannot read (beyond a "
      "learned position table). effective: the longest multiplier up to which the mean stays at "
      "least 85% of its 1x score (NoLiMa's effective length; -: nothing learned at 1x).\n";
  for (const auto& t : tasks) {
    // (variant, multiplier) -> seed -> value
    std::map<std::string, std::vector<std::map<int64_t, double>>> vals;
    const ProbeReport* any = nullptr;
    size_t most = 0;
    for (const auto& e : entries) {
      if (e.report.task != t) continue;
      any = &e.report;
      auto& v = vals[e.variant];
      v.resize(e.report.value.size());
      for (size_t k = 0; k < e.report.value.size(); ++k)
        if (std::isfinite(e.report.value[k])) v[k][e.seed] = e.report.value[k];
      for (const auto& m : v) most = std::max(most, m.size());
    }
    if (any == nullptr) continue;
    md += fmt::format("\n### {} ({}, trained up to {} {})\n\n| variant | ", t,
                      any->higher ? "exact match" : "perplexity", any->train_size, any->size_unit);
    std::string sep = "|:--|";
    for (size_t k = 0; k < any->multipliers.size(); ++k) {
      md += fmt::format("{}x ({}) | ", any->multipliers[k], any->sizes[k]);
      sep += "--:|";
    }
    md += "effective |\n" + sep + "--:|\n";
    for (const auto& v : variants) {
      auto it = vals.find(v);
      if (it == vals.end()) continue;
      md += "| " + v + " | ";
      std::vector<double> means;
      for (size_t k = 0; k < it->second.size(); ++k) {
        const auto& by_seed = it->second[k];
        std::vector<double> x;
        for (const auto& [s, val] : by_seed) x.push_back(val);
        if (x.empty()) {
          md += "n/a | ";
          means.push_back(NAN);
          continue;
        }
        auto s = stats::summarize(x);
        means.push_back(s.mean);
        const bool pct = any->metric == "exact";
        const double f = pct ? 100 : 1;
        std::string c = x.size() > 1 ? fmt::format(pct ? "{:.1f} ± {:.1f}" : "{:.2f} ± {:.2f}",
                                                   f * s.mean, f * s.sd)
                                     : fmt::format(pct ? "{:.1f}" : "{:.2f}", f * s.mean);
        if (x.size() < most) c += fmt::format(" ({})", x.size());
        // Paired against the baseline over the seeds both have.
        auto b = vals.find(base);
        if (v != base && b != vals.end() && k < b->second.size()) {
          std::vector<double> xs, bs;
          for (const auto& [seed, val] : by_seed) {
            auto bi = b->second[k].find(seed);
            if (bi != b->second[k].end()) xs.push_back(val), bs.push_back(bi->second);
          }
          if (xs.size() >= 2 && stats::paired_t(xs, bs).p < 0.05) c += " *";
        }
        md += c + " | ";
      }
      const int64_t eff = effective_multiplier(means, any->multipliers, any->higher);
      md += (eff > 0 ? std::to_string(eff) + "x" : std::string("-")) + " |\n";
    }
  }
  return trim_rows(md);
}

std::string write_card(const std::vector<CardEntry>& entries, const std::string& baseline,
                       const std::string& out_dir, bool plot) {
  nlohmann::json j;
  j["entries"] = nlohmann::json::array();
  for (const auto& e : entries) {
    nlohmann::json v = nlohmann::json::array();
    for (double x : e.report.value) v.push_back(finite_or_null(x));
    j["entries"].push_back({{"variant", e.variant},
                            {"seed", e.seed},
                            {"task", e.report.task},
                            {"metric", e.report.metric},
                            {"train_size", e.report.train_size},
                            {"size_unit", e.report.size_unit},
                            {"multipliers", e.report.multipliers},
                            {"value", v}});
  }
  fs::make_dirs(out_dir);
  const auto dir = stdfs::path(out_dir);
  fs::write_file_atomic((dir / "card.json").string(), j.dump(1) + "\n");
  std::string md = card_markdown(entries, baseline);
  if (plot) {
    if (draw_plot("card", (dir / "card.json").string()))
      md += "\n![length-generalisation card](card.png)\n";
  }
  fs::write_file_atomic((dir / "card.md").string(), md);
  return md;
}

}  // namespace ropelab::lab
