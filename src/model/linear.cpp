#include "model/linear.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>
#include <torch/nn/functional/linear.h>

#include <cstring>
#include <functional>
#include <vector>

#include "compat/torch_compat.h"
#include "model/dropout.h"
#include "util/amx.h"
#include "util/float_rows.h"
#include "util/gemm.h"
#include "util/vec_bf16.h"

namespace ropelab::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A 2-D float32 view as sgemm reads it: row-major (stride 1 along columns) or transposed
// (stride 1 along rows); a copy when neither.
struct GemmOperand {
  torch::Tensor t;  // keeps a copy alive
  bool trans = false;
  int64_t ld = 0;
};
GemmOperand operand(const torch::Tensor& m) {
  const int64_t R = m.size(0), C = m.size(1);
  if (m.stride(1) == 1 && m.stride(0) >= std::max<int64_t>(C, 1)) return {m, false, m.stride(0)};
  if (m.stride(0) == 1 && m.stride(1) >= std::max<int64_t>(R, 1)) return {m, true, m.stride(1)};
  auto c = m.contiguous();
  return {c, false, std::max<int64_t>(C, 1)};
}

}  // namespace

void matmul_into(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  if (!util::fast_sgemm_available() || out.stride(1) != 1 || out.stride(0) < N || M == 0 ||
      N == 0 || K == 0) {
    at::mm_out(out, a, b);
    return;
  }
  auto A = operand(a), B = operand(b);
  util::sgemm(A.trans, B.trans, M, N, K, A.t.data_ptr<float>(), A.ld, B.t.data_ptr<float>(), B.ld,
              0.0F, out.data_ptr<float>(), out.stride(0));
}

namespace {

// Where bf16 products go to util::gemm_bf16 rather than libtorch's bf16 mm (model::bf16_matmul).
bool widened_products() { return !util::bf16_gemm_native() && util::bf16_gemm_available(); }

// out [M, N] = bf16(a [M, K] b [K, N]) through util::gemm_bf16, acc: M N floats of scratch.
void gemm_rounded(const torch::Tensor& a_MK, const torch::Tensor& b_KN, float* acc, uint16_t* out) {
  const int64_t M = a_MK.size(0), K = a_MK.size(1), N = b_KN.size(1);
  auto A = operand(a_MK), B = operand(b_KN);
  util::gemm_bf16_rounded(A.trans, B.trans, M, N, K, util::bf16_bits(A.t), A.ld,
                          util::bf16_bits(B.t), B.ld, acc, out);
}

// bf16_matmul of 2-D operands.
torch::Tensor bf16_mm(const torch::Tensor& a_MK, const torch::Tensor& b_KN) {
  const int64_t M = a_MK.size(0), K = a_MK.size(1), N = b_KN.size(1);
  if (!widened_products() || M == 0 || N == 0 || K == 0) return at::mm(a_MK, b_KN);
  auto acc_MN = torch::empty({M, N}, a_MK.options().dtype(torch::kFloat32));
  auto out_MN = torch::empty({M, N}, a_MK.options());
  gemm_rounded(a_MK, b_KN, acc_MN.data_ptr<float>(), util::bf16_bits(out_MN));
  return out_MN;
}

// y [M, out] = x [M, in] w^T (+ b).
torch::Tensor forward_2d(const torch::Tensor& x_MI, const torch::Tensor& w_OI,
                         const torch::Tensor& b_O) {
  const int64_t M = x_MI.size(0), O = w_OI.size(0);
  RECORD_FUNCTION("SgemmLinear.forward", std::vector<c10::IValue>());
  auto y_MO = torch::empty({M, O}, x_MI.options());
  matmul_into(y_MO, x_MI, w_OI.t());
  if (b_O.numel() > 0) y_MO.add_(b_O);
  return y_MO;
}

// Inputs are 2-D and contiguous; an empty bias stands for none (a custom autograd function takes
// no undefined tensor).
struct SgemmLinear : public torch::autograd::Function<SgemmLinear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_MI,
                               const torch::Tensor& w_OI, const torch::Tensor& b_O) {
    ctx->save_for_backward({x_MI, w_OI});
    ctx->saved_data["bias"] = b_O.numel() > 0;
    return forward_2d(x_MI, w_OI, b_O);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const auto& x_MI = saved[0];
    const auto& w_OI = saved[1];
    auto g_MO = grad_out[0].contiguous();
    const int64_t M = x_MI.size(0), I = x_MI.size(1), O = w_OI.size(0);
    torch::Tensor gx, gw, gb;
    if (ctx->needs_input_grad(0)) {  // dX = dY W
      gx = torch::empty({M, I}, x_MI.options());
      matmul_into(gx, g_MO, w_OI);
    }
    if (ctx->needs_input_grad(1)) {  // dW = dY^T X
      gw = torch::empty({O, I}, w_OI.options());
      matmul_into(gw, g_MO.t(), x_MI);
    }
    if (ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2)) gb = g_MO.sum(0);
    return {gx, gw, gb};
  }
};

