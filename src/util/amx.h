// bf16 products on Intel's AMX tiles (Advanced Matrix Extensions, Intel 64 and IA-32
// Architectures Software Developer's Manual, Vol. 1, ch. 20: TDPBF16PS), for the products too small
// for a library call: the attention's per-block products (model/bf16_attention.cpp), 64 query
// rows against at most the sequence's keys, where oneDNN's gemm API spends more time per call
// than the tiles need for the product (docs/platform-notes.md, "AMX tiles for the attention").
//
// The dense layers' bf16 products run on the tiles too (rows_product, model/linear.cpp): oneDNN's
// matmul in libtorch 1.13 spends more per call than these shapes leave to gain, and the tiles' C
// block, still in cache, takes the layer's rounding, bias, rotation or activation and dropout mask
// in the same pass (docs/platform-notes.md, "AMX tiles for the dense layers").
//
// A tile product multiplies A [M, K] (bf16 rows) by B [K, N] held in pairs of rows: element
// (k, n) of B at Bp[(k / 2) * ldbp + 2 n + k % 2] (the layout TDPBF16PS reads: each 32-bit cell
// holds B[2i][n] and B[2i + 1][n]), into a float32 C [M, N]. The pack_* functions below make that
// layout from B's rows or from B^T's rows, and transpose() makes A from A^T's rows.
#pragma once
#include <cstdint>
#include <functional>

namespace ropelab::util::amx {

// Whether the tile products run here: the CPU has AMX's bf16 tiles (platform::cpu_has_amx_bf16),
// Linux granted this process the tiles' register state (arch_prctl ARCH_REQ_XCOMP_PERM), and
// ROPELAB_AMX is not "off" (which leaves every product to oneDNN, to compare). Checked once.
bool available();

// Whether product() takes these sizes: M, N and K multiples of 32.
bool fits(int64_t M, int64_t N, int64_t K);

// C[M, N] = A[M, K] B (or C += A B when accumulate), float32 sums of bf16 products. A's rows are
// lda apart, Bp's pair rows ldbp apart (at least 2 N), C's rows ldc apart. Needs available() and
// fits(M, N, K).
void product(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda, const uint16_t* Bp,
             int64_t ldbp, float* C, int64_t ldc, bool accumulate);

// Rows per block of rows_product.
constexpr int64_t kRowBlock = 32;

// C = A B for A [M, K] (rows lda apart) and Bp as product() takes it, kRowBlock rows at a time,
// the blocks split among libtorch's threads: each block's float32 C [kRowBlock, N] (rows N apart,
// the thread's scratch) goes to epilogue(r0, rows, C) on the thread that computed it, while it is
// in cache. Needs available(), M % 32 == 0 and fits(kRowBlock, N, K).
using Epilogue = std::function<void(int64_t r0, int64_t rows, const float* C)>;
void rows_product(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                  const uint16_t* Bp, int64_t ldbp, const Epilogue& epilogue);

// The packs split K among libtorch's threads (on the calling thread inside a parallel region).
//
// Bp (pair rows 2 N apart, ceil(K / 2) of them) from B [K, N]'s rows, ldb apart (an odd K's last
// pair is padded with zeros).
void pack_rows(const uint16_t* B, int64_t ldb, int64_t K, int64_t N, uint16_t* Bp);
// Bp (pair rows 2 N apart, K / 2 of them; K even) from B^T [N, K]'s rows, ld apart: B = Bt^T.
void pack_columns(const uint16_t* Bt, int64_t ld, int64_t N, int64_t K, uint16_t* Bp);
// Y [C, R] (rows ldy apart) = X^T, X [R, C] with rows ldx apart.
void transpose(const uint16_t* X, int64_t ldx, int64_t R, int64_t C, uint16_t* Y, int64_t ldy);

}  // namespace ropelab::util::amx
