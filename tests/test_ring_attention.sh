#!/usr/bin/env bash
# test_ring_attention.sh — ring attention over MPI: runs build/tests/mpi_ring (tests/mpi_ring.c) under mpirun for
# P = 2, 3, 4, 8 ranks (oversubscribed, one OpenMP thread each), prints each run's output and sums the runs'
# "N passed, N failed" lines into the final total. A run that crashes, hangs (timeout), exits non-zero without
# a failed check, or prints no result line counts as one failure.
cd "$(dirname "$0")/.." || exit 1
BIN=${RING_TEST_BIN:-build/tests/mpi_ring}   # overridable to test this script itself
RANKS=${RING_TEST_RANKS:-"2 3 4 8"}
LIMIT=${RING_TEST_TIMEOUT:-120}
pass=0; fail=0

if [ ! -x "$BIN" ]; then echo "FAIL $BIN is not built (make $BIN)"; echo "0 passed, 1 failed"; exit 1; fi
if ! command -v mpirun > /dev/null; then echo "FAIL mpirun not found"; echo "0 passed, 1 failed"; exit 1; fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlm_test_ring.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)

for P in $RANKS; do
    echo "--- mpi_ring, P = $P"
    start=$(date +%s.%N)
    # own session, so that ranks a killed mpirun leaves behind (a hang) can be found and ended afterwards
    OMP_NUM_THREADS=1 setsid -w timeout -k 10 "$LIMIT" "${MPIRUN[@]}" -np "$P" "$BIN" > "$TMP/out" 2>&1 &
    sid=$!
    wait $sid; rc=$?
    mapfile -t left < <(ps -eo pid=,sid= | awk -v s="$sid" '$2 == s { print $1 }')
    if [ ${#left[@]} -gt 0 ]; then echo "(ending ${#left[@]} leftover processes of this run)"; kill -9 "${left[@]}" 2> /dev/null; fi
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    out=$(cat "$TMP/out")
    echo "$out"
    line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        echo "FAIL P = $P: timed out after ${LIMIT}s"; fail=$((fail + 1))
        [ -n "$line" ] && { pass=$((pass + $(echo "$line" | awk '{print $1}'))); fail=$((fail + $(echo "$line" | awk '{print $3}'))); }
    elif [ -z "$line" ]; then
        echo "FAIL P = $P: no result line (exit status $rc)"; fail=$((fail + 1))
    else
        p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
        pass=$((pass + p)); fail=$((fail + f))
        if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then echo "FAIL P = $P: exit status $rc with no failed check"; fail=$((fail + 1)); fi
        if [ $rc -eq 0 ] && [ "$f" -ne 0 ]; then echo "FAIL P = $P: $f failed checks but exit status 0"; fail=$((fail + 1)); fi
    fi
    echo "--- mpi_ring, P = $P: ${secs}s, exit status $rc"
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
