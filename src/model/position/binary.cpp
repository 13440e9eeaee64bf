#include "model/position/binary.h"

#include <algorithm>
#include <vector>

#include "config/positions/binary.h"

namespace ropelab::model {

namespace {
constexpr int64_t kBits = 62;  // int64 positions: bits 0..61 (a position below 2^62)
}

BinaryImpl::BinaryImpl(const config::BinaryConfig& c, const PositionDims& d)
    : PositionModuleImpl(d), gain_(c.gain) {}

torch::Tensor BinaryImpl::code(const torch::Tensor& pos, int64_t d, double gain) {
  const int64_t bits = std::min(d, kBits);
  std::vector<int64_t> powers;
  for (int64_t i = 0; i < bits; ++i) powers.push_back(int64_t{1} << i);
  auto p2 = torch::tensor(powers, torch::TensorOptions().dtype(torch::kInt64)).to(pos.device());
  auto bit = pos.to(torch::kInt64).unsqueeze(-1).div(p2, "floor").remainder(2);
  auto out = bit.to(torch::kFloat32) * gain;
  if (bits == d) return out;
  auto sizes = out.sizes().vec();
  sizes.back() = d - bits;
  return torch::cat({out, torch::zeros(sizes, out.options())}, -1);
}

torch::Tensor BinaryImpl::add_to_input(const torch::Tensor& x_BTD, int64_t offset) {
  const int64_t T = x_BTD.size(1), D = x_BTD.size(2);
  auto pos = torch::arange(offset, offset + T, x_BTD.options().dtype(torch::kInt64));
  return x_BTD + code(pos, D, gain_).unsqueeze(0).to(x_BTD.scalar_type());
}

torch::Tensor BinaryImpl::add_at(const torch::Tensor& x_BTD, const torch::Tensor& pos_BT) {
  return x_BTD + code(pos_BT.to(x_BTD.device()), x_BTD.size(2), gain_).to(x_BTD.scalar_type());
}

PositionModule make_position(const config::BinaryConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<BinaryImpl>(c, d)));
}

}  // namespace ropelab::model