// Whether a bf16 product [M, N] = [M, K] [K, N] runs on util::amx's tiles (rows_product): the
// CPU has them, bf16 products go to libtorch's mm rather than oneDNN's gemm
// (util::bf16_products_on_mm), M, N and K are multiples of 32, and B is at most 256 Ki elements
// with K at most 1024. rows_product reads all of B for each block of rows: B must stay in a
// core's L2. On 2 cores of an AMX Xeon (2 MiB of L2 a core) the tiles beat libtorch's mm up to
// there (4096 rows: 1024 x 256 1.65-1.76 against 2.05 ms, 256 x 1024 1.15-1.28 against 1.35-1.56)
// and lose beyond (2048 x 512: 11.1 against 7.0 ms); to K = 1024 their float32 sums are oneDNN's
// (its AMX kernel adds K in the same order: the same bf16 values), beyond it not always.
bool on_tiles(int64_t M, int64_t N, int64_t K) {
  constexpr int64_t kMaxB = int64_t{1} << 18, kMaxK = 1024;
  return util::amx::available() && util::bf16_products_on_mm() && M % util::amx::kRowBlock == 0 &&
         util::amx::fits(util::amx::kRowBlock, N, K) && K * N <= kMaxB && K <= kMaxK;
}

// What a dense layer's forward does to rows [r0, r1) of its bf16 output y [M, out] once they are
// written (the rotation of Bf16RotatedLinear); may be empty.
using RowsDone = std::function<void(int64_t r0, int64_t r1, uint16_t* y)>;

// rows_done over all M rows of y, in parallel (the paths without the tiles' blocks).
void all_rows(const RowsDone& rows_done, int64_t M, uint16_t* y) {
  if (rows_done) at::parallel_for(0, M, 64, [&](int64_t r0, int64_t r1) { rows_done(r0, r1, y); });
}

// A bias as the bf16 passes read it: float32, contiguous; p null where there is none (empty).
struct FloatBias {
  torch::Tensor t;
  const float* p = nullptr;
  explicit FloatBias(const torch::Tensor& b_O) {
    if (b_O.numel() == 0) return;
    t = b_O.to(torch::kFloat32).contiguous();
    p = t.data_ptr<float>();
  }
};

// Whether x [M, in] w^T [in, out] runs block by block of rows (block_rows): on the tiles, or
// where the products are widened (any shape there).
bool in_blocks(int64_t M, int64_t O, int64_t I) { return on_tiles(M, O, I) || widened_products(); }

