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

# 1c. tools/requeue_lead: the requeue signal's lead time from the planned checkpoint size and a save rate; against
# the parameter count the trainer printed and the size of the checkpoint it wrote (HDF5's own bytes on top: < 10 %)
P=$(sed -nE 's/^params ([0-9]+) .*/\1/p' "$T/cpu1.out" | head -n 1); ck=$(ls "$T"/cpu/ckpt_*.h5 | tail -n 1)
tools/requeue_lead -c configs/tiny.conf --save_mbs 0.5 --step_s 2 >"$T/lead.out" 2>&1; rc=$?
want=$($PY -c "import math,sys; p=int(sys.argv[1]); print(math.ceil(1.5 * (2 + 2 * 12 * p / 0.5e6)))" "${P:-0}")
gb=$(sed -nE 's/.*a checkpoint of ([0-9.e+-]+) GB.*/\1/p' "$T/lead.out")
if [ $rc -eq 0 ] && [ "$(tail -n 1 "$T/lead.out")" = "$want" ] && $PY -c "import os,sys; r = float(sys.argv[1]) * 1e9 / os.path.getsize(sys.argv[2]); sys.exit(not 0.9 < r <= 1.0)" "$gb" "$ck"; then
  ok "tools/requeue_lead: $P parameters -> ${gb} GB (the checkpoint: $(stat -c %s "$ck") bytes); 1.5 x (2 s + 2 saves at 0.5 MB/s) = $want s"
else bad "tools/requeue_lead: rc $rc, want $want (params $P), checkpoint $(stat -c %s "$ck" 2>/dev/null) bytes: $(tr '\n' ' ' <"$T/lead.out")"; fi
js=$(build/plan -c configs/llama_1b_128k.conf --tp 2 --cp 16 --json); mo=$(sed -nE 's/.*"moments": ([0-9.e+]+).*/\1/p' <<<"$js")
whole=$(build/plan -c configs/llama_1b_128k.conf --zero 0 --device cpu --json | sed -nE 's/.*"moments": ([0-9.e+]+).*/\1/p')
st=$(sed -nE 's/.*"step_s": ([0-9.e+]+).*/\1/p' <<<"$js")
want=$($PY -c "import math,sys; b = 12 * float(sys.argv[1]) / 8; print(math.ceil(1.5 * (float(sys.argv[2]) + 2 * b / 500e6)))" "$whole" "$st")
got=$(tools/requeue_lead -c configs/llama_1b_128k.conf --tp 2 --cp 16 --save_mbs 500 2>&1 | tail -n 1)
[ "$got" = "$want" ] && ok "tools/requeue_lead for slurm_gpu.sbatch's default (llama_1b_128k, tp 2 x cp 16, build/plan's step $st s) at 500 MB/s: $got s" \
  || bad "tools/requeue_lead with build/plan's step: $got, want $want"
# the Slurm scripts' --signal lead: at least what the command in their "lead time:" comment prints
for kind in cpu gpu; do
  f=configs/launch/slurm_$kind.sbatch
  sig=$(sed -nE 's/^#SBATCH --signal=USR1@([0-9]+)$/\1/p' "$f"); cmd=$(sed -nE 's/^#   lead time: (tools\/requeue_lead .*)$/\1/p' "$f")
  # shellcheck disable=SC2086
  need=$([ -n "$cmd" ] && $cmd 2>&1 | tail -n 1)
  [[ $need =~ ^[0-9]+$ ]] && [ -n "$sig" ] && [ "$sig" -ge "$need" ] && ok "slurm_$kind.sbatch: --signal=USR1@$sig covers its default's lead time ($need s: $cmd)" \
    || bad "slurm_$kind.sbatch: --signal=USR1@'$sig' against '$cmd': '$need'"
done
for a in "--save_mbs 0|--save_mbs '0' must be a positive number" "--save_mbs 5 --safety 0.5|--safety '0.5' must be at least 1" \
         "|give the measured save rate" "--save_mbs 5 --tp 3|not divisible by tp = 3" "--save_mbs 5 --choose|build/plan's own mode"; do
  # shellcheck disable=SC2086
  expect_err "requeue_lead ${a%%|*}" "${a#*|}" 1 tools/requeue_lead -c configs/tiny.conf ${a%%|*}
done

