// Rotary position embedding, RoFormer Eq. (14)-(16) (Su et al. 2021), and xPos (Sun et al.
// 2023), which multiplies RoPE's rotation by a per-channel exponential decay
// zeta_i^(m/gamma) on queries and its inverse on keys.
//
//   theta_i = base^(-2i/d), i = 0..d/2-1, d = the rotated width (head dim or rotary_dim);
//   pairs are interleaved (x[2i], x[2i+1]) as in the paper, or half-split (x[i], x[i+d/2])
//   as in GPT-NeoX; tables are always computed in float32, even under bf16 autocast.
// The frequencies theta_i come from rope_frequencies.h: RoFormer Eq. 15, or a context-extension
// method (linear, ntk, dynamic, yarn, llama3, longrope), then p-RoPE's truncation (only the
// fastest fraction p of the pairs rotate). A method's attention factor multiplies the cos/sin
// tables, so it scales the rotated channels of q and k (as HF transformers does).
//
// p-RoPE vs partial rotary: rotary_dim = r rotates the *first* r channels with all frequencies
// respread over them (theta_i = base^(-2i/r)); fraction = p keeps theta_i = base^(-2i/d) for the
// fastest p*d/2 pairs and sets the slowest to 0, so their channels are never rotated.
// Hybrid NoPE (nope_every, nope_layers): those layers of the stack get no rotation at all.
#pragma once
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "config/schema.h"
#include "model/position/position.h"

namespace ropelab::model {

class RotaryImpl : public PositionModuleImpl {
 public:
  RotaryImpl(const config::RopeConfig& c, const PositionDims& d);
  RotaryImpl(const config::XposConfig& c, const PositionDims& d);
  torch::Tensor rotate_q(const torch::Tensor& x, const PosCache& c) override;
  torch::Tensor rotate_k(const torch::Tensor& x, const PosCache& c) override;
  // The tables, where the whole width rotates and xPos scales nothing.
  std::optional<Rotation> rotation(const PosCache& c, int64_t width) const override;
  bool acts_in_layer(int64_t layer) const override;
  bool depends_on_length() const override;

  // Rotates the first `rotary` channels of x_...TF at positions pos_T (float32). Public so the
  // property tests can call it directly. `scale_T` (xPos) multiplies the result per channel.
  static torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos_TR,
                              const torch::Tensor& sin_TR, bool interleaved);
  // [T, r/2] tables spread over the pair layout: [T, r]; `sign` = -1 on each pair's first
  // channel (for sin), +1 for cos.
  static torch::Tensor spread(const torch::Tensor& t_TR, bool interleaved, bool signed_first);
  // rotate() with spread tables: x * cos + swap_pairs(x) * sin.
  static torch::Tensor rotate_spread(const torch::Tensor& x, const torch::Tensor& cos_TF,
                                     const torch::Tensor& sin_TF, bool interleaved);

 private:
  const PosCache::Tables& tables(const PosCache& c, int64_t width) const;
  // theta_i for a rotated width, a length (0 unless the method depends on it) and a device:
  // made on the host once and kept on the device, so a forward pass copies nothing to it.
  struct Frequencies {
    torch::Tensor theta_R;  // float32
    double attention_factor = 1.0;
  };
  const Frequencies& frequencies(int64_t r, int64_t length, torch::Device dev) const;
  mutable std::map<std::tuple<int64_t, int64_t, std::string>, Frequencies> frequencies_;
  double base_ = 10000.0, scale_base_ = 512.0, fraction_ = 1.0;
  bool interleaved_ = true, xpos_ = false;
  int64_t rotary_dim_ = 0;  // 0 = the whole width
  int64_t nope_every_ = 0;
  std::set<int64_t> nope_layers_;
  config::RopeScalingConfig scaling_;
};

PositionModule make_position(const config::RopeConfig& c, const PositionDims& d);
PositionModule make_position(const config::XposConfig& c, const PositionDims& d);

}  // namespace ropelab::model
