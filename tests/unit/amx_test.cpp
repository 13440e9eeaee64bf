// util/amx.h: the operand layouts against their definitions (on every CPU: where there are no
// tiles the portable loops run), and the tile product against libtorch's float64 matmul of the
// same bf16 values (where the CPU has AMX; elsewhere the test says it was skipped).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>
#include <vector>

#include "util/amx.h"
#include "util/float_rows.h"

namespace ropelab {
namespace {

torch::Tensor bf16(const torch::Tensor& t) { return t.to(torch::kBFloat16).contiguous(); }

// The raw bits of a bf16 tensor's element (i, j), for exact comparisons.
uint16_t at(const torch::Tensor& t, int64_t i, int64_t j) {
  return util::bf16_bits(t)[i * t.stride(0) + j];
}

// Sizes with and without tails (the AVX-512 forms take 16 x 16 and 16 x 32 blocks, 32 columns).
const std::vector<std::pair<int64_t, int64_t>> kSizes = {{1, 1},   {3, 5},   {16, 16}, {32, 64},
                                                         {17, 33}, {64, 48}, {96, 130}};

TEST(Amx, PackRowsPairsTheRows) {
  for (const auto& [K, N] : kSizes) {
    SCOPED_TRACE(::testing::Message() << "K " << K << " N " << N);
    auto B = bf16(torch::randn({K, N + 3})).narrow(1, 0, N);  // rows N + 3 apart
    std::vector<uint16_t> Bp(static_cast<size_t>((K + 1) / 2 * 2 * N), 0xFFFF);
    util::amx::pack_rows(util::bf16_bits(B), B.stride(0), K, N, Bp.data());
    for (int64_t k = 0; k < (K + 1) / 2 * 2; ++k)
      for (int64_t n = 0; n < N; ++n) {
        const uint16_t want = k < K ? at(B, k, n) : 0;  // an odd K's last pair padded with zeros
        ASSERT_EQ(Bp[static_cast<size_t>((k / 2) * 2 * N + 2 * n + k % 2)], want) << k << "," << n;
      }
  }
}

TEST(Amx, PackColumnsPairsTheTransposesRows) {
  for (const auto& [N, K0] : kSizes) {
    const int64_t K = K0 / 2 * 2 + 2;  // even
    SCOPED_TRACE(::testing::Message() << "N " << N << " K " << K);
    auto Bt = bf16(torch::randn({N, K + 4})).narrow(1, 0, K);
    std::vector<uint16_t> Bp(static_cast<size_t>(K * N), 0xFFFF);
    util::amx::pack_columns(util::bf16_bits(Bt), Bt.stride(0), N, K, Bp.data());
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n)
        ASSERT_EQ(Bp[static_cast<size_t>((k / 2) * 2 * N + 2 * n + k % 2)], at(Bt, n, k))
            << k << "," << n;
  }
  std::vector<uint16_t> x(6), y(6);
  EXPECT_THROW(util::amx::pack_columns(x.data(), 3, 2, 3, y.data()), std::logic_error);
}

TEST(Amx, TransposeSwapsRowsAndColumns) {
  for (const auto& [R, C] : kSizes) {
    SCOPED_TRACE(::testing::Message() << "R " << R << " C " << C);
    auto X = bf16(torch::randn({R, C + 2})).narrow(1, 0, C);
    const int64_t ldy = R + 1;
    std::vector<uint16_t> Y(static_cast<size_t>(C * ldy), 0xFFFF);
    util::amx::transpose(util::bf16_bits(X), X.stride(0), R, C, Y.data(), ldy);
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c)
        ASSERT_EQ(Y[static_cast<size_t>(c * ldy + r)], at(X, r, c)) << r << "," << c;
  }
}

TEST(Amx, FitsOnlyMultiplesOf32) {
  EXPECT_TRUE(util::amx::fits(32, 64, 256));
  EXPECT_FALSE(util::amx::fits(16, 64, 64));
  EXPECT_FALSE(util::amx::fits(64, 48, 64));
  EXPECT_FALSE(util::amx::fits(64, 64, 0));
}

