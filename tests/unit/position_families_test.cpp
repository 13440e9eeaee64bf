// The position families beyond the RoFormer paper: RoPE's context-extension methods against
// hand-computed values, p-RoPE, hybrid NoPE, FIRE and Kerple properties, cached decoding with a
// length-dependent rotation, and the config checks that refuse impossible combinations.
#include <cmath>

#include "config/loader.h"
#include "helpers.h"
#include "model/position/fire.h"
#include "model/position/kerple.h"
#include "model/position/rope_frequencies.h"
#include "model/position/rotary.h"
#include "model/transformer.h"
#include "model_helpers.h"
#include "tensor_helpers.h"

namespace ropelab::model {
namespace {

using test::close;

config::RopeScalingConfig scaling(config::RopeScalingVariant v) {
  config::RopeScalingConfig s;
  s.opts = std::move(v);
  return s;
}

void expect_theta(const RopeFrequencies& f, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(f.theta.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(f.theta[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "pair " << i;
}

// d = 8, base 10^4: theta = 1, 0.1, 0.01, 0.001.
const std::vector<double> kTheta = {1.0, 0.1, 0.01, 0.001};

TEST(RopeFrequencies, PlainLinearAndNtk) {
  expect_theta(rope_frequencies(scaling(config::NoScaling{}), 1e4, 8, 100), kTheta);
  expect_theta(rope_frequencies(scaling(config::LinearScaling{{}, 4.0}), 1e4, 8, 100),
               {0.25, 0.025, 0.0025, 0.00025});
  // base' = 1e4 * 4^(8/6); theta_1 = base'^(-1/4).
  double b = 1e4 * std::pow(4.0, 8.0 / 6.0);
  auto ntk = rope_frequencies(scaling(config::NtkScaling{{}, 4.0}), 1e4, 8, 100);
  EXPECT_NEAR(ntk.theta[1], std::pow(b, -0.25), 1e-12);
  EXPECT_DOUBLE_EQ(ntk.theta[0], 1.0);  // the fastest pair is unchanged by a base change
}

TEST(RopeFrequencies, YarnRampKeepsFastPairsAndInterpolatesSlowOnes) {
  // original_len 256: pair i turns 256*theta_i/(2 pi) times = 40.7, 4.07, 0.41, 0.04. The ramp
  // ends are the pair indices where that count is beta_fast = 32 (index 0.105 -> floor 0) and
  // beta_slow = 1 (index 1.61 -> ceil 2): pair 0 keeps theta, pair 1 is halfway, pairs 2-3 are
  // divided by s. (Swapping beta_fast and beta_slow would interpolate pair 0 instead.)
  config::YarnScaling y;
  y.factor = 4.0;
  y.original_len = 256;
  EXPECT_NEAR(yarn_correction_dim(32.0, 8, 1e4, 256), 0.104906, 1e-5);
  EXPECT_NEAR(yarn_correction_dim(1.0, 8, 1e4, 256), 1.610063, 1e-5);
  auto f = rope_frequencies(scaling(y), 1e4, 8, 100);
  expect_theta(f, {1.0, 0.5 * 0.1 + 0.5 * 0.1 / 4, 0.0025, 0.00025});
  EXPECT_NEAR(f.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-12);  // 1.1386
  y.attention_factor = 1.0;
  EXPECT_EQ(rope_frequencies(scaling(y), 1e4, 8, 100).attention_factor, 1.0);
}

TEST(RopeFrequencies, YarnWithScaleOneIsRope) {
  config::YarnScaling y;
  y.factor = 1.0;
  y.original_len = 64;
  auto f = rope_frequencies(scaling(y), 1e4, 16, 1000);
  expect_theta(f, rope_theta(1e4, 16), 1e-15);
  EXPECT_EQ(f.attention_factor, 1.0);
}

TEST(RopeFrequencies, DynamicNtkIsRopeUpToTheOriginalLengthThenGrowsTheBase) {
  config::DynamicNtkScaling dyn;
  dyn.factor = 4.0;
  dyn.original_len = 4;
  for (int64_t L : {1, 3, 4}) expect_theta(rope_frequencies(scaling(dyn), 1e4, 8, L), kTheta);
  // L = 8: base' = 1e4 * (4*8/4 - 3)^(8/6) = 1e4 * 5^(4/3).
  double b = 1e4 * std::pow(5.0, 4.0 / 3.0);
  expect_theta(rope_frequencies(scaling(dyn), 1e4, 8, 8),
               {1.0, std::pow(b, -0.25), std::pow(b, -0.5), std::pow(b, -0.75)}, 1e-12);
  EXPECT_TRUE(depends_on_length(scaling(dyn)));
  EXPECT_FALSE(depends_on_length(scaling(config::YarnScaling{})));
}

TEST(RopeFrequencies, Llama3ByWavelength) {
  // original_len 100, low 1, high 4: wavelengths 6.3 (< 25: kept), 62.8 (between: blended
  // with a = (100/62.83 - 1)/3 = 0.19718), 628 and 6283 (> 100: divided by 4).
  config::Llama3Scaling l;
  l.factor = 4.0;
  l.original_len = 100;
  double a = (100.0 / (2 * M_PI / 0.1) - 1.0) / 3.0;
  EXPECT_NEAR(a, 0.197184, 1e-6);
  expect_theta(rope_frequencies(scaling(l), 1e4, 8, 10),
               {1.0, (1 - a) * 0.025 + a * 0.1, 0.0025, 0.00025});
}

TEST(RopeFrequencies, LongRopeSwitchesFactorsPastTheOriginalLength) {
  config::LongRopeScaling l;
  l.short_factor = {1, 1.5, 2, 4};
  l.long_factor = {1, 2, 4, 8};
  l.original_len = 6;
  l.factor = 4;
  auto s = rope_frequencies(scaling(l), 1e4, 8, 6);
  expect_theta(s, {1.0, 0.1 / 1.5, 0.005, 0.00025});
  expect_theta(rope_frequencies(scaling(l), 1e4, 8, 7), {1.0, 0.05, 0.0025, 0.000125});
  EXPECT_NEAR(s.attention_factor, std::sqrt(1 + std::log(4.0) / std::log(6.0)), 1e-12);  // 1.3318
}

TEST(PRope, FractionOneIsRopeAndTheSlowestPairsDoNotRotate) {
  torch::manual_seed(3);
  config::RopeConfig full, half;
  half.fraction = 0.5;
  config::RopeConfig one;
  one.fraction = 1.0;
  PositionDims d{16, 1, 16, false};
  RotaryImpl a(full, d), b(one, d), p(half, d);
  auto x = torch::randn({2, 1, 9, 16});
  auto c = [&](RotaryImpl& m) { return m.prepare(9, 9, 3, 3, torch::kCPU); };
  EXPECT_TRUE(torch::equal(a.rotate_q(x, c(a)), b.rotate_q(x, c(b))));
  // Interleaved pairs 4..7 are channels 8..15: unrotated. Pairs 0..3 rotate as in RoPE.
  using torch::indexing::Slice;
  auto y = p.rotate_q(x, c(p)), r = a.rotate_q(x, c(a));
  EXPECT_TRUE(torch::equal(y.index({"...", Slice(8, 16)}), x.index({"...", Slice(8, 16)})));
  EXPECT_TRUE(torch::equal(y.index({"...", Slice(0, 8)}), r.index({"...", Slice(0, 8)})));
  // Partial rotary is different: rotary_dim 8 rotates channels 0..7 with respread frequencies.
  config::RopeConfig partial;
  partial.rotary_dim = 8;
  RotaryImpl q(partial, d);
  EXPECT_FALSE(close(q.rotate_q(x, c(q)), y, 1e-3, 1e-3));
}

TEST(HybridNope, EveryKthLayerSkipsAndInfiniteKIsRope) {
  config::RopeConfig r;
  r.nope_every = 4;
  r.nope_layers = {1};
  RotaryImpl m(r, PositionDims{16, 2, 8, true});
  std::vector<bool> acts;
  for (int64_t l = 0; l < 9; ++l) acts.push_back(m.acts_in_layer(l));
  EXPECT_EQ(acts, (std::vector<bool>{true, false, true, false, true, true, true, false, true}));

  // k larger than the stack (k = infinity) is RoPE; k = 2 in a 2-layer stack differs.
  torch::manual_seed(5);
  auto tokens = torch::randint(0, 30, {2, 9});
  auto output = [&](int64_t every) {
    torch::manual_seed(11);
    auto c = test::tiny_model("decoder", "rope");
    std::get<config::RopeConfig>(c.position.opts).nope_every = every;
    Transformer t(c, 30);
    t->eval();
    return t->decode(tokens);
  };
  auto rope = output(0);
  EXPECT_TRUE(torch::equal(output(3), rope));
  EXPECT_TRUE(torch::equal(output(100), rope));
  EXPECT_FALSE(close(output(2), rope, 1e-4, 1e-4));
}

// The bias of every (query, key) pair, [N, T, T], for positions 0..T-1.
torch::Tensor bias_of(PositionModuleImpl& m, int64_t T) {
  return m.score_bias(m.prepare(T, T, 0, 0, torch::kCPU)).whole().squeeze(0);
}

TEST(Kerple, BiasDependsOnlyOnDistanceAndDecays) {
  for (auto kernel : {config::KerpleKernel::kLog, config::KerpleKernel::kPower}) {
    for (bool causal : {true, false}) {
      torch::manual_seed(2);
      config::KerpleConfig k;
      k.kernel = kernel;
      KerpleImpl m(k, PositionDims{16, 4, 4, causal});
      auto b = bias_of(m, 12);
      for (int64_t i = 0; i < 12; ++i)
        for (int64_t j = 0; j < 12; ++j) {
          // Toeplitz: b(i, j) == b(i - j, 0) or b(0, j - i).
          auto want = i >= j ? b.index({torch::indexing::Slice(), i - j, 0})
                             : b.index({torch::indexing::Slice(), 0, j - i});
          ASSERT_TRUE(torch::equal(b.index({torch::indexing::Slice(), i, j}), want));
        }
      // Zero at distance 0, strictly decreasing with distance.
      auto row = b.index({torch::indexing::Slice(), 11, torch::indexing::Slice()});  // [N, 12]
      EXPECT_TRUE(torch::equal(row.index({torch::indexing::Slice(), 11}), torch::zeros({4})));
      EXPECT_TRUE((row.diff(1, -1) > 0).all().item<bool>());
    }
  }
}

TEST(Fire, BiasDependsOnDistanceUntilTheThresholdThenIsInterpolated) {
  torch::manual_seed(4);
  config::FireConfig f;
  f.threshold = 6;
  FireImpl m(f, PositionDims{16, 2, 8, true});
  {
    torch::NoGradGuard ng;
    for (auto& p : m.parameters()) p.normal_(0, 1);  // a non-trivial MLP
    m.named_parameters()["c"].fill_(0.5);
    m.named_parameters()["threshold_scale"].fill_(1.0);
  }
  auto b = bias_of(m, 16);
  using torch::indexing::Slice;
  // Queries i <= L = 6 normalise by psi(L): the bias is a function of i - j alone.
  for (int64_t i = 0; i <= 6; ++i)
    for (int64_t j = 0; j <= i; ++j)
      EXPECT_TRUE(close(b.index({Slice(), i, j}), b.index({Slice(), 6, 6 - (i - j)}), 1e-6, 1e-6));
  // Past it, the same distance maps to a smaller normalised input: psi(d)/psi(i) for d = 3 at
  // i = 8 and i = 14 differ, and both equal the MLP at that normalised distance.
  EXPECT_FALSE(close(b.index({Slice(), 8, 5}), b.index({Slice(), 14, 11}), 1e-4, 1e-4));
  auto psi = [](double x) { return std::log1p(0.5 * x); };
  auto at = [&](double x) {
    auto in = torch::tensor({static_cast<float>(x)}).view({1, 1});
    auto* fc1 = m.named_children()["fc1"]->as<torch::nn::Linear>();
    auto* fc2 = m.named_children()["fc2"]->as<torch::nn::Linear>();
    return fc2->forward(torch::relu(fc1->forward(in))).view({-1});
  };
  EXPECT_TRUE(close(b.index({Slice(), 14, 11}), at(psi(3) / (psi(14) + 1e-6)), 1e-5, 1e-5));
  // The diagonal (distance 0) sees the MLP at 0 everywhere, before and after the threshold.
  EXPECT_TRUE(close(b.index({Slice(), 15, 15}), at(0.0), 1e-6, 1e-6));
}

// Cached decoding with a rotation that depends on the current length equals recomputing the
// whole prefix, past the original length too: the cache keeps keys unrotated and rotates them
// with each step's tables. (One layer: in deeper stacks the cached hidden states of earlier
// positions were computed with the tables of their time, as in every KV-cached model.)
TEST(LengthDependentRope, CachedDecodingEqualsFullRecomputation) {
  for (const char* method : {"dynamic", "longrope"}) {
    torch::manual_seed(9);
    auto c = test::tiny_model("decoder", "rope");
    c.n_layers = 1;
    auto& r = std::get<config::RopeConfig>(c.position.opts);
    if (std::string(method) == "dynamic") {
      config::DynamicNtkScaling d;
      d.factor = 4;
      d.original_len = 5;
      r.scaling.opts = d;
    } else {
      config::LongRopeScaling l;
      l.short_factor = {1, 1.5, 2, 4};
      l.long_factor = {1, 2, 4, 8};
      l.original_len = 5;
      l.factor = 4;
      r.scaling.opts = l;
    }
    Transformer t(c, 30);
    t->eval();
    torch::NoGradGuard ng;
    auto tokens = torch::randint(0, 30, {2, 14});
    DecodeState st;
    t->decode(tokens.narrow(1, 0, 3), {}, {}, &st);  // a prompt of 3
    for (int64_t n = 4; n <= 14; ++n) {
      auto step = t->decode(tokens.narrow(1, n - 1, 1), {}, {}, &st);
      auto full = t->decode(tokens.narrow(1, 0, n)).narrow(1, n - 1, 1);
      EXPECT_TRUE(close(step, full, 1e-5, 1e-5)) << method << " at length " << n;
    }
  }
}

// ---- configuration

config::Config load_yaml(const std::string& yaml) {
  test::TempDir d;
  return config::load_config(test::write(d.file("c.yaml"), yaml));
}

std::string load_error(const std::string& yaml) {
  test::TempDir d;
  try {
    config::load_config(test::write(d.file("c.yaml"), yaml));
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(PositionFamiliesConfig, ImpossibleCombinationsAreRefusedInOneLine) {
  const std::string clm = "task: {type: clm, seq_len: 64}\n";
  const std::string lin = "model:\n  attention: {kernel: linear}\n";
  struct Case {
    std::string yaml, key, says;
    size_t problems = 1;  // each problem is one line naming its file, line and key
  };
  std::vector<Case> cases = {
      {clm + lin + "  position: {type: fire}\n", "model.position.type", "linear attention"},
      {clm + lin + "  position: {type: kerple}\n", "model.position.type", "linear attention"},
      {clm + lin + "  position: {type: rope, scaling: {type: yarn, factor: 4}}\n",
       "model.position.scaling.attention_factor", "softmax temperature"},
      {clm + "model:\n  position: {type: rope, scaling: {type: longrope, short_factor: [1], "
             "long_factor: [1, 2]}}\n",
       "model.position.scaling.short_factor", "one factor per rotated pair: 32", 2},
      {clm + "model:\n  position: {type: rope, nope_layers: [4]}\n", "model.position.nope_layers",
       "layer 4 does not exist"},
      {clm + "model:\n  position: {type: rope, nope_every: 1}\n", "model.position.nope_every",
       "every layer"},
      {clm +
           "model:\n  position: {type: rope, scaling: {type: yarn, beta_fast: 1, beta_slow: 2}}\n",
       "model.position.scaling.beta_fast", "must exceed"},
      {clm + "model:\n  position: {type: rope, scaling: {type: llama3, low_freq_factor: 4, "
             "high_freq_factor: 2}}\n",
       "model.position.scaling.high_freq_factor", "must exceed"},
      {clm + "model:\n  position: {type: rope, fraction: 0.01}\n", "model.position.fraction",
       "rotates none"},
      {"task: {type: mlm}\nmodel:\n  arch: encoder\n  position: {type: none}\n",
       "model.position.type", "bag of words"},
      {clm + "model:\n  position: {type: xpos, scaling: {type: yarn}}\n", "model.position.scaling",
       "unknown key"},
      {clm + lin + "  position: {type: fox}\n", "model.position.type", "linear attention"},
      {clm + lin + "  position: {type: cope}\n", "model.position.type", "linear attention"},
      {clm + lin + "  position: {type: pope}\n", "model.position.type", "needs softmax"},
      {clm + lin + "  position: {type: comrope}\n", "model.position.type", "needs softmax"},
      {clm + lin + "  position: {type: path}\n", "model.position.type", "linear attention"},
      {clm + "model:\n  d_model: 48\n  n_heads: 8\n  position: {type: mrope}\n", "model.n_heads",
       "multiple of 4"},
      {"task: {type: mlm}\nmodel:\n  arch: encoder\n  position: {type: path}\n",
       "model.position.type", "causal self-attention"},
      {clm + "model:\n  position: {type: comrope, block: 6}\n", "model.position.block",
       "divide the head dimension (64)"},
      {"task: {type: mlm}\nmodel:\n  arch: encoder\n  position: {type: fox}\n",
       "model.position.type", "causal self-attention"},
      {"task: {type: translation}\ndata: {source: bible-en-es}\nmodel:\n  arch: encdec\n"
       "  position: {type: cope}\n",
       "model.position.type", "causal self-attention"},
  };
  for (const auto& c : cases) {
    std::string e = load_error(c.yaml);
    EXPECT_NE(e.find(c.key), std::string::npos) << c.yaml << "\n-> " << e;
    EXPECT_NE(e.find(c.says), std::string::npos) << c.yaml << "\n-> " << e;
    EXPECT_EQ(static_cast<size_t>(std::count(e.begin(), e.end(), '\n')) + 1, c.problems) << e;
  }
  // Confirmed, an order-blind encoder loads; so does YaRN with linear attention at factor 1.
  EXPECT_EQ(load_error("task: {type: mlm}\nmodel:\n  arch: encoder\n"
                       "  position: {type: none, encoder_ok: true}\n"),
            "");
  EXPECT_EQ(load_error(clm + lin +
                       "  position: {type: rope, scaling: {type: yarn, factor: 4, "
                       "attention_factor: 1}}\n"),
            "");
  // CoPE's table defaults to task.seq_len, stated in the loaded config.
  EXPECT_EQ(std::get<config::CopeConfig>(
                load_yaml(clm + "model:\n  position: {type: cope}\n").model.position.opts)
                .npos_max,
            64);
}

TEST(PositionFamiliesConfig, RunConfigsOfEarlierVersionsStillLoad) {
  // Before the scaling block: `scaling: <method>` and `scale: <factor>` under model.position.
  auto scaling_of = [](const config::Config& c) {
    return std::get<config::RopeConfig>(c.model.position.opts).scaling.opts;
  };
  auto c = load_yaml(
      "task: {type: clm}\nmodel:\n  position:\n    type: rope\n"
      "    scaling: linear\n    scale: 4.0\n");
  EXPECT_EQ(std::get<config::LinearScaling>(scaling_of(c)).factor, 4.0);
  auto none = load_yaml(
      "task: {type: clm}\nmodel:\n  position: {type: rope, scaling: none, "
      "scale: 1.0}\n");
  EXPECT_TRUE(std::holds_alternative<config::NoScaling>(scaling_of(none)));
  // The shorthand `scaling: yarn` is the block {type: yarn} with its defaults.
  auto y = load_yaml(
      "task: {type: clm, seq_len: 32}\nmodel:\n  position: {type: rope, "
      "scaling: yarn}\n");
  EXPECT_EQ(std::get<config::YarnScaling>(scaling_of(y)).original_len, 32);
}

TEST(PositionFamiliesConfig, OriginalLengthDefaultsToTheTrainingLength) {
  auto c = load_yaml(
      "task: {type: clm, seq_len: 96}\nmodel:\n  position: {type: rope, scaling: "
      "{type: yarn, factor: 4}}\n");
  const auto& r = std::get<config::RopeConfig>(c.model.position.opts);
  EXPECT_EQ(std::get<config::YarnScaling>(r.scaling.opts).original_len, 96);
  // The resolved value is what the run's config.yaml says.
  EXPECT_NE(config::dump(c).find("original_len: 96"), std::string::npos);
  auto f = load_yaml("task: {type: clm, seq_len: 80}\nmodel:\n  position: {type: fire}\n");
  EXPECT_EQ(std::get<config::FireConfig>(f.model.position.opts).threshold, 80.0);
}

}  // namespace
}  // namespace ropelab::model
