// Step sums: what batches add up for a task's loss and metrics, kept on the device.
//
// A task's forward pass returns its sums as one float64 vector on the batch's device, one slot
// per field (`Sum`): the trainer adds the micro-batches' vectors, ranks add theirs with one
// all-reduce of that one tensor, and the host reads it once per logged row (`read()`), not once
// per micro-batch: on a GPU every read of a device value stalls the host until the device has
// caught up (torchtitan keeps its token counts on the device for this reason; Marian's
// RationalLoss{loss, count} is the same idea, typed).
//
// Sums, not means: the trainer divides the loss by the targets of the whole step (all
// micro-batches, all ranks), so accumulation, padding and data parallelism weight every target
// equally; metrics() of a task turns the host's copy into means.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ropelab::tasks {

// The fields, in the vector's order.
enum class Sum : int64_t {
  kNll,       // negative log-likelihood summed over targets (no label smoothing); squared error
              // for regression
  kTargets,   // positions (or examples) that carry loss
  kCorrect,   // targets whose argmax is right
  kTokens,    // real input tokens (throughput)
  kExamples,  // answer task: examples that have answer tokens
  kExact,     // answer task: examples whose every answer token is right
  kCount
};

// The host's copy, typed.
struct HostSums {
  double nll = 0, targets = 0, correct = 0, tokens = 0;
  double examples = 0, exact = 0;
};

class StepSums {
 public:
  StepSums() = default;  // empty: adds as zeros, reads as zeros
  // All fields zero, on `device`.
  explicit StepSums(c10::Device device);

  // Sets one field from a 0-d tensor on the same device (any dtype; detached), or from a
  // count the host already knows. Neither reads the device.
  StepSums& set(Sum f, const at::Tensor& x);
  StepSums& set(Sum f, double x);

  // Field by field; an empty side counts as zeros.
  void add(const StepSums& o);
  bool empty() const { return !v_.defined(); }
  // The [kCount] float64 vector (undefined when empty): what ranks all-reduce.
  const at::Tensor& tensor() const { return v_; }

  // The one host read (counted by host_reads()).
  HostSums read() const;

 private:
  at::Tensor v_;
};

// How many times read() copied sums to the host in this process (for tests and bench).
int64_t host_reads();

// The sums of every rank of a data-parallel run, added in place with one all-reduce (a
// collective: every rank calls it; an empty `s` joins as zeros on `device`). One process:
// unchanged.
void over_ranks(StepSums& s, c10::Device device, const char* what);

}  // namespace ropelab::tasks
