// Strict config loading: every kind of problem is reported with file:line:col and key path.
#include <algorithm>
#include <filesystem>

#include "config/loader.h"
#include "helpers.h"

namespace ropelab::config {
namespace {

using test::TempDir;
using test::write;

std::vector<Problem> problems_of(const std::string& path, const std::vector<std::string>& ov = {}) {
  try {
    load_config(path, overrides_from_args(ov));
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

TEST(Config, DefaultsLoadWithTaskType) {
  TempDir d;
  auto c = load_config(write(d.file("a.yaml"), "task:\n  type: clm\n"));
  EXPECT_EQ(c.model.arch, Arch::kDecoder);
  EXPECT_STREQ(c.model.position.type(), "rope");
  EXPECT_TRUE(std::holds_alternative<RopeConfig>(c.model.position.opts));
}

TEST(Config, FourProblemsReportedTogetherWithLocations) {
  TempDir d;
  auto f = write(d.file("bad.yaml"),
                 "task:\n"
                 "  type: clm\n"
                 "model:\n"
                 "  d_modle: 128\n"   // unknown key (line 4)
                 "  n_layers: two\n"  // wrong type (line 5)
                 "  n_heads: 3\n"     // heads do not divide d_model (line 6)
                 "  d_ff: 64\n"
                 "  d_ff: 128\n");  // duplicate (line 8)
  auto ps = problems_of(f);
  ASSERT_EQ(ps.size(), 4u) << ConfigError(ps).what();
  auto find = [&](const std::string& needle) {
    for (const auto& p : ps)
      if (p.str().find(needle) != std::string::npos) return p;
    ADD_FAILURE() << "no problem mentions " << needle << "\n" << ConfigError(ps).what();
    return Problem{};
  };
  auto unknown = find("unknown key");
  EXPECT_EQ(unknown.key, "model.d_modle");
  EXPECT_EQ(unknown.loc.line, 4);
  EXPECT_EQ(unknown.loc.col, 3);
  EXPECT_NE(unknown.message.find("did you mean 'd_model'"), std::string::npos);
  EXPECT_NE(unknown.message.find("allowed: arch, d_model"), std::string::npos);
  auto type = find("expected an integer");
  EXPECT_EQ(type.key, "model.n_layers");
  EXPECT_EQ(type.loc.line, 5);
  auto dup = find("duplicate key");
  EXPECT_EQ(dup.loc.line, 8);
  EXPECT_EQ(dup.key, "model.d_ff");
  auto cross = find("must divide d_model");
  EXPECT_EQ(cross.key, "model.n_heads");
  EXPECT_EQ(cross.loc.line, 6);
  EXPECT_EQ(cross.loc.file, f);
}

TEST(Config, MissingRequiredKey) {
  TempDir d;
  auto ps = problems_of(write(d.file("a.yaml"), "model:\n  d_model: 64\n"));
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].key, "task.type");
  EXPECT_NE(ps[0].message.find("required"), std::string::npos);
}

TEST(Config, OutOfRangeAndBadChoice) {
  TempDir d;
  auto ps = problems_of(
      write(d.file("a.yaml"), "task: {type: clm}\nmodel:\n  dropout: 1.5\n  norm: prenorm\n"));
  ASSERT_EQ(ps.size(), 2u) << ConfigError(ps).what();
  EXPECT_NE(ps[0].message.find("out of range [0, 0.99]"), std::string::npos);
  EXPECT_NE(ps[1].message.find("one of: auto, post, pre"), std::string::npos);
  EXPECT_EQ(ps[1].loc.line, 4);
}

TEST(Config, YamlSyntaxErrorHasLocation) {
  TempDir d;
  auto ps = problems_of(write(d.file("a.yaml"), "task:\n  type: [clm\n"));
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_NE(ps[0].message.find("YAML syntax error"), std::string::npos);
  EXPECT_GT(ps[0].loc.line, 0);
}

TEST(Config, PositionOptionsDependOnType) {
  TempDir d;
  auto c = load_config(write(d.file("a.yaml"),
                             "task: {type: clm}\nmodel:\n  position:\n    type: t5\n"
                             "    num_buckets: 16\n"));
  ASSERT_TRUE(std::holds_alternative<T5Config>(c.model.position.opts));
  EXPECT_EQ(std::get<T5Config>(c.model.position.opts).num_buckets, 16);
  // rope has no num_buckets
  auto ps = problems_of(write(d.file("b.yaml"),
                              "task: {type: clm}\nmodel:\n  position:\n    type: rope\n"
                              "    num_buckets: 16\n"));
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].key, "model.position.num_buckets");
  EXPECT_NE(ps[0].message.find("allowed: type, base, pairing"), std::string::npos);
}

