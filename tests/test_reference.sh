#!/usr/bin/env bash
# test_reference.sh — checks the C model against the independent float64 PyTorch reference (tests/ref_model.py).
# For every tests/configs/ref_*.conf: build/tests/tool_dump writes one forward/backward/AdamW step, and
# ref_model.py recomputes and compares it; then the same for one config in distributed layouts (tp 2 with sequence
# parallelism, tp 2 x cp 2 with the all-to-all and sequence parallelism, cp 4 as all-to-all x ring with documents), and
# tests/configs/long_yarn_tiles.conf (320 tokens: several attention tiles in both dimensions; YaRN ramp 20..33 of
# head_dim 64) for 3 AdamW steps across the warmup boundary, plain and with document masking. Also runs the
# reference's own --selftest. A missing tool_dump, a crash or a reference run without a result line counts as a
# failure, never a skip.
# Prints every check line (tagged with the config) and ends with the total "N passed, N failed".
# Overrides (for debugging): TOOL_DUMP=path/to/tool_dump, PYTHON=path/to/python3.
cd "$(dirname "$0")/.."
source tests/lib.sh
TOOL=${TOOL_DUMP:-build/tests/tool_dump}
PY=${PYTHON:-$PY}

# run_ref TAG ARG: runs ref_model.py, prints its lines tagged, adds its counts to the totals (sub_result, lib.sh)
run_ref() {
  local tag=$1 arg=$2 rc line
  "$PY" tests/ref_model.py "$arg" >"$T/ref.out" 2>&1; rc=$?
  grep -Ev '^[0-9]+ passed, [0-9]+ failed$' "$T/ref.out" | sed -E "s/^(ok  |FAIL) /\1 [$tag] /"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$T/ref.out" | tail -n 1)
  [ -z "$line" ] || echo "# [$tag] $line"
  sub_result "[$tag] ref_model.py" "$rc" "$T/ref.out"
}

run_ref selftest --selftest

cfgs=(tests/configs/ref_*.conf)
[ -e "${cfgs[0]}" ] || bad "no tests/configs/ref_*.conf found"
for cfg in "${cfgs[@]}"; do
  [ -e "$cfg" ] || continue
  tag=$(basename "$cfg" .conf)
  dump="$T/$tag.dump"
  echo "== $cfg"
  if [ ! -x "$TOOL" ]; then
    bad "[$tag] $TOOL missing or not executable (build it with make)"
    continue
  fi
  timeout $HANG_S "$TOOL" -c "$cfg" --out "$dump" >"$T/$tag.log" 2>&1; rc=$?
  if [ "$rc" -ne 0 ] || [ ! -s "$dump" ]; then
    tail -n 20 "$T/$tag.log" | sed 's/^/  | /'
    bad "[$tag] $TOOL -c $cfg exited $rc$([ -s "$dump" ] || echo ', no dump written')"
    continue
  fi
  sed 's/^/# /' "$T/$tag.log" | tail -n 3
  run_ref "$tag" "$dump"
  rm -f "$dump"
done

# the same step in distributed layouts (each rank its share of the batch; the dump gathered): the reference holds
# for the ring, the all-to-all and their product, with tensor and sequence parallelism and document masking, and
# for ZeRO-1 (moments sharded over the context ranks) with clipping active, 2 steps: each step's gradient norm,
# the parameters and the gathered moments
while read -r tag np args; do
  [ -n "$tag" ] || continue
  dump="$T/$tag.dump"
  echo "== tests/configs/ref_d_yarn_gqa_clip.conf $args ($np ranks)"
  # shellcheck disable=SC2086
  timeout $HANG_S "${MPI[@]}" -np "$np" "$TOOL" -c tests/configs/ref_d_yarn_gqa_clip.conf --out "$dump" $args </dev/null >"$T/$tag.log" 2>&1; rc=$?
  if [ "$rc" -ne 0 ] || [ ! -s "$dump" ]; then bad "[$tag] tool_dump on $np ranks ($args) exited $rc: $(tail -n 3 "$T/$tag.log" | tr '\n' ' ')"; continue; fi
  sed 's/^/# /' "$T/$tag.log" | tail -n 1
  run_ref "$tag" "$dump"
  rm -f "$dump"
done <<'LAYOUTS'
d_tp2_sp 2 --tp 2 --tp_sp 1
d_tp2_cp2_a2a_sp 4 --tp 2 --cp 2 --cp_comm a2a --tp_sp 1
d_cp4_a2a_ring_docs 4 --cp 4 --cp_comm a2a+ring --cp_a2a 2 --doc_mask 1 --eod 7
d_tp2_cp2_zero1_clip_2steps 4 --tp 2 --cp 2 --zero 1 --steps 2
LAYOUTS

# a long sequence (3 x 3 attention tiles), YaRN from 65536 original positions (ramp 20..33 at head_dim 64), and 3
# AdamW steps across the warmup boundary with clipping (tool_dump --steps 3: every step's gradients and update, the
# moments, the learning rates); plain causal, and MHA (2 query tiles of 256 rows, 3 key tiles) with document masking
# (restarted positions)
while read -r tag args; do
  [ -n "$tag" ] || continue
  dump="$T/$tag.dump"
  echo "== tests/configs/long_yarn_tiles.conf $args"
  # shellcheck disable=SC2086
  timeout $HANG_S "$TOOL" -c tests/configs/long_yarn_tiles.conf --out "$dump" $args >"$T/$tag.log" 2>&1; rc=$?
  if [ "$rc" -ne 0 ] || [ ! -s "$dump" ]; then bad "[$tag] tool_dump ($args) exited $rc: $(tail -n 3 "$T/$tag.log" | tr '\n' ' ')"; continue; fi
  sed 's/^/# /' "$T/$tag.log" | tail -n 1
  run_ref "$tag" "$dump"
  rm -f "$dump"
done <<'LONG'
long_yarn_3steps --steps 3
long_yarn_mha_docs_3steps --steps 3 --doc_mask 1 --eod 7 --doc_positions 1 --n_kv_head 2
LONG

finish
