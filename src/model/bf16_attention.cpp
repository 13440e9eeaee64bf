#include "model/bf16_attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "model/bias_rows.h"
#include "util/amx.h"
#include "util/float_rows.h"
#include "util/gemm.h"
#include "util/vec_bf16.h"
#include "util/vec_kernels.h"

namespace ropelab::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Query rows per block: each block's matmuls stop at the last key any of its rows sees.
constexpr int64_t kBlock = 64;

struct Shape {
  int64_t B, N, T, S, W, H;  // W: q and k's width; H: v's
  Shape(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v)
      : B(q.size(0)), N(q.size(1)), T(q.size(2)), S(k.size(2)), W(q.size(3)), H(v.size(3)) {}
  int64_t blocks() const { return (T + kBlock - 1) / kBlock; }
  int64_t wide() const { return std::max({S, W, H}); }
};

// The rows of a [B, N, L, D] bf16 tensor (any strides, the last 1) by flat head h = b N + n.
struct HeadRows {
  uint16_t* base;
  int64_t sb, sn, ld, N;
  explicit HeadRows(const torch::Tensor& t)
      : base(util::bf16_bits(t)), sb(t.stride(0)), sn(t.stride(1)), ld(t.stride(2)), N(t.size(1)) {}
  uint16_t* head(int64_t h) const { return base + (h / N) * sb + (h % N) * sn; }
};

// Rows [t0, t0 + rows) of a float32 block, `cols` wide and `ld` apart, rounded into a head's rows.
void store_rows(const float* src, int64_t ld, uint16_t* dst, int64_t dst_ld, int64_t rows,
                int64_t cols) {
  if (ld == cols && dst_ld == cols) {
    vec::float_to_bf16(src, dst, rows * cols);
    return;
  }
  for (int64_t i = 0; i < rows; ++i) vec::float_to_bf16(src + i * ld, dst + i * dst_ld, cols);
}

// For each block of query rows, one past the last key that any of its rows may see in `mask`
// ([1 or B, 1 or N, T, S] float32 rows, masked below vec::kMaskedBelow): the keys after it are
// masked for every head, so their scores, probabilities and gradients are skipped (a causal
// mask's upper triangle, block by block). A row masked throughout keeps all S keys (the softmax
// gives it uniform probabilities), as does every row without a mask.
std::vector<int64_t> key_ends(const BiasRows& mask, const Shape& sh) {
  std::vector<int64_t> ends(static_cast<size_t>(sh.blocks()), sh.S);
  if (mask.base == nullptr) return ends;
  std::fill(ends.begin(), ends.end(), 0);
  const auto& m = mask.t;  // [1 or B, 1 or N, T, S] or fewer leading dims
  const int64_t mb = m.dim() >= 4 ? m.size(-4) : 1, mn = m.dim() >= 3 ? m.size(-3) : 1;
  for (int64_t b = 0; b < mb; ++b)
    for (int64_t n = 0; n < mn; ++n)
      for (int64_t t = 0; t < sh.T; ++t) {
        const float* row = mask.base + b * mask.sb + n * mask.sn + t * mask.st;
        auto& end = ends[static_cast<size_t>(t / kBlock)];
        int64_t j = sh.S;
        while (j > end && row[j - 1] <= vec::kMaskedBelow) --j;
        if (j == end) {  // nothing seen after the block's end so far: anything before it?
          int64_t i = 0;
          while (i < end && row[i] <= vec::kMaskedBelow) ++i;
          if (i == end) j = sh.S;  // masked throughout: every key (uniform p)
        }
        end = std::max(end, j);
      }
  return ends;
}

// A thread's scratch: float32 gemm outputs [kBlock, wide], the gradient of a block's scores in
// bf16 [kBlock, S], dk and dv's float32 sums [S, W] and [S, H], and S floats for the row
// kernels. On the tiles (use_tiles) also the operands in their layouts (util/amx.h): two of a
// head's k or v [S, max(W, H)] (b1, b2), a block's P or dS transposed [S, kBlock] (at), and a
// block's dO or q rows in pairs [kBlock, max(W, H)] (bp). Where the products are widened
// (widened_heads), a head's k [S, W] and v [S, H] in float32 (kf, vf).
struct Scratch {
  float *out, *dk, *dv, *tmp, *kf, *vf;
  uint16_t *ds, *b1, *b2, *at, *bp;
};

