#!/usr/bin/env bash
# configs/launch/: the launch scripts as a user runs them, on this machine. mpirun_cpu.sh stops on SIGTERM with a
# checkpoint, says how to continue, and the rerun resumes and finishes with an evaluation; slurm_cpu.sbatch and
# slurm_gpu.sbatch under stand-ins for srun/scontrol (srun = mpirun with SLURM_NTASKS ranks; scontrol records the
# requeue): SIGUSR1 to the ranks (Slurm's --signal) -> checkpoint, self-requeue, and the requeued job resumes and
# finishes; the GPU scripts run build/emu/train (the CUDA backend on the host emulation of 8 devices: one rank per
# device, NCCL); bad layouts and a missing binary give one line. With 2.5 s steps (a test hook), longer than Open MPI's
# own teardown: SIGTERM to mpirun_cpu.sh's process group, or to the Slurm batch script, ends in a verified checkpoint
# and exit 0; a requeued job restarts by itself after a job killed before its first checkpoint.
cd "$(dirname "$0")/.."
source tests/lib.sh
build/prepare --out "$T/data" --val-frac 0.2 --seed 3 model attention comm >/dev/null || { bad prepare; finish; }
export RINGLM_EMU_TIMEOUT_S=120

# wait until DIR/metrics.jsonl has N lines (at most 60 s)
wait_steps() {   # DIR N: until DIR/metrics.jsonl has N lines; 1 when the background $job ends first (or after HANG_S)
  local n end=$((SECONDS + HANG_S))
  while [ $SECONDS -lt $end ]; do
    n=$(grep -c . "$1/metrics.jsonl" 2>/dev/null); [ "${n:-0}" -ge "$2" ] && return 0
    kill -0 "$job" 2>/dev/null || return 1; sleep 0.01
  done; return 1
}
last_step() { $PY -c "import json,sys; print(max(json.loads(l)['step'] for l in open(sys.argv[1])))" "$1/metrics.jsonl" 2>/dev/null; }

# 1. mpirun_cpu.sh on one machine (2 ranks, cp 2): SIGTERM to the script, then the rerun
L=(env NODES=1 RANKS_PER_NODE=2 TP=1 CP=2 CONFIG=configs/tiny.conf DATA="$T/data" OUT_DIR="$T/cpu" THREADS=1)
"${L[@]}" bash configs/launch/mpirun_cpu.sh --max_steps 300 --log_every 1 --val_every 0 </dev/null >"$T/cpu1.out" 2>&1 &
job=$!
wait_steps "$T/cpu" 5 && kill -TERM $job; wait $job; rc=$?
s=$(sed -nE 's/^stopping after step ([0-9]+) on signal.*/\1/p' "$T/cpu1.out")
if [ $rc -eq 0 ] && [ -n "$s" ] && grep -q "run this script again to continue" "$T/cpu1.out" && [ ! -e "$T/cpu/eval" ]; then
  ok "mpirun_cpu.sh: SIGTERM -> stopped after step $s with a checkpoint, exit 0, 'run this script again'"
