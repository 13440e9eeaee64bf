// T5 relative position bias (Raffel et al. 2020, Sec. 2.1; the bucket function of
// mesh-tensorflow / HF T5): bias[n, m->k] = table[bucket(k - m), n]. Bidirectional in encoders
// (half the buckets per direction, keys after the query offset by num_buckets/2),
// one-directional in decoders; within a direction, half the buckets are exact distances and
// the rest log-spaced up to max_distance. One table per stack, shared by all its layers.
#pragma once
#include "model/position/position.h"

namespace ropelab::config {
struct T5Config;
}  // namespace ropelab::config

namespace ropelab::model {

// T5's bucket of a relative position rp = key_pos - query_pos (int64 tensor in, int64 out).
torch::Tensor t5_bucket(const torch::Tensor& rp, bool bidirectional, int64_t num_buckets,
                        int64_t max_distance);

class T5BiasImpl : public PositionModuleImpl {
 public:
  T5BiasImpl(const config::T5Config& c, const PositionDims& d);
  PosCache make_tables(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset,
                       torch::Device device) override;

 private:
  torch::Tensor table_;  // [num_buckets, N]
  int64_t num_buckets_, max_distance_;
};

PositionModule make_position(const config::T5Config& c, const PositionDims& d);

}  // namespace ropelab::model
