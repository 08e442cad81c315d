#!/usr/bin/env bash
# test_reference.sh — checks the C model against the independent float64 PyTorch reference (tests/ref_model.py).
# For every tests/configs/ref_*.conf: build/tests/tool_dump writes one forward/backward/AdamW step, and
# ref_model.py recomputes and compares it. Also runs the reference's own --selftest. A missing tool_dump, a
# crash or a reference run without a result line counts as a failure, never a skip.
# Prints every check line (tagged with the config) and ends with the total "N passed, N failed".
# Overrides (for debugging): TOOL_DUMP=path/to/tool_dump, PYTHON=path/to/python3.
cd "$(dirname "$0")/.."
TOOL=${TOOL_DUMP:-build/tests/tool_dump}
PY=${PYTHON:-/usr/bin/python3}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

total_p=0; total_f=0

fail() { echo "FAIL $1"; total_f=$((total_f + 1)); }

# run_ref TAG ARG: runs ref_model.py, prints its lines tagged, adds its counts to the totals
run_ref() {
  local tag=$1 arg=$2 out rc line
  out=$("$PY" tests/ref_model.py "$arg" 2>&1); rc=$?
  echo "$out" | grep -Ev '^[0-9]+ passed, [0-9]+ failed$' | sed -E "s/^(ok  |FAIL) /\1 [$tag] /"
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
  if [ -z "$line" ]; then
    fail "[$tag] ref_model.py printed no result line (exit $rc)"
    return
  fi
  local p f
  p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
  echo "# [$tag] $line"
  total_p=$((total_p + p)); total_f=$((total_f + f))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then fail "[$tag] ref_model.py exited $rc with no failed check"; fi
}

run_ref selftest --selftest

cfgs=(tests/configs/ref_*.conf)
[ -e "${cfgs[0]}" ] || fail "no tests/configs/ref_*.conf found"
for cfg in "${cfgs[@]}"; do
  [ -e "$cfg" ] || continue
  tag=$(basename "$cfg" .conf)
  dump="$TMP/$tag.dump"
  echo "== $cfg"
  if [ ! -x "$TOOL" ]; then
    fail "[$tag] $TOOL missing or not executable (build it with make)"
    continue
  fi
  timeout 300 "$TOOL" -c "$cfg" --out "$dump" >"$TMP/$tag.log" 2>&1; rc=$?
  if [ "$rc" -ne 0 ] || [ ! -s "$dump" ]; then
    tail -n 20 "$TMP/$tag.log" | sed 's/^/  | /'
    fail "[$tag] $TOOL -c $cfg exited $rc$([ -s "$dump" ] || echo ', no dump written')"
    continue
  fi
  sed 's/^/# /' "$TMP/$tag.log" | tail -n 3
  run_ref "$tag" "$dump"
  rm -f "$dump"
done

echo "$total_p passed, $total_f failed"
[ "$total_f" -eq 0 ]
