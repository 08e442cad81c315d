#!/usr/bin/env bash
# bench_bf16.sh — does bf16 train as well as fp32 here? A small model (2 x 128, seq_len 128, 8 sequences a step)
# trained 300 steps on this repository's sources on the same data and seed: the CPU backend (fp32),
# (and once more on the CPU with another seed, for the scale of run-to-run differences),
# the CUDA backend in fp32 and in bf16 — bf16 weights and activations (act_dtype = bf16, the default: bf16 matmul
# operands, bf16 tensor-core attention; residual stream, statistics and gradient accumulation fp32) —, in bf16 with
# fp32 activations (act_dtype = fp32: fp32 operands converted inside cuBLAS, the mode before bf16 activations), and in
# bf16 with the residual stream rounded to bf16 as well (RINGLM_EXP_RESIDUAL_BF16: the measurement that decides whether
# the residual stream stays fp32) — the CUDA backend's real sources, run by the host emulation (build/emu/train: make
# cuda-emu). Writes OUT/results.md (loss every 25 steps, validation loss every 50, final numbers side by side) and
# OUT/loss.svg. About 50 minutes on 2 cores (the emulated runs dominate; they run two at a time).
#   bash tools/bench/bench_bf16.sh [OUT]          (default out/bench_bf16)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-out/bench_bf16}
STEPS=${STEPS:-300}
make -s all cuda-emu
mkdir -p "$OUT/bin/emu"
cp build/train "$OUT/bin/train"; cp build/emu/train "$OUT/bin/emu/train"   # a rebuild meanwhile does not disturb the runs
export OMP_NUM_THREADS=1
[ -e "$OUT/data/train_000000.bin" ] || build/prepare --out "$OUT/data" --val-frac 0.1 --seed 3 \
  model attention data train tests tools backend comm checkpoint eval optim >/dev/null
ARGS=(--vocab_size 257 --d_model 128 --n_layer 2 --n_head 4 --n_kv_head 2 --d_ff 352 --max_seq_len 128 --seq_len 128
      --batch_size 8 --micro_batch 4 --max_steps "$STEPS" --lr 3e-3 --min_lr 3e-4 --warmup_steps 20 --seed 11
      --log_every 1 --val_every 50 --val_batches 8 --ckpt_every 0 --save_final 0
      --train_data "$OUT/data/train_*.bin" --val_data "$OUT/data/val_*.bin")
run() {   # NAME BIN PRECISION [ARGS...]: skipped when OUT/NAME holds a finished run with the same arguments (and environment)
  local name=$1 bin=$2 prec=$3; shift 3
  local want; want=$(printf '%s ' "${ARGS[@]}" --matmul_precision "$prec" "$@"; echo "$(basename "$bin") $(dirname "$bin" | xargs basename) ${RINGLM_EXP_RESIDUAL_BF16:-}")
  if [ -f "$OUT/$name.args" ] && [ "$(cat "$OUT/$name.args")" = "$want" ] && [ -f "$OUT/$name/metrics.jsonl" ] &&
     [ "$(wc -l <"$OUT/$name/metrics.jsonl")" -eq "$STEPS" ]; then echo "bench_bf16: $name done before, kept"; return 0; fi
  rm -rf "${OUT:?}/$name" "$OUT/$name.args"
  /usr/bin/time -f "%e s" "$bin" "${ARGS[@]}" --matmul_precision "$prec" "$@" --out_dir "$OUT/$name" >"$OUT/$name.log" \
    2>"$OUT/$name.time" || { echo "bench_bf16: $name failed: $(tail -n 3 "$OUT/$name.log" "$OUT/$name.time")" >&2; exit 1; }
  echo "$want" >"$OUT/$name.args"
}
T0=$(date +%s)
run cpu_fp32 "$OUT/bin/train" fp32
run cpu_fp32_seed "$OUT/bin/train" fp32 --seed 12   # the scale of run-to-run differences: another seed
run emu_fp32 "$OUT/bin/emu/train" fp32 & p1=$!
run emu_bf16 "$OUT/bin/emu/train" bf16 --act_dtype bf16 & p2=$!
wait $p1 && wait $p2
run emu_bf16_a32 "$OUT/bin/emu/train" bf16 --act_dtype fp32 & p1=$!
RINGLM_EXP_RESIDUAL_BF16=1 run emu_bf16_res "$OUT/bin/emu/train" bf16 --act_dtype bf16 & p2=$!
wait $p1 && wait $p2
/usr/bin/python3 - "$OUT" "$STEPS" "$(( $(date +%s) - T0 ))" <<'PY'
import json, sys
out, steps, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
runs = ["cpu_fp32", "emu_fp32", "emu_bf16_a32", "emu_bf16", "emu_bf16_res"]
names = {"cpu_fp32": "CPU backend, fp32", "emu_fp32": "CUDA backend (emulated), fp32",
         "emu_bf16_a32": "CUDA, bf16 matmuls, fp32 activations", "emu_bf16": "CUDA, bf16 weights + activations",
         "emu_bf16_res": "CUDA, bf16 + residual stream bf16 (experiment)"}
m = {r: [json.loads(l) for l in open(f"{out}/{r}/metrics.jsonl")] for r in runs}
for r in runs: assert len(m[r]) == steps, (r, len(m[r]))
loss = {r: [x["loss"] for x in m[r]] for r in runs}
val = {r: {x["step"]: x["val_loss"] for x in m[r] if "val_loss" in x} for r in runs}
def avg(r, s): # mean training loss of the 5 steps ending at step s
    return sum(loss[r][s - 5:s]) / 5
