// The position modules' configs (model/position/*): one struct per variant, chosen by
// model.position.type. A new variant: its struct (in a file of its own under config/positions/),
// its entry in PositionVariant, and one line in the factory (model/position/factory.cpp).
#pragma once

#include <cmath>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "config/enums.h"
#include "config/positions/binary.h"
#include "config/positions/integer.h"
#include "config/positions/traits.h"
#include "config/visit.h"

namespace ropelab::config {

// One struct per variant; `kName` is its config name.

// Whether a scaling method has an original_len key.
template <class T, class = void>
struct has_original_len : std::false_type {};
template <class T>
struct has_original_len<T, std::void_t<decltype(std::declval<T&>().original_len)>>
    : std::true_type {};

struct NoPositionConfig : PositionTraits {  // NoPE (Kazemnejad et al. 2023)
  static constexpr const char* kName = "none";
  bool encoder_ok = false;
  template <class V>
  void visit(V& v) {
    v("encoder_ok", encoder_ok,
      "confirm an encoder with no position signal (it sees a bag of words: MLM stalls)");
  }
  void check(const PositionCheck& c) const {
    if (!c.decoder && !encoder_ok)
      c.bad(c.sec + ".type",
            "an encoder with no position signal sees a bag of words (it cannot learn word "
            "order; MLM stalls); set " +
                c.sec + ".encoder_ok=true to train it anyway");
  }
};

struct SinusoidalConfig : PositionTraits {  // Vaswani et al. 2017, Sec. 3.5
  static constexpr bool kAddsToInput = true;
  static constexpr const char* kName = "sinusoidal";
  double base = 10000.0;
  template <class V>
  void visit(V& v) {
    v("base", base, "wavelength base of the sinusoids", at_least(2));
  }
};

struct LearnedConfig : PositionTraits {  // BERT / GPT-2 learned absolute table
  static constexpr bool kAddsToInput = true;
  static constexpr const char* kName = "learned";
  int64_t max_len = 512;
  template <class V>
  void visit(V& v) {
    v("max_len", max_len, "rows of the table; longer inputs are an error", between(1, 1 << 20));
  }
  void check(const PositionCheck& c) const {
    if (c.seq_len > max_len)
      c.not_applicable("task.seq_len", "seq_len (" + std::to_string(c.seq_len) +
                                           ") exceeds the learned position table (" + c.sec +
                                           ".max_len = " + std::to_string(max_len) + ")");
  }
};

struct T5Config : PositionTraits {  // Raffel et al. 2020, relative position buckets
  static constexpr bool kBiasesScores = true;
  static constexpr const char* kName = "t5";
  int64_t num_buckets = 32;
  int64_t max_distance = 128;
  template <class V>
  void visit(V& v) {
    v("num_buckets", num_buckets, "relative-position buckets (half per direction in encoders)",
      between(2, 4096));
    v("max_distance", max_distance, "distance at which buckets stop growing", between(2, 1 << 20));
  }
};

// RoPE context extension (model/position/rope_frequencies.h): one struct per method, chosen by
// model.position.scaling.type. Each maps (base, rotated width, original length, current length)
// to per-pair frequencies and an attention factor. `original_len: 0` means task.seq_len.
// Each method's checks: key is "SECTION.scaling.", rotated the rotated width (pairs: half).
struct ScalingTraits {
  // The factor the method multiplies q and k by (a softmax temperature); 1 = none.
  static double attention_scale() { return 1.0; }
  static void check(const std::string& /*key*/, int64_t /*rotated*/, const PositionCheck& /*c*/) {}
};
struct NoScaling : ScalingTraits {
  static constexpr const char* kName = "none";
  template <class V>
  void visit(V&) {}
};
inline constexpr const char* kOriginalLenHelp =
    "context length the model was trained at; 0 = task.seq_len (filled in when loading)";
struct LinearScaling
    : ScalingTraits {  // position interpolation, Chen et al. 2023 (HF rope_type "linear")
  static constexpr const char* kName = "linear";
  double factor = 2.0;
  template <class V>
  void visit(V& v) {
    v("factor", factor, "positions are divided by factor", between(1, 1e6));
  }
};
struct NtkScaling
    : ScalingTraits {  // NTK-aware base scaling (bloc97 2023); static, no HF rope_type
  static constexpr const char* kName = "ntk";
  double factor = 2.0;
  template <class V>
  void visit(V& v) {
    v("factor", factor, "base multiplied by factor^(d/(d-2))", between(1, 1e6));
  }
};
struct DynamicNtkScaling : ScalingTraits {  // dynamic NTK (emozilla 2023; HF rope_type "dynamic")
  static constexpr const char* kName = "dynamic";
  double factor = 2.0;
  int64_t original_len = 0;
  template <class V>
  void visit(V& v) {
    v("factor", factor,
      "base = base*((factor*L/original_len)-(factor-1))^(d/(d-2)) for L > original_len",
      between(1, 1e6));
    v("original_len", original_len, kOriginalLenHelp, at_least(0));
  }
};
struct YarnScaling
    : ScalingTraits {  // YaRN, Peng et al. 2023, arXiv:2309.00071 (HF rope_type "yarn")
  static constexpr const char* kName = "yarn";
  double factor = 2.0;
  int64_t original_len = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 0.0;
  template <class V>
  void visit(V& v) {
    v("factor", factor, "context extension factor s", between(1, 1e6));
    v("original_len", original_len, kOriginalLenHelp, at_least(0));
    v("beta_fast", beta_fast,
      "pairs turning more than beta_fast times over original_len keep their frequency "
      "(paper: beta = 32)",
      at_least(0));
    v("beta_slow", beta_slow,
      "pairs turning fewer than beta_slow times are interpolated by 1/factor (paper: alpha = 1)",
      at_least(0));
    v("attention_factor", attention_factor,
      "multiplies q and k (sqrt(1/t)); 0 = the paper's 0.1*ln(factor)+1", at_least(0));
  }
  double attention_scale() const {
    return attention_factor > 0 ? attention_factor : 0.1 * std::log(factor) + 1.0;
  }
  void check(const std::string& key, int64_t /*rotated*/, const PositionCheck& c) const {
    if (beta_fast <= beta_slow)
      c.bad(key + "beta_fast", "beta_fast (" + format_double(beta_fast) +
                                   ") must exceed beta_slow (" + format_double(beta_slow) + ")");
  }
};
struct Llama3Scaling : ScalingTraits {  // Llama 3.1 (Meta 2024; HF rope_type "llama3")
  static constexpr const char* kName = "llama3";
  double factor = 8.0;
  int64_t original_len = 0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  template <class V>
  void visit(V& v) {
    v("factor", factor, "wavelengths longer than original_len/low_freq_factor: divided by factor",
      between(1, 1e6));
    v("original_len", original_len, kOriginalLenHelp, at_least(0));
    v("low_freq_factor", low_freq_factor, "see factor", at_least(1e-6));
    v("high_freq_factor", high_freq_factor,
      "wavelengths shorter than original_len/high_freq_factor are kept; between: a smooth blend",
      at_least(1e-6));
  }
  void check(const std::string& key, int64_t /*rotated*/, const PositionCheck& c) const {
    if (high_freq_factor <= low_freq_factor)
      c.bad(key + "high_freq_factor", "high_freq_factor (" + format_double(high_freq_factor) +
                                          ") must exceed low_freq_factor (" +
                                          format_double(low_freq_factor) + ")");
  }
};
struct LongRopeScaling
    : ScalingTraits {  // LongRoPE, Ding et al. 2024, arXiv:2402.13753 (HF rope_type "longrope")
  static constexpr const char* kName = "longrope";
  std::vector<double> short_factor, long_factor;
  int64_t original_len = 0;
  double factor = 1.0;
  double attention_factor = 0.0;
  template <class V>
  void visit(V& v) {
    v("short_factor", short_factor,
      "per-pair divisors of theta_i (one per rotated pair) for inputs up to original_len",
      at_least(1e-6));
    v("long_factor", long_factor, "per-pair divisors for longer inputs", at_least(1e-6));
    v("original_len", original_len, kOriginalLenHelp, at_least(0));
    v("factor", factor, "target length / original_len (only sets the default attention factor)",
      between(1, 1e6));
    v("attention_factor", attention_factor,
      "multiplies q and k; 0 = sqrt(1 + ln(factor)/ln(original_len))", at_least(0));
  }
  double attention_scale() const {
    return attention_factor > 0 ? attention_factor : (factor > 1.0 ? 2.0 : 1.0);
  }
  void check(const std::string& key, int64_t rotated, const PositionCheck& c) const {
    for (const auto* f : {&short_factor, &long_factor}) {
      const char* name = f == &short_factor ? "short_factor" : "long_factor";
      if (static_cast<int64_t>(f->size()) != rotated / 2)
        c.bad(key + name, "needs one factor per rotated pair: " + std::to_string(rotated / 2) +
                              " (got " + std::to_string(f->size()) + ")");
    }
  }
};
using RopeScalingVariant = std::variant<NoScaling, LinearScaling, NtkScaling, DynamicNtkScaling,
                                        YarnScaling, Llama3Scaling, LongRopeScaling>;
struct RopeScalingConfig {
  RopeScalingVariant opts;  // NoScaling
  const char* type() const { return variant_name(opts); }
  template <class V>
  void visit(V& v) {
    visit_variant(v, opts,
                  "context extension: none, linear (PI), ntk, dynamic (dynamic NTK), yarn, llama3, "
                  "longrope");
  }
  // The method's checks, and one for all: linear attention has no softmax to put a temperature on.
  void check(const std::string& key, int64_t rotated, const PositionCheck& c) const {
    std::visit(
        [&](const auto& m) {
          m.check(key, rotated, c);
          if (m.attention_scale() != 1.0 && c.linear)
            c.bad(key + "attention_factor",
                  std::string(m.kName) +
                      "'s attention factor is a softmax temperature, and linear attention has no "
                      "softmax; set " +
                      key + "attention_factor=1");
        },
        opts);
  }
  // original_len 0 = task.seq_len, for every method that has one.
  void fill_in(int64_t seq_len) {
    std::visit(
        [&](auto& m) {
          if constexpr (has_original_len<std::decay_t<decltype(m)>>::value)
            if (m.original_len == 0) m.original_len = seq_len;
        },
        opts);
  }
};

struct RopeConfig : PositionTraits {  // RoFormer Eq. 14-16 (Su et al. 2021)
  static constexpr bool kRotates = true;
  static constexpr const char* kName = "rope";
  double base = 10000.0;
  RopePairing pairing = RopePairing::kInterleaved;
  int64_t rotary_dim = 0;
  double fraction = 1.0;
  int64_t nope_every = 0;
  std::vector<int64_t> nope_layers;
  RopeScalingConfig scaling;
  template <class V>
  void visit(V& v) {
    v("base", base, "theta_i = base^(-2i/d)", at_least(2));
    v("pairing", pairing, "interleaved (paper: x[2i],x[2i+1]) or half (GPT-NeoX: x[i],x[i+d/2])");
    v("rotary_dim", rotary_dim,
      "partial rotary (GPT-NeoX): rotate the first rotary_dim channels of each head, with all "
      "d/2 frequencies respread over them; 0 = the whole head",
      at_least(0));
    v("fraction", fraction,
      "p-RoPE (Barbero et al. 2024): rotate only the highest-frequency fraction of the pairs "
      "and leave the lowest frequencies unrotated; 1 = RoPE",
      between(0, 1));
    v("nope_every", nope_every,
      "hybrid NoPE: every k-th layer (k, 2k, ...; 1-based) gets no position signal; 0 = none",
      at_least(0));
    v("nope_layers", nope_layers, "hybrid NoPE: these layers (0-based) get no position signal",
      at_least(0));
    v("scaling", scaling, "context extension of the rotation frequencies");
  }
  // Hybrid NoPE layers, p-RoPE, the scaling method, the rotated width.
  void check(const PositionCheck& c) const {
    for (int64_t l : nope_layers)
      if (l >= c.layers)
        c.bad(c.sec + ".nope_layers", "layer " + std::to_string(l) + " does not exist (the " +
                                          "model has " + std::to_string(c.layers) +
                                          " layers, numbered from 0)");
    if (nope_every == 1)
      c.bad(c.sec + ".nope_every",
            "nope_every 1 leaves every layer without positions; use " + c.sec + ".type=none");
    const int64_t rd = rotary_dim == 0 ? c.head_dim : rotary_dim;
    const int64_t rotated = c.feature_width > 0 ? c.feature_width : rd;
    const int64_t pairs = rotated / 2;  // whole pairs rotate
    if (fraction < 1.0 && std::llround(fraction * static_cast<double>(pairs)) == 0)
      c.bad(c.sec + ".fraction", "fraction " + format_double(fraction) + " of " +
                                     std::to_string(rotated / 2) +
                                     " rotated pairs rotates none; use " + c.sec + ".type=none");
    scaling.check(c.sec + ".scaling.", rotated, c);
    if (rd > c.head_dim)
      c.bad(c.sec + ".rotary_dim", "rotary_dim (" + std::to_string(rd) +
                                       ") exceeds the head dimension (" +
                                       std::to_string(c.head_dim) + ")");
    else if (rd % 2 != 0)
      c.bad(rotary_dim == 0 ? std::string("model.n_heads") : c.sec + ".rotary_dim",
            "RoPE rotates pairs of channels: the rotary dimension (" + std::to_string(rd) +
                ") must be even");
  }
  void fill_in(int64_t seq_len) { scaling.fill_in(seq_len); }
};

struct AlibiConfig : PositionTraits {  // Press et al. 2022, linear biases
  static constexpr bool kBiasesScores = true;
  static constexpr const char* kName = "alibi";
  template <class V>
  void visit(V&) {}
};

struct XposConfig : PositionTraits {  // Sun et al. 2023, RoPE with exponential decay
  static constexpr bool kRotates = true;
  static constexpr const char* kName = "xpos";
  double base = 10000.0;
  double scale_base = 512.0;
  template <class V>
  void visit(V& v) {
    v("base", base, "rotation base as in RoPE", at_least(2));
    v("scale_base", scale_base, "length scale of the decay (gamma)", at_least(1));
  }
  static void check(const PositionCheck& c) {
    if (c.head_dim % 2 != 0)
      c.bad("model.n_heads", "xPos rotates pairs of channels: the head dimension (" +
                                 std::to_string(c.head_dim) + ") must be even");
  }
};

struct FireConfig : PositionTraits {  // Li et al. 2024 (ICLR), arXiv:2310.04418
  static constexpr bool kBiasesScores = true;
  static constexpr const char* kName = "fire";
  int64_t mlp_width = 32;
  double init_c = 0.1;
  double threshold = 0;
  template <class V>
  void visit(V& v) {
    v("mlp_width", mlp_width, "hidden width of the bias MLP f_theta", between(1, 4096));
    v("init_c", init_c, "initial c of psi(x) = log(c*x + 1) (learned)", at_least(1e-6));
    v("threshold", threshold,
      "initial L of the progressive interpolation psi(i-j)/psi(max(i, L)) (learned through a "
      "multiplier); 0 = task.seq_len (filled in when loading)",
      at_least(0));
  }
  void fill_in(int64_t seq_len) {
    if (threshold == 0) threshold = static_cast<double>(seq_len);
  }
  static bool reads_absolute_positions() { return true; }
};

struct KerpleConfig : PositionTraits {  // Chi et al. 2022 (NeurIPS), arXiv:2205.09921
  static constexpr bool kBiasesScores = true;
  static constexpr const char* kName = "kerple";
  KerpleKernel kernel = KerpleKernel::kLog;
  template <class V>
  void visit(V& v) {
    v("kernel", kernel,
      "log: -r1*log(1 + r2*|m-n|); power: -r1*|m-n|^r2 (r1, r2 > 0 learned per head, r2 <= 2)");
  }
};

// The 2024-25 challengers: positions that depend on the content (FoX, CoPE) and polar
// positions (PoPE).
struct FoxConfig : PositionTraits {  // Lin et al. 2025 (ICLR), Forgetting Transformer
  static constexpr bool kBiasesScores = true;
  static constexpr bool kCausalOnly = true;
  static constexpr const char* kName = "fox";
  bool rope = false;
  double base = 10000.0;
  template <class V>
  void visit(V& v) {
    v("rope", rope, "also rotate q and k with RoPE (FoX works with or without it)");
    v("base", base, "RoPE's base when rope is true", at_least(2));
  }
  void check(const PositionCheck& c) const {
    if (rope && c.head_dim % 2 != 0)
      c.bad("model.n_heads", "fox with rope rotates pairs of channels: the head dimension (" +
                                 std::to_string(c.head_dim) + ") must be even");
  }
};

struct CopeConfig : PositionTraits {  // Golovneva et al. 2024, contextual position encoding
  static constexpr bool kBiasesScores = true;
  static constexpr bool kCausalOnly = true;
  static constexpr bool kTileable = false;
  static constexpr const char* kName = "cope";
  int64_t npos_max = 0;
  template <class V>
  void visit(V& v) {
    v("npos_max", npos_max,
      "position embeddings per layer; counted positions are clamped to npos_max-1; 0 = "
      "task.seq_len (filled in when loading)",
      between(0, 1 << 20));
  }
  void fill_in(int64_t seq_len) {
    if (npos_max == 0) npos_max = seq_len;
  }
};

struct PopeConfig : PositionTraits {  // Gopalakrishnan et al. 2025, polar position embedding
  static constexpr bool kSoftmaxOnly = true;
  static constexpr const char* kName = "pope";
  double base = 10000.0;
  template <class V>
  void visit(V& v) {
    v("base", base, "theta_c = base^(-c/d) for each of the head's d channels", at_least(2));
  }
};

// M-RoPE (Qwen2-VL, Wang et al. 2024) / axial 2-D RoPE (Heo et al. 2024).
struct MropeConfig : PositionTraits {
  static constexpr bool kRotates = true;
  static constexpr const char* kName = "mrope";
  double base = 10000.0;
  int64_t grid_width = 0;
  MropeSections sections = MropeSections::kInterleaved;
  template <class V>
  void visit(V& v) {
    v("base", base, "theta_i = base^(-2i/d), as in RoPE", at_least(2));
    v("grid_width", grid_width,
      "the input is a row-major grid this many tokens wide: position p is (row p / width, "
      "column p % width); 0 = text (both coordinates are p: exactly RoPE)",
      between(0, 1 << 20));
    v("sections", sections,
      "which pairs each coordinate drives: interleaved (even pairs rows, odd pairs columns, "
      "both over the whole frequency range) or contiguous (the fast half rows, the slow half "
      "columns, as Qwen2-VL's sections)");
  }
  static void check(const PositionCheck& c) {
    if (c.head_dim % 4 != 0)
      c.bad("model.n_heads",
            "mrope gives each of its two coordinates whole pairs of "
            "channels: the head dimension (" +
                std::to_string(c.head_dim) + ") must be a multiple of 4");
  }
  bool reads_absolute_positions() const { return grid_width > 0; }
};

struct PathConfig : PositionTraits {  // Yang et al. 2025, PaTH attention
  static constexpr bool kBiasesScores = true;
  static constexpr bool kCausalOnly = true;
  static constexpr bool kTileable = false;
  static constexpr const char* kName = "path";
  template <class V>
  void visit(V&) {}
};

// LieRE (Ostmeier et al. 2024) / ComRoPE (Yu et al. 2025): learned rotation generators.
struct ComropeConfig : PositionTraits {
  static constexpr bool kRotates = true;
  static constexpr bool kSoftmaxOnly = true;
  static constexpr const char* kName = "comrope";
  int64_t block = 4;
  double base = 10000.0;
  template <class V>
  void visit(V& v) {
    v("block", block,
      "size of each learned skew-symmetric generator block (the head is split into blocks); "
      "2 = RoPE with learned frequencies, the head dimension = one dense generator (LieRE)",
      between(2, 4096));
    v("base", base, "the generators start as RoPE with this base (theta_i = base^(-2i/d))",
      at_least(2));
  }
  void check(const PositionCheck& c) const {
    if (block % 2 != 0 || c.head_dim % block != 0)
      c.bad(c.sec + ".block", "block (" + std::to_string(block) +
                                  ") must be even and divide the head dimension (" +
                                  std::to_string(c.head_dim) + ")");
  }
};

using PositionVariant =
    std::variant<NoPositionConfig, SinusoidalConfig, LearnedConfig, T5Config, RopeConfig,
                 AlibiConfig, XposConfig, FireConfig, KerpleConfig, FoxConfig, CopeConfig,
                 PopeConfig, ComropeConfig, PathConfig, MropeConfig, IntegerConfig, BinaryConfig>;

struct PositionConfig {
  PositionVariant opts{std::in_place_type<RopeConfig>};
  const char* type() const { return variant_name(opts); }
  template <class V>
  void visit(V& v) {
    static const std::string help = "position module: " + joined(variant_names<PositionVariant>());
    visit_variant(v, opts, help.c_str());
  }
  // The family's own checks and `0 = task.seq_len` defaults (config/validate.cpp, loading).
  void check(const PositionCheck& c) const {
    std::visit([&](const auto& p) { p.check(c); }, opts);
  }
  void fill_in(int64_t seq_len) {
    std::visit([&](auto& p) { p.fill_in(seq_len); }, opts);
  }
  bool adds_to_input() const {
    return std::visit([](const auto& p) { return std::decay_t<decltype(p)>::kAddsToInput; }, opts);
  }
  bool reads_absolute_positions() const {
    return std::visit([](const auto& p) { return p.reads_absolute_positions(); }, opts);
  }
};

}  // namespace ropelab::config
