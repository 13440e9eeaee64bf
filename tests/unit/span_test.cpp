// The span rule (model/span.h) against its definition, pair by pair: for causal, window and
// chunk spans (each alone and causal with each, bidirectional too), every query's key interval,
// the block classification of random blocks, the [T, S] mask, the per-query key counts and the
// cache's first key are what the three rules say of each (query, key) pair; the per-token rules
// (padding, documents) on top; and a layout kind's span.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>
#include <string>
#include <vector>

#include "config/schema.h"
#include "model/span.h"

namespace ropelab::model {
namespace {

// The definition, for one pair.
bool sees(const Span& s, int64_t p, int64_t k) {
  if (s.causal && k > p) return false;
  if (s.window > 0 && std::abs(p - k) >= s.window) return false;
  if (s.chunk > 0 && p / s.chunk != k / s.chunk) return false;
  return true;
}

std::vector<Span> spans() {
  std::vector<Span> out;
  for (bool causal : {false, true}) {
    out.push_back(Span{causal, 0, 0});
    for (int64_t w : {1, 2, 5, 16}) out.push_back(Span{causal, w, 0});
    for (int64_t c : {1, 3, 8}) out.push_back(Span{causal, 0, c});
  }
  return out;
}

std::string name(const Span& s) {
  return std::string(s.causal ? "causal" : "bidirectional") + " window " +
         std::to_string(s.window) + " chunk " + std::to_string(s.chunk);
}

TEST(Span, EachQuerySeesOneIntervalHoldingItself) {
  for (const Span& s : spans())
    for (int64_t p = 0; p < 40; ++p) {
      const KeyInterval r = s.keys(p);
      EXPECT_TRUE(r.lo <= p && p < r.hi) << name(s) << " p " << p;
      for (int64_t k = 0; k < 60; ++k)
        ASSERT_EQ(k >= r.lo && k < r.hi, sees(s, p, k)) << name(s) << " p " << p << " k " << k;
    }
}

TEST(Span, BlocksAreEmptyFullOrPartialAsTheirPairsSay) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> at(0, 50), len(1, 12);
  for (const Span& s : spans())
    for (int i = 0; i < 300; ++i) {
      const int64_t p0 = at(rng), p1 = p0 + len(rng) - 1, k0 = at(rng), k1 = k0 + len(rng) - 1;
      int64_t seen = 0;
      for (int64_t p = p0; p <= p1; ++p)
        for (int64_t k = k0; k <= k1; ++k) seen += sees(s, p, k) ? 1 : 0;
      const auto want = seen == 0                               ? Span::Block::kEmpty
                        : seen == (p1 - p0 + 1) * (k1 - k0 + 1) ? Span::Block::kFull
                                                                : Span::Block::kPartial;
      ASSERT_EQ(s.block(p0, p1, k0, k1), want)
          << name(s) << " queries " << p0 << ".." << p1 << " keys " << k0 << ".." << k1;
    }
}

TEST(Span, MaskCountsAndFirstKeyFollowThePairs) {
  for (const Span& s : spans())
    for (int64_t q_first : {0, 3, 17})
      for (int64_t k_first : {0, 2}) {
        const int64_t T = 9, S = 24;
        auto allowed = s.allowed_TS(q_first, T, k_first, S, torch::kCPU);
        auto visible = s.visible_T(q_first, T, k_first, S);
        for (int64_t t = 0; t < T; ++t) {
          int64_t n = 0;
          for (int64_t j = 0; j < S; ++j) {
            const bool want = sees(s, q_first + t, k_first + j);
            n += want ? 1 : 0;
            const bool got = !allowed.defined() || allowed[t][j].item<bool>();
            ASSERT_EQ(got, want) << name(s) << " t " << t << " s " << j;
          }
          EXPECT_EQ(visible[t].item<int64_t>(), n) << name(s) << " t " << t;
        }
        if (!allowed.defined()) {  // undefined means every pair: it must be so
          for (int64_t t = 0; t < T; ++t)
            for (int64_t j = 0; j < S; ++j) ASSERT_TRUE(sees(s, q_first + t, k_first + j));
        }
      }
  for (const Span& s : spans()) {
    if (!s.causal) continue;
    for (int64_t p = 0; p < 40; ++p) {  // no key before first_key(p) is seen from p on
      const int64_t first = s.first_key(p);
      for (int64_t q = p; q < p + 30; ++q)
        for (int64_t k = 0; k < first; ++k) ASSERT_FALSE(sees(s, q, k)) << name(s);
      if (first > 0) {
        EXPECT_TRUE(sees(s, p, first)) << name(s) << ": kept a key nobody sees";
      }
    }
  }
}

TEST(Span, PaddingAndDocumentsNarrowTheSpan) {
  const Span s{true, 0, 0};
  auto allowed = s.allowed_TS(0, 4, 0, 4, torch::kCPU).view({1, 1, 4, 4});
  auto pad = torch::tensor({true, true, false, true}).view({1, 4});
  auto doc = torch::tensor({0, 0, 1, 1}, torch::kLong).view({1, 4});
  auto m = restrict_to_tokens(allowed, pad, doc, doc)[0][0];
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t j = 0; j < 4; ++j) {
      const bool want = j <= t && j != 2 && (t < 2) == (j < 2);
      EXPECT_EQ(m[t][j].item<bool>(), want) << t << "," << j;
    }
  EXPECT_FALSE(restrict_to_tokens({}, {}, {}, {}).defined()) << "nothing masked";
}

TEST(Span, OfALayoutKind) {
  config::LayerKindConfig k;
  EXPECT_TRUE(Span::of(k, true).global());
  k.window = config::Maybe<int64_t>::of(16);
  const Span w = Span::of(k, true);
  EXPECT_TRUE(w.causal);
  EXPECT_EQ(w.window, 16);
  EXPECT_FALSE(w.global());
  config::LayerKindConfig c;
  c.chunk = config::Maybe<int64_t>::of(8);
  EXPECT_EQ(Span::of(c, false).chunk, 8);
  EXPECT_FALSE(Span::of(c, false).causal);
}

}  // namespace
}  // namespace ropelab::model
