#include "lab/compare.h"

#include <spdlog/spdlog.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <tuple>

#include "config/loader.h"
#include "eval/evaluate.h"
#include "lab/long_eval.h"
#include "lab/probe.h"
#include "lab/stats.h"
#include "lab/translation_tests.h"
#include "train/config_history.h"
#include "train/metrics.h"
#include "train/trainer.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/platform.h"
#include "util/progress.h"
#include "util/signals.h"
#include "weights/checkpoint.h"

#include <nlohmann/json.hpp>

namespace ropelab::lab {

namespace stdfs = std::filesystem;

RunSummary summarize_run(const std::string& run_dir, double target_loss) {
  auto m = train::read_run_metrics(run_dir);
  RunSummary r;
  r.dir = run_dir;
  auto& attrs = m.attrs;
  r.name = attrs.count("name") != 0 ? attrs["name"] : stdfs::path(run_dir).filename().string();
  r.position = attrs["position"];
  // A run whose positions changed from its task.init_from: "rope; yarn x4 from runs/ref (step 400)"
  if (attrs.count("origin") != 0 && !attrs["origin"].empty()) r.position += "; " + attrs["origin"];
  r.attention = attrs["attention"];
  r.task = attrs["task"];
  r.params = attrs.count("params") != 0 ? std::stod(attrs["params"]) : NAN;
  if (m.writer) r.live = m.writer->describe();
  r.config_changes = train::read_config_history(run_dir);
  auto& tr = m.train;
  auto& va = m.valid;
  if (!tr["step"].empty()) {
    r.steps = static_cast<int64_t>(tr["step"].back());
    r.tokens = tr["tokens"].back();
    auto tps = tr["tokens_per_s"];
    if (tps.size() > 1) tps.erase(tps.begin());  // the first window includes start-up
    std::sort(tps.begin(), tps.end());
    if (!tps.empty()) r.tokens_per_s = tps[tps.size() / 2];
  }
  std::string test_json = (stdfs::path(run_dir) / "eval-test.json").string();
  if (fs::exists(test_json)) {
    auto j = nlohmann::json::parse(fs::read_file(test_json));
    for (const auto& [k, v] : j.at("metrics").items()) r.test_metrics[k] = v.get<double>();
  }
  const auto& vl = va["loss"];
  if (!vl.empty()) {
    r.final_valid = vl.back();
    r.best_valid = *std::min_element(vl.begin(), vl.end());
    for (const auto& [name, series] : va)
      if (name != "loss" && name != "step" && name != "tokens" && name != "lr" &&
          name != "tokens_per_s" && !series.empty())
        r.final_metrics[name] = series.back();
    if (target_loss > 0)
      for (size_t i = 0; i < vl.size(); ++i)
        if (vl[i] <= target_loss) {
          r.steps_to_target = va["step"][i];
          r.tokens_to_target = va["tokens"][i];
          break;
        }
  }
  return r;
}

namespace {
std::string num(double v, const char* f = "{:.4f}") {
  return std::isnan(v) ? "-" : fmt::format(fmt::runtime(f), v);
}
std::string si(double v) {
  if (std::isnan(v)) return "-";
  if (v >= 1e9) return fmt::format("{:.2f}G", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}
}  // namespace

std::string format_table(const std::vector<RunSummary>& runs, double target_loss, bool md) {
  std::vector<std::string> metrics;  // every metric any run logged, in name order
  for (const auto& r : runs)
    for (const auto& [name, v] : r.final_metrics)
      if (std::find(metrics.begin(), metrics.end(), name) == metrics.end()) metrics.push_back(name);
  std::sort(metrics.begin(), metrics.end());
  std::vector<std::string> test_metrics = {"loss"};  // loss first, then the rest by name
  for (const auto& r : runs)
    for (const auto& [name, v] : r.test_metrics)
      if (std::find(test_metrics.begin(), test_metrics.end(), name) == test_metrics.end())
        test_metrics.push_back(name);
  bool any_test = std::any_of(runs.begin(), runs.end(),
                              [](const RunSummary& r) { return !r.test_metrics.empty(); });
  if (!any_test) test_metrics.clear();
  std::vector<std::string> head = {"run",   "position", "attention",        "params",
                                   "steps", "tokens",   "final valid loss", "best valid loss"};
  for (const auto& m : metrics) head.push_back("valid " + m);
  for (const auto& m : test_metrics) head.push_back("test " + m);
  head.push_back("tokens/s");
  if (target_loss > 0) {
    head.push_back(fmt::format("steps to {:.2f}", target_loss));
    head.push_back(fmt::format("tokens to {:.2f}", target_loss));
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : runs) {
    std::string name =
        r.name + (r.config_changes.empty() ? "" : " †") + (r.live.empty() ? "" : " (training)");
    std::vector<std::string> row = {
        name,         r.position,         r.attention,      si(r.params), std::to_string(r.steps),
        si(r.tokens), num(r.final_valid), num(r.best_valid)};
    for (const auto& m : metrics) {
      auto it = r.final_metrics.find(m);
      double v = it == r.final_metrics.end() ? NAN : it->second;
      row.push_back(num(v, std::abs(v) >= 100 ? "{:.2f}" : "{:.4f}"));
    }
    for (const auto& m : test_metrics) {
      auto it = r.test_metrics.find(m);
      double v = it == r.test_metrics.end() ? NAN : it->second;
      row.push_back(num(v, std::abs(v) >= 100 ? "{:.2f}" : "{:.4f}"));
    }
    row.push_back(si(r.tokens_per_s));
    if (target_loss > 0) {
      row.push_back(std::isnan(r.steps_to_target) ? "not reached"
                                                  : num(r.steps_to_target, "{:.0f}"));
      row.push_back(std::isnan(r.tokens_to_target) ? "not reached" : si(r.tokens_to_target));
    }
    rows.push_back(row);
  }
  std::vector<size_t> w(head.size());
  for (size_t i = 0; i < head.size(); ++i) {
    w[i] = head[i].size();
    for (const auto& row : rows) w[i] = std::max(w[i], row[i].size());
  }
  std::string s;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      bool left = i < 3;
      std::string cell =
          left ? fmt::format("{:<{}}", cells[i], w[i]) : fmt::format("{:>{}}", cells[i], w[i]);
      s += md ? "| " + cell + " " : (i ? "  " : "") + cell;
    }
    s += md ? "|\n" : "\n";
  };
  line(head);
  if (md) {
    for (size_t i = 0; i < head.size(); ++i)
      s += "|" + std::string(i < 3 ? ":" : "") + std::string(w[i] + 1, '-') + (i < 3 ? "" : ":");
    s += "|\n";
  } else {
    size_t total = 0;
    for (auto x : w) total += x + 2;
    s += std::string(total - 2, '-') + "\n";
  }
  for (const auto& row : rows) line(row);
  // What the marks say: a config changed on resume (config_history.yaml), a run still training.
  std::string notes;
  for (const auto& r : runs) {
    if (!r.config_changes.empty()) {
      notes +=
          fmt::format("{}† {}: config changed on resume ({}/config_history.yaml): ", md ? "- " : "",
                      r.name, r.dir);
      for (size_t i = 0; i < r.config_changes.size(); ++i)
        notes += (i ? "; " : "") + r.config_changes[i];
      notes += "\n";
    }
    if (!r.live.empty())
      notes += fmt::format(
          "{}{} (training): being written by {}; its rows so far, from "
          "metrics.jsonl\n",
          md ? "- " : "", r.name, r.live);
  }
  if (!notes.empty()) s += "\n" + notes;
  return s;
}

