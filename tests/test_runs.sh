#!/usr/bin/env bash
# Concurrent and mistaken runs, and stalled ranks (issue 11):
#  - the out_dir lock: a second run into a live run's out_dir is refused naming the holder's host and pid, also
#    with --force and under mpirun; two fresh runs started together: exactly one trains; a kill -9'd run's lock
#    is taken over with a note; a finished run leaves no lock behind;
#  - the run id (OUT_DIR/run_id and the checkpoint's `run_id`): resuming run A's checkpoint into run B's out_dir
#    is refused and leaves B untouched; with --force B's records and checkpoints are set aside, not lost;
#  - resuming from an earlier checkpoint of the same out_dir: said, metrics.jsonl keeps each step once (the later
#    records and checkpoints set aside), and the resumed steps equal the first run's;
#  - resume with max_steps at or below the checkpoint's step says so, exits 0 and writes nothing;
#  - resume at another seq_len: without shuffle the token stream continues where it stopped; with shuffle
#    mid-epoch one line refuses it (--force continues at the same token position);
#  - a training data set that shrank under a resume is reported;
#  - the watchdog: one rank of a 2-rank run (cp 2: ring hops; tp 2: collectives) stopped with SIGSTOP ends the
#    job within timeout_s + a few seconds with one line naming the operation and the rank, the waiting rank
#    sleeps instead of spinning, and no process is left.
cd "$(dirname "$0")/.."
source tests/lib.sh

build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
A=(-c configs/tiny.conf --train_data "$T/data" --val_data "" --log_every 1000)
HOST=$(hostname)

