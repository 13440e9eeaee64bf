// One writer per run (util/dir_lock.h), config changes on resume (train/config_history.h), the
// log window carried by checkpoints, and metrics.jsonl as a live run's readers see it.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "config/loader.h"
#include "helpers.h"
#include "train/config_history.h"
#include "train/metrics.h"
#include "train/trainer.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/fs.h"
#include "weights/checkpoint.h"

namespace ropelab {
namespace {

namespace stdfs = std::filesystem;

std::string host() {
  char buf[256] = {};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

// Another holder of <dir>/.lock, as a second process would be: its own open file description
// (flock locks of two descriptions conflict even within one process).
struct OtherHolder {
  int fd;
  OtherHolder(const std::string& dir, long pid, bool lock) {
    fd = ::open((dir + "/.lock").c_str(), O_RDWR | O_CREAT, 0644);
    if (lock) {
      EXPECT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
    }
    nlohmann::json holder;
    holder["host"] = host();
    holder["pid"] = pid;
    holder["command"] = "ropelab train other.yaml";
    holder["since"] = 1e9;
    std::string text = holder.dump();
    EXPECT_EQ(ftruncate(fd, 0), 0);
    EXPECT_EQ(pwrite(fd, text.data(), text.size(), 0), static_cast<ssize_t>(text.size()));
  }
  ~OtherHolder() { ::close(fd); }
};

// A free exclusive lock on <dir>/.lock, tried from another description.
bool free_to_others(const std::string& dir) {
  int fd = ::open((dir + "/.lock").c_str(), O_RDWR);
  bool ok = flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return ok;
}

long dead_pid() {
  pid_t p = fork();
  if (p == 0) _exit(0);
  waitpid(p, nullptr, 0);
  return p;
}

TEST(DirLock, ASecondWriterIsRefusedAtOnceNamingTheHolder) {
  test::TempDir d;
  OtherHolder other(d.path(), static_cast<long>(getppid()), /*lock=*/true);
  std::string text = fs::read_file(d.file(".lock"));
  try {
    fs::DirLock::acquire(d.path(), "train");
    FAIL() << "a held lock was taken";
  } catch (const UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(d.path() + ": in use by pid " + std::to_string(getppid()) + " on host " +
                       host() + " (ropelab train other.yaml), locked "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("train refused"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line";
  }
  EXPECT_EQ(fs::read_file(d.file(".lock")), text) << "a refused writer changed the lock text";
}

TEST(DirLock, ALockLeftByADeadProcessIsTakenOverAndEmptiedOnRelease) {
  test::TempDir d;
  long pid = dead_pid();
  {
    // Its process died: the OS lock is free.
    OtherHolder gone(d.path(), pid, /*lock=*/false);
  }
  {
    auto lock = fs::DirLock::acquire(d.path(), "train");
    auto j = nlohmann::json::parse(fs::read_file(d.file(".lock")));
    EXPECT_EQ(j["pid"].get<long>(), static_cast<long>(getpid()));
    EXPECT_EQ(j["host"].get<std::string>(), host());
    EXPECT_FALSE(free_to_others(d.path()));
  }
  EXPECT_EQ(fs::read_file(d.file(".lock")), "");
  EXPECT_TRUE(free_to_others(d.path()));
}

TEST(DirLock, ANestedAcquireInOneProcessSharesTheOuterLock) {
  test::TempDir d;
  auto outer = fs::DirLock::acquire(d.path(), "ablate");
  {
    auto inner = fs::DirLock::acquire(d.path(), "eval");  // ablate -> evaluate_run
    EXPECT_TRUE(inner.held());
  }
  EXPECT_FALSE(free_to_others(d.path())) << "the inner release freed the outer lock";
  outer.release();
  EXPECT_TRUE(free_to_others(d.path()));
}

TEST(DirLock, ReadersSeeTheWriterAndHoldOffNewWriters) {
  test::TempDir d;
  EXPECT_FALSE(fs::ReadLock(d.path()).writer()) << "no lock file: nobody writes";
  {
    OtherHolder writer(d.path(), static_cast<long>(getppid()), /*lock=*/true);
    fs::ReadLock r(d.path());
    ASSERT_TRUE(r.writer());
    EXPECT_EQ(r.writer()->pid, static_cast<long>(getppid()));
  }
  fs::write_file_atomic(d.file(".lock"), "");
  fs::ReadLock r(d.path());
  EXPECT_FALSE(r.writer());
  EXPECT_FALSE(free_to_others(d.path())) << "a reader's shared lock let a writer in";
}

TEST(ConfigHistory, OnlyTheKeysThatDoNotChangeWhatIsLearnedMayChange) {
  std::map<std::string, std::string> a = {{"run.name", "x"},
                                          {"run.threads", "1"},
                                          {"train.max_steps", "100"},
                                          {"train.lr", "0.001"},
                                          {"model.d_model", "32"}};
  auto b = a;
  b["run.name"] = "y";  // locates the run: not compared
  b["run.threads"] = "2";
  b["train.max_steps"] = "200";
  b["train.lr"] = "0.002";
  auto changes = train::config_changes(a, b);
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[0].str(), "run.threads: 1 -> 2");
  EXPECT_TRUE(changes[0].may_change);
  EXPECT_EQ(changes[1].str(), "train.lr: 0.001 -> 0.002");
  EXPECT_FALSE(changes[1].may_change);
  EXPECT_TRUE(changes[2].may_change);
  b["train.max_steps"] = "50";  // fewer steps: refused
  EXPECT_FALSE(train::config_changes(a, b)[2].may_change);
  EXPECT_TRUE(train::config_changes(a, a).empty());
}

TEST(ConfigHistory, RecordedChangesAccumulateAndReadBack) {
  test::TempDir d;
  EXPECT_TRUE(train::read_config_history(d.path()).empty());
  train::record_config_changes(d.path(), 10, {{"train.max_steps", "10", "20", true}},
                               "may change on resume");
  train::record_config_changes(d.path(), 20, {{"train.lr", "0.1", "0.2", false}},
                               "--allow-config-change");
  EXPECT_EQ(train::read_config_history(d.path()),
            (std::vector<std::string>{"step 10: train.max_steps: 10 -> 20",
                                      "step 20: train.lr: 0.1 -> 0.2"}));
  test::write(d.file("config_history.yaml"), "- step: [1\n");
  EXPECT_THROW(train::read_config_history(d.path()), UserError);
}

config::Config tiny(const test::TempDir& d, const std::vector<std::string>& overrides) {
  return test::tiny_clm_run(d, 3, "r",
                            "max_steps: 6, batch_size: 2, log_every: 4, eval_every: 0, "
                            "checkpoint_every: 3, keep_last: 5, schedule: {warmup: 2}",
                            "", overrides);
}

TEST(ConfigHistory, AResumeRefusesAChangedRecipeAndRecordsTheAllowedChanges) {
  test::TempDir d;
  train::train(tiny(d, {}));
  const std::string run = d.file("runs/r");
  const std::string cfg = fs::read_file(run + "/config.yaml");
  try {
    train::train(tiny(d, {"train.batch_size=4", "train.max_steps=8"}));
    FAIL() << "a changed batch size was accepted";
  } catch (const UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("holds a run with a different configuration (train.batch_size: 2 -> 4)"),
              std::string::npos)
        << msg;
  }
  EXPECT_EQ(fs::read_file(run + "/config.yaml"), cfg);
  EXPECT_FALSE(fs::exists(run + "/config_history.yaml"));

  auto r = train::train(tiny(d, {"train.max_steps=8"}));
  EXPECT_EQ(r.steps, 8);
  EXPECT_EQ(train::read_config_history(run),
            (std::vector<std::string>{"step 6: train.max_steps: 6 -> 8"}));
  train::TrainOptions o;
  o.allow_config_change = true;
  train::train(tiny(d, {"train.max_steps=9", "train.lr=0.01"}), o);
  auto h = train::read_config_history(run);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[2], "step 8: train.lr: 0.001 -> 0.01");
  EXPECT_NE(fs::read_file(run + "/config.yaml").find("lr: 0.01"), std::string::npos);
}

TEST(LogWindow, ACheckpointInsideALogWindowCarriesItsSums) {
  test::TempDir d;
  train::train(tiny(d, {"train.max_steps=8"}));  // rows at 4 and 8; checkpoints at 3, 6, 8
  auto state = [&](int step) {
    char name[32];
    std::snprintf(name, sizeof name, "step-%09d", step);
    return nlohmann::json::parse(
        fs::read_file(d.file(std::string("runs/r/checkpoints/") + name + "/state.json")));
  };
  auto w3 = state(3)["log_window"].get<std::vector<double>>();
  auto w6 = state(6)["log_window"].get<std::vector<double>>();
  ASSERT_EQ(w3.size(), static_cast<size_t>(tasks::Sum::kCount));
  ASSERT_EQ(w6.size(), w3.size());
  const auto targets = static_cast<size_t>(tasks::Sum::kTargets);
  // Steps 1-3 and steps 5-6 of the same batch shape: 3 and 2 steps' targets.
  EXPECT_GT(w3[targets], 0);
  EXPECT_DOUBLE_EQ(w3[targets] / 3, w6[targets] / 2);
  EXPECT_TRUE(state(8)["log_window"].empty()) << "step 8 was logged: nothing left to carry";
}

TEST(MetricsJsonl, ReadersTakeWholeLinesAndTheLastRowOfAStep) {
  test::TempDir d;
  test::write(d.file("m.jsonl"),
              "{\"split\":\"train\",\"loss\":3,\"step\":1}\n"
              "{\"split\":\"valid\",\"loss\":9,\"step\":1}\n"
              "{\"split\":\"train\",\"loss\":2,\"step\":2}\n"
              "{\"split\":\"train\",\"loss\":1.5,\"step\":2}\n"
              "{\"split\":\"train\",\"loss\":null,\"step\":3}\n"
              "{\"split\":\"train\",\"loss\":1,\"st");
  auto m = train::read_metrics_jsonl(d.file("m.jsonl"), "train");
  EXPECT_EQ(m["step"], (std::vector<double>{1, 2, 3}));
  ASSERT_EQ(m["loss"].size(), 3u);
  EXPECT_EQ(m["loss"][1], 1.5);
  EXPECT_TRUE(std::isnan(m["loss"][2]));
  test::write(d.file("bad.jsonl"), "{\"split\":\"train\"}\nnot json\n");
  try {
    train::read_metrics_jsonl(d.file("bad.jsonl"), "train");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2: not a JSON row"), std::string::npos);
  }
}

}  // namespace
}  // namespace ropelab
