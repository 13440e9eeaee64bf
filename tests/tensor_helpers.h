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

// ||got - want|| <= rel * ||want|| (2-norms): for sums over thousands of terms in float32, where
// an element that cancels to near zero carries the rounding of every term.
inline ::testing::AssertionResult close_in_norm(const torch::Tensor& got, const torch::Tensor& want,
                                                double rel) {
  if (got.sizes() != want.sizes()) {
    std::ostringstream os;
    os << "shape " << got.sizes() << " != expected " << want.sizes();
    return ::testing::AssertionFailure() << os.str();
  }
  auto g = got.to(torch::kFloat64), w = want.to(torch::kFloat64);
  double err = (g - w).norm().item<double>(), scale = w.norm().item<double>();
  if (err <= rel * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "||got - want|| " << err << " > " << rel << " * ||want|| (" << scale << ")";
}

}  // namespace ropelab::test