// Whether the products run on oneDNN's sgemm, widened (no bf16 gemm for this CPU: AVX2): then k
// and v are widened once a head (widen_head), not once for each block of query rows that reads
// them (a causal head of 256 keys in 4 blocks: 640 rows of k and of v widened instead of 256).
bool widened_heads(bool tiles) {
  return !tiles && !util::bf16_gemm_native() && util::fast_sgemm_available();
}

// Head h's S rows of t (rows t.ld apart, `width` wide) to float32 at dst, rows `width` apart.
void widen_head(const HeadRows& t, int64_t h, int64_t S, int64_t width, float* dst) {
  for (int64_t s = 0; s < S; ++s) vec::bf16_to_float(t.head(h) + s * t.ld, dst + s * width, width);
}

// Whether the products run on util::amx's tiles: the CPU has them, the products go to libtorch's
// mm rather than oneDNN's gemm (util::bf16_products_on_mm), and every block's sizes are multiples
// of 32 (the widths, the block's rows and its key end). Else oneDNN's gemm runs them.
bool use_tiles(const Shape& sh, const std::vector<int64_t>& ends) {
  if (!util::amx::available() || !util::bf16_products_on_mm()) return false;
  for (int64_t i = 0; i < sh.blocks(); ++i) {  // rows and key end by W (q k^T) and by H (P v)
    const int64_t rows = std::min(kBlock, sh.T - i * kBlock), se = ends[static_cast<size_t>(i)];
    if (!util::amx::fits(rows, se, sh.W) || !util::amx::fits(rows, se, sh.H)) return false;
  }
  return true;
}

// Runs f(h, scratch) for every flat head h, split among the threads.
template <class F>
void for_each_head(const Shape& sh, bool tiles, const F& f) {
  const int64_t floats = kBlock * sh.wide() + sh.S * (sh.W + sh.H + 1) +
                         (widened_heads(tiles) ? sh.S * (sh.W + sh.H) : 0),
                wide = std::max(sh.W, sh.H),
                halves = kBlock * sh.S +
                         (tiles ? 2 * (sh.S + 1) * wide + sh.S * kBlock + kBlock * wide : 0);
  at::parallel_for(0, sh.B * sh.N, 1, [&](int64_t h0, int64_t h1) {
    // Kept by each thread from call to call (no allocation and no page faults per call): O(S),
    // 0.6 KiB a key (1.2 KiB on the tiles).
    thread_local std::vector<float> fb;
    thread_local std::vector<uint16_t> hb;
    if (static_cast<int64_t>(fb.size()) < floats) fb.resize(static_cast<size_t>(floats));
    if (static_cast<int64_t>(hb.size()) < halves) hb.resize(static_cast<size_t>(halves));
    Scratch s{};
    s.out = fb.data();
    s.dk = s.out + kBlock * sh.wide();
    s.dv = s.dk + sh.S * sh.W;
    s.tmp = s.dv + sh.S * sh.H;
    s.kf = s.tmp + sh.S;
    s.vf = s.kf + sh.S * sh.W;
    s.ds = hb.data();
    s.b1 = s.ds + kBlock * sh.S;
    s.b2 = s.b1 + (sh.S + 1) * wide;  // S + 1: an odd S's last pair of rows padded
    s.at = s.b2 + (sh.S + 1) * wide;
    s.bp = s.at + sh.S * kBlock;
    for (int64_t h = h0; h < h1; ++h) f(h, s);
  });
}

// A block of query rows in the backward: its rows and key end, its probabilities' rows (S
// apart), its rows of dO and of q.
struct Block {
  int64_t rows, se;
  float scale;
  const uint16_t* p;
  const uint16_t* g;
  int64_t g_ld;
  const uint16_t* q;
  int64_t q_ld;
};