// x [M, in] w^T block by block of rows (in_blocks): on the tiles (on_tiles; w packed here,
// util::amx::rows_product), else widened onto oneDNN's sgemm (util::gemm_bf16_blocks, the sums
// of util::gemm_bf16); each block's float32 sums go to `epilogue` while they are in cache.
void block_rows(const torch::Tensor& x_MI, const torch::Tensor& w_OI,
                const util::RowsEpilogue& epilogue) {
  const int64_t M = x_MI.size(0), I = x_MI.size(1), O = w_OI.size(0);
  if (!on_tiles(M, O, I)) {
    util::gemm_bf16_blocks(true, M, O, I, util::bf16_bits(x_MI), I, util::bf16_bits(w_OI), I,
                           epilogue);
    return;
  }
  std::vector<uint16_t> wp(static_cast<size_t>(I * O));  // w^T in pairs of rows
  util::amx::pack_columns(util::bf16_bits(w_OI), I, O, I, wp.data());
  util::amx::rows_product(M, O, I, util::bf16_bits(x_MI), I, wp.data(), 2 * O, epilogue);
}

// A block's rows of y = x w^T + b in bf16 from their float32 sums c [rows, out]: c rounded, then
// the bias added with a second rounding (as aten::mm then the bias pass give it).
void biased_rows(const float* c, const float* bias, uint16_t* y, int64_t rows, int64_t O) {
  if (bias != nullptr)
    vec::add_bias_from_float_bf16(c, bias, y, rows, O);
  else
    vec::float_to_bf16(c, y, rows * O);
}

// y [M, out] = x [M, in] w^T + b in bf16 under CPU autocast: the matmul in bf16, then the
// float32 bias (none where it is empty) added with one rounding to bf16 (util/vec_bf16.h), then
// rows_done (if any) on the rows. Where the CPU has AMX and the sizes fit, or where the products
// are widened (AVX2), all of it block by block of rows (block_rows): the float32 result is never
// stored whole. libtorch's addmm would first copy the bias
// into every row of the output, a broadcast copy that took longer than the add (about 10 ms of
// the LM bench's 360 ms bf16 step on 2 cores, BENCHMARKS.md). With a bias the matmul is oneDNN's
// bf16 gemm with float32 output, and the bias pass reads that and writes the bf16 y (the product
// rounded to bf16 first, as aten::mm rounds it: the same values): at the LM bench's shapes on 2
// cores that gemm runs at 840-850 GFLOP/s where aten::mm's bf16 matmul runs at 700-720, and the
// pass that rounds is the bias pass, which ran anyway. Without a bias aten::mm (rounding would be
// a pass of its own), and also with one where util::bf16_products_on_mm() (AMX: the bf16
// output's bytes matter more).
torch::Tensor bias_forward_bf16(const torch::Tensor& x_MI, const torch::Tensor& w_OI,
                                const torch::Tensor& b_O, const RowsDone& rows_done = {}) {
  const int64_t M = x_MI.size(0), I = x_MI.size(1), O = w_OI.size(0);
  const FloatBias b(b_O);
  const float* bp = b.p;
  const bool contiguous = x_MI.is_contiguous() && w_OI.is_contiguous();
  if (contiguous && M > 0 && in_blocks(M, O, I)) {  // each block of rows while in cache
    auto y_MO = torch::empty({M, O}, x_MI.options());
    uint16_t* y = util::bf16_bits(y_MO);
    block_rows(x_MI, w_OI, [&](int64_t r0, int64_t rows, const float* c) {
      biased_rows(c, bp, y + r0 * O, rows, O);
      if (rows_done) rows_done(r0, r0 + rows, y);
    });
    return y_MO;
  }
  if (bp == nullptr || util::bf16_products_on_mm() || M == 0 || !contiguous) {
    auto y_MO = bf16_mm(x_MI, w_OI.t());
    uint16_t* y = util::bf16_bits(y_MO);
    if (bp != nullptr)
      at::parallel_for(0, M, 64, [&](int64_t r0, int64_t r1) {
        vec::add_bias_bf16(y + r0 * O, bp, r1 - r0, O, O);
      });
    all_rows(rows_done, M, y);
    return y_MO;
  }
  auto acc_MO = torch::empty({M, O}, x_MI.options().dtype(torch::kFloat32));
  util::gemm_bf16(false, true, M, O, I, util::bf16_bits(x_MI), I, util::bf16_bits(w_OI), I, 0.0F,
                  acc_MO.data_ptr<float>(), O);
  auto y_MO = torch::empty({M, O}, x_MI.options());
  const float* acc = acc_MO.data_ptr<float>();
  uint16_t* y = util::bf16_bits(y_MO);
  at::parallel_for(0, M, 64, [&](int64_t r0, int64_t r1) {
    vec::add_bias_from_float_bf16(acc + r0 * O, bp, y + r0 * O, r1 - r0, O);
  });
  all_rows(rows_done, M, y);
  return y_MO;
}

