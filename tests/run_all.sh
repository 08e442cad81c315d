#!/usr/bin/env bash
# Runs every test of the suite: build/tests/test_* (C) and tests/test_*.sh (shell + Python references), several at
# a time, and ends with the total line "N passed, N failed". Each test prints its own final "N passed, N failed"
# line; a test that prints none, or exits non-zero without a failed check, counts as one failure.
#   bash tests/run_all.sh [-j N] [TEST...]     (default: every test; -j or RINGLM_TEST_JOBS, default nproc + 1)
# Output: "[k/n] start NAME at S s (last run: N checks in S s)" when a test starts (a test's number of checks is
# known only once it ends: the count and time shown are those of the last complete run, from build/test_times.txt),
# its lines as they come prefixed "NAME| ", "=== NAME: RESULT (N s)" when it ends; at the end the FAIL lines of every
# failing test again, then the total. Each test's whole output is kept in build/test_logs/NAME.log (replaced by the
# next run).
# The longest tests start first (durations of the last complete run, build/test_times.txt; on a first run the
# order below), so that the run ends with short tests filling the gaps.
# No wall-clock limit decides a verdict: a test still running after RINGLM_TEST_KILL_S seconds (default 3600,
# far above any test's time on a busy 2-core machine) is taken for hung, killed and counted as one failure.
# GPU tests (build/cuda/tests/test_*, built by `make test` where nvcc is found) on a machine without a GPU print
# one line containing "no CUDA device" and exit 77: counted as skipped (named before the total), not passed.
# build/emu/tests/test_* are the same GPU tests built against the host emulation of CUDA (make cuda-emu): they
# run everywhere.
# Stopping: Ctrl-C (SIGINT to the terminal's foreground process group) or SIGTERM to the runner. No test starts after
# it; each running test runs in a session of its own (setsid: the terminal's SIGINT never reaches it, and nothing it
# starts escapes the session by losing its parent), and the whole session gets SIGTERM, then SIGKILL after a grace of
# RINGLM_TEST_STOP_GRACE_S (10 s); the runner waits for them, prints one line and exits 130 (SIGINT) or 143 (SIGTERM),
# leaving no process of the suite behind. A rerun starts afresh (each test's log, .rc and .s are replaced).
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}   # threads that wait sleep: the tests share the cores
JOBS=${RINGLM_TEST_JOBS:-$(( $(nproc 2>/dev/null || echo 2) + 1 ))}
HANG=${RINGLM_TEST_KILL_S:-3600}
if [ "${1:-}" = -j ]; then JOBS=$2; shift 2; fi
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "run_all: -j $JOBS: give a number of tests to run at once (1 or more)" >&2; exit 2; }
LOGS=${RINGLM_TEST_LOGS:-build/test_logs}; TIMES=build/test_times.txt
mkdir -p "$LOGS" || exit 2

