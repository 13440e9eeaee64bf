// Ring attention (model/ring_attention.h).
#include "model/ring_attention.h"

#include <vector>

#include "dist/world.h"
#include "model/tile_blocks.h"

namespace ropelab::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
constexpr const char* kWhat = "ring attention";
constexpr const char* kGathering = "gathering the sequence (context parallelism)";

struct RingPlan : TilePlan {
  dist::ContextGroup group;
  dist::ContextSplit split;
};

// The blocks of member qm's queries against member km's keys, in the local rows of each, that
// may hold an allowed pair.
std::vector<TileBlock> blocks_of(const dist::ContextSplit& split, const TileMask& mask, int qm,
                                 int km) {
  const auto qp = split.pieces(qm), kp = split.pieces(km);
  std::vector<TileBlock> out;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t c = 0; c < 2; ++c) {
      const auto &p = qp[static_cast<size_t>(a)], &r = kp[static_cast<size_t>(c)];
      TileBlock b{a * qp[0].n, a * qp[0].n + p.n, c * kp[0].n, c * kp[0].n + r.n, p.at, r.at, p.at,
                  r.at};
      if (block_may_attend(mask, b)) out.push_back(b);
    }
  return out;
}

// A member's keys and values in one flat buffer (one message), and the views back.
struct KV {
  torch::Tensor flat;
  torch::Tensor k, v;
  KV() = default;
  KV(torch::Tensor f, const torch::Tensor& k_like, const torch::Tensor& v_like)
      : flat(std::move(f)),
        k(flat.narrow(0, 0, k_like.numel()).view(k_like.sizes())),
        v(flat.narrow(0, k_like.numel(), v_like.numel()).view(v_like.sizes())) {}
  bool defined() const { return flat.defined(); }
};

// Step s of a pass: this member's queries meet the keys of member `owner` = member - s. The
// keys of step s + 1 are asked for here: sent by their owner only to a member that needs them.
struct Schedule {
  const RingPlan& plan;
  int n() const { return plan.group.size; }
  int me() const { return plan.group.member; }
  int owner(int s) const { return ((me() - s) % n() + n()) % n(); }
  int member(int m) const { return ((m % n()) + n()) % n(); }
  bool needs(int qm, int km) const {
    return member_needs(plan.split, plan.mask, member(qm), member(km));
  }
  // Posts step s's keys: ours to member me + s, theirs from member me - s, into `into`.
  dist::Transfer post(int s, const KV& own, KV& into) const {
    const bool send = needs(me() + s, me()), recv = needs(me(), me() - s);
    into = recv ? KV(torch::empty_like(own.flat), own.k, own.v) : KV();
    return plan.group.world->exchange(own.flat, send ? plan.group.rank_of(me() + s) : -1, into.flat,
                                      recv ? plan.group.rank_of(me() - s) : -1, kWhat);
  }
};

struct RingAttention : public torch::autograd::Function<RingAttention> {
  // inputs: q (scaled by 1/sqrt(H)), k, v, float32 and contiguous, then the bias parts.
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               const c10::intrusive_ptr<RingPlan>& plan) {
    const auto &q = inputs[0], &k = inputs[1], &v = inputs[2];
    const Schedule sch{*plan};
    KV own(torch::cat({k.reshape(-1), v.reshape(-1)}), k, v);
    OnlineSoftmax state(q, v.size(3), plan->sink_N);
    KV held = own, next;
    for (int s = 0; s < sch.n(); ++s) {
      dist::Transfer coming;
      if (s + 1 < sch.n()) coming = sch.post(s + 1, own, next);
      if (held.defined())
        for (const auto& b : blocks_of(plan->split, plan->mask, sch.me(), sch.owner(s)))
          forward_block(q, held.k, held.v, *plan, b, state);
      coming.wait();
      held = next;
    }
    return {save_pass(ctx, q, k, v, state, plan)};
  }

  static variable_list backward(AutogradContext* ctx, const variable_list& grad_out) {
    const SavedPass p(ctx, grad_out);
    const auto &q = p.q, &k = p.k, &v = p.v, &dout = p.dout, &lse = p.lse, &D = p.D;
    auto plan = c10::static_intrusive_pointer_cast<RingPlan>(p.plan);
    const Schedule sch{*plan};
    NoAutocast no_autocast(q.device().type());
    KV own(torch::cat({k.reshape(-1), v.reshape(-1)}), k, v);
    KV d_own(torch::zeros_like(own.flat), k, v);
    auto grads = p.zero_grads();
    KV held = own, next;
    dist::Transfer returning;  // the last step's dK and dV on their way to their owner
    KV d_back;                 // what comes back to us with it
    for (int s = 0; s < sch.n(); ++s) {
      dist::Transfer coming;
      if (s + 1 < sch.n()) coming = sch.post(s + 1, own, next);
      KV d_held = s == 0 ? d_own : held.defined() ? KV(torch::zeros_like(own.flat), k, v) : KV();
      if (held.defined()) {
        grads[1] = d_held.k, grads[2] = d_held.v;
        for (const auto& b : blocks_of(plan->split, plan->mask, sch.me(), sch.owner(s)))
          backward_block(q, held.k, held.v, dout, lse, D, *plan, b, grads);
      }
      returning.wait();
      if (d_back.defined()) d_own.flat.add_(d_back.flat);
      if (s > 0) {  // dK, dV of the owner's keys go back; ours come from member me + s
        const bool send = d_held.defined(), recv = sch.needs(sch.me() + s, sch.me());
        d_back = recv ? KV(torch::empty_like(own.flat), k, v) : KV();
        returning = plan->group.world->exchange(
            d_held.flat, send ? plan->group.rank_of(sch.me() - s) : -1, d_back.flat,
            recv ? plan->group.rank_of(sch.me() + s) : -1, kWhat);
      }
      coming.wait();
      held = next;
    }
    returning.wait();
    if (d_back.defined()) d_own.flat.add_(d_back.flat);
    grads[1] = d_own.k, grads[2] = d_own.v;
    return p.returned(std::move(grads));
  }
};

