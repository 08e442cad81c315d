#!/usr/bin/env bash
# hostile_round3.sh — issue 32's hostile probes again, in loops at random moments (not part of make test: minutes of
# wall time, and what it measures is how often each outcome happens). Each try must end one of the allowed ways:
#   stall   TRIES x: 4 ranks (tp 2 x cp 2, ckpt_every 1, timeout_s 6, ckpt_io collective); SIGSTOP of a random rank at
#           a random moment while a save is under way -> the job ends by itself, non-zero, with one line naming the
#           phase or the wait and the rank, and leaves no process (hung: still running 120 s after the stop)
#   early   TRIES x: SIGTERM to tools/preemptible mpirun (2 ranks) 0-0.6 s after its start -> exit 0 and either
#           "nothing was started" or a stop after a step with that step's checkpoint named by 'latest'
#   kill    TRIES x: kill -9 of a random rank under configs/launch/mpirun_cpu.sh -> one line naming the rank and signal
# Usage: bash tools/hostile_round3.sh [TRIES]   (default 6); prints one line per try and a summary per probe.
cd "$(dirname "$0")/.."
source tests/lib.sh
N=${1:-6}
build/prepare --out "$T/d" --val-frac 0.2 model attention >/dev/null || { bad "prepare (run make)"; finish; }
A=(-c configs/tiny.conf --train_data "$T/d" --val_data "" --log_every 1)
rank_pids() { local p; for p in $(ps -o pid= -s "$1"); do tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q "^OMPI_COMM_WORLD_RANK=" && echo "$p"; done; }
wait_gone() {  # JOB SECONDS: 0 when JOB ended within SECONDS
  local end=$((SECONDS + $2)); while [ $SECONDS -lt $end ]; do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done; return 1
}
rnd() { /usr/bin/python3 -c "import random; print(f'{random.uniform($1, $2):.3f}')"; }

# ---- stall during saves ----
good=0
for ((i = 1; i <= N; i++)); do
  d="$T/s$i"
  in_session "$d.sid" "${MPI[@]}" -np 4 build/train "${A[@]}" --tp 2 --cp 2 --out_dir "$d" --max_steps 100000 --ckpt_every 1 \
    --timeout_s 6 >"$d.out" 2>"$d.err" &
  job=$!
  end=$((SECONDS + HANG_S)); while [ $SECONDS -lt $end ] && kill -0 $job 2>/dev/null && ! ls "$d"/*.h5.tmp >/dev/null 2>&1; do sleep 0.01; done
  sid=$(cat "$d.sid"); pids=($(rank_pids "$sid")); victim=${pids[$((RANDOM % ${#pids[@]}))]}
  sleep "$(rnd 0 0.2)"; kill -STOP "$victim" 2>/dev/null
  if wait_gone $job 120; then
    wait $job; rc=$?; e=$(grep -v '^\[[^]]*:[0-9]*\] ' "$d.err" | grep -c .)
    end=$((SECONDS + 60)); while [ $SECONDS -lt $end ] && [ -n "$(ps -o pid= -s "$sid")" ]; do sleep 0.1; done   # (exiting)
    end_session "$sid"; left=$ended
    if [ $rc -ne 0 ] && [ "$e" = 1 ] && [ "$left" = 0 ] && grep -q "did not finish within timeout_s = 6 s" "$d.err"; then
      good=$((good + 1)); ok "stall $i: ended by itself, exit $rc: $(grep -v '^\[' "$d.err" | cut -c1-200)"
    else bad "stall $i: exit $rc, $e lines, $left left: $(head -c 400 "$d.err")"; fi
  else bad "stall $i: still running 120 s after SIGSTOP of pid $victim (HUNG)"; end_session "$sid" $job; fi
done
echo "stall: $good of $N tries ended by themselves with one line"

# ---- SIGTERM during start-up ----
good=0
for ((i = 1; i <= N; i++)); do
  d="$T/e$i" dl=$(rnd 0 0.6)
  env RINGLM_TEST_STEP_SLOW_MS=300 tools/preemptible "${MPI[@]}" -np 2 build/train "${A[@]}" --cp 2 --out_dir "$d" --max_steps 30 >"$d.out" 2>&1 &
  job=$!; sleep "$dl"; kill -TERM $job
  if wait_gone $job 300; then
    wait $job; rc=$?
    s=$(sed -nE 's/^stopping after step ([0-9]+) on signal.*/\1/p' "$d.out")
    if [ $rc = 0 ] && grep -q "nothing was started" "$d.out"; then good=$((good + 1)); ok "early $i ($dl s): nothing started, exit 0"
    elif [ $rc = 0 ] && [ -n "$s" ] && [ "$s" -lt 30 ] && [ "$(cat "$d/latest" 2>/dev/null)" = "$(printf 'ckpt_%08d.h5' "$s")" ]; then
      good=$((good + 1)); ok "early $i ($dl s): stopped after step $s with its checkpoint, exit 0"
    else bad "early $i ($dl s): exit $rc, stop step '$s': $(grep -v '^step' "$d.out" | tail -3)"; fi
  else bad "early $i ($dl s): still running 300 s after SIGTERM"; kill -9 $job; fi
done
echo "early: $good of $N tries stopped cleanly"

# ---- kill -9 of a rank under mpirun_cpu.sh ----
good=0
for ((i = 1; i <= N; i++)); do
  d="$T/k$i"
  in_session "$d.sid" env NODES=1 RANKS_PER_NODE=2 TP=1 CP=2 CONFIG=configs/tiny.conf DATA="$T/d" OUT_DIR="$d" THREADS=1 \
    bash configs/launch/mpirun_cpu.sh --max_steps 100000 --log_every 1 --val_every 0 </dev/null >"$d.out" 2>"$d.err" &
  job=$!
  end=$((SECONDS + HANG_S)); while [ $SECONDS -lt $end ] && kill -0 $job 2>/dev/null && [ ! -e "$d/metrics.jsonl" ]; do sleep 0.05; done
  sleep "$(rnd 0 1)"; r=$((RANDOM % 2))
  for p in $(pgrep -f "out_dir $d "); do tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$r" && kill -9 "$p"; done
  if wait_gone $job 120; then
    wait $job; rc=$?; end_session "$(cat "$d.sid")"
    if [ $rc -ne 0 ] && grep -qE "^launch: rank $r \(node [^)]+\) was killed by signal 9" "$d.err"; then good=$((good + 1)); ok "kill $i (rank $r): $(grep '^launch:' "$d.err" | cut -c1-160)"
    else bad "kill $i (rank $r): exit $rc: $(head -c 400 "$d.err")"; fi
  else bad "kill $i: still running 120 s after the kill"; end_session "$(cat "$d.sid")" $job; fi
done
echo "kill: $good of $N tries named the rank and the signal"
finish
