#include "util/amx.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "util/platform.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's AVX-512 headers start some conversions from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized and -Wuninitialized report at every inlined use (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define ROPELAB_HAVE_AMX 1
#else
#define ROPELAB_HAVE_AMX 0
#endif

namespace ropelab::util::amx {

namespace {

#if ROPELAB_HAVE_AMX
#define ROPELAB_TILES __attribute__((target("amx-tile,amx-bf16")))
#define ROPELAB_AVX512BW __attribute__((target("avx512f,avx512bw")))

// Linux hands the tiles' 8 KiB of register state only to processes that ask (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, Linux 5.16 and later); asking again is harmless.
bool granted() {
  constexpr int kReqXcompPerm = 0x1023, kXtileData = 18;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
}

// The tile configuration (palette 1): 8 tiles of 16 rows by 64 bytes. Tiles 0-3 hold a 32 x 32
// block of C (float32), 4-5 two 16-row blocks of A (32 bf16 a row), 6-7 two 16-column blocks of B
// (16 pair rows of 16 columns).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

ROPELAB_TILES void configure() {
  TileConfig c;
  for (int i = 0; i < 8; ++i) {
    c.colsb[i] = 64;
    c.rows[i] = 16;
  }
  asm volatile("" ::: "memory");  // the config's stores before ldtilecfg reads it
  _tile_loadconfig(&c);
}

// One 32 x 32 block of C, its K loop over 32 at a time: 4 tile products per step.
ROPELAB_TILES void block(int64_t K, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldbp,
                         float* c, int64_t ldc, bool accumulate) {
  const int64_t sa = lda * 2, sb = ldbp * 2, sc = ldc * 4;  // row strides in bytes
  float* c1 = c + 16 * ldc;
  if (accumulate) {
    _tile_loadd(0, c, sc);
    _tile_loadd(1, c + 16, sc);
    _tile_loadd(2, c1, sc);
    _tile_loadd(3, c1 + 16, sc);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t k = 0; k < K; k += 32) {
    _tile_loadd(4, a + k, sa);
    _tile_loadd(5, a + 16 * lda + k, sa);
    _tile_loadd(6, b + (k / 2) * ldbp, sb);
    _tile_loadd(7, b + (k / 2) * ldbp + 32, sb);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, sc);
  _tile_stored(1, c + 16, sc);
  _tile_stored(2, c1, sc);
  _tile_stored(3, c1 + 16, sc);
}

ROPELAB_TILES void tile_product(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                                const uint16_t* Bp, int64_t ldbp, float* C, int64_t ldc,
                                bool accumulate) {
  // Configured on every call: oneDNN's kernels on this thread load configurations of their own.
  configure();
  asm volatile("" ::: "memory");  // A, Bp (and C) written before the tile loads read them
  for (int64_t m = 0; m < M; m += 32)
    for (int64_t n = 0; n < N; n += 32)
      block(K, A + m * lda, lda, Bp + 2 * n, ldbp, C + m * ldc + n, ldc, accumulate);
  _tile_release();  // the tiles back to their initial state: cheaper context switches
}

// Rows 2i and 2i + 1 of B, n from 0 to N, interleaved: 32 columns at a time.
ROPELAB_AVX512BW int64_t interleave32(const uint16_t* r0, const uint16_t* r1, int64_t N,
                                      uint16_t* o) {
  alignas(64) static const uint16_t lo[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                              37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                              11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i idx_lo = _mm512_load_si512(lo);
  const __m512i idx_hi = _mm512_add_epi16(idx_lo, _mm512_set1_epi16(16));
  int64_t n = 0;
  for (; n + 32 <= N; n += 32) {
    const __m512i a = _mm512_loadu_si512(r0 + n), b = _mm512_loadu_si512(r1 + n);
    _mm512_storeu_si512(o + 2 * n, _mm512_permutex2var_epi16(a, idx_lo, b));
    _mm512_storeu_si512(o + 2 * n + 32, _mm512_permutex2var_epi16(a, idx_hi, b));
  }
  return n;
}

// The 16 x 16 32-bit cells at in (rows ld_in apart) transposed to out (rows ld_out apart).
ROPELAB_AVX512BW void transpose16x16(const uint32_t* in, int64_t ld_in, uint32_t* out,
                                     int64_t ld_out) {
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(in + i * ld_in);
  for (int i = 0; i < 16; i += 2) {  // 128-bit lanes: a0 b0 a1 b1, a2 b2 a3 b3
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // lanes: rows i..i+3 of one column each
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8)  // lanes: columns j, j+8 of rows h..h+3, h+4..h+7
    for (int j = 0; j < 4; ++j) {
      t[h + j] = _mm512_shuffle_i32x4(r[h + j], r[h + 4 + j], 0x88);
      t[h + 4 + j] = _mm512_shuffle_i32x4(r[h + j], r[h + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {  // column j from t[j] and t[8 + j], column j + 8 likewise
    _mm512_storeu_si512(out + j * ld_out, _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88));
    _mm512_storeu_si512(out + (j + 8) * ld_out, _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd));
  }
}

// transpose16x16 of 16 rows of 32 bf16 (the pairs as 32-bit cells), each pair then split into
// its two rows of out.
ROPELAB_AVX512BW void transpose16x32(const uint16_t* in, int64_t ld_in, uint16_t* out,
                                     int64_t ld_out) {
  alignas(64) uint32_t cells[16 * 16];
  transpose16x16(reinterpret_cast<const uint32_t*>(in), ld_in / 2, cells, 16);
  for (int64_t j = 0; j < 16; ++j) {
    const __m512i z = _mm512_load_si512(cells + 16 * j);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * j * ld_out), _mm512_cvtepi32_epi16(z));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (2 * j + 1) * ld_out),
                        _mm512_cvtepi32_epi16(_mm512_srli_epi32(z, 16)));
  }
}
#endif

