#!/usr/bin/env bash
# step_anatomy.sh — what one training step of the CUDA backend costs, counted per kernel class (the step anatomy,
# RINGLM_CUDA_ANATOMY: backend/cuda/anatomy.cu), for the 125M and 1B configs at 8K and 32K tokens on one GPU
# (micro_batch 1, recompute none), with the roofline's predicted step time and MFU on an H200.
#
# Here (no GPU) it runs the emulated CUDA backend's dry run (RINGLM_EMU_DRY=1: the real code path, every launch,
# copy and synchronisation counted, no kernel executed) with an H200's 141 GiB; on a GPU machine it runs the CUDA
# build unchanged (BIN=build/cuda/train) and the report's measured column fills where RINGLM_CUDA_PROFILE is set.
# Each config also runs with one layer, so that the difference gives the launches per layer and micro-batch and the
# activation bytes a layer keeps per token.
#   bash tools/bench/step_anatomy.sh [OUT]       (default out/step_anatomy; OUT/<config>.md per run, OUT/summary.md)
#   RUNS="1b:32768" EXTRA="--key value" BIN=... to vary; SUMMARY_ONLY=1 rewrites OUT/summary.md from the reports there
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-out/step_anatomy}
BIN=${BIN:-build/emu/train}
RUNS=${RUNS:-"125m:8192 125m:32768 1b:8192 1b:32768"}
EXTRA=${EXTRA:-}
mkdir -p "$OUT"
[ "$BIN" != build/emu/train ] || make -s cuda-emu
[ -e "$OUT/data/train_000000.bin" ] || build/prepare --out "$OUT/data" --val-frac 0 --seed 3 \
  model attention data train tests tools backend comm checkpoint eval optim >/dev/null
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
if [ "$BIN" = build/emu/train ]; then export RINGLM_EMU_DRY=1 RINGLM_EMU_MEMORY_MIB=144384; fi
one() {   # NAME CONFIG SEQ_LEN [ARGS...]
  local name=$1 conf=$2 seq=$3; shift 3
  # shellcheck disable=SC2086
  RINGLM_CUDA_ANATOMY="$OUT/$name.md" "$BIN" -c "configs/llama_${conf}_128k.conf" --seq_len "$seq" --batch_size 1 \
    --micro_batch 1 --max_steps 2 --log_every 1 --val_every 0 --ckpt_every 0 --save_final 0 --train_data "$OUT/data/train_*.bin" \
    --val_data '' --out_dir "$OUT/run_$name" --force $EXTRA "$@" >"$OUT/$name.log" 2>&1 \
    || { echo "step_anatomy: $name failed: $(tail -n 3 "$OUT/$name.log")" >&2; exit 1; }
}
for r in $RUNS; do
  [ -z "${SUMMARY_ONLY:-}" ] || break
  conf=${r%%:*}; seq=${r##*:}; name="${conf}_$((seq / 1024))k"
  echo "step_anatomy: $name"
  one "$name" "$conf" "$seq"
  one "${name}_L1" "$conf" "$seq" --n_layer 1
done
/usr/bin/python3 - "$OUT" "$RUNS" "$BIN" "$EXTRA" <<'PY' | tee "$OUT/summary.md"
import json, re, sys, datetime
out, runs, binary, extra = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
def mem(log):   # the trainer's "memory per rank" line: activations MiB
    m = re.search(r"activations ([0-9.]+) MiB", open(log).read())
    return float(m.group(1)) if m else float("nan")
def layers(conf): return int(re.search(r"^n_layer = (\d+)", open(f"configs/llama_{conf}_128k.conf").read(), re.M).group(1))
rows = []
for r in runs:
    conf, seq = r.split(":"); seq = int(seq); name = f"{conf}_{seq // 1024}k"
    a, b = (json.load(open(f"{out}/{n}.md.json")) for n in (name, name + "_L1"))
    L = layers(conf)
    per_layer = (a["launches"] - b["launches"]) / (L - 1)
    att = lambda j: sum(v["launches"] for k, v in j["classes"].items() if k.startswith("attention"))
    per_layer_att = (att(a) - att(b)) / (L - 1)
    act = (mem(f"{out}/{name}.log") - mem(f"{out}/{name}_L1.log")) / (L - 1) * 1048576 / seq
    attn = sum(v["predicted_s"] for k, v in a["classes"].items() if k.startswith("attention"))
    rows.append((name, a, (per_layer, per_layer - per_layer_att), act, attn))
print(f"Step anatomy ({datetime.date.today()}, `{binary}`{', ' + extra if extra else ''}; one GPU, micro_batch 1, "
      "recompute none; the roofline of backend/cuda/anatomy.cu):\n")
print("| config | launches / step | per layer and micro-batch (outside attention's classes) | host syncs | H2D / D2H copies | cuBLAS operand conversion GiB "
      "| activation KiB / token / layer | peak GiB | predicted ms (outside attention) | predicted MFU |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for name, a, pl, act, attn in rows:
    print(f"| {name} | {a['launches']} | {pl[0]:.0f} ({pl[1]:.0f}) | {a['syncs']} | {a['h2d_copies']} / {a['d2h_copies']} | "
          f"{a['conv_bytes'] / 2**30:.1f} | {act / 1024:.1f} | {a['peak_bytes'] / 2**30:.1f} | "
          f"{a['predicted_s'] * 1e3:.1f} ({(a['predicted_s'] - attn) * 1e3:.1f}) | {100 * a['mfu']:.1f} % |")
PY
