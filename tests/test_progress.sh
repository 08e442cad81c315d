#!/usr/bin/env bash
# Signs of life: the trainer's step lines carry the elapsed time and an ETA, and come at least every 30 s whatever
# log_every says; every program's stdout is line-buffered when it is a file or a pipe (each line is there as soon as
# it is printed, not when a 4 KiB buffer fills or the program ends); a resumed run's ETA is its own; build/eval's lines
# between documents. Evaluation's progress inside a document and the ETA of a second series are tested in test_eval.sh.
cd "$(dirname "$0")/.."
source tests/lib.sh
build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad prepare; finish; }
A=(-c configs/tiny.conf --train_data "$T/data" --val_data "" --max_steps 10)

# 1. on the test clock (RINGLM_TEST_PROGRESS_TICK=10: each reading 10 s later, one reading before the first step and
#    one after each: no verdict depends on the machine's speed) with log_every far apart: a line every 30 s (steps
#    3, 6, 9) and the last; each with the elapsed time since the first step and the ETA of the rest at the mean rate
RINGLM_TEST_PROGRESS_TICK=10 build/train "${A[@]}" --log_every 1000 --out_dir "$T/tick" >"$T/tick.out" 2>&1 \
  || bad "tick run: $(tail -2 "$T/tick.out")"
$PY - "$T/tick.out" <<'PYEOF' && ok "step lines every 30 s (steps 3, 6, 9) and the last, with elapsed time and ETA" || bad "step lines on the test clock: $(grep '^step' "$T/tick.out" | tr '\n' ' ' | cut -c1-600)"
import re, sys
def dur(s):   # the trainer's format: "42.0 s", "12m05s", "3h07m"
    return f"{s:.1f} s" if s < 60 else f"{int(s + .5) // 60}m{int(s + .5) % 60:02d}s" if s + .5 < 3600 else f"{int(s + .5) // 3600}h{int(s + .5) // 60 % 60:02d}m"
got = [(int(m.group(1)), m.group(2)) for m in (re.match(r"step +(\d+)/10 \|.* \| ([^|]*)$", l.rstrip("\n")) for l in open(sys.argv[1])) if m]
want = [(k, f"{dur(10.0 * k)} elapsed, ETA {dur(10.0 * (10 - k))}") for k in (3, 6, 9, 10)]
print("     " + "; ".join(f"step {k}: {t}" for k, t in got))
assert got == want, (got, want)
PYEOF

# 1b. a resumed run on the test clock: its elapsed time and ETA count its own steps (steps 5-10 of a run resumed at
#     step 4), not the steps of the run before it (an ETA from all steps since step 0 would be 7/3 too short)
build/train "${A[@]}" --max_steps 4 --out_dir "$T/res" >/dev/null 2>&1 || bad "the run to resume"
RINGLM_TEST_PROGRESS_TICK=10 build/train "${A[@]}" --log_every 1000 --out_dir "$T/res" --resume latest >"$T/res.out" 2>&1 \
  || bad "resumed tick run: $(tail -2 "$T/res.out")"
$PY - "$T/res.out" <<'PYEOF' && ok "a resumed run's step lines: its own elapsed time and ETA (steps 7 and 10)" || bad "resumed run on the test clock: $(grep '^step' "$T/res.out" | tr '\n' ' ' | cut -c1-600)"
import re, sys
def dur(s):
    return f"{s:.1f} s" if s < 60 else f"{int(s + .5) // 60}m{int(s + .5) % 60:02d}s"
got = [(int(m.group(1)), m.group(2)) for m in (re.match(r"step +(\d+)/10 \|.* \| ([^|]*)$", l.rstrip("\n")) for l in open(sys.argv[1])) if m]
want = [(k, f"{dur(10.0 * (k - 4))} elapsed, ETA {dur(10.0 * (10 - k))}") for k in (7, 10)]
print("     " + "; ".join(f"step {k}: {t}" for k, t in got))
assert got == want, (got, want)
PYEOF

# 1c. build/eval between units: fewer units than 4 (no quarter lines), on a test clock of 4 s a reading (3 readings a
#     document: after each of the 2 layers, and its end; one window each): a line whenever 10 s passed since the last,
#     here after every document, each with the elapsed time and the ETA at the mean rate
RINGLM_TEST_PROGRESS_TICK=4 build/eval --ckpt "$T/res" --data "$T/data/train_*.bin" --seq_len 64 --doc_len 64 --docs 3 \
  --out "$T/ev" >"$T/ev.out" 2>"$T/ev.err" || bad "eval on the test clock: $(tail -2 "$T/ev.err")"
want=$(printf 'eval series 1/1: %s\n' "1/3, 12.0 s elapsed, ETA 24.0 s" "2/3, 24.0 s elapsed, ETA 12.0 s" "3/3, 36.0 s elapsed, ETA 0.0 s")
[ "$(grep '^eval series' "$T/ev.err")" = "$want" ] && ok "eval: a progress line between documents every 10 s, with elapsed time and ETA" \
  || bad "eval's progress lines: $(grep '^eval' "$T/ev.err" | tr '\n' '|')"

# 2. a resume that drops the validation its checkpoint's run had (no --val_data) says so in one WARNING line; with
#    --val_data it says nothing of it
build/prepare --out "$T/dv" --val-frac 0.3 model attention >/dev/null || bad "prepare with a held-out split"
V=(-c configs/tiny.conf --train_data "$T/dv/train_*.bin" --out_dir "$T/val")
build/train "${V[@]}" --val_data "$T/dv/val_*.bin" --max_steps 2 >/dev/null 2>&1 \
  && build/train "${V[@]}" --val_data "" --max_steps 3 --resume latest >"$T/drop.out" 2>&1 \
  && build/train "${V[@]}" --val_data "$T/dv/val_*.bin" --max_steps 4 --resume latest >"$T/keep.out" 2>&1 || bad "validation runs: $(tail -2 "$T/drop.out")"
[ "$(grep -c "^WARNING: no validation in this run: the checkpoint's run validated on val_data '$T/dv/val_\*.bin'" "$T/drop.out")" = 1 ] \
  && ! grep -q 'val loss' "$T/drop.out" && ! grep -q 'no validation' "$T/keep.out" && grep -q 'val loss' "$T/keep.out" \
  && ok "a resume without --val_data says plainly that it drops the checkpoint's validation; one with it does not" \
  || bad "validation dropped at a resume: $(grep -i 'valid' "$T/drop.out" "$T/keep.out" | head -3)"

# 3. every program sets line-buffered stdout first thing (stdout_lines() in each main of the programs and benchmarks)
miss=$(for f in $(grep -l '^int main(' data/*.c eval/*.c train/*.c tools/*.c tools/bench/*.c); do
  awk '/^int main\(/ {getline; if ($0 !~ /^    stdout_lines\(\);/) print FILENAME}' "$f"; done)
n=$(grep -l '^int main(' data/*.c eval/*.c train/*.c tools/*.c tools/bench/*.c | wc -l)
[ -z "$miss" ] && [ "$n" -ge 9 ] && ok "all $n programs make stdout line-buffered first" || bad "programs without stdout_lines() first: $miss"
finish
