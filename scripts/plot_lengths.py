#!/usr/bin/python3
"""Draws validation loss against evaluation length (called by `ropelab ablate` for an
experiment with eval_lengths).

Reads OUT/lengths.json ({"train_len", "lengths", "rows": [{"label", "loss": [.. or null]}]})
and writes OUT/loss_by_length.png: one line per run (and per evaluation-time RoPE scaling,
dashed), a log2 length axis, and the training length marked.
Usage: plot_lengths.py OUT_DIR
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    out = sys.argv[1]
    with open(os.path.join(out, "lengths.json")) as f:
        data = json.load(f)
    fig, ax = plt.subplots(figsize=(8, 5))
    bases = []
    for row in data["rows"]:
        base = row["label"].split(" + ")[0]
        if base not in bases:
            bases.append(base)
        i = bases.index(base)
        xs = [L for L, v in zip(data["lengths"], row["loss"]) if v is not None]
        ys = [v for v in row["loss"] if v is not None]
        if not xs:
            continue
        scaled = " + " in row["label"]
        ax.plot(xs, ys, marker="o", linestyle="--" if scaled else "-", color=f"C{i % 10}",
                alpha=0.7 if scaled else 1.0, label=row["label"])
    ax.axvline(data["train_len"], color="grey", linewidth=0.8, linestyle=":")
    ax.set_xscale("log", base=2)
    ax.set_xticks(data["lengths"])
    ax.set_xticklabels([str(L) for L in data["lengths"]])
    ax.set_xlabel(f"evaluation length (tokens; trained at {data['train_len']})")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title("Length generalisation")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "loss_by_length.png"), dpi=120)


if __name__ == "__main__":
    main()
