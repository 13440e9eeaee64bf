#!/usr/bin/env bash
# Checks ropelab on a GPU machine: the CUDA build against python3's PyTorch (a CUDA wheel), what
# `ropelab info` sees, the gpu test tier, and (with --bench) the GPU benchmark against eager and
# compiled PyTorch on the same GPU. Writes a report to OUT/report.md with every log beside it
# (default OUT: runs/platform/gpu-DATE).
#
#   bash scripts/check_gpu.sh                  # build + info + ctest -L gpu
#   bash scripts/check_gpu.sh --bench          # and the bench (a few minutes more)
#   bash scripts/check_gpu.sh --deps DIR       # a machine without the libraries: DIR holds the
#                                              # Debian 12 .debs of scripts/gpu_deps.sh
#   # a lease of 15 minutes of GPU time in all: everything, ending within 9.5 minutes (it took
#   # 5.6 minutes on an H200 on 2026-11-28; a build there took 125 s on one machine, over 173 on another)
#   bash scripts/check_gpu.sh --deps DIR --bench --profile --deadline 570
#
# Options:
#   --deps DIR     unpack DIR/*.deb into a private prefix (never into /) and build against it;
#                  DIR/fallback/*.deb are used only for libraries the system lacks (libcurl)
#   --bench        run `ropelab bench --sections machine,train --models lm,lm-large
#                  --precisions bf16 --compare-pytorch` on the GPU
#   --bench-steps N  timed steps per bench figure (default 10)
#   --bench-models M   the bench's --models (default lm-large,lm)
#   --bench-variants V the bench's --pytorch-variants (default "compile-sdpa compile sdpa eager":
#                  the compiled ones first, while torch.compile's caches are warm)
#   --profile      where the time of ropelab's lm-large bf16 step goes on the GPU: libtorch's
#                  Kineto profiler with CUDA activity (ROPELAB_PROFILE), summarised per kernel
#                  category, idle time and launching op by scripts/profile_summary.py
#   --deadline S   end within S seconds: a section that would run past it is stopped, and the
#                  ones after it are skipped, each with a line in the report (for a timed lease)
#   --full-build   build every target (the CPU test tiers too), not only the ones this check runs
#   --out DIR      where the report and logs go
# The build is `ROPELAB_SKIP_APT=1 bash scripts/setup.sh` (the setup script picks the CUDA
# libtorch by itself on a machine with an NVIDIA GPU), into build/: by default only the targets
# this check runs (ropelab, its SentencePiece module, the gpu tier). With --bench and the compile
# variant, torch.compile's caches are warmed on the lm-large shape while it builds, so that the
# bench itself spends its time measuring.
set -uo pipefail
usage() { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; }

deps="" bench=0 bench_steps=10 out="" profile=0 bench_models=lm-large,lm deadline=0 full_build=0
bench_variants="compile-sdpa compile sdpa eager"
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --deps) deps="$2"; shift 2 ;;
    --bench) bench=1; shift ;;
    --bench-steps) bench_steps="$2"; shift 2 ;;
    --bench-models) bench_models="$2"; shift 2 ;;
    --bench-variants) bench_variants="$2"; shift 2 ;;
    --profile) profile=1; shift ;;
    --deadline) deadline="$2"; shift 2 ;;
    --full-build) full_build=1; shift ;;
    --out) out="$2"; shift 2 ;;
    *) echo "check_gpu: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$bench_steps" =~ ^[1-9][0-9]*$ ]] || { echo "check_gpu: --bench-steps takes a positive number" >&2; exit 2; }
