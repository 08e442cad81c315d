#!/usr/bin/env bash
# Never hang, round four (docs/reliability.md), the findings outside the launchers (test_startup.sh, test_multihost.sh,
# test_launch.sh) and the runner (test_runner.sh), each failing on the code before its fix:
#   2. a library loaded by path (cuDNN: RINGLM_CUDNN_LIB, or a bare name found through LD_LIBRARY_PATH) that is a FIFO
#      or a directory: one line naming the path and what it is; attn_engine = auto falls back to the own kernels,
#      cudnn exits 1 (dlopen of a FIFO blocks for ever);
#   6. a cuDNN execution that fails after start-up (the self-check's blocks are shorter: RINGLM_EMU_CUDNN=fail:long):
#      one line per shape and direction, not one per block call, and the shape runs on the own kernels from then on;
#   8. options that were silently ignored or misreported: cp_shard_min with cp_shard = window (train and eval),
#      build/plan --balance with --choose or --longest, --memory_gib above the limit;
#   and the observation: two runs sharing tensorboard_dir get a note (a resumed run, the same run, none);
#   and (issue 43) a launcher's SIGTERM that reaches eval's or sample's rank 0 while it ends after an agreed error adds
#   no second line: RINGLM_TEST_HOLD_IN_EXIT holds the rank inside grid_exit, where the signal is sent.
cd "$(dirname "$0")/.."
source tests/lib.sh
E=build/emu
export RINGLM_EMU_TIMEOUT_S=600

# ---- 2. special files where a library is loaded (the emulated CUDA backend loads libcudnn as the real one does) ----
if [ -x $E/train ]; then
  build/prepare --out "$T/d" --val-frac 0 model >/dev/null || bad prepare
  cat > "$T/c.conf" <<CONF
