// What validation knows of a position family: where the module acts decides what it can be
// combined with (the traits, which config/validate.cpp reads for every family alike), and each
// family's own checks and defaults (check() and fill_in(), beside the family's visit()).
// Every position config struct derives from PositionTraits and overrides what differs.
#pragma once
#include <charconv>
#include <cstdint>
#include <functional>
#include <string>

namespace ropelab::config {

// What a family's own checks see of the rest of the config, and where they report.
struct PositionCheck {
  std::string sec;               // the section's key: "model.position" or a layout kind's position
  int64_t head_dim = 0;          // each attention head's width
  int64_t seq_len = 0;           // task.seq_len
  int64_t layers = 0;            // layers of the deepest stack
  bool decoder = false;          // model.arch decoder
  bool linear = false;           // linear attention (model.attention.kernel linear)
  int64_t context_parallel = 1;  // train.context_parallel
  // Linear attention in Eq. 19 mode rotates the feature maps: their width (FAVOR+'s features,
  // else the head's). 0: a rotation acts on the head (or its rotary_dim).
  int64_t feature_width = 0;
  // bad(key, message): a problem with the config. not_applicable: a key that does not fit this
  // model (the experiment reader drops such variants).
  std::function<void(const std::string&, const std::string&)> bad, not_applicable;
};

struct PositionTraits {
  static constexpr bool kBiasesScores = false;  // adds a bias to attention scores (T5, ALiBi)
  static constexpr bool kRotates = false;       // rotates q and k (RoPE, xPos)
  // Defined for causal self-attention only (FoX's forget gates and CoPE's counts run from each
  // key up to its query): decoders only.
  static constexpr bool kCausalOnly = false;
  // Needs softmax attention although it adds no score bias (PoPE's keys are not a feature map).
  static constexpr bool kSoftmaxOnly = false;
  // Adds a d_model-wide vector to the input embeddings (sinusoidal, learned): the embeddings
  // must be d_model wide.
  static constexpr bool kAddsToInput = false;
  // Its score bias can be computed tile by tile (not CoPE's or PaTH's stored T x S bias): what
  // ring attention (train.context_parallel) needs.
  static constexpr bool kTileable = true;
  // Reads each query's absolute position inside attention (FIRE, M-RoPE on a grid), which
  // per-document positions (task.packing documents) would change.
  static bool reads_absolute_positions() { return false; }
  // The family's own checks (none by default).
  static void check(const PositionCheck& /*c*/) {}
  // Defaults that depend on the task: `0 = task.seq_len` keys, resolved when loading so that the
  // run's saved config.yaml states the value (none by default).
  static void fill_in(int64_t /*seq_len*/) {}
};

// A double as the config writer prints it (shortest round-trip form, with a ".0" where it has
// no fraction), for messages.
inline std::string format_double(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, p);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

}  // namespace ropelab::config