namespace {
std::string plot_script() { return platform::script_path("plot_runs.py"); }

std::string python() { return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }

// The run directories as a script's arguments: runs still being trained (metrics.jsonl only)
// named by --live first.
std::string run_args(const std::vector<std::string>& run_dirs,
                     const std::vector<RunSummary>& runs) {
  std::string args;
  for (size_t i = 0; i < run_dirs.size(); ++i)
    if (!runs[i].live.empty()) args += " --live " + platform::shell_quote(run_dirs[i]);
  for (const auto& d : run_dirs) args += " " + platform::shell_quote(d);
  return args;
}

bool script_ok(int rc) { return rc == 0 || (WIFEXITED(rc) && WEXITSTATUS(rc) == 0); }

// report.html beside compare.md (scripts/report_html.py): the curves, interactive, and compare.md
// rendered, in one self-contained page. Returns its path, or "" with a warning.
std::string write_report(const std::vector<std::string>& run_dirs,
                         const std::vector<RunSummary>& runs, const CompareOptions& o) {
  const auto md = (stdfs::path(o.out_dir) / "compare.md").string();
  std::string cmd = python() + " " +
                    platform::shell_quote(platform::script_path("report_html.py")) + " --out " +
                    platform::shell_quote(o.out_dir) + " --markdown " + platform::shell_quote(md) +
                    fmt::format(" --smooth {}", o.smoothing) + run_args(run_dirs, runs);
  if (!script_ok(std::system((cmd + " 2>&1").c_str()))) {
    spdlog::warn(
        "report.html was not written (python3 with h5py and markdown, and Debian's "
        "libjs-chart.js, are needed: bash scripts/setup.sh installs them)");
    return "";
  }
  return (stdfs::path(o.out_dir) / "report.html").string();
}
}  // namespace

