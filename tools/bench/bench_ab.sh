#!/usr/bin/env bash
# bench_ab.sh — training throughput of two commits side by side: the bench_train.sh model (d_model 256,
# 4 layers, 8 heads, 2 KV heads, d_ff 704) at seq_len 1024 and 4096, one process, ROUNDS alternating runs
# of each build (A then B, so drift on a shared machine hits both), median tokens/s of the steps after the
# first, and the ratio B/A; also the CPU seconds of each whole run (user + sys, median over rounds), which a
# busy shared machine disturbs far less than wall time (use OMP_NUM_THREADS=1 for that comparison).
#   bash tools/bench/bench_ab.sh REV_A [REV_B=working tree] [ROUNDS=3] [STEPS=5]
# REV_A is built in a temporary worktree; REV_B defaults to this checkout as it is.
# For peak numbers unset the OpenBLAS core override in this command only:
#   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 bash tools/bench/bench_ab.sh b43cff3
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: bash tools/bench/bench_ab.sh REV_A [REV_B] [ROUNDS] [STEPS]" >&2; exit 2; }
rev_a=$1; rev_b=${2:-}; rounds=${3:-3}; steps=${4:-5}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
T=$(mktemp -d); trap 'git worktree remove --force "$T/a" >/dev/null 2>&1 || true; git worktree remove --force "$T/b" >/dev/null 2>&1 || true; rm -rf "$T"' EXIT
build_at() {   # dir rev
  git worktree add --detach "$1" "$2" >/dev/null 2>&1 || { echo "bench_ab: cannot check out '$2'" >&2; exit 1; }
  make -C "$1" -s -j"$(nproc)" build/train build/prepare >/dev/null
}
build_at "$T/a" "$rev_a"; A=$T/a
if [ -n "$rev_b" ]; then build_at "$T/b" "$rev_b"; B=$T/b; else make -s build/train build/prepare; B=$PWD; fi
src=(model attention data train tests tools)
[ -d /usr/lib/python3.11/email ] && src+=(/usr/lib/python3.11/email)
"$B/build/prepare" --out "$T/data" --val-frac 0 --doc-per dir "${src[@]}" >/dev/null
echo "A = $rev_a ($(git rev-parse --short "$rev_a")), B = ${rev_b:-working tree}; threads $OMP_NUM_THREADS," \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; $rounds alternating rounds of $steps steps"
echo
echo "| seq_len | A tokens/s | B tokens/s | B / A | A CPU s | B CPU s | B / A (CPU) |"
echo "|--------:|-----------:|-----------:|------:|--------:|--------:|------------:|"
for L in 1024 4096; do
  for ((r = 0; r < rounds; r++)); do
    for side in A B; do
      dir=${!side}
      /usr/bin/time -f "%U %S" -o "$T/cpu_${side}_${L}_$r" "$dir/build/train" --train_data "$T/data/train_*.bin" --out_dir "$T/o_${side}_${L}_$r" --force \
        --vocab_size 257 --d_model 256 --n_layer 4 --n_head 8 --n_kv_head 2 --d_ff 704 \
        --max_seq_len "$L" --seq_len "$L" --batch_size 1 --micro_batch 1 --max_steps "$steps" --warmup_steps 1 \
        --lr 1e-3 --log_every 1000 >/dev/null
    done
  done
  /usr/bin/python3 - "$T" "$L" "$rounds" <<'PY'
import json, sys, glob, statistics as st
t, L, R = sys.argv[1], sys.argv[2], int(sys.argv[3])
def tps(side):
    v = []
    for r in range(R):
        v += [json.loads(l)["tokens_per_s"] for l in open(f"{t}/o_{side}_{L}_{r}/metrics.jsonl")][1:]
    return st.median(v)
def cpu(side):
    return st.median(sum(map(float, open(f"{t}/cpu_{side}_{L}_{r}").read().split()[-2:])) for r in range(R))
a, b = tps("A"), tps("B")
ca, cb = cpu("A"), cpu("B")
print(f"| {L} | {a:.0f} | {b:.0f} | {b / a:.3f} | {ca:.2f} | {cb:.2f} | {cb / ca:.3f} |")
PY
done
