// M-RoPE (Qwen2-VL: Wang et al. 2024, arXiv:2409.12191, Sec. 2.1) and axial 2-D RoPE (Heo et
// al. 2024, arXiv:2403.13298, Eq. 11): RoPE whose rotated pairs are driven by several
// coordinates instead of one position. Here the coordinates are a row-major grid's: position p
// of an input `grid_width` W tokens wide is (row p / W, column p % W). Pair i keeps RoPE's
// frequency theta_i = base^(-2i/d) and turns by coord_{axis(i)}(p) * theta_i, where
//
//     interleaved  axis(i) = i mod 2         (rows and columns each span every frequency band)
//     contiguous   axis(i) = [i >= d/4]      (rows the fast half, columns the slow half, as
//                                             Qwen2-VL's sections)
//
// The score of a query at (r, c) and a key at (r', c') depends on (r - r', c - c') only. With
// grid_width 0 (text) both coordinates are p, and M-RoPE is exactly RoPE (interleaved pairs);
// a test checks it. Rotations use RoPE's code (RotaryImpl::rotate), so linear attention and the
// KV cache work as for RoPE.
#pragma once
#include "model/position/position.h"

namespace ropelab::config {
struct MropeConfig;
}  // namespace ropelab::config

namespace ropelab::model {

class MropeImpl : public PositionModuleImpl {
 public:
  MropeImpl(const config::MropeConfig& c, const PositionDims& d);
  torch::Tensor rotate_q(const torch::Tensor& x, const PosCache& c) override;
  torch::Tensor rotate_k(const torch::Tensor& x, const PosCache& c) override;
  // The turn of each pair at each position: [T, width/2].
  torch::Tensor angles(const torch::Tensor& pos_T, int64_t width) const;

 private:
  torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& pos_T) const;
  double base_;
  int64_t grid_width_;
  bool interleaved_sections_;
};

PositionModule make_position(const config::MropeConfig& c, const PositionDims& d);

}  // namespace ropelab::model
