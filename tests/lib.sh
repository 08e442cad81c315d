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

# expect_train_err CONFIG NAME PATTERN NP ARGS...: build/train on NP ranks must exit non-zero (no hang) with
# exactly one stderr line containing PATTERN
expect_train_err() {
  local conf=$1 name=$2 pat=$3 np=$4; shift 4
  timeout 60 "${MPI[@]}" -np "$np" build/train -c "$conf" --out_dir "$T/bad" "$@" >"$T/o" 2>"$T/e"; local rc=$?
  local n; n=$(grep -c . "$T/e")
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" -eq 1 ] && grep -q -- "$pat" "$T/e"; then ok "$name: $(cat "$T/e")"
  else bad "$name: exit $rc, $n stderr lines: $(head -c 400 "$T/e")"; fi
}
