#include "lab/step_split.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace ropelab::lab {

// One recorder per thread (the callback is thread-local too).
struct StepSplit::Tally {
  struct Frame {
    std::chrono::steady_clock::time_point start;
    const char* name;
    double children_s;
  };
  bool active = false;
  std::vector<Frame> stack;
  double matmul_s = 0, recorded_s = 0;
  std::map<std::string, double> self_s;
};

namespace {

StepSplit::Tally& this_threads_tally() {
  thread_local StepSplit::Tally t;
  return t;
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  auto& t = this_threads_tally();
  if (t.active) t.stack.push_back({std::chrono::steady_clock::now(), fn.name(), 0.0});
  return nullptr;
}

void on_exit(const at::RecordFunction& /*fn*/, at::ObserverContext* /*ctx*/) {
  auto& t = this_threads_tally();
  if (!t.active || t.stack.empty()) return;
  const StepSplit::Tally::Frame f = t.stack.back();
  t.stack.pop_back();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - f.start).count();
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
  static constexpr std::array<const char*, 7> kMatmuls{
      "aten::mm",      "aten::addmm",          "aten::bmm", "aten::baddbmm", "aten::addbmm",
      "ropelab::gemm", "ropelab::tile_product"};
  return std::any_of(kMatmuls.begin(), kMatmuls.end(),
                     [&](const char* m) { return std::strcmp(name, m) == 0; });
}

StepSplit::StepSplit() : tally_(&this_threads_tally()) {
  auto& t = *tally_;
  if (t.active) throw std::logic_error("StepSplit: one at a time per thread");
  t = Tally{};
  t.active = true;
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_enter, &on_exit).needsInputs(false).needsOutputs(false));
}

StepSplit::~StepSplit() {
  at::removeCallback(handle_);
  tally_->active = false;
}

double StepSplit::matmul_s() const { return tally_->matmul_s; }
double StepSplit::recorded_s() const { return tally_->recorded_s; }
const std::map<std::string, double>& StepSplit::self_s() const { return tally_->self_s; }

}  // namespace ropelab::lab