void compare_runs(const std::vector<std::string>& run_dirs, const CompareOptions& o) {
  if (run_dirs.empty()) throw UserError("compare: give at least one run directory");
  std::vector<RunSummary> runs;
  runs.reserve(run_dirs.size());
  for (const auto& d : run_dirs) runs.push_back(summarize_run(d, o.target_loss));
  std::string text = format_table(runs, o.target_loss, false);
  std::string md = "# Comparison\n\n" + format_table(runs, o.target_loss, true);
  fs::make_dirs(o.out_dir);
  std::printf("\n%s\n", text.c_str());
  std::vector<std::string> outputs = {(stdfs::path(o.out_dir) / "compare.md").string()};
  if (o.plots) {
    std::string cmd = python() + " " + platform::shell_quote(plot_script()) + " --out " +
                      platform::shell_quote(o.out_dir) + fmt::format(" --smooth {}", o.smoothing) +
                      run_args(run_dirs, runs);
    if (!script_ok(std::system((cmd + " 2>&1").c_str()))) {
      spdlog::warn(
          "plots were not drawn (python3 with matplotlib and h5py is needed: "
          "bash scripts/setup.sh installs them)");
    } else {
      for (const char* f : {"loss_by_step.png", "loss_by_tokens.png"}) {
        outputs.push_back((stdfs::path(o.out_dir) / f).string());
        md += fmt::format("\n![{}]({})\n", f, f);
      }
    }
  }
  if (o.probe_card) {
    std::vector<CardEntry> entries;
    for (size_t i = 0; i < run_dirs.size(); ++i)
      if (fs::exists((stdfs::path(run_dirs[i]) / "probe.json").string()))
        entries.push_back({runs[i].name, 0, read_probe(run_dirs[i])});
    if (!entries.empty()) {
      md += write_card(entries, "", o.out_dir, o.plots);
      outputs.push_back((stdfs::path(o.out_dir) / "card.md").string());
    }
  }
  if (o.paired_translation) {
    std::vector<PairedSystem> systems;
    for (size_t i = 0; i < run_dirs.size(); ++i)
      if (runs[i].task == "translation") systems.push_back({runs[i].name, {run_dirs[i]}});
    if (auto tests = translation_tests(systems); !tests.empty()) {
      std::printf("%s\n", tests.c_str());
      md += tests;
    }
  }
  fs::write_file_atomic(outputs[0], md + o.extra_md);
  if (o.plots)
    if (auto report = write_report(run_dirs, runs, o); !report.empty()) outputs.push_back(report);
  for (const auto& f : outputs) std::printf("wrote %s\n", f.c_str());
}

std::string length_table(const std::vector<LengthResult>& rows, const std::vector<int64_t>& lengths,
                         int64_t train_len) {
  std::string md = "| run |";
  for (auto L : lengths) {
    double m = static_cast<double>(L) / static_cast<double>(train_len);
    md += fmt::format(" {} ({}×{}) |", L,
                      m == std::floor(m) ? fmt::format("{}", m) : fmt::format("{:.2f}", m),
                      L == train_len ? ", trained" : "");
  }
  md += "\n|:--|";
  for (size_t i = 0; i < lengths.size(); ++i) md += "--:|";
  md += "\n";
  std::vector<double> best(lengths.size(), INFINITY);
  for (const auto& r : rows)
    for (size_t i = 0; i < lengths.size() && i < r.loss.size(); ++i)
      if (std::isfinite(r.loss[i])) best[i] = std::min(best[i], r.loss[i]);
  for (const auto& r : rows) {
    md += "| " + r.label + " |";
    for (size_t i = 0; i < lengths.size(); ++i) {
      double v = i < r.loss.size() ? r.loss[i] : NAN;
      if (!std::isfinite(v)) {
        md += " n/a |";
        continue;
      }
      std::string cell = fmt::format("{:.3f}", v);
      md += v == best[i] ? " **" + cell + "** |" : " " + cell + " |";
    }
    md += "\n";
  }
  return md;
}

