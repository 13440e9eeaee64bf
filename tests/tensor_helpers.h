// Tensor comparison for tests: allclose that reports the max difference and the first
// mismatching index.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <sstream>

namespace ropelab::test {

// allclose with a message that shows the max difference and the first bad index.
inline ::testing::AssertionResult close(const torch::Tensor& got, const torch::Tensor& want,
                                        double rtol = 1e-5, double atol = 1e-6) {
  if (got.sizes() != want.sizes()) {
    std::ostringstream os;
    os << "shape " << got.sizes() << " != expected " << want.sizes();
    return ::testing::AssertionFailure() << os.str();
  }
  auto g = got.to(torch::kFloat64).contiguous(), w = want.to(torch::kFloat64).contiguous();
  auto diff = (g - w).abs();
  auto bad = diff > (atol + rtol * w.abs());
  if (!bad.any().item<bool>()) return ::testing::AssertionSuccess();
  int64_t idx = bad.flatten().nonzero()[0].item<int64_t>();
  std::ostringstream os;
  os << "max |diff| " << diff.max().item<double>() << "; first mismatch at flat index " << idx
     << ": got " << g.flatten()[idx].item<double>() << ", want " << w.flatten()[idx].item<double>();
  return ::testing::AssertionFailure() << os.str();
}

}  // namespace ropelab::test
