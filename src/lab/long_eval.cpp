// An experiment's sliding-window perplexity and passkey tables (lab/long_eval.h); with seeds,
// means and paired t-tests over them (lab/stats.h: the same seed gives two variants the same
// pretraining, data order and initialisation, so per-seed differences pair).
#include "lab/long_eval.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <variant>

#include "config/loader.h"
#include "eval/evaluate.h"
#include "eval/long_context.h"
#include "lab/compare.h"
#include "lab/stats.h"
#include "util/fs.h"
#include "util/platform.h"
#include "util/signals.h"

namespace ropelab::lab {

namespace stdfs = std::filesystem;

namespace {

using Measured = SlidingResult;

struct Context {  // what the tables' captions say
  int64_t train_len = 0, stride = 0, doc_tokens = 0, documents = 0;
  std::string split = "test";
};

// The evaluation-time scalings of a run: eval_rope_scaling applies to RoPE runs trained without
// a scaling of their own and not started from another run (the pretrained models).
std::vector<std::string> scaling_specs(const config::Experiment& exp, const config::Config& c) {
  std::vector<std::string> specs = {""};
  const auto* rope = std::get_if<config::RopeConfig>(&c.model.position.opts);
  const bool scaled = rope != nullptr && std::string(rope->scaling.type()) != "none";
  if (eval::has_rope(c.model) && !scaled && c.task.init_from.empty())
    specs.insert(specs.end(), exp.eval_rope_scaling.begin(), exp.eval_rope_scaling.end());
  return specs;
}

std::vector<double> passkey_accuracy(const config::Experiment& exp, const std::string& dir,
                                     const std::string& spec) {
  eval::PasskeyOptions o;
  o.lengths = exp.eval_windows;
  o.trials = exp.eval_passkey;
  o.short_na = true;
  o.source.rope_scaling = spec;
  auto rep = eval::passkey_retrieval(dir, o);
  std::vector<double> acc;
  for (int64_t L : exp.eval_windows) {
    int64_t correct = 0, trials = 0;
    for (const auto& cell : rep.cells)
      if (cell.length == L && cell.applicable) correct += cell.correct, trials += cell.trials;
    acc.push_back(trials > 0 ? static_cast<double>(correct) / static_cast<double>(trials) : NAN);
  }
  return acc;
}

// Run `dir` (its config `c`, already loaded) with `spec`'s scaling switched on (none: "").
Measured measure(const config::Experiment& exp, const std::string& dir, const config::Config& c,
                 const std::string& spec, Context& ctx) {
  spdlog::info("=== perplexity: {}{} ===", dir, spec.empty() ? "" : " + " + spec);
  eval::PerplexityOptions o;
  // The test split, or the validation split of your own text without a test file.
  o.split = config::is_builtin(c.data.source) || !c.data.test.empty() ? "test" : "valid";
  o.windows = exp.eval_windows;
  o.stride = exp.eval_stride;
  o.doc_tokens = exp.eval_doc_tokens;
  o.source.rope_scaling = spec;
  auto rep = eval::sliding_perplexity(dir, o);
  ctx.split = o.split;
  ctx.stride = rep.stride, ctx.doc_tokens = rep.doc_tokens, ctx.documents = rep.documents;
  Measured m;
  const std::string name = stdfs::path(dir).filename().string();
  const std::string suffix = spec.empty() ? "" : " + " + spec;
  m.label = name + suffix;
  m.row = std::regex_replace(name, std::regex(R"(\.seed[0-9]+$)"), "") + suffix;
  m.seed = c.run.seed;
  for (const auto& row : rep.rows) m.nll.push_back(row.applicable ? row.nll : NAN);
  if (exp.eval_passkey > 0) {
    spdlog::info("=== passkey: {}{} ===", dir, suffix);
    m.passkey = passkey_accuracy(exp, dir, spec);
  }
  signals::throw_if_stopped("ablation (long-document evaluation of " + dir + ")",
                            "every run is trained; run the same command again to finish");
  return m;
}

// Rows in order of first appearance, each with its seeds' values of `field` (a callable such as
// std::mem_fn(&Measured::nll): the member-pointer type itself formats differently in
// clang-format 14 and 19).
using BySeed = std::vector<std::pair<std::string, std::vector<std::map<int64_t, double>>>>;
template <class Field>
BySeed by_row(const std::vector<Measured>& ms, Field field, size_t width) {
  BySeed out;
  for (const auto& m : ms) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& r) { return r.first == m.row; });
    if (it == out.end()) {
      out.push_back({m.row, std::vector<std::map<int64_t, double>>(width)});
      it = std::prev(out.end());
    }
    const std::vector<double>& v = field(m);
    for (size_t i = 0; i < width && i < v.size(); ++i)
      if (std::isfinite(v[i])) it->second[i][m.seed] = v[i];
  }
  return out;
}