namespace {
// After training: every run's validation loss at the experiment's eval_lengths, RoPE runs also
// with each evaluation-time scaling. Writes lengths.md, lengths.json and loss_by_length.png;
// returns the Markdown section for compare.md.
std::string evaluate_lengths(const config::Experiment& exp, const std::vector<std::string>& dirs,
                             const std::string& out_dir, bool plots) {
  std::vector<LengthResult> rows;
  nlohmann::json j;
  int64_t train_len = 0;
  for (const auto& d : dirs) {
    auto c = config::load_config((stdfs::path(d) / "config.yaml").string());
    if (config::kind_of(c.data.source) == config::DataKind::kSynthetic) continue;  // probe's job
    train_len = c.task.seq_len;
    std::vector<std::string> specs = {""};
    if (eval::has_rope(c.model))
      specs.insert(specs.end(), exp.eval_rope_scaling.begin(), exp.eval_rope_scaling.end());
    for (const auto& spec : specs) {
      spdlog::info("=== lengths: {}{} ===", d, spec.empty() ? "" : " + " + spec);
      auto rep = eval::evaluate_run(d, "valid", exp.eval_lengths, exp.eval_tokens, true, spec);
      signals::throw_if_stopped("ablation (length evaluation of " + d + ")",
                                "every run is trained; run the same command again to finish");
      LengthResult r;
      r.label = stdfs::path(d).filename().string() + (spec.empty() ? "" : " + " + spec);
      nlohmann::json losses = nlohmann::json::array();
      for (const auto& row : rep.lengths) {
        auto it = row.metrics.find("loss");
        double v = row.applicable && it != row.metrics.end() ? it->second : NAN;
        r.loss.push_back(v);
        losses.push_back(std::isfinite(v) ? nlohmann::json(v) : nlohmann::json());
      }
      j["rows"].push_back({{"label", r.label}, {"loss", losses}});
      rows.push_back(std::move(r));
    }
  }
  j["train_len"] = train_len;
  j["lengths"] = exp.eval_lengths;
  std::string md = fmt::format(
      "\n## Length generalisation\n\nValidation loss (nats/token, lower is better) of each run "
      "at each evaluation length, {} tokens per length (fewer, longer sequences as the length "
      "grows); `+ METHOD:FACTOR` rows switch that RoPE context extension on at evaluation time "
      "only. n/a: beyond a learned position table.\n\n",
      exp.eval_tokens);
  md += length_table(rows, exp.eval_lengths, train_len);
  fs::make_dirs(out_dir);
  fs::write_file_atomic((stdfs::path(out_dir) / "lengths.json").string(), j.dump(1) + "\n");
  fs::write_file_atomic((stdfs::path(out_dir) / "lengths.md").string(), md);
  std::printf("%s\nwrote %s\n", md.c_str(), (stdfs::path(out_dir) / "lengths.md").string().c_str());
  if (plots) {
    std::string py = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
    std::string cmd = py + " " + platform::shell_quote(platform::script_path("plot_lengths.py")) +
                      " " + platform::shell_quote(out_dir) + " 2>&1";
    int rc = std::system(cmd.c_str());
    if (rc != 0 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0)
      spdlog::warn("the length plot was not drawn (python3 with matplotlib is needed)");
    else
      md += "\n![loss by length](loss_by_length.png)\n";
  }
  return md;
}
}  // namespace

