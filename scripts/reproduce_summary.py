#!/usr/bin/env python3
"""One summary of the paper's experiments: runs/reproduce/summary.md.

scripts/reproduce.sh calls this after it has run every experiment; it can also be run by hand
at any time (experiments that have not run yet are listed as such):

    python3 scripts/reproduce_summary.py [--tier cpu|gpu] [--runs runs] [--out FILE]

It reads what `ropelab ablate` wrote for each experiment (results.json: every run's best
validation value and, for translation, its test-split metrics; card.json for the length card),
sets the paper's number beside each result and states whether the paper's claim held at this
scale:

- held: the mean per-seed difference in the paper's direction has a 95% interval (Student t,
  paired by seed) above zero;
- not held: the interval is below zero (the opposite of the paper's claim);
- not separable: the interval contains zero, or there is only one seed.

It also checks the targets that make an experiment worth reading (the models learned the task):
a target that is missed is printed as missed, never hidden.
"""
import argparse
import json
import math
import os
import re
import sys

# Two-sided 95% quantiles of Student's t, by degrees of freedom (1..30).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(df):
    return T975[df - 1] if df <= len(T975) else 1.96 + 2.4 / df


def mean_interval(xs):
    """(mean, sample sd, low, high) of the 95% interval of the mean; None without values."""
    n = len(xs)
    if n == 0:
        return None
    m = sum(xs) / n
    if n == 1:
        return m, 0.0, math.nan, math.nan
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    h = t975(n - 1) * sd / math.sqrt(n)
    return m, sd, m - h, m + h


def verdict(diffs):
    """The paper's claim as held / not held / not separable from per-seed differences that are
    positive where the paper's claim holds."""
    s = mean_interval(diffs)
    if s is None:
        return "not run", None
    if len(diffs) < 2:
        return "not separable (one seed)", s
    if s[2] > 0:
        return "held", s
    if s[3] < 0:
        return "not held", s
    return "not separable", s


def better(word, a, b):
    """A paired verdict of a against b (verdict()'s word), in words."""
    return {"held": f"{a} better", "not held": f"{b} better"}.get(word, word)


def ordered_unique(xs):
    """The distinct values of xs, in order of first appearance."""
    return list(dict.fromkeys(xs))


class Results:
    """results.json of one ablation: values by (task, variant, setting, seed)."""

    def __init__(self, path):
        with open(path) as f:
            j = json.load(f)
        for r in j["runs"]:
            for key in ("task", "variant", "setting", "seed", "metric", "higher"):
                if key not in r:
                    raise KeyError(f"a run without '{key}'")
        self.runs = [r for r in j["runs"] if r.get("value") is not None]
        self.na = [r for r in j["runs"] if r.get("not_applicable")]
        self.baseline = j.get("baseline", "")

    def variants(self):
        return ordered_unique(r["variant"] for r in self.runs + self.na)

    def tasks(self):
        return ordered_unique(r["task"] for r in self.runs + self.na)

    def metric(self, task):
        for r in self.runs:
            if r["task"] == task:
                return r["metric"], r["higher"]
        return "", True

    def best_setting(self, task, variant):
        """The setting with the best mean over seeds (as sweep.md chooses it)."""
        _, higher = self.metric(task)
        by = {}
        for r in self.runs:
            if r["task"] == task and r["variant"] == variant:
                by.setdefault(r["setting"], []).append(r["value"])
        if not by:
            return None
        pick = max if higher else min
        return pick(by, key=lambda s: sum(by[s]) / len(by[s]))

    def by_seed(self, task, variant, test_metric=None):
        """seed -> value at the variant's best setting (validation value, or a test metric)."""
        s = self.best_setting(task, variant)
        out = {}
        for r in self.runs:
            if r["task"] == task and r["variant"] == variant and r["setting"] == s:
                if test_metric is None:
                    out[r["seed"]] = r["value"]
                elif test_metric in r.get("test", {}):
                    out[r["seed"]] = r["test"][test_metric]
        return out


def fmt_stat(s, scale=1.0, digits=3):
    if s is None:
        return "-"
    m, sd, lo, hi = (x * scale for x in s)
    if math.isnan(lo):
        return f"{m:.{digits}f} (1 seed)"
    return f"{m:.{digits}f} ± {sd:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def paired(a, b, higher):
    """Per-seed differences a - b over the seeds both have, signed so that positive = a better."""
    sign = 1.0 if higher else -1.0
    return [sign * (a[k] - b[k]) for k in sorted(a) if k in b]