// a [M, K] b [K, N] in bf16 (libtorch's mm): on the tiles where on_tiles and both are
// contiguous, each block of rows rounded to bf16 from its float32 sums.
torch::Tensor mm_bf16(const torch::Tensor& a_MK, const torch::Tensor& b_KN) {
  const int64_t M = a_MK.size(0), K = a_MK.size(1), N = b_KN.size(1);
  if (!a_MK.is_contiguous() || !b_KN.is_contiguous() || !on_tiles(M, N, K))
    return bf16_mm(a_MK, b_KN);
  std::vector<uint16_t> bp(static_cast<size_t>(K * N));  // b in pairs of rows
  util::amx::pack_rows(util::bf16_bits(b_KN), N, K, N, bp.data());
  auto out_MN = torch::empty({M, N}, a_MK.options());
  uint16_t* out = util::bf16_bits(out_MN);
  util::amx::rows_product(M, N, K, util::bf16_bits(a_MK), K, bp.data(), 2 * N,
                          [&](int64_t r0, int64_t rows, const float* c) {
                            vec::float_to_bf16(c, out + r0 * N, rows * N);
                          });
  return out_MN;
}

// The bias's gradient: dY's column sums in float32, 64 columns to a task.
torch::Tensor column_sums_bf16(const torch::Tensor& g_MO) {
  const int64_t M = g_MO.size(0), O = g_MO.size(1);
  auto sum_O = torch::zeros({O}, g_MO.options().dtype(torch::kFloat32));
  const uint16_t* g = util::bf16_bits(g_MO);
  float* s = sum_O.data_ptr<float>();
  at::parallel_for(0, (O + 63) / 64, 1, [&](int64_t c0, int64_t c1) {
    const int64_t j0 = c0 * 64, j1 = std::min(O, c1 * 64);
    vec::add_column_sums_bf16(g + j0, M, j1 - j0, O, s + j0);
  });
  return sum_O;
}

// dW = dY^T X for x [M, in] and dY [M, out] in bf16 (contiguous). For a float32 weight (the
// parameter itself, not a bf16 copy) oneDNN's bf16 gemm writes it in float32: the sums are
// never rounded to bf16 and no cast follows (on the LM bench's shapes also faster than the bf16
// mm with its cast: the logits' 26.9 against 22.7 ms, BENCHMARKS.md). Else libtorch's bf16 mm
// (autograd casts it to the weight's dtype).
torch::Tensor weight_grad_bf16(const torch::Tensor& g_MO, const torch::Tensor& x_MI,
                               bool float_weight) {
  const int64_t M = g_MO.size(0), O = g_MO.size(1), I = x_MI.size(1);
  if (!float_weight || !util::bf16_gemm_available()) return bf16_mm(g_MO.t(), x_MI);
  auto gw_OI = torch::empty({O, I}, g_MO.options().dtype(torch::kFloat32));
  util::gemm_bf16(true, false, O, I, M, util::bf16_bits(g_MO), O, util::bf16_bits(x_MI), I, 0.0F,
                  gw_OI.data_ptr<float>(), I);
  return gw_OI;
}