// dS = P (dP - rowsum(P dP)) scale (the gradient of q k^T) from dP in x.out, rounded to bf16
// into x.ds.
void scores_gradient(const Shape& sh, const Block& b, const Scratch& x) {
  for (int64_t i = 0; i < b.rows; ++i)
    vec::softmax_backward_from_p_bf16(b.p + i * sh.S, x.out + i * b.se, x.ds + i * b.se, b.se,
                                      b.scale);
}

// A block's backward on oneDNN's gemm: dq's rows into x.out [rows, W], dk and dv added to x.dk
// and x.dv; `widened`: with the head's k and v widened in x.kf and x.vf.
void gemm_block_backward(const Shape& sh, const Block& b, const HeadRows& kr, const HeadRows& vr,
                         int64_t h, const Scratch& x, bool widened) {
  if (widened)
    util::gemm_bf16_widened(false, true, b.rows, b.se, sh.H, b.g, b.g_ld, x.vf, sh.H, 0.0F, x.out,
                            b.se);  // dP = dO v^T
  else
    util::gemm_bf16(false, true, b.rows, b.se, sh.H, b.g, b.g_ld, vr.head(h), vr.ld, 0.0F, x.out,
                    b.se);
  scores_gradient(sh, b, x);
  util::gemm_bf16(true, false, b.se, sh.H, b.rows, b.p, sh.S, b.g, b.g_ld, 1.0F, x.dv,
                  sh.H);  // dv += P^T dO
  if (widened)
    util::gemm_bf16_widened(false, false, b.rows, sh.W, b.se, x.ds, b.se, x.kf, sh.W, 0.0F, x.out,
                            sh.W);  // dq = dS k
  else
    util::gemm_bf16(false, false, b.rows, sh.W, b.se, x.ds, b.se, kr.head(h), kr.ld, 0.0F, x.out,
                    sh.W);
  util::gemm_bf16(true, false, b.se, sh.W, b.rows, x.ds, b.se, b.q, b.q_ld, 1.0F, x.dk,
                  sh.W);  // dk += dS^T q
}

// The same on the tiles, with v^T's and k's pairs of rows in x.b1 and x.b2: the transposed
// operands P^T and dS^T as rows, dO's and q's rows in pairs.
void tile_block_backward(const Shape& sh, const Block& b, const Scratch& x) {
  util::amx::product(b.rows, b.se, sh.H, b.g, b.g_ld, x.b1, 2 * sh.S, x.out, b.se,
                     false);  // dP = dO v^T
  scores_gradient(sh, b, x);
  util::amx::transpose(b.p, sh.S, b.rows, b.se, x.at, b.rows);
  util::amx::pack_rows(b.g, b.g_ld, b.rows, sh.H, x.bp);
  util::amx::product(b.se, sh.H, b.rows, x.at, b.rows, x.bp, 2 * sh.H, x.dv, sh.H,
                     true);  // dv += P^T dO
  util::amx::product(b.rows, sh.W, b.se, x.ds, b.se, x.b2, 2 * sh.W, x.out, sh.W,
                     false);  // dq = dS k
  util::amx::transpose(x.ds, b.se, b.rows, b.se, x.at, b.rows);
  util::amx::pack_rows(b.q, b.q_ld, b.rows, sh.W, x.bp);
  util::amx::product(b.se, sh.W, b.rows, x.at, b.rows, x.bp, 2 * sh.W, x.dk, sh.W,
                     true);  // dk += dS^T q
}

// An empty gradient for t [B, N, L, W] in t's layout: [B, L, N, W] memory for the heads of a
// projection (whose split's backward is then a view, not a copy), else contiguous.
torch::Tensor grad_like(const torch::Tensor& t) {
  if (t.stride(1) >= t.stride(2)) return torch::empty(t.sizes(), t.options());
  return torch::empty({t.size(0), t.size(2), t.size(1), t.size(3)}, t.options()).transpose(1, 2);
}

