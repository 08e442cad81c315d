#!/usr/bin/env bash
# cuDNN's fused attention as the block engine (docs/attention_engine.md), without a GPU:
#   1. the attention graphs of backend/cuda/cudnn_sdpa.cu against the REAL cuDNN of this machine, device-less for an
#      H200 (tests/gpu/cudnn_graphs.cc: each graph is matched to cuDNN's fused attention engines, passes their support
#      checks and compiles; a control graph is refused), where the toolkit's headers, stub driver and libcudnn exist;
#   2. training on the emulated GPU with attn_engine = cudnn (the emulated libcudnn interprets the same graphs):
#      bf16, head_dim 64, GQA 4/2, at 1 rank, cp 2 zigzag and contiguous, tp 2 x cp 2, a2a+ring (cp 4, all-to-all
#      groups of 2), doc_mask through the ring: per-step losses within 2e-3 of the CPU's fp32 (the bf16 tolerance of
#      tests/test_cuda_emu.sh; measured <= 2.6e-4 with the emulated cuBLAS summing in its own order), within 5e-4 of
#      the own kernels' bf16 run (1 rank; measured 3.0e-4: the two engines round P and dS to bf16 at different points,
#      which is attention's numerics alone), the blocks counted on cuDNN (and on
#      the own kernels only where documents cut a block), the host mirrors of the positions checked against the
#      device on every block (RINGLM_ATTN_CHECK_MIRRORS);
#   3. the start-up line per class, in the banner, config.txt and the first metrics record, and the self-check's time;
#      the self-check's verdict cache (RINGLM_ATTN_CHECK_CACHE: written, read, a cached failure);
#   4. mixed engines (causal blocks on the own kernels, unmasked ones on cuDNN, in one run); a plan that fails after
#      start-up (a longer block than the self-check's): auto says so once and computes such blocks on the own
#      kernels, cudnn stops with one line;
#   5. every fallback: cuDNN absent, too old, no handle, unsupported, failing, wrong by 3 %: attn_engine = auto trains
#      on the own kernels and says why in one line per class; attn_engine = cudnn stops with one line (absent,
#      unsupported, wrong: the three ways a check ends; tests/gpu/test_cuda.c has the others).
cd "$(dirname "$0")/.."
source tests/lib.sh
E=build/emu
[ -x $E/train ] && [ -f $E/libcudnn.so.9 ] || { bad "no $E/train or $E/libcudnn.so.9: run make cuda-emu"; finish; }
export RINGLM_EMU_TIMEOUT_S=600

# ---- 1. the real cuDNN, device-less ----
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
LIB=$(ls "$CUDA_HOME"/lib/libcudnn.so.9 "$CUDA_HOME"/lib64/libcudnn.so.9 2>/dev/null | head -1)
[ -n "$LIB" ] || LIB=$(ldconfig -p 2>/dev/null | awk '/libcudnn\.so\.9 / {print $NF; exit}')
STUB=$CUDA_HOME/lib64/stubs/libcuda.so
if [ -f "$CUDA_HOME/include/cudnn_graph.h" ] && [ -f "$STUB" ] && [ -n "$LIB" ]; then
  mkdir -p "$T/stub" && ln -s "$(readlink -f "$STUB")" "$T/stub/libcuda.so.1"
  if gcc -std=c11 -D_GNU_SOURCE -O1 -Wall -Wextra -Werror -I. -c common/files.c -o "$T/files.o" 2>"$T/cg.err" &&
     g++ -std=c++17 -O1 -Wall -Wextra -Werror -I. -I"$CUDA_HOME/include" -x c++ backend/cuda/cudnn_sdpa.cu -x none "$T/files.o" -x c++ \
       tests/gpu/cudnn_graphs.cc -o "$T/cudnn_graphs" -ldl -L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart \
       2>"$T/cg.err"; then
    LD_LIBRARY_PATH="$T/stub:$(dirname "$LIB")" RINGLM_CUDNN_LIB="$LIB" timeout $HANG_S "$T/cudnn_graphs" >"$T/cg.out" 2>&1
    rc=$?
    sed 's/^/     /' "$T/cg.out"
    sub_result "device-less graphs against $LIB" $rc "$T/cg.out"
  else bad "tests/gpu/cudnn_graphs.cc does not build against $CUDA_HOME/include: $(head -c 400 "$T/cg.err")"; fi
else
  ok "device-less graphs against the real cuDNN: skipped (this machine lacks $CUDA_HOME/include/cudnn_graph.h, the stub driver $STUB or a libcudnn.so.9)"
fi

