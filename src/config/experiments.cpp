// Ablation experiments (config/loader.h): an experiment file's variants, tasks, settings and
// seeds, each combination resolved into a run config and checked before any training starts.
#include <algorithm>
#include <filesystem>
#include <set>

#include "config/loader.h"
#include "config/yaml_io.h"

namespace ropelab::config {

namespace stdfs = std::filesystem;
using io::Ctx;
using io::did_you_mean;
using io::resolve_relative;
using io::where;

namespace {
Config run_config(const Experiment& exp, const Variant& variant, const Variant* task,
                  const Variant* setting, int64_t seed, const std::string& name) {
  std::vector<Override> ov;
  for (const auto& s : exp.set) ov.push_back(Override{s, exp.name + ": set"});
  if (task != nullptr)
    for (const auto& s : task->set) ov.push_back(Override{s, exp.name + ": task " + task->name});
  for (const auto& s : variant.set)
    ov.push_back(Override{s, exp.name + ": variant " + variant.name});
  if (setting != nullptr)
    for (const auto& s : setting->set)
      ov.push_back(Override{s, exp.name + ": setting " + setting->name});
  if (seed != 0) ov.push_back(Override{"run.seed=" + std::to_string(seed), "experiment"});
  ov.push_back(Override{"run.name=" + name, "experiment"});
  ov.push_back(
      Override{"run.out_dir=" + (stdfs::path(exp.out_dir) / exp.name).string(), "experiment"});
  return load_config(exp.base, ov);
}
}  // namespace

Config experiment_variant_config(const Experiment& exp, const Variant& variant) {
  const Variant* task = exp.tasks.empty() ? nullptr : &exp.tasks[0];
  return run_config(exp, variant, task, nullptr, 0, variant.name);
}

std::vector<ExperimentRun> experiment_runs(const Experiment& exp) {
  std::vector<ExperimentRun> out;
  std::vector<const Variant*> settings;
  for (const auto& s : exp.settings) settings.push_back(&s);
  if (settings.empty()) settings.push_back(nullptr);
  std::vector<const Variant*> tasks;
  for (const auto& t : exp.tasks) tasks.push_back(&t);
  if (tasks.empty()) tasks.push_back(nullptr);
  std::vector<int64_t> seeds = exp.seeds.empty() ? std::vector<int64_t>{0} : exp.seeds;
  for (const Variant* t : tasks)
    for (const auto& v : exp.variants)
      for (const Variant* s : settings)
        for (int64_t seed : seeds) {
          std::string name = (t ? t->name + "." : "") + v.name + (s ? "." + s->name : "") +
                             (seed != 0 ? ".seed" + std::to_string(seed) : "");
          ExperimentRun r{t ? t->name : "", v.name, s ? s->name : "", seed, name, "", {}};
          try {
            r.config = run_config(exp, v, t, s, seed, name);
          } catch (const ConfigError& err) {
            const auto& ps = err.problems();
            if (!std::all_of(ps.begin(), ps.end(),
                             [](const Problem& p) { return p.not_applicable; })) {
              std::vector<Problem> named;
              for (const auto& p : ps)
                named.push_back({p.loc, p.key, "run '" + name + "': " + p.key + ": " + p.message});
              throw ConfigError(named);
            }
            for (const auto& p : ps)
              r.not_applicable += (r.not_applicable.empty() ? "" : "; ") + p.key + ": " + p.message;
          }
          out.push_back(std::move(r));
        }
  return out;
}

Experiment load_experiment(const std::string& path) {
  Ctx ctx;
  Experiment e = io::read_experiment(path, ctx);
  if (!ctx.problems.empty()) throw ConfigError(ctx.problems);
  e.base = resolve_relative(path, e.base);
  std::set<std::string> names;
  for (size_t i = 0; i < e.variants.size(); ++i) {
    const auto& v = e.variants[i];
    std::string key = "variants[" + std::to_string(i) + "].name";
    if (!names.insert(v.name).second)
      ctx.add(where(ctx, key), key, "duplicate variant name '" + v.name + "'");
    if (v.name.empty() || v.name.find('/') != std::string::npos)
      ctx.add(where(ctx, key), key, "variant names must be non-empty and contain no '/'");
  }
  if (e.variants.empty()) ctx.add(where(ctx, "variants"), "variants", "needs at least one variant");
  std::vector<std::string> variant_names;
  for (const auto& v : e.variants) variant_names.push_back(v.name);
  if (!e.baseline.empty() &&
      std::find(variant_names.begin(), variant_names.end(), e.baseline) == variant_names.end())
    ctx.add(where(ctx, "baseline"), "baseline",
            "'" + e.baseline + "' is not one of the variants; " +
                did_you_mean(e.baseline, variant_names));
  std::set<std::string> setting_names;
  for (size_t i = 0; i < e.settings.size(); ++i) {
    const auto& s = e.settings[i];
    std::string key = "settings[" + std::to_string(i) + "].name";
    if (!setting_names.insert(s.name).second)
      ctx.add(where(ctx, key), key, "duplicate setting name '" + s.name + "'");
    if (s.name.empty() || s.name.find_first_of("/.") != std::string::npos)
      ctx.add(where(ctx, key), key, "setting names must be non-empty and contain no '/' or '.'");
  }
  std::set<std::string> task_names;
  for (size_t i = 0; i < e.tasks.size(); ++i) {
    const auto& t = e.tasks[i];
    std::string key = "tasks[" + std::to_string(i) + "].name";
    if (!task_names.insert(t.name).second)
      ctx.add(where(ctx, key), key, "duplicate task name '" + t.name + "'");
    if (t.name.empty() || t.name.find_first_of("/.") != std::string::npos)
      ctx.add(where(ctx, key), key, "task names must be non-empty and contain no '/' or '.'");
  }
  std::set<int64_t> seed_set;
  for (int64_t s : e.seeds)
    if (s <= 0 || !seed_set.insert(s).second)
      ctx.add(where(ctx, "seeds"), "seeds", "seeds must be positive and distinct");
  if (ctx.problems.empty()) {
    for (size_t i = 0; i < e.variants.size(); ++i) {
      try {
        experiment_variant_config(e, e.variants[i]);
      } catch (const ConfigError& err) {
        std::string key = "variants[" + std::to_string(i) + "]";
        for (const auto& p : err.problems())
          if (!p.not_applicable)
            ctx.add(where(ctx, key), key, "variant '" + e.variants[i].name + "': " + p.str());
      }
    }
    for (size_t i = 1; i < e.tasks.size() && ctx.problems.empty(); ++i) {
      try {
        run_config(e, e.variants[0], &e.tasks[i], nullptr, 0, e.variants[0].name);
      } catch (const ConfigError& err) {
        std::string key = "tasks[" + std::to_string(i) + "]";
        for (const auto& p : err.problems())
          if (!p.not_applicable)
            ctx.add(where(ctx, key), key, "task '" + e.tasks[i].name + "': " + p.str());
      }
    }
    const Variant* task0 = e.tasks.empty() ? nullptr : &e.tasks[0];
    for (size_t i = 0; i < e.settings.size() && ctx.problems.empty(); ++i) {
      try {
        run_config(e, e.variants[0], task0, &e.settings[i], 0, e.variants[0].name);
      } catch (const ConfigError& err) {
        std::string key = "settings[" + std::to_string(i) + "]";
        for (const auto& p : err.problems())
          if (!p.not_applicable)
            ctx.add(where(ctx, key), key, "setting '" + e.settings[i].name + "': " + p.str());
      }
    }
  }
  if (ctx.problems.empty()) {
    // Every combination, so a task x variant x setting that only fails together is caught
    // before any training starts too; not-applicable ones become n/a cells.
    try {
      auto runs = experiment_runs(e);
      if (std::all_of(runs.begin(), runs.end(),
                      [](const ExperimentRun& r) { return !r.not_applicable.empty(); }))
        ctx.add(where(ctx, "variants"), "variants",
                "no run of this experiment is possible: " + runs.at(0).not_applicable);
    } catch (const ConfigError& err) {
      for (const auto& p : err.problems()) ctx.add(where(ctx, "variants"), "variants", p.message);
    }
  }
  if (!ctx.problems.empty()) throw ConfigError(ctx.problems);
  return e;
}

}  // namespace ropelab::config