# snap DIR: name, size, mtime and md5 of every file under DIR (what must not change)
snap() { (cd "$1" && find . -type f -printf '%p %s %T@ ' -exec md5sum {} \; | awk '{print $1, $2, $3, $4}' | sort); }
# steps FILE: the "step" of every record of a metrics.jsonl, space-separated
steps() { sed -nE 's/^\{"step": ([0-9]+),.*/\1/p' "$1" | tr '\n' ' ' | sed 's/ $//'; }
# wait_lines FILE N JOB: until FILE has N lines; 1 when the background JOB ends first (or after HANG_S)
wait_lines() {
  local n end=$((SECONDS + HANG_S))
  while [ $SECONDS -lt $end ]; do
    n=$(grep -c . "$1" 2>/dev/null); [ "${n:-0}" -ge "$2" ] && return 0
    kill -0 "$3" 2>/dev/null || return 1; sleep 0.05
  done; return 1
}
# rank_pid SID RANK: the pid of MPI rank RANK in session SID
rank_pid() {
  local p; for p in $(ps -o pid= -s "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null; }

# ---- 1. the out_dir lock ----
L="$T/live"
in_session "$T/live.sid" build/train "${A[@]}" --out_dir "$L" --max_steps 100000 --ckpt_every 2 >"$T/live.out" 2>&1 &
job=$!
if wait_lines "$L/metrics.jsonl" 3 $job && [ -f "$L/latest" ]; then
  holder=$(cat "$T/live.sid")
  expect_err "a fresh run with --force into a live run's out_dir" "$L' is in use by a running job|host $HOST pid $holder|--force does not override" \
    1 build/train "${A[@]}" --out_dir "$L" --max_steps 2 --force
  expect_err "mpirun -np 2: --resume latest --force into a live run's out_dir" "$L' is in use by a running job|host $HOST pid $holder" \
    2 build/train "${A[@]}" --out_dir "$L" --max_steps 2 --cp 2 --resume latest --force
  end_session "$holder" $job && [ "$ended" -ge 1 ] || bad "kill -9 of the live run"
  grep -q "^host $HOST pid $holder since " "$L/train.lock" && ok "the killed run's lock file stays: $(cat "$L/train.lock")" \
    || bad "the killed run's lock file: $(cat "$L/train.lock" 2>&1)"
  last=$(sed -nE 's/^ckpt_0*([0-9]+)\.h5$/\1/p' "$L/latest")
  if timeout $HANG_S build/train "${A[@]}" --out_dir "$L" --resume latest --max_steps $((last + 1)) >"$T/take.out" 2>"$T/take.err"; then
    grep -q "^note: out_dir '$L' was locked by host $HOST pid $holder since .*, which is no longer running (killed or crashed): its lock is taken over" "$T/take.out" \
      && ok "a dead run's lock is taken over with a note: $(grep -m1 'was locked by' "$T/take.out" | sed "s|$T/||g")" \
      || bad "no note on taking over the dead run's lock: $(grep '^note' "$T/take.out" | head -3)"
    [ ! -e "$L/train.lock" ] && ok "a finished run leaves no lock file" || bad "lock file left: $(cat "$L/train.lock")"
  else bad "resume after the holder was killed: $(cat "$T/take.err")"; fi
else bad "the live run did not start: $(tail -3 "$T/live.out")"; end_session "$(cat "$T/live.sid")" $job; fi

both=0; one=0
for i in 1 2; do
  build/train "${A[@]}" --out_dir "$T/race$i" --max_steps 2 >"$T/race$i.a" 2>&1 & ja=$!
  build/train "${A[@]}" --out_dir "$T/race$i" --max_steps 2 >"$T/race$i.b" 2>&1 & jb=$!
  wait $ja; ra=$?; wait $jb; rb=$?
  if [ $ra -eq 0 ] && [ $rb -eq 0 ]; then both=$((both + 1)); elif [ $ra -eq 0 ] || [ $rb -eq 0 ]; then one=$((one + 1)); fi
done
[ $one -eq 2 ] && ok "two fresh runs started together into one out_dir, twice: exactly one trains each time ($(grep -h -m1 '^train:' "$T"/race*.[ab] | head -1 | cut -c1-60 | sed "s|$T/||g")...)" \
  || bad "two fresh runs started together, twice: both accepted $both times, exactly one $one times"

# ---- 2. the run id: run A's checkpoint into run B's out_dir ----
timeout $HANG_S build/train "${A[@]}" --out_dir "$T/A" --max_steps 4 --ckpt_every 2 >/dev/null 2>&1 || bad "run A"
timeout $HANG_S build/train "${A[@]}" --out_dir "$T/B" --max_steps 4 --ckpt_every 2 --seed 7 >/dev/null 2>&1 || bad "run B"
ida=$(cat "$T/A/run_id" 2>/dev/null); idb=$(cat "$T/B/run_id" 2>/dev/null)
inck=$($PY -c "import h5py, sys; print(h5py.File(sys.argv[1], 'r').attrs['run_id'].decode())" "$T/A/ckpt_00000002.h5" 2>&1)
[ -n "$ida" ] && [ -n "$idb" ] && [ "$ida" != "$idb" ] && [ "$inck" = "$ida" ] \
  && ok "each run has its own id, in OUT_DIR/run_id and in its checkpoints' run_id attribute ($ida, $idb)" || bad "run ids: '$ida' '$idb', checkpoint '$inck'"
snap "$T/B" >"$T/B.before"
expect_err "--resume run A's checkpoint --out_dir run B's" "out_dir '$T/B' holds another run (run id $idb)|run id $ida|--force" \
  1 build/train "${A[@]}" --out_dir "$T/B" --resume "$T/A/ckpt_00000002.h5" --max_steps 6
snap "$T/B" >"$T/B.after"
cmp -s "$T/B.before" "$T/B.after" && ok "the refused resume left every file of run B as it was" || bad "run B changed: $(diff "$T/B.before" "$T/B.after" | head -5)"
if timeout $HANG_S build/train "${A[@]}" --out_dir "$T/B" --resume "$T/A/ckpt_00000002.h5" --max_steps 6 --force >"$T/Bf.out" 2>&1; then
  [ "$(steps "$T/B/metrics.jsonl")" = "3 4 5 6" ] && [ "$(steps "$T/B/metrics.superseded.jsonl")" = "1 2 3 4" ] \
    && [ -f "$T/B/ckpt_00000004.h5.superseded" ] && [ -f "$T/B/ckpt_00000002.h5.superseded" ] && [ "$(cat "$T/B/run_id")" = "$ida" ] \
    && [ "$(cat "$T/B/latest")" = ckpt_00000006.h5 ] \
    && ok "with --force: B's records moved to metrics.superseded.jsonl, its checkpoints renamed *.superseded, run_id and latest are A's continuation" \
    || bad "--force into B: metrics '$(steps "$T/B/metrics.jsonl")', superseded '$(steps "$T/B/metrics.superseded.jsonl" 2>/dev/null)', files $(ls "$T/B" | tr '\n' ' ')"
else bad "--force resume into B: $(tail -2 "$T/Bf.out")"; fi
timeout $HANG_S build/train "${A[@]}" --out_dir "$T/A2" --resume "$T/A/ckpt_00000002.h5" --max_steps 3 >"$T/A2.out" 2>&1 \
  && [ -n "$ida" ] && [ "$(cat "$T/A2/run_id")" = "$ida" ] && ok "resuming into a new out_dir continues run A (its id)" || bad "resume into a new out_dir: $(tail -2 "$T/A2.out")"

# ---- 3. resuming from an earlier checkpoint of the same out_dir ----
U="$T/U"
timeout $HANG_S build/train "${A[@]}" --out_dir "$U" --max_steps 8 --ckpt_every 2 --keep_last 0 >/dev/null 2>&1 || bad "run U"
cp "$U/metrics.jsonl" "$T/U.first"
cp -a "$U" "$T/U2"
if timeout $HANG_S build/train "${A[@]}" --out_dir "$U" --resume "$U/ckpt_00000004.h5" --max_steps 6 --ckpt_every 2 --keep_last 0 >"$T/U.out" 2>&1; then
  grep -q "^note: resuming from step 4, earlier than out_dir '$U' reached (checkpoints up to step 8, metrics.jsonl up to step 8)" "$T/U.out" \
    && ok "resume from an earlier checkpoint is said: $(grep -m1 '^note: resuming from' "$T/U.out" | sed "s|$T/||g")" || bad "no note: $(grep '^note' "$T/U.out")"
  [ "$(steps "$U/metrics.jsonl")" = "1 2 3 4 5 6" ] && [ "$(steps "$U/metrics.superseded.jsonl")" = "5 6 7 8" ] \
    && ok "metrics.jsonl has steps 1-6 once each; the abandoned steps 5-8 are in metrics.superseded.jsonl" \
    || bad "metrics.jsonl steps '$(steps "$U/metrics.jsonl")', superseded '$(steps "$U/metrics.superseded.jsonl" 2>/dev/null)'"
  [ "$(cat "$U/latest")" = ckpt_00000006.h5 ] && [ -f "$U/ckpt_00000008.h5.superseded" ] && [ -f "$U/ckpt_00000006.h5.superseded" ] && [ ! -e "$U/ckpt_00000008.h5" ] \
    && ok "the later checkpoints are set aside (ckpt_*.h5.superseded) and latest names the new ckpt_00000006.h5" || bad "checkpoints: $(ls "$U" | tr '\n' ' '), latest $(cat "$U/latest")"
  $PY - "$U/metrics.jsonl" "$T/U.first" <<'PYEOF' && ok "the resumed steps 5-6 have the first run's losses exactly" || bad "resumed losses differ"
import json, sys
a = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(sys.argv[1])}
b = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(sys.argv[2])}
assert all(a[s] == b[s] for s in range(1, 7)), [(s, a[s], b[s]) for s in range(1, 7)]
PYEOF
else bad "resume from an earlier checkpoint: $(tail -2 "$T/U.out")"; fi
# a run that logged steps past its last checkpoint and died: the resumed run does not log them twice
rm -f "$T/U2/ckpt_00000006.h5" "$T/U2/ckpt_00000008.h5"; echo ckpt_00000004.h5 >"$T/U2/latest"
if timeout $HANG_S build/train "${A[@]}" --out_dir "$T/U2" --resume latest --max_steps 5 >"$T/U2.out" 2>&1; then
  grep -q "^note: metrics.jsonl has 4 records past the checkpoint's step 4 (up to step 8" "$T/U2.out" && [ "$(steps "$T/U2/metrics.jsonl")" = "1 2 3 4 5" ] \
    && ok "records logged after the last checkpoint are set aside on resume: $(grep -m1 '^note: metrics' "$T/U2.out")" \
    || bad "records past the checkpoint: steps '$(steps "$T/U2/metrics.jsonl")', $(grep '^note' "$T/U2.out" | tail -1)"