// pack_rows and pack_columns (amx.h) on one thread. Their AVX-512 forms run where available():
// every CPU with AMX has AVX-512 BW, and only the tile products read these layouts.
void pack_rows_serial(const uint16_t* B, int64_t ldb, int64_t K, int64_t N, uint16_t* Bp) {
  for (int64_t k = 0; k < K; k += 2) {
    const uint16_t* r0 = B + k * ldb;
    const bool odd = k + 1 == K;  // the last pair's second row: zeros
    uint16_t* o = Bp + k * N;
    int64_t n = 0;
#if ROPELAB_HAVE_AMX
    if (available() && !odd) n = interleave32(r0, r0 + ldb, N, o);
#endif
    for (; n < N; ++n) {
      o[2 * n] = r0[n];
      o[2 * n + 1] = odd ? 0 : r0[ldb + n];
    }
  }
}

void pack_columns_serial(const uint16_t* Bt, int64_t ld, int64_t N, int64_t K, uint16_t* Bp) {
  const int64_t J = K / 2;  // the pairs a row of Bt holds: 32-bit cells, Bp = their transpose
  int64_t n0 = 0, j0 = 0;
#if ROPELAB_HAVE_AMX
  if (available() && ld % 2 == 0) {
    const auto* in = reinterpret_cast<const uint32_t*>(Bt);
    auto* out = reinterpret_cast<uint32_t*>(Bp);
    n0 = N / 16 * 16;
    j0 = J / 16 * 16;
    for (int64_t n = 0; n < n0; n += 16)
      for (int64_t j = 0; j < j0; j += 16)
        transpose16x16(in + n * ld / 2 + j, ld / 2, out + j * N + n, N);
  }
#endif
  for (int64_t n = 0; n < N; ++n)  // the cells the 16 x 16 blocks left
    for (int64_t j = n < n0 ? j0 : 0; j < J; ++j)
      std::memcpy(Bp + j * 2 * N + 2 * n, Bt + n * ld + 2 * j, 4);
}

}  // namespace

bool available() {
#if ROPELAB_HAVE_AMX
  static const bool ok = [] {
    const char* v = std::getenv("ROPELAB_AMX");
    return (v == nullptr || std::strcmp(v, "off") != 0) && platform::cpu_has_amx_bf16() &&
           granted();
  }();
  return ok;
#else
  return false;
#endif
}

