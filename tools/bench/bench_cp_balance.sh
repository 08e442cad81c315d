#!/usr/bin/env bash
# bench_cp_balance.sh — context parallelism over packed documents, before and after document sharding and the pruned
# ring schedule (docs/cp_balance.md):
#   1. build/plan --balance on synthetic mixes (tools/bench/cp_mixes.py) and on data this project prepares itself
#      (build/prepare of this machine's Python standard library, one document per file and per package; tools/prepare_hf
#      of the same files when build/hfenv exists), at cp 2 / 4 / 8, zigzag and contiguous, ring and a2a+ring (U 2):
#      the attention work's imbalance (max / mean over the cp ranks) and the ring bytes per layer and window, for
#      before = cp_shard window with the full schedule (cp_prune 0), window with the pruned schedule, and after =
#      cp_shard document with the pruned schedule. Markdown tables on stdout.
#   2. STEP=1 (STEP=only: this part alone): the step time of build/train on the one-long-plus-many-short mix (scaled
#      to seq_len 8192: 6144 + 8 x 256), window vs document sharding, with the ring's measured imbalance (busy CPU
#      time) and hidden fraction: at cp 4 (4 ranks: oversubscribed on a 2-core machine, where a step takes the ranks'
#      total work, balanced or not — say so when quoting it) and at cp 2 (2 ranks, one core each).
# Knobs: SEQ (32768), WINDOWS (32), CONF (configs/llama_1b_128k.conf: its K/V width sets the bytes), OUT
# (out/cp_balance), STEP (0), STEPS (8).
#   bash tools/bench/bench_cp_balance.sh > out/cp_balance.md
set -u
cd "$(dirname "$0")/../.."
SEQ=${SEQ:-32768}; WINDOWS=${WINDOWS:-32}; CONF=${CONF:-configs/llama_1b_128k.conf}; OUT=${OUT:-out/cp_balance}
STEP=${STEP:-0}; STEPS=${STEPS:-8}
PY=/usr/bin/python3
mkdir -p "$OUT"
export OMPI_MCA_rmaps_base_oversubscribe=1
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