vocab_size = 259
d_model = 128
n_layer = 1
n_head = 2
n_kv_head = 2
d_ff = 96
max_seq_len = 64
seq_len = 64
batch_size = 1
max_steps = 1
act_dtype = bf16
train_data = $T/d
save_final = 0
CONF
  mkfifo "$T/fifo.so"; mkdir -p "$T/lib/libcudnn.so.9" "$T/fl"; mkfifo "$T/fl/libcudnn.so.9"
  # guarded CMD...: CMD with a writer on each FIFO, which gets in only if CMD opens the FIFO (that would block it for
  # ever), then marks it and closes, so that CMD's dlopen fails at once instead of hanging the test; $grc: CMD's exit
  # status, $opened: how many FIFOs it opened
  guarded() {
    local f; for f in "$T/fifo.so" "$T/fl/libcudnn.so.9"; do ( exec 3>"$f"; touch "$f.opened" ) & done
    "$@"; grc=$?
    opened=$(ls "$T"/*.opened "$T"/fl/*.opened 2>/dev/null | wc -l)   # (a writer that got in marked it before closing)
    for f in "$T/fifo.so" "$T/fl/libcudnn.so.9"; do timeout 5 cat "$f" >/dev/null 2>&1; done   # (releases the writers)
    wait
    rm -f "$T"/*.opened "$T"/fl/*.opened
  }
  for c in "RINGLM_CUDNN_LIB=$T/fifo.so|RINGLM_CUDNN_LIB '$T/fifo.so' is a pipe (FIFO), not a shared library" \
           "RINGLM_CUDNN_LIB=$T/lib/libcudnn.so.9|is a directory, not a shared library" \
           "LD_LIBRARY_PATH=$T/fl|'$T/fl/libcudnn.so.9' (found through LD_LIBRARY_PATH) is a pipe"; do
    envv=${c%%|*}; why=${c#*|}
    guarded env "$envv" timeout -k 30 $HANG_S $E/train -c "$T/c.conf" --out_dir "$T/a" --attn_engine auto --force >"$T/a.out" 2>"$T/a.err"; rc=$grc
    n=$(grep -c "^attention engine: .*own kernels.*$(printf '%s' "$why" | sed 's/[][\.*^$]/\\&/g')" "$T/a.out")
    [ $rc -eq 0 ] && [ "$n" -ge 1 ] && [ "$opened" = 0 ] && ok "${envv%%=*} ${envv#*=}: attn_engine = auto trains on the own kernels, saying why: $(grep -m1 '^attention engine' "$T/a.out" | sed "s|$T/||g" | cut -c1-200)" \
      || bad "${envv%%=*}: auto: exit $rc, $n lines, the FIFO opened $opened times: $(grep '^attention engine' "$T/a.out" | head -2) $(head -c 300 "$T/a.err")"
    guarded expect_err "${envv%%=*} ${envv#*=}, attn_engine = cudnn" "attn_engine = cudnn|$why" 1 env "$envv" $E/train -c "$T/c.conf" --out_dir "$T/s" --attn_engine cudnn --force
    [ "$opened" = 0 ] || bad "${envv%%=*}, attn_engine = cudnn: the FIFO opened $opened times"
  done
else bad "no $E/train (make cuda-emu)"; fi

# ---- 6. cuDNN failing after start-up: one line per shape and direction, then the own kernels ----
if [ -x $E/train ]; then
  RINGLM_EMU_CUDNN=fail:long timeout -k 30 $HANG_S $E/train -c "$T/c.conf" --out_dir "$T/f6" --attn_engine auto --seq_len 128 \
    --max_seq_len 128 --max_steps 4 --force >"$T/f6.out" 2>"$T/f6.err"; rc=$?
  $PY - "$T/f6.err" "$T/f6/metrics.jsonl" <<'PY' >"$T/f6.txt" 2>&1 && [ $rc -eq 0 ] && ok "cuDNN failing after start-up, 4 steps: $(cat "$T/f6.txt")" || bad "cuDNN failing after start-up: exit $rc, $(cat "$T/f6.txt")"
import json, re, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
keys = [re.match(r"attention: cuDNN failed on (\w+) (forward|backward) blocks \(Sq (\d+), Skv (\d+)\): .*: the own kernels compute such blocks$", l) for l in lines]
assert lines and all(keys), lines[:3]
k = [m.groups() for m in keys]
assert len(k) == len(set(k)), f"{len(k)} lines for {len(set(k))} shapes and directions"
recs = [json.loads(l) for l in open(sys.argv[2])]
assert len(recs) == 4 and recs[-1]["attn_blocks_own"] > 0, recs[-1]
print(f"{len(lines)} lines for {len(set(k))} shapes and directions ({', '.join(' '.join(x) for x in k)}); the last step's blocks: "
      f"{recs[-1]['attn_blocks_own']} on the own kernels, {recs[-1]['attn_blocks_fast']} on cuDNN")
PY
fi

# ---- 8. options silently ignored or misreported ----
build/prepare --out "$T/d8" --val-frac 0 model >/dev/null
A=(--vocab_size 259 --d_model 48 --n_layer 2 --n_head 4 --n_kv_head 2 --d_ff 96 --seq_len 64 --max_seq_len 64 --batch_size 2 --train_data "$T/d8")
expect_err "cp_shard_min with cp_shard = window (train)" "cp_shard_min = 8 is read only with cp_shard = document|cp_shard_min = -1" 1 \
  build/train "${A[@]}" --max_steps 1 --out_dir "$T/r8" --cp_shard_min 8
timeout $HANG_S build/train "${A[@]}" --max_steps 1 --out_dir "$T/r8" >/dev/null 2>&1 || bad "training r8"
expect_err "--cp_shard_min with --cp_shard window (eval)" "eval: --cp_shard_min 8 is read only with --cp_shard document" 1 \
  build/eval --ckpt "$T/r8" --data "$T/d8/train_*.bin" --seq_len 64 --docs 1 --cp_shard_min 8 --out "$T/e8"
expect_err "plan --balance --choose" "plan: --balance and --choose are two questions" 1 build/plan -c "$T/r8/config.txt" --balance --choose
expect_err "plan --longest --balance" "plan: --balance and --longest are two questions" 1 build/plan -c "$T/r8/config.txt" --longest --balance
expect_err "plan --memory_gib 1e15" "plan: --memory_gib '1e15' is above the largest value taken, 1e12" 1 build/plan -c "$T/r8/config.txt" --memory_gib 1e15
expect_err "plan --memory_gib 0" "plan: --memory_gib '0' must be a positive number" 1 build/plan -c "$T/r8/config.txt" --memory_gib 0

# ---- two runs in one tensorboard_dir: a note; the same run resumed: none ----
tb() { timeout $HANG_S build/train "${A[@]}" --tensorboard_dir "$T/tb" "$@" >"$T/tb.out" 2>&1; }
tb --max_steps 2 --out_dir "$T/t1" && ! grep -q NOTE "$T/tb.out" && ok "the first run in an empty tensorboard_dir: no note" || bad "first tb run: $(grep NOTE "$T/tb.out")"
tb --max_steps 4 --out_dir "$T/t1" --resume latest && ! grep -q NOTE "$T/tb.out" && ok "the same run resumed into it: no note ($(ls "$T/tb" | wc -l) event files, one run id)" \
  || bad "resumed tb run: $(grep NOTE "$T/tb.out")"
id=$(cat "$T/t1/run_id" 2>/dev/null || sed -n 's/.*\.\([0-9]\{8\}-[0-9]\{6\}-[0-9a-f]\{8\}\)\.ringlm-train$/\1/p' <<<"$(ls "$T/tb" | head -1)")
tb --max_steps 2 --out_dir "$T/t2"
[ "$(grep -c '^NOTE: tensorboard_dir' "$T/tb.out")" = 1 ] && grep -q "holds 2 event files of another run (run id $id): TensorBoard shows one directory as one run and drops that run's steps from step 1 on" "$T/tb.out" \
  && ok "a second run in the same tensorboard_dir: $(grep '^NOTE' "$T/tb.out" | sed "s|$T/||g" | cut -c1-160)" || bad "second tb run: $(grep NOTE "$T/tb.out") (want run id $id)"

# ---- SIGTERM inside grid_exit after an agreed error: the error's line only ----
for prog in eval sample; do
  rm -f "$T/hold"
  if [ $prog = eval ]; then args=(--ckpt "$T/r8" --data "$T/nowhere_*.bin" --seq_len 64 --out "$T/eh"); else args=(--ckpt "$T/r8" --prompt_ids 1,999); fi
  RINGLM_TEST_HOLD_IN_EXIT=$T/hold timeout -k 30 $HANG_S build/$prog "${args[@]}" >"$T/h.out" 2>"$T/h.err" &
  pid=$!
  for ((w = 0; w < HANG_S * 10; w++)); do [ -e "$T/hold" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  pkill -TERM -P $pid 2>/dev/null; kill -TERM $pid 2>/dev/null   # (the program: timeout's child)
  sleep 0.5; rm -f "$T/hold"; wait $pid; rc=$?
  [ $rc -eq 1 ] && [ "$(grep -c '' "$T/h.err")" = 1 ] && ! grep -q "stopped by SIGTERM" "$T/h.err" \
    && ok "$prog: SIGTERM while ending after an error adds no line: $(sed "s|$T/||g" "$T/h.err" | cut -c1-120)" \
    || bad "$prog: SIGTERM inside grid_exit: exit $rc, $(grep -c '' "$T/h.err") lines: $(head -c 300 "$T/h.err")"
done
finish