bool fits(int64_t M, int64_t N, int64_t K) {
  return M > 0 && N > 0 && K > 0 && M % 32 == 0 && N % 32 == 0 && K % 32 == 0;
}

void product(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* Bp,
             int64_t ldbp, float* C, int64_t ldc, bool accumulate) {
  if (!available() || !fits(M, N, K))
    throw std::logic_error("util::amx::product: no tiles here, or sizes not multiples of 32");
#if ROPELAB_HAVE_AMX
  RECORD_FUNCTION("ropelab::tile_product",
                  std::vector<c10::IValue>());  // a matmul: lab/step_split.h
  tile_product(M, N, K, A, lda, Bp, ldbp, C, ldc, accumulate);
#else
  (void)A, (void)lda, (void)Bp, (void)ldbp, (void)C, (void)ldc, (void)accumulate;
#endif
}

void rows_product(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                  const uint16_t* Bp, int64_t ldbp, const Epilogue& epilogue) {
  if (M % kRowBlock != 0 || !fits(kRowBlock, N, K))
    throw std::logic_error("util::amx::rows_product: sizes not multiples of 32");
  // A matmul to lab/step_split.h, as a library's call is, with this thread's wait for the others;
  // the epilogues inside are not.
  RECORD_FUNCTION("ropelab::tile_product", std::vector<c10::IValue>());
  at::parallel_for(0, M / kRowBlock, 1, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<float> c;  // kept from call to call: no allocation per call
    if (c.size() < static_cast<size_t>(kRowBlock * N)) c.resize(static_cast<size_t>(kRowBlock * N));
    for (int64_t b = b0; b < b1; ++b) {
      product(kRowBlock, N, K, A + b * kRowBlock * lda, lda, Bp, ldbp, c.data(), N, false);
      RECORD_FUNCTION("ropelab::tile_epilogue", std::vector<c10::IValue>());
      epilogue(b * kRowBlock, kRowBlock, c.data());
    }
  });
}

// The packs split K among libtorch's threads, 32 at a time (inside a parallel region, as the
// attention's per head, they run on the calling thread).
constexpr int64_t kPackK = 32;

void pack_rows(const uint16_t* B, int64_t ldb, int64_t K, int64_t N, uint16_t* Bp) {
  at::parallel_for(0, (K + kPackK - 1) / kPackK, 1, [&](int64_t c0, int64_t c1) {
    const int64_t k0 = c0 * kPackK, k1 = std::min(K, c1 * kPackK);
    pack_rows_serial(B + k0 * ldb, ldb, k1 - k0, N, Bp + k0 * N);
  });
}

void pack_columns(const uint16_t* Bt, int64_t ld, int64_t N, int64_t K, uint16_t* Bp) {
  if (K % 2 != 0) throw std::logic_error("util::amx::pack_columns: K must be even");
  at::parallel_for(0, (K + kPackK - 1) / kPackK, 1, [&](int64_t c0, int64_t c1) {
    const int64_t k0 = c0 * kPackK, k1 = std::min(K, c1 * kPackK);
    pack_columns_serial(Bt + k0, ld, N, k1 - k0, Bp + k0 * N);
  });
}

void transpose(const uint16_t* X, int64_t ldx, int64_t R, int64_t C, uint16_t* Y, int64_t ldy) {
  int64_t r0 = 0, c0 = 0;
#if ROPELAB_HAVE_AMX
  if (available() && ldx % 2 == 0) {
    r0 = R / 16 * 16;
    c0 = C / 32 * 32;
    for (int64_t r = 0; r < r0; r += 16)
      for (int64_t c = 0; c < c0; c += 32)
        transpose16x32(X + r * ldx + c, ldx, Y + c * ldy + r, ldy);
  }
#endif
  for (int64_t r = 0; r < R; ++r)  // the elements the 16 x 32 blocks left
    for (int64_t c = r < r0 ? c0 : 0; c < C; ++c) Y[c * ldy + r] = X[r * ldx + c];
}

}  // namespace ropelab::util::amx
