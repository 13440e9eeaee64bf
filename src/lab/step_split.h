// Where a step's time goes: matmul or everything else. While a StepSplit lives, every op that
// libtorch records (its RecordFunction hooks: aten ops, autograd nodes, ropelab's own gemm calls)
// on the constructing thread is timed, and each op's self time (its time less its children's)
// is added to "matmul" when the op is a matrix product and to "other" otherwise. The profile of
// issue 81: the bf16 step's non-matmul work is what the matmul peak leaves to win.
//
// Matmul ops: aten::mm, addmm, bmm, baddbmm, addbmm, ropelab::gemm (util/gemm.h's oneDNN
// calls) and ropelab::tile_product (util/amx.h: a tile product, or a whole rows_product call with
// this thread's wait for the others, as a library call counts; the epilogues inside it record
// themselves as ropelab::tile_epilogue, not a matmul). ropelab's fused kernels record themselves
// too (ropelab::masked_softmax, cross_entropy, act_dropout, dropout_add, rope, adamw; their
// backward passes are libtorch's CppNode<...>). A matmul's own children (addmm's bias copy, a cast
// inside) count as "other", so the bias add outside the gemm shows up as what it is. Only ops on
// this thread are seen: on the CPU the autograd engine runs the backward pass on the calling thread
// and the OpenMP workers run inside ops, so a training step's ops are all here (but the products
// that a kernel runs on its workers, as the attention's per head, count as the kernel's own time
// there: only this thread's share is a matmul). Timing an op costs
// about a microsecond: take the split from a step of its own, and the step time from unprofiled
// steps.
#pragma once
#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <string>

namespace ropelab::lab {

class StepSplit {
 public:
  StepSplit();
  ~StepSplit();
  StepSplit(const StepSplit&) = delete;
  StepSplit& operator=(const StepSplit&) = delete;

  // Seconds of self time in matrix products, and in all recorded ops (outermost ops' times).
  double matmul_s() const;
  double recorded_s() const;
  // Self seconds per op name.
  const std::map<std::string, double>& self_s() const;

  // Whether `name` is one of the matmul ops above.
  static bool is_matmul(const char* name);

  struct Tally;  // this thread's running sums (step_split.cpp)

 private:
  Tally* tally_;
  at::CallbackHandle handle_;
};

}  // namespace ropelab::lab
