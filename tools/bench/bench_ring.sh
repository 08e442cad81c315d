#!/usr/bin/env bash
# bench_ring.sh — the ring-attention benchmark (issue 3). Four measurements, printed as markdown tables:
#  1. per-rank memory at a fixed sequence length for P = 1, 2, 4, 8 (planned activations and peak RSS);
#  2. the longest sequence that trains one step on this machine at P = 1 and P = 8 (the whole machine's
#     memory shared by the ranks: each rank gets MEM_GIB / P of address space via ulimit -v), using a
#     memory-heavy tiny model so that memory, not compute time, is the limit;
#  3. attention load imbalance (max/mean per-rank attention CPU time) for zigzag vs contiguous at P = 4, 8;
#  4. the fraction of ring communication hidden behind compute.
# Ranks are oversubscribed on this 2-core machine with OMP_NUM_THREADS=1 each.
#   bash tools/bench/bench_ring.sh [all|memory|longest|balance]
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
MEM_GIB=${MEM_GIB:-22}
export OMP_NUM_THREADS=1
MPI=(mpirun -q --oversubscribe); [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
make -s build/train build/prepare
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
src=(model attention data train tests tools comm)
[ -d /usr/lib/python3.11/email ] && src+=(/usr/lib/python3.11/email /usr/lib/python3.11/json /usr/lib/python3.11/http)
build/prepare --out "$T/data" --val-frac 0 --doc-per dir "${src[@]}" >/dev/null
BENCH_MODEL=(--vocab_size 257 --d_model 256 --n_layer 4 --n_head 8 --n_kv_head 2 --d_ff 704 --batch_size 1 --micro_batch 1)

train() {  # P args...  (runs one job, output in $T/out)
  local P=$1; shift
  if [ "$P" -eq 1 ]; then build/train --train_data "$T/data" --out_dir "$T/o" --force --cp 1 "$@" >"$T/out" 2>"$T/err"
  else "${MPI[@]}" -np "$P" build/train --train_data "$T/data" --out_dir "$T/o" --force --cp "$P" "$@" >"$T/out" 2>"$T/err"; fi
}

if [ "$what" = all ] || [ "$what" = memory ]; then
  L=8192
  echo "### Per-rank memory at seq_len $L (d_model 256, 4 layers, 8 heads / 2 KV heads, d_ff 704; one step)"
  echo
  echo "| P | tokens per rank | activations MiB (planned) | ring buffers MiB | peak RSS MiB per rank | activations x P |"
  echo "|--:|--:|--:|--:|--:|--:|"
  for P in 1 2 4 8; do
    train "$P" "${BENCH_MODEL[@]}" --max_seq_len $L --seq_len $L --max_steps 1
    line=$(grep "^memory per rank" "$T/out")
    act=$(echo "$line" | sed -E 's/.*activations ([0-9.]+) MiB.*/\1/')
    ring=$(echo "$line" | sed -E 's/.*ring buffers ([0-9.]+) MiB.*/\1/')
    rss=$(echo "$line" | sed -E 's/.*peak RSS ([0-9.]+) MiB.*/\1/')
    echo "| $P | $((L / P)) | $act | $ring | $rss | $(awk -v a="$act" -v p="$P" 'BEGIN{printf "%.1f", a*p}') |"
  done
  echo
fi

if [ "$what" = all ] || [ "$what" = longest ]; then
  # memory-heavy tiny model: ~0.8 MB of activations per token, so ~30K tokens fill the machine
  HEAVY=(--vocab_size 257 --d_model 8 --n_layer 1 --n_head 1 --n_kv_head 1 --d_ff 32768 --batch_size 1 --micro_batch 1
         --max_steps 1 --warmup_steps 0)
  fits() {  # P L -> 0 if one step trains within MEM_GIB / P of address space per rank
    local P=$1 L=$2 kib=$((MEM_GIB * 1024 * 1024 / $1))
    ( ulimit -v "$kib"; train "$P" "${HEAVY[@]}" --max_seq_len "$2" --seq_len "$2" ) && grep -q "^done" "$T/out"
  }
  echo "### Longest sequence that trains one step in ${MEM_GIB} GiB (d_model 8, 1 layer, d_ff 32768: memory-bound)"
  echo
  echo "| P | address space per rank | longest seq_len that trained | next size (failed) | message of the failure |"
  echo "|--:|--:|--:|--:|---|"
  for P in 1 8; do
    lo=4096; hi=65536; step=1024
    fits "$P" $lo || { echo "| $P | - | < $lo | | $(head -1 "$T/err") |"; continue; }
    while [ $((hi - lo)) -gt $step ]; do
      mid=$(( (lo + hi) / 2 / step * step ))
      if fits "$P" $mid; then lo=$mid; else hi=$mid; msg=$(grep -v '^$' "$T/err" | head -1); fi
    done
    echo "| $P | $((MEM_GIB * 1024 / P)) MiB | $lo | $hi | ${msg:-} |"
  done
  echo
fi

if [ "$what" = all ] || [ "$what" = balance ]; then
  L=8192
  echo "### Ring load balance and overlap at seq_len $L (d_model 256, 2 layers, 8 heads / 2 KV heads; 3 steps)"
  echo
  echo "| P | layout | attention busy max/mean (imbalance) | communication hidden | one hop un-overlapped ms | tokens/s |"
  echo "|--:|---|--:|--:|--:|--:|"
  for P in 4 8; do
    for layout in zigzag contiguous; do
      train "$P" --vocab_size 257 --d_model 256 --n_layer 2 --n_head 8 --n_kv_head 2 --d_ff 704 --batch_size 1 \
        --micro_batch 1 --max_seq_len $L --seq_len $L --max_steps 3 --cp_layout "$layout"
      r=$(grep "^ring (cp" "$T/out")
      imb=$(echo "$r" | sed -E 's/.*max\/mean ([0-9.]+).*/\1/'); hid=$(echo "$r" | sed -E 's/.*hidden ([0-9.]+)%.*/\1/')
      hop=$(echo "$r" | sed -E 's/.*one hop ([0-9.]+) ms.*/\1/')
      tps=$(grep "^done" "$T/out" | sed -E 's/.*mean ([0-9]+) tok.*/\1/')
      echo "| $P | $layout | $imb | $hid % | $hop | $tps |"
    done
  done
  echo
fi