// Whether q, k and v [B, N, L, *] are the heads of one [B, L, C] projection's adjacent column
// blocks, in that order (attention's fused q|k|v projection, split).
bool one_projection(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t C = q.stride(2), L = q.size(2);
  auto heads_of = [&](const torch::Tensor& t, int64_t offset) {
    return t.storage().is_alias_of(q.storage()) && t.size(2) == L && t.stride(2) == C &&
           t.stride(0) == L * C && t.stride(1) == t.size(3) && t.stride(3) == 1 &&
           t.storage_offset() == offset;
  };
  const int64_t wq = q.size(1) * q.size(3), wk = k.size(1) * k.size(3);
  return C == wq + wk + v.size(1) * v.size(3) && heads_of(q, q.storage_offset()) &&
         heads_of(k, q.storage_offset() + wq) && heads_of(v, q.storage_offset() + wq + wk);
}

// Empty gradients for q, k and v: where they are one projection's heads, views of one [B, L, C]
// tensor in the same layout (the split's backward then hands it on whole, no concatenation);
// else each in its own layout (grad_like).
std::array<torch::Tensor, 3> grads_like(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v) {
  if (!one_projection(q, k, v)) return {grad_like(q), grad_like(k), grad_like(v)};
  const int64_t B = q.size(0), L = q.size(2);
  auto all = torch::empty({B, L, q.stride(2)}, q.options());
  std::array<torch::Tensor, 3> g;
  int64_t at = 0;
  for (size_t i = 0; i < 3; ++i) {
    const auto& t = i == 0 ? q : i == 1 ? k : v;
    const int64_t n = t.size(1), w = t.size(3);
    g[i] = all.narrow(2, at, n * w).view({B, L, n, w}).transpose(1, 2);
    at += n * w;
  }
  return g;
}