TEST(Config, InheritThenOverridesWin) {
  TempDir d;
  write(d.file("base.yaml"), "task: {type: clm, seq_len: 64}\nmodel: {d_model: 64, n_heads: 2}\n");
  auto child = write(d.file("child.yaml"), "inherit: base.yaml\nmodel:\n  n_layers: 3\n");
  auto c = load_config(child, overrides_from_args({"model.d_model=32", "model.position.type=t5",
                                                   "model.position.max_distance=64"}));
  EXPECT_EQ(c.task.seq_len, 64);
  EXPECT_EQ(c.model.n_layers, 3);
  EXPECT_EQ(c.model.d_model, 32);
  EXPECT_EQ(std::get<T5Config>(c.model.position.opts).max_distance, 64);
}

TEST(Config, OverridesGetTheSameChecks) {
  TempDir d;
  auto f = write(d.file("a.yaml"), "task: {type: clm}\n");
  auto ps = problems_of(f, {"model.d_modle=3", "model.n_heads=x", "nonsense"});
  ASSERT_EQ(ps.size(), 3u) << ConfigError(ps).what();
  EXPECT_NE(ps[0].str().find("command line 'model.d_modle=3'"), std::string::npos);
  EXPECT_NE(ps[0].message.find("did you mean 'd_model'"), std::string::npos);
  EXPECT_NE(ps[2].message.find("expected key.path=value"), std::string::npos);
}

TEST(Config, ParallelResidualIsAPreNormLayoutWithoutCrossAttention) {
  TempDir d;
  auto f = write(d.file("a.yaml"), "task: {type: clm}\n");
  EXPECT_TRUE(problems_of(f, {"model.parallel_residual=true"}).empty());
  for (const auto& [ov, want] :
       {std::pair<std::vector<std::string>, std::string>{
            {"model.parallel_residual=true", "model.norm=reordered"}, "not reordered"},
        {{"model.parallel_residual=true", "model.arch=encoder", "task.type=mlm"},
         "not post (auto for an encoder)"},
        {{"model.parallel_residual=true", "model.arch=encdec", "task.type=translation"},
         "cross-attention"}}) {
    auto ps = problems_of(f, ov);  // (a translation task also lacks its data: another line)
    auto it = std::find_if(ps.begin(), ps.end(),
                           [](const Problem& p) { return p.key == "model.parallel_residual"; });
    ASSERT_NE(it, ps.end()) << ConfigError(ps).what();
    EXPECT_NE(it->message.find(want), std::string::npos) << it->message;
  }
}

TEST(Config, InheritCycleAndMissingParent) {
  TempDir d;
  write(d.file("a.yaml"), "inherit: b.yaml\n");
  write(d.file("b.yaml"), "inherit: a.yaml\n");
  auto ps = problems_of(d.file("a.yaml"));
  ASSERT_FALSE(ps.empty());
  EXPECT_NE(ConfigError(ps).what(), std::string());
  EXPECT_NE(std::string(ConfigError(ps).what()).find("cycle"), std::string::npos);
  auto ps2 = problems_of(write(d.file("c.yaml"), "inherit: nope.yaml\ntask: {type: clm}\n"));
  ASSERT_EQ(ps2.size(), 1u);
  EXPECT_NE(ps2[0].message.find("no such file"), std::string::npos);
  // A parent name the OS refuses (longer than NAME_MAX; found by fuzz_config) is a problem
  // located at the inherit key, not a std::filesystem exception.
  auto ps3 = problems_of(
      write(d.file("e.yaml"), "inherit: " + std::string(300, 'x') + ".yaml\ntask: {type: clm}\n"));
  ASSERT_EQ(ps3.size(), 1u);
  EXPECT_EQ(ps3[0].key, "inherit");
  EXPECT_NE(ps3[0].message.find("no such file"), std::string::npos);
  EXPECT_NE(ps3[0].message.find("too long"), std::string::npos) << ps3[0].message;
}

