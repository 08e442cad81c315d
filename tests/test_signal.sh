#!/usr/bin/env bash
# Preemption: SIGUSR1 or SIGTERM (to the trainer, or to the launch wrapper tools/preemptible around mpirun) makes
# every rank finish the current step, save a checkpoint and exit 0; `--resume latest` then continues bit-identically.
# Also with steps longer than mpirun's own teardown, the signal sent to the wrapper's whole process group (Ctrl-C).
cd "$(dirname "$0")/.."
source tests/lib.sh
build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad prepare; finish; }
A=(-c configs/tiny.conf --train_data "$T/data" --val_data "" --max_steps 40 --log_every 1)

# stop once the run has logged 5 steps; prints the stop line's step
stop_run() {  # signal out_dir launcher... (the launcher's own arguments may add or override keys)
  local sig=$1 od=$2; shift 2
  "$@" --out_dir "$od" >"$od.out" 2>&1 &
  local job=$! n
  local end=$((SECONDS + HANG_S))
  while [ $SECONDS -lt $end ]; do
    n=$(grep -c . "$od/metrics.jsonl" 2>/dev/null); [ "${n:-0}" -ge 5 ] && break; kill -0 $job 2>/dev/null || break; sleep 0.01
  done
  kill -"$sig" "$job"
  wait "$job"; echo $? >"$od.rc"
}
build/train "${A[@]}" --out_dir "$T/full" >/dev/null 2>&1 || bad "uninterrupted run"

stop_run USR1 "$T/one" build/train "${A[@]}"
s=$(sed -nE 's/^stopping after step ([0-9]+) on signal 10.*/\1/p' "$T/one.out")
if [ -n "$s" ] && [ "$s" -lt 40 ] && [ "$(cat "$T/one.rc")" = 0 ] && [ "$(cat "$T/one/latest")" = "$(printf 'ckpt_%08d.h5' "$s")" ]; then
  ok "SIGUSR1: stopped after step $s, exit 0, latest = $(cat "$T/one/latest")"
else bad "SIGUSR1: rc $(cat "$T/one.rc"), stop step '$s', latest $(cat "$T/one/latest" 2>/dev/null)"; fi
# the lines in the order of events: the step, its checkpoint, the stop (before: the stop line came first)
order=$(grep -nE "^step +$s/40 |^saved checkpoint .*/ckpt_$(printf %08d "$s").h5 |^stopping after step $s " "$T/one.out" | cut -c1-40 | tr '\n' ' ')
[ "$(grep -E "^step +$s/40 |^saved checkpoint .*/ckpt_$(printf %08d "$s").h5 |^stopping after step $s " "$T/one.out" | cut -c1-4 | tr '\n' ' ')" = "step save stop " ] \
  && ok "stop lines in order: step $s, its checkpoint, the stop" || bad "stop lines out of order: $order"
build/train "${A[@]}" --out_dir "$T/one" --resume latest >"$T/one2.out" 2>&1 || bad "resume after SIGUSR1"
$PY - "$T/one/metrics.jsonl" "$T/full/metrics.jsonl" <<'PYEOF' && ok "resumed run: every step's loss identical to the uninterrupted run" || bad "resumed losses differ"
import json, sys
a = {}
for l in open(sys.argv[1]): r = json.loads(l); a[r["step"]] = r["loss"]    # later lines supersede
b = {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(sys.argv[2])}
assert sorted(a) == list(range(1, 41)) and a == b, [(k, a.get(k), b[k]) for k in b if a.get(k) != b[k]][:3]
PYEOF

# (a longer run, so that the signal lands well before the end) SIGTERM to the documented launch wrapper: mpirun
# itself tears the job down 1 s after a SIGTERM; tools/preemptible hands it on as SIGUSR1, which mpirun forwards
stop_run TERM "$T/mpi" tools/preemptible "${MPI[@]}" -np 2 build/train "${A[@]}" --cp 2 --max_steps 1000
s=$(sed -nE 's/^stopping after step ([0-9]+) on signal 10.*/\1/p' "$T/mpi.out")   # (USR1, from the wrapper)
if [ -n "$s" ] && [ "$s" -lt 1000 ] && [ "$(cat "$T/mpi/latest")" = "$(printf 'ckpt_%08d.h5' "$s")" ] && [ "$(cat "$T/mpi.rc")" = 0 ]; then
  ok "SIGTERM to tools/preemptible mpirun (cp 2): both ranks stopped after step $s, saved $(cat "$T/mpi/latest"), exit $(cat "$T/mpi.rc")"
