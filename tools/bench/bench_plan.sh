#!/usr/bin/env bash
# bench_plan.sh — the capacity planner against measured memory: for several sizes, layouts and recompute
# modes, build/plan's per-rank total (--device cpu) plus a fixed overhead against build/train's peak RSS
# (max over ranks, 1 step, no checkpoint). The fixed overhead (MPI, OpenBLAS, HDF5, code, the loader) is
# measured once, as a tiny model's peak RSS minus its plan.
#   bash tools/bench/bench_plan.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s build/train build/prepare build/plan
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
build/prepare --out "$T/data" --val-frac 0 --doc-per dir model attention data train tests tools >/dev/null
MPI=(mpirun -q --oversubscribe); [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
export OMP_NUM_THREADS=1
BASE=(--vocab_size 257 --n_head 8 --n_kv_head 2 --batch_size 2 --micro_batch 1 --max_steps 1 --warmup_steps 1
      --log_every 1000 --save_final 0 --train_data "$T/data/train_*.bin")
run() {   # name np dp args... -> "planned_MiB measured_MiB"
  local name=$1 np=$2 dp=$3; shift 3
  local launch=(); [ "$np" -gt 1 ] && launch=("${MPI[@]}" -np "$np")
  "${launch[@]}" build/train "${BASE[@]}" --out_dir "$T/$name" "$@" >"$T/$name.out" 2>&1
  local rss plan
  rss=$(sed -nE 's/.*peak RSS ([0-9.]+) MiB.*/\1/p' "$T/$name.out")
  plan=$(build/plan "${BASE[@]}" --device cpu --dp "$dp" --json "$@" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["total"] / 1048576)')
  echo "$plan $rss"
}
read -r p0 r0 <<<"$(run tiny 1 1 --d_model 64 --n_layer 1 --d_ff 128 --seq_len 128 --max_seq_len 128)"
over=$(/usr/bin/python3 -c "print(f'{$r0 - $p0:.1f}')")
echo "fixed overhead: $over MiB (a tiny model's peak RSS $r0 MiB minus its plan $p0 MiB)"
echo
echo "| model | seq_len | layout | recompute | planned MiB | + overhead | measured peak RSS MiB | error |"
echo "|---|---:|---|---|---:|---:|---:|---:|"
while read -r name np dp seq dm nl ff layout rc; do
  args=(--d_model "$dm" --n_layer "$nl" --d_ff "$ff" --seq_len "$seq" --max_seq_len "$seq" --recompute "$rc")
  # shellcheck disable=SC2206
  [ "$layout" = "-" ] || args+=(${layout//,/ })
  read -r p r <<<"$(run "$name" "$np" "$dp" "${args[@]}")"
  /usr/bin/python3 -c "p=$p; r=$r; o=$over; print(f'| d{$dm} L{$nl} | $seq | ${layout//,/ } | $rc | {p:.0f} | {p+o:.0f} | {r:.0f} | {100*(p+o-r)/r:+.1f} % |')"
done <<'RUNS'
a 1 1 4096 256 4 704 - none
b 1 1 4096 256 4 704 - full
c 1 1 8192 256 4 704 - none
d 1 1 8192 256 4 704 - mlp
e 1 1 8192 256 4 704 - full
f 1 1 2048 512 8 1408 - qkv
g 2 1 8192 256 4 704 --cp,2 none
h 4 1 8192 256 4 704 --tp,2,--cp,2,--zero,1 full
i 4 2 4096 256 4 704 --cp,2,--zero,1 mlp
RUNS
