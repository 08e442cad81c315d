#!/usr/bin/env bash
# configs/launch/: the launch scripts as a user runs them, on this machine. mpirun_cpu.sh stops on SIGTERM with a
# checkpoint, says how to continue, and the rerun resumes and finishes with an evaluation; slurm_cpu.sbatch and
# slurm_gpu.sbatch under stand-ins for srun/scontrol (srun = mpirun with SLURM_NTASKS ranks; scontrol records the
# requeue): SIGUSR1 to the ranks (Slurm's --signal) -> checkpoint, self-requeue, and the requeued job resumes and
# finishes; the GPU scripts run build/emu/train (the CUDA backend on the host emulation of 8 devices: one rank per
# device, NCCL); bad layouts and a missing binary give one line.
cd "$(dirname "$0")/.."
source tests/lib.sh
build/prepare --out "$T/data" --val-frac 0.2 --seed 3 model attention comm >/dev/null || { bad prepare; finish; }
export RINGLM_EMU_TIMEOUT_S=120

# wait until DIR/metrics.jsonl has N lines (at most 60 s)
wait_steps() { local n; for ((i = 0; i < 6000; i++)); do n=$(grep -c . "$1/metrics.jsonl" 2>/dev/null); [ "${n:-0}" -ge "$2" ] && return 0; sleep 0.01; done; return 1; }
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

# 2. Slurm stand-ins: srun runs its command on SLURM_NTASKS ranks with mpirun; scontrol logs what it was asked
mkdir -p "$T/bin"
cat >"$T/bin/srun" <<EOF
#!/usr/bin/env bash
while [[ "\$1" == --* ]]; do shift; done     # srun's own options (--kill-on-bad-exit=1, --gpu-bind=none, ...)
exec ${MPI[*]} -np "\$SLURM_NTASKS" "\$@"
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
