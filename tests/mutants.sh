#!/usr/bin/env bash
# mutants.sh — a mutation run: plants each one-line bug of a list (default tests/mutants.txt) in a COPY of the
# repository, one at a time, rebuilds there the CPU programs and the emulated CUDA ones (make all cuda-emu: a mutant
# of a shared source reaches both; one of backend/cuda/ or comm/data_cuda.c reaches build/emu/; and make asan for a
# mutant that tests/test_asan.sh is to catch), runs the tests the
# list names for it, and reports whether a test failed (caught) or all passed (missed). Each test is stopped at its
# first FAIL line (the mutant is caught; the rest of that test would only take time). This checkout is never modified.
#   bash tests/mutants.sh [--list FILE] [--dir DIR] [--all] [ID...]
#     --dir DIR   the copy (default /tmp/ringlm-mutants; made with cp -a from this checkout when it does not exist,
#                 otherwise its sources are refreshed from here; its build/ is reused)
#     --all       run every listed test of a mutant (default: stop at the first that fails)
#     --whole     run each test to its end, not only to its first FAIL line
#     ID...       only these mutants
# A mutant whose text is not found exactly once in its file is reported "stale" and one that does not compile
# "no build"; neither is counted. Not a test of the suite (run_all.sh runs tests/test_*.sh only): it takes minutes.
# The list's format: blocks of "id:", "file:", "old:" (exact text, one occurrence), "new:", "tests:" (build/tests/X
# or tests/X.sh, in order) and "why:" lines, separated by blank lines; '#' lines are comments.
set -u
cd "$(dirname "$0")/.."
REPO=$(pwd)
LIST=tests/mutants.txt; DIR=/tmp/ringlm-mutants; ALL=0; WHOLE=0; ONLY=()
while [ $# -gt 0 ]; do
  case $1 in
    --list) LIST=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --all) ALL=1; shift ;;
    --whole) WHOLE=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) ONLY+=("$1"); shift ;;
  esac
done
LIST=$(readlink -f "$LIST")
[ "$DIR" != "$REPO" ] || { echo "mutants.sh: --dir must not be this checkout" >&2; exit 2; }
if [ ! -d "$DIR" ]; then cp -a "$REPO" "$DIR" || exit 2
else   # refresh the sources that differ (touched, so that make rebuilds them)
  (cd "$REPO" && git ls-files -co --exclude-standard) | while IFS= read -r f; do
    [ -f "$REPO/$f" ] && ! cmp -s "$REPO/$f" "$DIR/$f" && mkdir -p "$DIR/$(dirname "$f")" && cp "$REPO/$f" "$DIR/$f"
  done
fi
cd "$DIR" || exit 2
export OMP_NUM_THREADS=1
echo "mutation run in $DIR (list $LIST)"
build() { make -j2 all >"$1" 2>&1 && make -j2 cuda-emu >>"$1" 2>&1 && { [ -z "${2:-}" ] || make -j2 asan >>"$1" 2>&1; }; }   # (2nd: the ASan build too)
build "$DIR/mut_build.log" || { echo "mutants.sh: the unmutated copy does not build (see $DIR/mut_build.log)" >&2; exit 2; }
# stop_session PID: TERM to the session PID leads (a test's EXIT trap removes its files), KILL to what is left
stop_session() {
  local i; kill -TERM -- -"$1" 2>/dev/null
  for ((i = 0; i < 50; i++)); do [ -z "$(ps -o pid= -s "$1")" ] && break; sleep 0.1; done
  pkill -9 -s "$1" 2>/dev/null; wait "$1" 2>/dev/null
}
# run_test T OUT: the test (a script or a binary) in a session of its own, its output to OUT; ended (and its whole
# session with it) at its first FAIL line unless --whole; a hang is ended after 900 s. Exit status: the test's, or
# 125 when stopped at a FAIL line
run_test() {
  local t=$1 o=$2 pid sid rc end=$((SECONDS + 900))
  if [[ $t == *.sh ]]; then setsid bash "$t" >"$o" 2>&1 </dev/null & else setsid stdbuf -oL -eL "$t" >"$o" 2>&1 </dev/null & fi
  pid=$!
  while kill -0 $pid 2>/dev/null; do
    if [ $WHOLE -eq 0 ] && grep -q '^FAIL' "$o"; then stop_session $pid; return 125; fi
    if [ $SECONDS -ge $end ]; then stop_session $pid; return 124; fi
    sleep 0.2
  done
  wait $pid; rc=$?
  sid=$pid; pkill -9 -s "$sid" 2>/dev/null   # what the test left running in its session
  return $rc
}

