// Binary positions (model/position/binary.h): channel i holds gain times bit i of the position,
// 0 past the 62nd channel; per-document positions; the config key; and the property that makes
// it a failed attempt: neighbouring positions can differ in many channels at once (7 -> 8 flips
// four), so distance in the code is not distance in the sequence.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "config/loader.h"
#include "model/position/binary.h"
#include "model_helpers.h"

namespace ropelab::model {
namespace {

TEST(BinaryPositions, ChannelIIsBitI) {
  auto pos = torch::arange(0, 300, torch::kLong);
  auto code = BinaryImpl::code(pos, 80, 2.0);
  ASSERT_EQ(code.sizes(), (std::vector<int64_t>{300, 80}));
  for (int64_t p = 0; p < 300; ++p)
    for (int64_t i = 0; i < 80; ++i) {
      const double want = i < 62 && ((p >> i) & 1) != 0 ? 2.0 : 0.0;
      ASSERT_EQ(code[p][i].item<double>(), want) << "position " << p << " channel " << i;
    }
  auto big = BinaryImpl::code(torch::tensor({int64_t{1} << 61}, torch::kLong), 64, 1.0);
  EXPECT_EQ(big[0][61].item<double>(), 1.0);
  EXPECT_EQ(big[0].sum().item<double>(), 1.0);
}

TEST(BinaryPositions, NeighboursCanDifferInManyChannels) {
  auto code = BinaryImpl::code(torch::tensor({7, 8, 255, 256}, torch::kLong), 16, 1.0);
  EXPECT_EQ((code[0] - code[1]).abs().sum().item<double>(), 4.0);  // 0111 -> 1000
  EXPECT_EQ((code[2] - code[3]).abs().sum().item<double>(), 9.0);
  // while 0 and 2^k, far apart, differ in one channel
  auto far = BinaryImpl::code(torch::tensor({0, 1024}, torch::kLong), 16, 1.0);
  EXPECT_EQ((far[0] - far[1]).abs().sum().item<double>(), 1.0);
}

TEST(BinaryPositions, AddToInputAndPerDocumentPositions) {
  auto cfg = test::position("binary");
  PositionDims dims;
  dims.d_model = 8;
  auto pos = make_position(cfg, dims);
  auto x = torch::randn({2, 5, 8});
  auto y = pos->add_to_input(x, 6);
  EXPECT_TRUE(torch::allclose(
      y - x, BinaryImpl::code(torch::arange(6, 11), 8, 1.0).unsqueeze(0).expand({2, 5, 8})));
  auto pos_BT = torch::tensor({6, 7, 8, 9, 10, 0, 1, 2, 3, 4}, torch::kLong).view({2, 5});
  auto z = pos->add_at(x, pos_BT);
  EXPECT_TRUE(torch::allclose(z[0], y[0]));
  EXPECT_TRUE(torch::allclose(z[1], pos->add_to_input(x.narrow(0, 1, 1), 0)[0]));
}

TEST(BinaryPositions, ConfigKeyAndEncoderWidthCheck) {
  auto c = config::load_config(ROPELAB_SOURCE_DIR "/configs/clm-small.yaml",
                               config::overrides_from_args({"model.position.type=binary"}));
  EXPECT_EQ(std::get<config::BinaryConfig>(c.model.position.opts).gain, 1.0);
  EXPECT_NE(config::schema().find("# --- binary"), std::string::npos);
  // It adds d_model-wide vectors to the embeddings: an encoder's narrower embeddings refuse it.
  try {
    config::load_config(
        ROPELAB_SOURCE_DIR "/configs/mlm-cpu.yaml",
        config::overrides_from_args({"model.position.type=binary", "model.embedding_size=32"}));
    FAIL() << "binary positions with narrower embeddings loaded";
  } catch (const config::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("position binary adds d_model-wide vectors"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ropelab::model
