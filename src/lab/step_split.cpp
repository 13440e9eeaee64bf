#include "lab/step_split.h"

#include <array>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace ropelab::lab {

namespace {

using clock = std::chrono::steady_clock;

struct Frame {
  clock::time_point start;
  const char* name;
  double children_s;
};

// One recorder per thread (the callback is thread-local too).
struct Tally {
  bool active = false;
  std::vector<Frame> stack;
  double matmul_s = 0, recorded_s = 0;
  std::map<std::string, double> self_s;
};

Tally& tally() {
  thread_local Tally t;
  return t;
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  auto& t = tally();
  if (t.active) t.stack.push_back({clock::now(), fn.name(), 0.0});
  return nullptr;
}

void on_exit(const at::RecordFunction& /*fn*/, at::ObserverContext* /*ctx*/) {
  auto& t = tally();
  if (!t.active || t.stack.empty()) return;
  const Frame f = t.stack.back();
  t.stack.pop_back();
  const double took = std::chrono::duration<double>(clock::now() - f.start).count();
  const double self = took - f.children_s;
  if (StepSplit::is_matmul(f.name)) t.matmul_s += self;
  t.self_s[f.name] += self;
  if (t.stack.empty())
    t.recorded_s += took;
  else
    t.stack.back().children_s += took;
}

}  // namespace

bool StepSplit::is_matmul(const char* name) {
  static constexpr std::array<const char*, 6> kMatmuls{
      "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "ropelab::gemm"};
  for (const char* m : kMatmuls)
    if (std::strcmp(name, m) == 0) return true;
  return false;
}

StepSplit::StepSplit() {
  auto& t = tally();
  if (t.active) throw std::logic_error("StepSplit: one at a time per thread");
  t = Tally{};
  t.active = true;
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_enter, &on_exit).needsInputs(false).needsOutputs(false));
}

StepSplit::~StepSplit() {
  at::removeCallback(handle_);
  tally().active = false;
}

double StepSplit::matmul_s() const { return tally().matmul_s; }
double StepSplit::recorded_s() const { return tally().recorded_s; }
const std::map<std::string, double>& StepSplit::self_s() const { return tally().self_s; }

}  // namespace ropelab::lab
