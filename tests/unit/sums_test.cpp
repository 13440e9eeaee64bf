// Step sums on the device (tasks/sums.h) and the host-sync counter that tests use to show a
// training step reads nothing back inside its micro-batches (util/sync_hook.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tasks/sums.h"
#include "util/sync_hook.h"

namespace ropelab {
namespace {

using tasks::Sum;

TEST(HostSyncCounter, CountsValueReadsAndValueDependentShapesOnly) {
  auto x = torch::arange(6, torch::kFloat32).reshape({2, 3});
  util::HostSyncCounter syncs;
  auto y = (x * 2 + 1).softmax(-1).sum(0);  // arithmetic: nothing
  auto z = x.to(torch::kFloat64).argmax(-1);
  EXPECT_EQ(syncs.count(), 0) << syncs.report();
  (void)y.sum().item<double>();  // a value read
  (void)(x > 2).nonzero();       // output shape from the values
  (void)x.masked_select(x > 2);
  (void)x.index({x > 2});    // boolean-mask indexing (nonzero inside)
  (void)z.to(torch::kMeta);  // a copy between devices (the meta device stands in for a GPU)
  (void)z.to(torch::kCPU);   // not a copy: z is on the CPU already
  auto ops = syncs.ops();
  EXPECT_EQ(syncs.count(), 5) << syncs.report();
  for (const char* want : {"aten::item", "aten::nonzero", "aten::masked_select", "aten::copy_"})
    EXPECT_NE(std::find(ops.begin(), ops.end(), want), ops.end()) << want << ": " << syncs.report();
  syncs.reset();
  EXPECT_EQ(syncs.count(), 0);
}

TEST(HostSyncCounter, OneAtATime) {
  util::HostSyncCounter a;
  EXPECT_THROW(util::HostSyncCounter b, std::logic_error);
}

TEST(StepSums, SetAddAndReadWithoutReadingTheDeviceUntilRead) {
  auto nll_a = torch::full({}, 2.5, torch::kFloat32),
       nll_b = torch::full({}, 0.25, torch::kFloat64);
  auto correct = torch::full({}, 3, torch::kInt64);
  util::HostSyncCounter syncs;
  tasks::StepSums a(torch::kCPU), b(torch::kCPU), none;
  a.set(Sum::kNll, nll_a).set(Sum::kTargets, 4.0).set(Sum::kCorrect, correct);
  b.set(Sum::kNll, nll_b).set(Sum::kTokens, 7.0);
  tasks::StepSums total;
  total.add(none);  // empty: nothing
  EXPECT_TRUE(total.empty());
  total.add(a);
  total.add(b);
  EXPECT_EQ(syncs.count(), 0) << syncs.report();
  int64_t reads = tasks::host_reads();
  auto h = total.read();
  EXPECT_EQ(tasks::host_reads(), reads + 1);  // (on the CPU, not a copy the counter sees)
  EXPECT_DOUBLE_EQ(h.nll, 2.75);
  EXPECT_DOUBLE_EQ(h.targets, 4);
  EXPECT_DOUBLE_EQ(h.correct, 3);
  EXPECT_DOUBLE_EQ(h.tokens, 7);
  EXPECT_DOUBLE_EQ(h.examples, 0);
  // add() copies: a is unchanged by adding b into the total.
  EXPECT_DOUBLE_EQ(a.read().nll, 2.5);
  // Sums are detached: setting a field from a tensor that needs grad keeps no graph.
  auto w = torch::ones({}, torch::requires_grad());
  tasks::StepSums g(torch::kCPU);
  g.set(Sum::kNll, w * 3);
  EXPECT_FALSE(g.tensor().requires_grad());
  EXPECT_THROW(tasks::StepSums().set(Sum::kTokens, 1.0), std::logic_error);
}

TEST(StepSums, OverRanksOfOneProcessIsTheSumsThemselves) {
  tasks::StepSums s(torch::kCPU);
  s.set(Sum::kNll, 1.5);
  tasks::over_ranks(s, torch::kCPU, "test");
  EXPECT_DOUBLE_EQ(s.read().nll, 1.5);
  tasks::StepSums empty;
  tasks::over_ranks(empty, torch::kCPU, "test");
  EXPECT_TRUE(empty.empty());
}

}  // namespace
}  // namespace ropelab
