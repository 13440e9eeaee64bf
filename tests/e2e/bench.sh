# `ropelab bench` through the real CLI at a tiny size: every section but data (which would
# train a tokenizer), the eager PyTorch reference side by side, the table, bench.md and
# bench.json with the figures the README and BENCHMARKS.md quote; and bad input (an unknown
# section, a bad override) exits 2 with one line and writes nothing.
source "$(dirname "$0")/lib.sh"
cd "$WORK"
CFG="$ROPELAB_SRC/configs/bench"
tiny=(model.d_model=32 model.n_layers=1 model.n_decoder_layers=1 model.n_heads=2 model.d_ff=64
      task.seq_len=32 train.batch_size=2 data.tokenizer.vocab_size=100)

expect_exit 0 "$ROPELAB" bench --configs "$CFG" --out b --steps 1 --rounds 1 --threads 1 \
  --sections machine,train,positions,attention,long,layouts,decode --compare-pytorch \
  --pytorch-variants eager --lengths 32,64 --attention-tokens 128 --long-lengths 32,64 \
  --long-window 16 --context-lengths 32,64 --layout-lengths 32,64 --layout-window 8 \
  --decode-lengths 8,16 "${tiny[@]}"
for h in "## Machine" "## Training" "## Position modules" "## Attention kernels" "## Decoding" \
         "## Long context" "| T5 tokens/s |" "sliding window 16" "2 ranks a sequence" \
         "## Layouts" \
         "| window 8 tokens/s |" \
         "## Goals" "ropelab / best" "| matmul share | rest ms/step | matmul efficiency | steal |" \
         "The yardstick of MFU in each dtype is the faster of its two rows" \
         "best PyTorch" "the best PyTorch (lm, fp32)" "| xpos |" \
         "- ropelab: BLAS core" "OpenMP wait" "written: b/bench.md"; do
  expect_in "$h"
done
expect_not_in "failed"
# which kernel ran the bf16 matmuls, or that oneDNN has none for this CPU (AVX2: util/gemm.h)
grep -q -e "bf16 matmuls ran on oneDNN's" -e "oneDNN has no bf16 gemm for this CPU" b/bench.md ||
  fail "bench.md names no bf16 matmul kernel"
FAMILIES=$("$ROPELAB" config --schema | sed -n 's/.*# position module: //p' | head -1) \
python3 - <<'PY' || fail "bench.json lacks figures"
import json, math, os
j = json.load(open("b/bench.json"))
s = j["summary"]
for m in ("lm", "mlm", "translation"):
    for p in ("fp32", "bf16"):
        r = s["train"][m][p]
        assert r["tokens_per_s"] > 0 and r["ratio"] > 0, (m, p, r)
        assert r["best_pytorch"].startswith("PyTorch ") and r["best_pytorch"].endswith(" eager"), r
        assert all(x > 0 for x in r["pytorch"].values()), r
        assert 0 < r["mfu"] < 1.5, (m, p, r)
        # the step's split: a profiled step's matmul self time against the unprofiled step
        assert 0 < r["matmul_share"] < 1 and r["non_matmul_ms"] > 0, (m, p, r)
        # MFU = the matmuls' efficiency x their share of the step
        assert r["matmul_efficiency"] > r["mfu"], (m, p, r)
        assert abs(r["matmul_efficiency"] * r["matmul_share"] - r["mfu"]) < 1e-9, (m, p, r)
        # the hypervisor's share of the machine's CPU time in the timed steps (/proc/stat; none
        # where the steps took less than a tick)
        assert 0 <= r.get("steal_share", 0) <= 1, (m, p, r)
assert s["machine"]["bf16_matmul_kernel"] != "" and isinstance(s["machine"]["amx"], bool), s["machine"]
# MFU's yardstick in each dtype: the faster of libtorch's matmul and the dense layers' gemm (in
# bf16 also float32's where the bf16 products are widened to float32: no oneDNN bf16 gemm)
mc = s["machine"]
assert mc["fp32_gflops"] == max(mc["fp32_blas_gflops"], mc["fp32_dense_gflops"]) > 0, mc
bf16_rows = [mc["bf16_mm_gflops"], mc["bf16_dense_gflops"]]
if not mc["onednn_bf16"]:
    bf16_rows.append(mc["fp32_gflops"])
assert mc["bf16_gflops"] == max(bf16_rows) > 0, mc
# every position family the schema knows (a new family is benched as it is added)
families = set(os.environ["FAMILIES"].split(", "))
assert {"none", "sinusoidal", "rope", "t5", "alibi"} <= families, families
assert set(s["positions"]) == families, (set(s["positions"]) ^ families)
assert s["positions"]["none"]["cost_vs_none"] == 0
for L in ("32", "64"):
    for k in ("softmax", "linear"):
        assert s["attention"][L][k]["tokens_per_s"] > 0 and s["attention"][L][k]["peak_train_mb"] >= 0