tests=()
if [ $# -gt 0 ]; then tests=("$@")
else for t in build/tests/test_* tests/test_*.sh build/cuda/tests/test_* build/emu/tests/test_*; do [ -e "$t" ] && tests+=("$t"); done; fi
name_of() { local n=${1#build/}; n=${n#tests/}; echo "${n//\//_}"; }

# the order: longest first by the last run's times; tests without a time first of all, the usual heavy ones leading
HEAVY="tests/test_hf.sh tests/test_launch.sh tests/test_hf_hostile.sh tests/test_faults.sh tests/test_ckpt.sh
build/emu/tests/test_cuda tests/test_eval.sh tests/test_gpu_check.sh tests/test_cuda_emu.sh tests/test_mutants_gaps.sh"
order=$(for t in "${tests[@]}"; do
  s=$(awk -v t="$t" '$1 == t {print $2}' "$TIMES" 2>/dev/null)
  if [ -z "$s" ]; then s=100000; h=0; for x in $HEAVY; do h=$((h + 1)); [ "$x" = "$t" ] && s=$((200000 - h)); done; fi
  echo "$s $t"
done | sort -k1,1nr -s | awk '{print $2}')

# run_one T: the test with its output to its log and, prefixed, to the terminal; its exit status to its .rc
run_one() {
  local t=$1 n; n=$(name_of "$t")
  local start=$SECONDS
  local cmd=(bash "$t"); [[ "$t" == *.sh ]] || cmd=(stdbuf -oL -eL "$t")
  {
    # a session of its own: the session leader writes its id (its pid) for stop() before it becomes the test
    setsid -w bash -c 'echo $$ >"$0"; exec "$@"' "$LOGS/$n.sid" timeout -k 30 "$HANG" "${cmd[@]}" 2>&1
    echo $? >"$LOGS/$n.rc"
  } | tee "$LOGS/$n.log" | sed -u "s|^|$n\| |"
  echo $((SECONDS - start)) >"$LOGS/$n.s"
  local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$LOGS/$n.log" | tail -n 1)
  echo "=== $n: ${line:-no result line (exit $(cat "$LOGS/$n.rc"))} ($((SECONDS - start)) s)"
}

# stop SIGNAME CODE: no test starts any more; every running test's session gets SIGTERM, then SIGKILL after the grace
stop() {
  trap '' INT TERM
  local sids=() f n=0 i
  for t in "${tests[@]}"; do f=$LOGS/$(name_of "$t").sid; [ -s "$f" ] && [ ! -e "${f%.sid}.rc" ] && sids+=("$(cat "$f")"); done
  echo "run_all: $1: no more tests start; stopping the ${#sids[@]} running (SIGTERM, SIGKILL after ${GRACE} s)"
  for i in "${sids[@]}"; do pkill -TERM -s "$i" 2>/dev/null; done
  for ((i = 0; i < GRACE * 10; i++)); do
    n=0; for f in "${sids[@]}"; do pgrep -s "$f" >/dev/null && n=$((n + 1)); done
    [ "$n" -eq 0 ] && break; sleep 0.1
  done
  for i in "${sids[@]}"; do pkill -KILL -s "$i" 2>/dev/null; done
  wait
  local how=""; [ "$n" -gt 0 ] && how=" ($n of them needed SIGKILL)"
  echo "run_all: stopped by $1 after $((SECONDS - t0)) s: $k of $N tests had started, ${#sids[@]} stopped unfinished$how; no result"
  exit "$2"
}
GRACE=${RINGLM_TEST_STOP_GRACE_S:-10}
[[ "$GRACE" =~ ^[0-9]+$ ]] || { echo "run_all: RINGLM_TEST_STOP_GRACE_S=$GRACE: give a whole number of seconds" >&2; exit 2; }

for t in "${tests[@]}"; do n=$(name_of "$t"); rm -f "$LOGS/$n.log" "$LOGS/$n.rc" "$LOGS/$n.s" "$LOGS/$n.sid"; done
k=0; N=${#tests[@]}; t0=$SECONDS
trap 'stop SIGINT 130' INT; trap 'stop SIGTERM 143' TERM
echo "run_all: $N tests, $JOBS at a time (logs in $LOGS/)"
for t in $order; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  k=$((k + 1)); last=$(awk -v t="$t" '$1 == t && $3 != "" {printf " (last run: %s checks in %s s)", $3, $2}' "$TIMES" 2>/dev/null)
  echo "[$k/$N] start $(name_of "$t") at $((SECONDS - t0)) s$last"
  run_one "$t" &
done
while [ -n "$(jobs -rp)" ]; do wait; done   # (a trapped signal ends a plain wait early: wait again until all ended)
trap - INT TERM

total_p=0; total_f=0; broken=(); skipped=(); times=""
for t in "${tests[@]}"; do
  n=$(name_of "$t"); out=$(cat "$LOGS/$n.log" 2>/dev/null); rc=$(cat "$LOGS/$n.rc" 2>/dev/null || echo 1)
  if [ "$rc" -eq 77 ] && [ "$(echo "$out" | grep -c .)" -eq 1 ] && [[ "$out" == *"no CUDA device"* ]]; then
    skipped+=("$t"); continue
  fi
  line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
  times+="$t $(cat "$LOGS/$n.s" 2>/dev/null || echo 0) $(echo "$line" | awk '{print $1 + $3}')"$'\n'
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "!!! $t still ran after $HANG s: taken for hung, killed, counted as 1 failure"; total_f=$((total_f+1)); broken+=("$t")
  elif [ -z "$line" ]; then
    echo "!!! $t printed no result line (exit $rc): counted as 1 failure"; total_f=$((total_f+1)); broken+=("$t")
  else
    p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
    total_p=$((total_p+p)); total_f=$((total_f+f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then total_f=$((total_f+1)); broken+=("$t"); echo "!!! $t exited $rc without a failed check: counted as 1 failure"; fi
    [ "$f" -ne 0 ] && broken+=("$t")
  fi
done
for t in "${broken[@]}"; do
  n=$(name_of "$t"); echo "--- $t (whole output: $LOGS/$n.log):"; grep -E '^(FAIL|!!!)' "$LOGS/$n.log" | head -n 20 | cut -c1-400
done
# the durations for the next run's order, only from a run of the whole suite in which every test ended
if [ $# -eq 0 ] && [ -n "$times" ]; then printf '%s' "$times" >"$TIMES.tmp" && mv "$TIMES.tmp" "$TIMES"; fi
[ ${#broken[@]} -gt 0 ] && echo "failing: ${broken[*]}"
[ ${#skipped[@]} -gt 0 ] && echo "skipped (no GPU on this machine): ${skipped[*]}"
echo "tests took $((SECONDS - t0)) s ($JOBS at a time)"
echo "$total_p passed, $total_f failed"
[ "$total_f" -eq 0 ]