else bad "resume latest in U2: $(tail -2 "$T/U2.out")"; fi

# ---- 4. resume with max_steps at or below the checkpoint's step ----
for ms in 4 2; do
  snap "$T/A" >"$T/A.before"
  timeout $HANG_S build/train "${A[@]}" --out_dir "$T/A" --resume latest --max_steps $ms >"$T/ms.out" 2>"$T/ms.err"; rc=$?
  snap "$T/A" >"$T/A.after"
  if [ $rc -eq 0 ] && grep -q "^nothing to train: the checkpoint is at step 4 and max_steps = $ms; no step was run and nothing was written" "$T/ms.out" \
     && ! grep -q '^step ' "$T/ms.out" && [ ! -s "$T/ms.err" ] && cmp -s "$T/A.before" "$T/A.after"; then
    ok "resume at step 4 with max_steps $ms: exit 0, out_dir untouched, says: $(grep -m1 '^nothing' "$T/ms.out")"
  else bad "resume with max_steps $ms: exit $rc, '$(grep '^nothing' "$T/ms.out")', stderr '$(cat "$T/ms.err")', changed: $(diff "$T/A.before" "$T/A.after" | head -3)"; fi
done

# ---- 5. resume at another seq_len ----
NSEQ=$(sed -nE 's/.* train [0-9]+ tokens, ([0-9]+) sequences of 128 .*/\1/p' "$T/U.out")   # of this data set at seq_len 128
expect_err "shuffled data, resumed mid-epoch at another seq_len" "trained at seq_len 128, this run asks for 64|epoch 0, 32 of $NSEQ sequences done|--seq_len 128|--force" \
  1 build/train "${A[@]}" --out_dir "$T/A" --resume latest --max_steps 5 --seq_len 64
