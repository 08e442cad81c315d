# lib.sh — shared by the shell tests: a temp dir, ok/bad counters, the final line, the mpirun prefix, and the
# helpers more than one test uses. Source it from a test after `cd` to the repository root.
T=$(mktemp -d)
pass=0; fail=0
ok()  { echo "ok   $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
PY=/usr/bin/python3
export OMP_NUM_THREADS=1
# HANG_S: the limit of a `timeout` whose only purpose is to catch a hang; generous (a busy 2-core machine runs the
# suite's longest step in minutes), so that no verdict depends on the machine's speed
HANG_S=${RINGLM_TEST_HANG_S:-900}
MPI=(mpirun -q --oversubscribe); [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)

# launch NP: the words that start a program on NP ranks: "${MPI[@]}" -np NP, or nothing for one plain process
launch() { if [ "$1" -gt 1 ]; then echo "${MPI[*]} -np $1"; fi; }

# check DESCRIPTION CMD ARGS...: ok when CMD succeeds (with its last output line), FAIL with its output otherwise
check() {
  local d=$1; shift
  if "$@" >"$T/check.out" 2>&1; then local l; l=$(tail -n 1 "$T/check.out" | sed 's/^ *//'); ok "$d${l:+ ($l)}"
  else bad "$d: $(head -c 600 "$T/check.out" | tr '\n' ' ')"; fi
}

# expect_err NAME PATTERN NP CMD ARGS...: CMD ARGS on NP ranks (see launch) must exit non-zero without hanging
# ($HANG_S) and print exactly one line on stderr, containing every '|'-separated fixed string of PATTERN.
# Set for the call: ERR_RC=N to require exit status N; ERR_SKIP=REGEX to leave matching stderr lines (progress)
# out; ERR_ALSO='shell condition' for a further requirement (stdout and stderr are in $T/o and $T/e).
expect_err() {
  local name=$1 pats=$2 np=$3; shift 3
  timeout -k 30 $HANG_S $(launch "$np") "$@" >"$T/o" 2>"$T/e"; local rc=$?
  if [ -n "${ERR_SKIP:-}" ]; then grep -v -- "$ERR_SKIP" "$T/e" >"$T/e1"; else cp "$T/e" "$T/e1"; fi
  local n miss="" p P; n=$(grep -c '' "$T/e1")
  IFS='|' read -ra P <<<"$pats"
  for p in "${P[@]}"; do grep -qF -- "$p" "$T/e1" || miss+=" '$p'"; done
  local rc_ok; if [ -n "${ERR_RC:-}" ]; then [ $rc -eq "$ERR_RC" ]; else [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ]; fi; rc_ok=$?
  local also=""; [ -z "${ERR_ALSO:-}" ] || eval "$ERR_ALSO" || also=", not $ERR_ALSO"
  if [ $rc_ok -eq 0 ] && [ "$n" -eq 1 ] && [ -z "$miss" ] && [ -z "$also" ]; then ok "$name: $(sed "s|$T/||g" "$T/e1")"
  else bad "$name: exit $rc, $n stderr lines${miss:+, missing$miss}$also: $(head -c 400 "$T/e" | sed "s|$T/||g")"; fi
}

# expect_train_err CONFIG NAME PATTERN NP ARGS...: build/train -c CONFIG on NP ranks fails as expect_err says
expect_train_err() { local conf=$1; shift; expect_err "$1" "$2" "$3" build/train -c "$conf" --out_dir "$T/bad" "${@:4}"; }

# train_run NAME NP ARGS...: build/train -c "$CONF" on NP ranks (see launch) into $T/NAME, weights dumped to
# $T/NAME.dump, output in $T/NAME.out and $T/NAME.err (args may override these keys); FAIL on a non-zero exit
train_run() {
  local name=$1 np=$2; shift 2
  timeout $HANG_S $(launch "$np") build/train -c "$CONF" --out_dir "$T/$name" --dump_weights "$T/$name.dump" "$@" \
    >"$T/$name.out" 2>"$T/$name.err" || { bad "$name: exit $?: $(head -c 400 "$T/$name.err")"; return 1; }
}

# same_losses A B TOL: runs $T/A and $T/B each logged $STEPS steps, with per-step losses within TOL relative
same_losses() {
  $PY - "$T/$1/metrics.jsonl" "$T/$2/metrics.jsonl" "$3" "$STEPS" <<'PYEOF'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]; b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
assert len(a) == len(b) == int(sys.argv[4]), (len(a), len(b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print(f"     losses {['%.6f' % x for x in a]} worst rel diff {worst:.2e}")
sys.exit(0 if worst <= float(sys.argv[3]) else 1)
PYEOF
}

# resumed_tail DESCRIPTION FULL RUN [TOL]: $T/RUN logged exactly steps 3 and 4 (a run resumed at step 2), their losses
# within TOL (default 1e-5) relative of $T/FULL's (an uninterrupted run)
resumed_tail() {
  $PY - "$T/$2/metrics.jsonl" "$T/$3/metrics.jsonl" "${4:-1e-5}" <<'PYEOF' >"$T/r.out" 2>&1 && ok "$1: $(cat "$T/r.out")" || bad "$1: $(cat "$T/r.out")"
import json, sys
a = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[1]))}
b = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2]))}
assert sorted(b) == [3, 4], sorted(b)
w = max(abs(a[s] - b[s]) / a[s] for s in (3, 4))
print(f"steps 3-4 within {w:.1e} of the uninterrupted run (tolerance {sys.argv[3]})")
assert w <= float(sys.argv[3])
PYEOF
}
# trun NAME NP BIN ARGS...: BIN/train (BIN: build, build/emu) -c "$TCONF" on NP ranks into $T/NAME, output in
# $T/NAME.out and .err; FAIL on a non-zero exit
trun() {
  local name=$1 np=$2 bin=$3; shift 3
  timeout $HANG_S $(launch "$np") $bin/train -c "$TCONF" --out_dir "$T/$name" "$@" </dev/null >"$T/$name.out" 2>"$T/$name.err" \
    || { bad "$name: exit $?: $(head -c 400 "$T/$name.err")"; return 1; }
}
# cmp_runs DESCRIPTION A B TOL: ok when runs $T/A and $T/B have the same per-step losses within TOL (same_losses)
cmp_runs() {
  if same_losses "$2" "$3" "$4" >"$T/cmp.out" 2>&1; then ok "$1: $(tail -n 1 "$T/cmp.out" | sed 's/^ *//')"
  else bad "$1: $(tail -n 3 "$T/cmp.out" | tr '\n' ' ')"; fi
}

