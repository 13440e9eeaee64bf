#!/usr/bin/python3
"""Draws a ranking experiment's dev accuracy against maximum length (the paper's Table 5 as a
plot): one line per position module, the mean over seeds with a +-1 std band, each seed as a
dot, chance (0.5) and the target marked.

Reads EXPERIMENT_DIR/results.json, as `ropelab ablate` writes it for an experiment whose tasks
are named lenN (experiments/rank-cpu.yaml), and writes EXPERIMENT_DIR/accuracy_by_length.png.
Usage: plot_rank.py EXPERIMENT_DIR [--target 0.75]
"""
import argparse
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment_dir")
    ap.add_argument("--target", type=float, default=0.75, help="line to draw (%(default)s)")
    a = ap.parse_args()
    path = os.path.join(a.experiment_dir, "results.json")
    try:
        with open(path) as f:
            runs = json.load(f)["runs"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"plot_rank: {path}: cannot read results ({e})")
    # variant -> length -> [best dev accuracy per seed]
    acc = {}
    for r in runs:
        m = re.fullmatch(r"len(\d+)", r.get("task", ""))
        if not m or r.get("value") is None:
            continue
        acc.setdefault(r["variant"], {}).setdefault(int(m.group(1)), []).append(r["value"])
    if not acc:
        sys.exit(f"plot_rank: {path}: no finished run of a task named lenN")
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, (variant, by_len) in enumerate(sorted(acc.items())):
        color = plt.get_cmap("tab10")(i)
        xs = sorted(by_len)
        mean = [statistics.mean(by_len[x]) for x in xs]
        sd = [statistics.stdev(by_len[x]) if len(by_len[x]) > 1 else 0.0 for x in xs]
        seeds = max(len(v) for v in by_len.values())
        ax.plot(xs, mean, "-o", color=color, label=f"{variant} (mean of {seeds} seeds, ±1 std)")
        ax.fill_between(xs, [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)],
                        color=color, alpha=0.2)
        for x in xs:
            ax.scatter([x] * len(by_len[x]), by_len[x], color=color, s=10, alpha=0.6)
    ax.axhline(0.5, color="gray", ls=":", lw=1, label="chance (ties score 0.5)")
    ax.axhline(a.target, color="black", ls="--", lw=1, label=f"target {a.target:g}")
    ax.set_xscale("log", base=2)
    lengths = sorted({x for v in acc.values() for x in v})
    ax.set_xticks(lengths)
    ax.set_xticklabels([str(x) for x in lengths])
    ax.set_xlabel("maximum length (tokens)")
    ax.set_ylabel("best dev accuracy")
    ax.set_title(os.path.basename(os.path.normpath(a.experiment_dir)) +
                 ": accuracy against maximum length")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out = os.path.join(a.experiment_dir, "accuracy_by_length.png")
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
