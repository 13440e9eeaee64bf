#!/usr/bin/python3
"""An independent PyTorch BERT for MLM, to check ropelab's MLM curves against.

It reads the token streams ropelab prepared (data/prepared/bible-en/spm8000-bpe/*.h5) and
trains configs/mlm-cpu.yaml's recipe written from scratch in PyTorch: a post-LN encoder
(embeddings LayerNorm, GELU feed-forward, BERT's MLM head tied to the token embeddings),
[CLS] w_1..w_126 [SEP] windows, 15% of tokens selected (80% [MASK], 10% random, 10% kept),
AdamW (0.9, 0.98, weight decay 0.01 on matrices only), linear warm-up and decay, clip 1.0.

    /usr/bin/python3 scripts/reference_mlm.py --position learned --steps 1000

It prints the validation MLM loss and masked-token accuracy every --eval-every steps.
No ropelab code is used, so where its curve and ropelab's part, one of them has a defect.
It masks and orders the windows with its own generator, so compare curves, not single steps.
Needs Debian's python3-torch and python3-h5py, and a prepared corpus (any ropelab mlm run on
bible-en prepares it).
"""
import argparse
import math
import os
import sys
import time

import h5py
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CLS, SEP, MASK, NSPECIAL = 4, 5, 6, 7


def load(path):
    with h5py.File(path) as h:
        toks = h["text/tokens"][:]
        offs = h["text/offsets"][:]
    # Documents joined by [SEP], as ropelab's MLM stream does.
    out = []
    for i in range(len(offs) - 1):
        out.append(toks[offs[i]:offs[i + 1]])
        out.append(np.array([SEP], dtype=toks.dtype))
    return np.concatenate(out).astype(np.int64)


def windows(stream, L):
    W = L - 2
    n = len(stream) // W
    body = torch.from_numpy(stream[: n * W].reshape(n, W))
    cls = torch.full((n, 1), CLS, dtype=torch.long)
    sep = torch.full((n, 1), SEP, dtype=torch.long)
    return torch.cat([cls, body, sep], 1)


def mask(x, vocab, gen, p=0.15):
    x = x.clone()
    sel = (torch.rand(x.shape, generator=gen) < p) & (x >= NSPECIAL)
    target = torch.where(sel, x, torch.full_like(x, -100))
    u = torch.rand(x.shape, generator=gen)
    rnd = torch.randint(NSPECIAL, vocab, x.shape, generator=gen)
    x = torch.where(sel & (u < 0.8), torch.full_like(x, MASK), x)
    x = torch.where(sel & (u >= 0.8) & (u < 0.9), rnd, x)
    return x, target


class Layer(nn.Module):
    def __init__(self, d, h, ff, rope):
        super().__init__()
        self.h, self.rope = h, rope
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.f1, self.f2 = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        B, T, D = x.shape
        H = D // self.h
        q, k, v = (m(x).view(B, T, self.h, H).transpose(1, 2) for m in (self.q, self.k, self.v))
        if self.rope:
            q, k = rotate(q), rotate(k)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(H), -1) @ v
        x = self.ln1(x + self.o(a.transpose(1, 2).reshape(B, T, D)))
        return self.ln2(x + self.f2(F.gelu(self.f1(x))))


def rotate(x):
    # RoPE on adjacent pairs (x_{2i}, x_{2i+1}), theta_i = 10000^(-2i/d).
    T, H = x.shape[-2], x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, H, 2, dtype=torch.float32) / H)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * theta[None]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


class Bert(nn.Module):
    def __init__(self, vocab, d, layers, heads, ff, position, max_len, scale):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(max_len, d)) if position == "learned" else None
        self.scale = math.sqrt(d) if scale else 1.0
        self.ln = nn.LayerNorm(d)
        self.layers = nn.ModuleList(Layer(d, heads, ff, position == "rope") for _ in range(layers))
        self.dense, self.hln = nn.Linear(d, d), nn.LayerNorm(d)
        self.bias = nn.Parameter(torch.zeros(vocab))
        for name, p in self.named_parameters():
            if name.endswith("bias") or "ln" in name:
                continue
            nn.init.normal_(p, 0.0, 0.02)

    def forward(self, x, target):
        h = self.tok(x) * self.scale
        if self.pos is not None:
            h = h + self.pos[: x.shape[1]]
        h = self.ln(h)
        for layer in self.layers:
            h = layer(h)
        sel = target >= 0
        h = self.hln(F.gelu(self.dense(h[sel])))
        logits = h @ self.tok.weight.t() + self.bias
        return F.cross_entropy(logits, target[sel]), (logits.argmax(-1) == target[sel]).float()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data/prepared/bible-en/spm8000-bpe",
                    help="folder with train.h5 and valid.h5 (%(default)s)")
    ap.add_argument("--position", choices=["learned", "rope", "none"], default="learned",
                    help="learned absolute (BERT), RoPE, or none (%(default)s)")
    ap.add_argument("--steps", type=int, default=1000, help="training steps (%(default)s)")
    ap.add_argument("--warmup", type=int, default=200, help="warm-up steps (%(default)s)")
    ap.add_argument("--lr", type=float, default=5e-4, help="peak learning rate (%(default)s)")
    ap.add_argument("--batch", type=int, default=16, help="windows per batch (%(default)s)")
    ap.add_argument("--seq-len", type=int, default=128, help="window length (%(default)s)")
    ap.add_argument("--no-scale", action="store_true",
                    help="do not multiply token embeddings by sqrt(d)")
    ap.add_argument("--decay-steps", type=int, default=0,
                    help="length of the linear decay (default: --steps)")
    ap.add_argument("--eval-every", type=int, default=250,
                    help="steps between evaluations (%(default)s)")
    ap.add_argument("--seed", type=int, default=1, help="seed (%(default)s)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (%(default)s)")
    a = ap.parse_args()
    for split in ("train", "valid"):
        if not os.path.isfile(f"{a.data}/{split}.h5"):
            sys.exit(f"reference_mlm: {a.data}/{split}.h5 not found (--data; train an mlm run on "
                     "bible-en first to prepare it)")
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    vocab = 8000
    train = windows(load(f"{a.data}/train.h5"), a.seq_len)
    valid = windows(load(f"{a.data}/valid.h5"), a.seq_len)[:192]
    gv = torch.Generator().manual_seed(99)
    vx, vt = mask(valid, vocab, gv)
    model = Bert(vocab, 256, 4, 4, 1024, a.position, 512, not a.no_scale)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and n != "pos"]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and n != "pos")]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.98), eps=1e-8)
    total = a.decay_steps or a.steps
    def lr_factor(s):
        if s < a.warmup:
            return (s + 1) / a.warmup
        return max(0.0, (total - s) / (total - a.warmup))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
    g = torch.Generator().manual_seed(a.seed)
    order, pos, t0 = torch.randperm(len(train), generator=g), 0, time.time()
    for step in range(1, a.steps + 1):
        if pos + a.batch > len(order):
            order, pos = torch.randperm(len(train), generator=g), 0
        x, t = mask(train[order[pos:pos + a.batch]], vocab, g)
        pos += a.batch
        loss, _ = model(x, t)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % a.eval_every == 0 or step == a.steps:
            model.eval()
            with torch.no_grad():
                vl, va = model(vx, vt)
            model.train()
            extra = f" pos_std {model.pos.std():.4f}" if model.pos is not None else ""
            print(f"step {step} train {loss.item():.3f} valid loss {vl.item():.3f} "
                  f"acc {va.mean():.3f}{extra} ({time.time() - t0:.0f}s)", flush=True)


if __name__ == "__main__":
    main()