// The gradients of x, w and b from dY [M, out] (bf16, contiguous), as the bf16 nodes' inputs
// need them: dX = dY W in bf16, dW as weight_grad_bf16, db = dY's column sums in float32.
// `saved`: x [M, in] and the bf16 weight the forward used.
variable_list linear_grads_bf16(AutogradContext* ctx, const torch::Tensor& g_MO,
                                const torch::Tensor& x_MI, const torch::Tensor& w_OI) {
  torch::Tensor gb;
  auto [gx, gw] = bf16_linear_grads(g_MO, x_MI, w_OI, ctx->saved_data["float_weight"].toBool(),
                                    ctx->needs_input_grad(0), ctx->needs_input_grad(1));
  if (ctx->needs_input_grad(2) && ctx->saved_data["bias"].toBool())
    gb = column_sums_bf16(g_MO);  // db = 1^T dY
  return {gx, gw, gb};
}

// The forward's common part: w in bf16 (cast here from a float32 weight, whose gradient then
// comes back in float32), x and that weight saved, whether there is a bias noted.
torch::Tensor bf16_weight(AutogradContext* ctx, const torch::Tensor& w_OI,
                          const torch::Tensor& b_O) {
  ctx->saved_data["float_weight"] = w_OI.scalar_type() == torch::kFloat32;
  ctx->saved_data["bias"] = b_O.numel() > 0;
  return w_OI.to(torch::kBFloat16).contiguous();
}

// The dense layer under bf16 CPU autocast. Inputs: x [M, in] in bf16 (contiguous), w [out, in]
// in float32 (the parameter: its gradient comes back in float32) or bf16, b [out] in float32 or
// empty (none); the bias's gradient comes back in float32.
struct Bf16Linear : public torch::autograd::Function<Bf16Linear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_MI,
                               const torch::Tensor& w_OI, const torch::Tensor& b_O) {
    RECORD_FUNCTION("ropelab::bf16_linear", std::vector<c10::IValue>());
    auto w16_OI = bf16_weight(ctx, w_OI, b_O);
    ctx->save_for_backward({x_MI, w16_OI});
    return bias_forward_bf16(x_MI, w16_OI, b_O);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    return linear_grads_bf16(ctx, grad_out[0].to(torch::kBFloat16).contiguous(), saved[0],
                             saved[1]);
  }
};

// act_dropout_after_linear's node: y = act_dropout(x W^T + b) for x [M, in] bf16, on the tiles
// or widened (block_rows), each block of rows of h = x W^T + b (biased_rows) turned into y and
// d = act'(h) * mask (model/dropout.h's ActDropoutBlocks) while it is in cache: h is never
// stored. Backward: dh = dy * d, then the dense layer's gradients of that.
struct Bf16LinearActDropout : public torch::autograd::Function<Bf16LinearActDropout> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_MI,
                               const torch::Tensor& w_OI, const torch::Tensor& b_O, int64_t act,
                               double p) {
    RECORD_FUNCTION("ropelab::bf16_linear_act_dropout", std::vector<c10::IValue>());
    auto w16_OI = bf16_weight(ctx, w_OI, b_O);
    const ActDropoutBlocks blocks(static_cast<config::Activation>(act), p);  // draws the mask
    const int64_t M = x_MI.size(0), O = w16_OI.size(0);
    const FloatBias b(b_O);
    auto y_MO = torch::empty({M, O}, x_MI.options()), d_MO = torch::empty({M, O}, x_MI.options());
    uint16_t *y = util::bf16_bits(y_MO), *d = util::bf16_bits(d_MO);
    block_rows(x_MI, w16_OI, [&](int64_t r0, int64_t rows, const float* c) {
      thread_local std::vector<uint16_t> h;  // the block's h
      thread_local std::vector<float> mask;
      const auto n = static_cast<size_t>(rows * O);
      if (h.size() < n) {
        h.resize(n);
        mask.resize(n);
      }
      biased_rows(c, b.p, h.data(), rows, O);
      blocks.apply(r0 * O, rows * O, h.data(), y + r0 * O, d + r0 * O, mask.data());
    });
    ctx->save_for_backward({x_MI, w16_OI, d_MO});
    return y_MO;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    auto dh_MO = act_dropout_backward_bf16(saved[2], grad_out[0]);
    auto g = linear_grads_bf16(ctx, dh_MO, saved[0], saved[1]);
    return {g[0], g[1], g[2], torch::Tensor(), torch::Tensor()};
  }
};

