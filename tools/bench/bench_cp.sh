#!/usr/bin/env bash
# bench_cp.sh — context parallelism as ring, all-to-all (Ulysses) and all-to-all x ring, and sequence parallelism:
#   1. bytes and messages each rank sends per layer (per sequence, forward + backward) and per step, as the comm
#      layer counts them (metrics.jsonl), against the formulas of the README; and the step time on this machine
#      (cp ranks oversubscribed on its 2 cores: the times say little about real links, the volumes carry over);
#   2. activation memory per rank with and without tp_sp: planned (build/plan --device cpu) vs the trainer's peak
#      RSS (minus a fixed overhead measured as in bench_plan.sh);
#   3. the 8 x H200 capacity plan: GiB per rank at 128K and the longest seq_len per recompute mode, per layout.
# Writes OUT/results.md (default out/bench_cp). About 10 minutes.
#   bash tools/bench/bench_cp.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-out/bench_cp}
make -s build/train build/prepare build/plan
mkdir -p "$OUT"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
build/prepare --out "$T/data" --val-frac 0 --doc-per dir model attention data train tests tools >/dev/null
MPI=(mpirun -q --oversubscribe); [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
export OMP_NUM_THREADS=1
PY=/usr/bin/python3

SECTIONS=${SECTIONS:-1 2 3}   # which parts to run (the others keep OUT's earlier tables)

# ---- 1. traffic and step time ----
if [[ " $SECTIONS " == *" 1 "* ]]; then
M=(--vocab_size 257 --d_model 256 --n_layer 2 --n_head 8 --n_kv_head 2 --d_ff 704 --max_seq_len 4096 --seq_len 4096
   --batch_size 1 --micro_batch 1 --max_steps 4 --warmup_steps 1 --save_final 0 --log_every 1 --train_data "$T/data")
{
  echo "### Traffic per rank and step time"
  echo
  echo "Model d_model 256, 2 layers, 8 query / 2 KV heads (head_dim 32), seq_len 4096, one sequence per step."
  echo
  echo "| cp | mode | ring hops: KiB / layer | msgs / layer | all-to-all: KiB / layer | msgs / layer | per step KiB (formula) | step ms (median, oversubscribed) |"
  echo "|---:|---|---:|---:|---:|---:|---:|---:|"
} >"$OUT/traffic.md"
for lay in "4 ring 1" "4 a2a 4" "4 a2a+ring 2" "8 ring 1" "8 a2a 8" "8 a2a+ring 2" "8 a2a+ring 4"; do
  read -r cp mode U <<<"$lay"
  args=(--cp "$cp" --cp_comm "$mode"); [ "$mode" = "a2a+ring" ] && args+=(--cp_a2a "$U")
  rm -rf "$T/r"
  "${MPI[@]}" -np "$cp" build/train "${M[@]}" "${args[@]}" --out_dir "$T/r" >"$T/r.out" 2>&1 || { echo "bench_cp: $lay failed: $(tail -2 "$T/r.out")" >&2; exit 1; }
  $PY - "$T/r/metrics.jsonl" "$cp" "$mode" "$U" <<'PY' >>"$OUT/traffic.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
cp, mode, U = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
L, S, nh, nkv, hd = 2, 4096, 8, 2, 32
R, t = cp // U, S // cp
kv_w = max(nkv // U, 1) * hd
hop = ((3 * R - 2) * 2 * U * t * kv_w * 4) if R > 1 else 0
a2a = ((U - 1) * t * 4 * (4 * nh * hd // U + 4 * kv_w + nh // U)) if U > 1 else 0
r = rows[-1]
assert r["sent_hop_bytes"] == L * hop and r["sent_a2a_bytes"] == L * a2a, (r, L * hop, L * a2a)
ms = statistics.median(x["step_ms"] for x in rows)
print(f"| {cp} | {mode}{f' (U {U})' if mode == 'a2a+ring' else ''} | {r['sent_hop_bytes'] / L / 1024:.0f} | "
      f"{r['sent_hop_msgs'] / L:.0f} | {r['sent_a2a_bytes'] / L / 1024:.0f} | {r['sent_a2a_msgs'] / L:.0f} | "
      f"{(r['sent_hop_bytes'] + r['sent_a2a_bytes']) / 1024:.0f} ({L * (hop + a2a) / 1024:.0f}) | {ms:.0f} |")
PY
done

fi

# ---- 2. activation memory with and without tp_sp ----
if [[ " $SECTIONS " == *" 2 "* ]]; then
BASE=(--vocab_size 257 --n_head 8 --n_kv_head 2 --batch_size 2 --micro_batch 1 --max_steps 1 --warmup_steps 1
      --log_every 1000 --save_final 0 --train_data "$T/data")
mem() {   # name np dp args... -> "plan_acts_MiB plan_total_MiB rss_MiB"
  local name=$1 np=$2 dp=$3; shift 3
  local launch=(); [ "$np" -gt 1 ] && launch=("${MPI[@]}" -np "$np")
  "${launch[@]}" build/train "${BASE[@]}" --out_dir "$T/$name" "$@" >"$T/$name.out" 2>&1 \
    || { echo "bench_cp: $name ($*) failed: $(tail -n 3 "$T/$name.out")" >&2; exit 1; }
  local rss
  rss=$(sed -nE 's/.*peak RSS ([0-9.]+) MiB.*/\1/p' "$T/$name.out")
  build/plan "${BASE[@]}" --device cpu --dp "$dp" --json "$@" |
    $PY -c "import json,sys; p=json.load(sys.stdin); M=1048576; print((p['acts_kept']+p['acts_work']+p['acts_scratch'])/M, p['total']/M, $rss)"
}
read -r _ p0 r0 <<<"$(mem tiny 1 1 --d_model 64 --n_layer 1 --d_ff 128 --seq_len 128 --max_seq_len 128)"
over=$($PY -c "print(f'{$r0 - $p0:.1f}')")
{
  echo
  echo "### Activation memory per rank with and without sequence parallelism"
  echo
  echo "Model d_model 512, 4 layers, 8 / 2 heads, d_ff 1408, seq_len 8192, micro_batch 1; planned total + $over MiB fixed overhead (a tiny model's peak RSS minus its plan) against the measured peak RSS (max over ranks)."
  echo
  echo "| layout | tp_sp | activations planned MiB | total planned + overhead MiB | measured peak RSS MiB | error |"
  echo "|---|---:|---:|---:|---:|---:|"
} >"$OUT/memory.md"
i=0
for lay in "2 1 --tp,2" "4 1 --tp,4,--n_kv_head,4" "4 1 --tp,2,--cp,2,--cp_comm,a2a"; do
  read -r np dp l <<<"$lay"
  i=$((i + 1))
  for sp in 0 1; do
    # shellcheck disable=SC2206
    a=(--d_model 512 --n_layer 4 --d_ff 1408 --seq_len 8192 --max_seq_len 8192 ${l//,/ } --tp_sp "$sp")
    read -r pa pt r <<<"$(mem "m${i}_$sp" "$np" "$dp" "${a[@]}")"
    [ -n "$r" ] || exit 1
    $PY -c "o=$over; print(f'| ${l//,/ } | $sp | {$pa:.0f} | {$pt+o:.0f} | {$r:.0f} | {100*($pt+o-$r)/$r:+.1f} % |')" >>"$OUT/memory.md"
  done
done

fi

# ---- 3. the 8 x H200 plan ----
if [[ " $SECTIONS " == *" 3 "* ]]; then
{
  echo
  echo "### 8 x H200: GiB per rank at 128K without recomputation, and the longest seq_len per recompute mode"
  echo
  echo "| config | layout | GiB at 128K (none) | longest none | mlp | qkv | full |"
  echo "|---|---|---:|---:|---:|---:|---:|"
} >"$OUT/plan.md"
for cfg in 1b 125m; do
  for lay in "--tp,8" "--tp,8,--tp_sp,1" "--tp,2,--cp,4" "--tp,2,--cp,4,--tp_sp,1" "--tp,2,--cp,4,--cp_comm,a2a" \
             "--tp,2,--cp,4,--cp_comm,a2a+ring,--cp_a2a,2,--tp_sp,1" "--cp,8" "--cp,8,--cp_comm,a2a" \
             "--cp,8,--cp_comm,a2a+ring,--cp_a2a,4"; do
    # shellcheck disable=SC2206
    a=(${lay//,/ })
    if ! build/plan -c "configs/llama_${cfg}_128k.conf" --dp 1 --micro_batch 1 --zero 1 --batch_size 8 "${a[@]}" --json \
         >"$T/p.json" 2>&1; then
      echo "| $cfg | ${lay//,/ } | — ($(cat "$T/p.json")) |||||" >>"$OUT/plan.md"; continue
    fi
    $PY - "$cfg" "${lay//,/ }" "$T/p.json" >>"$OUT/plan.md" <<'PY'
import json, sys
p = json.load(open(sys.argv[3])); l = p["longest"]
f = lambda n: f"{n / 1048576:.2f}M" if n >= 1048576 else f"{n // 1024}K"
print(f"| {sys.argv[1]} | {sys.argv[2]} | {p['total'] / 2**30:.1f} | {f(l['none'])} | {f(l['mlp'])} | {f(l['qkv'])} | {f(l['full'])} |")
PY
  done
done
fi
cat "$OUT/traffic.md" "$OUT/memory.md" "$OUT/plan.md" >"$OUT/results.md"
echo "(measured $(date -u +%Y-%m-%d), $(nproc --all) cores)" >>"$OUT/results.md"
cat "$OUT/results.md"
