#!/usr/bin/python3
"""Draws a fine-tuning sweep's dev metric against step (the paper's Table 2 as curves): one
panel per task, one line per position module at its best setting (the one sweep.md reports:
best mean over seeds of each run's best value), the mean over seeds with a +-1 std band.

Reads EXPERIMENT_DIR/results.json, as `ropelab ablate` writes it, and each run's
metrics.jsonl; writes EXPERIMENT_DIR/metric_by_step.png (or --out).
Usage: plot_sweep.py EXPERIMENT_DIR [--out FILE]
"""
import argparse
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def curve(run_dir, metric):
    """{step: value} of the validation metric in one run's metrics.jsonl."""
    out = {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("split") == "valid" and metric in rec:
                out[rec["step"]] = rec[metric]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment_dir")
    ap.add_argument("--out", help="PNG to write (default EXPERIMENT_DIR/metric_by_step.png)")
    a = ap.parse_args()
    path = os.path.join(a.experiment_dir, "results.json")
    try:
        with open(path) as f:
            runs = [r for r in json.load(f)["runs"] if r.get("value") is not None]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"plot_sweep: {path}: cannot read results ({e})")
    if not runs:
        sys.exit(f"plot_sweep: {path}: no finished run")
    tasks = list(dict.fromkeys(r["task"] for r in runs))
    variants = list(dict.fromkeys(r["variant"] for r in runs))
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for i, variant in enumerate(variants):
            mine = [r for r in runs if r["task"] == task and r["variant"] == variant]
            if not mine:
                continue
            higher = mine[0]["higher"]
            by_setting = {}
            for r in mine:
                by_setting.setdefault(r["setting"], []).append(r)
            pick = max if higher else min
            setting = pick(by_setting,
                           key=lambda s: statistics.mean(r["value"] for r in by_setting[s]))
            chosen = by_setting[setting]
            metric = chosen[0]["metric"]
            try:
                curves = [curve(r["run_dir"], metric) for r in chosen]
            except OSError as e:
                sys.exit(f"plot_sweep: {e.filename}: cannot read ({e.strerror})")
            steps = sorted(set.intersection(*(set(c) for c in curves)))
            mean = [statistics.mean(c[s] for c in curves) for s in steps]
            sd = [statistics.stdev([c[s] for c in curves]) if len(curves) > 1 else 0.0
                  for s in steps]
            color = plt.get_cmap("tab10")(i)
            label = f"{variant}" + (f" ({setting})" if setting else "") + f", {len(curves)} seeds"
            ax.plot(steps, mean, "-o", ms=3, color=color, label=label)
            ax.fill_between(steps, [m - d for m, d in zip(mean, sd)],
                            [m + d for m, d in zip(mean, sd)], color=color, alpha=0.2)
            ax.set_ylabel(f"dev {metric}")
        ax.set_title(task or os.path.basename(os.path.normpath(a.experiment_dir)))
        ax.set_xlabel("fine-tuning step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("dev metric by step: mean over seeds, ±1 std band, best setting per module",
                 fontsize=10)
    fig.tight_layout()
    out = a.out or os.path.join(a.experiment_dir, "metric_by_step.png")
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
