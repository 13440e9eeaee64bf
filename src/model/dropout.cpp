#include "model/dropout.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/nn/functional/dropout.h>

#include <limits>

#include "util/random.h"

namespace ropelab::model {

torch::Tensor dropout(const torch::Tensor& x, double p, bool training) {
  if (p <= 0 || !training) return x;
  if (!x.device().is_cpu() || p >= 1)
    return torch::nn::functional::dropout(
        x, torch::nn::functional::DropoutFuncOptions().p(p).training(true));
  // The seed is drawn from torch's CPU generator (so torch::manual_seed governs the masks); the
  // draw is a CPU tensor, read directly (this path never runs on a device).
  auto seed = static_cast<uint64_t>(
      *torch::randint(std::numeric_limits<int64_t>::max(), {1}, torch::kInt64).data_ptr<int64_t>());
  // Keep an element when its 32-bit draw is >= p * 2^32: P(keep) = 1 - p (to 2^-32).
  auto threshold = static_cast<uint64_t>(p * 4294967296.0);
  auto mask = torch::empty(x.sizes(), x.options().requires_grad(false));
  int64_t n = mask.numel();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, mask.scalar_type(), "dropout", [&] {
    auto* m = mask.data_ptr<scalar_t>();
    const auto keep = static_cast<scalar_t>(1.0 / (1.0 - p));
    const auto drop = static_cast<scalar_t>(0.0);
    at::parallel_for(0, (n + 1) / 2, 8192, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        uint64_t r = util::mix64(seed ^ static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ULL);
        m[2 * i] = (r & 0xFFFFFFFFULL) >= threshold ? keep : drop;
        if (2 * i + 1 < n) m[2 * i + 1] = (r >> 32) >= threshold ? keep : drop;
      }
    });
  });
  return x * mask;
}

}  // namespace ropelab::model