timeout $HANG_S build/train "${A[@]}" --out_dir "$T/S0" --max_steps 3 --shuffle 0 >/dev/null 2>&1 || bad "run S0"
if timeout $HANG_S build/train "${A[@]}" --out_dir "$T/S0" --resume latest --max_steps 5 --shuffle 0 --seq_len 64 >"$T/S0.out" 2>&1; then
  toks=$($PY -c "import json,sys; print(' '.join(str(json.loads(l)['tokens_seen']) for l in open(sys.argv[1])))" "$T/S0/metrics.jsonl")
  grep -q "^note: seq_len 128 -> 64: the data cursor (24 sequences of 128: epoch 0, token 3072) continues as 48 sequences of 64 (epoch 0, token 3072)" "$T/S0.out" \
    && [ "$toks" = "1024 2048 3072 3584 4096" ] && ok "unshuffled, seq_len 128 -> 64: the stream continues at token 3072 (tokens_seen $toks)" \
    || bad "seq_len 128 -> 64 unshuffled: tokens_seen '$toks', $(grep '^note: seq_len' "$T/S0.out")"
else bad "resume at seq_len 64 without shuffle: $(tail -2 "$T/S0.out")"; fi
timeout $HANG_S build/train "${A[@]}" --out_dir "$T/A2" --resume latest --max_steps 4 --seq_len 64 --force >"$T/S1.out" 2>&1 \
  && grep -q "^note: seq_len 128 -> 64: .* continues as 48 sequences of 64 (epoch 0, token 3072), in the new length's shuffled order" "$T/S1.out" \
  && ok "with --force a shuffled epoch continues at the same token position, and says so" || bad "--force seq_len: $(grep '^note: seq' "$T/S1.out") $(tail -1 "$T/S1.out")"

# ---- 6. the training data shrank under a resume ----
build/prepare --out "$T/small" --val-frac 0 common/util.h >/dev/null || bad "prepare small"
if timeout $HANG_S build/train "${A[@]}" --out_dir "$T/A" --resume latest --max_steps 5 --train_data "$T/small" >"$T/sh.out" 2>&1; then
  grep -qE "^WARNING: the training data shrank since the checkpoint: [0-9]+ tokens then, [0-9]+ now .*the data cursor 32 now lies in epoch [1-9][0-9]* \(it wrapped" "$T/sh.out" \
    && ok "a shrunken data set is reported: $(grep -m1 '^WARNING: the training data' "$T/sh.out" | cut -c1-150)..." || bad "no report of the shrunken data: $(grep -i 'warn\|note' "$T/sh.out")"
