// Ablation experiments (config/loader.h): an experiment file's variants, tasks, settings and
// seeds, each combination resolved into a run config and checked before any training starts.
#include <algorithm>
#include <filesystem>
#include <functional>
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
// The run directory's name of a variant x task x setting x seed.
std::string run_name(const Variant* task, const std::string& variant, const Variant* setting,
                     int64_t seed) {
  return (task ? task->name + "." : "") + variant + (setting ? "." + setting->name : "") +
         (seed != 0 ? ".seed" + std::to_string(seed) : "");
}

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
  if (!variant.from.empty())  // a stage: the source variant's run of this task, setting, seed
    ov.push_back(Override{"task.init_from=" + (stdfs::path(exp.out_dir) / exp.name /
                                               run_name(task, variant.from, setting, seed))
                                                  .string(),
                          exp.name + ": variant " + variant.name + " from"});
  ov.push_back(Override{"run.name=" + name, "experiment"});
  ov.push_back(
      Override{"run.out_dir=" + (stdfs::path(exp.out_dir) / exp.name).string(), "experiment"});
  return load_config(exp.base, ov);
}
}  // namespace

std::vector<const Variant*> stage_order(const std::vector<Variant>& variants) {
  // Kahn's algorithm, stable: a variant as soon as its source is placed, in file order.
  std::vector<const Variant*> out;
  std::set<std::string> placed;
  while (out.size() < variants.size()) {
    const size_t before = out.size();
    for (const auto& v : variants)
      if (placed.count(v.name) == 0 && (v.from.empty() || placed.count(v.from) != 0)) {
        out.push_back(&v);
        placed.insert(v.name);
      }
    if (out.size() == before) break;  // a cycle or an unknown source: load_experiment names it
  }
  return out;
}

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
    for (const Variant* vp : stage_order(exp.variants))
      for (const Variant* s : settings)
        for (int64_t seed : seeds) {
          const Variant& v = *vp;
          std::string name = run_name(t, v.name, s, seed);
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

namespace {

// The names of an experiment's variants, settings or tasks (`section`: "variants", ...; `noun`:
// "variant", ...): distinct, non-empty, without the characters of `forbidden` ("/" or "/.").
void check_names(Ctx& ctx, const std::vector<Variant>& items, const std::string& section,
                 const std::string& noun, const char* forbidden) {
  std::set<std::string> names;
  const std::string chars = std::string(forbidden) == "/" ? "'/'" : "'/' or '.'";
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& v = items[i];
    std::string key = section + "[" + std::to_string(i) + "].name";
    if (!names.insert(v.name).second)
      ctx.add(where(ctx, key), key, "duplicate " + noun + " name '" + v.name + "'");
    if (v.name.empty() || v.name.find_first_of(forbidden) != std::string::npos)
      ctx.add(where(ctx, key), key, noun + " names must be non-empty and contain no " + chars);
  }
}

// `make()` (one resolved run config) for item i of `section`: its problems under KEY[i], named
// by the item ("variant 'rope': ..."), except those that only make the run not applicable.
void check_config(Ctx& ctx, const std::string& section, size_t i, const std::string& label,
                  const std::function<void()>& make) {
  try {
    make();
  } catch (const ConfigError& err) {
    std::string key = section + "[" + std::to_string(i) + "]";
    for (const auto& p : err.problems())
      if (!p.not_applicable) ctx.add(where(ctx, key), key, label + ": " + p.str());
  }
}

// Stages: `from` names another variant, never itself through a chain; tasks and settings have
// no `from`.
void check_stages(Ctx& ctx, const Experiment& e) {
  std::vector<std::string> names;
  for (const auto& v : e.variants) names.push_back(v.name);
  for (size_t i = 0; i < e.variants.size(); ++i) {
    const auto& from = e.variants[i].from;
    const std::string key = "variants[" + std::to_string(i) + "].from";
    if (!from.empty() && std::find(names.begin(), names.end(), from) == names.end())
      ctx.add(where(ctx, key), key,
              "'" + from + "' is not one of the variants; " + did_you_mean(from, names));
  }
  if (ctx.problems.empty() && stage_order(e.variants).size() < e.variants.size())
    ctx.add(where(ctx, "variants"), "variants",
            "the stages' `from` form a cycle: each stage must start from a variant that does not "
            "start from it");
  for (const auto* items : {&e.tasks, &e.settings})
    for (size_t i = 0; i < items->size(); ++i)
      if (!(*items)[i].from.empty()) {
        const std::string key =
            (items == &e.tasks ? "tasks[" : "settings[") + std::to_string(i) + "].from";
        ctx.add(where(ctx, key), key, "only variants start from another run");
      }
}

// Each variant, task and setting resolves on its own (with the first variant and task).
void check_each_part(const Experiment& e, Ctx& ctx) {
  for (size_t i = 0; i < e.variants.size(); ++i)
    check_config(ctx, "variants", i, "variant '" + e.variants[i].name + "'",
                 [&] { experiment_variant_config(e, e.variants[i]); });
  for (size_t i = 1; i < e.tasks.size() && ctx.problems.empty(); ++i)
    check_config(ctx, "tasks", i, "task '" + e.tasks[i].name + "'", [&] {
      run_config(e, e.variants[0], &e.tasks[i], nullptr, 0, e.variants[0].name);
    });
  const Variant* task0 = e.tasks.empty() ? nullptr : &e.tasks[0];
  for (size_t i = 0; i < e.settings.size() && ctx.problems.empty(); ++i)
    check_config(ctx, "settings", i, "setting '" + e.settings[i].name + "'", [&] {
      run_config(e, e.variants[0], task0, &e.settings[i], 0, e.variants[0].name);
    });
}

}  // namespace

Experiment load_experiment(const std::string& path) {
  Ctx ctx;
  Experiment e = io::read_experiment(path, ctx);
  if (!ctx.problems.empty()) throw ConfigError(ctx.problems);
  e.base = resolve_relative(path, e.base);
  check_names(ctx, e.variants, "variants", "variant", "/");
  if (e.variants.empty()) ctx.add(where(ctx, "variants"), "variants", "needs at least one variant");
  std::vector<std::string> variant_names;
  for (const auto& v : e.variants) variant_names.push_back(v.name);
  if (!e.baseline.empty() &&
      std::find(variant_names.begin(), variant_names.end(), e.baseline) == variant_names.end())
    ctx.add(where(ctx, "baseline"), "baseline",
            "'" + e.baseline + "' is not one of the variants; " +
                did_you_mean(e.baseline, variant_names));
  check_stages(ctx, e);
  check_names(ctx, e.settings, "settings", "setting", "/.");
  check_names(ctx, e.tasks, "tasks", "task", "/.");
  std::set<int64_t> seed_set;
  for (int64_t s : e.seeds)
    if (s <= 0 || !seed_set.insert(s).second)
      ctx.add(where(ctx, "seeds"), "seeds", "seeds must be positive and distinct");
  if (!e.eval_windows.empty() && e.eval_stride > 0 &&
      e.eval_stride >= *std::min_element(e.eval_windows.begin(), e.eval_windows.end()))
    ctx.add(where(ctx, "eval_stride"), "eval_stride",
            "must be less than the smallest of eval_windows (each window overlaps the one before "
            "it, so that every token is scored)");
  if (e.eval_passkey > 0 && e.eval_windows.empty())
    ctx.add(where(ctx, "eval_passkey"), "eval_passkey",
            "needs eval_windows (the prompt lengths of the passkey test)");
  if (ctx.problems.empty()) check_each_part(e, ctx);
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