// The rotation's rows [r0, r1): row r of y [M, C] (bf16) is position r % T; its q and k heads
// rotated (backward: rotated back) from the same columns of x, which may be y itself (each head
// is staged in `buf` first; v's columns are then left alone), v's columns copied where x is not
// y.
void rotate_row_range(const uint16_t* x, uint16_t* y, int64_t r0, int64_t r1, int64_t C, int64_t T,
                      const HeadRotation& r, bool backward) {
  const int64_t W = r.width, qk = (r.q_heads + r.k_heads) * W;
  const float *cq = r.cos_q.data_ptr<float>(), *sq = r.sin_q.data_ptr<float>();
  const float *ck = r.cos_k.data_ptr<float>(), *sk = r.sin_k.data_ptr<float>();
  std::vector<uint16_t> buf(static_cast<size_t>(W));
  for (int64_t row = r0; row < r1; ++row) {
    const int64_t t = row % T;
    const uint16_t* xr = x + row * C;
    uint16_t* yr = y + row * C;
    for (int64_t j = 0; j < qk; j += W) {
      const bool is_q = j < r.q_heads * W;
      const uint16_t* in = xr + j;
      if (x == y)
        in = static_cast<uint16_t*>(
            std::memcpy(buf.data(), in, sizeof(uint16_t) * static_cast<size_t>(W)));
      vec::rope_row_bf16(in, (is_q ? cq : ck) + t * W, (is_q ? sq : sk) + t * W, yr + j, W,
                         r.interleaved, backward);
    }
    if (x != y) std::memcpy(yr + qk, xr + qk, sizeof(uint16_t) * static_cast<size_t>(C - qk));
  }
}

// rotate_row_range over all M rows, in parallel.
void rotate_rows(const uint16_t* x, uint16_t* y, int64_t M, int64_t C, int64_t T,
                 const HeadRotation& r, bool backward) {
  at::parallel_for(
      0, M, 64, [&](int64_t r0, int64_t r1) { rotate_row_range(x, y, r0, r1, C, T, r, backward); });
}

// Bf16Linear with a HeadRotation: forward, the rotation on the rows the bias pass left (on the
// tiles, each block of rows as it is written); backward,
// the gradient rotated back, then the matmuls and column sums of that.
struct Bf16RotatedLinear : public torch::autograd::Function<Bf16RotatedLinear> {
  static HeadRotation rotation(const std::vector<torch::Tensor>& tables, int64_t q_heads,
                               int64_t k_heads, int64_t width, bool interleaved) {
    return {tables[0], tables[1], tables[2], tables[3], q_heads, k_heads, width, interleaved};
  }
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_BTI,
                               const torch::Tensor& w_OI, const torch::Tensor& b_O,
                               const torch::Tensor& cos_q, const torch::Tensor& sin_q,
                               const torch::Tensor& cos_k, const torch::Tensor& sin_k,
                               int64_t q_heads, int64_t k_heads, int64_t width, bool interleaved) {
    RECORD_FUNCTION("ropelab::bf16_linear_rope", std::vector<c10::IValue>());
    const int64_t T = x_BTI.size(1);
    auto x_MI = x_BTI.reshape({-1, x_BTI.size(2)});
    auto w16_OI = bf16_weight(ctx, w_OI, b_O);
    ctx->save_for_backward({x_MI, w16_OI, cos_q, sin_q, cos_k, sin_k});
    ctx->saved_data["shape"] = std::vector<int64_t>{q_heads, k_heads, width, T, interleaved};
    const auto rot = rotation({cos_q, sin_q, cos_k, sin_k}, q_heads, k_heads, width, interleaved);
    const int64_t C = w16_OI.size(0);
    auto y_MO = bias_forward_bf16(x_MI, w16_OI, b_O, [&](int64_t r0, int64_t r1, uint16_t* y) {
      rotate_row_range(y, y, r0, r1, C, T, rot, false);  // rows still in cache
    });
    return y_MO.view({x_BTI.size(0), T, -1});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const auto s = ctx->saved_data["shape"].toIntVector();
    auto g = std::move(grad_out[0]).to(torch::kBFloat16).contiguous();
    // Rotated back in place where nothing else holds the gradient: a pass over q and k only;
    // else into a new tensor. (In training it is always the latter: autograd's engine keeps
    // more handles to the gradient it hands a custom function than this test allows.)
    const bool own = g.use_count() == 1 && g.storage().use_count() == 1;
    auto g_MO = g.view({-1, g.size(-1)});
    auto r_MO = own ? g_MO : torch::empty_like(g_MO);
    rotate_rows(util::bf16_bits(g_MO), util::bf16_bits(r_MO), g_MO.size(0), g_MO.size(1), s[3],
                rotation({saved[2], saved[3], saved[4], saved[5]}, s[0], s[1], s[2], s[4] != 0),
                true);
    auto g3 = linear_grads_bf16(ctx, r_MO, saved[0], saved[1]);
    if (g3[0].defined()) g3[0] = g3[0].view({-1, s[3], saved[1].size(1)});
    return {g3[0], g3[1], g3[2], {}, {}, {}, {}, {}, {}, {}, {}};
  }
};

