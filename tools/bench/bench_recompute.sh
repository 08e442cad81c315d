#!/usr/bin/env bash
# bench_recompute.sh — the step-time cost of each recompute mode: the bench_train.sh model (d_model 256,
# 4 layers, 8 heads, 2 KV heads, d_ff 704) at seq_len 4096 and 16384, one process, one sequence per step;
# the modes run in turn ROUNDS times (so drift on a shared machine hits every mode), median step time of the
# steps after the first, as a ratio to `none`; the activation memory each mode allocates.
#   bash tools/bench/bench_recompute.sh [ROUNDS=2] [STEPS=4]       (LENS="4096 16384": the seq_lens, in turn)
#   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 bash tools/bench/bench_recompute.sh   (peak speed)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2}; steps=${2:-4}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
make -s build/train build/prepare
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
src=(model attention data train tests tools)
[ -d /usr/lib/python3.11/email ] && src+=(/usr/lib/python3.11/email)
build/prepare --out "$T/data" --val-frac 0 --doc-per dir "${src[@]}" >/dev/null
echo "threads $OMP_NUM_THREADS, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; $rounds rounds of $steps steps per mode"
echo
echo "| seq_len | recompute | step ms (median) | × none | activations MiB |"
echo "|--------:|-----------|-----------------:|-------:|---------------:|"
for L in ${LENS:-4096 16384}; do
  for ((r = 0; r < rounds; r++)); do
    for rc in none mlp qkv full; do
      build/train --train_data "$T/data/train_*.bin" --out_dir "$T/o_${L}_${rc}_$r" --force --save_final 0 \
        --vocab_size 257 --d_model 256 --n_layer 4 --n_head 8 --n_kv_head 2 --d_ff 704 --recompute $rc \
        --max_seq_len "$L" --seq_len "$L" --batch_size 1 --micro_batch 1 --max_steps "$steps" --warmup_steps 1 \
        --lr 1e-3 --log_every 1000 >"$T/o_${L}_${rc}_$r.txt"
    done
  done
  /usr/bin/python3 - "$T" "$L" "$rounds" <<'PY'
import json, re, sys, statistics as st
t, L, R = sys.argv[1], sys.argv[2], int(sys.argv[3])
ms, acts = {}, {}
for rc in ("none", "mlp", "qkv", "full"):
    v = []
    for r in range(R):
        v += [json.loads(l)["step_ms"] for l in open(f"{t}/o_{L}_{rc}_{r}/metrics.jsonl")][1:]
        acts[rc] = re.search(r"activations ([0-9.]+) MiB", open(f"{t}/o_{L}_{rc}_{r}.txt").read()).group(1)
    ms[rc] = st.median(v)
for rc in ms:
    print(f"| {L} | {rc} | {ms[rc]:.0f} | {ms[rc] / ms['none']:.2f} | {acts[rc]} |")
PY
done
