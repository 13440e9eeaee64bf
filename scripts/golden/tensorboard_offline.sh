#!/usr/bin/env bash
# TensorBoard's own reader on ropelab's event files, on a machine without PyPI: TensorBoard's
# Python source from a git checkout, its .proto files compiled by Debian's protoc, run by
# Debian's python3 with python3-protobuf, python3-absl, python3-numpy and python3-h5py.
#
#   bash scripts/golden/tensorboard_offline.sh TENSORBOARD_TREE [LOGDIR]
#
# TENSORBOARD_TREE holds tensorboard/ (e.g. `git archive HEAD tensorboard | tar -x -C DIR` of
# github.com/tensorflow/tensorboard). Without LOGDIR it makes one with build/bin/ropelab: a
# small causal-LM run (200 steps) trained whole, the same run killed (SIGKILL) past a checkpoint and
# resumed, `eval` of the first, and a run exported again with `export-tensorboard`. Then
# scripts/golden/tensorboard_check.py reads LOGDIR through TensorBoard's EventMultiplexer and
# the data provider of its scalars dashboard, and compares every scalar with metrics.h5.
# Needs: apt-get install protobuf-compiler python3-protobuf python3-absl python3-numpy python3-h5py
set -euo pipefail
case "${1:-}" in -h | --help | "") sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
tree=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."
[[ -d $tree/tensorboard/backend ]] || { echo "tensorboard_offline: $tree has no tensorboard/" >&2; exit 2; }
command -v protoc >/dev/null || { echo "tensorboard_offline: needs protoc (apt-get install protobuf-compiler)" >&2; exit 2; }
work=$(mktemp -d /tmp/ropelab-tb.XXXXXX)
trap 'rm -rf "$work"' EXIT
# TensorBoard's Python with its protos compiled (the tree itself is left as it is).
mkdir -p "$work/py"
cp -r "$tree/tensorboard" "$work/py/"
(cd "$work/py" && find tensorboard -name '*.proto' ! -path '*/webapp/*' ! -path '*/data/server/*' \
  -print0 | xargs -0 protoc --python_out=.)

logdir=${2:-}
if [[ -z $logdir ]]; then
  ropelab=${ROPELAB:-build/bin/ropelab}
  [[ -x $ropelab ]] || { echo "tensorboard_offline: no $ropelab; run scripts/setup.sh" >&2; exit 2; }
  logdir=$work/runs
  /usr/bin/python3 tests/e2e/tensorboard_fixture.py "$work" 200 10  # 200 steps, a checkpoint every 10
  "$ropelab" train "$work/tb.yaml" run.name=whole >"$work/whole.log" 2>&1
  "$ropelab" eval "$logdir/whole" --split valid >/dev/null 2>&1
  "$ropelab" train "$work/tb.yaml" run.name=killed >"$work/killed.log" 2>&1 &
  pid=$!
  until grep -q '"step":15' "$logdir/killed/metrics.jsonl" 2>/dev/null; do sleep 0.05; done
  kill -KILL $pid
  wait $pid 2>/dev/null || true
  "$ropelab" train "$work/tb.yaml" run.name=killed >>"$work/killed.log" 2>&1
  "$ropelab" train "$work/tb.yaml" run.name=exported >"$work/exported.log" 2>&1
  "$ropelab" export-tensorboard "$logdir/exported" >/dev/null
  echo "tensorboard_offline: runs in $logdir: whole (+ eval); killed (SIGKILL) once step 15" \
    "was logged, then resumed from its last checkpoint" \
    "($(ls "$logdir/killed/tensorboard" | wc -l) event files); exported again"
fi
echo "tensorboard_offline: TensorBoard $(sed -n 's/^VERSION = "\(.*\)"/\1/p' "$work/py/tensorboard/version.py")" \
  "from $tree; protoc $(protoc --version | cut -d' ' -f2); python3-protobuf" \
  "$(/usr/bin/python3 -c 'import google.protobuf as p; print(p.__version__)')"
PYTHONPATH=$work/py /usr/bin/python3 scripts/golden/tensorboard_check.py "$logdir"
