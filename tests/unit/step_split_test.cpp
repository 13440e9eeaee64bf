// lab/step_split.h: the matmul / other split of a step from libtorch's RecordFunction hooks.
#include "lab/step_split.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "util/gemm.h"

namespace ropelab {
namespace {

TEST(StepSplit, CountsMatrixProductsSelfTimeAndTheRestApart) {
  auto a = torch::randn({256, 256}), b = torch::randn({256, 256}), bias = torch::randn({256});
  lab::StepSplit split;
  auto c = torch::mm(a, b);
  c = torch::addmm(bias, a, b);  // its bias copy is a child op: "other", not matmul
  auto d = (c * 2 + 1).exp().sum();
  EXPECT_GT(split.matmul_s(), 0.0);
  EXPECT_GT(split.recorded_s(), split.matmul_s());
  const auto& self = split.self_s();
  ASSERT_TRUE(self.count("aten::mm") && self.count("aten::addmm") && self.count("aten::exp"));
  EXPECT_NEAR(split.matmul_s(), self.at("aten::mm") + self.at("aten::addmm"), 1e-9);
  double sum = 0;
  for (const auto& [name, s] : self) {
    EXPECT_GE(s, 0.0) << name;
    sum += s;
  }
  EXPECT_NEAR(sum, split.recorded_s(), 1e-6);  // self times add up to the outermost ops' times
  // ropelab's oneDNN gemm calls count as matmuls too.
  if (util::fast_sgemm_available()) {
    const double before = split.matmul_s();
    util::sgemm(false, false, 64, 64, 64, a.data_ptr<float>(), 256, b.data_ptr<float>(), 256, 0.0F,
                c.data_ptr<float>(), 256);
    EXPECT_GT(split.matmul_s(), before);
    EXPECT_TRUE(split.self_s().count("ropelab::gemm"));
  }
}

TEST(StepSplit, SeesOnlyItsOwnThreadAndStopsWhenGone) {
  auto a = torch::randn({128, 128});
  double other_thread = 0;
  {
    lab::StepSplit split;
    std::thread t([&] { torch::mm(a, a); });
    t.join();
    other_thread = split.matmul_s();
  }
  EXPECT_EQ(other_thread, 0.0);
  lab::StepSplit again;  // a new one starts from zero, the old callback removed
  EXPECT_EQ(again.matmul_s(), 0.0);
  EXPECT_THROW(lab::StepSplit second, std::logic_error);  // one at a time per thread
  torch::mm(a, a);
  EXPECT_GT(again.matmul_s(), 0.0);
}

TEST(StepSplit, KnowsTheMatmulOps) {
  for (const char* m : {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "ropelab::gemm"})
    EXPECT_TRUE(lab::StepSplit::is_matmul(m)) << m;
  for (const char* o : {"aten::matmul", "aten::linear", "aten::copy_", "aten::mm_backward", ""})
    EXPECT_FALSE(lab::StepSplit::is_matmul(o)) << o;
}

}  // namespace
}  // namespace ropelab
