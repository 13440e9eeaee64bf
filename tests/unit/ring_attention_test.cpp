// Ring attention (model/ring_attention.h) on real c10d: 2 and 4 ranks as threads of this
// process, each a dist::World on Gloo over 127.0.0.1. For every family the tiled kernel
// computes (no bias as under RoPE, T5, ALiBi, Kerple, FIRE, FoX) and every kind of mask
// (causal, bidirectional, windows, chunks, documents, padding, sinks), each rank's rows and the
// gradients of its q, k and v equal one rank's tiled kernel on the whole sequence, and the
// gradients of the family's parameters summed over the ranks equal one rank's. A window stays a
// window (full attention differs), and keys travel only to the members that need them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "config/schema.h"
#include "dist/context.h"
#include "dist/world.h"
#include "dist_helpers.h"
#include "model/position/position.h"
#include "model/ring_attention.h"
#include "model/tiled_attention.h"

namespace ropelab::model {
namespace {

using test::on_ranks;

struct Case {
  std::string name;
  config::PositionConfig pos;  // the family (RoPE: no score bias)
  bool causal = true;
  int64_t window = 0, chunk = 0;
  bool docs = false, pad = false, sinks = false;
};

config::PositionConfig family(config::PositionVariant v) {
  config::PositionConfig p;
  p.opts = std::move(v);
  return p;
}

std::vector<Case> cases() {
  config::FireConfig fire;
  fire.threshold = 16;
  std::vector<Case> out;
  const std::vector<std::pair<std::string, config::PositionConfig>> families = {
      {"rope", family(config::RopeConfig{})},
      {"t5", family(config::T5Config{})},
      {"alibi", family(config::AlibiConfig{})},
      {"kerple", family(config::KerpleConfig{})},
      {"fire", family(fire)},
      {"fox", family(config::FoxConfig{})}};
  for (const auto& [name, pos] : families) {
    out.push_back({name + ", causal", pos});
    out.push_back({name + ", bidirectional", pos, false});
  }
  auto rope = family(config::RopeConfig{});
  auto t5 = family(config::T5Config{});
  out.push_back({"rope, causal window 5", rope, true, 5});
  out.push_back({"alibi, causal window 17", family(config::AlibiConfig{}), true, 17});
  out.push_back({"t5, bidirectional window 7", t5, false, 7});
  out.push_back({"rope, causal chunks 10", rope, true, 0, 10});
  out.push_back({"kerple, bidirectional chunks 16", family(config::KerpleConfig{}), false, 0, 16});
  out.push_back({"rope, documents", rope, true, 0, 0, true});
  out.push_back({"fox, documents", family(config::FoxConfig{}), true, 0, 0, true});
  out.push_back({"t5, bidirectional documents", t5, false, 0, 0, true});
  out.push_back({"rope, bidirectional padding", rope, false, 0, 0, false, true});
  out.push_back({"t5, causal sinks", t5, true, 0, 0, false, false, true});
  return out;
}

constexpr int64_t kB = 2, kN = 2, kH = 8, kT = 48;

// The whole sequence's inputs and one rank's result on them.
struct Whole {
  PositionModule module{nullptr};
  torch::Tensor q, k, v, x, sink, g;  // g: the loss's weights, loss = sum(out o g)
  TileMask mask;
  torch::Tensor out;
  std::vector<torch::Tensor> grads;  // q, k, v, sink, then the module's parameters
};

PositionModule module_of(const Case& c) {
  return make_position(c.pos, PositionDims{kN * kH, kN, kH, c.causal, 1});
}

ScoreBias bias_of(PositionModuleImpl& m, const torch::Tensor& x, const torch::Tensor& q,
                  const torch::Tensor& k) {
  PosCache pc = m.prepare(kT, kT, 0, 0, torch::kCPU);
  ScoreBias bias = m.score_bias(pc);
  if (m.uses_content()) bias = bias.plus(m.content_bias(LayerContent{x, q, k, {}, 0, nullptr}, pc));
  return bias;
}

std::vector<torch::Tensor> inputs_of(const Whole& w, const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& sink,
                                     PositionModuleImpl& m) {
  std::vector<torch::Tensor> in{q, k, v, sink};
  for (auto& p : m.parameters()) in.push_back(p);
  (void)w;
  return in;
}

Whole whole_of(const Case& c, uint64_t seed) {
  torch::manual_seed(seed);
  Whole w;
  w.module = module_of(c);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : w.module->parameters()) p.normal_(0.0, 0.5);
  }
  auto leaf = [](std::vector<int64_t> s) { return torch::randn(s).requires_grad_(true); };
  w.q = leaf({kB, kN, kT, kH}), w.k = leaf({kB, kN, kT, kH}), w.v = leaf({kB, kN, kT, kH});
  w.x = torch::randn({kB, kT, kN * kH});
  w.sink = c.sinks ? leaf({kN}) : torch::zeros({kN}).requires_grad_(true);
  w.g = torch::randn({kB, kN, kT, kH});
  w.mask.causal = c.causal, w.mask.window = c.window, w.mask.chunk = c.chunk;
  if (c.docs) {  // documents that cross the pieces' edges, and differ between the rows
    w.mask.doc_q_BT = torch::stack({torch::arange(kT) / 11, torch::arange(kT) / 29});
    w.mask.doc_k_BS = w.mask.doc_q_BT;
  }
  if (c.pad) {
    w.mask.key_pad_BS = torch::ones({kB, kT}, torch::kBool);
    w.mask.key_pad_BS.index_put_({1, torch::indexing::Slice(31, torch::indexing::None)}, false);
  }
  auto bias = bias_of(*w.module, w.x, w.q, w.k);
  w.out = tiled_attention(w.q, w.k, w.v, w.mask, bias, {4, 4}, c.sinks ? w.sink : torch::Tensor());
  auto in = inputs_of(w, w.q, w.k, w.v, w.sink, *w.module);
  w.grads = torch::autograd::grad({(w.out * w.g).sum()}, in, {}, false, false, true);
  return w;
}

