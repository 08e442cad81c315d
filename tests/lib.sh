# lib.sh — shared by the shell tests: a temp dir, ok/bad counters, the final line, and the mpirun prefix.
# Source it from a test after `cd` to the repository root.
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
pass=0; fail=0
ok()  { echo "ok   $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
PY=/usr/bin/python3
export OMP_NUM_THREADS=1
MPI=(mpirun -q --oversubscribe); [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
