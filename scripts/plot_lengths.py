#!/usr/bin/python3
"""Draws validation loss against evaluation length (called by `ropelab ablate` for an
experiment with eval_lengths), or with `perplexity` the sliding-window NLL against the window
(an experiment with eval_windows; the rows are means over seeds).

Reads OUT/lengths.json ({"train_len", "lengths", "rows": [{"label", "loss": [.. or null]}]})
and writes OUT/loss_by_length.png (or perplexity.json into perplexity_by_window.png): one line
per run (and per evaluation-time RoPE scaling, dashed), a log2 length axis, and the training
length marked.
Usage: plot_lengths.py OUT_DIR [perplexity]
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    out = sys.argv[1]
    sliding = len(sys.argv) > 2 and sys.argv[2] == "perplexity"
    name = "perplexity" if sliding else "lengths"
    with open(os.path.join(out, name + ".json")) as f:
        data = json.load(f)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    bases, methods = [], []
    styles = ["--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1))]
    cmap = plt.get_cmap("tab20")
    for row in data["rows"]:
        base, _, method = row["label"].partition(" + ")
        if base not in bases:
            bases.append(base)
        if method and method not in methods:
            methods.append(method)
        i = bases.index(base)
        xs = [L for L, v in zip(data["lengths"], row["loss"]) if v is not None]
        ys = [v for v in row["loss"] if v is not None]
        if not xs:
            continue
        # One colour per trained run; each evaluation-time method has its own line style.
        style = styles[methods.index(method) % len(styles)] if method else "-"
        ax.plot(xs, ys, marker="o" if not method else ".", linestyle=style,
                color=cmap((2 * i) % 20 + (i // 10) % 2), alpha=0.75 if method else 1.0,
                label=row["label"])
    ax.axvline(data["train_len"], color="grey", linewidth=0.8, linestyle=":")
    ax.set_xscale("log", base=2)
    ax.set_xticks(data["lengths"])
    ax.set_xticklabels([str(L) for L in data["lengths"]])
    if sliding:
        ax.set_xlabel(f"window (tokens; stride {data['stride']}; trained at {data['train_len']})")
        ax.set_ylabel(f"{data['split']} NLL (nats/token)")
        ax.set_title("Sliding-window perplexity on long documents")
    else:
        ax.set_xlabel(f"evaluation length (tokens; trained at {data['train_len']})")
        ax.set_ylabel("validation loss (nats/token)")
        ax.set_title("Length generalisation")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    png = "perplexity_by_window.png" if sliding else "loss_by_length.png"
    fig.savefig(os.path.join(out, png), dpi=120)


if __name__ == "__main__":
    main()