// Whether the bf16 layer applies: CPU autocast in bf16, float inputs on the CPU, a 2-D weight, a
// 1-D bias or none, and a CPU where the bf16 nodes beat libtorch's addmm (util::bf16_nodes_pay).
bool bf16_path(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  auto cpu_float = [](const torch::Tensor& t) {
    return t.device().is_cpu() &&
           (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16);
  };
  return compat::autocast_enabled(c10::DeviceType::CPU) &&
         compat::autocast_dtype(c10::DeviceType::CPU) == torch::kBFloat16 &&
         util::bf16_nodes_pay() && cpu_float(x) && cpu_float(w) && w.dim() == 2 && x.dim() >= 1 &&
         x.size(-1) == w.size(1) && x.numel() > 0 &&
         (!b.defined() || (cpu_float(b) && b.dim() == 1 && b.size(0) == w.size(0)));
}

// A custom autograd function takes no undefined tensor: an empty one stands for "no bias".
torch::Tensor none_if_undefined(const torch::Tensor& b, const torch::Tensor& w) {
  return b.defined() ? b : torch::empty({0}, w.options().dtype(torch::kFloat32));
}

bool fast_path(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  auto f32_cpu = [](const torch::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat32;
  };
  return util::fast_sgemm_available() && f32_cpu(x) && f32_cpu(w) && w.dim() == 2 && x.dim() >= 1 &&
         x.size(-1) == w.size(1) && x.numel() > 0 && w.numel() > 0 &&
         (!b.defined() || (f32_cpu(b) && b.dim() == 1 && b.size(0) == w.size(0))) &&
         !compat::autocast_enabled(c10::DeviceType::CPU);
}

}  // namespace

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  // libtorch's own linear (Python's F.linear), which folds a [..., in] input's bias into one
  // addmm. The C++ frontend's torch::nn::functional::linear adds it to a 3-D output in a second,
  // in-place pass, which under bf16 autocast mixes dtypes (bf16 output, float32 bias): 7.8 ms of
  // a 96 ms lm-large step on an H200.
  auto sizes = x.sizes().vec();
  sizes.back() = w.size(0);
  if (bf16_path(x, w, b)) {
    auto x_MI = x.reshape({-1, x.size(-1)}).to(torch::kBFloat16).contiguous();
    auto y_MO = Bf16Linear::apply(x_MI, w.contiguous(), none_if_undefined(b, w));
    return y_MO.view(sizes);
  }
  if (!fast_path(x, w, b)) return torch::linear(x, w, b);
  auto x_MI = x.reshape({-1, x.size(-1)}).contiguous();
  auto w_OI = w.contiguous();
  auto b_O = b.defined() ? b : torch::empty({0}, w.options());
  const bool grad = torch::GradMode::is_enabled() &&
                    (x.requires_grad() || w.requires_grad() || (b.defined() && b.requires_grad()));
  auto y_MO = grad ? SgemmLinear::apply(x_MI, w_OI, b_O) : forward_2d(x_MI, w_OI, b_O);
  return y_MO.view(sizes);
}