for L in ("32", "64"):
    for pos in ("rope", "t5", "alibi"):
        r = s["long"][L][pos]
        assert r["tokens_per_s"] > 0 and r["peak_rss_mb"] > 0 and r["position"] == pos, r
assert s["long"]["kernel"]["global"]["window"] == 0 and s["long"]["kernel"]["window"]["window"] == 16
assert s["long"]["kernel"]["window"]["step_s"] > 0
for L in ("32", "64"):  # one rank against 2 ranks a sequence (launch: each rank's peak)
    cp = s["long"]["context_parallel"][L]
    assert cp["one"]["tokens_per_s"] > 0 and "rank_peak_rss_mb" not in cp["one"], cp
    assert cp["two"]["tokens_per_s"] > 0 and cp["two"]["context_parallel"] == 2, cp
    assert len(cp["two"]["rank_peak_rss_mb"]) == 2 and min(cp["two"]["rank_peak_rss_mb"]) > 0, cp
for L in ("32", "64"):
    for k, w in (("global", 0), ("local", 8)):
        r = s["layouts"][L][k]
        assert r["tokens_per_s"] > 0 and r["peak_rss_mb"] > 0 and r["window"] == w, r
assert not any("error" in p for p in j["points"]), [p for p in j["points"] if "error" in p]
# the training points' profiled step (the median share of 3): its own times and matmul share,
# which carries to the unprofiled step's matmul_s; its largest ops by self time, ropelab's
# kernels by name
for p in j["points"]:
    if "profiled_step_s" in p:
        assert 0 < p["profiled_matmul_s"] < p["profiled_step_s"], p
        assert abs(p["matmul_share"] - p["profiled_matmul_s"] / p["profiled_step_s"]) < 1e-9, p
        assert abs(p["matmul_s"] - p["matmul_share"] * p["step_s"]) < 1e-9, p
        assert "steal_share" in p and (p["steal_share"] is None or 0 <= p["steal_share"] <= 1), p
tops = [dict(p["top_ops_ms"]) for p in j["points"] if p.get("top_ops_ms")]
assert tops and all(ms >= 0 for t in tops for ms in t.values()), tops[:1]
fused = ("ropelab::masked_softmax", "ropelab::cross_entropy", "ropelab::linear_cross_entropy",
         "ropelab::bf16_attention")
assert any(k in t for k in fused for t in tops), tops
# Every point ran in its own process and kept its log: the matmul; per model, ropelab's fp32
# and bf16, PyTorch's fp32 (PASSIVE) and bf16 (PASSIVE and libgomp's default spin); one per
# position family; 4 attention points; 2 long lengths x 3 families (no SDPA peer: this PyTorch's is
# 1.x or the eager variant only), 2 kernel points and 2 context lengths x 2; 2 layout lengths x 2;
# 2 decode lengths.
assert len(j["points"]) == 1 + 3 * (2 + 1 + 2) + len(families) + 4 + 2 * 3 + 2 + 4 + 4 + 2, len(j["points"])
PY
[[ -s b/logs/000.log.json ]] || fail "no per-point output kept"

# Bad input: one line, exit 2, nothing written.
expect_exit 2 "$ROPELAB" bench --configs "$CFG" --out c --sections machine,nope
expect_in "error: bench: unknown section 'nope'"
[[ $(wc -l <<<"$OUT") -eq 1 ]] || fail "more than one line: $OUT"
expect_exit 2 "$ROPELAB" bench --configs "$CFG" --out c model.d_modle=3
expect_in "model.d_modle"
expect_exit 2 "$ROPELAB" bench --configs nowhere --out c
expect_in "nowhere/lm.yaml"
expect_exit 2 "$ROPELAB" bench --configs "$CFG" --out c --compare-pytorch --pytorch-root /nowhere
expect_in "bench --pytorch-root /nowhere: no usr/bin/python3 there"
[[ $(wc -l <<<"$OUT") -eq 1 ]] || fail "more than one line: $OUT"
expect_exit 2 "$ROPELAB" bench --configs "$CFG" --out c --pytorch-root /nowhere
expect_in "needs --compare-pytorch"
expect_exit 2 "$ROPELAB" bench --configs "$CFG" --out c --compare-pytorch --pytorch-variants jit
expect_in "jit"
[[ ! -e c ]] || fail "a refused bench wrote c/"
echo "bench e2e: OK"
