// Context parallelism's layout (dist/context.h).
#include "dist/context.h"

#include <torch/torch.h>

#include "dist/world.h"

namespace ropelab::dist {

std::array<ContextSplit::Piece, 2> ContextSplit::pieces(int member) const {
  const int64_t n = length / (2 * static_cast<int64_t>(parts));
  return {Piece{member * n, n}, Piece{(2 * static_cast<int64_t>(parts) - 1 - member) * n, n}};
}

at::Tensor ContextSplit::shard(const at::Tensor& whole, int member, int64_t dim) const {
  auto p = pieces(member);
  return torch::cat({whole.narrow(dim, p[0].at, p[0].n), whole.narrow(dim, p[1].at, p[1].n)}, dim);
}

at::Tensor ContextSplit::positions(int member) const {
  auto p = pieces(member);
  auto opts = torch::TensorOptions().dtype(torch::kInt64);
  return torch::cat({torch::arange(p[0].at, p[0].at + p[0].n, opts),
                     torch::arange(p[1].at, p[1].at + p[1].n, opts)});
}

ContextGroup ContextGroup::of(const World& w, int n) {
  ContextGroup g;
  g.world = &w;
  g.size = n;
  g.member = w.rank() % n;
  g.first_rank = w.rank() - g.member;
  return g;
}

}  // namespace ropelab::dist
