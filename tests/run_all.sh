#!/usr/bin/env bash
# Runs every test of the suite: build/tests/test_* (C) and tests/test_*.sh (shell + Python references).
# Each test prints its own final "N passed, N failed" line; this sums them and ends with the total line.
# GPU tests (build/cuda/tests/test_*, built by `make test` where nvcc is found) on a machine without a GPU print
# one line containing "no CUDA device" and exit 77: counted as skipped (named before the total), not passed.
# build/emu/tests/test_* are the same GPU tests built against the host emulation of CUDA (make cuda-emu): they
# run everywhere.
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
total_p=0; total_f=0; broken=(); skipped=()
for t in build/tests/test_* tests/test_*.sh build/cuda/tests/test_* build/emu/tests/test_*; do
  [ -e "$t" ] || continue
  echo "=== $t"
  start=$(date +%s)
  if [[ "$t" == *.sh ]]; then out=$(bash "$t" 2>&1); rc=$?; else out=$("$t" 2>&1); rc=$?; fi
  echo "$out"
  if [ "$rc" -eq 77 ] && [ "$(echo "$out" | grep -c .)" -eq 1 ] && [[ "$out" == *"no CUDA device"* ]]; then
    skipped+=("$t"); echo "=== $t: skipped"; continue
  fi
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
  if [ -z "$line" ]; then
    echo "!!! $t printed no result line (exit $rc): counted as 1 failure"; total_f=$((total_f+1)); broken+=("$t")
  else
    p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
    total_p=$((total_p+p)); total_f=$((total_f+f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then total_f=$((total_f+1)); broken+=("$t"); fi
    [ "$f" -ne 0 ] && broken+=("$t")
  fi
  echo "=== $t: $(( $(date +%s) - start ))s"
done
[ ${#broken[@]} -gt 0 ] && echo "failing: ${broken[*]}"
[ ${#skipped[@]} -gt 0 ] && echo "skipped (no GPU on this machine): ${skipped[*]}"
echo "$total_p passed, $total_f failed"
[ "$total_f" -eq 0 ]