# The paper's experiments, in the order reproduce.sh runs them. `claim`: (better, than) variants
# of one task; `source`: "valid" (each run's best validation value) or a test metric name.
EXPERIMENTS = [
    dict(key="mlm", title="MLM pre-training (paper Fig. 3 left)",
         cpu="mlm-cpu", gpu="mlm-gpu", tasks=[""], claim=("rope", "learned"), source="valid",
         paper="curve only: RoPE reaches a lower MLM loss than BERT's learned absolute positions "
               "at equal steps"),
    dict(key="charlm", title="Linear-attention character LM (paper Fig. 3 right)",
         cpu="charlm-linear-cpu", gpu=None, tasks=[""], claim=("rope-eq19", "no-position"),
         source="valid",
         paper="curve only: with RoPE (Eq. 19) the linear-attention LM reaches a lower loss"),
    dict(key="encoders", title="The shared encoders of Tables 2 and 5 (6000 MLM steps)",
         cpu="encoders-cpu", gpu=None, tasks=[""], claim=("rope", "learned"), source="valid",
         paper="curve only: RoPE reaches a lower MLM loss than BERT's learned absolute positions "
               "at equal steps"),
    dict(key="translation", title="Translation (paper Table 1)",
         cpu="translation-table1-cpu", gpu="translation-table1-gpu", tasks=[""],
         claim=("rope", "sinusoidal"), source="bleu",
         paper="WMT14 En-De test BLEU: sinusoidal 27.3, RoPE 27.5 (+0.2)",
         target=("every variant", "bleu", 18.0, "test BLEU (beam 4)")),
    dict(key="glue", title="GLUE-style fine-tuning (paper Table 2)",
         cpu="glue-cpu", gpu="glue-gpu", tasks=None, claim=("rope", "learned"), source="valid",
         paper="MRPC F1 RoFormer 89.5 vs BERT 88.9; SST-2 accuracy 90.7 vs 93.5 (RoFormer dev, "
               "BERT test server: not like for like); no CoLA in the paper",
         paper_direction={"mrpc": "rope", "sst2": "learned"},
         task_targets={"cola": 0.3, "mrpc": 0.8}),
    dict(key="cola-long", title="bible-cola with a longer budget (Table 2 follow-up)",
         cpu="cola-long-cpu", gpu=None, tasks=None, claim=("rope", "learned"), source="valid",
         paper="none (CoLA is not in the paper's Table 2); a word-order task, so it isolates "
               "the positions",
         paper_direction={}, task_targets={"": 0.3}, task_label="cola"),
    dict(key="rank", title="Long-text ranking against maximum length (paper Table 5)",
         cpu="rank-cpu", gpu="rank-gpu", tasks=None, claim="longer", variant="rope",
         source="valid",
         paper="CAIL2019-SCM test accuracy: maximum length 512 68.29, 1024 69.79",
         target=("best variant at the longest length", None, 0.75, "dev accuracy")),
    dict(key="card", title="Length-generalisation card (beyond the paper)",
         cpu="length-generalisation-cpu", gpu="length-generalisation-gpu", card=True,
         paper="no paper number: families trained short and tested at 1x to 8x"),
]


def section_pair(e, res):
    """A one-task experiment comparing two variants (MLM, char LM, translation)."""
    better, than = e["claim"]
    task = ""
    metric, higher = res.metric(task)
    lines = []
    variants = res.variants()
    test = e["source"] != "valid"
    head = f"| variant | validation {metric} (best per run) |"
    sep = "|:--|--:|"
    if test:
        head += f" test {e['source']} |"
        sep += "--:|"
    lines += [head + " seeds |", sep + "--:|"]
    for v in variants:
        val = res.by_seed(task, v)
        row = f"| {v} | {fmt_stat(mean_interval(list(val.values())))} |"
        if test:
            row += f" {fmt_stat(mean_interval(list(res.by_seed(task, v, e['source']).values())), digits=2)} |"
        lines.append(row + f" {len(val)} |")
    if test:
        a, b = res.by_seed(task, better, e["source"]), res.by_seed(task, than, e["source"])
        what, hi = f"test {e['source']}", True
    else:
        a, b = res.by_seed(task, better), res.by_seed(task, than)
        what, hi = f"validation {metric}", higher
    v, s = verdict(paired(a, b, hi))
    lines.append("")
    lines.append(f"Claim: {better} better than {than} on {what}. Per-seed difference "
                 f"({'higher' if hi else 'lower'} is better, positive = the paper's direction): "
                 f"{fmt_stat(s, digits=3)}. **{v}**.")
    if test:  # the validation metric too: another sample of the same question
        vv, vs = verdict(paired(res.by_seed(task, better), res.by_seed(task, than), higher))
        lines.append(f"On validation {metric} (each run's best): {fmt_stat(vs, digits=3)}, "
                     f"{vv}.")
    if "target" in e:
        who, key, goal, label = e["target"]
        got = {vv: mean_interval(list(res.by_seed(task, vv, key).values())) for vv in variants}
        met = all(g is not None and g[0] >= goal for g in got.values())
        lines.append(f"Target: {label} of at least {goal:g} for {who}: "
                     f"**{'met' if met else 'missed'}** (" +
                     ", ".join(f"{vv} {g[0]:.2f}" if g else f"{vv} -" for vv, g in got.items()) +
                     ").")
    return lines