# sub_result NAME RC FILE: adds the last "N passed, N failed" line in FILE (the output of a sub-run that exited
# RC) to the counts. One more failure when the sub-run timed out or was killed (RC 124 or 137), printed no such
# line, exited non-zero without a failed check, or exited 0 with failed checks.
sub_result() {
  local name=$1 rc=$2 line p f
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$3" | tail -n 1)
  if [ -n "$line" ]; then
    p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}'); pass=$((pass + p)); fail=$((fail + f))
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then bad "$name: timed out or killed (exit status $rc)"
  elif [ -z "$line" ]; then bad "$name: no result line (exit status $rc)"
  elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then bad "$name: exit status $rc with no failed check"
  elif [ "$rc" -eq 0 ] && [ "$f" -ne 0 ]; then bad "$name: $f failed checks but exit status 0"; fi
}

# in_session SIDFILE CMD ARGS...: runs CMD in a new process session whose id goes to SIDFILE, so that mpirun and
# every rank it leaves behind can be ended with end_session (and are, on exit, for any $T/*.sid file left)
in_session() { local f=$1; shift; setsid bash -c 'echo $$ >"$0"; exec "$@"' "$f" "$@"; }
# end_session SID [JOB]: kill -9 what is left of session SID, reap the background JOB, and wait (up to 60 s)
# until the session is empty; sets ended to the number of processes killed; fails if some are still alive
end_session() {
  local sid=$1 pids i; ended=0
  if [ -n "$sid" ]; then pids=$(ps -o pid= -s "$sid"); fi
  if [ -n "$pids" ]; then ended=$(echo "$pids" | wc -l); kill -9 $pids 2>/dev/null; fi
  if [ -n "${2:-}" ]; then wait "$2" 2>/dev/null; fi
  [ -n "$sid" ] || return 0
  local end=$((SECONDS + 60))
  while [ $SECONDS -lt $end ]; do [ -z "$(ps -o pid= -s "$sid")" ] && return 0; sleep 0.1; done
  return 1
}
lib_exit() {
  local f; for f in "$T"/*.sid; do [ -s "$f" ] && end_session "$(cat "$f")"; done
  rm -rf "$T"
}
trap lib_exit EXIT
