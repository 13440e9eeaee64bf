// The libtorch compatibility unit (src/compat/): each version difference it hides, checked on
// the libtorch this build uses (Debian 12's 1.13, Debian 13's 2.6, or a PyTorch wheel's 2.x).
#include <torch/version.h>

#include "compat/c10d.h"
#include "compat/torch_compat.h"
#include "dist/launch.h"
#include "helpers.h"

namespace ropelab {
namespace {

TEST(Compat, VersionMatchesTheHeaders) {
  EXPECT_EQ(compat::libtorch_version(), std::string(TORCH_VERSION));
  EXPECT_EQ(compat::libtorch_version_number(), TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR);
  EXPECT_GE(compat::libtorch_version_number(), 113);  // the oldest supported libtorch
  // The string starts with the major.minor the number encodes.
  std::string mm = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
  EXPECT_EQ(compat::libtorch_version().rfind(mm, 0), 0u) << compat::libtorch_version();
}

TEST(Compat, CpuAutocastSwitchesOnAndOffInBf16) {
  ASSERT_FALSE(compat::autocast_enabled(c10::DeviceType::CPU));
  compat::set_bf16_autocast(c10::DeviceType::CPU, true);
  EXPECT_TRUE(compat::autocast_enabled(c10::DeviceType::CPU));
  EXPECT_EQ(compat::autocast_dtype(c10::DeviceType::CPU), at::kBFloat16);
  // Autocast really applies: a matmul of fp32 inputs comes out bf16.
  auto a = torch::randn({4, 8}), b = torch::randn({8, 3});
  EXPECT_EQ(torch::matmul(a, b).scalar_type(), at::kBFloat16);
  compat::set_bf16_autocast(c10::DeviceType::CPU, false);
  EXPECT_FALSE(compat::autocast_enabled(c10::DeviceType::CPU));
  EXPECT_EQ(torch::matmul(a, b).scalar_type(), at::kFloat);
}

TEST(Compat, CudaAutocastIsIndependentOfCpu) {
  // Switching CUDA autocast (state only; no GPU needed) leaves the CPU's alone.
  compat::set_bf16_autocast(c10::DeviceType::CUDA, true);
  EXPECT_TRUE(compat::autocast_enabled(c10::DeviceType::CUDA));
  EXPECT_FALSE(compat::autocast_enabled(c10::DeviceType::CPU));
  EXPECT_EQ(compat::autocast_dtype(c10::DeviceType::CUDA), at::kBFloat16);
  compat::set_bf16_autocast(c10::DeviceType::CUDA, false);
  EXPECT_FALSE(compat::autocast_enabled(c10::DeviceType::CUDA));
}

TEST(Compat, OptimizerStateKeyFindsLibtorchsOwnEntries) {
  // libtorch's AdamW files each parameter's state under the key compat computes for it.
  auto w = torch::randn({3, 2}, torch::requires_grad()),
       u = torch::randn({5}, torch::requires_grad());
  torch::optim::AdamW opt({w, u}, torch::optim::AdamWOptions(0.1));
  (w.square().sum() + u.sum()).backward();
  opt.step();
  ASSERT_EQ(opt.state().size(), 2u);
  for (const auto& p : {w, u}) {
    auto it = opt.state().find(compat::optimizer_state_key(opt.state(), p.unsafeGetTensorImpl()));
    ASSERT_NE(it, opt.state().end());
    EXPECT_EQ(static_cast<torch::optim::AdamWParamState&>(*it->second).step(), 1);
  }
  EXPECT_EQ(opt.state().count(compat::optimizer_state_key(opt.state(), &opt)), 0u);
}

// The fused AdamW kernel (libtorch 2.1 on; what FusedAdamW runs on a GPU) takes its arguments
// in the order compat::fused_adamw passes them: the same steps as libtorch's AdamW, on the CPU.
TEST(Compat, FusedAdamwKernelEqualsAdamW) {
  if (!compat::has_fused_adamw()) GTEST_SKIP() << "this libtorch has no fused AdamW kernel";
  torch::manual_seed(4);
  auto p0 = torch::randn({1000});
  auto a = p0.clone().requires_grad_(), b = p0.clone();
  auto m = torch::zeros_like(b), v = torch::zeros_like(b);
  torch::optim::AdamW plain(
      {a}, torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-6).weight_decay(0.1));
  for (int step = 1; step <= 5; ++step) {
    auto g = torch::randn({1000});
    a.mutable_grad() = g.clone();
    plain.step();
    compat::fused_adamw({b}, {g}, {m}, {v}, {torch::full({}, static_cast<double>(step))}, 1e-2, 0.9,
                        0.95, 0.1, 1e-6);
  }
  EXPECT_TRUE(torch::allclose(b, a.detach(), 1e-5, 1e-7))
      << "max |diff| " << (b - a.detach()).abs().max().item<double>();
}

TEST(Compat, OneRankGlooGroupRunsEveryCollective) {
  // The server and a second client (a libuv server where the libtorch has libuv, the classic
  // one where it does not, as on Debian 13).
  auto port = static_cast<uint16_t>(dist::free_port());
  auto store = compat::make_tcp_store("127.0.0.1", port, true, std::chrono::milliseconds(10000));
  auto client = compat::make_tcp_store("127.0.0.1", port, false, std::chrono::milliseconds(10000));
  compat::store_set(*store, "key", "value");
  auto got = client->get("key");
  EXPECT_EQ(std::string(got.begin(), got.end()), "value");

#ifdef ROPELAB_WITHOUT_GLOO
  GTEST_SKIP() << "this build has no Gloo headers (a PyTorch wheel's libtorch): NCCL ranks only";
#else
  std::vector<std::shared_ptr< ::gloo::transport::Device> > devices{
      c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")};
  auto pg = compat::make_gloo_group(store, 0, 1, std::chrono::milliseconds(10000), devices, 1);
  ASSERT_TRUE(pg);
  pg->barrier()->wait();
  std::vector<at::Tensor> io{torch::arange(5, torch::kFloat32)};
  pg->allreduce(io)->wait();
  EXPECT_TRUE(io[0].equal(torch::arange(5, torch::kFloat32)));
  pg->broadcast(io)->wait();
  std::vector<std::vector<at::Tensor> > all{{torch::zeros({5})}};
  pg->allgather(all, io)->wait();
  EXPECT_TRUE(all[0][0].equal(io[0]));
  // No NCCL group from a libtorch without it; with it, the factory exists (needs a GPU to run).
  if (!compat::kHaveNccl) {
    EXPECT_FALSE(compat::make_nccl_group(store, 0, 1, std::chrono::milliseconds(1000)));
  }
#endif
}

}  // namespace
}  // namespace ropelab