TEST(Config, ModuleTraitsValidated) {
  TempDir d;
  auto ps = problems_of(write(d.file("a.yaml"),
                              "task: {type: clm, seq_len: 1024}\n"
                              "model:\n  position: {type: learned, max_len: 512}\n"));
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].key, "task.seq_len");
  auto ps2 = problems_of(write(d.file("b.yaml"),
                               "task: {type: clm}\nmodel:\n  attention: {kernel: linear}\n"
                               "  position: {type: t5}\n"));
  ASSERT_EQ(ps2.size(), 1u);
  EXPECT_NE(ps2[0].message.find("linear attention"), std::string::npos);
  auto ps3 = problems_of(
      write(d.file("c.yaml"), "task: {type: clm}\nmodel:\n  d_model: 60\n  n_heads: 4\n"));
  ASSERT_EQ(ps3.size(), 1u);  // head dim 15 is odd
  EXPECT_NE(ps3[0].message.find("must be even"), std::string::npos);
}

TEST(Config, SeparateVocabulariesNeedParallelDataAndBothModels) {
  TempDir d;
  auto ps =
      problems_of(write(d.file("a.yaml"), "task: {type: clm}\n"), {"data.tokenizer.joint=false"});
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].key, "data.tokenizer.joint");
  EXPECT_NE(ps[0].message.find("parallel data"), std::string::npos);
  std::string mt = write(d.file("b.yaml"),
                         "task: {type: translation}\nmodel: {arch: encdec}\n"
                         "data: {source: bible-en-es}\n");
  auto ps2 = problems_of(mt, {"data.tokenizer.joint=false", "data.tokenizer.model=x.model"});
  ASSERT_EQ(ps2.size(), 1u);
  EXPECT_EQ(ps2[0].key, "data.tokenizer.target_model");
  auto ps3 = problems_of(mt, {"data.tokenizer.target_model=y.model"});
  ASSERT_EQ(ps3.size(), 1u);
  EXPECT_NE(ps3[0].message.find("needs joint: false"), std::string::npos);
  EXPECT_TRUE(problems_of(mt, {"data.tokenizer.joint=false"}).empty());
}