# ---- data and the model: head_dim 64, GQA 4 query heads / 2 KV heads ----
build/prepare --out "$T/data" --val-frac 0 model attention data >/dev/null 2>"$T/prep.err" || { bad "prepare: $(cat "$T/prep.err")"; finish; }
mkdir -p "$T/docs"   # short documents of 12-76 bytes (their own text: the README's lines change): document boundaries
                     # inside the ring's blocks, and pieces of blocks that lie in one document
awk -v d="$T/docs" 'BEGIN { for (n = 0; n < 80; n++) { f = sprintf("%s/p%05d.txt", d, n); s = sprintf("doc %d:", n);
  for (i = 0; i < (n * 7) % 9 + 1; i++) s = s " word" (n * 13 + i) % 97; printf "%s\n", s > f; close(f) } }'
build/prepare --out "$T/short" --val-frac 0 "$T/docs" >/dev/null 2>&1 || bad "prepare short documents"
cat > "$T/c.conf" <<CONF
vocab_size = 257
d_model = 256
n_layer = 2
n_head = 4
n_kv_head = 2
d_ff = 160
max_seq_len = 128
seq_len = 64
batch_size = 2
micro_batch = 1
max_steps = 2
lr = 3e-3
warmup_steps = 1
log_every = 1
save_final = 0
matmul_precision = bf16
train_data = $T/data/train_*.bin
CONF
STEPS=2
TCONF=$T/c.conf   # the config of trun (tests/lib.sh)
counts() {   # NAME WANT: the last record's block counts; WANT = fast (cuDNN only) | both (cuDNN and the own kernels)
  $PY - "$T/$1/metrics.jsonl" "$2" <<'PYEOF'
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
f, o = r["attn_blocks_fast"], r["attn_blocks_own"]
print(f"{f} blocks on cuDNN, {o} on the own kernels")
assert f > 0 and (o == 0 if sys.argv[2] == "fast" else o > 0), (f, o)
PYEOF
}