// One member's share of the same computation on `n` ranks: its rows, its q/k/v gradients and
// its share of the rest.
struct Share {
  torch::Tensor out;
  std::vector<torch::Tensor> grads;
};

Share share_of(const Case& c, const Whole& w, const dist::World& world, int n) {
  auto group = dist::ContextGroup::of(world, n);
  dist::ContextSplit split{kT, n};
  auto m = module_of(c);
  {
    torch::NoGradGuard no_grad;
    auto src = w.module->parameters();
    auto dst = m->parameters();
    for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
  }
  auto mine = [&](const torch::Tensor& t) {
    return split.shard(t.detach(), group.member, 2).contiguous().requires_grad_(true);
  };
  auto q = mine(w.q), k = mine(w.k), v = mine(w.v);
  auto sink = w.sink.detach().clone().requires_grad_(true);
  // Every member makes the bias for the whole sequence (from the whole x, for FoX's gates).
  auto bias = bias_of(*m, w.x, q, k);
  auto out =
      ring_attention(q, k, v, group, split, w.mask, bias, {4, 4}, c.sinks ? sink : torch::Tensor());
  auto in = inputs_of(w, q, k, v, sink, *m);
  auto g = split.shard(w.g, group.member, 2);
  Share s{out.detach(), torch::autograd::grad({(out * g).sum()}, in, {}, false, false, true)};
  return s;
}

double rel_err(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).abs().max().item<double>() / std::max(1.0, want.abs().max().item<double>());
}