# the list as shell-readable records: id, file, tests, and the old/new text in files
REC=$(mktemp -d)
/usr/bin/python3 - "$LIST" "$REC" <<'PYEOF' || exit 2
import sys, os
blocks, cur = [], {}
for line in open(sys.argv[1]).read().splitlines() + [""]:
    if line.startswith("#"):
        continue
    if not line.strip():
        if cur: blocks.append(cur); cur = {}
        continue
    k, _, v = line.partition(":")
    if k.strip() in cur:   # two blocks without a blank line between them: one would silently replace the other
        sys.exit(f"mutants.sh: block {len(blocks) + 1} ({cur.get('id', '?')}) has a second '{k.strip()}:' line (a blank line missing?)")
    cur[k.strip()] = v[1:] if v.startswith(" ") else v
with open(os.path.join(sys.argv[2], "index"), "w") as idx:
    for i, b in enumerate(blocks):
        for k in ("id", "file", "old", "new", "tests"):
            if k not in b: sys.exit(f"mutants.sh: block {i + 1} ({b.get('id', '?')}) lacks '{k}:'")
        open(os.path.join(sys.argv[2], f"{i}.old"), "w").write(b["old"])
        open(os.path.join(sys.argv[2], f"{i}.new"), "w").write(b["new"])
        idx.write(f"{i}\t{b['id']}\t{b['file']}\t{b['tests']}\n")
PYEOF

caught=0; missed=0; other=0; table=()
while IFS=$'\t' read -r i id file tests; do
  if [ ${#ONLY[@]} -gt 0 ] && [[ ! " ${ONLY[*]} " == *" $id "* ]]; then continue; fi
  cp -a "$file" "$REC/orig"
  if ! /usr/bin/python3 - "$file" "$REC/$i.old" "$REC/$i.new" <<'PYEOF'; then
import sys
f, old, new = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
s = open(f).read()
if s.count(old) != 1: sys.exit(1)
open(f, "w").write(s.replace(old, new))
PYEOF
    table+=("$(printf '%-22s %-28s stale (text not found once)' "$id" "$file")"); other=$((other + 1)); continue
  fi
  line=$(grep -nF -- "$(cat "$REC/$i.new")" "$file" | head -1 | cut -d: -f1)
  if ! build "$REC/build.log" "$([[ " $tests " == *test_asan.sh* ]] && echo asan)"; then
    table+=("$(printf '%-22s %-28s no build' "$id" "$file:$line")"); other=$((other + 1))
  else
    by=""
    for t in $tests; do
      start=$(date +%s)
      run_test "$t" "$REC/t.out"; rc=$?
      res=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$REC/t.out" | tail -n 1)
      [ $rc -eq 125 ] && res="stopped at its first FAIL"
      nf=$(echo "$res" | awk '{print $3}')
      if [ "$rc" -ne 0 ] || [ "${nf:-0}" != 0 ] || [ -z "$res" ]; then
        first=$(grep -m1 '^FAIL' "$REC/t.out" | cut -c1-110)
        by+="${by:+, }$(basename "$t") (${res:-exit $rc}; $(( $(date +%s) - start )) s)"
        echo "  $id: $t: ${res:-exit $rc}: ${first:-no FAIL line}"
        [ $ALL -eq 1 ] || break
      fi
    done
    if [ -n "$by" ]; then caught=$((caught + 1)); table+=("$(printf '%-22s %-28s caught by %s' "$id" "$file:$line" "$by")")
    else missed=$((missed + 1)); table+=("$(printf '%-22s %-28s MISSED by %s' "$id" "$file:$line" "$tests")"); fi
  fi
  cp -a "$REC/orig" "$file"; touch "$file"
  echo "${table[-1]}"
done <"$REC/index"
build "$DIR/mut_build.log"   # leave the copy built from the unmutated sources
rm -rf "$REC"
echo "---"
printf '%s\n' "${table[@]}"
echo "caught $caught of $((caught + missed)) mutants$([ $other -eq 0 ] || echo " ($other stale or not building, not counted)")"
