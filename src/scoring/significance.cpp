#include "scoring/significance.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace ropelab::scoring {

namespace {

// NumPy's SeedSequence (O'Neill's seed_seq with better mixing): the entropy words are hashed
// into a pool of four 32-bit words, which then yield the generator's state words.
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875, kInitB = 0x8b51f9dd,
                   kMultB = 0x58f38ded, kMixL = 0xca01f9dd, kMixR = 0x4973f715;

std::array<uint32_t, 8> seed_sequence(uint64_t seed) {
  std::vector<uint32_t> entropy = {static_cast<uint32_t>(seed)};
  if (seed >> 32) entropy.push_back(static_cast<uint32_t>(seed >> 32));
  uint32_t hash_const = kInitA;
  auto hashmix = [&](uint32_t v) {
    v ^= hash_const;
    hash_const *= kMultA;
    v *= hash_const;
    return v ^ (v >> 16);
  };
  auto mix = [](uint32_t x, uint32_t y) {
    uint32_t r = kMixL * x - kMixR * y;
    return r ^ (r >> 16);
  };
  std::array<uint32_t, 4> pool{};
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = hashmix(i < entropy.size() ? entropy[i] : 0);
  for (size_t src = 0; src < pool.size(); ++src)
    for (size_t dst = 0; dst < pool.size(); ++dst)
      if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src]));
  for (size_t src = pool.size(); src < entropy.size(); ++src)
    for (auto& p : pool) p = mix(p, hashmix(entropy[src]));
  std::array<uint32_t, 8> out{};
  uint32_t h = kInitB;
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t v = pool[i % pool.size()] ^ h;
    h *= kMultB;
    v *= h;
    out[i] = v ^ (v >> 16);
  }
  return out;
}

}  // namespace

NumpyRng::NumpyRng(uint64_t seed) {
  auto w = seed_sequence(seed);
  auto word64 = [&](size_t i) { return u128{w[2 * i]} | (u128{w[2 * i + 1]} << 32); };
  u128 initstate = (word64(0) << 64) | word64(1), initseq = (word64(2) << 64) | word64(3);
  inc_ = (initseq << 1) | 1;
  state_ = 0;
  step();
  state_ += initstate;
  step();
}

void NumpyRng::step() {
  const u128 mult = (u128{0x2360ED051FC65DA4ULL} << 64) | 0x4385DF649FCCF645ULL;
  state_ = state_ * mult + inc_;
}