# ---- 2. training on the cuDNN engine ----
trun c_one 1 build --matmul_precision fp32
trun c_doc 1 build --matmul_precision fp32 --train_data "$T/short/train_*.bin" --doc_mask 1
trun o_one 1 $E --attn_engine own
set -f   # (the arguments hold a glob for train)
while read -r name np base want args; do
  [ -z "$name" ] && continue
  args=${args//SHORT/$T\/short\/train_*.bin}
  # shellcheck disable=SC2086
  RINGLM_ATTN_CHECK_MIRRORS=1 trun "f_$name" "$np" $E --attn_engine cudnn $args || continue
  cmp_runs "cuDNN engine, bf16, $name ($np ranks${args:+: $args}) vs the CPU's fp32 (2e-3)" "$base" "f_$name" 2e-3
  if counts "f_$name" "$want" >"$T/n.out" 2>&1; then ok "$name: $(cat "$T/n.out")"; else bad "$name: block counts: $(cat "$T/n.out")"; fi
done <<'RUNS'
one 1 c_one fast
cp2 2 c_one fast --cp 2
cp2c 2 c_one fast --cp 2 --cp_layout contiguous
tp2cp2 4 c_one fast --tp 2 --cp 2
a2aring 4 c_one fast --cp 4 --cp_comm a2a+ring --cp_a2a 2
cp8 8 c_one fast --cp 8
doccp2 2 c_doc both --cp 2 --doc_mask 1 --train_data SHORT
docshard 2 c_doc both --cp 2 --doc_mask 1 --cp_shard document --train_data SHORT
RUNS
set +f
# document sharding deals unequal segments to the ranks (pieces of many shapes for one plan cache): against the own
# kernels' bf16 run of the same layout (attention's numerics only)
trun o_docshard 2 $E --attn_engine own --cp 2 --doc_mask 1 --cp_shard document --train_data "$T/short/train_*.bin" &&
  cmp_runs "cuDNN engine vs the own kernels, both bf16, cp 2 with cp_shard = document and doc_mask (5e-4)" o_docshard f_docshard 5e-4
cmp_runs "cuDNN engine vs the own kernels, both bf16, 1 rank (5e-4: attention's numerics only)" o_one f_one 5e-4
if same_losses o_one f_one 1e-7 >/dev/null 2>&1; then bad "the cuDNN engine's losses equal the own kernels' to 1e-7: did it run?"
else ok "the cuDNN engine's losses differ from the own kernels' beyond 1e-7 (the engine ran)"; fi

# ---- 3. the start-up lines, config.txt, metrics ----
$PY - "$T/f_one.out" "$T/f_one/config.txt" "$T/f_one/metrics.jsonl" <<'PYEOF' >"$T/l.out" 2>&1 && ok "start-up: $(cat "$T/l.out")" || bad "start-up lines: $(cat "$T/l.out")"
import json, re, sys
out, cfg = open(sys.argv[1]).read(), open(sys.argv[2]).read()
lines = re.findall(r"^attention engine: (unmasked|causal) blocks \(head_dim 64, 2 query heads per KV head\): cuDNN 9\.19\.0 "
                   r"\(self-check against the own kernels: .*; ([0-9.]+) s\)$", out, re.M)
assert [c for c, _ in lines] == ["unmasked", "causal"], out[:3000]
assert all("# attention engine: " + c in cfg for c in ("unmasked", "causal")), cfg[-600:]
assert "attn_engine = cudnn" in cfg
rec = [json.loads(l) for l in open(sys.argv[3])]
assert "cuDNN 9.19.0" in rec[0]["attn_engine"] and all("attn_engine" not in r for r in rec[1:]), rec[0]
print(f"one line per class in the banner and config.txt, the first metrics record names them; self-check "
      f"{' + '.join(t for _, t in lines)} s under the emulation")
PYEOF

# the verdict cache (RINGLM_ATTN_CHECK_CACHE): the first run checks and appends one line per class, the second takes the
# verdicts from it (its lines say so) and trains the same bits; a cached failure keeps that class on the own kernels
V=$T/verdicts.tsv
RINGLM_ATTN_CHECK_CACHE=$V trun k_1 1 $E --attn_engine cudnn --max_steps 1 && RINGLM_ATTN_CHECK_CACHE=$V trun k_2 1 $E --attn_engine cudnn --max_steps 1 &&
  sed -i 's/| causal\tok\t.*/| causal\tfail\tcuDNN was wrong here once/' "$V" && RINGLM_ATTN_CHECK_CACHE=$V trun k_3 1 $E --max_steps 1 &&
  $PY - "$T" "$V" <<'PYEOF' >"$T/k.out" 2>&1 && ok "verdict cache: $(cat "$T/k.out")" || bad "verdict cache: $(cat "$T/k.out")"
import json, re, sys
T, V = sys.argv[1:]
eng = lambda n: [l for l in open(f"{T}/{n}.out") if l.startswith("attention engine: ")]
loss = lambda n: [json.loads(l)["loss"] for l in open(f"{T}/{n}/metrics.jsonl")]
rows = [l.rstrip("\n").split("\t") for l in open(V)]
assert len(rows) == 2 and [r[0].split(" | ")[-1] for r in rows] == ["unmasked", "causal"], rows
assert all(re.match(r"cudnn 91900 \| NVIDIA H200 \(host emulation\) \| head_dim 64 \| heads per kv 2 \| docs 0 \| ", r[0]) for r in rows), rows
a, b, c = eng("k_1"), eng("k_2"), eng("k_3")
assert all("self-check against the own kernels" in l for l in a) and len(a) == 2, a
assert all("self-check verdict cached in " + V in l for l in b) and len(b) == 2, b
assert loss("k_1") == loss("k_2"), (loss("k_1"), loss("k_2"))
assert "cached in" in c[0] and "cuDNN 9.19.0" in c[0] and re.search(r"causal blocks .*: own kernels \(cuDNN was wrong here once \(the verdict cached in ", c[1]), c
print(f"2 lines written by the first run, read by the second (the same loss {loss('k_1')[0]:.6f}); a cached failure: {c[1][:150].strip()}")
PYEOF

# ---- 4, 5. mixed engines, a failure after start-up, fallbacks ----
# fb NAME ENV REASON [STRICT]: with ENV, attn_engine = auto trains on the own kernels and each class's line names
# REASON; with STRICT, attn_engine = cudnn stops with one line naming it
fb() {
  local name=$1 envv=$2 why=$3 strict=${4:-}
  env $envv timeout $HANG_S $E/train -c "$T/c.conf" --out_dir "$T/a_$name" --max_steps 1 >"$T/a_$name.out" 2>"$T/a_$name.err"
  local rc=$? n
  n=$(grep -c "^attention engine: .* blocks .*: own kernels (.*$why" "$T/a_$name.out")
  if [ $rc -eq 0 ] && [ "$n" -eq 2 ] && $PY -c "import json,sys; r=json.loads(open(sys.argv[1]).readline()); sys.exit(r['attn_blocks_fast'] != 0)" \
       "$T/a_$name/metrics.jsonl"; then
    ok "$name, attn_engine = auto: trains on the own kernels, one line per class: $(grep -m1 '^attention engine' "$T/a_$name.out" | cut -c1-240)"
  else bad "$name, attn_engine = auto: exit $rc, $n lines naming '$why': $(grep '^attention engine' "$T/a_$name.out" | head -2) $(head -c 300 "$T/a_$name.err")"; fi
  [ -n "$strict" ] || return 0
  export "${envv?}"
  expect_err "$name, attn_engine = cudnn" "attn_engine = cudnn|$why" 1 $E/train -c "$T/c.conf" --out_dir "$T/s_$name" --attn_engine cudnn
  unset "${envv%%=*}"
}
fb absent "RINGLM_CUDNN_LIB=$T/nowhere/libcudnn.so.9" "cannot load $T/nowhere/libcudnn.so.9" strict
fb old "RINGLM_EMU_CUDNN=old" "older than 9.0"
fb nohandle "RINGLM_EMU_CUDNN=nohandle" "cudnnCreate: CUDNN_STATUS_NOT_INITIALIZED"
fb unsupported "RINGLM_EMU_CUDNN=unsupported" "has no engine for this attention graph" strict
fb fail "RINGLM_EMU_CUDNN=fail" "CUDNN_STATUS_EXECUTION_FAILED"
fb wrong "RINGLM_EMU_CUDNN=wrong" "differs from the own kernels" strict
# one class on cuDNN, the other on the own kernels (cuDNN supports no causal graph): pieces of both in one block
RINGLM_EMU_CUDNN=unsupported:causal trun x_cp2 2 $E --cp 2 --attn_engine auto &&
  cmp_runs "causal blocks on the own kernels, unmasked on cuDNN (cp 2) vs the CPU's fp32 (2e-3)" c_one x_cp2 2e-3 &&
  if counts x_cp2 both >"$T/n.out" 2>&1 && grep -q "^attention engine: causal blocks .*: own kernels (cuDNN cannot plan" "$T/x_cp2.out" &&
     grep -q "^attention engine: unmasked blocks .*: cuDNN 9" "$T/x_cp2.out"
  then ok "mixed engines: $(cat "$T/n.out")"; else bad "mixed engines: $(cat "$T/n.out") $(grep '^attention engine' "$T/x_cp2.out")"; fi
# a fault the self-check cannot see (cuDNN supports no block longer than 96 keys; the check's are shorter): auto says so
# in one line when the run meets one and computes it on the own kernels; cudnn stops with one line
export RINGLM_EMU_CUDNN=unsupported:long
trun l_one 1 $E --attn_engine auto --seq_len 128 --max_seq_len 128 && trun c_128 1 build --matmul_precision fp32 --seq_len 128 \
  --max_seq_len 128 && cmp_runs "blocks cuDNN cannot plan after start-up run on the own kernels (vs the CPU's fp32, 2e-3)" c_128 l_one 2e-3 &&
  n=$(grep -c "^attention: cuDNN cannot plan the causal forward block Sq 128 Skv 128: .*: the own kernels compute such blocks" "$T/l_one.err") &&
  [ "$n" -ge 1 ] && ok "a plan failing after start-up: one line per shape on stderr ($n): $(head -c 220 "$T/l_one.err")" ||
  bad "a plan failing after start-up: $(head -c 400 "$T/l_one.err")"
expect_err "a plan failing after start-up, attn_engine = cudnn" "attn_engine = cudnn|cuDNN cannot plan the causal forward block Sq 128" 1 \
  $E/train -c "$T/c.conf" --out_dir "$T/l_strict" --attn_engine cudnn --seq_len 128 --max_seq_len 128
unset RINGLM_EMU_CUDNN
ERR_SKIP='^ *[a-z_0-9]* = ' expect_err "an unknown attn_engine" "attn_engine = 'fast' must be auto, cudnn or own" 1 $E/train -c "$T/c.conf" \
  --out_dir "$T/bad" --attn_engine fast
expect_err "attn_engine = cudnn on the CPU backend" "the cpu backend has only its own attention kernels" 1 build/train -c "$T/c.conf" \
  --out_dir "$T/bad2" --attn_engine cudnn
RINGLM_CUDNN_LIB="$T/nowhere/x.so" trun a_fp32 1 $E --matmul_precision fp32 --max_steps 1 &&
  [ "$(grep -c '^attention engine: .*own kernels (matmul_precision = fp32' "$T/a_fp32.out")" -eq 2 ] \
  && ok "matmul_precision = fp32: the fp32 kernels, cuDNN not even loaded: $(grep -m1 '^attention engine' "$T/a_fp32.out" | cut -c1-200)" \
  || bad "fp32: $(grep '^attention engine' "$T/a_fp32.out")"

finish