namespace {
// With several seeds: per task, each variant at its best setting (best mean) with a 95%
// interval, and a paired t-test against the baseline variant over the seeds both have.
std::string seed_statistics(const std::vector<std::string>& tasks,
                            const std::vector<std::string>& variants,
                            const std::vector<std::string>& settings,
                            const std::map<std::tuple<std::string, std::string, std::string>,
                                           std::map<int64_t, double>>& by_seed,
                            std::map<std::string, std::pair<std::string, bool>>& task_metric,
                            const std::string& baseline) {
  auto values = [](const std::map<int64_t, double>& m) {
    std::vector<double> v;
    for (const auto& [seed, x] : m) v.push_back(x);
    return v;
  };
  bool several = std::any_of(by_seed.begin(), by_seed.end(),
                             [](const auto& kv) { return kv.second.size() > 1; });
  if (!several) return "";
  const std::string base = baseline.empty() ? variants.front() : baseline;
  std::string md =
      "\n## Seeds: 95% intervals and paired tests\n\nEach variant at its best setting: mean ± "
      "sample std and the 95% interval of the mean (Student t, n - 1 degrees of freedom). "
      "Against the baseline `" +
      base +
      "`: the mean per-seed difference, its 95% interval and "
      "the two-sided p of a paired t-test over the seeds both have (the same seed gives both "
      "the same data order and initialisation). * marks p < 0.05.\n";
  for (const auto& t : tasks) {
    const auto& [metric, higher] = task_metric[t];
    auto best_setting = [&](const std::string& v) {
      std::string best;
      double bm = NAN;
      for (const auto& s : settings) {
        auto it = by_seed.find({t, v, s});
        if (it == by_seed.end() || it->second.empty()) continue;
        double m = stats::summarize(values(it->second)).mean;
        if (std::isnan(bm) || (higher ? m > bm : m < bm)) bm = m, best = s;
      }
      return best;
    };
    const auto base_it = by_seed.find({t, base, best_setting(base)});
    md += "\n" + (t.empty() ? std::string() : "### " + t + "\n\n") + "| variant | " + metric +
          " (" + (higher ? "higher" : "lower") + " is better) | 95% interval | seeds | vs " + base +
          " | 95% interval | p |\n|:--|--:|--:|--:|--:|--:|--:|\n";
    for (const auto& v : variants) {
      auto it = by_seed.find({t, v, best_setting(v)});
      if (it == by_seed.end() || it->second.empty()) continue;
      auto s = stats::summarize(values(it->second));
      md += fmt::format("| {} | {:.4f} ± {:.4f} | [{:.4f}, {:.4f}] | {} |", v, s.mean, s.sd,
                        s.ci_low, s.ci_high, s.n);
      std::vector<double> x, b;
      if (v != base && base_it != by_seed.end())
        for (const auto& [seed, val] : it->second) {
          auto bj = base_it->second.find(seed);
          if (bj != base_it->second.end()) x.push_back(val), b.push_back(bj->second);
        }
      if (x.size() < 2) {
        md += v == base ? " (baseline) | | |\n" : " - | - | - |\n";
        continue;
      }
      auto p = stats::paired_t(x, b);
      md += fmt::format(" {:+.4f} | [{:+.4f}, {:+.4f}] | {:.3g}{} |\n", p.mean_diff, p.ci_low,
                        p.ci_high, p.p, p.p < 0.05 ? " *" : "");
    }
  }
  return md;
}
}  // namespace

