#!/usr/bin/env bash
# bench_memory_options.sh — the step-time cost of the memory options on the CPU backend, side by side: the tiled
# MLP (one process, the bench_train model — d_model 256, 4 layers, 8 heads, 2 KV heads, d_ff 704 — at seq_len 4096,
# untiled and tiles of 2048, 1024 and 512 rows) and ZeRO-1/2/3 (dp 2: two processes, one sequence each per
# micro-batch, seq_len 2048, one and two micro-batches per step). The variants of a group run in turn ROUNDS times
# (drift on a shared machine hits each), median step time of the steps after the first (ZeRO: the slower rank's),
# as a ratio to the group's first; the memory each allocates (the trainer's line).
#   bash tools/bench/bench_memory_options.sh [ROUNDS=2] [STEPS=4]
# Offload's cost is the GPU's (a copy stream beside the compute stream); the planner predicts it (build/plan:
# "offload: one layer's saved tensors ... hidden / exposed").
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2}; steps=${2:-4}
make -s build/train build/prepare
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
build/prepare --out "$T/data" --val-frac 0 --doc-per dir model attention data train tests tools >/dev/null
MPI=(mpirun -q --oversubscribe); [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
M=(--train_data "$T/data/train_*.bin" --force --save_final 0 --vocab_size 257 --d_model 256 --n_layer 4 --n_head 8
   --n_kv_head 2 --d_ff 704 --micro_batch 1 --max_steps "$steps" --warmup_steps 1 --lr 1e-3 --log_every 1000)
echo "$(date -u +%F), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds of $steps steps per variant"
report() {   # GROUP NAME...: the table rows of a group
  /usr/bin/python3 - "$T" "$rounds" "$@" <<'PY'
import json, re, sys, statistics as st
t, R, group, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
ms, mem = {}, {}
for n in names:
    v = []
    for r in range(R):
        v += [json.loads(l)["step_ms"] for l in open(f"{t}/{group}_{n}_{r}/metrics.jsonl")][1:]
        mem[n] = re.search(r"memory per rank: (.*), peak RSS ([0-9.]+) MiB", open(f"{t}/{group}_{n}_{r}.txt").read())
    ms[n] = st.median(v)
for n in names:
    m = mem[n]
    print(f"| {group} | {n} | {ms[n]:.0f} | {ms[n] / ms[names[0]]:.2f} | {m.group(1).split('AdamW')[0].rstrip(', ')}, "
          f"{m.group(1).split('activations ')[1].split(',')[0]} activations | {m.group(2)} |")
PY
}
echo
echo "| group | variant | step ms (median) | × first | per-rank params, grads; activations | peak RSS MiB |"
echo "|---|---|---:|---:|---|---:|"
for ((r = 0; r < rounds; r++)); do
  for tile in 0 2048 1024 512; do
    OMP_NUM_THREADS=$(nproc) build/train "${M[@]}" --out_dir "$T/tile_$tile" --seq_len 4096 --max_seq_len 4096 --batch_size 1 \
      --mlp_tile $tile >"$T/tile_${tile}_$r.txt"
    mv "$T/tile_$tile" "$T/tile_${tile}_$r"
  done
done
report tile 0 2048 1024 512
for acc in 1 2; do
  for ((r = 0; r < rounds; r++)); do
    for z in 1 2 3; do
      OMP_NUM_THREADS=1 "${MPI[@]}" -np 2 build/train "${M[@]}" --out_dir "$T/z$acc" --seq_len 2048 --max_seq_len 2048 \
        --batch_size $((2 * acc)) --zero $z </dev/null >"$T/zero${acc}_z${z}_$r.txt"
      mv "$T/z$acc" "$T/zero${acc}_z${z}_$r"
    done
  done
  report "zero$acc" z1 z2 z3
done