else bad "mpirun_cpu.sh stop: rc $rc, step '$s': $(tail -3 "$T/cpu1.out")"; fi
"${L[@]}" bash configs/launch/mpirun_cpu.sh --max_steps $((s + 4)) --log_every 1 --val_every 0 </dev/null >"$T/cpu2.out" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "resum" "$T/cpu2.out" && [ "$(last_step "$T/cpu")" = $((s + 4)) ] && ls "$T"/cpu/eval/*.csv >/dev/null 2>&1; then
  ok "mpirun_cpu.sh again: resumed from step $s, finished step $((s + 4)), evaluated ($(ls "$T"/cpu/eval/*.csv | wc -l) CSV)"
else bad "mpirun_cpu.sh rerun: rc $rc: $(tail -4 "$T/cpu2.out")"; fi

# 1b. steps longer than mpirun's own teardown (2.5 s: the test hook RINGLM_TEST_STEP_SLOW_MS), SIGTERM to the script's
# whole process group (a scheduler's kill of the group; Ctrl-C alike): mpirun is not in it, the ranks save, exit 0
in_session "$T/cpuslow.sid" env RINGLM_TEST_STEP_SLOW_MS=2500 NODES=1 RANKS_PER_NODE=2 TP=1 CP=2 CONFIG=configs/tiny.conf \
  DATA="$T/data" OUT_DIR="$T/cpuslow" THREADS=1 bash configs/launch/mpirun_cpu.sh --max_steps 100 --log_every 1 --val_every 0 \
  </dev/null >"$T/cpuslow.out" 2>&1 &
job=$!
wait_steps "$T/cpuslow" 1 && kill -TERM -- -"$(cat "$T/cpuslow.sid")"; wait $job; rc=$?
s=$(sed -nE 's/^stopping after step ([0-9]+) on signal.*/\1/p' "$T/cpuslow.out")
if [ $rc -eq 0 ] && [ -n "$s" ] && grep -q "run this script again to continue" "$T/cpuslow.out" \
   && [ "$(cat "$T/cpuslow/latest" 2>/dev/null)" = "$(printf 'ckpt_%08d.h5' "$s")" ]; then
  check "mpirun_cpu.sh, 2.5 s steps: SIGTERM to its process group -> stopped after step $s, exit 0; the checkpoint verifies" \
    $PY tests/ckpt_check.py verify "$T/cpuslow/$(cat "$T/cpuslow/latest")" "$s"
else bad "mpirun_cpu.sh, 2.5 s steps, SIGTERM to the group: rc $rc, step '$s': $(grep -v '^step' "$T/cpuslow.out" | tail -3)"; fi
end_session "$(cat "$T/cpuslow.sid")"