// gather_sequence: step s sends this member's share to member + s and takes member - s's.
struct GatherSequence : public torch::autograd::Function<GatherSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const dist::ContextGroup& group, const dist::ContextSplit& split,
                               int64_t dim) {
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<Group>(group, split));
    auto sizes = x.sizes().vec();
    sizes[static_cast<size_t>(dim)] = split.length;
    auto whole = torch::empty(sizes, x.options());
    auto mine = x.contiguous();
    auto at = [&](int m) { return split.positions(m).to(x.device()); };
    whole.index_copy_(dim, at(group.member), mine);
    for (int s = 1; s < group.size; ++s) {
      auto theirs = torch::empty_like(mine);
      const int to = (group.member + s) % group.size,
                from = (group.member - s + group.size) % group.size;
      group.world->exchange(mine, group.rank_of(to), theirs, group.rank_of(from), kGathering)
          .wait();
      whole.index_copy_(dim, at(from), theirs);
    }
    return whole;
  }
  static variable_list backward(AutogradContext* ctx, const variable_list& grad_out) {
    const int64_t dim = ctx->saved_data["dim"].toInt();
    auto g = c10::static_intrusive_pointer_cast<Group>(ctx->saved_data["group"].toCapsule());
    const auto& group = g->group;
    auto at = [&](int m) { return g->split.positions(m).to(grad_out[0].device()); };
    auto mine = grad_out[0].index_select(dim, at(group.member)).contiguous();
    for (int s = 1; s < group.size; ++s) {
      const int to = (group.member + s) % group.size,
                from = (group.member - s + group.size) % group.size;
      auto theirs = grad_out[0].index_select(dim, at(to)).contiguous();
      auto back = torch::empty_like(mine);
      group.world->exchange(theirs, group.rank_of(to), back, group.rank_of(from), kGathering)
          .wait();
      mine.add_(back);
    }
    return {mine, {}, {}, {}};
  }
  struct Group : torch::CustomClassHolder {
    Group(dist::ContextGroup g, dist::ContextSplit s) : group(g), split(s) {}
    dist::ContextGroup group;
    dist::ContextSplit split;
  };
};

}  // namespace

torch::Tensor gather_sequence(const torch::Tensor& x, const dist::ContextGroup& group,
                              const dist::ContextSplit& split, int64_t dim) {
  if (group.size == 1) return x;
  return GatherSequence::apply(x, group, split, dim);
}

bool member_needs(const dist::ContextSplit& split, const TileMask& mask, int qm, int km) {
  return !blocks_of(split, mask, qm, km).empty();
}

torch::Tensor ring_attention(const torch::Tensor& q_BNTH, const torch::Tensor& k_BNTH,
                             const torch::Tensor& v_BNTH, const dist::ContextGroup& group,
                             const dist::ContextSplit& split, const TileMask& mask,
                             const ScoreBias& bias, TileSizes tiles, const torch::Tensor& sink_N) {
  TORCH_CHECK(tiles.q > 0 && tiles.k > 0, "ring_attention: tile sizes must be positive");
  TORCH_CHECK(bias.tileable(), "ring_attention: a stored (dense) score bias cannot be tiled");
  TORCH_CHECK(split.parts == group.size && split.length % (int64_t{2} * split.parts) == 0,
              "ring_attention: the split does not fit the group");
  TORCH_CHECK(q_BNTH.size(2) == split.local() && k_BNTH.size(2) == split.local(),
              "ring_attention: q and k must hold this member's share of the sequence");
  TORCH_CHECK(!bias.defined() || (bias.T == split.length && bias.S == split.length),
              "ring_attention: the score bias must be made for the whole sequence");
  TORCH_CHECK(mask.q_offset == 0, "ring_attention: no query offset (decoding) under a ring");
  if (group.size == 1) return tiled_attention(q_BNTH, k_BNTH, v_BNTH, mask, bias, tiles, sink_N);
  NoAutocast no_autocast(q_BNTH.device().type());
  auto plan = c10::make_intrusive<RingPlan>();
  plan->group = group;
  plan->split = split;
  auto inputs = kernel_inputs(q_BNTH, k_BNTH, v_BNTH, mask, bias, tiles, sink_N, *plan);
  return RingAttention::apply(at::TensorList(inputs), plan)[0].to(v_BNTH.scalar_type());
}

}  // namespace ropelab::model