# 2. Slurm stand-ins: srun runs its command on SLURM_NTASKS ranks with mpirun; scontrol logs what it was asked
mkdir -p "$T/bin"
# (srun forwards a SIGTERM to its tasks; mpirun cannot, so the stand-in goes through tools/preemptible, which
# hands it to the tasks as SIGUSR1: the trainer treats both alike)
cat >"$T/bin/srun" <<EOF
#!/usr/bin/env bash
o=(); while [[ "\$1" == --* ]]; do o+=("\$1"); shift; done     # srun's own options (--mpi=pmix, --kill-on-bad-exit=1, ...)
echo "\${o[*]} \${1##*/}" >>"$T/srun.log"
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
# every srun of the batch scripts (train and eval, CPU and GPU) names its PMI plug-in: without one, on a cluster whose
# MpiDefault is none, the tasks would start as singletons
n=$(grep -c . "$T/srun.log"); m=$(grep -c -- "--mpi=pmix" "$T/srun.log")
[ "$n" -ge 6 ] && [ "$m" = "$n" ] && ok "every srun of the batch scripts says --mpi=pmix ($n of $n: $(sort -u "$T/srun.log" | awk '{print $NF}' | sort -u | tr '\n' ' '))" \
  || bad "srun without --mpi=pmix: $m of $n: $(grep -v -- --mpi=pmix "$T/srun.log" | head -3 | tr '\n' ';')"
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