TEST(Config, DumpRoundTripsForEveryYamlInTheRepo) {
  TempDir d;
  int checked = 0;
  for (const char* dir : {"configs", "experiments"}) {
    for (const auto& e :
         std::filesystem::recursive_directory_iterator(test::source_dir() + "/" + dir)) {
      if (e.path().extension() != ".yaml") continue;
      // Experiments hold variants: check each variant's config; configs are checked directly.
      std::vector<Config> configs;
      if (std::string(dir) == "experiments") {
        auto exp = load_experiment(e.path().string());
        for (const auto& r : experiment_runs(exp))
          if (r.not_applicable.empty()) configs.push_back(r.config);
        // The experiment's base path is absolute here, so its dump reloads from anywhere.
        auto again = load_experiment(test::write(d.file("exp.yaml"), dump(exp)));
        EXPECT_EQ(dump(again), dump(exp)) << e.path();
      } else {
        // Presets (configs/presets) are meant to be inherited and name no task: give them the
        // task that fits their architecture.
        bool preset = e.path().parent_path().filename() == "presets";
        if (!preset) configs.push_back(load_config(e.path().string()));
        for (auto [task, source] :
             {std::pair{"clm", "bible-en"}, {"mlm", "bible-en"}, {"translation", "bible-en-es"}}) {
          if (!preset || !configs.empty()) break;
          try {
            configs.push_back(load_config(
                e.path().string(), overrides_from_args({std::string("task.type=") + task,
                                                        std::string("data.source=") + source})));
          } catch (const ConfigError&) {
          }
        }
        EXPECT_FALSE(configs.empty()) << e.path() << " loads with no task type";
      }
      for (const auto& c : configs) {
        std::string once = dump(c);
        auto again = load_config(test::write(d.file("dump.yaml"), once));
        EXPECT_EQ(dump(again), once) << e.path();
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(Config, ExperimentErrorsNameTheVariant) {
  TempDir d;
  write(d.file("base.yaml"), "task: {type: clm}\n");
  auto f =
      write(d.file("exp.yaml"),
            "name: x\nbase: base.yaml\nvariants:\n  - name: a\n    set: [model.position.type=rop]\n"
            "  - name: a\n");
  try {
    load_experiment(f);
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    std::string s = e.what();
    EXPECT_NE(s.find("duplicate variant name"), std::string::npos) << s;
  }
  auto g = write(
      d.file("exp2.yaml"),
      "name: x\nbase: base.yaml\nvariants:\n  - name: a\n    set: [model.position.type=rop]\n");
  try {
    load_experiment(g);
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    std::string s = e.what();
    EXPECT_NE(s.find("variant 'a'"), std::string::npos) << s;
    EXPECT_NE(s.find("did you mean 'rope'"), std::string::npos) << s;
  }
}

TEST(Config, ExperimentCombinationsBeyondALearnedTableAreNotApplicable) {
  TempDir d;
  write(d.file("base.yaml"), "task: {type: clm, seq_len: 32}\n");
  // learned has a 64-position table: the 128 task is n/a for it, not an error, and the reason
  // names the key; rope runs both lengths.
  auto f = write(d.file("exp.yaml"),
                 "name: x\nbase: base.yaml\n"
                 "tasks:\n  - {name: len64, set: [task.seq_len=64]}\n"
                 "  - {name: len128, set: [task.seq_len=128]}\n"
                 "variants:\n  - {name: learned, set: [model.position.type=learned, "
                 "model.position.max_len=64]}\n  - {name: rope}\n");
  auto runs = experiment_runs(load_experiment(f));
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].name, "len64.learned");
  EXPECT_TRUE(runs[0].not_applicable.empty());
  EXPECT_EQ(runs[0].config.task.seq_len, 64);
  EXPECT_EQ(runs[2].name, "len128.learned");
  EXPECT_NE(runs[2].not_applicable.find("task.seq_len"), std::string::npos)
      << runs[2].not_applicable;
  EXPECT_NE(runs[2].not_applicable.find("learned position table"), std::string::npos);
  EXPECT_TRUE(runs[3].not_applicable.empty());
  EXPECT_EQ(runs[3].config.task.seq_len, 128);
  // A combination that fails for another reason is an error naming the run, caught at load
  // although each task and each variant is fine on its own (t5 with linear attention).
  auto bad =
      write(d.file("bad.yaml"),
            "name: x\nbase: base.yaml\n"
            "tasks:\n  - {name: soft}\n  - {name: lin, set: [model.attention.kernel=linear]}\n"
            "variants:\n  - {name: rope}\n  - {name: t5, set: [model.position.type=t5]}\n");
  try {
    load_experiment(bad);
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    std::string s = e.what();
    EXPECT_NE(s.find("run 'lin.t5'"), std::string::npos) << s;
  }
  // An experiment in which no run is possible is refused.
  auto none =
      write(d.file("none.yaml"),
            "name: x\nbase: base.yaml\ntasks:\n  - {name: len128, set: [task.seq_len=128]}\n"
            "variants:\n  - {name: learned, set: [model.position.type=learned, "
            "model.position.max_len=64]}\n");
  try {
    load_experiment(none);
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    std::string s = e.what();
    EXPECT_NE(s.find("no run of this experiment is possible"), std::string::npos) << s;
  }
}

TEST(Config, SweepExpandsVariantsTimesSettingsTimesSeeds) {
  TempDir d;
  write(d.file("base.yaml"), "task: {type: clm}\n");
  auto f = write(d.file("exp.yaml"),
                 "name: x\nbase: base.yaml\nvariants:\n  - {name: rope}\n"
                 "  - {name: t5, set: [model.position.type=t5]}\n"
                 "settings:\n  - {name: lr1, set: [train.lr=0.001]}\n"
                 "  - {name: lr2, set: [train.lr=0.002]}\nseeds: [1, 2, 3]\n");
  auto runs = experiment_runs(load_experiment(f));
  ASSERT_EQ(runs.size(), 12u);
  EXPECT_EQ(runs[0].config.run.name, "rope.lr1.seed1");
  EXPECT_EQ(runs[0].config.run.seed, 1);
  EXPECT_DOUBLE_EQ(runs[0].config.train.lr, 0.001);
  EXPECT_EQ(runs[11].config.run.name, "t5.lr2.seed3");
  EXPECT_STREQ(runs[11].config.model.position.type(), "t5");
  EXPECT_DOUBLE_EQ(runs[11].config.train.lr, 0.002);
  EXPECT_EQ(runs[11].variant, "t5");
  EXPECT_EQ(runs[11].setting, "lr2");
  // A task axis: every variant x setting x seed once per task, named after the task first;
  // the task's overrides come before the variant's and the setting's.
  auto tasks = write(d.file("tasks.yaml"),
                     "name: x\nbase: base.yaml\nvariants:\n  - {name: rope}\n"
                     "tasks:\n  - {name: a, set: [task.seq_len=32, train.lr=0.5]}\n"
                     "  - {name: b, set: [task.seq_len=48]}\n"
                     "settings:\n  - {name: lr1, set: [train.lr=0.001]}\nseeds: [1, 2]\n");
  auto tr = experiment_runs(load_experiment(tasks));
  ASSERT_EQ(tr.size(), 4u);
  EXPECT_EQ(tr[0].config.run.name, "a.rope.lr1.seed1");
  EXPECT_EQ(tr[0].task, "a");
  EXPECT_EQ(tr[0].config.task.seq_len, 32);
  EXPECT_DOUBLE_EQ(tr[0].config.train.lr, 0.001);
  EXPECT_EQ(tr[3].config.run.name, "b.rope.lr1.seed2");
  EXPECT_EQ(tr[3].config.task.seq_len, 48);
  // Without a sweep: one run per variant, named after it.
  auto plain = write(d.file("plain.yaml"), "name: x\nbase: base.yaml\nvariants:\n  - {name: a}\n");
  auto one = experiment_runs(load_experiment(plain));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].config.run.name, "a");
  // A bad setting is named; so are repeated seeds.
  auto bad = write(d.file("bad.yaml"),
                   "name: x\nbase: base.yaml\nvariants:\n  - {name: a}\n"
                   "settings:\n  - {name: s, set: [train.lr=-1]}\nseeds: [1, 1]\n");
  try {
    load_experiment(bad);
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    std::string s = e.what();
    EXPECT_NE(s.find("seeds must be positive and distinct"), std::string::npos) << s;
  }
  auto bad2 = write(d.file("bad2.yaml"),
                    "name: x\nbase: base.yaml\nvariants:\n  - {name: a}\n"
                    "settings:\n  - {name: s, set: [train.lr=-1]}\n");
  try {
    load_experiment(bad2);
    FAIL() << "expected an error";
  } catch (const ConfigError& e) {
    std::string s = e.what();
    EXPECT_NE(s.find("setting 's'"), std::string::npos) << s;
  }
}