uint64_t NumpyRng::next64() {  // PCG XSL-RR 128/64
  step();
  auto hi = static_cast<uint64_t>(state_ >> 64), lo = static_cast<uint64_t>(state_);
  uint64_t x = hi ^ lo;
  unsigned rot = static_cast<unsigned>(hi >> 58);
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t NumpyRng::next32() {
  if (has32_) {
    has32_ = false;
    return buf32_;
  }
  uint64_t v = next64();
  has32_ = true;
  buf32_ = static_cast<uint32_t>(v >> 32);
  return static_cast<uint32_t>(v);
}

uint64_t NumpyRng::below(uint64_t n) {
  uint64_t rng = n - 1;
  if (rng == 0) return 0;
  if (rng == 0xFFFFFFFFULL) return next32();
  if (rng < 0xFFFFFFFFULL) {  // Lemire on 32-bit draws
    uint64_t excl = rng + 1;
    uint64_t m = uint64_t{next32()} * excl;
    auto left = static_cast<uint32_t>(m);
    if (left < excl) {
      auto threshold = static_cast<uint32_t>((0xFFFFFFFFULL - rng) % excl);
      while (left < threshold) {
        m = uint64_t{next32()} * excl;
        left = static_cast<uint32_t>(m);
      }
    }
    return m >> 32;
  }
  // Lemire on 64-bit draws (a population beyond 2^32 segments).
  uint64_t excl = rng + 1;
  u128 m = u128{next64()} * excl;
  auto left = static_cast<uint64_t>(m);
  if (left < excl) {
    uint64_t threshold = (~uint64_t{0} - rng) % excl;
    while (left < threshold) {
      m = u128{next64()} * excl;
      left = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

bool NumpyRng::coin() {
  if (coin_left_ == 0) {
    coin_buf_ = next32();
    coin_left_ = 31;
  } else {
    coin_buf_ >>= 1;
    --coin_left_;
  }
  return (coin_buf_ & 1U) != 0;
}

void estimate_ci(std::vector<double> scores, double& mean, double& ci) {
  std::sort(scores.begin(), scores.end());
  size_t n = scores.size(), lower = n / 40, upper = n - lower - 1;
  double sum = 0;
  for (double s : scores) sum += s;
  mean = n ? sum / static_cast<double>(n) : 0.0;
  ci = n ? 0.5 * (scores[upper] - scores[lower]) : 0.0;
}

namespace {

// The resampled indices, drawn as sacreBLEU draws them: rng.choice(n_seg, (n, n_seg)).
std::vector<uint32_t> resample_indices(size_t segments, int n, uint64_t seed) {
  NumpyRng rng(seed);
  std::vector<uint32_t> idx(static_cast<size_t>(n) * segments);
  for (auto& i : idx) i = static_cast<uint32_t>(rng.below(segments));
  return idx;
}

// Each resample's score, the statistics summed in float32 in index order (numpy's sum over
// axis 0 of a float32 array).
std::vector<double> resampled_scores(const SegmentStats& stats, const std::vector<uint32_t>& idx,
                                     const ScoreFn& score) {
  size_t segments = stats.size(), width = stats.empty() ? 0 : stats[0].size();
  std::vector<double> out;
  std::vector<float> acc(width);
  std::vector<double> sum(width);
  for (size_t start = 0; start + segments <= idx.size() && segments; start += segments) {
    std::fill(acc.begin(), acc.end(), 0.0F);
    for (size_t i = start; i < start + segments; ++i)
      for (size_t k = 0; k < width; ++k) acc[k] += static_cast<float>(stats[idx[i]][k]);
    for (size_t k = 0; k < width; ++k) sum[k] = acc[k];
    out.push_back(score(sum));
  }
  return out;
}

double p_value(const std::vector<double>& sample_stats, double observed) {
  size_t c = 0;
  for (double s : sample_stats) c += s > observed ? 1 : 0;
  return static_cast<double>(c + 1) / static_cast<double>(sample_stats.size() + 1);
}

}  // namespace

std::vector<double> sum_stats(const SegmentStats& s) {
  std::vector<double> sum(s.empty() ? 0 : s[0].size(), 0.0);
  for (const auto& row : s)
    for (size_t k = 0; k < sum.size(); ++k) sum[k] += row[k];
  return sum;
}

namespace {
// The system's corpus score, and how far it is from the baseline's.
PairedResult observe(const SegmentStats& base, const SegmentStats& sys, const ScoreFn& score,
                     double& observed) {
  PairedResult r;
  r.score = score(sum_stats(sys));
  observed = std::abs(score(sum_stats(base)) - r.score);
  return r;
}
}  // namespace

PairedResult bootstrap_baseline(const SegmentStats& base, const ScoreFn& score, int n,
                                uint64_t seed) {
  PairedResult r;
  r.score = score(sum_stats(base));
  estimate_ci(resampled_scores(base, resample_indices(base.size(), n, seed), score), r.mean, r.ci);
  r.has_ci = true;
  return r;
}

PairedResult paired_bootstrap(const SegmentStats& base, const SegmentStats& sys,
                              const ScoreFn& score, int n, uint64_t seed) {
  double observed = 0;
  PairedResult r = observe(base, sys, score, observed);
  auto idx = resample_indices(sys.size(), n, seed);
  auto bl = resampled_scores(base, idx, score), sy = resampled_scores(sys, idx, score);
  estimate_ci(sy, r.mean, r.ci);
  r.has_ci = true;
  std::vector<double> diffs(bl.size());
  double mean = 0;
  for (size_t i = 0; i < diffs.size(); ++i) mean += diffs[i] = std::abs(sy[i] - bl[i]);
  mean /= static_cast<double>(std::max<size_t>(1, diffs.size()));
  for (double& d : diffs) d -= mean;
  r.p_value = p_value(diffs, observed);
  return r;
}

PairedResult paired_randomization(const SegmentStats& base, const SegmentStats& sys,
                                  const ScoreFn& score, int n, uint64_t seed) {
  double observed = 0;
  PairedResult r = observe(base, sys, score, observed);
  NumpyRng rng(seed);
  size_t width = sys.empty() ? 0 : sys[0].size();
  std::vector<double> diffs(static_cast<size_t>(n));
  std::vector<double> a(width), b(width);
  for (auto& d : diffs) {
    std::fill(a.begin(), a.end(), 0.0);
    std::fill(b.begin(), b.end(), 0.0);
    for (size_t i = 0; i < sys.size(); ++i) {
      bool keep = rng.coin();  // true: pseudo-system a takes the baseline's segment
      const auto& to_a = keep ? base[i] : sys[i];
      const auto& to_b = keep ? sys[i] : base[i];
      for (size_t k = 0; k < width; ++k) a[k] += to_a[k], b[k] += to_b[k];
    }
    d = std::abs(score(a) - score(b));
  }
  r.p_value = p_value(diffs, observed);
  return r;
}

}  // namespace ropelab::scoring
