// The one place that maps a position config to its module. Adding a variant: its own file
// (with a make_position overload), its config struct (config/positions/), its entry in
// config/position.h's PositionVariant, and its #include here.
#include "config/schema.h"
#include "model/position/absolute.h"
#include "model/position/alibi.h"
#include "model/position/binary.h"
#include "model/position/comrope.h"
#include "model/position/cope.h"
#include "model/position/fire.h"
#include "model/position/fox.h"
#include "model/position/integer.h"
#include "model/position/kerple.h"
#include "model/position/mrope.h"
#include "model/position/path.h"
#include "model/position/pope.h"
#include "model/position/rotary.h"
#include "model/position/t5.h"

namespace ropelab::model {

namespace detail {
torch::Tensor positions(int64_t offset, int64_t n, torch::Device device) {
  return torch::arange(offset, offset + n,
                       torch::TensorOptions().dtype(torch::kFloat32).device(device));
}
}  // namespace detail

PosCache PositionModuleImpl::make_tables(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset,
                                         torch::Device device) {
  PosCache c;
  c.q_pos_T = detail::positions(q_offset, T, device);
  c.k_pos_S = detail::positions(k_offset, S, device);
  c.length = std::max(q_offset + T, k_offset + S);
  return c;
}

PositionModule make_position(const config::PositionConfig& cfg, const PositionDims& dims) {
  return std::visit([&](const auto& c) { return make_position(c, dims); }, cfg.opts);
}

}  // namespace ropelab::model
