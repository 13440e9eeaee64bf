// Context parallelism's layout: one sequence split over the ranks of a group (Liu et al. 2023,
// "Ring Attention with Blockwise Transformers"; the zig-zag split of Brandon et al. 2023,
// "Striped Attention", and of Megatron's and torchtitan's context parallelism).
//
// A sequence of T tokens goes to a group of n ranks in 2n pieces of T / (2n): member i holds
// pieces i and 2n - 1 - i. Under a causal mask a query of piece p sees p + 1/2 pieces' worth of
// keys, so each member does the same work, (i + 1/2) + (2n - 1 - i + 1/2) = 2n pieces' worth; a
// split in n contiguous parts would leave the last member n times the first's.
// The ranks of a data-parallel x context-parallel world form groups of consecutive ranks: world
// rank r is member r mod n of group r div n, so a group stays on one machine when n divides
// the ranks a machine runs.
#pragma once
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>

namespace ropelab::dist {

class World;

struct ContextSplit {
  int64_t length = 0;  // T: the whole sequence's tokens
  int parts = 1;       // n: the group's ranks
  struct Piece {
    int64_t at = 0, n = 0;  // the first token's position, and the tokens
  };
  // Member m's two pieces, in the order its local tensors hold them.
  std::array<Piece, 2> pieces(int member) const;
  int64_t local() const { return length / parts; }
  // Member m's tokens of a whole-sequence tensor along `dim`: its two pieces, concatenated.
  at::Tensor shard(const at::Tensor& whole, int member, int64_t dim) const;
  // The positions [T / n] (int64) of member m's tokens.
  at::Tensor positions(int member) const;
};

// This rank's context-parallel group.
struct ContextGroup {
  const World* world = nullptr;
  int size = 1;        // members
  int member = 0;      // this rank's
  int first_rank = 0;  // the world rank of member 0
  int rank_of(int m) const { return first_rank + ((m % size) + size) % size; }
  // World rank r is member r mod n of the group of ranks [r - r mod n, ...+ n).
  static ContextGroup of(const World& w, int n);
};

}  // namespace ropelab::dist
