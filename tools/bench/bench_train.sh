#!/usr/bin/env bash
# bench_train.sh — training throughput of the single-process CPU trainer (the issue-2 benchmark).
# Model: d_model 256, 4 layers, 8 heads, 2 KV heads, d_ff 704, vocab 256 (+1 end-of-document token),
# at seq_len 1024, 4096 and 16384; one sequence per step. Reports the median tokens/s and achieved
# GFLOP/s (model FLOPs per token = 6 * matmul params + 6 * n_layer * seq_len * d_model) over the steps
# after the first, beside the sgemm peak measured in the same run.
#   bash tools/bench/bench_train.sh [STEPS=6]         (make bench runs it)
# For peak numbers unset the OpenBLAS core override in this command only:
#   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE bash tools/bench/bench_train.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-6}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
make -s build/train build/prepare build/sgemm_peak
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
# enough text for a 16K window: this repository's sources plus Python's standard library, if present
src=(model attention data train tests tools)
[ -d /usr/lib/python3.11/email ] && src+=(/usr/lib/python3.11/email)
build/prepare --out "$T/data" --val-frac 0 --doc-per dir "${src[@]}" >/dev/null
peak=$(build/sgemm_peak 2048 9 | sed -E 's/.*median ([0-9.]+).*/\1/')
echo "threads $OMP_NUM_THREADS, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, sgemm peak (2048^3, median) $peak GFLOP/s"
echo
echo "| seq_len | tokens/s | GFLOP/s | % of sgemm peak | step ms | peak RSS MiB |"
echo "|--------:|---------:|--------:|----------------:|--------:|-------------:|"
for L in 1024 4096 16384; do
  /usr/bin/time -f "%M" -o "$T/rss" build/train --train_data "$T/data/train_*.bin" --out_dir "$T/o$L" --force \
    --vocab_size 257 --d_model 256 --n_layer 4 --n_head 8 --n_kv_head 2 --d_ff 704 \
    --max_seq_len "$L" --seq_len "$L" --batch_size 1 --micro_batch 1 --max_steps "$steps" --warmup_steps 1 \
    --lr 1e-3 --log_every 1000 >/dev/null
  /usr/bin/python3 - "$T/o$L/metrics.jsonl" "$L" "$peak" "$(cat "$T/rss")" <<'PY'
import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
tps = st.median(r["tokens_per_s"] for r in rows); gf = st.median(r["gflops"] for r in rows)
ms = st.median(r["step_ms"] for r in rows); peak = float(sys.argv[3])
print(f"| {sys.argv[2]} | {tps:.0f} | {gf:.1f} | {100 * gf / peak:.0f} % | {ms:.0f} | {int(sys.argv[4]) / 1024:.0f} |")
PY
done
