// Progress display for long work on stderr: redrawn in place on a TTY (at most ~8 times a
// second), periodic log lines (every 10 s) otherwise. Shows done/total, rate, ETA and task fields
// (loss, lr, tokens/s...).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace ropelab {

class Progress {
 public:
  // `unit` names what is counted ("step", "verse"); total 0 = unknown. `start` is the count the
  // work resumes from (a resumed run's step): the rate and ETA count only what this process did.
  Progress(std::string label, int64_t total, std::string unit = "it", int64_t start = 0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Sets the absolute count; `fields` is free text shown after the rate (e.g. "loss 3.21").
  void update(int64_t done, const std::string& fields = "");
  // Prints the final state and a newline.
  void finish(const std::string& fields = "");
  // The line as it would be drawn now (without the TTY control codes).
  std::string render(const std::string& fields = "") const;

 private:
  std::string label_, unit_;
  int64_t total_, start_count_, done_, drawn_ = -1;  // drawn_: the count last shown
  bool tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace ropelab