double mean_of(const std::map<int64_t, double>& m) {
  if (m.empty()) return NAN;
  double s = 0;
  for (const auto& [seed, v] : m) s += v;
  return s / static_cast<double>(m.size());
}

std::vector<LengthResult> means(const BySeed& rows) {
  std::vector<LengthResult> out;
  for (const auto& [row, cells] : rows) {
    LengthResult r{row, {}};
    for (const auto& cell : cells) r.loss.push_back(mean_of(cell));
    out.push_back(std::move(r));
  }
  return out;
}

// Each row against a reference row per window: the mean per-seed difference and the paired
// t-test's p over the seeds both have. `reference(i)` names the reference row at window i.
template <class Ref>
std::string paired_table(const BySeed& rows, const std::vector<int64_t>& windows, Ref reference) {
  std::string md = "| row |";
  for (auto w : windows) md += fmt::format(" {} |", w);
  md += "\n|:--|";
  for (size_t i = 0; i < windows.size(); ++i) md += "--:|";
  md += "\n";
  for (const auto& [row, cells] : rows) {
    md += "| " + row + " |";
    for (size_t i = 0; i < windows.size(); ++i) {
      const std::string ref = reference(i);
      auto base =
          std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.first == ref; });
      if (row == ref || base == rows.end()) {
        md += row == ref ? " (reference) |" : " - |";
        continue;
      }
      std::vector<double> x, b;
      for (const auto& [seed, v] : cells[i]) {
        auto bj = base->second[i].find(seed);
        if (bj != base->second[i].end()) x.push_back(v), b.push_back(bj->second);
      }
      if (x.size() < 2) {
        md += " - |";
        continue;
      }
      auto p = stats::paired_t(x, b);
      md += fmt::format(" {:+.3f} (p {:.2g}){} |", p.mean_diff, p.p, p.p < 0.05 ? " *" : "");
    }
    md += "\n";
  }
  return md;
}

std::string seed_tables(const BySeed& rows, const std::vector<int64_t>& windows,
                        const std::string& baseline, int64_t train_len) {
  std::string md = "\n### Means over seeds\n\nMean NLL of each row over its seeds.\n\n" +
                   length_table(means(rows), windows, train_len);
  if (std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r.first == baseline; }) !=
      rows.end()) {
    md += "\n### Paired tests against `" + baseline +
          "`\n\nThe mean per-seed difference in NLL (negative: lower than the reference) and "
          "the two-sided p of a paired t-test over the seeds both have. * marks p < 0.05.\n\n";
    md += paired_table(rows, windows, [&](size_t) { return baseline; });
  }
  auto m = means(rows);
  md +=
      "\n### Paired tests against the best row of each window\n\nAs above, against the row "
      "with the lowest mean NLL at that window: which methods the seeds cannot separate.\n\n";
  md += paired_table(rows, windows, [&](size_t i) {
    std::string best;
    double bv = INFINITY;
    for (const auto& r : m)
      if (std::isfinite(r.loss[i]) && r.loss[i] < bv) bv = r.loss[i], best = r.label;
    return best;
  });
  return md;
}

std::string passkey_section(const BySeed& rows, const std::vector<int64_t>& windows, int64_t trials,
                            int64_t train_len) {
  std::string md = fmt::format(
      "\n## Zero-shot passkey retrieval\n\nAccuracy of the greedy answer to the passkey prompt "
      "(`ropelab passkey`: 5 depths, {} keys each), by prompt length, the mean over seeds. "
      "n/a: a length that cannot hold the prompt's fixed parts, or beyond a learned position "
      "table.\n\n| row |",
      trials);
  for (auto w : windows) md += fmt::format(" {}{} |", w, w == train_len ? " (trained)" : "");
  md += "\n|:--|";
  for (size_t i = 0; i < windows.size(); ++i) md += "--:|";
  md += "\n";
  for (const auto& r : means(rows)) {
    md += "| " + r.label + " |";
    for (double v : r.loss) md += std::isfinite(v) ? fmt::format(" {:.2f} |", v) : " n/a |";
    md += "\n";
  }
  return md;
}

