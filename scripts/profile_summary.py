#!/usr/bin/python3
"""Where a training step's time goes, from a libtorch profiler trace of `ropelab bench`:

  ROPELAB_PROFILE=trace.json build/bin/ropelab bench --point train \\
      --config configs/bench/lm.yaml --steps 3 train.precision=fp32
  python3 scripts/profile_summary.py trace.json --steps 3

Self time (an op's time less its children's) per category: matmul, attention (softmax and
masking), loss (cross-entropy), activations (GELU/ReLU with dropout), norms, dropout, optimizer,
casts and copies, position (RoPE tables, rotation), other. Prints a Markdown table in ms per
step; --top N also lists the N largest ops.

A trace of a GPU run (ROPELAB_PROFILE with run.device=cuda: Kineto, with CUDA activity) is
summarised by its kernels instead: each kernel's time on the device by category (matmul,
attention, loss, norms, optimizer, elementwise, reductions, copies), the time the GPU sat idle
between kernels (launch overhead, host work, synchronisation), and with --top N the N aten ops
whose kernels took longest (each kernel counted under the innermost op that launched it).
"""
import argparse
import collections
import json

CATEGORIES = [  # first match wins
    # ropelab::gemm: util::sgemm's oneDNN calls, recorded inside SgemmLinear and LoopMatmul
    ("matmul", ("aten::mm", "aten::bmm", "aten::addmm", "aten::matmul", "aten::linear",
                "LoopMatmul", "SgemmLinear", "ropelab::gemm", "aten::_mkldnn", "mkldnn")),
    # ropelab's fused kernels record their forward passes as ropelab::<name>
    ("attention", ("MaskedSoftmax", "ropelab::masked_softmax", "aten::_softmax_backward_data",
                   "aten::masked_fill")),
    ("loss", ("CrossEntropy", "ropelab::cross_entropy", "aten::_softmax", "aten::log_softmax",
              "aten::nll")),
    ("activations", ("ActDropout", "ropelab::act_dropout", "aten::gelu", "aten::relu",
                     "threshold_backward")),
    ("norms", ("layer_norm",)),
    ("dropout", ("DropoutAdd", "dropout", "bernoulli")),
    ("optimizer", ("addcdiv", "addcmul", "aten::sqrt", "Optimizer", "AdamW", "ropelab::adamw",
                   "aten::norm", "aten::clamp")),
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


KERNEL_CATEGORIES = [  # by the kernel's name, first match wins (lower case)
    ("attention", ("flash", "fmha", "cudnn", "attention", "sdpa", "softmax_warp")),
    ("matmul", ("gemm", "cutlass", "nvjet", "xmma", "cublas", "sm90_", "sm80_", "splitk")),
    ("optimizer", ("multi_tensor", "adam", "fused_adamw")),
    ("norms", ("layer_norm", "layernorm", "rms_norm")),
    ("loss", ("log_softmax", "nll_loss", "cross_entropy", "softmax")),
    ("copies", ("copy", "memcpy", "memset", "cat_", "catarray", "index", "gather", "scatter")),
    ("reductions", ("reduce",)),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "pointwise", "triton")),
]
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def kernel_category(name):
    low = name.lower()
    for cat, keys in KERNEL_CATEGORIES:
        if any(k in low for k in keys):
            return cat
    return "other"


def gpu_summary(events, steps, top):
    """Kernel time per category, GPU idle time, and the ops whose kernels took longest."""
    kernels = [e for e in events if e.get("cat", "").lower() in GPU_CATS]
    t0 = min(e["ts"] for e in kernels)
    t1 = max(e["ts"] + e["dur"] for e in kernels)
    busy, end = 0.0, t0  # the union of the kernels' intervals (streams can overlap)
    for e in sorted(kernels, key=lambda e: e["ts"]):
        start, stop = max(e["ts"], end), e["ts"] + e["dur"]
        if stop > start:
            busy += stop - start
            end = stop
    cats = collections.Counter()
    for e in kernels:
        cats[kernel_category(e["name"])] += e["dur"]
    ms = lambda us: us / 1e3 / steps
    span = t1 - t0
    print("| GPU time | ms per step | share of the span |")
    print("|:--|--:|--:|")
    for cat, us in cats.most_common():
        print(f"| {cat} | {ms(us):.1f} | {100 * us / span:.0f}% |")
    print(f"| idle between kernels | {ms(span - busy):.1f} | {100 * (span - busy) / span:.0f}% |")
    print(f"| **first kernel to last** | {ms(span):.1f} | 100% |")
    if not top:
        return
    # The op that launched each kernel: the innermost cpu_op around its launch (the runtime
    # call with the same correlation id, on the same thread).
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat", "").lower() in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    ops = collections.defaultdict(list)
    for e in events:
        if e.get("cat", "").lower() == "cpu_op":
            ops[e.get("tid")].append(e)
    by_op = collections.Counter()
    for e in kernels:
        launch = launches.get(e.get("args", {}).get("correlation"))
        name = "(no launching op found)"
        if launch is not None:
            inner = [o for o in ops[launch.get("tid")]
                     if o["ts"] <= launch["ts"] and launch["ts"] + launch["dur"] <= o["ts"] + o["dur"]]
            if inner:
                name = min(inner, key=lambda o: o["dur"])["name"]
        by_op[name] += e["dur"]
    print()
    print(f"The {top} ops whose kernels took longest (ms of GPU time per step):")
    for name, us in by_op.most_common(top):
        print(f"{ms(us):9.2f} ms  {name}")
    print()
    print(f"The {top} longest kernels (ms per step):")
    per_kernel = collections.Counter()
    for e in kernels:
        per_kernel[e["name"]] += e["dur"]
    for name, us in per_kernel.most_common(top):
        print(f"{ms(us):9.2f} ms  {name[:110]}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("trace")
    p.add_argument("--steps", type=float, default=1, help="profiled steps in the trace")
    p.add_argument("--top", type=int, default=0, help="also list the N largest ops")
    a = p.parse_args()
    d = json.load(open(a.trace))
    events = [e for e in (d["traceEvents"] if isinstance(d, dict) else d) if e.get("ph") == "X"]
    if any(e.get("cat", "").lower() in GPU_CATS for e in events):
        gpu_summary(events, a.steps, a.top)
        return
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
