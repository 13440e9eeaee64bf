// CoPE, contextual position encoding (Golovneva et al. 2024, arXiv:2405.18719, Eq. 3-5): a
// query counts the keys it finds relevant instead of the tokens between, and attends by that
// count. For query i and key j (j <= i), with the layer's scaled scores s_ij = q_i . k_j / sqrt(d):
//
//     g_ij = sigmoid(s_ij)                          gates (0 where masked)
//     p_ij = sum_{t=j..i} g_it                      fractional, contextual positions
//     z_i[p] = q_i . e[p],  p = 0..P-1               logits of the integer positions
//     b_ij = (p - floor p) z_i[ceil p] + (1 - p + floor p) z_i[floor p],  p = min(p_ij, P-1)
//
// and b is added to the scores. e is a [d, P] table per layer, shared by the heads and
// initialised to zero (as in the paper's code); P = npos_max. CoPE acts alone (no RoPE), on
// causal self-attention only. With a KV cache it needs no state of its own: the gates are
// recomputed from each new query and the cached keys.
#pragma once
#include "model/init.h"
#include "model/position/position.h"

namespace ropelab::config {
struct CopeConfig;
}  // namespace ropelab::config

namespace ropelab::model {

class CopeImpl : public PositionModuleImpl, public OwnsParameters {
 public:
  CopeImpl(const config::CopeConfig& c, const PositionDims& d);
  ScoreBias content_bias(const LayerContent& in, const PosCache& c) override;
  bool uses_content() const override { return true; }
  bool content_reads_mask() const override { return true; }
  ParamRole role_of(const std::string& local_name) const override;

 private:
  std::vector<torch::Tensor> embeddings_;  // per layer [head_dim, npos_max]
};

PositionModule make_position(const config::CopeConfig& c, const PositionDims& d);

}  // namespace ropelab::model
