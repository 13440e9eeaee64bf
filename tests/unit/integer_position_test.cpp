// Integer positions (model/position/integer.h): PE(pos)_i = gain * pos in every channel, at any
// offset and at per-document positions; the config key and its check; and the property that
// makes it fail under LayerNorm: a vector constant across channels is exactly what LayerNorm's
// mean subtraction removes, so a pre-LN layer cannot see it at all.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "config/loader.h"
#include "model/position/position.h"
#include "model_helpers.h"

namespace ropelab::model {
namespace {

PositionModule integer(double scale, int64_t d = 8) {
  auto p = test::position("integer");
  std::get<config::IntegerConfig>(p.opts).gain = scale;
  PositionDims dims;
  dims.d_model = d;
  return make_position(p, dims);
}

TEST(IntegerPositions, AddTheScaledIndexToEveryChannel) {
  auto pos = integer(0.5);
  auto x = torch::randn({2, 5, 8});
  auto y = pos->add_to_input(x, 3);
  for (int64_t t = 0; t < 5; ++t)
    EXPECT_TRUE(torch::allclose(y.select(1, t) - x.select(1, t),
                                torch::full({2, 8}, 0.5 * static_cast<double>(3 + t))))
        << "position " << 3 + t;
}

TEST(IntegerPositions, PerDocumentPositionsAreTheSameTable) {
  auto pos = integer(1.0);
  auto x = torch::randn({1, 6, 8});
  auto pos_BT = torch::tensor({0, 1, 2, 0, 1, 2}, torch::kLong).view({1, 6});
  auto y = pos->add_at(x, pos_BT);
  auto first = pos->add_to_input(x.narrow(1, 0, 3), 0),
       second = pos->add_to_input(x.narrow(1, 3, 3), 0);
  EXPECT_TRUE(torch::allclose(y, torch::cat({first, second}, 1)));
}

TEST(IntegerPositions, LayerNormRemovesThemExactly) {
  // The failure the explainers describe, in its sharpest form: LayerNorm(x + p * 1) =
  // LayerNorm(x) for every p, up to rounding (float64 here).
  auto x = torch::randn({1, 4, 16}, torch::kFloat64) * 0.02;
  auto pos = integer(1.0, 16);
  auto y = pos->add_to_input(x.to(torch::kFloat32), 100).to(torch::kFloat64);
  auto ln = [](const torch::Tensor& t) { return torch::layer_norm(t, {16}); };
  EXPECT_LT((ln(y) - ln(x)).abs().max().item<double>(), 5e-3)
      << "(float32 rounding of 100 + 0.02 noise only)";
  auto y64 = x + torch::arange(100, 104, torch::kFloat64).view({1, 4, 1});
  EXPECT_LT((ln(y64) - ln(x)).abs().max().item<double>(), 1e-9);
  // RMSNorm keeps it, and it swamps the tokens: every row becomes nearly the same vector.
  auto rms = [](const torch::Tensor& t) { return t / t.pow(2).mean(-1, true).sqrt(); };
  EXPECT_LT((rms(y64) - torch::ones_like(y64)).abs().max().item<double>(), 1e-3);
}

TEST(IntegerPositions, ConfigKeyAndCheck) {
  auto c = config::load_config(
      ROPELAB_SOURCE_DIR "/configs/clm-small.yaml",
      config::overrides_from_args({"model.position.type=integer", "model.position.gain=0.01"}));
  EXPECT_EQ(std::get<config::IntegerConfig>(c.model.position.opts).gain, 0.01);
  EXPECT_NE(config::schema().find("# --- integer"), std::string::npos);
  try {
    config::load_config(
        ROPELAB_SOURCE_DIR "/configs/clm-small.yaml",
        config::overrides_from_args({"model.position.type=integer", "model.position.gain=-1"}));
    FAIL() << "a negative gain loaded";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.position.gain"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ropelab::model