struct Bf16Attention : public torch::autograd::Function<Bf16Attention> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& bias,
                               const torch::Tensor& mask, double scale_d) {
    RECORD_FUNCTION("ropelab::bf16_attention", std::vector<c10::IValue>());
    const auto scale = static_cast<float>(scale_d);
    const Shape sh(q, k, v);
    // The probabilities in bf16, as the backward reads them (P v's operand, as the unfused
    // form's): row t of head h at (h T + t) S; past a block's key end, never written nor read.
    auto probs = torch::empty({sh.B, sh.N, sh.T, sh.S}, q.options());
    // [B, N, T, H], laid out [B, T, N, H] (the heads' merge is then a view).
    auto out = torch::empty({sh.B, sh.T, sh.N, sh.H}, q.options()).transpose(1, 2);
    const BiasRows br(bias, sh.B, sh.N, sh.T, sh.S), mr(mask, sh.B, sh.N, sh.T, sh.S);
    const auto ends = key_ends(mr, sh);
    const std::vector<float> zeros(static_cast<size_t>(sh.S), 0.0F);
    const HeadRows qr(q), kr(k), vr(v), orows(out);
    uint16_t* p_all = util::bf16_bits(probs);
    const bool tiles = use_tiles(sh, ends), widened = widened_heads(tiles);
    for_each_head(sh, tiles, [&](int64_t h, const Scratch& x) {
      const int64_t b = h / sh.N, n = h % sh.N;
      if (tiles) {  // k^T and v in pairs of rows (util/amx.h)
        util::amx::pack_columns(kr.head(h), kr.ld, sh.S, sh.W, x.b1);
        util::amx::pack_rows(vr.head(h), vr.ld, sh.S, sh.H, x.b2);
      } else if (widened) {
        widen_head(kr, h, sh.S, sh.W, x.kf);
        widen_head(vr, h, sh.S, sh.H, x.vf);
      }
      for (int64_t t0 = 0; t0 < sh.T; t0 += kBlock) {
        const int64_t rows = std::min(kBlock, sh.T - t0), se = ends[t0 / kBlock];
        uint16_t* p = p_all + (h * sh.T + t0) * sh.S;
        const uint16_t* qh = qr.head(h) + t0 * qr.ld;
        // S = q k^T (scaled by the rows), in float32
        if (tiles)
          util::amx::product(rows, se, sh.W, qh, qr.ld, x.b1, 2 * sh.S, x.out, se, false);
        else if (widened)
          util::gemm_bf16_widened(false, true, rows, se, sh.W, qh, qr.ld, x.kf, sh.W, 0.0F, x.out,
                                  se);
        else
          util::gemm_bf16(false, true, rows, se, sh.W, qh, qr.ld, kr.head(h), kr.ld, 0.0F, x.out,
                          se);
        for (int64_t i = 0; i < rows; ++i) {  // P = softmax(bf16(S) scale + bias + mask)
          const int64_t t = t0 + i;
          float max = 0, inv = 0;
          vec::softmax_row_bf16(x.out + i * se, br.row(b, n, t, zeros.data()),
                                mr.row(b, n, t, zeros.data()), p + i * sh.S, se, x.tmp, &max, &inv,
                                scale);
        }
        // O = P v
        if (tiles)
          util::amx::product(rows, sh.H, se, p, sh.S, x.b2, 2 * sh.H, x.out, sh.H, false);
        else if (widened)
          util::gemm_bf16_widened(false, false, rows, sh.H, se, p, sh.S, x.vf, sh.H, 0.0F, x.out,
                                  sh.H);
        else
          util::gemm_bf16(false, false, rows, sh.H, se, p, sh.S, vr.head(h), vr.ld, 0.0F, x.out,
                          sh.H);
        store_rows(x.out, sh.H, orows.head(h) + t0 * orows.ld, orows.ld, rows, sh.H);
      }
    });
    ctx->save_for_backward({q, k, v, probs});
    ctx->saved_data["scale"] = scale_d;
    ctx->saved_data["ends"] = ends;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    RECORD_FUNCTION("ropelab::bf16_attention_backward", std::vector<c10::IValue>());
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2];
    const Shape sh(q, k, v);
    // dO as it comes (the heads' split of the next layer's gradient: [B, T, N, H] memory).
    auto go = grad_out[0].to(torch::kBFloat16);
    if (go.stride(3) != 1) go = go.contiguous();
    auto [dq, dk, dv] = grads_like(q, k, v);
    const uint16_t* p_all = util::bf16_bits(saved[3]);
    const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    const auto ends = ctx->saved_data["ends"].toIntVector();
    const HeadRows qr(q), kr(k), vr(v), gr(go), dqr(dq), dkr(dk), dvr(dv);
    const bool tiles = use_tiles(sh, ends), widened = widened_heads(tiles);
    for_each_head(sh, tiles, [&](int64_t h, const Scratch& x) {
      std::fill(x.dk, x.dk + sh.S * (sh.W + sh.H), 0.0F);  // dk's and dv's sums over the blocks
      if (tiles) {  // v^T and k in pairs of rows (util/amx.h)
        util::amx::pack_columns(vr.head(h), vr.ld, sh.S, sh.H, x.b1);
        util::amx::pack_rows(kr.head(h), kr.ld, sh.S, sh.W, x.b2);
      } else if (widened) {
        widen_head(kr, h, sh.S, sh.W, x.kf);
        widen_head(vr, h, sh.S, sh.H, x.vf);
      }
      for (int64_t t0 = 0; t0 < sh.T; t0 += kBlock) {
        const int64_t rows = std::min(kBlock, sh.T - t0), se = ends[t0 / kBlock];
        const uint16_t *p = p_all + (h * sh.T + t0) * sh.S, *g = gr.head(h) + t0 * gr.ld;
        const uint16_t* qh = qr.head(h) + t0 * qr.ld;
        const Block blk{rows, se, scale, p, g, gr.ld, qh, qr.ld};
        if (tiles)
          tile_block_backward(sh, blk, x);
        else
          gemm_block_backward(sh, blk, kr, vr, h, x, widened);
        store_rows(x.out, sh.W, dqr.head(h) + t0 * dqr.ld, dqr.ld, rows, sh.W);
      }
      store_rows(x.dk, sh.W, dkr.head(h), dkr.ld, sh.S, sh.W);
      store_rows(x.dv, sh.H, dvr.head(h), dvr.ld, sh.S, sh.H);
    });
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// split_columns (bf16_attention.h).
struct SplitColumns : public torch::autograd::Function<SplitColumns> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x,
                               const std::vector<int64_t>& sizes) {
    ctx->saved_data["sizes"] = sizes;
    ctx->saved_data["shape"] = x.sizes().vec();
    auto parts = x.split_with_sizes(sizes, -1);
    return {parts.begin(), parts.end()};
  }

  static variable_list backward(AutogradContext* ctx, variable_list g) {
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const auto shape = ctx->saved_data["shape"].toIntVector();
    auto whole = adjacent_whole(g, sizes, shape);
    if (whole.defined()) return {whole, torch::Tensor()};
    const torch::Tensor* any = nullptr;
    for (const auto& t : g)
      if (t.defined()) any = &t;
    if (any == nullptr) return {torch::Tensor(), torch::Tensor()};
    for (size_t i = 0; i < g.size(); ++i) {
      if (g[i].defined()) continue;
      auto part = shape;
      part.back() = sizes[i];
      g[i] = torch::zeros(part, any->options());
    }
    return {torch::cat(g, -1), torch::Tensor()};
  }

  // The tensor of `shape` (contiguous) whose column blocks the gradients g are, or undefined.
  static torch::Tensor adjacent_whole(const variable_list& g, const std::vector<int64_t>& sizes,
                                      const std::vector<int64_t>& shape) {
    const auto dims = static_cast<int64_t>(shape.size());
    std::vector<int64_t> strides(shape.size(), 1);
    for (int64_t d = dims - 2; d >= 0; --d)
      strides[static_cast<size_t>(d)] =
          strides[static_cast<size_t>(d + 1)] * shape[static_cast<size_t>(d + 1)];
    int64_t at = g.empty() || !g[0].defined() ? 0 : g[0].storage_offset();
    for (size_t i = 0; i < g.size(); ++i) {
      auto part = shape;
      part.back() = sizes[i];
      const auto& t = g[i];
      if (!t.defined() || t.sizes().vec() != part || t.strides().vec() != strides ||
          !t.storage().is_alias_of(g[0].storage()) || t.storage_offset() != at ||
          t.scalar_type() != g[0].scalar_type())
        return {};
      at += sizes[i];
    }
    return g[0].as_strided(shape, strides, g[0].storage_offset());
  }
};