else bad "resume on the smaller data set: $(tail -2 "$T/sh.out")"; fi

# ---- 7. the watchdog: one rank stopped with SIGSTOP ----
expect_err "timeout_s must be >= 0" "timeout_s = -1 must be >= 0" 1 build/train "${A[@]}" --out_dir "$T/bad" --timeout_s -1
TO=6
stall() {  # NAME LAYOUT...: rank 1 of a 2-rank run stopped with SIGSTOP
  local name=$1; shift
  in_session "$T/$name.sid" "${MPI[@]}" -np 2 build/train "${A[@]}" --out_dir "$T/$name" --max_steps 100000 "$@" --timeout_s $TO \
    >"$T/$name.out" 2>"$T/$name.err" &
  local job=$! sid r0 r1 c0 c1 t0 t1 i alive=0 rc wait_s n left
  if ! wait_lines "$T/$name/metrics.jsonl" 2 $job; then
    bad "$name: the 2-rank run did not start: $(tail -3 "$T/$name.out") $(head -3 "$T/$name.err")"; end_session "$(cat "$T/$name.sid")" $job; return
  fi
  sid=$(cat "$T/$name.sid"); r0=$(rank_pid "$sid" 0); r1=$(rank_pid "$sid" 1)
  kill -STOP "$r1"; t0=$(date +%s.%N)
  sleep 1.5; c0=$(cpu_ticks "$r0"); sleep 1; c1=$(cpu_ticks "$r0")
  local end=$((SECONDS + HANG_S)); while [ $SECONDS -lt $end ]; do kill -0 $job 2>/dev/null || break; sleep 0.1; done
  t1=$(date +%s.%N); kill -0 $job 2>/dev/null && alive=1
  wait_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}')
  [ -n "$c0" ] && [ -n "$c1" ] && [ $((c1 - c0)) -le 5 ] \
    && ok "$name: while rank 1 is stopped, rank 0 waits without spinning: $((c1 - c0)) of $(getconf CLK_TCK) CPU ticks in 1 s" \
    || bad "$name: rank 0 spins while waiting: $((c1 - c0)) CPU ticks in 1 s (of $(getconf CLK_TCK))"
  wait $job 2>/dev/null; rc=$?
  # Open MPI's own lines from the stopped rank, killed mid-transfer ("[host:pid] Read -1, ..."), are not ringlm's
  grep -v '^\[[^]]*:[0-9]*\] ' "$T/$name.err" >"$T/$name.e1"
  n=$(grep -c . "$T/$name.e1")
  if [ $alive -eq 0 ] && [ $rc -ne 0 ] && [ "$n" -eq 1 ] && grep -qE "^comm: [a-z_ ()]+ on the [a-z ]+ group \(2 ranks\) did not finish within timeout_s = $TO s: rank 1 \(no answer: stopped, hung or dead\) did not arrive; rank 0 aborts the job$" "$T/$name.e1" \
     && awk -v w="$wait_s" -v t=$TO 'BEGIN{exit !(w >= t && w <= t + 60)}'; then
    ok "$name: SIGSTOP of rank 1 (timeout_s $TO): exit $rc after $wait_s s with one line: $(cat "$T/$name.e1")"
  else bad "$name: SIGSTOP: still running $alive, exit $rc after $wait_s s, $n lines: $(head -c 500 "$T/$name.err")"; fi
  end=$((SECONDS + 60)); while [ $SECONDS -lt $end ]; do [ -z "$(ps -o pid= -s "$sid")" ] && break; sleep 0.1; done   # (exiting)
  left=$(ps -o pid=,stat=,args= -s "$sid" | cut -c1-60 | tr '\n' ';')
  end_session "$sid" && [ "$ended" -eq 0 ] && ok "$name: no process of the job is left" || bad "$name: $ended processes were left (killed now): $left"
}
stall "cp 2 (ring hops)" --cp 2
stall "tp 2 (collectives)" --tp 2

finish
