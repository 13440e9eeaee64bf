# The CLI's help and its strict config errors, through the real binary.
source "$(dirname "$0")/lib.sh"

expect_exit 0 "$ROPELAB" --help
for sub in config info; do expect_in "$sub"; done

# Four different problems in one file: all reported with file:line:col, exit 2, no trace.
cat >"$WORK/bad.yaml" <<'YAML'
task:
  type: clm
model:
  d_modle: 128
  n_layers: two
  n_heads: 3
  d_ff: 64
  d_ff: 128
YAML
expect_exit 2 "$ROPELAB" config "$WORK/bad.yaml"
expect_in "bad.yaml:4:3: model.d_modle: unknown key; did you mean 'd_model'?"
expect_in "bad.yaml:5:13: model.n_layers: expected an integer, got 'two'"
expect_in "bad.yaml:8:3: model.d_ff: duplicate key"
expect_in "bad.yaml:6:12: model.n_heads: n_heads (3) must divide d_model (256)"
expect_in "4 problem(s)"
expect_not_in "terminate"
expect_not_in "Backtrace"
[[ $(grep -c '^error: ' <<<"$OUT") -eq 4 ]] || fail "expected 4 error lines: $OUT"

# Overrides get the same checks.
cat >"$WORK/ok.yaml" <<'YAML'
task: {type: clm}
YAML
expect_exit 2 "$ROPELAB" config "$WORK/ok.yaml" model.position.type=rop
expect_in "did you mean 'rope'"

# A resolved config round-trips through `ropelab config`.
expect_exit 0 "$ROPELAB" config "$WORK/ok.yaml" model.d_model=128 model.position.type=t5
echo "$OUT" >"$WORK/resolved.yaml"
expect_in "d_model: 128"
expect_in "num_buckets: 32"
expect_exit 0 "$ROPELAB" config "$WORK/resolved.yaml"
[[ "$OUT" == "$(cat "$WORK/resolved.yaml")" ]] || fail "resolved config does not round-trip"

# Bad hybrid layouts: one line each, naming the key, exit 2.
cat >"$WORK/layout.yaml" <<'YAML'
task: {type: clm}
model:
  layout:
    pattern: [local, local, local, global]
    kinds:
      local: {window: 128}
      global: {position: {type: none}}
YAML
expect_exit 0 "$ROPELAB" config "$WORK/layout.yaml"
expect_in "window: 128"
expect_in "chunk: ~"
check_layout() {  # override, then the line it must print
  expect_exit 2 "$ROPELAB" config "$WORK/layout.yaml" "$1"
  expect_in "$2"
  [[ $(grep -c '^error: ' <<<"$OUT") -eq 1 ]] || fail "expected one error line for $1: $OUT"
  expect_not_in "terminate"
}
check_layout "model.layout.pattern=[local, globl]" "model.layout.pattern[1]: unknown kind 'globl'"
check_layout "model.layout.kinds.local.window=0" "model.layout.kinds.local.window: value 0 is out of range"
check_layout "model.layout.kinds.local.chunk=64" "model.layout.kinds.local.chunk: a kind has a window or a chunk, not both"
check_layout "model.attention.kernel=linear" "model.layout.kinds.local.window: linear attention"
expect_exit 0 "$ROPELAB" config --schema
expect_in "model.layout.kinds.<name>"

# Missing file, bad arguments: one line, exit 2.
expect_exit 2 "$ROPELAB" config "$WORK/nope.yaml"
expect_exit 2 "$ROPELAB" no-such-command
expect_exit 0 "$ROPELAB" config --schema
expect_in "rotary_dim"
echo "cli_config: OK"
