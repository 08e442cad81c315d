#!/usr/bin/env bash
# Jobs that stall, start, die and are misconfigured (issue 32):
#  - a rank stalled during a checkpoint save: stopped (SIGSTOP) inside HDF5's collective write, where only the
#    watchdog's phase thread sees it, or by the test at a random moment of a slowed save: one line naming the phase
#    and the rank, a non-zero exit, no process left (a rank waiting in a wait of the comm layer uses no CPU); a rank
#    stopped before MPI started: the start-up's alarm, one line;
#  - SIGTERM to tools/preemptible and to the Slurm batch script (stand-ins for srun and scontrol) at several moments
#    of the start-up: never killed by SIGUSR1's default action, never lost (the run stops with a checkpoint, or
#    nothing is started, exit 0);
#  - a rank killed by SIGKILL under configs/launch/mpirun_cpu.sh: one line naming the rank and the signal;
#  - the launch scripts' numeric variables: one line naming the variable.
cd "$(dirname "$0")/.."
source tests/lib.sh
build/prepare --out "$T/d" --val-frac 0.2 model attention >/dev/null || { bad "prepare (run make)"; finish; }
A=(-c configs/tiny.conf --train_data "$T/d" --val_data "" --log_every 1)
# rank_pid SID RANK: the pid of MPI rank RANK in session SID
rank_pid() {
  local p; for p in $(ps -o pid= -s "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null; }
# until_file PATH JOB: 0 once PATH exists; 1 when the background JOB ends first (or after HANG_S)
until_file() {
  local end=$((SECONDS + HANG_S))
  while [ $SECONDS -lt $end ]; do [ -e "$1" ] && return 0; kill -0 "$2" 2>/dev/null || return 1; sleep 0.02; done; return 1
}
# job_end NAME JOB SID: waits for JOB (at most HANG_S), then for its session to empty (60 s: exiting); its exit status
# in rc, its stderr without Open MPI's own "[host:pid] ..." lines in $T/NAME.e1 (n lines); left: processes left
job_end() {
  local end=$((SECONDS + HANG_S))
  while [ $SECONDS -lt $end ]; do kill -0 "$2" 2>/dev/null || break; sleep 0.1; done
  alive=0; kill -0 "$2" 2>/dev/null && alive=1
  end=$((SECONDS + 60)); while [ $SECONDS -lt $end ]; do [ -z "$(ps -o pid= -s "$3")" ] && break; sleep 0.1; done   # (exiting)
  end_session "$3" "$2"; left=$ended
  wait "$2" 2>/dev/null; rc=$?
  grep -v '^\[[^]]*:[0-9]*\] ' "$T/$1.err" >"$T/$1.e1"; n=$(grep -c . "$T/$1.e1")
}

# ---- 1. a rank stalled during a checkpoint save ----
TO=4
RE="did not finish within timeout_s = $TO s while saving ckpt_[0-9]{8}\.h5: rank 1 \(no answer: stopped, hung or dead\) did not arrive; rank 0 aborts the job$"
# (a) rank 1 stops itself as rank 0 enters the collective write of the first dataset (test hook): rank 0 blocks inside
# MPI-IO, out of the comm layer's waits; the phase thread ends the job
RINGLM_TEST_CKPT_STOP_RANK=1 in_session "$T/s1.sid" "${MPI[@]}" -np 2 build/train "${A[@]}" --cp 2 --out_dir "$T/s1" \
  --max_steps 100000 --ckpt_every 2 --timeout_s $TO >"$T/s1.out" 2>"$T/s1.err" &
job=$!
sleep 0.5; job_end s1 $job "$(cat "$T/s1.sid")"
if [ $alive = 0 ] && [ $rc -ne 0 ] && [ "$n" = 1 ] && [ "$left" = 0 ] && grep -qE "^comm: checkpoint I/O \(HDF5, MPI-IO, the file system\) on the world group \(2 ranks\) $RE" "$T/s1.e1"; then
  ok "rank 1 stopped inside HDF5's collective write: exit $rc, one line: $(cat "$T/s1.e1")"
else bad "rank 1 stopped inside the collective write: running $alive, exit $rc, $n lines, $left processes left: $(head -c 600 "$T/s1.err")"; fi
# (b) SIGSTOP of rank 1 from outside while the save of step 2 is under way (slowed by the test hook: 40 ms a dataset)
RINGLM_TEST_CKPT_SLOW_MS=40 in_session "$T/s2.sid" "${MPI[@]}" -np 2 build/train "${A[@]}" --cp 2 --out_dir "$T/s2" \
  --max_steps 100000 --ckpt_every 2 --timeout_s $TO >"$T/s2.out" 2>"$T/s2.err" &
job=$!
if until_file "$T/s2/ckpt_00000002.h5.tmp" $job; then
  sid=$(cat "$T/s2.sid"); r0=$(rank_pid "$sid" 0); r1=$(rank_pid "$sid" 1)
  sleep 0.3; kill -STOP "$r1"
  sleep 1.5; c0=$(cpu_ticks "$r0"); sleep 1; c1=$(cpu_ticks "$r0")
  job_end s2 $job "$sid"
  if [ $alive = 0 ] && [ $rc -ne 0 ] && [ "$n" = 1 ] && [ "$left" = 0 ] && grep -qE "^comm: .+ on the world group \(2 ranks\) $RE" "$T/s2.e1"; then
    ok "SIGSTOP of rank 1 during a save: exit $rc, one line: $(cat "$T/s2.e1")"
  else bad "SIGSTOP of rank 1 during a save: running $alive, exit $rc, $n lines, $left processes left: $(head -c 600 "$T/s2.err")"; fi
  # where rank 0 waited in a wait of the comm layer (the line names it), it slept
  if grep -q "^comm: checkpoint I/O" "$T/s2.e1"; then ok "(rank 0 was inside an HDF5 call when rank 1 stopped: MPI-IO polls there)"
  elif [ -n "$c0" ] && [ -n "$c1" ] && [ $((c1 - c0)) -le 5 ]; then ok "... rank 0 waited in the comm layer without spinning: $((c1 - c0)) CPU ticks in 1 s"
  else bad "rank 0 spins in a wait of the comm layer: $((c1 - c0)) CPU ticks in 1 s"; fi
else bad "the run for the SIGSTOP during a save did not reach its save: $(tail -c 300 "$T/s2.err")"; end_session "$(cat "$T/s2.sid")" $job; fi

# (c) a rank stopped before MPI has started (test hook): the start-up's alarm (RINGLM_INIT_TIMEOUT_S) ends the job
RINGLM_TEST_STOP_BEFORE_INIT=1 RINGLM_INIT_TIMEOUT_S=$TO in_session "$T/s3.sid" "${MPI[@]}" -np 2 build/train "${A[@]}" \
  --out_dir "$T/s3" --max_steps 2 >"$T/s3.out" 2>"$T/s3.err" &
job=$!
sleep 0.5; job_end s3 $job "$(cat "$T/s3.sid")"
if [ $alive = 0 ] && [ $rc -ne 0 ] && [ "$n" = 1 ] && [ "$left" = 0 ] && grep -qx "ringlm: rank 0: MPI's start-up did not finish within $TO s: another rank did not start or stopped (stopped, hung, or its host is gone); this rank ends the job" "$T/s3.e1"; then
  ok "rank 1 stopped before MPI started: exit $rc, one line: $(cat "$T/s3.e1")"
else bad "rank 1 stopped before MPI started: running $alive, exit $rc, $n lines, $left processes left: $(head -c 600 "$T/s3.err")"; fi

# ---- 10. SIGTERM during start-up ----
# ran_first_line PID SCRIPT: 0 once PID runs SCRIPT (not a fork of this shell before its exec, which has this
# shell's handlers) and has a handler for SIGTERM (bit 14 of SigCgt): the script has run its first line
ran_first_line() {
  local m; tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "$2" || return 1
  m=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null); [ -n "$m" ] && (( (16#$m >> 14) & 1 ))
}
early() {  # NAME DELAY SCRIPT CMD...: CMD (which runs SCRIPT) in the background, SIGTERM DELAY s after SCRIPT's first
  # line; rc, the output in $T/NAME.out
  local name=$1 d=$2 script=$3 end=$((SECONDS + HANG_S)); shift 3
  "$@" >"$T/$name.out" 2>&1 &
  local job=$!
  while [ $SECONDS -lt $end ] && kill -0 $job 2>/dev/null && ! ran_first_line $job "$script"; do sleep 0.001; done
  sleep "$d"; kill -TERM $job; wait $job; rc=$?
}
for d in 0.01 0.05 0.2 0.5; do
  early pre$d $d tools/preemptible env RINGLM_TEST_STEP_SLOW_MS=300 tools/preemptible "${MPI[@]}" -np 2 build/train "${A[@]}" --cp 2 \
    --out_dir "$T/pre$d" --max_steps 30
  s=$(sed -nE 's/^stopping after step ([0-9]+) on signal 10.*/\1/p' "$T/pre$d.out")
  if [ $rc = 0 ] && grep -q "^preemptible: SIGTERM arrived before the launch: nothing was started$" "$T/pre$d.out"; then
    ok "SIGTERM to tools/preemptible $d s after its start: nothing started, exit 0"
  elif [ $rc = 0 ] && [ -n "$s" ] && [ "$s" -lt 30 ] && [ "$(cat "$T/pre$d/latest" 2>/dev/null)" = "$(printf 'ckpt_%08d.h5' "$s")" ]; then
    ok "SIGTERM to tools/preemptible $d s after its start: the ranks stopped after step $s with its checkpoint, exit 0"
  else bad "SIGTERM to tools/preemptible $d s after its start: exit $rc, stop step '$s', latest '$(cat "$T/pre$d/latest" 2>/dev/null)': $(grep -v '^step' "$T/pre$d.out" | tail -3)"; fi
done
# the Slurm batch script, with stand-ins: srun runs its command on SLURM_NTASKS ranks (through tools/preemptible, as
# a real srun passes SIGTERM on to the tasks), scontrol records what it is asked
mkdir -p "$T/bin"
cat >"$T/bin/srun" <<EOF
#!/usr/bin/env bash
while [[ "\$1" == --* ]]; do shift; done
exec "$PWD/tools/preemptible" ${MPI[*]} -np "\$SLURM_NTASKS" "\$@"
EOF
printf '#!/usr/bin/env bash\necho "$@" >>"%s/scontrol.log"\n' "$T" >"$T/bin/scontrol"
chmod +x "$T/bin/srun" "$T/bin/scontrol"
for d in 0.01 0.3; do
  : >"$T/scontrol.log"
  early sb$d $d configs/launch/slurm_cpu.sbatch env PATH="$T/bin:$PATH" SLURM_JOB_ID=4242 SLURM_NTASKS=2 SLURM_SUBMIT_DIR="$PWD" SLURM_CPUS_PER_TASK=1 \
    RINGLM_TEST_STEP_SLOW_MS=300 CONFIG=configs/tiny.conf DATA="$T/d" OUT_DIR="$T/sb$d" TP=1 CP=2 \
    bash configs/launch/slurm_cpu.sbatch --max_steps 30 --log_every 1 --val_every 0
  s=$(sed -nE 's/^stopping after step ([0-9]+) on signal.*/\1/p' "$T/sb$d.out")
  if [ $rc = 0 ] && grep -q "^launch: stopped by a signal before the run started: nothing was started" "$T/sb$d.out" && [ ! -s "$T/scontrol.log" ]; then
    ok "SIGTERM to slurm_cpu.sbatch $d s after its start: nothing started, exit 0"
  elif [ $rc = 0 ] && [ -n "$s" ] && [ "$s" -lt 30 ] && grep -qx "requeue 4242" "$T/scontrol.log" && [ "$(cat "$T/sb$d/latest" 2>/dev/null)" = "$(printf 'ckpt_%08d.h5' "$s")" ]; then
    ok "SIGTERM to slurm_cpu.sbatch $d s after its start: stopped after step $s with its checkpoint, requeued, exit 0"
  elif [ $rc = 0 ] && grep -q "preemptible: SIGTERM arrived before the launch" "$T/sb$d.out" && grep -qx "requeue 4242" "$T/scontrol.log"; then
    ok "SIGTERM to slurm_cpu.sbatch $d s after its start: srun had started nothing, requeued, exit 0"
  else bad "SIGTERM to slurm_cpu.sbatch $d s after its start: exit $rc, stop step '$s', scontrol '$(cat "$T/scontrol.log")': $(grep -v '^step' "$T/sb$d.out" | tail -3)"; fi
done

# ---- 11. a rank killed by SIGKILL under mpirun_cpu.sh (mpirun without -q, through tools/preemptible) ----
in_session "$T/k.sid" env NODES=1 RANKS_PER_NODE=2 TP=1 CP=2 CONFIG=configs/tiny.conf DATA="$T/d" OUT_DIR="$T/k" THREADS=1 \
  bash configs/launch/mpirun_cpu.sh --max_steps 100000 --log_every 1 --val_every 0 </dev/null >"$T/k.out" 2>"$T/k.err" &
job=$!
if until_file "$T/k/metrics.jsonl" $job; then
  sleep 0.5
  for p in $(pgrep -f "out_dir $T/k "); do   # (mpirun runs in a session of its own, tools/preemptible's)
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && kill -9 "$p"
  done
  job_end k $job "$(cat "$T/k.sid")"
  if [ $alive = 0 ] && [ $rc -ne 0 ] && [ "$n" = 1 ] && grep -qE "^launch: rank 1 \(node [^)]+\) was killed by signal 9 \(Killed\): SIGKILL, from the kernel's out-of-memory killer" "$T/k.e1" \
     && ! grep -q -- '-----' "$T/k.out"; then ok "kill -9 of rank 1 under mpirun_cpu.sh: exit $rc, one line: $(cat "$T/k.e1")"
  else bad "kill -9 of rank 1 under mpirun_cpu.sh: running $alive, exit $rc, $n lines: $(head -c 500 "$T/k.err")"; fi
else bad "mpirun_cpu.sh did not start: $(tail -c 300 "$T/k.err")"; end_session "$(cat "$T/k.sid")" $job; fi

# ---- 19. the launch scripts' numeric variables ----
expect_err "mpirun_cpu.sh TP=0" "launch: TP='0' must be a whole number >= 1" 1 env NODES=1 TP=0 bash configs/launch/mpirun_cpu.sh
expect_err "mpirun_cpu.sh RANKS_PER_NODE=abc" "launch: RANKS_PER_NODE='abc' must be a whole number >= 1" 1 env NODES=1 RANKS_PER_NODE=abc bash configs/launch/mpirun_cpu.sh
expect_err "mpirun_cpu.sh TP=08 (decimal, not octal)" "launch: 2 ranks are not a multiple of tp x cp = 8 x 1 = 8" 1 env NODES=1 RANKS_PER_NODE=2 TP=08 CP=1 bash configs/launch/mpirun_cpu.sh
expect_err "mpirun_gpu.sh GPUS_PER_NODE=8x" "launch: GPUS_PER_NODE='8x' must be a whole number >= 1" 1 env TRAIN=build/train GPUS_PER_NODE=8x bash configs/launch/mpirun_gpu.sh
expect_err "slurm_cpu.sbatch CP=-2" "launch: CP='-2' must be a whole number >= 1" 1 env SLURM_NTASKS=2 CP=-2 bash configs/launch/slurm_cpu.sbatch
expect_err "slurm_gpu.sbatch SLURM_NTASKS=x2" "launch: SLURM_NTASKS='x2' must be a whole number >= 1" 1 env TRAIN=build/train SLURM_NTASKS=x2 bash configs/launch/slurm_gpu.sbatch
finish
