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
#   # 15 minutes of GPU time in all (build ~4, gpu tier ~2, then the figures still missing):
#   bash scripts/check_gpu.sh --deps DIR --bench --bench-models lm-large \
#        --bench-variants "compile sdpa" --profile
#
# Options:
#   --deps DIR     unpack DIR/*.deb into a private prefix (never into /) and build against it;
#                  DIR/fallback/*.deb are used only for libraries the system lacks (libcurl)
#   --bench        run `ropelab bench --sections machine,train --models lm,lm-large
#                  --precisions bf16 --compare-pytorch` on the GPU
#   --bench-steps N  timed steps per bench figure (default 10)
#   --bench-models M   the bench's --models (default lm-large,lm)
#   --bench-variants V the bench's --pytorch-variants (default "eager sdpa compile")
#   --profile      where the time of ropelab's lm-large bf16 step goes, per GPU kernel (Nsight
#                  Systems' nsys when the machine has it; otherwise libtorch's profiler, which
#                  times only the host side of each op and is reported as such)
#   --out DIR      where the report and logs go
# The build is `ROPELAB_SKIP_APT=1 bash scripts/setup.sh` (the setup script picks the CUDA
# libtorch by itself on a machine with an NVIDIA GPU), into build/.
set -uo pipefail
usage() { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; }

deps="" bench=0 bench_steps=10 out="" profile=0 bench_models=lm-large,lm
bench_variants="eager sdpa compile"
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --deps) deps="$2"; shift 2 ;;
    --bench) bench=1; shift ;;
    --bench-steps) bench_steps="$2"; shift 2 ;;
    --bench-models) bench_models="$2"; shift 2 ;;
    --bench-variants) bench_variants="$2"; shift 2 ;;
    --profile) profile=1; shift ;;
    --out) out="$2"; shift 2 ;;
    *) echo "check_gpu: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$bench_steps" =~ ^[1-9][0-9]*$ ]] || { echo "check_gpu: --bench-steps takes a positive number" >&2; exit 2; }
for m in ${bench_models//,/ }; do
  [[ $m =~ ^(lm|mlm|translation|lm-large)$ ]] ||
    { echo "check_gpu: --bench-models: '$m' is not one of lm, mlm, translation, lm-large" >&2; exit 2; }
done
for v in $bench_variants; do
  [[ $v =~ ^(eager|sdpa|compile)$ ]] ||
    { echo "check_gpu: --bench-variants: '$v' is not one of eager, sdpa, compile" >&2; exit 2; }
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
section() {  # section TITLE LOG CMD...: runs CMD, logs it, reports its exit code and time
  local title="$1" log="$2"
  shift 2
  local t0=$SECONDS rc
  "$@" >"$log" 2>&1
  rc=$?
  note "- $title: exit $rc in $((SECONDS - t0)) s (log: $log)"
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
section "build (scripts/setup.sh)" "$out/build.log" env ROPELAB_SKIP_APT=1 ROPELAB_CMAKE_ARGS="${ROPELAB_CMAKE_ARGS:-}" bash scripts/setup.sh || build_ok=0
[[ -f build/last-configure.log ]] && grep -E "libtorch|CUDA lib|NCCL|Gloo|OpenMP:|fmt" build/last-configure.log |
  sed 's/^/    /' | tee -a "$report"
if [[ $build_ok -eq 0 ]]; then
  rc=1
  note ""
  note "The build failed; its errors:"
  grep -E -A3 "error|Error|FAILED" "$out/build.log" | head -40 | tee -a "$report"
  # Whatever builds still gets checked (a failing target of another tier must not hide the rest).
  if [[ -f build/build.ninja ]]; then
    section "build, keeping going" "$out/build-k.log" cmake --build build -j "$(nproc)" -- -k 0
  fi
  [[ -x build/bin/ropelab && -x build/bin/ropelab_gpu_tests ]] || exit 1
fi
section "ropelab info" "$out/info.log" build/bin/ropelab info || rc=1
sed 's/^/    /' "$out/info.log" >>"$report"
section "ctest -L gpu" "$out/ctest-gpu.log" \
  ctest --test-dir build -L gpu --output-on-failure --timeout 300 -j 4 || rc=1
grep -E "tests passed|tests failed|Skipped|\*\*\*Failed|Not Run" "$out/ctest-gpu.log" | sed 's/^/    /' | tee -a "$report"
if [[ $bench -eq 1 ]]; then
  section "bench" "$out/bench.log" timeout "${ROPELAB_BENCH_TIMEOUT:-900}" build/bin/ropelab bench \
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
if [[ $profile -eq 1 ]]; then
  # One process, one warm-up step and 3 profiled ones of the GPU shape.
  point=(build/bin/ropelab bench --point train --config configs/bench/lm-large.yaml --steps 3
    train.precision=bf16 run.device=cuda)
  nsys_bin=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
  if [[ -n "$nsys_bin" ]]; then
    section "profile (nsys)" "$out/profile.log" timeout 300 "$nsys_bin" profile -t cuda,nvtx \
      --force-overwrite true -o "$out/profile" --stats=true "${point[@]}" || rc=1
    note "  GPU kernels by total time (nsys cuda_gpu_kern_sum; the warm-up step included):"
    awk '/cuda_gpu_kern_sum/{on=1; next} on&&/\*\*/{exit} on&&/Time \(%\)/{print}
      on&&/^ *[0-9]/{print; if(++n==25) exit}' "$out/profile.log" |
      sed 's/^/    /' | tee -a "$report"
  else
    section "profile (libtorch; host-side op times only: no nsys here)" "$out/profile.log" \
      env ROPELAB_PROFILE="$out/trace.json" timeout 300 "${point[@]}" || rc=1
    python3 scripts/profile_summary.py "$out/trace.json" --steps 3 --top 15 2>&1 | sed 's/^/    /' |
      tee -a "$report"
  fi
fi
note ""
note "check_gpu: exit $rc"
exit $rc
