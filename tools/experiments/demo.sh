#!/usr/bin/env bash
# demo.sh — the end-to-end showcase behind `make demo` (time: see docs/demo.md; measured there with the load):
#  1. prepare long documents from source trees already on this machine, tools/stdlib_docs.sh's list (each Python
#     standard-library package one document, "a whole codebase is one document", and each top-level module one
#     more; not this repository's own sources, so that the data, and with it every number below, does not change
#     when the code does: the same Python gives the same numbers); build/prepare writes meta.json beside the shards
#     (vocab_size, end-of-document token);
#  2. train a small long-context model (configs/demo_long.conf: 2048-token context, YaRN x4 over an "original"
#     1024, document masking: attention stays inside each document) on 4 local ranks as tp = 2 x cp = 2,
#     checkpointing as it goes;
#  3. resume the run from its checkpoint on a different layout (tp = 1 x cp = 4) and train further (one cosine
#     schedule over both parts: --lr_horizon, so the learning rate does not jump at the resume);
#  4. evaluate, writing CSV tables and SVG plots:
#     - perplexity by position at the trained context, both checkpoints, log-spaced buckets (the fall over the
#       first tokens of context is where the curve moves; 128-token buckets would average it away): the first 192
#       packed windows of the held-out stream, document-masked as in training, each target booked at the number
#       of tokens of its own document it sees. Scoring documents from their start would give few units for the
#       first positions;
#     - the final checkpoint at 4x the trained context (8192) on the first 8 held-out documents longer than that,
#       from their start, in 512-token buckets (this plot is about the long positions): plain RoPE vs YaRN x4 as trained (built for
#       4 x 1024 = 4096 positions) vs YaRN x8 (8192). At 2x the context (4096) x4 and x8 coincide: both stay
#       inside their range there. One --ckpt per command, each --rope (and its --label) right after the --ckpt
#       it belongs to;
#     - passkey retrieval;
#  5. print where every result is, with the key numbers read back from the CSV tables and the data's meta.json, and
#     keep that summary in $OUT/summary.txt: tools/docs_tables.py makes docs/demo.md's block of it from there (and
#     reruns this script when the code or the data no longer give the demo's first steps; see that tool).
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1
DATA=${DATA:-out/demo_data}
OUT=${OUT:-out/demo}
STEPS1=${STEPS1:-200}
STEPS2=${STEPS2:-300}
MPI=(mpirun -q --oversubscribe -np 4); [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
PREP=(--doc-per dir --val-frac 0.2 --seed 3)   # build/prepare's options (tools/docs_tables.py reads this line)
T0=$SECONDS

mapfile -t docs < <(tools/stdlib_docs.sh)   # the quick start's documents: this machine's Python standard library
# prepared every time (about a second): data left by an earlier build/prepare would keep its split rule
echo "== 1. preparing data: ${#docs[@]} documents (package trees and top-level modules of Python's standard library)"
build/prepare --out "$DATA" "${PREP[@]}" --force "${docs[@]}"
rm -rf "$OUT"

echo "== 2. training on 4 ranks: tp 2 x cp 2, $STEPS1 steps (configs/demo_long.conf, doc_mask = 1)"
"${MPI[@]}" build/train -c configs/demo_long.conf --train_data "$DATA/train_*.bin" --val_data "$DATA/val_*.bin" \
  --out_dir "$OUT" --tp 2 --cp 2 --max_steps "$STEPS1" --lr_horizon "$STEPS2" --ckpt_every 100 --verify_attention 100 \
  --log_every 20
first=$(cat "$OUT/latest")

echo "== 3. resuming $OUT/$first on a different layout: tp 1 x cp 4, to step $STEPS2"
"${MPI[@]}" build/train -c configs/demo_long.conf --train_data "$DATA/train_*.bin" --val_data "$DATA/val_*.bin" \
  --out_dir "$OUT" --tp 1 --cp 4 --max_steps "$STEPS2" --lr_horizon "$STEPS2" --ckpt_every 100 --resume latest \
  --log_every 20
final=$(cat "$OUT/latest")

echo "== 4. perplexity by position and passkey retrieval (4 ranks, cp 4)"
"${MPI[@]}" build/eval --ckpt "$OUT/$first" --label "step $STEPS1 (tp2 x cp2)" --ckpt "$OUT/$final" \
  --label "step $STEPS2 (resumed at cp4)" --data "$DATA/val_*.bin" --seq_len 2048 --log_buckets --doc_mask --docs 192 \
  --cp 4 --out "$OUT/eval" --name ppl_2048
# the trained RoPE is configs/demo_long.conf's: yarn, factor 4, original 1024
"${MPI[@]}" build/eval --ckpt "$OUT/$final" --rope none --label "plain RoPE (none)" \
  --rope yarn:4:1024 --label "YaRN x4 (as trained)" --rope yarn:8:1024 --label "YaRN x8" \
  --data "$DATA/val_*.bin" --seq_len 8192 --bucket 512 --docs 8 --cp 4 --out "$OUT/eval" --name ppl_8192_yarn
"${MPI[@]}" build/eval --passkey --ckpt "$OUT/$final" --passkey_lens 256,512,1024 --passkey_depths 0,0.5,1 \
  --passkey_trials 2 --cp 4 --out "$OUT/eval" --name demo

# key numbers, read back from the CSV tables: perplexity per byte over ranges of positions (token-weighted
# mean loss of the buckets inside each range)
summary() {   # CSV, then ranges LO:HI
  /usr/bin/python3 - "$@" <<'PY'
import csv, math, sys
path, ranges = sys.argv[1], [tuple(map(int, r.split(":"))) for r in sys.argv[2:]]
rows = list(csv.DictReader(open(path)))
series = list(dict.fromkeys(r["series"] for r in rows))
w = max(len(s) for s in series + ["perplexity over positions"])
print("                   %-*s %s" % (w, "perplexity over positions", "".join("%14s" % ("[%d, %d)" % r) for r in ranges)))
for s in series:
    out = []
    for lo, hi in ranges:
        b = [r for r in rows if r["series"] == s and int(r["bucket_lo"]) >= lo and int(r["bucket_hi"]) <= hi]
        n = sum(int(r["tokens"]) for r in b)
        out.append("%14.2f" % math.exp(sum(float(r["mean_nll"]) * int(r["tokens"]) for r in b) / n) if n else "%14s" % "-")
    print("                   %-*s %s" % (w, s, "".join(out)))
PY
}

results() {
echo "== 5. results ($(( SECONDS - T0 )) s on $(date -u +%F), load average $(cut -d' ' -f1 /proc/loadavg) at the end, $(getconf _NPROCESSORS_ONLN) cores, OPENBLAS_CORETYPE ${OPENBLAS_CORETYPE:-unset})"
echo "  data:          $DATA/ (llm.c uint16 token shards + meta.json; byte tokenizer, end-of-document token 256)"
/usr/bin/python3 - "$DATA/meta.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
d, t = m["documents"], m["tokens"]
print(f"                 {d['train'] + d['val']} documents: {d['train']} trained on ({t['train']:,} tokens), "
      f"{d['val']} held out ({t['val']:,} tokens)")
PY
echo "  training log:  $OUT/metrics.jsonl (one JSON object per step), resolved config $OUT/config.txt"
echo "  checkpoints:   $OUT/ckpt_*.h5 (HDF5; 'h5dump -A' or h5py to inspect), newest named in $OUT/latest"
echo "  perplexity:    $OUT/eval/ppl_2048.svg / .csv  (two checkpoints at the trained context; packed windows,"
echo "                 document-masked; falls over the first tokens of context, then levels off)"
summary "$OUT/eval/ppl_2048.csv" 0:1 1:8 8:128 128:2048
echo "                 $OUT/eval/ppl_8192_yarn.svg / .csv  (4x the trained context, held-out documents from their"
echo "                 start: plain RoPE rises past 1024, YaRN x4 as trained past its 4 x 1024, YaRN x8 stays low)"
summary "$OUT/eval/ppl_8192_yarn.csv" 0:1024 1024:4096 4096:8192
echo "  passkey:       $OUT/eval/demo_passkey.svg / .csv  (a 5-digit key planted at 3 depths of 256/512/1024-token"
echo "                 documents, asked for at the end; 2 trials a cell)"
/usr/bin/python3 - "$OUT/eval/demo_passkey.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
acc = sum(float(r["accuracy"] or 0) for r in rows) / len(rows)
dig = sum(float(r["digit_accuracy"] or 0) for r in rows) / len(rows)
print(f"                 keys retrieved: {acc:.0%} of the {len(rows)} cells' trials, digits right: {dig:.0%} (chance: 10%)."
      "\n                 This model has never seen a passkey document: 0% is the expected result here, and it says"
      "\n                 that the evaluation runs, not that long-context retrieval failed. docs/experiments.md, \"Passkey retrieval"
      "\n                 with document-aware packing\", trains models on passkey documents that do retrieve.")
PY
}
echo
results | tee "$OUT/summary.txt"
