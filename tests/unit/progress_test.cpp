// The progress display: durations, and a rate and ETA that count only this process's work when
// a run resumes from a later step.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "util/progress.h"

namespace ropelab {
namespace {

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(format_duration(12.4), "12s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3720), "1h02m");
}

// A run resumed at step 21000 of 30000 that has done 100 steps in about 0.2 s runs at about
// 500 steps/s, not 21100 / 0.2; its ETA is therefore seconds, and never reads "0s" or "?".
// Sleeping longer (a loaded machine) only lowers the rate, so the bounds cannot flake.
TEST(Progress, RateAndEtaCountFromTheResumeStep) {
  Progress bar("train", 30000, "step", 21000);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  bar.update(21100);
  std::string line = bar.render();
  EXPECT_NE(line.find("21100/30000 step ( 70%)"), std::string::npos) << line;
  auto rate_at = line.find(" step/s");
  ASSERT_NE(rate_at, std::string::npos) << line;
  auto rate_from = line.rfind("| ", rate_at) + 2;
  double rate = std::stod(line.substr(rate_from, rate_at - rate_from));
  EXPECT_LE(rate, 500.0 * 1.01) << line;  // counted from step 0 it would read "105.50k"
  EXPECT_EQ(line.find("k step/s"), std::string::npos) << line;
  // 8900 steps left at <= 500 steps/s: at least 17 s.
  auto eta = line.substr(line.find("ETA ") + 4);
  EXPECT_TRUE(eta.find('m') != std::string::npos || std::stoi(eta) >= 17) << line;
}

TEST(Progress, FreshWorkCountsFromZero) {
  Progress bar("encode", 10, "doc");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  bar.update(5);
  std::string line = bar.render("loss 1.0");
  EXPECT_NE(line.find("5/10 doc ( 50%)"), std::string::npos) << line;
  EXPECT_NE(line.find("| loss 1.0"), std::string::npos) << line;
  EXPECT_EQ(line.find("ETA ?"), std::string::npos) << line;  // a rate was measured
}

// Work that is complete has nothing left: its ETA is 0s even when no rate was measured (a run
// resumed at its last step), never "?".
TEST(Progress, CompleteWorkHasNoEta) {
  Progress bar("train", 1000, "step", 1000);
  std::string line = bar.render();
  EXPECT_NE(line.find("1000/1000 step (100%)"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 0s"), std::string::npos) << line;
}

}  // namespace
}  // namespace ropelab
