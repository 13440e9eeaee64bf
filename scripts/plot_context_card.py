#!/usr/bin/python3
"""Draws the context-extension card's figure from an experiment's perplexity.json (written by
`ropelab ablate` with eval_windows; experiments/context-extension-*.yaml).

Two panels of mean test NLL over seeds against the window (log2 axis, the pretraining length
marked): left, the pretrained RoPE model alone and with each method switched on at evaluation
time (no fine-tune); right, the fine-tuned variants, with the pretrained model again for
reference. Each line is the mean over seeds, with the seeds' min-max as a band.
Usage: plot_context_card.py RUN_DIR OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(data):
    """{row: [(window index, [values over seeds])...]} in file order."""
    out = {}
    for run in data["runs"]:
        cells = out.setdefault(run["row"], [[] for _ in data["windows"]])
        for i, v in enumerate(run["nll"]):
            if v is not None:
                cells[i].append(v)
    return out


def draw(ax, data, names, title):
    cmap = plt.get_cmap("tab20")
    W = data["windows"]
    for k, (name, cells) in enumerate(names):
        xs = [w for w, c in zip(W, cells) if c]
        mean = [sum(c) / len(c) for c in cells if c]
        lo = [min(c) for c in cells if c]
        hi = [max(c) for c in cells if c]
        colour = "black" if name == "rope" else cmap(k % 20)
        ax.plot(xs, mean, marker="o", markersize=3, color=colour, label=name,
                linewidth=2 if name == "rope" else 1.2)
        ax.fill_between(xs, lo, hi, color=colour, alpha=0.12, linewidth=0)
    ax.axvline(data["train_len"], color="grey", linewidth=0.8, linestyle=":")
    ax.set_xscale("log", base=2)
    ax.set_xticks(W)
    ax.set_xticklabels([str(w) for w in W])
    ax.set_xlabel(f"window (tokens; stride {data['stride']}; pretrained at {data['train_len']})")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")


def main():
    run_dir, out = sys.argv[1], sys.argv[2]
    with open(run_dir.rstrip("/") + "/perplexity.json") as f:
        data = json.load(f)
    by_row = rows(data)
    base = [(r, c) for r, c in by_row.items() if r == "rope"]
    no_ft = base + [(r, c) for r, c in by_row.items() if r.startswith("rope + ")]
    tuned = base + [(r, c) for r, c in by_row.items() if r != "rope" and " + " not in r]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    draw(axes[0], data, no_ft, "Without a fine-tune (method switched on at evaluation)")
    draw(axes[1], data, tuned, "With a fine-tune (4% of the pretraining tokens)")
    axes[0].set_ylabel(f"{data['split']} NLL (nats/token), mean over seeds; band: min-max")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
