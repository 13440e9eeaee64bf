#include "util/progress.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace ropelab {

namespace {
constexpr double kLogInterval = 10.0;  // seconds between log lines off a TTY

std::string human_rate(double r) {
  char buf[32];
  if (r >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", r / 1e6);
  else if (r >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", r / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.2f", r);
  return buf;
}
}  // namespace

std::string format_duration(double s) {
  char buf[32];
  auto t = static_cast<int64_t>(std::llround(s));
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

Progress::Progress(std::string label, int64_t total, std::string unit, int64_t start)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      start_count_(start),
      done_(start),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() {
  if (!finished_ && tty_ && drawn_ >= 0) std::fputc('\n', stderr);
}

std::string Progress::render(const std::string& fields) const {
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = el > 0 ? static_cast<double>(done_ - start_count_) / el : 0.0;
  std::string s = label_ + " ";
  char buf[160];
  if (total_ > 0) {
    double frac = static_cast<double>(done_) / static_cast<double>(total_);
    int width = 24, fill = static_cast<int>(frac * width);
    // Complete work has nothing left, measured rate or not (a run resumed at its last step).
    std::string eta = done_ >= total_ ? "0s"
                      : rate > 0      ? format_duration(static_cast<double>(total_ - done_) / rate)
                                      : "?";
    s += "[" + std::string(fill, '#') + std::string(width - fill, '.') + "] ";
    std::snprintf(buf, sizeof buf, "%ld/%ld %s (%3.0f%%) | %s %s/s | elapsed %s | ETA %s", done_,
                  total_, unit_.c_str(), 100.0 * frac, human_rate(rate).c_str(), unit_.c_str(),
                  format_duration(el).c_str(), eta.c_str());
  } else {
    std::snprintf(buf, sizeof buf, "%ld %s | %s %s/s | elapsed %s", done_, unit_.c_str(),
                  human_rate(rate).c_str(), unit_.c_str(), format_duration(el).c_str());
  }
  s += buf;
  if (!fields.empty()) s += " | " + fields;
  return s;
}

void Progress::update(int64_t done, const std::string& fields) {
  done_ = done;
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_draw_).count();
  if (tty_) {
    if (since < 0.125 && done_ != total_) return;
    std::fprintf(stderr, "\r\033[K%s", render(fields).c_str());
    std::fflush(stderr);
  } else {
    if (since < kLogInterval) return;
    spdlog::info("{}", render(fields));
  }
  drawn_ = done_;
  last_draw_ = now;
}

void Progress::finish(const std::string& fields) {
  if (finished_) return;
  finished_ = true;
  if (!tty_ && drawn_ == done_ && fields.empty()) return;  // already logged this state
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s\n", render(fields).c_str());
    std::fflush(stderr);
  } else {
    spdlog::info("{}", render(fields));
  }
}

}  // namespace ropelab
