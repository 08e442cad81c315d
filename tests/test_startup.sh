#!/usr/bin/env bash
# Start-up and watchdog settings of every program (issues 38 and 42):
#  - RINGLM_INIT_TIMEOUT_S that is not a number of seconds (ten, inf, -1, 1e9, blank) is refused with one line for the
#    job (launch rank 0 says it) and exit 1 on every rank; a sub-second value is kept (0.2 s: a rank stopped before
#    MPI started ends the job with the line naming 0.2 s, where a whole-second alarm would be 0 = none, a hang);
#  - tasks that srun started without PMI (each a world of one: SLURM_STEP_ID set, SLURM_NTASKS 2) end with one line
#    (task 0) and exit 1 each; a Slurm step of one task, mpirun's ranks inside an allocation (Slurm variables of
#    mpirun's own daemons) and the batch script's step are not refused;
#  - build/eval, build/sample and build/reshard take --timeout_s as build/train does: with a rank stopped after MPI's
#    start-up the job ends with the watchdog's line naming the given timeout and the stopped rank; bad values are one
#    line.
cd "$(dirname "$0")/.."
source tests/lib.sh
HANG_S=120   # (every job here ends within seconds; a hang is what the checks catch)
build/prepare --out "$T/d" --val-frac 0.2 model >/dev/null || { bad "prepare (run make)"; finish; }
A=(-c configs/tiny.conf --train_data "$T/d" --val_data "" --max_steps 1)

# 1. RINGLM_INIT_TIMEOUT_S
for v in ten inf -1 1e9 0.2s " "; do
  expect_err "RINGLM_INIT_TIMEOUT_S='$v' (2 ranks)" "RINGLM_INIT_TIMEOUT_S = '$v' must be a number of seconds above 0" 2 \
    env RINGLM_INIT_TIMEOUT_S="$v" build/train "${A[@]}" --out_dir "$T/bad"
done
ERR_RC=1 expect_err "RINGLM_INIT_TIMEOUT_S=nan, one process" "RINGLM_INIT_TIMEOUT_S = 'nan'" 1 env RINGLM_INIT_TIMEOUT_S=nan build/sample --ckpt x
RINGLM_TEST_STOP_BEFORE_INIT=1 RINGLM_INIT_TIMEOUT_S=0.2 in_session "$T/s.sid" timeout $HANG_S "${MPI[@]}" -np 2 \
  build/train "${A[@]}" --out_dir "$T/s" >"$T/s.out" 2>"$T/s.err"; rc=$?
end_session "$(cat "$T/s.sid")"
grep -v '^\[' "$T/s.err" >"$T/s.e1"
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c . "$T/s.e1")" = 1 ] && grep -qx "ringlm: rank 0: MPI's start-up did not finish within 0.2 s: another rank did not start or stopped (stopped, hung, or its host is gone); this rank ends the job" "$T/s.e1"; then
  ok "RINGLM_INIT_TIMEOUT_S=0.2, rank 1 stopped before MPI started: exit $rc, one line: $(cat "$T/s.e1")"
else bad "RINGLM_INIT_TIMEOUT_S=0.2 with rank 1 stopped: exit $rc (124: hung), $(head -c 400 "$T/s.err")"; fi

# 2. tasks of a Slurm step: SLURM_NTASKS against the MPI world
for i in 0 1; do
  env SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_NTASKS=2 SLURM_PROCID=$i timeout $HANG_S build/train "${A[@]}" --out_dir "$T/sl$i" \
    >"$T/sl$i.out" 2>"$T/sl$i.err" &
done
wait %1; rc0=$?; wait %2; rc1=$?
line="ringlm: srun started 2 tasks but MPI sees a world of 1 rank: the tasks started as singletons, without a PMI plug-in to join them; launch with srun --mpi=pmix (or --mpi=pmi2: \`srun --mpi=list\` shows what the cluster has; docs/scale.md, PMI)"
if [ $rc0 -eq 1 ] && [ $rc1 -eq 1 ] && [ "$(cat "$T/sl0.err")" = "$line" ] && [ ! -s "$T/sl1.err" ] && [ ! -e "$T/sl0/metrics.jsonl" ]; then
  ok "2 tasks started by srun as singletons: exit 1 each, one line (task 0): $line"
else bad "singleton tasks: exit $rc0 and $rc1: task 0 '$(head -c 300 "$T/sl0.err")', task 1 '$(head -c 300 "$T/sl1.err")'"; fi
check "a Slurm step of one task (SLURM_NTASKS 1) runs" env SLURM_STEP_ID=3 SLURM_NTASKS=1 SLURM_PROCID=0 build/train "${A[@]}" --out_dir "$T/sl2"
check "mpirun's 2 ranks inside an allocation of 3 tasks (the variables of mpirun's daemons' step) run" \
  env SLURM_STEP_ID=0 SLURM_NTASKS=3 SLURM_PROCID=0 $(launch 2) build/train "${A[@]}" --out_dir "$T/sl3"
check "the batch script's own step (SLURM_STEP_ID 4294967291) with SLURM_NTASKS 4 runs one process" \
  env SLURM_STEP_ID=4294967291 SLURM_NTASKS=4 SLURM_PROCID=0 build/train "${A[@]}" --out_dir "$T/sl4"

# 3. --timeout_s of eval, sample, reshard
timeout $HANG_S build/train "${A[@]}" --out_dir "$T/ck" --max_steps 2 >/dev/null 2>&1 || bad "the checkpoint run"
stall() {   # NAME PROGRAM ARGS...: on 2 ranks, rank 1 stopped once MPI is up, --timeout_s 1.5
  local name=$1; shift
  RINGLM_TEST_STOP_AFTER_INIT=1 in_session "$T/$name.sid" timeout $HANG_S "${MPI[@]}" -np 2 "$@" --timeout_s 1.5 \
    >"$T/$name.out" 2>"$T/$name.err"; rc=$?
  end_session "$(cat "$T/$name.sid")"
  grep -v '^\[' "$T/$name.err" >"$T/$name.e1"
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c . "$T/$name.e1")" = 1 ] && grep -qE "^comm: .* did not finish within timeout_s = 1\.5 s: rank 1 \(no answer: stopped, hung or dead\) did not arrive; rank 0 aborts the job$" "$T/$name.e1"; then
    ok "$name --timeout_s 1.5, rank 1 stopped after MPI's start-up: exit $rc, one line: $(cat "$T/$name.e1")"
  else bad "$name --timeout_s 1.5 with rank 1 stopped: exit $rc (124: hung), $(grep -c . "$T/$name.e1") lines: $(head -c 700 "$T/$name.e1" | tr '\n' '|')"; fi
}
stall eval build/eval --ckpt "$T/ck" --data "$T/d" --seq_len 64 --out "$T/ev"
stall sample build/sample --ckpt "$T/ck" --max_tokens 4
stall reshard build/reshard --verify "$T/ck/ckpt_00000002.h5"
for p in eval sample reshard; do
  for v in ten -1 inf 1e10; do
    expect_err "build/$p --timeout_s $v" "$p: --timeout_s '$v' must be a number of seconds >= 0" 2 build/$p --timeout_s "$v" --ckpt "$T/ck"
  done
done
check "build/reshard --verify with --timeout_s 0 (no watchdog)" build/reshard --verify "$T/ck/ckpt_00000002.h5" --timeout_s 0
check "build/sample --timeout-s=30 (the option's other spelling)" build/sample --ckpt "$T/ck" --max_tokens 2 --timeout-s=30
finish
