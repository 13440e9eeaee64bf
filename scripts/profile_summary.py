#!/usr/bin/python3
"""Where a training step's time goes, from a libtorch profiler trace of `ropelab bench`:

  ROPELAB_PROFILE=trace.json build/bin/ropelab bench --point train \\
      --config configs/bench/lm.yaml --steps 3 train.precision=fp32
  python3 scripts/profile_summary.py trace.json --steps 3

Self time (an op's time less its children's) per category: matmul, attention (softmax and
masking), loss (cross-entropy), activations (GELU/ReLU with dropout), norms, dropout, optimizer,
casts and copies, position (RoPE tables, rotation), other. Prints a Markdown table in ms per
step; --top N also lists the N largest ops.
"""
import argparse
import collections
import json

CATEGORIES = [  # first match wins
    ("matmul", ("aten::mm", "aten::bmm", "aten::addmm", "aten::matmul", "aten::linear",
                "LoopMatmul", "SgemmLinear", "aten::_mkldnn", "mkldnn")),
    ("attention", ("MaskedSoftmax", "aten::_softmax_backward_data", "aten::masked_fill")),
    ("loss", ("CrossEntropy", "aten::_softmax", "aten::log_softmax", "aten::nll")),
    ("activations", ("ActDropout", "aten::gelu", "aten::relu", "threshold_backward")),
    ("norms", ("layer_norm",)),
    ("dropout", ("DropoutAdd", "dropout", "bernoulli")),
    ("optimizer", ("addcdiv", "addcmul", "aten::sqrt", "Optimizer", "AdamW", "aten::norm",
                   "aten::clamp")),
    ("casts and copies", ("aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous",
                          "aten::clone", "aten::cat", "ToCopyBackward")),
    ("position", ("aten::flip", "rope", "Rope", "aten::cos", "aten::sin")),
]


def category(name):
    for cat, keys in CATEGORIES:
        if any(k in name for k in keys):
            return cat
    return "other"


def self_times(path):
    d = json.load(open(path))
    events = [e for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("ph") == "X"]
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[e.get("tid")].append(e)
    own, total = collections.Counter(), 0.0
    for es in by_thread.values():
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in es:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                stack[-1]["child"] = stack[-1].get("child", 0) + e["dur"]
            else:
                total += e["dur"]
            stack.append(e)
        for e in es:
            own[e["name"]] += e["dur"] - e.get("child", 0)
    return own, total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace")
    p.add_argument("--steps", type=float, default=1, help="profiled steps in the trace")
    p.add_argument("--top", type=int, default=0, help="also list the N largest ops")
    a = p.parse_args()
    own, total = self_times(a.trace)
    cats = collections.Counter()
    for name, us in own.items():
        cats[category(name)] += us
    ms = lambda us: us / 1e3 / a.steps
    print("| category | ms per step | share |")
    print("|:--|--:|--:|")
    for cat, us in cats.most_common():
        print(f"| {cat} | {ms(us):.0f} | {100 * us / total:.0f}% |")
    print(f"| **step (profiled)** | {ms(total):.0f} | 100% |")
    if a.top:
        print()
        for name, us in own.most_common(a.top):
            print(f"{ms(us):9.1f} ms  {name}")


if __name__ == "__main__":
    main()