nlohmann::json to_json(const std::vector<Measured>& ms, const BySeed& rows,
                       const std::vector<int64_t>& windows, const Context& ctx) {
  auto arr = [](const std::vector<double>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (double x : v) a.push_back(std::isfinite(x) ? nlohmann::json(x) : nlohmann::json());
    return a;
  };
  nlohmann::json j;
  j["windows"] = windows;
  j["lengths"] = windows;  // for plot_lengths.py
  j["train_len"] = ctx.train_len;
  j["stride"] = ctx.stride;
  j["doc_tokens"] = ctx.doc_tokens;
  j["documents"] = ctx.documents;
  j["split"] = ctx.split;
  for (const auto& m : ms)
    j["runs"].push_back({{"label", m.label},
                         {"row", m.row},
                         {"seed", m.seed},
                         {"nll", arr(m.nll)},
                         {"passkey", arr(m.passkey)}});
  for (const auto& r : means(rows))
    j["rows"].push_back({{"label", r.label}, {"loss", arr(r.loss)}});
  return j;
}

std::string plot(const std::string& out_dir) {
  std::string py = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  std::string cmd = py + " " + platform::shell_quote(platform::script_path("plot_lengths.py")) +
                    " " + platform::shell_quote(out_dir) + " perplexity 2>&1";
  int rc = std::system(cmd.c_str());
  if (rc != 0 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    spdlog::warn("the perplexity plot was not drawn (python3 with matplotlib is needed)");
    return "";
  }
  return "\n![NLL by window](perplexity_by_window.png)\n";
}

}  // namespace

std::string sliding_seed_tables(const std::vector<SlidingResult>& results,
                                const std::vector<int64_t>& windows, const std::string& baseline,
                                int64_t train_len) {
  return seed_tables(by_row(results, std::mem_fn(&SlidingResult::nll), windows.size()), windows,
                     baseline, train_len);
}

std::string evaluate_sliding(const config::Experiment& exp, const std::vector<std::string>& dirs,
                             const std::string& out_dir, bool plots) {
  std::vector<Measured> ms;
  Context ctx;
  for (const auto& d : dirs) {
    auto c = config::load_config((stdfs::path(d) / "config.yaml").string());
    if (c.model.arch != config::Arch::kDecoder ||
        config::kind_of(c.data.source) != config::DataKind::kLm)
      continue;  // perplexity is a causal LM's
    ctx.train_len = ctx.train_len == 0 ? c.task.seq_len : std::min(ctx.train_len, c.task.seq_len);
    for (const auto& spec : scaling_specs(exp, c)) ms.push_back(measure(exp, d, c, spec, ctx));
  }
  if (ms.empty()) {
    spdlog::warn("eval_windows: no run is a causal LM on language-model text; no perplexity");
    return "";
  }
  std::vector<LengthResult> runs;
  runs.reserve(ms.size());
  for (const auto& m : ms) runs.push_back({m.label, m.nll});
  const auto nll_rows = by_row(ms, std::mem_fn(&Measured::nll), exp.eval_windows.size());
  const bool seeds = nll_rows.size() < ms.size();
  std::string md = fmt::format(
      "\n## Sliding-window perplexity on long documents\n\nNLL on the {} split (nats/token, lower "
      "is better) by window size: windows start every {} tokens and each token is scored once, "
      "with up to the window before it; the first {} tokens of each of {} documents, the same "
      "tokens in every column. `+ METHOD:FACTOR` rows switch that RoPE scaling on at evaluation "
      "time only; ppl = exp(NLL). n/a: beyond a learned position table.\n\n",
      ctx.split, ctx.stride, ctx.doc_tokens, ctx.documents);
  std::string summary = md;  // for compare.md: the means and tests when there are seeds
  md += length_table(runs, exp.eval_windows, ctx.train_len);
  if (seeds) {
    const std::string base = exp.baseline.empty() ? nll_rows.front().first : exp.baseline;
    std::string tables = seed_tables(nll_rows, exp.eval_windows, base, ctx.train_len);
    md += tables;
    summary += "Every run's row is in perplexity.md.\n" + tables;
  } else {
    summary = md;
  }
  if (exp.eval_passkey > 0) {
    std::string pk =
        passkey_section(by_row(ms, std::mem_fn(&Measured::passkey), exp.eval_windows.size()),
                        exp.eval_windows, exp.eval_passkey, ctx.train_len);
    md += pk, summary += pk;
  }
  fs::make_dirs(out_dir);
  fs::write_file_atomic((stdfs::path(out_dir) / "perplexity.json").string(),
                        to_json(ms, nll_rows, exp.eval_windows, ctx).dump(1) + "\n");
  fs::write_file_atomic((stdfs::path(out_dir) / "perplexity.md").string(), md);
  std::printf("%s\nwrote %s\n", md.c_str(),
              (stdfs::path(out_dir) / "perplexity.md").string().c_str());
  if (plots) summary += plot(out_dir);
  return summary;
}

}  // namespace ropelab::lab
