#!/usr/bin/env bash
# test_ring_attention.sh — ring attention over MPI: runs build/tests/mpi_ring (tests/mpi_ring.c) under mpirun for
# P = 2, 3, 4, 8 ranks (oversubscribed, one OpenMP thread each), prints each run's output and sums the runs'
# "N passed, N failed" lines into the final total. A run that crashes, hangs (timeout), exits non-zero without
# a failed check, or prints no result line counts as one failure.
cd "$(dirname "$0")/.." || exit 1
source tests/lib.sh
BIN=${RING_TEST_BIN:-build/tests/mpi_ring}   # overridable to test this script itself
RANKS=${RING_TEST_RANKS:-"2 3 4 8"}
LIMIT=${RING_TEST_TIMEOUT:-$HANG_S}

[ -x "$BIN" ] || { bad "$BIN is not built (make $BIN)"; finish; }
command -v mpirun > /dev/null || { bad "mpirun not found"; finish; }

for P in $RANKS; do
    echo "--- mpi_ring, P = $P"
    start=$(date +%s.%N)
    # own session, so that ranks a killed mpirun leaves behind (a hang) can be found and ended afterwards
    in_session "$T/ring.sid" timeout -k 10 "$LIMIT" "${MPI[@]}" -np "$P" "$BIN" > "$T/out" 2>&1 &
    job=$!
    wait $job; rc=$?
    end_session "$(cat "$T/ring.sid" 2>/dev/null)" || bad "P = $P: processes of the run still alive after kill -9"
    rm -f "$T/ring.sid"
    [ "$ended" -eq 0 ] || echo "(ended $ended leftover processes of this run)"
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    cat "$T/out"
    sub_result "P = $P" $rc "$T/out"
    echo "--- mpi_ring, P = $P: ${secs}s, exit status $rc"
done

finish
