#!/usr/bin/python3
"""Draws the loss curves of ropelab runs from their metrics.h5 (called by `ropelab compare`).

Writes OUT/loss_by_step.png and OUT/loss_by_tokens.png: train loss (EMA-smoothed, raw in
light colour) and validation loss, one colour per run. Runs of one variant trained with several
seeds (names ending in .seed<N>) are drawn as one mean curve with a band of +- one standard
deviation over the seeds.
Usage: plot_runs.py --out DIR [--smooth 0.6] [--live RUN_DIR]... RUN_DIR...
"""
import argparse
import json
import os
import re
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


def load_jsonl(run):
    """A run being trained: its metrics.jsonl (whole lines only; the last row of a step wins)."""
    rows = {"train": {}, "valid": {}}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            if not line.endswith("\n"):
                break  # still being written
            r = json.loads(line)
            if r.get("split") in rows and "step" in r:
                rows[r["split"]][r["step"]] = r
    groups = {}
    for g, by_step in rows.items():
        if by_step:
            ordered = [by_step[s] for s in sorted(by_step)]
            keys = [k for k in ordered[0] if k != "split"]
            groups[g] = {k: [float("nan") if r.get(k) is None else r[k] for r in ordered]
                         for k in keys}
    return os.path.basename(run.rstrip("/")), groups


def load(run, live):
    if run in live:
        return load_jsonl(run)
    with h5py.File(os.path.join(run, "metrics.h5"), "r") as f:
        name = f.attrs.get("name", os.path.basename(run.rstrip("/")))
        if isinstance(name, bytes):
            name = name.decode()
        groups = {g: {k: f[g][k][()] for k in f[g]} for g in ("train", "valid") if g in f}
    return name, groups


def group_seeds(runs):
    """[(name, groups)] -> [(label, [groups...])], runs named X.seedN grouped under X."""
    out = {}
    for name, g in runs:
        m = re.match(r"^(.*)\.seed\d+$", name)
        out.setdefault(m.group(1) if m else name, []).append(g)
    return list(out.items())


def mean_band(curves):
    """Mean and std over curves of (x, y), cut to the shortest."""
    n = min(len(y) for _, y in curves)
    x = curves[0][0][:n]
    ys = [list(y[:n]) for _, y in curves]
    mean = [sum(v) / len(v) for v in zip(*ys)]
    if len(ys) < 2:
        return x, mean, mean, mean
    sd = [(sum((vi - m) ** 2 for vi in v) / (len(v) - 1)) ** 0.5 for v, m in zip(zip(*ys), mean)]
    return x, mean, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--smooth", type=float, default=0.6)
    ap.add_argument("--live", action="append", default=[],
                    help="a run being trained: read its metrics.jsonl (repeatable)")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    runs = [load(r, a.live) for r in a.runs]
    for xkey, fname, xlabel in (("step", "loss_by_step.png", "optimizer step"),
                                ("tokens", "loss_by_tokens.png", "training tokens")):
        fig, (ax_t, ax_v) = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
        for i, (name, gs) in enumerate(group_seeds(runs)):
            # Ten colours, then the same colours dashed, dotted...: no two series look alike.
            color, style = f"C{i % 10}", ["-", "--", ":", "-."][i // 10 % 4]
            label = name if len(gs) == 1 else f"{name} (mean of {len(gs)} seeds)"
            train = [(g["train"][xkey], ema(g["train"]["loss"], a.smooth)) for g in gs
                     if "train" in g and len(g["train"].get("loss", []))]
            valid = [(g["valid"][xkey], g["valid"]["loss"]) for g in gs
                     if "valid" in g and len(g["valid"].get("loss", []))]
            if len(gs) == 1 and train:
                ax_t.plot(gs[0]["train"][xkey], gs[0]["train"]["loss"], color=color, alpha=0.2,
                          linewidth=0.8)
            if train:
                x, m, lo, hi = mean_band(train)
                ax_t.plot(x, m, color=color, linestyle=style, label=label, linewidth=1.6)
                if len(train) > 1:
                    ax_t.fill_between(x, lo, hi, color=color, alpha=0.2, linewidth=0)
            if valid:
                x, m, lo, hi = mean_band(valid)
                ax_v.plot(x, m, marker="o", color=color, linestyle=style, label=label,
                          markersize=3, linewidth=1.6)
                if len(valid) > 1:
                    ax_v.fill_between(x, lo, hi, color=color, alpha=0.2, linewidth=0)
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
