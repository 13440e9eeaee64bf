#include "tasks/sums.h"

#include <torch/torch.h>

#include <atomic>
#include <stdexcept>

#include "dist/world.h"

namespace ropelab::tasks {

namespace {
std::atomic<int64_t> g_host_reads{0};
constexpr int64_t kFields = static_cast<int64_t>(Sum::kCount);
}  // namespace

StepSums::StepSums(c10::Device device)
    : v_(torch::zeros({kFields}, torch::TensorOptions().dtype(torch::kFloat64).device(device))) {}

StepSums& StepSums::set(Sum f, const at::Tensor& x) {
  torch::NoGradGuard ng;
  if (!v_.defined()) v_ = StepSums(x.device()).v_;
  v_.select(0, static_cast<int64_t>(f)).copy_(x.detach().reshape({}));
  return *this;
}

StepSums& StepSums::set(Sum f, double x) {
  if (!v_.defined()) throw std::logic_error("StepSums::set: construct the sums on a device first");
  v_.select(0, static_cast<int64_t>(f)).fill_(x);
  return *this;
}

void StepSums::add(const StepSums& o) {
  if (o.empty()) return;
  torch::NoGradGuard ng;
  if (empty())
    v_ = o.v_.clone();
  else
    v_.add_(o.v_);
}

HostSums StepSums::read() const {
  HostSums h;
  if (empty()) return h;
  ++g_host_reads;
  auto c = v_.to(torch::kCPU);
  const double* p = c.data_ptr<double>();
  auto at = [&](Sum f) { return p[static_cast<int64_t>(f)]; };
  h.nll = at(Sum::kNll);
  h.targets = at(Sum::kTargets);
  h.correct = at(Sum::kCorrect);
  h.tokens = at(Sum::kTokens);
  h.examples = at(Sum::kExamples);
  h.exact = at(Sum::kExact);
  return h;
}

int64_t host_reads() { return g_host_reads.load(); }

void over_ranks(StepSums& s, c10::Device device, const char* what) {
  const auto& w = dist::world();
  if (!w.distributed()) return;
  if (s.empty()) s = StepSums(device);
  w.sum_in_place({s.tensor()}, what);
}

}  // namespace ropelab::tasks