void expect_equivalent(const Case& c, int n) {
  SCOPED_TRACE(c.name + ", " + std::to_string(n) + " ranks");
  const Whole w = whole_of(c, 17);
  auto shares = on_ranks(n, [&](const dist::World& world) { return share_of(c, w, world, n); });
  dist::ContextSplit split{kT, n};
  for (int m = 0; m < n; ++m) {
    const auto& s = shares[static_cast<size_t>(m)];
    EXPECT_LT(rel_err(s.out, split.shard(w.out.detach(), m, 2)), 1e-5) << "rows of member " << m;
    for (size_t i = 0; i < 3; ++i)  // q, k, v: this member's rows
      EXPECT_LT(rel_err(s.grads[i], split.shard(w.grads[i], m, 2)), 1e-4)
          << "member " << m << ", gradient " << i;
  }
  for (size_t i = 3; i < w.grads.size(); ++i) {  // sinks and parameters: the members' sum
    if (!w.grads[i].defined()) continue;
    auto sum = torch::zeros_like(w.grads[i]);
    for (const auto& s : shares)
      if (s.grads[i].defined()) sum += s.grads[i];
    EXPECT_LT(rel_err(sum, w.grads[i]), 1e-4) << "parameter gradient " << i;
  }
}

TEST(RingAttention, TwoRanksEqualOneForEveryFamilyAndMask) {
  for (const auto& c : cases()) expect_equivalent(c, 2);
}

TEST(RingAttention, FourRanksEqualOneForEveryFamilyAndMask) {
  for (const auto& c : cases()) expect_equivalent(c, 4);
}

TEST(RingAttention, AWindowStaysAWindow) {
  // The windowed function, not full causal attention: the two differ on these inputs, and the
  // ring gives the windowed one (what engines that drop the window under context parallelism
  // get wrong).
  Case windowed{"rope, causal window 5", family(config::RopeConfig{}), true, 5};
  Case full{"rope, causal", family(config::RopeConfig{})};
  const Whole ww = whole_of(windowed, 5), wf = whole_of(full, 5);
  ASSERT_GT((ww.out - wf.out).abs().max().item<double>(), 1e-2);
  auto outs =
      on_ranks(2, [&](const dist::World& world) { return share_of(windowed, ww, world, 2).out; });
  dist::ContextSplit split{kT, 2};
  for (int m = 0; m < 2; ++m)
    EXPECT_LT(rel_err(outs[static_cast<size_t>(m)], split.shard(ww.out.detach(), m, 2)), 1e-5);
}

TEST(RingAttention, KeysTravelExactlyWhereAQuerySeesThem) {
  // Property: member_needs(q, k) holds exactly when some query of member q may see some key of
  // member k (checked pair by pair on positions), for windows, chunks and documents.
  for (int n : {2, 3, 4})
    for (int64_t window : {0, 3, 8, 30})
      for (int64_t chunk : {0, 6, 16})
        for (bool causal : {true, false}) {
          if (window > 0 && chunk > 0) continue;
          dist::ContextSplit split{kT, n};
          if (kT % (2 * n) != 0) continue;
          TileMask m;
          m.causal = causal, m.window = window, m.chunk = chunk;
          auto allowed = m.allowed_TS(0, kT, 0, kT, torch::kCPU);
          if (!allowed.defined()) allowed = torch::ones({kT, kT}, torch::kBool);
          for (int a = 0; a < n; ++a)
            for (int b = 0; b < n; ++b) {
              auto pa = split.positions(a), pb = split.positions(b);
              const bool any =
                  allowed.index({pa}).index({torch::indexing::Slice(), pb}).any().item<bool>();
              EXPECT_EQ(member_needs(split, m, a, b), any)
                  << n << " ranks, window " << window << ", chunk " << chunk << ", members " << a
                  << ", " << b;
            }
        }
}

TEST(RingAttention, TheZigZagSplitBalancesCausalWork) {
  // Each member's queries see the same number of keys under a causal mask (n pieces' worth),
  // and the members' shards put together are the sequence.
  for (int n : {2, 4}) {
    dist::ContextSplit split{kT, n};
    std::vector<torch::Tensor> parts;
    int64_t first = -1;
    for (int m = 0; m < n; ++m) {
      auto pos = split.positions(m);
      parts.push_back(pos);
      const int64_t seen = (pos + 1).sum().item<int64_t>();
      if (first < 0) first = seen;
      EXPECT_EQ(seen, first) << "member " << m;
    }
    EXPECT_TRUE(std::get<0>(torch::cat(parts).sort()).equal(torch::arange(kT)));
  }
}

}  // namespace
}  // namespace ropelab::model