TEST(Config, DescribedTsvLayoutsAndRankingAreChecked) {
  TempDir d;
  auto expect_error = [&](const std::string& yaml, const std::string& want) {
    auto f = write(d.file("c.yaml"), yaml);
    try {
      load_config(f, {});
      FAIL() << "expected an error for: " << yaml;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  const std::string enc = "model: {arch: encoder}\n";
  // A described layout loads; so does a ranking layout with task rank.
  write(d.file("ok.yaml"), enc +
                               "task: {type: glue}\ndata: {source: glue, train: x, tsv: "
                               "{a: text, label: y, labels: [no, yes]}}\n");
  EXPECT_NO_THROW(load_config(d.file("ok.yaml"), {}));
  write(d.file("rank.yaml"), enc +
                                 "task: {type: rank}\ndata: {source: glue, train: x, tsv: "
                                 "{a: A, b: B, c: C, label: l, labels: [B, C]}}\n");
  EXPECT_NO_THROW(load_config(d.file("rank.yaml"), {}));
  write(d.file("brank.yaml"), enc + "task: {type: rank}\ndata: {source: bible-rank}\n");
  EXPECT_NO_THROW(load_config(d.file("brank.yaml"), {}));
  expect_error(enc + "task: {type: glue}\ndata: {source: glue, train: x, tsv: {a: t, label: y}}\n",
               "data.tsv.labels");
  expect_error(enc +
                   "task: {type: glue}\ndata: {source: glue, train: x, glue_task: CoLA, tsv: "
                   "{a: t, label: y, regression: true}}\n",
               "not both");
  expect_error(enc + "task: {type: rank}\ndata: {source: bible-cola}\n", "task rank needs ranking");
  expect_error(enc + "task: {type: glue}\ndata: {source: bible-rank}\n",
               "ranking data (a, b, c) needs task.type rank");
  expect_error(enc +
                   "task: {type: rank}\ndata: {source: glue, train: x, tsv: {a: A, c: C, "
                   "label: l, labels: [B, C]}}\n",
               "data.tsv.c");
}

}  // namespace
}  // namespace ropelab::config
