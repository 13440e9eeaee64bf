#!/usr/bin/python3
"""Independent PyTorch reference for ropelab's golden tests.

Written from the papers (Vaswani et al. 2017; Devlin et al. 2019; Su et al. 2021 - RoFormer
Eq. 14-16 and 19; Raffel et al. 2020; Press et al. 2022; Sun et al. 2023; Katharopoulos et al.
2020; Choromanski et al. 2021; Chen et al. 2023 (position interpolation); Peng et al. 2023
(YaRN); Ding et al. 2024 (LongRoPE); Barbero et al. 2024 (p-RoPE); Kazemnejad et al. 2023
(NoPE); Li et al. 2024 (FIRE); Chi et al. 2022 (KERPLE); Lin et al. 2025 (FoX); Golovneva et al.
2024 (CoPE); Gopalakrishnan et al. 2025 (PoPE); Ostmeier et al. 2024 and Yu et al. 2025
(LieRE, ComRoPE); Yang et al. 2025 (PaTH);
Wang et al. 2024 and Heo et al. 2024 (M-RoPE, axial 2-D RoPE)), not from the C++ code: it shares only
the parameter names, so the C++ test can load the same weights. Each file records its position
block as JSON (attribute position_config), which the C++ test loads through the config reader.

For every architecture x position module x attention kernel it builds a tiny model with fixed
weights, runs a fixed input, and writes weights, input, logits and the gradients of a fixed
scalar loss to tests/data/golden/<case>.h5. Regenerate with:

    /usr/bin/python3 scripts/golden/reference.py tests/data/golden
"""
import json
import math
import os
import sys
import zlib

import h5py
import torch
import torch.nn.functional as F

D, N, L, FF, V = 16, 2, 2, 32, 23
H = D // N
B, T, S = 2, 7, 6
NUM_FEATURES = 8
LEARNED_MAX_LEN = 16
FIRE_W = 8  # FIRE's MLP width in the golden cases
COPE_NPOS = 4  # CoPE's position table in the golden cases: counts above 3 are clamped
COMROPE_BLOCK = 4  # ComRoPE's generator blocks: two per 8-wide head


# ----------------------------------------------------------------------------- positions

def sinusoidal_table(n, d, base=10000.0):
    pe = torch.zeros(n, d, dtype=torch.float64)
    for pos in range(n):
        for i in range(0, d, 2):
            angle = pos / base ** (i / d)
            pe[pos, i] = math.sin(angle)
            if i + 1 < d:
                pe[pos, i + 1] = math.cos(angle)
    return pe.float()


def rope_theta(d, base=10000.0):
    return base ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)