def section_glue(e, res):
    better, than = e["claim"]
    lines = ["| task | metric | " + " | ".join(f"{v} (best lr)" for v in (than, better)) +
             " | paper's direction | difference in that direction | verdict |",
             "|:--|:--|--:|--:|:--|--:|:--|"]
    notes = []
    for t in res.tasks():
        metric, higher = res.metric(t)
        a, b = res.by_seed(t, better), res.by_seed(t, than)
        direction = e["paper_direction"].get(t)
        if direction is None:  # still show the paired difference, better - than
            word, s = "not in the paper", verdict(paired(a, b, higher))[1]
        else:
            d = paired(a, b, higher) if direction == better else paired(b, a, higher)
            word, s = verdict(d)
        name = t or e.get("task_label", "")
        def at(v):  # the best setting, where the experiment sweeps one
            setting = res.best_setting(t, v)
            return f" ({setting})" if setting else ""
        lines.append(f"| {name} | {metric} | {fmt_stat(mean_interval(list(b.values())))}"
                     f"{at(than)} | {fmt_stat(mean_interval(list(a.values())))}"
                     f"{at(better)} | "
                     f"{direction + ' better' if direction else '-'} | {fmt_stat(s)} | "
                     f"**{word}** |")
        goal = e["task_targets"].get(t)
        if goal is not None:
            means = [m[0] for m in (mean_interval(list(res.by_seed(t, v).values()))
                                    for v in {r["variant"] for r in res.runs if r["task"] == t})
                     if m]
            best = max(means, default=math.nan)
            notes.append(f"Target {name}: the best module's mean {metric} at least {goal:g}: "
                         f"**{'met' if best >= goal else 'missed'}** ({best:.3f}).")
    if any(e["paper_direction"].get(t) is None for t in res.tasks()):
        notes.append(f"For a task not in the paper, the difference is {better} - {than} "
                     f"(positive: {better} better).")
    return lines + [""] + notes


def section_rank(e, res):
    # Shortest to longest, whatever order the experiment ran them in (lenN names).
    tasks = res.tasks()
    if all(re.fullmatch(r"len\d+", t) for t in tasks):
        tasks = sorted(tasks, key=lambda t: int(t[3:]))
    variants = res.variants()
    lines = ["| variant | " + " | ".join(tasks) + " |", "|:--|" + "--:|" * len(tasks)]
    for v in variants:
        cells = []
        for t in tasks:
            vals = list(res.by_seed(t, v).values())
            na = any(r["task"] == t and r["variant"] == v for r in res.na)
            cells.append("n/a" if na and not vals else fmt_stat(mean_interval(vals)))
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    if len(tasks) >= 2:
        long, short = tasks[-1], tasks[-2]
        _, higher = res.metric(long)
        v = e["variant"]
        d = paired(res.by_seed(long, v), res.by_seed(short, v), higher)
        word, s = verdict(d)
        lines += ["", f"Claim: {v}'s accuracy is higher at {long} than at {short}. Per-seed "
                      f"difference: {fmt_stat(s)}. **{word}**."]
        for o in (o for o in variants if o != v):  # the same test for the others, and v - o
            ow, so = verdict(paired(res.by_seed(long, o), res.by_seed(short, o), higher))
            vw, sv = verdict(paired(res.by_seed(long, v), res.by_seed(long, o), higher))
            if so is None and sv is None:
                continue  # no seed to pair (n/a at these lengths)
            lines.append(f"{o}, {long} - {short}: {fmt_stat(so)}, {better(ow, long, short)}. "
                         f"At {long}, {v} - {o}: {fmt_stat(sv)}, {better(vw, v, o)}.")
        who, _, goal, label = e["target"]
        best = max((m[0] for m in (mean_interval(list(res.by_seed(long, vv).values()))
                                   for vv in variants) if m), default=math.nan)
        lines.append(f"Target: {label} of at least {goal:g} for the {who}: "
                     f"**{'met' if best >= goal else 'missed'}** ({best:.3f}).")
    return lines