# 2. Slurm stand-ins: srun runs its command on SLURM_NTASKS ranks with mpirun; scontrol logs what it was asked
mkdir -p "$T/bin"
# (srun forwards a SIGTERM to its tasks; mpirun cannot, so the stand-in goes through tools/preemptible, which
# hands it to the tasks as SIGUSR1: the trainer treats both alike)
cat >"$T/bin/srun" <<EOF
#!/usr/bin/env bash
while [[ "\$1" == --* ]]; do shift; done     # srun's own options (--kill-on-bad-exit=1, --gpu-bind=none, ...)
exec "$PWD/tools/preemptible" ${MPI[*]} -np "\$SLURM_NTASKS" "\$@"
EOF
printf '#!/usr/bin/env bash\necho "$@" >>"%s/scontrol.log"\n' "$T" >"$T/bin/scontrol"
chmod +x "$T/bin/srun" "$T/bin/scontrol"
slurm() {   # name script ntasks VAR=value... -- train args: runs the batch script as Slurm would (submit dir = repo)
  local name=$1 script=$2 n=$3 vars=(); shift 3
  while [ "$1" != -- ]; do vars+=("$1"); shift; done; shift
  env PATH="$T/bin:$PATH" SLURM_JOB_ID=4242 SLURM_NTASKS="$n" SLURM_SUBMIT_DIR="$PWD" SLURM_CPUS_PER_TASK=1 \
    CONFIG=configs/tiny.conf DATA="$T/data" OUT_DIR="$T/$name" "${vars[@]}" bash "$script" "$@" </dev/null
}
for kind in cpu gpu; do
  name=s$kind; extra=(); [ $kind = gpu ] && extra=(TRAIN=build/emu/train)
  : >"$T/scontrol.log"
  slurm $name configs/launch/slurm_$kind.sbatch 2 TP=1 CP=2 "${extra[@]}" -- --max_steps 300 --log_every 1 --val_every 0 >"$T/$name.1" 2>&1 &
  job=$!
  wait_steps "$T/$name" 3 && pkill -USR1 -f "build/(emu/)?train .*$T/$name( |$)"; wait $job; rc=$?
  s=$(sed -nE 's/^stopping after step ([0-9]+) on signal.*/\1/p' "$T/$name.1")
  if [ $rc -eq 0 ] && [ -n "$s" ] && grep -qx "requeue 4242" "$T/scontrol.log"; then
    ok "slurm_$kind.sbatch: SIGUSR1 to the ranks -> checkpoint at step $s, 'scontrol requeue 4242'"
  else bad "slurm_$kind.sbatch stop: rc $rc, step '$s', scontrol '$(cat "$T/scontrol.log")': $(tail -3 "$T/$name.1")"; continue; fi
  : >"$T/scontrol.log"
  slurm $name configs/launch/slurm_$kind.sbatch 2 TP=1 CP=2 "${extra[@]}" -- --max_steps $((s + 2)) --log_every 1 --val_every 0 >"$T/$name.2" 2>&1; rc=$?
  if [ $rc -eq 0 ] && [ "$(last_step "$T/$name")" = $((s + 2)) ] && [ ! -s "$T/scontrol.log" ] && ls "$T/$name"/eval/*.csv >/dev/null 2>&1; then
    ok "slurm_$kind.sbatch requeued: resumed, finished step $((s + 2)), no further requeue, evaluated"
  else bad "slurm_$kind.sbatch requeued run: rc $rc, last step $(last_step "$T/$name"): $(tail -3 "$T/$name.2")"; fi
done
grep -q "backend cuda" "$T/sgpu.1" && grep -q "^transport: nccl" "$T/sgpu.1" && ok "the GPU job ran the CUDA backend over NCCL: $(grep -m1 "^transport" "$T/sgpu.1")" \
  || bad "the GPU job's log names no CUDA backend / NCCL: $(grep -m1 "ringlm train" "$T/sgpu.1"); $(grep -m1 "^transport" "$T/sgpu.1")"

# 2b. a preemption: SIGTERM to the batch script (Slurm signals every process of the job; KillWait later, SIGKILL),
# 2.5 s steps: the script waits for srun, which passes the signal to the tasks, instead of ending first; the tasks
# save, the script requeues the job and exits 0
: >"$T/scontrol.log"
in_session "$T/spre.sid" env PATH="$T/bin:$PATH" SLURM_JOB_ID=4242 SLURM_NTASKS=2 SLURM_SUBMIT_DIR="$PWD" SLURM_CPUS_PER_TASK=1 \
  RINGLM_TEST_STEP_SLOW_MS=2500 CONFIG=configs/tiny.conf DATA="$T/data" OUT_DIR="$T/spre" TP=1 CP=2 \
  bash configs/launch/slurm_cpu.sbatch --max_steps 100 --log_every 1 --val_every 0 </dev/null >"$T/spre.out" 2>&1 &
job=$!
wait_steps "$T/spre" 1 && kill -TERM "$(cat "$T/spre.sid")"; wait $job; rc=$?
s=$(sed -nE 's/^stopping after step ([0-9]+) on signal.*/\1/p' "$T/spre.out")
if [ $rc -eq 0 ] && [ -n "$s" ] && grep -qx "requeue 4242" "$T/scontrol.log" && [ "$(cat "$T/spre/latest" 2>/dev/null)" = "$(printf 'ckpt_%08d.h5' "$s")" ]; then
  check "slurm_cpu.sbatch, 2.5 s steps: SIGTERM to the batch script -> checkpoint at step $s, 'scontrol requeue 4242', exit 0" \
    $PY tests/ckpt_check.py verify "$T/spre/$(cat "$T/spre/latest")" "$s"
else bad "slurm_cpu.sbatch preempted: rc $rc, step '$s', scontrol '$(cat "$T/scontrol.log")': $(grep -v '^step' "$T/spre.out" | tail -3)"; fi
end_session "$(cat "$T/spre.sid")"

