#!/usr/bin/python3
"""Draws the loss curves of ropelab runs from their metrics.h5 (called by `ropelab compare`).

Writes OUT/loss_by_step.png and OUT/loss_by_tokens.png: train loss (EMA-smoothed, raw in
light colour) and validation loss, one colour per run.
Usage: plot_runs.py --out DIR [--smooth 0.6] RUN_DIR...
"""
import argparse
import os
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def ema(values, alpha):
    out, acc = [], None
    for v in values:
        acc = v if acc is None else alpha * acc + (1 - alpha) * v
        out.append(acc)
    return out


def load(run):
    with h5py.File(os.path.join(run, "metrics.h5"), "r") as f:
        name = f.attrs.get("name", os.path.basename(run.rstrip("/")))
        if isinstance(name, bytes):
            name = name.decode()
        groups = {g: {k: f[g][k][()] for k in f[g]} for g in ("train", "valid") if g in f}
    return name, groups


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--smooth", type=float, default=0.6)
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    runs = [load(r) for r in a.runs]
    for xkey, fname, xlabel in (("step", "loss_by_step.png", "optimizer step"),
                                ("tokens", "loss_by_tokens.png", "training tokens")):
        fig, (ax_t, ax_v) = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
        for i, (name, g) in enumerate(runs):
            color = f"C{i % 10}"
            if "train" in g and len(g["train"].get("loss", [])):
                x, y = g["train"][xkey], g["train"]["loss"]
                ax_t.plot(x, y, color=color, alpha=0.2, linewidth=0.8)
                ax_t.plot(x, ema(y, a.smooth), color=color, label=name, linewidth=1.6)
            if "valid" in g and len(g["valid"].get("loss", [])):
                ax_v.plot(g["valid"][xkey], g["valid"]["loss"], "o-", color=color, label=name,
                          markersize=3, linewidth=1.6)
        ax_t.set_title(f"train loss (EMA {a.smooth})")
        ax_v.set_title("validation loss")
        for ax in (ax_t, ax_v):
            ax.set_xlabel(xlabel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        ax_t.set_ylabel("cross-entropy (nats)")
        # Focus on the informative range: ignore the untrained first point when choosing limits.
        lows = [min(g["valid"]["loss"]) for _, g in runs if "valid" in g and len(g["valid"]["loss"])]
        highs = [g["valid"]["loss"][min(1, len(g["valid"]["loss"]) - 1)] for _, g in runs
                 if "valid" in g and len(g["valid"]["loss"])]
        if lows and highs:
            lo, hi = min(lows), max(highs)
            pad = 0.1 * (hi - lo + 1e-3)
            ax_v.set_ylim(lo - pad, hi + pad * 3)
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, fname), dpi=110)
        plt.close(fig)
    return 0


if __name__ == "__main__":
    sys.exit(main())