std::string sweep_summary(const std::vector<SweepResult>& results, const std::string& baseline) {
  std::vector<std::string> tasks, variants, settings;
  auto add = [](std::vector<std::string>& v, const std::string& x) {
    if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
  };
  using Key = std::tuple<std::string, std::string, std::string>;  // task, variant, setting
  std::map<Key, std::vector<double>> cells;
  std::map<Key, std::map<int64_t, double>> by_seed;
  std::map<std::string, std::pair<std::string, bool>> task_metric;  // task -> (metric, higher)
  std::set<Key> na;
  std::vector<std::string> na_reasons;  // "reason (runs)", in order of first appearance
  std::map<std::string, std::vector<std::string>> na_runs;
  for (const auto& r : results) {
    add(tasks, r.task), add(variants, r.variant), add(settings, r.setting);
    if (!r.not_applicable.empty()) {
      na.insert({r.task, r.variant, r.setting});
      add(na_reasons, r.not_applicable);
      std::string run = r.task.empty() ? r.variant : r.task + "." + r.variant;
      auto& rs = na_runs[r.not_applicable];
      if (std::find(rs.begin(), rs.end(), run) == rs.end()) rs.push_back(run);
      continue;
    }
    cells[{r.task, r.variant, r.setting}].push_back(r.value);
    by_seed[{r.task, r.variant, r.setting}][r.seed] = r.value;
    task_metric[r.task] = {r.metric, r.higher};
  }
  struct Stat {
    double mean = NAN, sd = NAN;
    size_t n = 0;
  };
  auto stat = [&](const Key& k) {
    Stat s;
    const auto& v = cells[k];
    s.n = v.size();
    if (v.empty()) return s;
    s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.sd = v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0.0;
    return s;
  };
  auto cell = [](const Stat& s) {
    return s.n == 0 ? std::string("-") : fmt::format("{:.4f} ± {:.4f}", s.mean, s.sd);
  };
  auto cell_at = [&](const Key& k) {
    Stat st = stat(k);
    return st.n == 0 && na.count(k) != 0 ? std::string("n/a") : cell(st);
  };
  auto name = [](const std::string& s) { return s.empty() ? std::string("(base)") : s; };
  auto best_row = [&](const std::string& t, const std::string& v) {
    bool higher = task_metric[t].second;
    std::string best;
    Stat bs;
    for (const auto& s : settings) {
      Stat st = stat({t, v, s});
      if (st.n == 0) continue;
      if (bs.n == 0 || (higher ? st.mean > bs.mean : st.mean < bs.mean)) best = s, bs = st;
    }
    bool all_na = true;
    for (const auto& s : settings) all_na = all_na && na.count({t, v, s}) != 0;
    if (bs.n == 0 && all_na) return std::string("| - | n/a | 0 |");
    return fmt::format("| {} | {} | {} |", name(best), cell(bs), bs.n);
  };
  const bool by_task = tasks.size() > 1 || !tasks[0].empty();
  std::string md;
  if (!by_task) {
    const auto& [metric, higher] = task_metric[""];
    md = fmt::format(
        "# Sweep: best setting per variant\n\nValidation {} ({} is better): the best value of "
        "each run, mean ± sample std over seeds.\n\n| variant | best setting | {} | seeds |\n"
        "|:--|:--|--:|--:|\n",
        metric, higher ? "higher" : "lower", metric);
    for (const auto& v : variants) md += "| " + v + " " + best_row("", v) + "\n";
  } else {
    md = "# Sweep: best setting per task, one table per variant\n\nValidation metric of each "
         "task (its selection metric, higher or lower as it says): the best value of each run, "
         "mean ± sample std over seeds, at the setting with the best mean.\n";
    for (const auto& v : variants) {
      md += "\n## " + v +
            "\n\n| task | metric | best setting | value | seeds |\n"
            "|:--|:--|:--|--:|--:|\n";
      for (const auto& t : tasks) {
        auto it = task_metric.find(t);
        std::string metric =
            it == task_metric.end()
                ? std::string("-")
                : it->second.first + (it->second.second ? " (higher)" : " (lower)");
        md += fmt::format("| {} | {} {}\n", t, metric, best_row(t, v));
      }
    }
  }
  md += "\n## Every setting\n\n|" + std::string(by_task ? " task |" : "") + " variant |";
  for (const auto& s : settings) md += " " + name(s) + " |";
  md += by_task ? "\n|:--|:--|" : "\n|:--|";
  for (size_t i = 0; i < settings.size(); ++i) md += "--:|";
  md += "\n";
  for (const auto& t : tasks)
    for (const auto& v : variants) {
      md += "|" + (by_task ? " " + t + " |" : std::string()) + " " + v + " |";
      for (const auto& s : settings) md += " " + cell_at({t, v, s}) + " |";
      md += "\n";
    }
  if (!na_reasons.empty()) {
    md += "\nn/a: a run this model cannot do, so it was not trained.\n\n";
    for (const auto& why : na_reasons) {
      std::string runs;
      for (const auto& r : na_runs[why]) runs += (runs.empty() ? "" : ", ") + r;
      md += "- " + runs + ": " + why + "\n";
    }
  }
  md += seed_statistics(tasks, variants, settings, by_seed, task_metric, baseline);
  return md;
}

namespace {
// The test-split paired tests of a translation ablation: each variant's runs pooled over the
// seeds every variant has, the baseline first.
std::string pooled_translation_tests(const std::vector<CardEntry>& runs,
                                     const std::vector<std::string>& dirs,
                                     const std::string& baseline) {
  std::vector<std::string> variants;
  std::map<std::string, std::map<int64_t, std::string>> by_seed;  // variant -> seed -> run
  for (size_t i = 0; i < runs.size(); ++i) {
    if (by_seed.find(runs[i].variant) == by_seed.end()) variants.push_back(runs[i].variant);
    by_seed[runs[i].variant][runs[i].seed] = dirs[i];
  }
  if (variants.size() < 2) return "";
  auto base = std::find(variants.begin(), variants.end(), baseline);
  if (base != variants.end()) std::rotate(variants.begin(), base, base + 1);
  std::vector<PairedSystem> systems;
  for (const auto& v : variants) {
    PairedSystem s{v, {}};
    for (const auto& [seed, dir] : by_seed[variants.front()]) {
      bool everywhere = std::all_of(variants.begin(), variants.end(), [&](const std::string& w) {
        return by_seed[w].count(seed) > 0;
      });
      if (everywhere) s.runs.push_back(by_seed[v][seed]);
    }
    systems.push_back(s);
  }
  return translation_tests(systems);
}
}  // namespace