# 2c. a requeued job finds a run stopped before its first checkpoint (metrics.jsonl with records, no checkpoint): it
# starts over by itself, the records set aside; one stopped between a save and its 'latest' resumes from that save
timeout $HANG_S build/train -c configs/tiny.conf --train_data "$T/data/train_*.bin" --val_data "" --out_dir "$T/s17" --max_steps 3 \
  --ckpt_every 0 --save_final 0 >/dev/null 2>&1 || bad "the run stopped before its first checkpoint"
: >"$T/scontrol.log"
slurm s17 configs/launch/slurm_cpu.sbatch 1 TP=1 CP=1 -- --max_steps 4 --val_every 0 >"$T/s17.out" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "^launch: '$T/s17' holds a run stopped before its first checkpoint (3 step records, no checkpoint): starting over" "$T/s17.out" \
   && [ "$(last_step "$T/s17")" = 4 ] && [ "$(grep -c '"step"' "$T/s17/metrics.superseded.jsonl")" = 3 ] && [ ! -s "$T/scontrol.log" ]; then
  ok "slurm_cpu.sbatch after a job killed before its first checkpoint: started over by itself (3 records set aside), finished step 4"
else bad "requeue before the first checkpoint: rc $rc: $(grep -m2 'launch:\|train:' "$T/s17.out" | sed "s|$T/||g")"; fi
timeout $HANG_S build/train -c configs/tiny.conf --train_data "$T/data/train_*.bin" --val_data "" --out_dir "$T/s17b" --max_steps 2 \
  --ckpt_every 2 >/dev/null 2>&1 && rm "$T/s17b/latest" || bad "the run for s17b"
slurm s17b configs/launch/slurm_cpu.sbatch 1 TP=1 CP=1 -- --max_steps 4 --val_every 0 >"$T/s17b.out" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "^launch: '$T/s17b' has no 'latest' (a job stopped as it saved) but holds ckpt_00000002.h5: resuming from it" "$T/s17b.out" \
   && grep -q "^resumed from" "$T/s17b.out" && [ "$(last_step "$T/s17b")" = 4 ]; then
  ok "slurm_cpu.sbatch after a job stopped between a save and its 'latest': resumed from ckpt_00000002.h5, finished step 4"
else bad "requeue without latest: rc $rc: $(grep -m2 'launch:\|train:' "$T/s17b.out" | sed "s|$T/||g")"; fi

# 3. mpirun_gpu.sh on one node of (emulated) GPUs, tp 2 x cp 2
env NODES=1 GPUS_PER_NODE=4 TP=2 CP=2 CONFIG=configs/tiny.conf DATA="$T/data" OUT_DIR="$T/gpu" TRAIN=build/emu/train \
  bash configs/launch/mpirun_gpu.sh --max_steps 3 --val_every 0 </dev/null >"$T/gpu.out" 2>&1; rc=$?
[ $rc -eq 0 ] && [ "$(last_step "$T/gpu")" = 3 ] && ls "$T"/gpu/eval/*.csv >/dev/null 2>&1 && ok "mpirun_gpu.sh: tp 2 x cp 2 on 4 emulated GPUs trained and evaluated" \
  || bad "mpirun_gpu.sh: rc $rc: $(tail -3 "$T/gpu.out")"

# 4. bad input: one line, exit 1
expect_err "a world that is not a multiple of tp x cp" "3 ranks|tp x cp = 1 x 2" 1 env NODES=1 RANKS_PER_NODE=3 TP=1 CP=2 bash configs/launch/mpirun_cpu.sh
expect_err "the GPU binary not built" "build/nothing/train is not built|make cuda" 1 env TRAIN=build/nothing/train bash configs/launch/mpirun_gpu.sh
expect_err "several nodes without a hostfile" "HOSTFILE" 1 env NODES=2 RANKS_PER_NODE=1 TP=1 CP=1 bash configs/launch/mpirun_cpu.sh
finish
