#!/usr/bin/env bash
# Hostile inputs, round three (issue 32): special files and links where a regular file is expected, prepared
# directories, meta.json's counts and ids, the same shard twice, prompt files that are pipes, --top_p 0, prepare
# over its own output and after a killed prepare, eval's --eod against meta.json, checkpoints deleted while read (a
# live run's keep_last), packing with weights below 1, without an end-of-document token and with weights that ask
# too much, hostile plot records. Each case: one line on stderr and exit 1 where it is refused, and the right result
# where it is accepted. (Stalls during saves, start-up signals and the launchers: tests/test_reliability3_jobs.sh.)
cd "$(dirname "$0")/.."
source tests/lib.sh

build/prepare --out "$T/d" --val-frac 0.3 --seed 1 model >/dev/null || { bad "prepare (run make)"; finish; }
M="$T/d/meta.json"
TR=(build/train -c configs/tiny.conf --max_steps 1 --save_final 0 --log_every 1000)
# refuse NAME PATTERN ARGS...: build/train on tiny.conf refuses ARGS in one line (a fresh out_dir each time)
refuse() { rm -rf "$T/bad"; local n=$1 p=$2; shift 2; expect_train_err configs/tiny.conf "$n" "$p" 1 "$@"; }
meta() { $PY -c "import json,sys; m=json.load(open(sys.argv[1])); print(m[sys.argv[2]][sys.argv[3]])" "$M" "$@"; }

# ---- 2, 16: meta.json, a shard: a FIFO, a link to nothing, a loop of links -> one line (no hang) ----
cp "$M" "$T/meta.bak"
try_meta() {  # NAME PATTERN: meta.json replaced by what the caller made; train and eval refuse it in one line
  refuse "train, meta.json $1" "$T/d/meta.json' is $2|not a regular file (a data description)" --train_data "$T/d"
  expect_err "eval --doc_lengths, meta.json $1" "$T/d/meta.json' is $2" 1 build/eval --doc_lengths --data "$T/d" --out "$T/eo" --force
  rm -f "$M"
}
rm "$M"; mkfifo "$M"; try_meta "a FIFO" "a pipe (FIFO)"
ln -s "$T/nothing" "$M"; try_meta "a dangling link" "a symbolic link to nothing (its target does not exist)"
ln -s meta.json "$M"; try_meta "a loop of links" "a symbolic link to nothing (a loop of links)"
cp "$T/meta.bak" "$M"
mkfifo "$T/d/train_000009.bin"
refuse "a shard that is a FIFO (a glob matches it)" "train_000009.bin' is a pipe (FIFO), not a regular file (a shard)" \
  --train_data "$T/d/train_*.bin" --data_meta 0
rm "$T/d/train_000009.bin"

# ---- 3: a prepared directory means its split; meta.json's counts are checked ----
"${TR[@]}" --train_data "$T/d" --val_data "$T/d" --out_dir "$T/o3" >"$T/o3.out" 2>&1 || bad "train on DIR: $(tail -2 "$T/o3.out")"
n=$(sed -nE 's/.*\| train ([0-9]+) tokens,.*/\1/p' "$T/o3.out")
[ -n "$n" ] && [ "$n" = "$(meta tokens train)" ] && ok "--train_data DIR trains on DIR/train_*.bin: $n tokens = meta.json's train tokens (val has $(meta tokens val))" \
  || bad "--train_data DIR: $n tokens, meta.json's train split has $(meta tokens train): $(grep -m1 '| train' "$T/o3.out")"