else bad "SIGTERM to tools/preemptible mpirun: stop step '$s', latest $(cat "$T/mpi/latest" 2>/dev/null): $(tail -3 "$T/mpi.out")"; fi
"${MPI[@]}" -np 2 build/train "${A[@]}" --cp 2 --out_dir "$T/mpi" --resume latest --max_steps $((s + 3)) >"$T/mpi2.out" 2>&1 \
  && grep -q "^done: $((s + 3)) steps" "$T/mpi2.out" && ok "resumed from the SIGTERM checkpoint for 3 more steps" || bad "resume after SIGTERM"

# A step longer than Open MPI's own teardown (SIGTERM and SIGKILL 1 s apart after mpirun is signalled; the test hook
# RINGLM_TEST_STEP_SLOW_MS makes each step 2.5 s), the signal sent to the launcher's whole process group, as a
# terminal's Ctrl-C or a scheduler's kill of the group does: tools/preemptible keeps mpirun in a session of its own,
# so only the wrapper is hit; the ranks finish the step, save a verified checkpoint, exit 0.
slow_stop() {  # NAME SIGNAL
  local name=$1 sig=$2 od="$T/$1" job sid s i rc t0 t1
  RINGLM_TEST_STEP_SLOW_MS=2500 in_session "$T/$name.sid" tools/preemptible "${MPI[@]}" -np 2 build/train "${A[@]}" --cp 2 \
    --max_steps 100 --out_dir "$od" >"$od.out" 2>&1 &
  job=$!
  local end=$((SECONDS + HANG_S))
  while [ $SECONDS -lt $end ]; do [ -s "$od/metrics.jsonl" ] && break; kill -0 $job 2>/dev/null || break; sleep 0.1; done
  sid=$(cat "$T/$name.sid"); t0=$(date +%s.%N)
  kill -"$sig" -- -"$sid"
  wait $job; rc=$?; t1=$(date +%s.%N)
  s=$(sed -nE 's/^stopping after step ([0-9]+) on signal 10.*/\1/p' "$od.out")
  if [ $rc -eq 0 ] && [ -n "$s" ] && [ "$(cat "$od/latest" 2>/dev/null)" = "$(printf 'ckpt_%08d.h5' "$s")" ]; then
    check "SIG$sig to the process group of tools/preemptible mpirun, 2.5 s steps: stopped after step $s, $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}') s later, exit 0, the checkpoint verifies" \
      $PY tests/ckpt_check.py verify "$od/$(cat "$od/latest")" "$s"
  else bad "SIG$sig to the process group, 2.5 s steps: exit $rc, stop step '$s', latest '$(cat "$od/latest" 2>/dev/null)': $(grep -v '^step' "$od.out" | tail -3)"; fi
  end_session "$(cat "$T/$name.sid")"
}
slow_stop slowint INT

# a signal whose trap runs in the moment between tools/preemptible's look at what is pending and its wait (a test hook
# sends it there): still passed on at once, not when the launcher ends by itself (a stand-in launcher that records
# SIGUSR1, else ends after 60 s)
cat > "$T/fake_launcher" <<'SH'
#!/usr/bin/env bash
trap 'echo usr1 > "$0.got"; exit 0' USR1
sleep 60 & wait
SH
chmod +x "$T/fake_launcher"
RINGLM_TEST_PREEMPT_RACE=1 timeout -k 10 $HANG_S tools/preemptible "$T/fake_launcher" >"$T/race.out" 2>&1; rc=$?
[ $rc -eq 0 ] && [ -s "$T/fake_launcher.got" ] && ok "a signal just before tools/preemptible's wait is passed on at once (the launcher got SIGUSR1)" \
  || bad "a signal just before the wait: exit $rc, the launcher $([ -s "$T/fake_launcher.got" ] && echo got || echo never got) SIGUSR1: $(head -c 300 "$T/race.out")"
finish