# 2d. the first submit from a fresh clone, as Slurm runs it: Slurm opens the #SBATCH --output file (%x the job name,
# %j the job id; relative to the submit directory) before the script runs, and a job whose log directory does not
# exist fails with no log at all. The submit directory here holds what a clone has (the tracked top-level entries) and
# the build; the defaults (OUT_DIR out/tiny) are kept
mkdir -p "$T/fresh"
{ git ls-files 2>/dev/null | cut -d/ -f1 | sort -u; echo build; } | while read -r e; do [ -e "$e" ] && ln -s "$PWD/$e" "$T/fresh/$e"; done
for kind in cpu gpu; do
  script=configs/launch/slurm_$kind.sbatch
  out=$(sed -n 's/^#SBATCH --output=//p' "$script"); jn=$(sed -n 's/^#SBATCH --job-name=//p' "$script")
  log=${out//%x/$jn}; log=${log//%j/4243}; [[ $log == /* ]] || log=$T/fresh/$log
  extra=(); [ $kind = gpu ] && extra=(TRAIN=build/emu/train)
  if ! { : >>"$log"; } 2>/dev/null; then bad "slurm_$kind.sbatch: Slurm could not open its log '$out' in a fresh clone (no directory '$(dirname "$out")')"; continue; fi
  (cd "$T/fresh" && env PATH="$T/bin:$PATH" SLURM_JOB_ID=4243 SLURM_NTASKS=2 SLURM_SUBMIT_DIR="$T/fresh" SLURM_CPUS_PER_TASK=1 \
    CONFIG=configs/tiny.conf DATA="$T/data" TP=1 CP=2 "${extra[@]}" bash "$script" --max_steps 2 --val_every 0 </dev/null >>"$log" 2>&1); rc=$?
  if [ $rc -eq 0 ] && grep -q "^done: 2 steps" "$log" && ls "$T/fresh/out/tiny/eval/"*.csv >/dev/null 2>&1; then
    ok "slurm_$kind.sbatch submitted from a fresh clone: its log ${log#$T/fresh/} (--output=$out) holds the run; out/tiny trained and evaluated"
  else bad "slurm_$kind.sbatch from a fresh clone: rc $rc: $(tail -3 "$log")"; fi
  rm -rf "$T/fresh/out"
done

# 2e. RANKS_PER_NODE=slots: the ranks of each HOSTFILE line's slots=N (hosts of different sizes)
printf 'localhost slots=2\n' >"$T/hosts1"
env HOSTFILE="$T/hosts1" RANKS_PER_NODE=slots TP=1 CP=2 CONFIG=configs/tiny.conf DATA="$T/data" OUT_DIR="$T/slots" \
  bash configs/launch/mpirun_cpu.sh --max_steps 2 --val_every 0 </dev/null >"$T/slots.out" 2>&1; rc=$?
[ $rc -eq 0 ] && grep -q "^grid: world 2 = dp 1 x cp 2 x tp 1" "$T/slots.out" && [ "$(last_step "$T/slots")" = 2 ] \
  && ok "mpirun_cpu.sh RANKS_PER_NODE=slots: 2 ranks from 'localhost slots=2'" || bad "RANKS_PER_NODE=slots: rc $rc: $(tail -3 "$T/slots.out")"
printf 'localhost slots=2\nnode2\n' >"$T/hosts2"; printf 'localhost slots=3\n' >"$T/hosts3"
expect_err "slots: a hostfile line without slots=N" "hosts2 line 2 ('node2 ')|slots=N" 1 env HOSTFILE="$T/hosts2" RANKS_PER_NODE=slots TP=1 CP=1 bash configs/launch/mpirun_cpu.sh
expect_err "slots: a host's slots not a multiple of TP" "hosts3 line 1|a multiple of TP = 2" 1 env HOSTFILE="$T/hosts3" RANKS_PER_NODE=slots TP=2 CP=1 bash configs/launch/mpirun_cpu.sh
expect_err "slots without a hostfile" "RANKS_PER_NODE=slots needs HOSTFILE" 1 env RANKS_PER_NODE=slots TP=1 CP=1 bash configs/launch/mpirun_cpu.sh

# 2f. tools/preemptible ends a launcher that outlives the job's abort line by its grace (mpirun waiting for an
# unreachable host: tests/test_multihost.sh does it for real); one that ends by itself keeps its status
stuck='echo "comm: ring hop on the ring group (2 ranks) did not finish within timeout_s = 1 s: rank 1 (no answer: stopped, hung or dead) did not arrive; rank 0 aborts the job" >&2; trap "" TERM; sleep 300'
t0=$SECONDS; RINGLM_LAUNCH_GRACE_S=2 timeout $HANG_S tools/preemptible bash -c "$stuck" >"$T/g.out" 2>"$T/g.err"; rc=$?
if [ $rc -eq 1 ] && [ "$(grep -c . "$T/g.err")" = 2 ] && grep -q "rank 0 aborts the job$" "$T/g.err" \
   && grep -qx "launch: [a-z]* had not ended 2 s after the job's abort line (a host unreachable? docs/reliability.md): ended it" "$T/g.err"; then
  ok "tools/preemptible: a launcher ignoring SIGTERM after the abort line ended after the 2 s grace ($((SECONDS - t0)) s), exit 1, 2 lines"
else bad "the grace after an abort line: rc $rc after $((SECONDS - t0)) s: $(head -c 500 "$T/g.err")"; fi
RINGLM_LAUNCH_GRACE_S=30 timeout $HANG_S tools/preemptible bash -c 'echo "x: rank 0 aborts the job" >&2; sleep 1; exit 3' 2>"$T/g2.err"; rc=$?
[ $rc -eq 3 ] && [ "$(grep -c . "$T/g2.err")" = 1 ] && ok "tools/preemptible: a launcher that ends within the grace keeps its exit status (3) and its one line" \
  || bad "a launcher ending within the grace: rc $rc: $(head -c 300 "$T/g2.err")"
expect_err "RINGLM_LAUNCH_GRACE_S not a whole number" "RINGLM_LAUNCH_GRACE_S='1.5' must be a whole number" 1 env RINGLM_LAUNCH_GRACE_S=1.5 tools/preemptible true

# 3. mpirun_gpu.sh on one node of (emulated) GPUs, tp 2 x cp 2
REAL_MPIRUN=$(command -v mpirun)
mkdir -p "$T/mpi/bin"   # (an mpirun that records its command line: the Open MPI installation the script names is $T/mpi)
printf '#!/bin/sh\necho "$*" >>"%s/mpirun.log"\nexec "%s" "$@"\n' "$T" "$REAL_MPIRUN" >"$T/mpi/bin/mpirun"; chmod +x "$T/mpi/bin/mpirun"
env PATH="$T/mpi/bin:$PATH" LD_LIBRARY_PATH="$T/lib:${LD_LIBRARY_PATH:-}" NODES=1 GPUS_PER_NODE=4 TP=2 CP=2 CONFIG=configs/tiny.conf DATA="$T/data" OUT_DIR="$T/gpu" TRAIN=build/emu/train \
  bash configs/launch/mpirun_gpu.sh --max_steps 3 --val_every 0 </dev/null >"$T/gpu.out" 2>&1; rc=$?
[ $rc -eq 0 ] && [ "$(last_step "$T/gpu")" = 3 ] && ls "$T"/gpu/eval/*.csv >/dev/null 2>&1 && ok "mpirun_gpu.sh: tp 2 x cp 2 on 4 emulated GPUs trained and evaluated" \
  || bad "mpirun_gpu.sh: rc $rc: $(tail -3 "$T/gpu.out")"
# its mpirun lines (train, eval) name Open MPI's installation (remote daemons find their programs and libraries
# whatever a node's login shell sets) and forward PATH and LD_LIBRARY_PATH (CUDA, NCCL) to the ranks
n=$(grep -c . "$T/mpirun.log" 2>/dev/null); m=$(grep -cE -- "--prefix $T/mpi .*-x PATH -x LD_LIBRARY_PATH( |$)" "$T/mpirun.log" 2>/dev/null)
[ "${n:-0}" = 2 ] && [ "$m" = 2 ] && ok "mpirun_gpu.sh's mpirun (train, eval): --prefix \$T/mpi (from the mpirun on PATH), -x PATH -x LD_LIBRARY_PATH" \
  || bad "mpirun_gpu.sh's mpirun lines: $(sed "s|$T/||g" "$T/mpirun.log" 2>/dev/null | head -c 400)"

# 4. bad input: one line, exit 1
expect_err "a world that is not a multiple of tp x cp" "3 ranks|tp x cp = 1 x 2" 1 env NODES=1 RANKS_PER_NODE=3 TP=1 CP=2 bash configs/launch/mpirun_cpu.sh
expect_err "the GPU binary not built" "build/nothing/train is not built|make cuda" 1 env TRAIN=build/nothing/train bash configs/launch/mpirun_gpu.sh
expect_err "several nodes without a hostfile" "HOSTFILE" 1 env NODES=2 RANKS_PER_NODE=1 TP=1 CP=1 bash configs/launch/mpirun_cpu.sh
finish