run_plan=1; [ "$STEP" = only ] && run_plan=0
# ---- data
if [ $run_plan = 1 ]; then $PY tools/bench/cp_mixes.py --out "$OUT/mix" --seq_len "$SEQ" --windows "$WINDOWS" short shortvar long_short powerlaw midchunk >&2 || exit 1; fi
LIB=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
[ -f "$OUT/stdlib_file/meta.json" ] || build/prepare --out "$OUT/stdlib_file" --doc-per file --val-frac 0.1 --seed 3 "$LIB" >&2 || exit 1
[ -f "$OUT/stdlib_dir/meta.json" ] || build/prepare --out "$OUT/stdlib_dir" --doc-per dir --val-frac 0.1 "$LIB"/*/ >&2 || exit 1
SETS="mix/short:stream mix/shortvar:stream mix/long_short:stream mix/powerlaw:stream mix/midchunk:stream stdlib_file:best_fit stdlib_dir:best_fit"
if [ -x build/hfenv/bin/python ]; then
  if [ ! -f "$OUT/hf/meta.json" ]; then   # a byte-level BPE tokenizer of 8K tokens trained here on the same files
    build/hfenv/bin/python - "$LIB" "$OUT/tok" >&2 <<'PYEOF' && tools/prepare_hf --tokenizer "$OUT/tok" --out "$OUT/hf" --doc-per file --val-frac 0.1 --seed 3 "$LIB" >&2
import glob, os, sys
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
files = [f for f in glob.glob(os.path.join(sys.argv[1], "**", "*.py"), recursive=True) if "/test" not in f][:2000]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train(files, trainers.BpeTrainer(vocab_size=8192, special_tokens=["<|endoftext|>"]))
os.makedirs(sys.argv[2], exist_ok=True)
tok.save(os.path.join(sys.argv[2], "tokenizer.json"))
PYEOF
  fi
  [ -f "$OUT/hf/meta.json" ] && SETS="$SETS hf:best_fit"
fi
if [ $run_plan = 1 ]; then
echo "# context-parallel balance: $(date -u +%F), seq_len $SEQ, $WINDOWS windows per set, K/V width of $CONF"
echo
echo "command: \`SEQ=$SEQ WINDOWS=$WINDOWS bash tools/bench/bench_cp_balance.sh\`"
echo

bal() {   # DATA PACK ARGS...: build/plan --balance --json
  local data=$1 pack=$2; shift 2
  build/plan -c "$CONF" --seq_len "$SEQ" --max_seq_len "$SEQ" --train_data "$OUT/$data" --pack "$pack" --shuffle 0 \
    --doc_mask 1 --tp 1 --balance --windows "$WINDOWS" --json "$@"
}
echo "| data | cp | layout | comm | imbalance before | window, pruned | after (document) | ring MiB before | window, pruned | after | saved | K/V hops nobody further sees | dead bytes before | after |"
echo "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for set in $SETS; do
  data=${set%%:*}; pack=${set#*:}
  for cp in 2 4 8; do
    for layout in zigzag contiguous; do
      for comm in ring a2a+ring; do
        [ "$comm" = a2a+ring ] && [ "$cp" -lt 4 ] && continue
        ca=(--cp "$cp" --cp_layout "$layout" --cp_comm "$comm"); [ "$comm" = a2a+ring ] && ca+=(--cp_a2a 2)
        b=$(bal "$data" "$pack" "${ca[@]}" --cp_shard window --cp_prune 0) || { echo "plan failed: $data ${ca[*]}: $b" >&2; continue; }
        p=$(bal "$data" "$pack" "${ca[@]}" --cp_shard window --cp_prune 1)
        a=$(bal "$data" "$pack" "${ca[@]}" --cp_shard document --cp_prune 1)
        $PY - "$data" "$cp" "$layout" "$comm" "$b" "$p" "$a" <<'PYEOF'
import json, sys
d, cp, lay, comm = sys.argv[1:5]
b, p, a = (json.loads(x) for x in sys.argv[5:8])
M = 1 << 20
def dead(x): return f"{100 * x['dead_bytes'] / x['ring_bytes']:.0f}%" if x["ring_bytes"] else "-"
hops = f"{100 * p['kv_hops_blind'] / p['kv_hops']:.0f}%" if p["kv_hops"] else "-"
saved = f"{100 * (1 - a['ring_bytes'] / b['ring_bytes']):.0f}%" if b["ring_bytes"] else "-"
print(f"| {d.replace('mix/', '')} | {cp} | {lay} | {comm} | {b['imbalance']:.3f} | {p['imbalance']:.3f} | {a['imbalance']:.3f} "
      f"| {b['ring_bytes'] / M:.0f} | {p['ring_bytes'] / M:.0f} | {a['ring_bytes'] / M:.0f} | {saved} | {hops} | {dead(b)} | {dead(a)} |")
PYEOF
      done
    done
  done
done

fi
[ "$STEP" = 0 ] && exit 0
# ---- 2. step time at cp 4 on the one-long-plus-many-short mix (scaled), 4 ranks on this machine's cores
S2=8192
$PY tools/bench/cp_mixes.py --out "$OUT/step" --seq_len $S2 --windows 16 long_short >&2 || exit 1
export OMP_WAIT_POLICY=passive
for cp in 4 2; do
echo
echo "step time, cp $cp, long_short at seq_len $S2 (6144 + 8 x 256), $cp ranks on $(nproc) cores$([ "$cp" -gt "$(nproc)" ] && echo ' (oversubscribed)'), OMP_NUM_THREADS=1, $(date -u +%F):"
echo
echo "| sharding | schedule | step ms (median of steps 2..$STEPS) | attention busy s, slowest rank | ring imbalance (busy, max / mean) | longest ring wait s | hidden | ring bytes / step (rank 0) | loss step $STEPS |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
for v in "window 0" "window 1" "document 1"; do
  read -r sh pr <<<"$v"
  rm -rf "$OUT/run_$cp$sh$pr"
  OMP_NUM_THREADS=1 mpirun -q -np $cp build/train --vocab_size 257 --d_model 128 --n_layer 2 --n_head 4 --n_kv_head 2 --d_ff 352 \
    --max_seq_len $S2 --seq_len $S2 --batch_size 4 --micro_batch 1 --max_steps "$STEPS" --warmup_steps 1 --save_final 0 \
    --doc_mask 1 --shuffle 0 --train_data "$OUT/step/long_short" --cp $cp --cp_shard "$sh" --cp_prune "$pr" \
    --out_dir "$OUT/run_$cp$sh$pr" >"$OUT/run_$cp$sh$pr.log" 2>&1 || { echo "train failed: $(tail -2 "$OUT/run_$cp$sh$pr.log")" >&2; continue; }
  $PY - "$sh" "$pr" "$OUT/run_$cp$sh$pr/metrics.jsonl" <<'PYEOF'
import json, statistics, sys
sh, pr, path = sys.argv[1:4]
r = [json.loads(l) for l in open(path)][1:]
med = lambda k: statistics.median(x[k] for x in r)
print(f"| {sh} | {'pruned' if pr == '1' else 'full'} | {med('step_ms'):.0f} | {med('cp_busy_max_s'):.2f} | {med('cp_imbalance'):.2f} "
      f"| {med('cp_wait_max_s'):.2f} | {100 * med('cp_hidden'):.0f}% "
      f"| {med('sent_hop_bytes') / 1048576:.1f} MiB | {r[-1]['loss']:.6f} |")
PYEOF
done
done
