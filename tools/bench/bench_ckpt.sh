#!/usr/bin/env bash
# bench_ckpt.sh — checkpoint save and load time and throughput (MB/s of file written/read) for a small and
# a larger model at 1, 2, 4, 8 ranks (layouts: 1 = one process; 2 = tp 2; 4 = tp 2 x cp 2; 8 = tp 2 x
# cp 2 x dp 2 with ZeRO-1), with the file size, for both MPI-IO transfer modes (ckpt_io collective and
# independent). Each save writes parameters and both AdamW moments.
#   bash tools/bench/bench_ckpt.sh [DIR]     (DIR: where checkpoints are written; default a temp dir)
set -euo pipefail
cd "$(dirname "$0")/../.."
export OMP_NUM_THREADS=1
MPI=(mpirun -q --oversubscribe); [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
make -s build/train build/prepare
T=$(mktemp -d "${1:-/tmp}/ringlm_bench_ckpt.XXXX"); trap 'rm -rf "$T"' EXIT
build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null
SMALL=(--vocab_size 257 --d_model 64 --n_layer 2 --n_head 8 --n_kv_head 4 --d_ff 96)
LARGE=(--vocab_size 32000 --d_model 512 --n_layer 8 --n_head 8 --n_kv_head 4 --d_ff 1408)
COMMON=(--seq_len 64 --max_seq_len 64 --batch_size 8 --micro_batch 1 --train_data "$T/data")
layout() { case $1 in 1) echo "";; 2) echo "--tp 2";; 4) echo "--tp 2 --cp 2";; 8) echo "--tp 2 --cp 2 --zero 1";; esac; }
run() { local np=$1; shift; if [ "$np" -eq 1 ]; then build/train "$@"; else "${MPI[@]}" -np "$np" build/train "$@"; fi; }
echo "| model | ranks | layout | ckpt_io | file MB | save s | save MB/s | load s | load MB/s |"
echo "|---|--:|---|---|--:|--:|--:|--:|--:|"
for m in small large; do
  if [ $m = small ]; then M=("${SMALL[@]}"); else M=("${LARGE[@]}"); fi
  for np in 1 2 4 8; do
   for io in collective independent; do
    [ "$np" -eq 1 ] && [ $io = independent ] && continue
    out="$T/$m$np"; rm -rf "$out"
    # shellcheck disable=SC2046
    run "$np" "${M[@]}" "${COMMON[@]}" $(layout "$np") --ckpt_io $io --max_steps 0 --out_dir "$out" >"$T/save.txt"
    save=$(sed -nE 's/^saved checkpoint .* \(([0-9.]+) s\)/\1/p' "$T/save.txt" | tail -1)
    size=$(stat -c %s "$out/ckpt_00000000.h5")
    # shellcheck disable=SC2046
    run "$np" "${M[@]}" "${COMMON[@]}" $(layout "$np") --ckpt_io $io --max_steps 0 --out_dir "$out" --resume latest >"$T/load.txt"
    load=$(sed -nE 's/^resumed from .* \(([0-9.]+) s\)/\1/p' "$T/load.txt")
    awk -v m=$m -v n="$np" -v l="$(layout "$np")" -v io=$io -v s="$size" -v ts="$save" -v tl="$load" 'BEGIN {
      mb = s / 1e6; printf "| %s | %d | %s | %s | %.1f | %.3f | %.0f | %.3f | %.0f |\n", m, n, (l == "" ? "1 process" : l), io, mb, ts, mb / ts, tl, mb / tl }'
   done
  done
done