// ROPELAB_BF16_ATTENTION=off: the unfused form everywhere (to compare the two).
bool turned_off() {
  const char* v = std::getenv("ROPELAB_BF16_ATTENTION");
  return v != nullptr && std::strcmp(v, "off") == 0;
}

bool no_grad_float(const torch::Tensor& t) {
  return !t.defined() ||
         (t.device().is_cpu() && !t.requires_grad() &&
          (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16));
}

}  // namespace

std::vector<torch::Tensor> split_columns(const torch::Tensor& x,
                                         const std::vector<int64_t>& sizes) {
  return SplitColumns::apply(x, sizes);
}

bool uses_bf16_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         const torch::Tensor& bias, const torch::Tensor& mask) {
  auto bf16_cpu = [](const torch::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kBFloat16 && t.dim() == 4 &&
           t.stride(3) == 1;
  };
  return !turned_off() && util::bf16_nodes_pay() && util::bf16_gemm_available() && bf16_cpu(q) &&
         bf16_cpu(k) && bf16_cpu(v) && k.size(0) == q.size(0) && v.size(0) == q.size(0) &&
         k.size(1) == q.size(1) && v.size(1) == q.size(1) && k.size(3) == q.size(3) &&
         v.size(2) == k.size(2) && q.size(2) > 1 && q.numel() > 0 && k.numel() > 0 &&
         no_grad_float(bias) && no_grad_float(mask);
}

torch::Tensor bf16_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& bias, const torch::Tensor& mask, double scale) {
  // A custom autograd function takes no undefined tensor: an empty one stands for "none".
  auto none = torch::empty({0}, q.options().dtype(torch::kFloat32));
  return Bf16Attention::apply(q, k, v, bias.defined() ? bias : none, mask.defined() ? mask : none,
                              scale);
}

}  // namespace ropelab::model