[[ "$deadline" =~ ^[0-9]+$ ]] || { echo "check_gpu: --deadline takes a number of seconds" >&2; exit 2; }
for m in ${bench_models//,/ }; do
  [[ $m =~ ^(lm|mlm|translation|lm-large)$ ]] ||
    { echo "check_gpu: --bench-models: '$m' is not one of lm, mlm, translation, lm-large" >&2; exit 2; }
done
for v in $bench_variants; do
  [[ $v =~ ^(eager|sdpa|compile|compile-sdpa)$ ]] ||
    { echo "check_gpu: --bench-variants: '$v' is not one of eager, sdpa, compile, compile-sdpa" >&2; exit 2; }
done
if [[ -n "$deps" ]] && ! compgen -G "$deps/*.deb" >/dev/null; then
  echo "check_gpu: --deps $deps: no .deb files there (bash scripts/gpu_deps.sh DIR makes them)" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
out=${out:-runs/platform/gpu-$(date +%F)}
mkdir -p "$out"
report="$out/report.md"
: >"$report"
note() { echo "$*" | tee -a "$report"; }
# cap N: N seconds, or fewer where --deadline leaves fewer (0: no time left).
cap() {
  local n=$1 left
  ((deadline > 0)) || { echo "$n"; return; }
  left=$((deadline - SECONDS - 5))
  ((left < 0)) && left=0
  echo $((n < left ? n : left))
}
section() {  # section TITLE LOG LIMIT CMD...: runs CMD for at most LIMIT s (capped by --deadline)
  local title="$1" log="$2" limit
  limit=$(cap "$3")
  shift 3
  if ((limit < 10)); then
    note "- $title: skipped, --deadline $deadline reached"
    return 1
  fi
  local t0=$SECONDS rc
  timeout "$limit" "$@" >"$log" 2>&1
  rc=$?
  if ((rc == 124)); then
    note "- $title: stopped after $((SECONDS - t0)) s, its limit (log: $log)"
  else
    note "- $title: exit $rc in $((SECONDS - t0)) s (log: $log)"
  fi
  return $rc
}

if [[ -n "$deps" ]]; then
  prefix=/tmp/ropelab-deps
  rm -rf "$prefix" && mkdir -p "$prefix"
  for f in "$deps"/*.deb; do dpkg -x "$f" "$prefix"; done
  lib="$prefix/usr/lib/x86_64-linux-gnu"
  # Debian's libhdf5 links libcurl; a system without it takes the bundled one.
  if [[ -d "$deps/fallback" ]] && ! ldconfig -p | grep -q 'libcurl.so.4 '; then
    mkdir -p "$prefix/fallback"
    for f in "$deps"/fallback/*.deb; do dpkg -x "$f" "$prefix/fallback"; done
    export LD_LIBRARY_PATH="$prefix/fallback/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  export CMAKE_PREFIX_PATH="$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export CPATH="$prefix/usr/include:$prefix/usr/include/hdf5/serial${CPATH:+:$CPATH}"
  export LD_LIBRARY_PATH="$lib:$lib/hdf5/serial${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LIBRARY_PATH="$lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
fi

# The CUDA toolkit (a CUDA libtorch's CMake package looks for nvcc).
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi

commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
[[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] && commit="$commit + uncommitted changes"
note "# ropelab on a GPU: $(date -u +'%F %H:%M') UTC, commit $commit"
note ""
note "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null ||
  echo 'none found (nvidia-smi): a CPU build, and the gpu tier reports SKIPPED')"
note "- PyTorch: $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -1)"
note "- nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none); compiler: $(c++ --version | head -1)"

rc=0
build_ok=1
targets="ropelab ropelab_spm ropelab_gpu_tests"
((full_build)) && targets=""
# The large shape as scripts/bench_pytorch.py's arguments (empty without PyTorch on a GPU).
large=()
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  read -r -a large <<<"$(python3 -c '
import yaml
c = yaml.safe_load(open("configs/bench/lm-large.yaml"))
m, t = c["model"], c["train"]
print("--model lm --precision bf16 --device cuda --d-model", m["d_model"], "--n-layers",
      m["n_layers"], "--n-heads", m["n_heads"], "--d-ff", m["d_ff"], "--vocab",
      c["data"]["tokenizer"]["vocab_size"], "--seq-len", c["task"]["seq_len"], "--batch",
      t["batch_size"], "--dropout", m["dropout"])' 2>/dev/null)"
fi
# torch.compile's caches (Inductor's graphs, Triton's kernels), warmed on the large shape while
# the build keeps the CPUs busy; waited for before anything is timed.
warm_pid=""
if ((${#large[@]})) && { ((profile)) || { ((bench)) && [[ " $bench_variants " == *" compile"* &&
  ",$bench_models," == *",lm-large,"* ]]; }; }; then
  (
    for v in compile-sdpa compile; do
      timeout "$(cap 400)" python3 - "${large[@]}" --steps 1 --variant "$v" <scripts/bench_pytorch.py
    done
  ) >"$out/compile-warmup.log" 2>&1 &
  warm_pid=$!
fi
section "build (scripts/setup.sh${targets:+, targets: $targets})" "$out/build.log" 1800 \
  env ROPELAB_SKIP_APT=1 ROPELAB_CMAKE_ARGS="${ROPELAB_CMAKE_ARGS:-}" ROPELAB_BUILD_TARGETS="$targets" \
  bash scripts/setup.sh || build_ok=0
if [[ -n "$warm_pid" ]]; then
  t0=$SECONDS
  wait "$warm_pid"
  note "- torch.compile warm-up (lm-large, 1 step, during the build): exit $?, waited $((SECONDS - t0)) s after the build (log: $out/compile-warmup.log)"
fi
[[ -f build/last-configure.log ]] && grep -E "libtorch|CUDA lib|NCCL|Gloo|OpenMP:|fmt" build/last-configure.log |
  sed 's/^/    /' | tee -a "$report"
if [[ $build_ok -eq 0 ]]; then
  rc=1
  note ""
  note "The build failed; its errors:"
  grep -E -A3 "error|Error|FAILED" "$out/build.log" | head -40 | tee -a "$report"
  # Whatever builds still gets checked (a failing target of another tier must not hide the rest).
  if [[ -f build/build.ninja ]]; then
    section "build, keeping going" "$out/build-k.log" 1800 cmake --build build -j "$(nproc)" -- -k 0
  fi
  [[ -x build/bin/ropelab && -x build/bin/ropelab_gpu_tests ]] || exit 1
fi
section "ropelab info" "$out/info.log" 120 build/bin/ropelab info || rc=1
sed 's/^/    /' "$out/info.log" >>"$report"
# A test binary that crashes leaves its backtrace in $TMPDIR/ropelab-crash-<pid>.txt: here, each
# frame of our binaries then named by addr2line.
crash_dir="$PWD/$out/tmp"
mkdir -p "$crash_dir"
section "ctest -L gpu" "$out/ctest-gpu.log" 900 env TMPDIR="$crash_dir" \
  ctest --test-dir build -L gpu --output-on-failure --timeout 300 -j 8 || rc=1
grep -E "tests passed|tests failed|\*\*\*Failed|Not Run" "$out/ctest-gpu.log" | sed 's/^/    /' | tee -a "$report"
for f in "$crash_dir"/ropelab-crash-*.txt; do
  [[ -e $f ]] || continue
  note "  $(basename "$f"):"
  while IFS= read -r line; do
    echo "$line"
    if [[ $line =~ ^([^\(]+)\(\+(0x[0-9a-f]+)\) ]] && [[ ${BASH_REMATCH[1]} == *bin/ropelab* ]]; then
      addr2line -Cfpe "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" 2>/dev/null | sed 's/^/    at /'
    fi
  done <"$f" | sed 's/^/      /' | tee -a "$report"
done
if [[ $profile -eq 1 ]]; then
  # One process: one warm-up step, then 3 profiled steps of the GPU shape (Kineto, CUDA activity).
  section "profile (libtorch's Kineto profiler, 3 steps of lm-large bf16)" "$out/profile.log" 300 \
    env ROPELAB_PROFILE="$out/trace.json" build/bin/ropelab bench --point train \
    --config configs/bench/lm-large.yaml --steps 3 train.precision=bf16 run.device=cuda || rc=1
  summarize() {  # summarize TRACE LOG: the step's figures and where its GPU time went
    [[ -f "$1" ]] || return
    tail -1 "$2" | sed 's/^/    step: /' | tee -a "$report"
    python3 scripts/profile_summary.py "$1" --steps 3 --top 15 2>&1 | sed 's/^/    /' |
      tee -a "$report"
    gzip -f "$1"  # about a tenth of the size, and chrome://tracing reads it
  }
  summarize "$out/trace.json" "$out/profile.log"
  # The same shape in PyTorch, for a kernel-by-kernel comparison.
  if ((${#large[@]})); then
    for v in sdpa compile-sdpa; do
      section "profile of PyTorch $v (torch.profiler, 3 steps of lm-large bf16)" \
        "$out/profile-pytorch-$v.log" 300 python3 - "${large[@]}" --steps 3 --variant "$v" \
        --profile "$out/trace-pytorch-$v.json" <scripts/bench_pytorch.py || rc=1
      summarize "$out/trace-pytorch-$v.json" "$out/profile-pytorch-$v.log"
    done
  fi
fi
if [[ $bench -eq 1 ]]; then
  section "bench" "$out/bench.log" "${ROPELAB_BENCH_TIMEOUT:-900}" build/bin/ropelab bench \
    --sections machine,train --models "$bench_models" --precisions bf16 --compare-pytorch \
    --pytorch-variants $bench_variants --python "$(command -v python3)" --rounds 1 \
    --steps "$bench_steps" --out "$out/bench" run.device=cuda || rc=1
  if [[ -f "$out/bench/bench.md" ]]; then
    cat "$out/bench/bench.md" >>"$report"
  else  # stopped early: every figure measured so far, one JSON object per line
    for f in "$out"/bench/logs/*.json; do [[ -f "$f" ]] && tail -1 "$f"; done >"$out/bench-points.jsonl"
    note "- bench stopped early; its figures so far: $out/bench-points.jsonl"
  fi
fi
note ""
note "check_gpu: exit $rc"
exit $rc