namespace {
// results.json: every run of an ablation as data (what sweep.md renders), for scripts such as
// scripts/reproduce_summary.py: its task, variant, setting and seed, its best validation value
// of the selection metric, and the test split's metrics where the run was tested. An n/a run
// has a null value and its reason.
void write_results_json(const std::string& path, const config::Experiment& exp,
                        const std::vector<SweepResult>& sweep,
                        const std::vector<std::string>& dirs) {
  nlohmann::json runs = nlohmann::json::array();
  for (size_t i = 0; i < sweep.size(); ++i) {
    const auto& r = sweep[i];
    nlohmann::json j = {{"task", r.task},     {"variant", r.variant}, {"setting", r.setting},
                        {"seed", r.seed},     {"run_dir", dirs[i]},   {"metric", r.metric},
                        {"higher", r.higher}, {"value", nullptr}};
    if (!r.not_applicable.empty()) {
      j["not_applicable"] = r.not_applicable;
    } else {
      if (std::isfinite(r.value)) j["value"] = r.value;
      const auto test = stdfs::path(dirs[i]) / "eval-test.json";
      if (exp.test && fs::exists(test.string()))
        j["test"] = nlohmann::json::parse(fs::read_file(test.string())).at("metrics");
    }
    runs.push_back(std::move(j));
  }
  nlohmann::json out = {
      {"experiment", exp.name},
      {"baseline", exp.baseline.empty() && !sweep.empty() ? sweep.front().variant : exp.baseline},
      {"runs", runs}};
  fs::write_file_atomic(path, out.dump(1) + "\n");
}
}  // namespace

namespace {
// A run that a hard kill (SIGKILL, power loss: no chance to save) stopped before its first
// checkpoint has nothing to resume: no checkpoint at all, not even a damaged one, and every
// logged step before the first step that saves one. `ablate` starts such a run over, keeping
// its old metrics renamed .restart-N, instead of stopping the whole ablation. Anything else
// without a usable checkpoint (damaged checkpoints, or deleted ones after a save) is left to
// `train`'s refusal. Returns the last logged step, or -1 if the run is not such a run.
int64_t killed_before_first_checkpoint(const config::Config& c) {
  const auto dir = stdfs::path(c.run.out_dir) / c.run.name;
  const auto jsonl = dir / "metrics.jsonl";
  if (!stdfs::exists(jsonl) || weights::has_checkpoints(dir.string())) return -1;
  int64_t last = 0;
  std::istringstream lines(fs::read_file(jsonl.string()));
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer())
      last = std::max(last, j["step"].get<int64_t>());
  }
  const int64_t first_save = std::min(c.train.checkpoint_every, c.train.max_steps);
  return last < first_save ? last : -1;
}
}  // namespace

