#!/usr/bin/python3
"""Draws length-generalisation cards (called by `ropelab probe`, `compare` and `ablate`).

  plot_card.py RUN/probe.json   -> RUN/probe.png: the run's metric against the size multiple
                                   (passkey, niah: also the needle-depth x length grid)
  plot_card.py OUT/card.json    -> OUT/card.png: one panel per task, one line per variant, the
                                   mean over seeds with a band of +- one standard deviation
"""
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def ylabel(metric):
    return "exact match (%)" if metric == "exact" else "perplexity"


def scale(metric, v):
    return None if v is None else (100 * v if metric == "exact" else v)


def probe(path, data):
    metric = data["metric"]
    grid = data.get("grid")
    fig, axes = plt.subplots(1, 2 if grid else 1, figsize=(11 if grid else 6, 4.2))
    ax = axes[0] if grid else axes
    xs = data["multipliers"]
    ys = [scale(metric, v) for v in data["value"]]
    pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
    if pts:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{m}x\n{s}" for m, s in zip(xs, data["sizes"])])
    ax.set_xlabel(f"multiple of the training size ({data['size_unit']})")
    ax.set_ylabel(ylabel(metric))
    ax.set_title(data["task"])
    ax.grid(alpha=0.3)
    if grid:
        g = [[math.nan if v is None else 100 * v for v in row] for row in grid]
        im = axes[1].imshow(g, vmin=0, vmax=100, cmap="viridis", aspect="auto", origin="upper")
        axes[1].set_xticks(range(len(data["sizes"])))
        axes[1].set_xticklabels([str(s) for s in data["sizes"]])
        axes[1].set_yticks(range(len(data["depths"])))
        axes[1].set_yticklabels([f"{d:.2f}" for d in data["depths"]])
        axes[1].set_xlabel("prompt length (tokens)")
        axes[1].set_ylabel("needle depth")
        axes[1].set_title("exact match by needle depth (%)")
        fig.colorbar(im, ax=axes[1])
    fig.tight_layout()
    fig.savefig(os.path.join(os.path.dirname(path), "probe.png"), dpi=110)


def card(path, data):
    tasks, by = [], {}
    for e in data["entries"]:
        if e["task"] not in tasks:
            tasks.append(e["task"])
        by.setdefault(e["task"], {}).setdefault(e["variant"], []).append(e)
    n = len(tasks)
    cols = min(n, 3)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    for t_i, task in enumerate(tasks):
        ax = axes[t_i // cols][t_i % cols]
        metric = None
        for v_i, (variant, es) in enumerate(by[task].items()):
            metric = es[0]["metric"]
            xs = es[0]["multipliers"]
            mean, lo, hi, keep = [], [], [], []
            for k, x in enumerate(xs):
                vals = [scale(metric, e["value"][k]) for e in es if e["value"][k] is not None]
                if not vals:
                    continue
                m = sum(vals) / len(vals)
                sd = (sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0
                keep.append(x), mean.append(m), lo.append(m - sd), hi.append(m + sd)
            if not keep:
                continue
            # Ten colours, then the same colours dashed with square markers: 11+ families stay
            # distinguishable.
            color, style = f"C{v_i % 10}", ["o-", "s--", "^:"][v_i // 10 % 3]
            ax.plot(keep, mean, style, color=color, label=variant, markersize=3)
            if len(es) > 1:
                ax.fill_between(keep, lo, hi, color=color, alpha=0.15, linewidth=0)
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{m}x" for m in xs])
        ax.set_title(task)
        ax.set_ylabel(ylabel(metric))
        if metric == "exact":
            ax.set_ylim(-3, 103)  # one scale for every task: 0-100%
        else:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    for t_i in range(n, rows * cols):
        axes[t_i // cols][t_i % cols].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.suptitle("Length-generalisation card (multiple of the training size)")
    fig.tight_layout()
    fig.savefig(os.path.join(os.path.dirname(path), "card.png"), dpi=110, bbox_inches="tight")


def main():
    path = sys.argv[1]
    with open(path) as f:
        data = json.load(f)
    if "entries" in data:
        card(path, data)
    else:
        probe(path, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
