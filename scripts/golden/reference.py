#!/usr/bin/python3
"""Independent PyTorch reference for ropelab's golden tests.

Written from the papers (Vaswani et al. 2017; Devlin et al. 2019; Su et al. 2021 - RoFormer
Eq. 14-16 and 19; Raffel et al. 2020; Press et al. 2022; Sun et al. 2023; Katharopoulos et al.
2020; Choromanski et al. 2021), not from the C++ code: it shares only the parameter names, so
the C++ test can load the same weights.

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


def rope_rotate(x, pos, pairing, base=10000.0, xpos_scale=None, is_query=True):
    """Rotates the last dim of x ([..., T, d]) at integer positions pos ([T])."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
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
    return y


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

    def attention(self, prefix, x, kv, pos_kind, stack, causal, key_pad):
        q = self.lin(prefix + ".q_proj", x).view(x.shape[0], -1, N, H).transpose(1, 2)
        k = self.lin(prefix + ".k_proj", kv).view(kv.shape[0], -1, N, H).transpose(1, 2)
        v = self.lin(prefix + ".v_proj", kv).view(kv.shape[0], -1, N, H).transpose(1, 2)
        tq, tk = q.shape[2], k.shape[2]
        qpos, kpos = torch.arange(tq), torch.arange(tk)
        allowed = torch.ones(tq, tk, dtype=torch.bool)
        if causal:
            allowed = kpos[None, :] <= qpos[:, None]
        allowed = allowed[None, None]
        if key_pad is not None:
            allowed = allowed & key_pad[:, None, None, :]

        def rot(t, pos, is_query):
            if pos_kind in ("rope", "rope-half"):
                return rope_rotate(t, pos, "half" if pos_kind == "rope-half" else "interleaved")
            if pos_kind == "xpos":
                return rope_rotate(t, pos, "interleaved", xpos_scale=512.0, is_query=is_query)
            return t

        if self.c["kernel"] == "softmax":
            q, k = rot(q, qpos, True), rot(k, kpos, False)
            scores = q @ k.transpose(-1, -2) / math.sqrt(H)
            if pos_kind == "t5":
                table = self.p[stack + ".position.table"]
                buckets = torch.tensor([[t5_bucket(int(kk - qq), not causal) for kk in kpos] for qq in qpos])
                scores = scores + table[buckets].permute(2, 0, 1)[None]
            if pos_kind == "alibi":
                slopes = torch.tensor(alibi_slopes(N))
                dist = (qpos[:, None] - kpos[None, :]).abs().float()
                scores = scores - slopes[:, None, None] * dist[None]
            scores = scores.masked_fill(~allowed, float("-inf"))
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

            x = res(x, p + ".norm1", lambda h: self.attention(p + ".self_attn", h, h, pos, name, causal, key_pad))
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


# ----------------------------------------------------------------------------- parameters

def param_shapes(case):
    arch, pos = case["arch"], case["position"]
    shapes = {"tok_emb.weight": (V, D)}
    stacks = {"decoder": ["decoder"], "encoder": ["encoder"], "encdec": ["encoder", "decoder"]}[arch]
    for s in stacks:
        if pos == "learned":
            shapes[f"{s}.position.weight"] = (LEARNED_MAX_LEN, D)
        if pos == "t5":
            shapes[f"{s}.position.table"] = (32, N)
        for i in range(L):
            p = f"{s}.layers.{i}"
            attns = ["self_attn"] + (["cross_attn"] if (arch == "encdec" and s == "decoder") else [])
            for a in attns:
                for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                    shapes[f"{p}.{a}.{proj}.weight"] = (D, D)
                    shapes[f"{p}.{a}.{proj}.bias"] = (D,)
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


def fixed(name, shape):
    n = math.prod(shape)
    phase = (zlib.crc32(name.encode()) % 1000) / 100.0
    t = 0.3 * torch.sin(torch.arange(n, dtype=torch.float64) * 0.731 + phase)
    if name.endswith("norm1.weight") or name.endswith("norm2.weight") or name.endswith("norm3.weight") \
            or name.endswith("_norm.weight"):
        t = 1.0 + t * 0.3
    if name.endswith("favor_proj"):
        t = t * 4.0  # roughly unit-variance random features
    return t.float().reshape(shape)


def cases():
    positions = ["none", "sinusoidal", "learned", "t5", "rope", "rope-half", "alibi", "xpos"]
    kernels = [("softmax", "elu", "eq19"), ("linear", "elu", "eq19"), ("linear", "elu", "before_phi"),
               ("linear", "favor", "eq19")]
    archs = {"decoder": dict(norm="pre", activation="gelu", scale_embeddings=False),
             "encoder": dict(norm="post", activation="gelu", scale_embeddings=False),
             "encdec": dict(norm="post", activation="relu", scale_embeddings=True)}
    for arch, extra in archs.items():
        for pos in positions:
            for kernel, fmap, mode in kernels:
                if kernel == "linear" and pos in ("t5", "alibi"):
                    continue
                name = f"{arch}-{pos}-{kernel}" + ("" if kernel == "softmax" else f"-{fmap}-{mode}")
                yield name, dict(arch=arch, position=pos, kernel=kernel, feature_map=fmap, rope_mode=mode, **extra)


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    tokens = torch.tensor([[3, 9, 14, 1, 22, 7, 11], [5, 5, 18, 2, 0, 0, 0]])
    pad = torch.tensor([[1] * 7, [1, 1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    src = torch.tensor([[4, 8, 15, 16, 20, 12], [6, 2, 10, 0, 0, 0]])
    src_pad = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    count = 0
    for name, case in cases():
        params = {k: fixed(k, s).requires_grad_(True) for k, s in param_shapes(case).items()}
        buffers = {k: fixed(k, s) for k, s in buffer_shapes(case).items()}
        ref = Ref(case, {**params, **buffers})
        logits = ref.forward(tokens, pad if case["arch"] == "encoder" else None, src, src_pad)
        weights = torch.cos(torch.arange(logits.numel(), dtype=torch.float32) * 0.1).reshape(logits.shape)
        (logits * weights).sum().backward()
        with h5py.File(os.path.join(out_dir, name + ".h5"), "w") as f:
            for k, v in case.items():
                f.attrs[k] = int(v) if isinstance(v, bool) else v
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