void ablate(const std::string& experiment_path, bool plots, int seeds) {
  auto exp = config::load_experiment(experiment_path);
  // One ablation of this experiment at a time (each run is also locked while it trains).
  const std::string exp_dir = (stdfs::path(exp.out_dir) / exp.name).string();
  fs::make_dirs(exp_dir);
  auto lock = fs::DirLock::acquire(exp_dir, "ablate");
  if (seeds > 0) {
    exp.seeds.clear();
    for (int s = 1; s <= seeds; ++s) exp.seeds.push_back(s);
  }
  for (const auto& spec : exp.eval_rope_scaling)
    eval::check_rope_scaling_spec(spec);  // before training
  auto runs = config::experiment_runs(exp);
  std::vector<std::string> dirs;
  std::vector<CardEntry> card;  // with probe: the variant and seed of each trained run
  std::vector<SweepResult> sweep;
  std::vector<std::string> sweep_dirs;  // per entry of `sweep`: its run directory ("" if n/a)
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& r = runs[i];
    if (!r.not_applicable.empty()) {
      spdlog::info("=== run {}/{}: {}: n/a ({}) ===", i + 1, runs.size(), r.name, r.not_applicable);
      sweep.push_back({r.task, r.variant, r.setting, NAN, "", false, r.not_applicable, r.seed});
      sweep_dirs.emplace_back();
      continue;
    }
    spdlog::info("=== run {}/{}: {} ===", i + 1, runs.size(), r.config.run.name);
    train::TrainOptions to;
    if (auto last = killed_before_first_checkpoint(r.config); last >= 0) {
      spdlog::warn(
          "{}/{}: stopped by a hard kill at step {}, before its first checkpoint; starting it "
          "over (its old metrics are kept, renamed .restart-N)",
          r.config.run.out_dir, r.config.run.name, last);
      to.restart = true;
    }
    auto res = train::train(r.config, to);
    dirs.push_back(res.run_dir);
    card.push_back({r.setting.empty() ? r.variant : r.variant + "." + r.setting, r.seed, {}});
    if (res.interrupted)
      throw signals::Interrupted(
          "ablation stopped during run '" + r.config.run.name +
          "' (its checkpoint is saved); run the same command again to resume");
    sweep.push_back({r.task, r.variant, r.setting, res.best_selected, res.selection_metric,
                     res.higher_is_better, "", r.seed});
    sweep_dirs.push_back(res.run_dir);
  }
  if (exp.test) {
    for (const auto& d : dirs) {
      spdlog::info("=== test split: {} ===", d);
      auto report = eval::evaluate_run(d, "test", {}, 0, /*use_best=*/true);
      spdlog::info("{}", eval::format_eval(report));
      signals::throw_if_stopped("ablation (test evaluation of " + d + ")",
                                "every run is trained; run the same command again to finish");
    }
  }
  write_results_json((stdfs::path(exp_dir) / "results.json").string(), exp, sweep, sweep_dirs);
  // Translation: sacreBLEU's paired tests on the test translations (seeds pooled).
  std::string paired_md = exp.test ? pooled_translation_tests(card, dirs, exp.baseline) : "";
  std::string sweep_md;  // also in compare.md, one heading level down
  if (!exp.settings.empty() || !exp.seeds.empty() || !exp.tasks.empty()) {
    std::string md = sweep_summary(sweep, exp.baseline) + paired_md;
    paired_md.clear();
    std::string path = (stdfs::path(exp.out_dir) / exp.name / "sweep.md").string();
    fs::write_file_atomic(path, md);
    std::printf("%s\nwrote %s\n", md.c_str(), path.c_str());
    sweep_md = "\n#" + md;
    for (size_t at = sweep_md.find("\n#", 2); at != std::string::npos;
         at = sweep_md.find("\n#", at + 3))
      sweep_md.insert(at + 1, "#");
  }
  const auto trained = std::count_if(runs.begin(), runs.end(),
                                     [](const auto& r) { return r.not_applicable.empty(); });
  spdlog::info("ablation trained {} runs in {}", trained,
               format_duration(
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  CompareOptions o;
  o.out_dir = (stdfs::path(exp.out_dir) / exp.name).string();
  o.extra_md = sweep_md;
  if (!exp.eval_lengths.empty()) o.extra_md += evaluate_lengths(exp, dirs, o.out_dir, plots);
  if (!exp.eval_windows.empty()) o.extra_md += evaluate_sliding(exp, dirs, o.out_dir, plots);
  if (exp.probe) {
    ProbeOptions po;
    po.examples = exp.probe_examples;
    po.eval_tokens = exp.eval_tokens;
    po.plot = plots;
    for (size_t i = 0; i < dirs.size(); ++i) {
      spdlog::info("=== probe {}/{}: {} ===", i + 1, dirs.size(), dirs[i]);
      card[i].report = probe_run(dirs[i], po);
      signals::throw_if_stopped("ablation (probe of " + dirs[i] + ")",
                                "every run is trained; run the same command again to finish");
    }
    o.extra_md += write_card(card, exp.baseline, o.out_dir, plots);
    std::printf("wrote %s\n", (stdfs::path(o.out_dir) / "card.md").string().c_str());
  }
  if (!paired_md.empty()) std::printf("%s\n", paired_md.c_str());  // without a sweep
  o.extra_md += paired_md;
  o.probe_card = false;
  o.paired_translation = false;  // pooled over seeds above
  o.target_loss = exp.target_loss;
  o.smoothing = 0.6;
  o.plots = plots;
  compare_runs(dirs, o);
}

}  // namespace ropelab::lab