// C = A B and C += A B on blocks of wider buffers (lda, ldb and ldc past the block), against
// the float64 product of the same bf16 values: float32 sums, so within float32 rounding.
TEST(Amx, ProductMatchesMatmul) {
  if (!util::amx::available()) GTEST_SKIP() << "this CPU has no AMX bf16 tiles";
  struct Case {
    int64_t M, N, K;
  };
  for (const Case c : {Case{32, 32, 32}, Case{64, 256, 64}, Case{256, 64, 64}, Case{64, 64, 256},
                       Case{96, 160, 128}}) {
    SCOPED_TRACE(::testing::Message() << "M " << c.M << " N " << c.N << " K " << c.K);
    auto A = bf16(torch::randn({c.M, c.K + 32})).narrow(1, 0, c.K);
    auto B = bf16(torch::randn({c.K, c.N}));
    const int64_t ldbp = 2 * c.N + 64, ldc = c.N + 16;
    std::vector<uint16_t> Bp(static_cast<size_t>(c.K / 2 * ldbp));
    for (int64_t k = 0; k < c.K; k += 2)  // pack_rows into pair rows ldbp apart
      util::amx::pack_rows(util::bf16_bits(B) + k * c.N, c.N, 2, c.N, Bp.data() + k / 2 * ldbp);
    auto want = torch::mm(A.to(torch::kFloat64), B.to(torch::kFloat64));
    auto C0 = torch::randn({c.M, ldc});
    for (bool accumulate : {false, true}) {
      auto C = C0.clone();
      util::amx::product(c.M, c.N, c.K, util::bf16_bits(A), A.stride(0), Bp.data(), ldbp,
                         C.data_ptr<float>(), ldc, accumulate);
      auto expected = accumulate ? want + C0.narrow(1, 0, c.N).to(torch::kFloat64) : want;
      auto got = C.narrow(1, 0, c.N).to(torch::kFloat64);
      const double scale = expected.abs().max().item<double>();
      EXPECT_LE((got - expected).abs().max().item<double>(), 1e-5 * scale) << accumulate;
      // the columns past the block untouched
      EXPECT_TRUE(torch::equal(C.narrow(1, c.N, ldc - c.N), C0.narrow(1, c.N, ldc - c.N)));
    }
  }
  std::vector<uint16_t> a(size_t{32} * 32);
  std::vector<float> out(size_t{32} * 32);
  EXPECT_THROW(util::amx::product(16, 32, 32, a.data(), 32, a.data(), 64, out.data(), 32, false),
               std::logic_error);
}

// rows_product: every block of rows once, each with the product's float32 sums of its rows.
TEST(Amx, RowsProductHandsEachBlockToTheEpilogue) {
  if (!util::amx::available()) GTEST_SKIP() << "this CPU has no AMX bf16 tiles";
  const int64_t M = 160, N = 96, K = 64, lda = K + 32;
  auto A = bf16(torch::randn({M, lda}));
  auto B = bf16(torch::randn({K, N}));
  std::vector<uint16_t> Bp(static_cast<size_t>(K * N));
  util::amx::pack_rows(util::bf16_bits(B), N, K, N, Bp.data());
  auto C = torch::full({M, N}, -1.0F), C1 = torch::empty({util::amx::kRowBlock, N});
  std::vector<int> seen(static_cast<size_t>(M / util::amx::kRowBlock), 0);
  util::amx::rows_product(M, N, K, util::bf16_bits(A), lda, Bp.data(), 2 * N,
                          [&](int64_t r0, int64_t rows, const float* c) {
                            ASSERT_EQ(rows, util::amx::kRowBlock);
                            ASSERT_EQ(r0 % util::amx::kRowBlock, 0);
                            seen[static_cast<size_t>(r0 / util::amx::kRowBlock)] += 1;
                            std::copy(c, c + rows * N, C.data_ptr<float>() + r0 * N);
                          });
  for (int n : seen) EXPECT_EQ(n, 1);
  for (int64_t r0 = 0; r0 < M; r0 += util::amx::kRowBlock) {  // = product() on the block
    util::amx::product(util::amx::kRowBlock, N, K, util::bf16_bits(A) + r0 * lda, lda, Bp.data(),
                       2 * N, C1.data_ptr<float>(), N, false);
    EXPECT_TRUE(torch::equal(C.narrow(0, r0, util::amx::kRowBlock), C1)) << r0;
  }
  auto want = torch::mm(A.narrow(1, 0, K).to(torch::kFloat64), B.to(torch::kFloat64));
  EXPECT_LE((C.to(torch::kFloat64) - want).abs().max().item<double>(),
            1e-5 * want.abs().max().item<double>());
  EXPECT_THROW(util::amx::rows_product(M + 16, N, K, util::bf16_bits(A), lda, Bp.data(), 2 * N,
                                       [](int64_t, int64_t, const float*) {}),
               std::logic_error);
}

}  // namespace
}  // namespace ropelab