L = []
L.append(f"Training loss (mean of the 5 steps ending at the step), {steps} steps, same data and seed:\n")
L.append("| step | " + " | ".join(names[r] for r in runs) + " | bf16 − fp32 (CPU) |")
L.append("|---:|" + "---:|" * len(runs) + "---:|")
for s in [5] + list(range(25, steps + 1, 25)):
    L.append(f"| {s} | " + " | ".join(f"{avg(r, s):.4f}" for r in runs) + f" | {avg('emu_bf16', s) - avg('cpu_fp32', s):+.4f} |")
L.append("\nValidation loss (8 batches of 8 x 128 tokens):\n")
L.append("| step | " + " | ".join(names[r] for r in runs) + " | bf16 − fp32 (CPU) |")
L.append("|---:|" + "---:|" * len(runs) + "---:|")
for s in sorted(val["cpu_fp32"]):
    L.append(f"| {s} | " + " | ".join(f"{val[r][s]:.4f}" for r in runs) + f" | {val['emu_bf16'][s] - val['cpu_fp32'][s]:+.4f} |")
fs = max(val["cpu_fp32"])
d32 = max(abs(a - b) / a for a, b in zip(loss["cpu_fp32"], loss["emu_fp32"]))
sd = [json.loads(l) for l in open(f"{out}/cpu_fp32_seed/metrics.jsonl")]
vs = {x["step"]: x["val_loss"] for x in sd if "val_loss" in x}
ls = [x["loss"] for x in sd]
def rel(r): return f"{val[r][fs]:.4f} ({100 * (val[r][fs] / val['cpu_fp32'][fs] - 1):+.2f} %)"
L.append(f"\nFinal validation loss: fp32 (CPU) {val['cpu_fp32'][fs]:.4f}, fp32 (emulated CUDA) {val['emu_fp32'][fs]:.4f}, "
         f"bf16 matmuls with fp32 activations {rel('emu_bf16_a32')}, bf16 weights and activations {rel('emu_bf16')}, "
         f"and with the residual stream in bf16 too {rel('emu_bf16_res')}. "
         f"Largest per-step training-loss difference, emulated fp32 vs CPU: {d32:.1e} (relative). For scale, the same "
         f"fp32 run with another seed (other initial weights and data order): final validation loss {vs[fs]:.4f} "
         f"({100 * (vs[fs] / val['cpu_fp32'][fs] - 1):+.2f} %), training loss at step {steps} {sum(ls[-5:]) / 5:.4f} "
         f"({sum(ls[-5:]) / 5 - avg('cpu_fp32', steps):+.4f}). Wall time {secs / 60:.0f} min.")
open(f"{out}/results.md", "w").write("\n".join(L) + "\n")
print("\n".join(L))
# the loss curves (moving mean of 5 steps)
W, H, ml, mr, mt, mb = 720, 360, 60, 20, 30, 45
smooth = {r: [sum(loss[r][max(0, i - 4):i + 1]) / len(loss[r][max(0, i - 4):i + 1]) for i in range(steps)] for r in runs}
lo = min(min(v) for v in smooth.values()); hi = max(max(v) for v in smooth.values())
X = lambda i: ml + (W - ml - mr) * i / (steps - 1)
Y = lambda v: mt + (H - mt - mb) * (hi - v) / (hi - lo)
col = {"cpu_fp32": "#1f77b4", "emu_fp32": "#2ca02c", "emu_bf16_a32": "#ff7f0e", "emu_bf16": "#d62728", "emu_bf16_res": "#9467bd"}
dash = {"cpu_fp32": "", "emu_fp32": ' stroke-dasharray="6 4"', "emu_bf16_a32": ' stroke-dasharray="2 3"', "emu_bf16": "",
        "emu_bf16_res": ' stroke-dasharray="8 3"'}
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W / 2}" y="18" text-anchor="middle">training loss (mean of 5 steps): fp32 vs bf16</text>']
for k in range(6):
    v = lo + (hi - lo) * k / 5
    svg.append(f'<line x1="{ml}" y1="{Y(v):.1f}" x2="{W - mr}" y2="{Y(v):.1f}" stroke="#ddd"/>'
               f'<text x="{ml - 6}" y="{Y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
for s in range(0, steps + 1, 50):
    svg.append(f'<text x="{X(max(s - 1, 0)):.1f}" y="{H - mb + 16}" text-anchor="middle">{s}</text>')
svg.append(f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle">step</text>')
for j, r in enumerate(runs):
    pts = " ".join(f"{X(i):.1f},{Y(v):.1f}" for i, v in enumerate(smooth[r]))
    svg.append(f'<polyline fill="none" stroke="{col[r]}" stroke-width="1.5"{dash[r]} points="{pts}"/>')
    svg.append(f'<line x1="{W - 330}" y1="{mt + 14 + 16 * j}" x2="{W - 305}" y2="{mt + 14 + 16 * j}" stroke="{col[r]}" '
               f'stroke-width="2"{dash[r]}/><text x="{W - 300}" y="{mt + 18 + 16 * j}">{names[r]}</text>')
svg.append("</svg>")
open(f"{out}/loss.svg", "w").write("\n".join(svg) + "\n")
PY
echo "bench_bf16: $OUT/results.md, $OUT/loss.svg"
