// Context parallelism end to end in the model (train.context_parallel; model/ring_attention.h):
// 2 and 4 ranks as threads of this process, each a dist::World on Gloo over 127.0.0.1, run a
// causal or masked LM's forward and backward on their shares of a batch (data::context_share),
// and the loss summed over the ranks and the gradients summed over the ranks equal one rank's
// on the whole batch: for every tileable family (RoPE, T5, ALiBi, Kerple, FIRE, FoX, learned
// absolute positions), windows, chunks, documents, bidirectional attention, sinks, QK-norm,
// SSMax, query temperature and grouped-query attention. The loss agrees within 1e-5 relative,
// the gradients within 1e-4.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "config/schema.h"
#include "data/batches.h"
#include "dist/context.h"
#include "dist/world.h"
#include "dist_helpers.h"
#include "model/model.h"
#include "model_helpers.h"
#include "tasks/lm.h"

namespace ropelab {
namespace {

using test::on_ranks;

constexpr int64_t kB = 2, kT = 48, kV = 50;

struct Case {
  std::string name;
  config::ModelConfig model;
  bool mlm = false, docs = false;
};

config::ModelConfig decoder(const std::string& pos) {
  auto m = test::tiny_model("decoder", pos);
  m.n_heads = 4;  // head dim 4
  return m;
}

config::LayerKindConfig kind(const std::string& pos, int64_t window, int64_t chunk) {
  config::LayerKindConfig k;
  k.position = test::position(pos);
  if (window > 0) k.window = config::Maybe<int64_t>::of(window);
  if (chunk > 0) k.chunk = config::Maybe<int64_t>::of(chunk);
  return k;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* pos : {"rope", "t5", "alibi", "kerple", "fire", "fox", "learned"})
    out.push_back({std::string(pos) + ", causal", decoder(pos)});
  auto window = decoder("rope");
  window.layout.pattern = {"local", "global"};
  window.layout.kinds = {{"local", kind("rope", 5, 0)}, {"global", kind("rope", 0, 0)}};
  out.push_back({"rope, sliding window 5 + global", window});
  auto alibi_window = decoder("alibi");
  alibi_window.layout.kinds = {{"local", kind("alibi", 17, 0)}};
  out.push_back({"alibi, sliding window 17", alibi_window});
  auto chunk = decoder("rope");
  chunk.layout.pattern = {"chunked", "nope"};
  chunk.layout.kinds = {{"chunked", kind("rope", 0, 10)}, {"nope", kind("none", 0, 0)}};
  chunk.layout.kinds["nope"].temperature.scale = 0.5;
  chunk.layout.kinds["nope"].temperature.floor = 8;
  out.push_back({"rope, chunks 10 + NoPE with temperature", chunk});
  out.push_back({"rope, documents", decoder("rope"), false, true});
  out.push_back({"fox, documents", decoder("fox"), false, true});
  auto extras = decoder("t5");
  extras.attention.sinks = true;
  extras.attention.qk_norm = true;
  extras.attention.ssmax = 0.4;
  out.push_back({"t5, sinks + QK-norm + SSMax", extras});
  auto gqa = decoder("alibi");
  gqa.n_kv_heads = 2;  // 2 key-value heads for 4 query heads
  out.push_back({"alibi, grouped-query attention", gqa});
  for (const char* pos : {"rope", "t5", "learned"}) {
    auto enc = test::tiny_model("encoder", pos);
    enc.n_heads = 4;
    out.push_back({std::string(pos) + ", bidirectional (mlm)", enc, true});
  }
  auto enc_docs = test::tiny_model("encoder", "kerple");
  enc_docs.n_heads = 4;
  out.push_back({"kerple, bidirectional documents (mlm)", enc_docs, true, true});
  return out;
}

tasks::TaskSetup setup_of(const Case& c) {
  tasks::TaskSetup s;
  s.model = c.model;
  // What loading fills in from task.seq_len (FIRE's threshold, a learned table's length).
  s.model.position.fill_in(kT);
  for (auto& [name, k] : s.model.layout.kinds) k.position.fill_in(kT);
  s.vocab = kV;
  if (c.mlm) s.task.opts = config::MlmTaskConfig{};
  s.task.seq_len = kT;
  return s;
}

std::unique_ptr<tasks::Task> task_of(const Case& c) {
  auto s = setup_of(c);
  if (c.mlm) return std::make_unique<tasks::MaskedLmTask>(s, config::MlmTaskConfig{});
  return std::make_unique<tasks::CausalLmTask>(s);
}

// A batch of whole sequences: tokens, next-token targets (clm) or a sixth of the positions
// masked (mlm, with padding at the end of one row), documents that cross the pieces' edges.
data::Batch batch_of(const Case& c) {
  torch::manual_seed(7);
  data::Batch b;
  b.input_BT = torch::randint(4, kV, {kB, kT}, torch::kInt64);
  if (c.mlm) {
    b.target_BT = torch::full({kB, kT}, -100, torch::kInt64);
    auto pick = torch::rand({kB, kT}) < 0.3;
    b.target_BT = torch::where(pick, b.input_BT, b.target_BT);
    b.pad_BT = torch::ones({kB, kT}, torch::kBool);
    b.pad_BT.index_put_({1, torch::indexing::Slice(40, torch::indexing::None)}, false);
    b.target_BT.index_put_({1, torch::indexing::Slice(40, torch::indexing::None)}, -100);
    b.scored_N = data::scored_positions(b.target_BT);
  } else {
    b.target_BT = torch::roll(b.input_BT, -1, 1);
  }
  if (c.docs) b.doc_BT = torch::stack({torch::arange(kT) / 13, torch::arange(kT) / 30});
  b.num_tokens = kB * kT;
  b.num_targets = (b.target_BT != -100).sum().item<int64_t>();
  return b;
}

struct Result {
  double loss = 0;  // this rank's share of the mean loss
  std::map<std::string, torch::Tensor> grads;
};

Result step(const tasks::Task& task, model::ModelImpl& m, const data::Batch& b, double targets) {
  auto f = task.forward(m, b);
  auto loss = f.loss_sum / targets;
  loss.backward();
  Result r{loss.item<double>(), {}};
  for (const auto& p : m.named_parameters())
    r.grads[p.key()] =
        p.value().grad().defined() ? p.value().grad().clone() : torch::zeros_like(p.value());
  return r;
}

void expect_equivalent(const Case& c, int n) {
  SCOPED_TRACE(c.name + ", " + std::to_string(n) + " ranks");
  auto task = task_of(c);
  torch::manual_seed(3);
  auto whole_model = task->build_model();
  {  // biases and gates away from their zeros, so that every family's parameters matter
    torch::NoGradGuard no_grad;
    for (auto& p : whole_model->parameters()) p.add_(torch::randn_like(p) * 0.1);
  }
  const auto batch = batch_of(c);
  const double targets = static_cast<double>(batch.num_targets);
  const Result want = step(*task, *whole_model, batch, targets);
  auto got = on_ranks(n, [&](const dist::World& world) {
    auto m = task->build_model();
    {
      torch::NoGradGuard no_grad;
      auto src = whole_model->named_parameters();
      for (auto& p : m->named_parameters()) p.value().copy_(src[p.key()]);
    }
    const auto group = dist::ContextGroup::of(world, n);
    m->backbone->set_context_parallel(group);
    return step(*task, *m, data::context_share(batch, n, group.member), targets);
  });
  double loss = 0;
  for (const auto& r : got) loss += r.loss;
  EXPECT_LT(std::abs(loss - want.loss) / std::abs(want.loss), 1e-5) << loss << " vs " << want.loss;
  for (const auto& [name, g] : want.grads) {
    auto sum = torch::zeros_like(g);
    for (const auto& r : got) sum += r.grads.at(name);
    const double scale = std::max(1e-3, g.abs().max().item<double>());
    EXPECT_LT((sum - g).abs().max().item<double>() / scale, 1e-4) << name;
  }
}

TEST(ContextParallel, TwoRanksTrainAsOne) {
  for (const auto& c : cases()) expect_equivalent(c, 2);
}

TEST(ContextParallel, FourRanksTrainAsOne) {
  for (const auto& c : cases()) expect_equivalent(c, 4);
}

TEST(ContextParallel, ABatchSplitsIntoItsMembersShares) {
  // Each member gets its two pieces of the tokens and targets, the whole padding and
  // documents, and the counts of its own share; the shares together are the batch.
  Case mlm{"mlm", test::tiny_model("encoder", "rope"), true, true};
  auto b = batch_of(mlm);
  int64_t tokens = 0, targets = 0;
  for (int m = 0; m < 4; ++m) {
    auto s = data::context_share(b, 4, m);
    EXPECT_EQ(s.input_BT.size(1), kT / 4);
    EXPECT_TRUE(s.input_BT.equal(dist::ContextSplit{kT, 4}.shard(b.input_BT, m, 1)));
    EXPECT_TRUE(s.pad_BT.equal(b.pad_BT));
    EXPECT_TRUE(s.doc_BT.equal(b.doc_BT));
    EXPECT_TRUE(s.scored_N.equal(data::scored_positions(s.target_BT)));
    tokens += s.num_tokens;
    targets += s.num_targets;
  }
  EXPECT_EQ(tokens, b.pad_BT.sum().item<int64_t>());
  EXPECT_EQ(targets, b.num_targets);
  try {
    data::context_share(b, 5, 0);
    ADD_FAILURE() << "48 tokens do not split into 10 pieces";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("task.seq_len"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ropelab
