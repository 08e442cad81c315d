#!/usr/bin/env bash
# bench_grid.sh — per-rank memory of parameters, gradients and AdamW moments versus tp and ZeRO-1 on an
# 8-rank grid (dp = 8 / tp, cp = 1), beside what the grid arithmetic predicts:
#   params = grads = (replicated + sharded / tp) floats (the vocabulary padded to a multiple of tp);
#   moments = 2 x params, or 2 x params / (dp x cp) with ZeRO-1.
# Model: d_model 512, 4 layers, 8 heads, 8 KV heads, d_ff 1408, vocab 32000 (46M parameters).
#   bash tools/bench/bench_grid.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1
MPI=(mpirun -q --oversubscribe); [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
make -s build/train build/prepare
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null
MODEL=(--vocab_size 32000 --d_model 512 --n_layer 4 --n_head 8 --n_kv_head 8 --d_ff 1408 --seq_len 64 --max_seq_len 64
       --batch_size 8 --micro_batch 1 --max_steps 1)
echo "| tp | dp | ZeRO | params MiB | grads MiB | AdamW moments MiB | predicted params | predicted moments | peak RSS MiB |"
echo "|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
for tp in 1 2 4 8; do
  for zero in 0 1; do
    "${MPI[@]}" -np 8 build/train --train_data "$T/data" --out_dir "$T/o" --force "${MODEL[@]}" --tp $tp --zero $zero >"$T/out"
    line=$(grep "^memory per rank" "$T/out")
    get() { echo "$line" | sed -E "s/.*$1 ([0-9.]+) MiB.*/\1/"; }
    /usr/bin/python3 - "$tp" "$zero" "$(get params)" "$(get grads)" "$(get 'AdamW moments')" "$(get 'peak RSS')" <<'PY'
import sys
tp, zero = int(sys.argv[1]), int(sys.argv[2]); dp = 8 // tp
C, L, F, V, H = 512, 4, 1408, 32000, 512
Vp = (V + tp - 1) // tp * tp
replicated = (2 * L + 1) * C
sharded = L * (4 * C * H + 3 * C * F) + 2 * Vp * C      # q k v o, gate up down, embed + lm_head
params = (replicated + sharded / tp) * 4 / 2**20
moments = 2 * params / (dp if zero else 1)
p, g, m, rss = sys.argv[3:7]
print(f"| {tp} | {dp} | {zero} | {p} | {g} | {m} | {params:.2f} | {moments:.2f} | {rss} |")
PY
  done
done
