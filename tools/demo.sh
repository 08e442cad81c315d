#!/usr/bin/env bash
# demo.sh — the end-to-end showcase behind `make demo` (about 3.5 minutes on 2 cores):
#  1. prepare long documents from source trees already on this machine (each Python standard-library
#     package and this repository are one document each: "a whole codebase is one document");
#  2. train a small long-context model (configs/demo_long.conf: 2048-token context, YaRN) on 4 local ranks
#     as tp = 2 x cp = 2, checkpointing as it goes;
#  3. resume the run from its checkpoint on a different layout (tp = 1 x cp = 4) and train further;
#  4. evaluate perplexity by position over windows of the held-out stream (both checkpoints at the trained
#     context; the final one at 2x the context with two YaRN factors) and passkey retrieval, writing CSV
#     tables and SVG plots;
#  5. print where every result is.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
DATA=${DATA:-out/demo_data}
OUT=${OUT:-out/demo}
STEPS1=${STEPS1:-100}
STEPS2=${STEPS2:-150}
MPI=(mpirun -q --oversubscribe -np 4); [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)

stdlib=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
docs=()
for d in "$stdlib"/*/; do case "$(basename "$d")" in test|tests|idlelib|site-packages|dist-packages|__pycache__|lib2to3|config-*) ;; *) docs+=("$d");; esac; done
docs+=(model attention comm checkpoint eval data train)
if [ ! -f "$DATA/train_000000.bin" ]; then
  echo "== 1. preparing data: ${#docs[@]} source trees, one document each"
  build/prepare --out "$DATA" --doc-per dir --val-frac 0.2 --seed 3 "${docs[@]}"
else
  echo "== 1. reusing prepared data in $DATA (delete it to rebuild)"
fi
rm -rf "$OUT"

echo "== 2. training on 4 ranks: tp 2 x cp 2, $STEPS1 steps (configs/demo_long.conf)"
"${MPI[@]}" build/train -c configs/demo_long.conf --train_data "$DATA/train_*.bin" --val_data "$DATA/val_*.bin" \
  --out_dir "$OUT" --tp 2 --cp 2 --max_steps "$STEPS1" --ckpt_every 50 --verify_attention 50 --log_every 10
first=$(cat "$OUT/latest")

echo "== 3. resuming $OUT/$first on a different layout: tp 1 x cp 4, to step $STEPS2"
"${MPI[@]}" build/train -c configs/demo_long.conf --train_data "$DATA/train_*.bin" --val_data "$DATA/val_*.bin" \
  --out_dir "$OUT" --tp 1 --cp 4 --max_steps "$STEPS2" --ckpt_every 50 --resume latest --log_every 10
final=$(cat "$OUT/latest")

echo "== 4. perplexity by position and passkey retrieval (4 ranks, cp 4)"
"${MPI[@]}" build/eval --ckpt "$OUT/$first" --ckpt "$OUT/$final" --label "step $STEPS1 (tp2 x cp2)" \
  --label "step $STEPS2 (resumed at cp4)" --data "$DATA/val_*.bin" --seq_len 2048 --bucket 128 --eod -1 --docs 48 --cp 4 \
  --out "$OUT/eval" --name ppl_2048
"${MPI[@]}" build/eval --ckpt "$OUT/$final" --rope yarn:4:1024 --rope yarn:8:1024 --data "$DATA/val_*.bin" \
  --seq_len 4096 --log_buckets --eod -1 --docs 16 --cp 4 --out "$OUT/eval" --name ppl_4096_yarn
"${MPI[@]}" build/eval --passkey --ckpt "$OUT/$final" --passkey_lens 256,512,1024 --passkey_depths 0,0.5,1 \
  --passkey_trials 2 --cp 4 --out "$OUT/eval" --name demo

echo
echo "== 5. results"
echo "  data:          $DATA/ (llm.c uint16 token shards; byte tokenizer + end-of-document token)"
echo "  training log:  $OUT/metrics.jsonl (one JSON object per step), resolved config $OUT/config.txt"
echo "  checkpoints:   $OUT/ckpt_*.h5 (HDF5; 'h5dump -A' or h5py to inspect), newest named in $OUT/latest"
echo "  perplexity:    $OUT/eval/ppl_2048.svg / .csv  (two checkpoints, by position at the trained context)"
echo "                 $OUT/eval/ppl_4096_yarn.svg / .csv  (2x the trained context, YaRN x4 vs x8)"
echo "  passkey:       $OUT/eval/demo_passkey.svg / .csv"