bool fuses_rotation(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                    const HeadRotation& r) {
  if (!bf16_path(x, w, b) || x.dim() != 3 || r.width <= 0 || r.width % 2 != 0 ||
      (r.q_heads + r.k_heads) * r.width > w.size(0))
    return false;
  auto table_ok = [&](const torch::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat32 &&
           t.dim() == 2 && t.size(0) == x.size(1) && t.size(1) == r.width && t.is_contiguous() &&
           !t.requires_grad();
  };
  return table_ok(r.cos_q) && table_ok(r.sin_q) && table_ok(r.cos_k) && table_ok(r.sin_k);
}

torch::Tensor linear_rotated(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                             const HeadRotation& r) {
  TORCH_CHECK(fuses_rotation(x, w, b, r), "linear_rotated: the bf16 path does not apply");
  return Bf16RotatedLinear::apply(x.to(torch::kBFloat16).contiguous(), w.contiguous(),
                                  none_if_undefined(b, w), r.cos_q, r.sin_q, r.cos_k, r.sin_k,
                                  r.q_heads, r.k_heads, r.width, r.interleaved);
}

torch::Tensor act_dropout_after_linear(const torch::nn::Linear& m, const torch::Tensor& x,
                                       config::Activation act, double p, bool training) {
  const auto &w = m->weight, &b = m->bias;
  if (!bf16_path(x, w, b) || !fuses_act_dropout(x, p, training) || x.numel() == 0 ||
      !in_blocks(x.numel() / x.size(-1), w.size(0), w.size(1)))
    return act_dropout(linear(m, x), act, p, training);
  auto sizes = x.sizes().vec();
  sizes.back() = w.size(0);
  auto x_MI = x.reshape({-1, x.size(-1)}).to(torch::kBFloat16).contiguous();
  return Bf16LinearActDropout::apply(x_MI, w.contiguous(), none_if_undefined(b, w),
                                     static_cast<int64_t>(act), p)
      .view(sizes);
}

torch::Tensor linear(const torch::nn::Linear& m, const torch::Tensor& x) {
  return linear(x, m->weight, m->bias);
}

torch::Tensor bf16_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.dim() == 2) return bf16_mm(a, b);
  const int64_t n = a.size(0), M = a.size(1), K = a.size(2), N = b.size(2);
  if (!widened_products() || n == 0 || M == 0 || N == 0 || K == 0) return at::bmm(a, b);
  auto out = torch::empty({n, M, N}, a.options());
  at::parallel_for(0, n, 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> acc(static_cast<size_t>(M * N));
    for (int64_t i = i0; i < i1; ++i)
      gemm_rounded(a.select(0, i), b.select(0, i), acc.data(), util::bf16_bits(out) + i * M * N);
  });
  return out;
}

bool bf16_linear(const torch::Tensor& x, const torch::Tensor& w) {
  return bf16_path(x, w, torch::Tensor());
}

std::pair<torch::Tensor, torch::Tensor> bf16_linear_grads(const torch::Tensor& g_MO,
                                                          const torch::Tensor& x_MI,
                                                          const torch::Tensor& w16_OI,
                                                          bool float_weight, bool need_x,
                                                          bool need_w) {
  torch::Tensor gx, gw;
  if (need_x) gx = mm_bf16(g_MO, w16_OI);  // dX = dY W
  if (need_w) gw = weight_grad_bf16(g_MO, x_MI, float_weight);
  return {gx, gw};
}

}  // namespace ropelab::model
