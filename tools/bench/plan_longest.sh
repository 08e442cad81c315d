#!/usr/bin/env bash
# plan_longest.sh — the longest trainable sequence by the planner (build/plan --longest), as a markdown table: the 1B
# and the Llama-3-8B-shaped configs on 1 and 8 GPUs of 80 GB and of 141 GB, for recompute full with ZeRO-1 (the best
# before tiled MLP, ZeRO-2/3 and offload) and each option added to it.
#   bash tools/bench/plan_longest.sh
# Assumptions (build/plan's defaults unless given here): device memory 73 GiB (80 GB) and 130 GiB (141 GB) — the
# device's bytes less ~1 GiB of CUDA context; pinned host memory 224 GiB per GPU (a node of 8 GPUs with 2 TiB, less
# room for the OS); 8 GPUs: cp 8 (zigzag ring), one node; one sequence per micro-batch, 8 per step; MFU 0.4 of
# 989 TFLOP/s and PCIe 5 at 55 GB/s per direction for the offload verdict; fp32 weights, gradients and moments with a
# bf16 copy of the weights, and bf16 activations where the CUDA backend stores them (act_dtype = bf16).
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s build/plan
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
cat >"$T/row.py" <<'PY'
import json, sys
conf, n, gb = sys.argv[1:]
rows = {r["option"].split(" (")[0]: r for r in json.load(sys.stdin)["rows"]}
def t(name):
    r = rows.get(name)
    if r is None: return "n/a"
    L = r["longest"]
    return "none" if L == 0 else f"{L / 1e6:.2f}M" if L >= 1e6 else f"{round(L / 1024)}K"
v = ""
best = [k for k in rows if k.startswith("all: ")][0]
for name in (best, "full + offload ckpt"):
    r = rows.get(name)
    if r and r["longest"]:
        state = "exposed" if r["offload_exposed_s"] > 0 else "hidden"
        v = (f"{r['offload_xfer_s'] * 1e3:.0f} ms per layer vs {r['layer_fwd_s']:.2g} s forward: {state}, "
             f"{r['host'] / 2**30:.0f} GiB pinned")
        break
cols = ["recompute full", "full + mlp_tile", "full + zero 2", "full + zero 3", "full + offload ckpt"]
name = conf.replace("llama_", "").replace("_128k", "")
print(f"| {name} | {n} | {gb} | " + " | ".join(t(c) for c in cols) + f" | {t(best)} ({best[5:].replace('full + ', '')}) | {v} |")
PY
echo "| config | GPUs | GB | full, ZeRO-1 | + mlp_tile 8192 | + zero 2 | + zero 3 | + offload | all that apply | offload copies (at the longest) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
for conf in llama_1b_128k llama_8b; do
  for n in 1 8; do
    for gb in 80 141; do
      gib=$([ "$gb" = 80 ] && echo 73 || echo 130)
      build/plan -c "configs/$conf.conf" --cp "$n" --dp 1 --batch_size 8 --micro_batch 1 --memory_gib "$gib" --longest --json |
        /usr/bin/python3 "$T/row.py" "$conf" "$n" "$gb"
    done
  done
done