def scaled_theta(d, scaling, length, base=10000.0):
    """Per-pair frequencies and the q/k factor of a context-extension method (float64)."""
    kind = scaling.get("type", "none")
    theta = rope_theta(d, base)
    if kind == "none":
        return theta, 1.0
    s = scaling.get("factor", 1.0)
    L0 = scaling.get("original_len", 0)
    if kind == "linear":  # Chen et al. 2023: positions / s, i.e. theta / s
        return theta / s, 1.0
    if kind == "ntk":
        return rope_theta(d, base * s ** (d / (d - 2))), 1.0
    if kind == "dynamic":  # base grows with the current length beyond L0
        if length <= L0:
            return theta, 1.0
        return rope_theta(d, base * (s * length / L0 - (s - 1)) ** (d / (d - 2))), 1.0
    if kind == "yarn":
        # Peng et al. 2023, Sec. 3.2: r = L0 / wavelength = turns of a pair over L0. Pairs
        # turning more than beta (32) times keep theta, fewer than alpha (1) times get theta / s,
        # linear in between; as in the paper's code, the ramp runs over pair indices whose ends
        # (where r = beta, r = alpha) are rounded outwards.
        def index_of(turns):  # the (fractional) pair index where r == turns
            return d * math.log(L0 / (turns * 2 * math.pi)) / (2 * math.log(base))
        lo = max(math.floor(index_of(scaling.get("beta_fast", 32.0))), 0)
        hi = min(math.ceil(index_of(scaling.get("beta_slow", 1.0))), d - 1)
        if hi == lo:
            hi += 0.001
        out = theta.clone()
        for i in range(d // 2):
            ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
            keep = 1.0 - ramp  # gamma: 1 extrapolate (keep), 0 interpolate
            out[i] = keep * theta[i] + (1 - keep) * theta[i] / s
        af = scaling.get("attention_factor", 0.0) or 0.1 * math.log(s) + 1.0
        return out, af
    if kind == "llama3":
        lo_f, hi_f = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
        out = theta.clone()
        for i in range(d // 2):
            wavelength = 2 * math.pi / theta[i].item()
            if wavelength < L0 / hi_f:
                continue
            if wavelength > L0 / lo_f:
                out[i] = theta[i] / s
            else:
                a = (L0 / wavelength - lo_f) / (hi_f - lo_f)
                out[i] = (1 - a) * theta[i] / s + a * theta[i]
        return out, 1.0
    if kind == "longrope":
        f = scaling["long_factor"] if length > L0 else scaling["short_factor"]
        af = scaling.get("attention_factor", 0.0) or (
            math.sqrt(1 + math.log(s) / math.log(L0)) if s > 1 else 1.0)
        return theta / torch.tensor(f, dtype=torch.float64), af
    raise ValueError(kind)


def rope_rotate(x, pos, pairing, theta=None, factor=1.0, xpos_scale=None, is_query=True):
    """Rotates the last dim of x ([..., T, d]) at integer positions pos ([T])."""
    d = x.shape[-1]
    if theta is None:
        theta = rope_theta(d)
    ang = pos.double()[:, None] * theta[None, :]
    cos, sin = ang.cos().float(), ang.sin().float()
    if pairing == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
    y1 = x1 * cos - x2 * sin
    y2 = x1 * sin + x2 * cos
    if pairing == "interleaved":
        y = torch.stack([y1, y2], dim=-1).reshape(x.shape)
    else:
        y = torch.cat([y1, y2], dim=-1)
    if xpos_scale is not None:
        zeta = (torch.arange(0, d, 2, dtype=torch.float32) / d + 0.4) / 1.4
        power = pos.float()[:, None] / xpos_scale
        s = zeta[None, :] ** (power if is_query else -power)
        s = s.repeat_interleave(2, dim=-1) if pairing == "interleaved" else torch.cat([s, s], -1)
        y = y * s
    return y * factor


def rope_for(cfg, x, pos, length):
    """RoPE of a position config (dict): scaling, then p-RoPE's zeroed slow pairs."""
    d = x.shape[-1]
    theta, factor = scaled_theta(d, cfg.get("scaling", {}), length, cfg.get("base", 10000.0))
    keep = round(cfg.get("fraction", 1.0) * (d // 2))
    theta = theta.clone()
    theta[keep:] = 0.0  # p-RoPE: the slowest pairs do not rotate
    return rope_rotate(x, pos, cfg.get("pairing", "interleaved"), theta, factor)


def fire_bias(p, prefix, threshold, qpos, kpos):
    """FIRE (Li et al. 2024, Eq. 3-4): f(psi(i-j) / psi(max(L, i))), psi(x) = log(|c x| + 1)."""
    c = p[prefix + ".c"]
    L = (p[prefix + ".threshold_scale"] * threshold).abs()
    q, k = qpos.float(), kpos.float()
    psi = lambda x: torch.log(torch.abs(c * x) + 1)
    norm = psi(torch.maximum(q, L)) + 1e-6
    x = psi(q[:, None] - k[None, :]) / norm[:, None]
    h = torch.relu(x[..., None] @ p[prefix + ".fc1.weight"].t() + p[prefix + ".fc1.bias"])
    out = h @ p[prefix + ".fc2.weight"].t() + p[prefix + ".fc2.bias"]  # [T, S, N]
    return out.permute(2, 0, 1)[None]


def kerple_bias(p, prefix, kernel, qpos, kpos):
    """KERPLE (Chi et al. 2022, Eq. 7): -r1 log(1 + r2 |m-n|) or -r1 |m-n|^r2."""
    r1 = p[prefix + ".r1"].clamp(min=0.01)[:, None, None]
    r2 = p[prefix + ".r2"]
    r2 = (r2.clamp(min=0.01) if kernel == "log" else r2.clamp(0.01, 2.0))[:, None, None]
    dist = (qpos[:, None] - kpos[None, :]).abs().float()[None]
    b = -r1 * torch.log(1 + r2 * dist) if kernel == "log" else -r1 * dist ** r2
    return b[None]


def t5_bucket(rel, bidirectional, num_buckets=32, max_distance=128):
    out = 0
    if bidirectional:
        num_buckets //= 2
        out = num_buckets if rel > 0 else 0
        n = abs(rel)
    else:
        n = max(-rel, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return out + n
    val = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact)
                          * (num_buckets - max_exact))
    return out + min(val, num_buckets - 1)


def alibi_slopes(n):
    def pow2(k):
        start = 2 ** (-8 / k)
        return [start ** (i + 1) for i in range(k)]
    if math.log2(n).is_integer():
        return pow2(n)
    closest = 2 ** int(math.floor(math.log2(n)))
    return pow2(closest) + pow2(2 * closest)[0::2][: n - closest]


def fox_bias(p, prefix, x):
    """FoX (Lin et al. 2025): log F_ij = sum_{l=j+1..i} log sigmoid(w . x_l + b), per head."""
    log_f = F.logsigmoid(x @ p[prefix + ".weight"].t() + p[prefix + ".bias"])  # [B, T, N]
    tq = x.shape[1]
    # sum over l in (j, i]: a [T, T] matrix of which steps lie between key j and query i
    between = torch.tensor([[1.0 if j < l <= i else 0.0 for l in range(tq)] for i in range(tq)
                            for j in range(tq)]).reshape(tq, tq, tq)
    out = torch.einsum("ijl,bln->bnij", between, log_f)
    # for j > i the sum is empty (0); the causal mask removes those entries anyway
    return out


def cope_bias(q, scores, e, npos):
    """CoPE (Golovneva et al. 2024): p_ij = sum_{t=j..i} sigmoid(s_it), interpolated q . e[p]."""
    g = torch.sigmoid(scores)  # masked scores are -inf: gate 0
    tk = scores.shape[-1]
    upto = torch.tensor([[1.0 if j <= t else 0.0 for j in range(tk)] for t in range(tk)])
    pos = (g @ upto).clamp(max=npos - 1)  # p_ij = sum_t g_it [t >= j]
    z = q @ e  # [B, N, T, npos]
    lo, hi = pos.floor(), pos.ceil()
    w = pos - lo
    return z.gather(-1, hi.long()) * w + z.gather(-1, lo.long()) * (1 - w)


def pope_scores(q, k, qpos, kpos, phase, base=10000.0):
    """PoPE (Gopalakrishnan et al. 2025) with complex numbers: Re sum_c q~_c conj(k~_c)."""
    d = q.shape[-1]
    theta = base ** (-torch.arange(d, dtype=torch.float64) / d)
    qa = (qpos.double()[:, None] * theta[None]).float()
    ka = (kpos.double()[:, None] * theta[None]).float()[None] + phase.clamp(-2 * math.pi, 0)[:, None]
    qc = torch.polar(F.softplus(q), qa.expand_as(q))
    kc = torch.polar(F.softplus(k), ka.expand_as(k))
    return (qc @ kc.conj().transpose(-1, -2)).real / math.sqrt(d)


def mrope_rotate(x, pos, grid_width, sections):
    """M-RoPE / axial 2-D RoPE: pair i turns by (row or column of pos) * theta_i."""
    d = x.shape[-1]
    theta = rope_theta(d)
    ang = torch.zeros(len(pos), d // 2, dtype=torch.float64)
    for t, p in enumerate(pos.tolist()):
        row, col = (p // grid_width, p % grid_width) if grid_width > 0 else (p, p)
        for i in range(d // 2):
            on_col = (i % 2 == 1) if sections == "interleaved" else (i >= (d // 2) // 2)
            ang[t, i] = (col if on_col else row) * theta[i]
    cos, sin = ang.cos().float(), ang.sin().float()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).reshape(x.shape)


def comrope_rotate(x, pos, p_gen):
    """LieRE / ComRoPE: x_m -> exp(m A) x_m, A = P - P^T block-diagonal per head (float64,
    torch's Pade matrix_exp of m A at each position; ropelab raises a Taylor exp(A) to the
    power m instead)."""
    a = (p_gen - p_gen.transpose(-1, -2)).double()  # [N, K, b, b]
    nh, nk, b, _ = a.shape
    out = torch.empty(x.shape[:-1] + (nk, b), dtype=torch.float64)
    xb = x.double().reshape(x.shape[:-1] + (nk, b))
    for t, m in enumerate(pos.tolist()):
        r = torch.linalg.matrix_exp(m * a)  # [N, K, b, b]
        out[:, :, t] = torch.einsum("nkij,bnkj->bnki", r, xb[:, :, t])
    return out.reshape(x.shape).float()


def path_scores(p, prefix, layer, x, q, k):
    """PaTH (Yang et al. 2025): q_i^T (H_i ... H_{j+1}) k_j / sqrt(d), H_t = I - beta_t w_t w_t^T,
    with every product formed as a d x d matrix (float64)."""
    b, t = x.shape[0], x.shape[1]
    w = (x @ p[f"{prefix}.w_proj.{layer}.weight"].t() + p[f"{prefix}.w_proj.{layer}.bias"])
    w = w.view(b, t, N, H).transpose(1, 2).double()
    w = w / w.norm(dim=-1, keepdim=True).clamp(min=1e-6)
    beta = 2 * torch.sigmoid(x @ p[f"{prefix}.beta_proj.{layer}.weight"].t()
                             + p[f"{prefix}.beta_proj.{layer}.bias"]).transpose(1, 2).double()
    eye = torch.eye(H, dtype=torch.float64)
    hh = eye - beta[..., None, None] * w[..., :, None] * w[..., None, :]  # [B, N, T, H, H]
    rows = []
    for i in range(t):
        cols = []
        for j in range(t):
            m = eye.expand(b, N, H, H)
            for s in range(j + 1, i + 1):  # H_i ... H_{j+1}: the nearest to the key first
                m = hh[:, :, s] @ m
            cols.append(torch.einsum("bnh,bnhk,bnk->bn", q[:, :, i].double(), m, k[:, :, j].double()))
        rows.append(torch.stack(cols, -1))
    return (torch.stack(rows, 2) / math.sqrt(H)).float()


# ----------------------------------------------------------------------------- model

class Ref:
    def __init__(self, case, params):
        self.c = case
        self.p = params

    def lin(self, name, x):
        return x @ self.p[name + ".weight"].t() + self.p[name + ".bias"]

    def ln(self, name, x):
        return F.layer_norm(x, (D,), self.p[name + ".weight"], self.p[name + ".bias"], eps=1e-5)

    def phi(self, prefix, x, is_query):
        if self.c["feature_map"] == "elu":
            return F.elu(x) + 1
        w = self.p[prefix + ".favor_proj"]
        xs = x / H ** 0.25
        logits = xs @ w.t() - (xs * xs).sum(-1, keepdim=True) / 2
        stab = logits.max(-1, keepdim=True).values if is_query else logits.max()
        return torch.exp(logits - stab.detach()) / math.sqrt(w.shape[0]) + 1e-6

    def attention(self, prefix, x, kv, pos_kind, stack, causal, key_pad, kind=None):
        """kind: a layout kind's {position, window, chunk, temperature, prefix} (None: no layout)."""
        kind = kind or {}
        sw = self.c.get("switches", {})
        q = self.lin(prefix + ".q_proj", x).view(x.shape[0], -1, N, H).transpose(1, 2)
        k = self.lin(prefix + ".k_proj", kv).view(kv.shape[0], -1, N, H).transpose(1, 2)
        v = self.lin(prefix + ".v_proj", kv).view(kv.shape[0], -1, N, H).transpose(1, 2)
        if sw.get("qk_norm"):  # Qwen3 / OLMo 2: RMSNorm over each head, before the rotation
            def rms(t, w):
                return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * w
            q, k = rms(q, self.p[prefix + ".q_norm.weight"]), rms(k, self.p[prefix + ".k_norm.weight"])
        tq, tk = q.shape[2], k.shape[2]
        qpos, kpos = torch.arange(tq), torch.arange(tk)
        allowed = torch.ones(tq, tk, dtype=torch.bool)
        if causal:
            allowed = kpos[None, :] <= qpos[:, None]
        if kind.get("window"):
            allowed = allowed & ((qpos[:, None] - kpos[None, :]).abs() < kind["window"])
        if kind.get("chunk"):
            allowed = allowed & (qpos[:, None] // kind["chunk"] == kpos[None, :] // kind["chunk"])
        visible = allowed.sum(-1)  # keys each query may see (SSMax's n), padding aside
        allowed = allowed[None, None]
        if key_pad is not None:
            allowed = allowed & key_pad[:, None, None, :]

        cfg = kind.get("position", self.c["position_config"])
        pp = kind.get("prefix", stack + ".position")  # the position module's parameters

        def rot(t, pos, is_query):
            if pos_kind == "mrope":
                return mrope_rotate(t, pos, cfg["grid_width"], cfg.get("sections", "interleaved"))
            if pos_kind == "comrope":
                return comrope_rotate(t, pos, self.p[pp + ".generators"])
            if pos_kind == "fox" and cfg.get("rope", False):
                return rope_rotate(t, pos, "interleaved")
            if pos_kind == "rope":
                return rope_for(cfg, t, pos, tk)
            if pos_kind == "xpos":
                return rope_rotate(t, pos, "interleaved", xpos_scale=512.0, is_query=is_query)
            return t

        if self.c["kernel"] == "softmax":
            q, k = rot(q, qpos, True), rot(k, kpos, False)
            temp = kind.get("temperature", {})
            if temp.get("scale", 0) > 0:  # Llama 4: 1 + scale log(floor((p + 1) / floor) + 1)
                f = 1 + temp["scale"] * torch.log(torch.floor((qpos + 1) / temp["floor"]) + 1)
                q = q * f[None, None, :, None]
            if sw.get("ssmax"):  # Scalable-Softmax: q * s log n
                s_n = self.p[prefix + ".ssmax"]
                q = q * s_n[None, :, None, None] * torch.log(visible.float())[None, None, :, None]
            scores = q @ k.transpose(-1, -2) / math.sqrt(H)
            layer = str(kind["index"]) if kind else prefix.split(".")[2]
            if pos_kind == "pope":
                scores = pope_scores(q, k, qpos, kpos, self.p[pp + ".phase"])
            if pos_kind == "path":
                scores = path_scores(self.p, pp, layer, x, q, k)
            if pos_kind == "fox":
                scores = scores + fox_bias(self.p, f"{pp}.gates.{layer}", x)
            if pos_kind == "cope":
                masked = scores.masked_fill(~allowed, float("-inf"))
                e = self.p[f"{pp}.embeddings_{layer}"]
                scores = scores + cope_bias(q, masked, e, cfg["npos_max"])
            if pos_kind == "t5":
                table = self.p[pp + ".table"]
                buckets = torch.tensor([[t5_bucket(int(kk - qq), not causal) for kk in kpos] for qq in qpos])
                scores = scores + table[buckets].permute(2, 0, 1)[None]
            if pos_kind == "fire":
                scores = scores + fire_bias(self.p, pp, cfg["threshold"], qpos, kpos)
            if pos_kind == "kerple":
                scores = scores + kerple_bias(self.p, pp, cfg["kernel"], qpos, kpos)
            if pos_kind == "alibi":
                slopes = torch.tensor(alibi_slopes(N))
                dist = (qpos[:, None] - kpos[None, :]).abs().float()
                scores = scores - slopes[:, None, None] * dist[None]
            scores = scores.masked_fill(~allowed, float("-inf"))
            if sw.get("sinks"):  # GPT-OSS: one more logit per head in each row, with no value
                sink = self.p[prefix + ".sinks"][None, :, None, None].expand(*scores.shape[:3], 1)
                out = torch.softmax(torch.cat([scores, sink], -1), -1)[..., :-1] @ v
            else:
                out = torch.softmax(scores, -1) @ v
        else:
            a = allowed.float()
            if self.c["rope_mode"] == "before_phi":
                qn = qd = self.phi(prefix, rot(q, qpos, True), True)
                kn = kd = self.phi(prefix, rot(k, kpos, False), False)
            else:  # RoFormer Eq. 19
                qd, kd = self.phi(prefix, q, True), self.phi(prefix, k, False)
                qn, kn = rot(qd, qpos, True), rot(kd, kpos, False)
            num = ((qn @ kn.transpose(-1, -2)) * a) @ v
            den = ((qd @ kd.transpose(-1, -2)) * a).sum(-1, keepdim=True)
            out = num / (den + 1e-6)
        out = out.transpose(1, 2).reshape(x.shape[0], tq, D)
        return self.lin(prefix + ".o_proj", out)

    def stack(self, name, x, causal, key_pad, memory=None, mem_pad=None):
        c = self.c
        pos = c["position"]
        if pos == "sinusoidal":
            x = x + sinusoidal_table(x.shape[1], D)
        if pos == "learned":
            x = x + self.p[name + ".position.weight"][: x.shape[1]]
        pre = c["norm"] == "pre"
        if not pre and name + ".emb_norm.weight" in self.p:
            x = self.ln(name + ".emb_norm", x)
        act = F.gelu if c["activation"] == "gelu" else F.relu
        for i in range(L):
            p = f"{name}.layers.{i}"

            def res(x, norm, fn):
                return x + fn(self.ln(norm, x)) if pre else self.ln(norm, x + fn(x))

            kind = layer_kind(c, name, i)
            cfg = kind["position"] if kind else c["position_config"]
            ptype = cfg["type"]
            nope = (cfg.get("nope_every", 0) > 0 and (i + 1) % cfg["nope_every"] == 0) or \
                i in cfg.get("nope_layers", [])
            pk = "none" if ptype == "rope" and nope else ptype
            x = res(x, p + ".norm1", lambda h: self.attention(p + ".self_attn", h, h, pk, name, causal, key_pad,
                                                              kind))
            if memory is not None:
                saved = dict(self.c)
                self.c = dict(saved, kernel="softmax")  # cross-attention: softmax, no positions
                x = res(x, p + ".norm3", lambda h: self.attention(p + ".cross_attn", h, memory, "none", name,
                                                                  False, mem_pad))
                self.c = saved
            x = res(x, p + ".norm2", lambda h: self.lin(p + ".fc2", act(self.lin(p + ".fc1", h))))
        if pre:
            x = self.ln(name + ".final_norm", x)
        return x

    def embed(self, tokens, segments=False):
        x = self.p["tok_emb.weight"][tokens]
        if self.c["scale_embeddings"]:
            x = x * math.sqrt(D)
        if segments:
            x = x + self.p["seg_emb.weight"][torch.zeros_like(tokens)]
        return x

    def forward(self, tokens, pad, src, src_pad):
        arch = self.c["arch"]
        e = self.p["tok_emb.weight"]
        if arch == "decoder":
            h = self.stack("decoder", self.embed(tokens), True, None)
            return h @ e.t()
        if arch == "encoder":
            h = self.stack("encoder", self.embed(tokens, segments=True), False, pad)
            x = self.ln("mlm_norm", F.gelu(self.lin("mlm_dense", h)))
            return x @ e.t() + self.p["mlm_bias"]
        mem = self.stack("encoder", self.embed(src), False, src_pad)
        h = self.stack("decoder", self.embed(tokens), True, None, memory=mem, mem_pad=src_pad)
        return h @ e.t()


def layer_kind(case, stack, i):
    """Layer i's kind under the case's layout: its position block, span, temperature and the
    name of its position module's parameters; None without a layout."""
    layout = case.get("layout")
    if not layout:
        return None
    pattern = layout["pattern"]
    name = pattern[i % len(pattern)]
    kind = dict(layout["kinds"][name])
    kind.setdefault("position", case["position_config"])
    distinct = len(set(pattern[j % len(pattern)] for j in range(L)))
    kind["prefix"] = f"{stack}.position" + ("" if distinct == 1 else "_" + name)
    # per-layer parameters are numbered among the kind's layers
    kind["index"] = sum(1 for j in range(i) if pattern[j % len(pattern)] == name)
    kind["layers"] = sum(1 for j in range(L) if pattern[j % len(pattern)] == name)
    return kind


# ----------------------------------------------------------------------------- parameters

def position_shapes(pos, cfg, prefix, layers, shapes):
    """The parameters of one position module named `prefix`, serving `layers` layers."""
    s = prefix
    if pos == "learned":
        shapes[f"{s}.weight"] = (LEARNED_MAX_LEN, D)
    if pos == "t5":
        shapes[f"{s}.table"] = (32, N)
    if pos == "fire":
        shapes[f"{s}.fc1.weight"], shapes[f"{s}.fc1.bias"] = (FIRE_W, 1), (FIRE_W,)
        shapes[f"{s}.fc2.weight"], shapes[f"{s}.fc2.bias"] = (N, FIRE_W), (N,)
        shapes[f"{s}.c"], shapes[f"{s}.threshold_scale"] = (), ()
    if pos == "kerple":
        shapes[f"{s}.r1"], shapes[f"{s}.r2"] = (N,), (N,)
    if pos == "pope":
        shapes[f"{s}.phase"] = (N, H)
    if pos == "comrope":
        shapes[f"{s}.generators"] = (N, H // COMROPE_BLOCK, COMROPE_BLOCK, COMROPE_BLOCK)
    for i in range(layers):
        if pos == "path":
            shapes[f"{s}.w_proj.{i}.weight"] = (N * H, D)
            shapes[f"{s}.w_proj.{i}.bias"] = (N * H,)
            shapes[f"{s}.beta_proj.{i}.weight"] = (N, D)
            shapes[f"{s}.beta_proj.{i}.bias"] = (N,)
        if pos == "fox":
            shapes[f"{s}.gates.{i}.weight"] = (N, D)
            shapes[f"{s}.gates.{i}.bias"] = (N,)
        if pos == "cope":
            shapes[f"{s}.embeddings_{i}"] = (H, COPE_NPOS)


def param_shapes(case):
    arch = case["arch"]
    shapes = {"tok_emb.weight": (V, D)}
    stacks = {"decoder": ["decoder"], "encoder": ["encoder"], "encdec": ["encoder", "decoder"]}[arch]
    sw = case.get("switches", {})
    for s in stacks:
        modules = {}
        for i in range(L):
            kind = layer_kind(case, s, i)
            cfg = kind["position"] if kind else case["position_config"]
            modules[kind["prefix"] if kind else f"{s}.position"] = (cfg, kind["layers"] if kind else L)
        for prefix, (cfg, layers) in modules.items():
            position_shapes(cfg["type"], cfg, prefix, layers, shapes)
        for i in range(L):
            p = f"{s}.layers.{i}"
            attns = ["self_attn"] + (["cross_attn"] if (arch == "encdec" and s == "decoder") else [])
            for a in attns:
                for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                    shapes[f"{p}.{a}.{proj}.weight"] = (D, D)
                    shapes[f"{p}.{a}.{proj}.bias"] = (D,)
                if sw.get("qk_norm"):
                    shapes[f"{p}.{a}.q_norm.weight"], shapes[f"{p}.{a}.k_norm.weight"] = (H,), (H,)
                if sw.get("sinks"):
                    shapes[f"{p}.{a}.sinks"] = (N,)
                if sw.get("ssmax"):
                    shapes[f"{p}.{a}.ssmax"] = (N,)
            norms = ["norm1", "norm2"] + (["norm3"] if len(attns) == 2 else [])
            for nm in norms:
                shapes[f"{p}.{nm}.weight"] = (D,)
                shapes[f"{p}.{nm}.bias"] = (D,)
            shapes[f"{p}.fc1.weight"], shapes[f"{p}.fc1.bias"] = (FF, D), (FF,)
            shapes[f"{p}.fc2.weight"], shapes[f"{p}.fc2.bias"] = (D, FF), (D,)
        if case["norm"] == "pre":
            shapes[f"{s}.final_norm.weight"], shapes[f"{s}.final_norm.bias"] = (D,), (D,)
        elif arch == "encoder":
            shapes[f"{s}.emb_norm.weight"], shapes[f"{s}.emb_norm.bias"] = (D,), (D,)
    if arch == "encoder":
        shapes["seg_emb.weight"] = (2, D)
        shapes["mlm_dense.weight"], shapes["mlm_dense.bias"] = (D, D), (D,)
        shapes["mlm_norm.weight"], shapes["mlm_norm.bias"] = (D,), (D,)
        shapes["mlm_bias"] = (V,)
    return shapes


def buffer_shapes(case):
    out = {}
    if case["kernel"] == "linear" and case["feature_map"] == "favor":
        stacks = {"decoder": ["decoder"], "encoder": ["encoder"], "encdec": ["encoder", "decoder"]}[case["arch"]]
        for s in stacks:
            for i in range(L):
                out[f"{s}.layers.{i}.self_attn.favor_proj"] = (NUM_FEATURES, H)
    return out


# Parameters whose arbitrary fixed values would sit outside their meaningful range.
PINNED = {"position.c": [0.5], "position.threshold_scale": [1.0], "self_attn.ssmax": [0.6, 0.9],
          "cross_attn.ssmax": [0.8, 0.5],
          "position.r1": [0.7, 1.3], "position.r2": [0.4, 1.6]}


def fixed(name, shape):
    for suffix, v in PINNED.items():
        if name.endswith(suffix):
            return torch.tensor(v, dtype=torch.float32).reshape(shape)
    n = math.prod(shape)
    phase = (zlib.crc32(name.encode()) % 1000) / 100.0
    t = 0.3 * torch.sin(torch.arange(n, dtype=torch.float64) * 0.731 + phase)
    if name.endswith("norm1.weight") or name.endswith("norm2.weight") or name.endswith("norm3.weight") \
            or name.endswith("_norm.weight"):
        t = 1.0 + t * 0.3
    if name.endswith("favor_proj"):
        t = t * 4.0  # roughly unit-variance random features
    if name.endswith("position.phase"):
        t = t - 1.0  # inside PoPE's clamp [-2 pi, 0], so the phases get gradients
    if ".position.gates." in name and name.endswith("bias"):
        t = t + 1.0  # forget gates near 0.7: a decay that matters over 7 tokens
    return t.float().reshape(shape)


# Golden variants: name -> the position block (as in a config file). Lengths are small so the
# methods act within the 7-token inputs: original_len 4-6 makes dynamic NTK and LongRoPE's long
# factors switch on; yarn's ramp over its 4 pairs at original_len 256 keeps pair 0, blends
# pair 1 and interpolates pairs 2-3; llama3 at original_len 100 has all three regimes.
LONGROPE = {"type": "longrope", "short_factor": [1.0, 1.5, 2.0, 4.0],
            "long_factor": [1.0, 2.0, 4.0, 8.0], "original_len": 6, "factor": 4.0}
VARIANTS = {
    "none": {"type": "none", "encoder_ok": True},
    "sinusoidal": {"type": "sinusoidal"},
    "learned": {"type": "learned", "max_len": LEARNED_MAX_LEN},
    "t5": {"type": "t5"},
    "rope": {"type": "rope"},
    "rope-half": {"type": "rope", "pairing": "half"},
    "alibi": {"type": "alibi"},
    "xpos": {"type": "xpos"},
    "rope-p": {"type": "rope", "fraction": 0.5},
    "rope-nope": {"type": "rope", "nope_every": 2},
    "rope-dynamic": {"type": "rope", "scaling": {"type": "dynamic", "factor": 4.0, "original_len": 4}},
    "rope-yarn": {"type": "rope", "scaling": {"type": "yarn", "factor": 4.0, "original_len": 256}},
    "rope-llama3": {"type": "rope", "scaling": {"type": "llama3", "factor": 4.0, "original_len": 100,
                                                "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
    "rope-longrope": {"type": "rope", "scaling": LONGROPE},
    "fire": {"type": "fire", "mlp_width": FIRE_W, "threshold": 4.0},
    "kerple-log": {"type": "kerple", "kernel": "log"},
    "kerple-power": {"type": "kerple", "kernel": "power"},
    "fox": {"type": "fox"},
    "fox-rope": {"type": "fox", "rope": True},
    "cope": {"type": "cope", "npos_max": COPE_NPOS},
    "pope": {"type": "pope"},
    "comrope": {"type": "comrope", "block": COMROPE_BLOCK},
    "path": {"type": "path"},
    "mrope": {"type": "mrope", "grid_width": 3},
    "mrope-contiguous": {"type": "mrope", "grid_width": 3, "sections": "contiguous"},
}
SCORE_BIASES = ("t5", "alibi", "fire", "kerple", "fox", "cope", "path")
SOFTMAX_ONLY = SCORE_BIASES + ("pope", "comrope")
CAUSAL_ONLY = ("fox", "cope", "path")  # decoders only


def position_config(variant, kernel):
    cfg = json.loads(json.dumps(VARIANTS[variant]))
    sc = cfg.get("scaling", {})
    if kernel == "linear" and sc.get("type") in ("yarn", "longrope"):
        sc["attention_factor"] = 1.0  # a softmax temperature: refused with linear attention
    return cfg


def cases():
    positions = list(VARIANTS)
    kernels = [("softmax", "elu", "eq19"), ("linear", "elu", "eq19"), ("linear", "elu", "before_phi"),
               ("linear", "favor", "eq19")]
    archs = {"decoder": dict(norm="pre", activation="gelu", scale_embeddings=False),
             "encoder": dict(norm="post", activation="gelu", scale_embeddings=False),
             "encdec": dict(norm="post", activation="relu", scale_embeddings=True)}
    for arch, extra in archs.items():
        for pos in positions:
            for kernel, fmap, mode in kernels:
                cfg = position_config(pos, kernel)
                if kernel == "linear" and cfg["type"] in SOFTMAX_ONLY:
                    continue
                if arch != "decoder" and cfg["type"] in CAUSAL_ONLY:
                    continue
                if kernel == "linear" and pos == "mrope-contiguous":
                    continue  # the linear forms are covered by mrope
                name = f"{arch}-{pos}-{kernel}" + ("" if kernel == "softmax" else f"-{fmap}-{mode}")
                yield name, dict(arch=arch, position=cfg["type"], position_config=cfg, kernel=kernel,
                                 feature_map=fmap, rope_mode=mode, **extra)


# Hybrid layouts (model.layout) and the attention switches: name -> (arch, position block of
# model.position, layout, switches). The spans are short so that they cut into the 7 tokens.
LAYOUTS = {
    # RNoPE-SWA: sliding-window RoPE layers and global NoPE ones
    "decoder-layout-rnope-swa": ("decoder", VARIANTS["rope"], {
        "pattern": ["local", "global"],
        "kinds": {"local": {"window": 3}, "global": {"position": {"type": "none"}}}}, {}),
    # Gemma 3: local layers at base 10k, global ones at base 1M with linear x8
    "decoder-layout-gemma": ("decoder", VARIANTS["rope"], {
        "pattern": ["local", "global"],
        "kinds": {"local": {"window": 2, "position": {"type": "rope", "base": 10000.0}},
                  "global": {"position": {"type": "rope", "base": 1000000.0,
                                          "scaling": {"type": "linear", "factor": 8.0}}}}}, {}),
    # Llama 4's iRoPE: chunked RoPE layers, NoPE layers with the query temperature
    "decoder-layout-irope": ("decoder", VARIANTS["rope"], {
        "pattern": ["chunked", "nope"],
        "kinds": {"chunked": {"chunk": 3},
                  "nope": {"position": {"type": "none"}, "temperature": {"scale": 0.5, "floor": 2}}}},
        {}),
    # a score-bias family per kind: two modules with parameters
    "decoder-layout-biases": ("decoder", VARIANTS["t5"], {
        "pattern": ["local", "global"],
        "kinds": {"local": {"window": 3, "position": {"type": "alibi"}}, "global": {}}}, {}),
    # content-dependent families in a window
    "decoder-layout-content": ("decoder", VARIANTS["fox"], {
        "pattern": ["local", "global"],
        "kinds": {"local": {"window": 3, "position": {"type": "cope", "npos_max": COPE_NPOS}},
                  "global": {}}}, {}),
    # a bidirectional window with padding
    "encoder-layout-window": ("encoder", VARIANTS["t5"], {
        "pattern": ["local", "global"],
        "kinds": {"local": {"window": 2, "position": {"type": "rope"}}, "global": {}}}, {}),
    # QK-norm, sinks and SSMax, on self- and cross-attention
    "decoder-rope-switches": ("decoder", VARIANTS["rope"], None,
                              {"qk_norm": True, "sinks": True, "ssmax": 0.7}),
    "encdec-rope-switches": ("encdec", VARIANTS["rope"], None,
                             {"qk_norm": True, "sinks": True, "ssmax": 0.7}),
}


def layout_cases():
    archs = {"decoder": dict(norm="pre", activation="gelu", scale_embeddings=False),
             "encoder": dict(norm="post", activation="gelu", scale_embeddings=False),
             "encdec": dict(norm="post", activation="relu", scale_embeddings=True)}
    for name, (arch, pos, layout, switches) in LAYOUTS.items():
        case = dict(arch=arch, position=pos["type"], position_config=pos, kernel="softmax",
                    feature_map="elu", rope_mode="eq19", switches=switches, **archs[arch])
        if layout:
            case["layout"] = layout
        yield name, case


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    tokens = torch.tensor([[3, 9, 14, 1, 22, 7, 11], [5, 5, 18, 2, 0, 0, 0]])
    pad = torch.tensor([[1] * 7, [1, 1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    src = torch.tensor([[4, 8, 15, 16, 20, 12], [6, 2, 10, 0, 0, 0]])
    src_pad = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    count = 0
    only = sys.argv[2] if len(sys.argv) > 2 else ""  # a name prefix: write only those cases
    for name, case in list(cases()) + list(layout_cases()):
        if not name.startswith(only):
            continue
        params = {k: fixed(k, s).requires_grad_(True) for k, s in param_shapes(case).items()}
        buffers = {k: fixed(k, s) for k, s in buffer_shapes(case).items()}
        ref = Ref(case, {**params, **buffers})
        logits = ref.forward(tokens, pad if case["arch"] == "encoder" else None, src, src_pad)
        weights = torch.cos(torch.arange(logits.numel(), dtype=torch.float32) * 0.1).reshape(logits.shape)
        (logits * weights).sum().backward()
        with h5py.File(os.path.join(out_dir, name + ".h5"), "w") as f:
            for k, v in case.items():
                f.attrs[k] = json.dumps(v) if isinstance(v, dict) else int(v) if isinstance(v, bool) else v
            f.attrs["d_model"], f.attrs["n_heads"], f.attrs["n_layers"], f.attrs["d_ff"] = D, N, L, FF
            f.attrs["vocab"], f.attrs["num_features"] = V, NUM_FEATURES
            f.attrs["learned_max_len"] = LEARNED_MAX_LEN
            # 1-D arrays, row-major; shapes: tokens/pad [2, 7], src/src_pad [2, 6], logits [2, 7, V].
            f["input/tokens"] = tokens.reshape(-1).numpy()
            f["input/pad"] = pad.reshape(-1).numpy().astype("uint8")
            f["input/src"] = src.reshape(-1).numpy()
            f["input/src_pad"] = src_pad.reshape(-1).numpy().astype("uint8")
            f["output/logits"] = logits.detach().reshape(-1).numpy()
            # Tensors are packed into flat arrays (one HDF5 dataset each keeps the files small);
            # the JSON index gives each name's offset and shape.
            for group, tensors in (("params", {k: p.detach() for k, p in params.items()}),
                                   ("grads", {k: p.grad for k, p in params.items()}),
                                   ("buffers", buffers)):
                index, flat, off = {}, [], 0
                for k, t in tensors.items():
                    index[k] = [off, list(t.shape)]
                    flat.append(t.reshape(-1))
                    off += t.numel()
                f[group] = torch.cat(flat).numpy() if flat else torch.zeros(0).numpy()
                f.attrs[group + "_index"] = json.dumps(index)
        count += 1
    print(f"wrote {count} golden cases to {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/golden")