def section_card(path):
    """The card's targets at 1x, then which families it separates from the experiment's
    baseline (its results.json, beside card.json) beyond the training size (paired by seed, 95%
    interval of the difference in exact match)."""
    with open(path) as f:
        entries = json.load(f)["entries"]
    with open(os.path.join(os.path.dirname(path), "results.json")) as f:
        baseline = json.load(f)["baseline"]
    exact = {}  # (probe, variant) -> {seed: [exact match per multiplier, None where n/a]}
    mults = {}
    for en in entries:
        if en["metric"] == "exact" and en["value"]:
            probe = en["task"].removeprefix("synthetic-")
            exact.setdefault((probe, en["variant"]), {})[en["seed"]] = en["value"]
            mults[probe] = en["multipliers"]
    at1 = {k: [v[0] for v in by.values() if v[0] is not None] for k, by in exact.items()}
    at1 = {k: xs for k, xs in at1.items() if xs}
    tasks = ordered_unique(t for t, _ in at1)
    lines = ["| probe | best family at 1x | exact match at 1x (mean over seeds) | learned (>= 90%) |",
             "|:--|:--|--:|:--|"]
    learned = 0
    best_of = {}
    for t in tasks:
        v, xs = max(((v, xs) for (tt, v), xs in at1.items() if tt == t),
                    key=lambda p: sum(p[1]) / len(p[1]))
        m = sum(xs) / len(xs)
        best_of[t] = m
        learned += m >= 0.9
        lines.append(f"| {t} | {v} | {100 * m:.1f}% | {'yes' if m >= 0.9 else 'no'} |")
    cr = [best_of[t] for t in ("copy", "reverse") if t in best_of]
    lines += ["", f"Targets: copy and reverse at least 95% at 1x for the best family: "
                  f"**{'met' if len(cr) == 2 and min(cr) >= 0.95 else 'missed'}**; at least "
                  f"three probes learned at 1x by some family: "
                  f"**{'met' if learned >= 3 else 'missed'}** ({learned})."]
    seps = []
    for t in ordered_unique(t for t, _ in exact):
        base = exact.get((t, baseline))
        if base is None:
            continue
        for i, mult in enumerate(mults[t]):
            if mult not in (2, 4):
                continue
            for (tt, v), by in exact.items():
                if tt != t or v == baseline:
                    continue
                a = {k: x[i] for k, x in by.items() if x[i] is not None}
                b = {k: x[i] for k, x in base.items() if x[i] is not None}
                word, st = verdict(paired(a, b, True))
                if word in ("held", "not held"):
                    better = v if word == "held" else baseline
                    seps.append(f"| {t} | {mult}x | {v} - {baseline} | "
                                f"{fmt_stat(st, 100, 1)} | {better} |")
    lines += ["", f"Separated from {baseline} beyond the training size (exact match in points, "
                  "paired by seed, 95% interval excluding zero):", ""]
    if seps:
        lines += ["| probe | size | difference | mean ± sd [95% CI] | better |",
                  "|:--|:--|:--|--:|:--|"] + seps
    else:
        lines.append("none: no family differs from the baseline at 2x or 4x.")
    lines += ["", "The full card (1x-8x, every family) is card.md."]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tier", choices=["cpu", "gpu"], default="cpu")
    ap.add_argument("--runs", default="runs", help="the experiments' out_dir (default: runs)")
    ap.add_argument("--out", default=None,
                    help="summary file (default: RUNS/reproduce/summary.md)")
    a = ap.parse_args()
    out = a.out or os.path.join(a.runs, "reproduce", "summary.md")
    md = [f"# ropelab: the paper's experiments, {a.tier.upper()} tier", "",
          "Each section: the experiment's result (mean ± sample std [95% interval] over seeds), "
          "the paper's number, and whether the paper's claim held at this scale: **held** (the "
          "95% interval of the paired per-seed difference is on the paper's side of zero), "
          "**not held** (on the other side) or **not separable** (it contains zero, or one "
          "seed). Targets say whether the models learned the task at all.", ""]
    for e in EXPERIMENTS:
        name = e[a.tier]
        md += [f"## {e['title']}", ""]
        if name is None:
            md += [f"No {a.tier.upper()} experiment for this one.", ""]
            continue
        d = os.path.join(a.runs, name)
        md += [f"Experiment `experiments/{name}.yaml`, results in `{d}/`. Paper: {e['paper']}.",
               ""]
        f = os.path.join(d, "card.json" if e.get("card") else "results.json")
        if not os.path.exists(f):
            md += [f"Not run yet (no {f}).", ""]
            continue
        try:
            if e.get("card"):
                md += section_card(f)
            else:
                res = Results(f)
                if "paper_direction" in e:  # fine-tuning tasks, each with its own direction
                    md += section_glue(e, res)
                elif e["key"] == "rank":
                    md += section_rank(e, res)
                else:
                    md += section_pair(e, res)
        except (KeyError, ValueError, TypeError, IndexError, OSError) as ex:
            print(f"reproduce_summary: {f}: unreadable results ({type(ex).__name__}: {ex})",
                  file=sys.stderr)
            return 2
        md.append("")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(md))
    os.replace(tmp, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
