#!/usr/bin/python3
"""The eager PyTorch baseline of `ropelab bench --compare-pytorch`.

An independent implementation of ropelab's bench models and training step, written the way a
researcher would write it in plain PyTorch: causal LM (pre-LN decoder), masked LM (post-LN BERT
encoder with an MLM head) and translation (post-LN Transformer-base encoder-decoder, label
smoothing 0.1), with RoPE (RoFormer Eq. 34, interleaved pairs) or no position signal. One
training step = forward, loss, backward, global-norm clipping at 1.0, AdamW (decay on matrices
only). Batches are random token ids of the bench shape, like ropelab's.

Four variants of the same step, so that ropelab is compared with the fastest PyTorch there is:
  eager         the model as written above, torch.optim.AdamW (any PyTorch);
  sdpa          F.scaled_dot_product_attention and AdamW(fused=True) (PyTorch >= 2.0);
  compile       the eager model under torch.compile (inductor) and AdamW(fused=True)
                (PyTorch >= 2.0): Inductor fuses the elementwise work but keeps the attention
                scores in memory;
  compile-sdpa  the sdpa model under torch.compile and AdamW(fused=True) (PyTorch >= 2.0): the
                fused attention kernels and Inductor's fusion of the rest, the fastest of the four
                on a GPU.

Run with Debian's python3-torch (the same libtorch as ropelab), or any other PyTorch, e.g.
  /usr/bin/python3 scripts/bench_pytorch.py --model lm --precision bf16 --steps 10
  python3 scripts/bench_pytorch.py --device cuda --variant compile --d-model 1024 ...   (a GPU)
  chroot /srv/trixie /usr/bin/python3 - --variant compile < scripts/bench_pytorch.py
It prints one JSON object: {"model", "precision", "variant", "tokens_per_s", "step_s", "params",
"torch", "blas_core", "blas_threads", "omp_wait_policy", "malloc", "peak_rss_mb", ...}, or {"error": ...} with exit code 3
when this PyTorch lacks the variant. The caller sets OPENBLAS_CORETYPE, OMP_WAIT_POLICY (or GOMP_SPINCOUNT) and GLIBC_TUNABLES
(ropelab bench passes its own, so both sides run the same BLAS kernel, thread layout and
allocator settings).
"""
import ctypes
import os
import resource
import sys
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def rope_tables(n, head_dim, base=10000.0):
    inv = base ** (-torch.arange(0, head_dim // 2, dtype=torch.float32) * 2.0 / head_dim)
    ang = torch.outer(torch.arange(n, dtype=torch.float32), inv)
    return ang.cos(), ang.sin()


def rope(x, cos, sin):
    # x [B, N, T, H]; pairs (2i, 2i+1) rotate by angle m * theta_i.
    xf = x.float()
    x1, x2 = xf[..., 0::2], xf[..., 1::2]
    y = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return y.type_as(x)


def openblas():
    """OpenBLAS as loaded by this process (through libtorch's BLAS), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line}
        for path in sorted(paths):
            lib = ctypes.CDLL(path)
            if hasattr(lib, "openblas_get_corename"):
                return lib
    except OSError:
        pass
    return None


def blas_facts(threads):
    lib = openblas()
    if lib is None:
        return {"blas_core": "not OpenBLAS", "blas_threads": -1}
    lib.openblas_get_corename.restype = ctypes.c_char_p
    if threads > 0 and hasattr(lib, "openblas_set_num_threads"):
        lib.openblas_set_num_threads(threads)  # torch.set_num_threads leaves OpenBLAS alone
    return {"blas_core": lib.openblas_get_corename().decode(),
            "blas_threads": int(lib.openblas_get_num_threads())}


def malloc_facts():
    t = os.environ.get("GLIBC_TUNABLES", "")
    kept = "keeps freed memory" if "glibc.malloc.mmap_max=0" in t else "glibc defaults"
    return kept + (", huge pages" if "glibc.malloc.hugetlb=1" in t else "")


SDPA = False  # set by --variant sdpa and compile-sdpa


class Attention(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.n, self.h = n_heads, d // n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x, kv, mask, rot):
        B, T, _ = x.shape
        S = kv.shape[1]
        q = self.q(x).view(B, T, self.n, self.h).transpose(1, 2)
        k = self.k(kv).view(B, S, self.n, self.h).transpose(1, 2)
        v = self.v(kv).view(B, S, self.n, self.h).transpose(1, 2)
        if rot is not None:
            q, k = rope(q, *rot), rope(k, *rot)
        if SDPA:
            # A [T, T] mask is the causal one: is_causal takes the flash kernel where there is one.
            causal = mask is not None and mask.dim() == 2
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=None if causal else mask,
                                               is_causal=causal)
            return self.o(o.transpose(1, 2).reshape(B, T, -1))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(self.h)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        p = torch.softmax(s.float(), -1).type_as(v)
        return self.o((p @ v).transpose(1, 2).reshape(B, T, -1))


class Layer(nn.Module):
    def __init__(self, d, n_heads, d_ff, pre, cross, act, drop):
        super().__init__()
        self.pre, self.act, self.drop = pre, act, nn.Dropout(drop)
        self.attn, self.n1 = Attention(d, n_heads), nn.LayerNorm(d)
        self.cross = Attention(d, n_heads) if cross else None
        self.n3 = nn.LayerNorm(d) if cross else None
        self.fc1, self.fc2, self.n2 = nn.Linear(d, d_ff), nn.Linear(d_ff, d), nn.LayerNorm(d)

    def sub(self, x, norm, fn):
        if self.pre:
            return x + self.drop(fn(norm(x)))
        return norm(x + self.drop(fn(x)))

    def forward(self, x, mask, rot, mem=None, mem_mask=None):
        x = self.sub(x, self.n1, lambda h: self.attn(h, h, mask, rot))
        if self.cross is not None:
            x = self.sub(x, self.n3, lambda h: self.cross(h, mem, mem_mask, None))
        return self.sub(x, self.n2, lambda h: self.fc2(self.drop(self.act(self.fc1(h)))))


class Stack(nn.Module):
    def __init__(self, a, n_layers, pre, cross, act):
        super().__init__()
        self.layers = nn.ModuleList(
            Layer(a.d_model, a.n_heads, a.d_ff, pre, cross, act, a.dropout) for _ in range(n_layers))
        self.final = nn.LayerNorm(a.d_model) if pre else None

    def forward(self, x, mask, rot, mem=None, mem_mask=None):
        for layer in self.layers:
            x = layer(x, mask, rot, mem, mem_mask)
        return self.final(x) if self.final is not None else x


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        d = a.d_model
        self.emb = nn.Embedding(a.vocab, d)
        self.drop = nn.Dropout(a.dropout)
        if a.model == "lm":
            self.dec = Stack(a, a.n_layers, True, False, F.gelu)
        elif a.model == "mlm":
            self.seg = nn.Embedding(2, d)
            self.emb_norm = nn.LayerNorm(d)
            self.enc = Stack(a, a.n_layers, False, False, F.gelu)
            self.dense, self.head_norm = nn.Linear(d, d), nn.LayerNorm(d)
            self.out_bias = nn.Parameter(torch.zeros(a.vocab))
        else:
            self.enc = Stack(a, a.n_layers, False, False, F.relu)
            self.dec = Stack(a, a.n_layers, False, True, F.relu)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, batch, rot):
        a = self.a
        if a.model == "lm":
            x = self.drop(self.emb(batch["input"]))
            T = x.shape[1]
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            h = self.dec(x, causal, rot)
            logits = h @ self.emb.weight.t()
            return F.cross_entropy(logits.float().flatten(0, 1), batch["target"].flatten())
        if a.model == "mlm":
            tok = batch["input"]
            x = self.emb(tok) + self.seg(torch.zeros_like(tok))
            x = self.drop(self.emb_norm(x))
            h = self.enc(x, None, rot)
            sel = (batch["target"] != -100).flatten()
            h = h.flatten(0, 1)[sel]
            h = self.head_norm(F.gelu(self.dense(h)).float())  # LayerNorm weights are fp32
            logits = h @ self.emb.weight.t() + self.out_bias
            return F.cross_entropy(logits.float(), batch["target"].flatten()[sel])
        scale = math.sqrt(a.d_model)
        src_pad = batch["src_pad"]
        mem = self.enc(self.drop(self.emb(batch["src"]) * scale), src_pad[:, None, None, :], rot)
        T = batch["input"].shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=mem.device).tril()
        h = self.dec(self.drop(self.emb(batch["input"]) * scale), causal, rot, mem,
                     src_pad[:, None, None, :])
        logits = h @ self.emb.weight.t()
        return F.cross_entropy(logits.float().flatten(0, 1), batch["target"].flatten(),
                               label_smoothing=0.1)


def make_batch(a, g):
    B, T, V = a.batch, a.seq_len, a.vocab
    tok = torch.randint(4, V, (B, T), generator=g)
    if a.model == "lm":
        return {"input": tok, "target": torch.randint(4, V, (B, T), generator=g)}, B * T
    if a.model == "mlm":
        masked = torch.rand(B, T, generator=g) < 0.15
        target = torch.where(masked, tok, torch.full_like(tok, -100))
        return {"input": torch.where(masked, torch.full_like(tok, 3), tok), "target": target}, B * T
    src = torch.randint(4, V, (B, T), generator=g)
    return {"src": src, "src_pad": torch.ones(B, T, dtype=torch.bool), "input": tok,
            "target": torch.randint(4, V, (B, T), generator=g)}, 2 * B * T


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["lm", "mlm", "translation"], default="lm")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--position", choices=["rope", "none"], default="rope")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--n-layers", type=int, default=4)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--steps", type=int, default=10, help="timed steps (after 2 warm-up steps)")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--variant", choices=["eager", "sdpa", "compile", "compile-sdpa"],
                   default="eager")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--profile", metavar="FILE",
                   help="write a chrome trace of the timed steps (torch.profiler, with CUDA "
                        "activity on a GPU), for scripts/profile_summary.py")
    a = p.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"error": "--device cuda: this PyTorch sees no GPU",
                          "torch": torch.__version__}))
        sys.exit(3)
    if a.variant != "eager" and not hasattr(torch, "compile"):
        print(json.dumps({"error": f"--variant {a.variant} needs PyTorch 2.x (this is "
                                   f"{torch.__version__})", "torch": torch.__version__}))
        sys.exit(3)
    global SDPA
    SDPA = a.variant in ("sdpa", "compile-sdpa")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    facts = blas_facts(a.threads)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = Model(a).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    extra = {"fused": True} if a.variant != "eager" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": rest, "weight_decay": 0.0}], lr=1e-4, betas=(0.9, 0.98),
                            **extra)
    step_model = torch.compile(model) if a.variant.startswith("compile") else model
    rot = rope_tables(a.seq_len, a.d_model // a.n_heads) if a.position == "rope" else None
    if rot is not None:
        rot = tuple(t.to(dev) for t in rot)
    batches = []
    for _ in range(4):
        b, n = make_batch(a, g)
        batches.append(({k: v.to(dev) for k, v in b.items()}, n))
    cuda = dev.type == "cuda"
    elapsed, tokens, prof = 0.0, 0, None
    for step in range(a.steps + 2):
        batch, n = batches[step % len(batches)]
        if step == 2 and cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        if step == 2 and a.profile:
            acts = [torch.profiler.ProfilerActivity.CPU]
            if cuda:
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            prof = torch.profiler.profile(activities=acts)
            prof.start()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = step_model(batch, rot)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if cuda:
            torch.cuda.synchronize()  # the step's kernels are asynchronous
        if step >= 2:
            elapsed += time.perf_counter() - t0
            tokens += n
    if prof is not None:
        prof.stop()
        prof.export_chrome_trace(a.profile)
    print(json.dumps({"model": a.model, "precision": a.precision, "position": a.position,
                      "variant": a.variant, "tokens_per_s": tokens / elapsed,
                      "step_s": elapsed / a.steps,
                      "params": sum(p.numel() for p in model.parameters()),
                      "threads": torch.get_num_threads(), "torch": torch.__version__,
                      "omp_wait_policy": os.environ.get(
                          "OMP_WAIT_POLICY",
                          "GOMP_SPINCOUNT=" + os.environ["GOMP_SPINCOUNT"]
                          if "GOMP_SPINCOUNT" in os.environ else "default"),
                      "malloc": malloc_facts(),
                      "loss": float(loss), "device": str(dev),
                      "peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
                      # the process's peak resident set (Linux: ru_maxrss in KiB)
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      **facts}))


if __name__ == "__main__":
    main()