build/eval --doc_lengths --data "$T/d" --out "$T/e3" >"$T/e3.out" 2>&1
v=$($PY -c "import csv,sys; print(sum(int(float(r['tokens'])) for r in csv.DictReader(open(sys.argv[1]))))" "$T"/e3/*_doclen.csv 2>/dev/null)
[ "$v" = "$(meta tokens val)" ] && ok "eval --data DIR reads DIR/val_*.bin: $v tokens = meta.json's val tokens" || bad "eval --data DIR: $v tokens, val has $(meta tokens val): $(tail -2 "$T/e3.out")"
cp "$T/d/val_000000.bin" "$T/d/train_000001.bin"
refuse "a shard added after prepare" "says 1 train shard of $(meta tokens train) tokens, but '$T/d' holds 2 train_*.bin of" --train_data "$T/d/train_*.bin"
rm "$T/d/train_000001.bin"
mkdir "$T/nv" && cp "$T/d/train_000000.bin" "$T/d/meta.json" "$T/nv/" && sed -i 's/"val": [0-9]*}/"val": 0}/g' "$T/nv/meta.json"
refuse "val_data: a prepared directory without val_*.bin" "holds a meta.json but no val_*.bin" --train_data "$T/nv" --val_data "$T/nv"

# ---- 6: the same shards twice ----
refuse "the same shards as two sources" "train_000000.bin' is in '$T/d/train*@1;$T/d/train*@1' twice (sources 1 and 2)" \
  --train_data "$T/d/train*@1;$T/d/train*@1" --pack best_fit
ln "$T/d/train_000000.bin" "$T/d/train_000000b.bin"
refuse "a shard and a hard link to it" "are the same file (a link)" --train_data "$T/d/train_*.bin" --data_meta 0
rm "$T/d/train_000000b.bin"

# ---- 8: meta.json integers above INT_MAX ----
sed 's/"vocab_size": 257/"vocab_size": 4294967553/' "$T/meta.bak" >"$M"
refuse "meta.json vocab_size 4294967553" "bad value of \"vocab_size\"|[0, 2147483647]" --train_data "$T/d"
sed 's/"eod_id": 256/"eod_id": 4294967552/' "$T/meta.bak" >"$M"
expect_err "eval: meta.json eod_id 4294967552" "bad value of \"eod_id\"|[0, 2147483647]" 1 build/eval --doc_lengths --data "$T/d" --out "$T/eo" --force
cp "$T/meta.bak" "$M"

# ---- 9: eval --doc_lengths --eod against meta.json ----
expect_err "eval --doc_lengths --eod 300 on data whose meta.json says eod 256" "--eod 300 (command line) contradicts the data's end-of-document id 256" 1 \
  build/eval --doc_lengths --data "$T/d" --eod 300 --out "$T/eo" --force
expect_err "eval --doc_lengths --eod -1 (no separator: no documents to measure)" "--doc_lengths splits the data at its end-of-document token, and --eod -1 means none" 1 \
  build/eval --doc_lengths --data "$T/d" --eod -1 --out "$T/eo" --force

# a checkpoint for sample and eval (2 steps, both saved)
"${TR[@]}" --train_data "$T/d" --val_data "" --out_dir "$T/run" --max_steps 2 --ckpt_every 1 >"$T/run.out" 2>&1 || bad "run: $(tail -2 "$T/run.out")"

mkdir "$T/fl" && mkfifo "$T/fl/latest"
expect_err "sample --ckpt DIR whose 'latest' is a FIFO" "checkpoint: '$T/fl/latest' is a pipe (FIFO), not a regular file (the 'latest' pointer)" 1 \
  build/sample --ckpt "$T/fl"

build/eval --ckpt "$T/run" --data "$T/nv" --seq_len 64 --docs 1 --out "$T/env" >"$T/env.out" 2>&1 \
  && grep -q "^note: '$T/nv' holds no val_\*.bin (prepared with --val-frac 0?): its train_\*.bin are read, the training data$" "$T/env.out" \
  && ok "eval --data DIR without val_*.bin: its train_*.bin, with a note" || bad "eval --data DIR without val_*.bin: $(grep -m2 'note\|eval:' "$T/env.out")"

# ---- 4, 5: build/sample's --prompt_file from a pipe, a directory; --top_p 0 ----
S=(build/sample --ckpt "$T/run" --max_tokens 4 --seed 5)
same() { [ "$(sed '/^sample: [0-9]* prompt tokens, /d' "$1")" = "$(sed '/^sample: [0-9]* prompt tokens, /d' "$2")" ]; }  # the text, without the timing line
"${S[@]}" --prompt_file <(printf 'int main(void) {') >"$T/p1.out" 2>"$T/p1.err"
"${S[@]}" --prompt 'int main(void) {' >"$T/p2.out" 2>/dev/null
[ "$(head -c 16 "$T/p1.out")" = "int main(void) {" ] && same "$T/p1.out" "$T/p2.out" && grep -q "^sample: 16 prompt tokens" "$T/p1.out" \
  && ok "--prompt_file <(printf ...): the 16-byte prompt read from the pipe, the same text as --prompt" || bad "--prompt_file from a pipe: $(head -c 100 "$T/p1.out") | $(cat "$T/p1.err")"
printf 'abc' | "${S[@]}" --prompt_file /dev/stdin >"$T/p3.out" 2>/dev/null
[ "$(head -c 3 "$T/p3.out")" = abc ] && ok "--prompt_file /dev/stdin (a pipe): the prompt read" || bad "--prompt_file /dev/stdin: $(head -c 60 "$T/p3.out")"
expect_err "--prompt_file DIRECTORY" "--prompt_file '$T' is a directory" 1 "${S[@]}" --prompt_file "$T"
"${S[@]}" --prompt 'int ' --top_p 0 --max_tokens 12 --seed 9 --ids >"$T/tp0.out" 2>/dev/null
"${S[@]}" --prompt 'int ' --greedy --max_tokens 12 --ids >"$T/gr.out" 2>/dev/null
[ -s "$T/gr.out" ] && same "$T/tp0.out" "$T/gr.out" && ok "--top_p 0 draws the most likely token (= --greedy): $(cat "$T/gr.out")" \
  || bad "--top_p 0: $(cat "$T/tp0.out") vs greedy $(cat "$T/gr.out")"

# ---- 13: a checkpoint deleted while read (a live run's keep_last): 'latest' resolved once more, or said ----
L="$T/run"
hook="mv $L/ckpt_00000002.h5 $L/aside.h5 && printf 'ckpt_00000001.h5\n' >$L/latest"
# (references: each checkpoint read directly; steps 1 and 2 give different samples and losses)
E=(build/eval --data "$T/d" --seq_len 64 --docs 2)
for s in 1 2; do
  build/sample --ckpt "$L/ckpt_0000000$s.h5" --max_tokens 4 --seed 5 --ids >"$T/r$s.out" 2>/dev/null
  "${E[@]}" --ckpt "$L/ckpt_0000000$s.h5" --out "$T/re$s" 2>/dev/null | grep "^all positions" >"$T/re$s.out"
done
RINGLM_TEST_CKPT_RESOLVED_CMD="$hook" "${S[@]}" --ids >"$T/v1.out" 2>"$T/v1.err" && [ -s "$T/r1.out" ] && same "$T/v1.out" "$T/r1.out" && ! same "$T/r1.out" "$T/r2.out" \
  && ok "sample: the checkpoint 'latest' named vanished after it was resolved: resolved again, ckpt_00000001.h5's text ($(cat "$T/v1.out"))" \
  || bad "sample, vanished checkpoint: '$(cat "$T/v1.out")' (step 1's: '$(cat "$T/r1.out")', step 2's: '$(cat "$T/r2.out")'): $(cat "$T/v1.err")"
mv "$L/aside.h5" "$L/ckpt_00000002.h5"; echo ckpt_00000002.h5 >"$L/latest"
RINGLM_TEST_CKPT_RESOLVED_CMD="$hook" "${E[@]}" --ckpt "$L" --out "$T/v2" >"$T/v2.out" 2>"$T/v2.err"
l=$(grep "^all positions" "$T/v2.out")
[ -n "$l" ] && [ "$l" = "$(cat "$T/re1.out")" ] && [ "$l" != "$(cat "$T/re2.out")" ] && ok "eval: the same: resolved again, ckpt_00000001.h5's losses" \
  || bad "eval, vanished checkpoint: '$l' (step 1's: '$(cat "$T/re1.out")', step 2's: '$(cat "$T/re2.out")'): $(cat "$T/v2.err")"
mv "$L/aside.h5" "$L/ckpt_00000002.h5"; echo ckpt_00000002.h5 >"$L/latest"
ERR_ALSO='! grep -q "corrupt" "$T/e"' RINGLM_TEST_CKPT_RESOLVED_CMD="mv $L/ckpt_00000002.h5 $L/aside.h5" \
  expect_err "sample: the checkpoint deleted and 'latest' still naming it" "'$L/latest' points at '$L/ckpt_00000002.h5', which does not exist" 1 "${S[@]}"
mv "$L/aside.h5" "$L/ckpt_00000002.h5"
# a live run saving every step with keep_last 1: every sample and eval succeeds or says that its checkpoint was deleted
"${TR[@]}" --train_data "$T/d" --val_data "" --out_dir "$T/live" --max_steps 100000 --ckpt_every 1 --keep_last 1 >/dev/null 2>&1 &
job=$!
end=$((SECONDS + HANG_S)); while [ ! -s "$T/live/latest" ] && [ $SECONDS -lt $end ] && kill -0 $job 2>/dev/null; do sleep 0.05; done
good=0 said=0 wrong=""
for i in 1 2 3 4 5 6; do
  if [ $((i % 2)) = 0 ]; then timeout $HANG_S build/sample --ckpt "$T/live" --max_tokens 2 >/dev/null 2>"$T/l.err"
  else timeout $HANG_S build/eval --ckpt "$T/live" --data "$T/d" --seq_len 64 --docs 1 --out "$T/le" --force >/dev/null 2>"$T/l.err"; fi
  if [ $? = 0 ]; then good=$((good + 1))
  elif [ "$(grep -c . "$T/l.err")" = 1 ] && grep -q "was deleted while it was being read\|which does not exist" "$T/l.err"; then said=$((said + 1))
  else wrong+="$(head -c 200 "$T/l.err") "; fi
done
kill $job; wait $job 2>/dev/null
[ -z "$wrong" ] && ok "a live run with keep_last 1: 6 samples and evals, $good ran, $said said their checkpoint was deleted meanwhile" \
  || bad "a live run with keep_last 1: $wrong"

# ---- 7, 12: prepare over its own output; a killed prepare's leftovers ----
expect_err "prepare --out DIR --force DIR (only the output's own files)" "no documents found|the output directory's own meta.json and shards are never input" 1 \
  build/prepare --out "$T/d" --force "$T/d"
cmp -s "$M" "$T/meta.bak" && [ -s "$T/d/train_000000.bin" ] && ok "... and the data set is as it was" || bad "prepare --force DIR DIR changed the data set"
mkdir -p "$T/c" && cp -r model "$T/c/"
build/prepare --out "$T/c/data" --val-frac 0 "$T/c" >"$T/c1.out" 2>&1 && build/prepare --out "$T/c/data" --val-frac 0 --force "$T/c" >"$T/c2.out" 2>&1
if [ "$(grep -c . "$T/c2.out")" -gt 0 ] && grep -q "the output directory's own meta.json and shards 2" "$T/c2.out" \
   && [ "$(sed -n 2p "$T/c1.out")" = "$(sed -n 2p "$T/c2.out")" ]; then ok "prepare --force over a corpus that holds its output: the old meta.json and shards skipped ($(sed -n 2p "$T/c2.out" | cut -c1-60))"
else bad "prepare --force over its output: $(head -3 "$T/c1.out" "$T/c2.out" | tr '\n' ' ')"; fi
dead=$(sh -c 'echo $$')   # (a process that has ended: its pid no longer runs)
mkdir "$T/d/.prepare-$dead.tmp" && head -c 2097152 /dev/zero >"$T/d/.prepare-$dead.tmp/train_000000.bin"
build/prepare --out "$T/d" --force model >"$T/k.out" 2>"$T/k.err"; rc=$?
if [ $rc = 0 ] && [ "$(grep -c . "$T/k.err")" = 1 ] && grep -q "^prepare: note: '$T/d/.prepare-$dead.tmp' is left from a build/prepare that was killed (pid $dead no longer runs): 2.0 MiB" "$T/k.err" \
   && [ -s "$T/d/.prepare-$dead.tmp/train_000000.bin" ]; then ok "a killed prepare's .prepare-PID.tmp is named with its size (and left alone): $(cut -c1-120 "$T/k.err")..."
else bad "leftover .prepare-PID.tmp: rc $rc: $(cat "$T/k.err")"; fi

# ---- 14, 15, 17: packing ----
mkdir "$T/small"; for i in $(seq 1 60); do head -c $((20 + i)) README.md >"$T/small/f$i.txt"; done
build/prepare --out "$T/s" --val-frac 0 "$T/small" >/dev/null
"${TR[@]}" --train_data "$T/s@0.5" --val_data "" --pack best_fit --out_dir "$T/p14" >"$T/p14.out" 2>&1
l=$(grep "^packing:" "$T/p14.out")
if [[ $l =~ of\ the\ 60\ documents\ that\ fit\ a\ window,\ 0\ are\ cut.*\;\ ([0-9]+)\ documents\ left\ out\ by\ source\ weights\ below\ 1 ]] && (( BASH_REMATCH[1] > 10 && BASH_REMATCH[1] < 50 )); then
  ok "best_fit with weight 0.5: no document cut, ${BASH_REMATCH[1]} of 60 left out by the weight"
else bad "best_fit with weight 0.5: $l"; fi
"${TR[@]}" --train_data "$T/s" --val_data "" --pack doc_start --eod 255 --data_meta 0 --out_dir "$T/p15" >"$T/p15.out" 2>&1
grep -q "^WARNING: pack = doc_start: the end-of-document token 255 occurs nowhere inside train_data" "$T/p15.out" \
  && ok "doc_start on data without its eod: $(grep -m1 '^WARNING' "$T/p15.out" | cut -c1-110)..." || bad "no eod: $(grep -m2 'WARNING\|packing' "$T/p15.out")"
refuse "weight 100 x upsample_factor 100" "uses a document up to 10000 times, more than 1000" \
  --train_data "$T/s@100" --pack best_fit --upsample_len 10 --upsample_factor 100

# ---- 18: hostile plot records ----
printf '{"step": 1, "loss": 3}\n{"step": 1e300, "loss": 2}\n' >"$T/m1.jsonl"
expect_err "plot_metrics: step 1e300" "line 2: \"step\" 1e+300 is outside [0, 2^53]" 1 $PY tools/plot_metrics.py "$T/m1.jsonl" --out "$T/m1.svg"
printf '{"step": 1, "loss": 3}\n{"step": 2, "loss": 5e-324}\n' >"$T/m2.jsonl"
expect_err "plot_metrics: loss 5e-324" "line 2: \"loss\" 4.94066e-324 is outside the values a plot can show" 1 $PY tools/plot_metrics.py "$T/m2.jsonl" --out "$T/m2.svg"
printf '{"step": 1, "loss": 3}\n{"step": 2, "tokens_seen": 9223372036854775808}\n' >"$T/m3.jsonl"
$PY tools/plot_metrics.py "$T/m3.jsonl" --out "$T/m3.svg" --x tokens >/dev/null 2>"$T/m3.err" && [ -s "$T/m3.svg" ] \
  && ok "plot_metrics --x tokens with one x of 2^63: drawn" || bad "plot_metrics, one x of 2^63: $(cat "$T/m3.err")"
finish
