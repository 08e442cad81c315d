#!/usr/bin/env bash
# tests/run_all.sh, the suite's runner, on stand-in tests: its total counts every test's result line (a test without
# one, or exiting non-zero without a failed check, is one failure); Ctrl-C (SIGINT to the runner's foreground process
# group, as a terminal sends it) and SIGTERM stop it: no test starts after the signal, every running test and all it
# started (a nested `timeout` in its own process group, a background child) end, the runner exits 130 / 143 with one
# line; a test that ignores SIGTERM is killed after the grace; a rerun in the same log folder passes.
cd "$(dirname "$0")/.."
source tests/lib.sh
export RINGLM_TEST_LOGS=$T/logs
U=$$.$RANDOM          # a mark in every stand-in's process arguments: what is left of them is found by it
# fake NAME BODY: a stand-in test $T/NAME.sh
fake() { printf '#!/usr/bin/env bash\n%s\n' "$2" >"$T/$1.sh"; }
left() { pgrep -f "ringlm_stand_in_$U" | grep -vx "$$" | wc -l; }
# fg CMD...: CMD in the background as a terminal's foreground job would run: SIGINT and SIGTERM at their defaults
# (a shell's background command ignores SIGINT, and a signal ignored at a shell's start cannot be trapped) and in a
# process group of its own, so that SIGINT can be sent to the group as a terminal sends it
fg() { exec $PY -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.setpgrp(); os.execvp(sys.argv[1], sys.argv[1:])' "$@"; }

# 1. the total
fake pass 'echo "ok   a"; echo "2 passed, 0 failed"'
fake failing 'echo "FAIL b"; echo "1 passed, 1 failed"; exit 1'
fake silent 'echo nothing'
fake crash 'echo "3 passed, 0 failed"; exit 3'
timeout $HANG_S bash tests/run_all.sh -j 2 "$T/pass.sh" "$T/failing.sh" "$T/silent.sh" "$T/crash.sh" >"$T/r1" 2>&1; rc=$?
if [ $rc -ne 0 ] && [ "$(tail -n 1 "$T/r1")" = "6 passed, 3 failed" ] && grep -q "^!!! $T/silent.sh printed no result line" "$T/r1" \
   && grep -q "^!!! $T/crash.sh exited 3 without a failed check" "$T/r1" && grep -q "^FAIL b" "$T/r1"; then
  ok "the total: $(tail -n 1 "$T/r1") (2 + 1 + 3 passed; 1 failed check, no result line, exit 3 without a failure), exit $rc"
else bad "the total: exit $rc, $(tail -n 3 "$T/r1" | tr '\n' '|')"; fi

# 2. stops. Stand-ins that start a nested timeout (its own process group: the terminal's SIGINT never reaches it) and a
#    background child, then wait; "stubborn" ignores SIGTERM (the grace, then SIGKILL)
body='mkdir -p "'$T'/started"; touch "'$T'/started/$(basename "$0")"
bash -c "exec -a ringlm_stand_in_'$U' sleep 300" &
timeout 300 bash -c "exec -a ringlm_stand_in_'$U' sleep 300" &
wait'
for i in 1 2 3 4; do fake "slow$i" "$body"; done
fake stubborn "trap '' TERM; $body"
for sig in INT TERM; do
  rm -rf "$T/started"
  want=130; [ $sig = TERM ] && want=143
  # the runner as a terminal's foreground job (fg), signalled as a group for SIGINT
  fg bash tests/run_all.sh -j 2 "$T/slow1.sh" "$T/slow2.sh" "$T/slow3.sh" "$T/slow4.sh" >"$T/r.$sig" 2>&1 &
  pid=$!
  for ((w = 0; w < HANG_S * 10; w++)); do [ "$(ls "$T/started" 2>/dev/null | wc -l)" -ge 2 ] && [ "$(left)" -ge 4 ] && break; sleep 0.1; done
  if [ $sig = INT ]; then kill -INT -- "-$pid"; else kill -TERM "$pid"; fi
  for ((w = 0; w < HANG_S * 10; w++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  wait "$pid"; rc=$?
  n=$(ls "$T/started" | wc -l); l=$(left)
  if [ $rc -eq $want ] && [ "$n" -eq 2 ] && [ "$l" -eq 0 ] && grep -q "^run_all: stopped by SIG$sig after [0-9]* s: 2 of 4 tests had started, 2 stopped unfinished; no result$" "$T/r.$sig" \
     && ! grep -q "passed, .* failed$" <(tail -n 1 "$T/r.$sig"); then
    ok "SIG$sig: exit $rc, $n of 4 tests started, nothing left behind: $(tail -n 1 "$T/r.$sig")"
  else bad "SIG$sig: exit $rc (want $want), $n started, $l processes left: $(tail -n 3 "$T/r.$sig" | tr '\n' '|')"; fi
  pkill -KILL -f "ringlm_stand_in_$U" 2>/dev/null
done

# 3. a test that ignores SIGTERM: SIGKILL after the grace (1 s here)
rm -rf "$T/started"
RINGLM_TEST_STOP_GRACE_S=1 fg bash tests/run_all.sh -j 2 "$T/stubborn.sh" "$T/slow1.sh" >"$T/r.k" 2>&1 &
pid=$!
for ((w = 0; w < HANG_S * 10; w++)); do [ "$(ls "$T/started" 2>/dev/null | wc -l)" -ge 2 ] && [ "$(left)" -ge 4 ] && break; sleep 0.1; done
kill -INT -- "-$pid"
for ((w = 0; w < HANG_S * 10; w++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
wait "$pid"; rc=$?
# (the stand-in that does not ignore SIGTERM may need SIGKILL too on a busy machine: 1 s is a short grace)
[ $rc -eq 130 ] && [ "$(left)" -eq 0 ] && grep -qE "2 stopped unfinished \([12] of them needed SIGKILL\); no result$" "$T/r.k" \
  && ok "a test that ignores SIGTERM is killed after the grace: $(tail -n 1 "$T/r.k")" \
  || bad "SIGTERM ignored: exit $rc, $(left) left: $(tail -n 2 "$T/r.k" | tr '\n' '|')"
pkill -KILL -f "ringlm_stand_in_$U" 2>/dev/null

# 4. the rerun after the stops, in the same log folder: every test's files replaced, the right total
timeout $HANG_S bash tests/run_all.sh -j 2 "$T/pass.sh" "$T/pass.sh" >"$T/r2" 2>&1 && [ "$(tail -n 1 "$T/r2")" = "4 passed, 0 failed" ] \
  && ok "a rerun after the stops: $(tail -n 1 "$T/r2")" || bad "rerun: $(tail -n 3 "$T/r2" | tr '\n' '|')"
expect_err "a grace that is not a number" "RINGLM_TEST_STOP_GRACE_S=soon" 1 env RINGLM_TEST_STOP_GRACE_S=soon bash tests/run_all.sh "$T/pass.sh"
finish
