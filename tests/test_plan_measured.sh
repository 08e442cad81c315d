#!/usr/bin/env bash
# The planner against measured memory for the options of docs/long_sequences.md, at small scale (one step each):
#   CPU backend: the planned per-rank total plus a fixed overhead (MPI, OpenBLAS, HDF5, code: a tiny model's peak RSS
#   minus its plan, measured here) within 10 % of the peak RSS (max over ranks) — a tiled MLP (1 rank), ZeRO-2
#   (dp 2, recompute mlp), ZeRO-3 (dp 2, recompute full, tiled);
#   emulated CUDA backend with offload = ckpt (recompute qkv and full): the planned device total within 10 % of what
#   the backend held at its peak (be_alloc and scratch) plus the cuBLAS workspace, and the planned pinned host memory
#   equal to what the backend pinned, to the byte (RINGLM_CUDA_MEMORY's line); offload lowers what the backend holds
#   by what the plan says.
# Memory, not time: no verdict depends on the machine's speed.
cd "$(dirname "$0")/.."
source tests/lib.sh
build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
BASE=(--vocab_size 257 --n_head 8 --n_kv_head 2 --batch_size 2 --micro_batch 1 --max_steps 1 --warmup_steps 1
      --log_every 1000 --save_final 0 --train_data "$T/data")
planned() {   # BIN_DEVICE DP ARGS...: the plan's JSON
  local dev=$1 dp=$2; shift 2
  build/plan "${BASE[@]}" --device "$dev" --dp "$dp" --json "$@"
}
rss_run() {   # NAME NP DP ARGS...: "planned_MiB measured_MiB" of the CPU trainer
  local name=$1 np=$2 dp=$3; shift 3
  timeout $HANG_S $(launch "$np") build/train "${BASE[@]}" --out_dir "$T/$name" "$@" </dev/null >"$T/$name.out" 2>&1 \
    || { bad "$name: $(tail -2 "$T/$name.out")"; return 1; }
  planned cpu "$dp" "$@" >"$T/$name.plan" || { bad "$name: plan: $(cat "$T/$name.plan")"; return 1; }
  echo "$($PY -c "import json; print(json.load(open('$T/$name.plan'))['total'] / 2**20)") $(sed -nE 's/.*peak RSS ([0-9.]+) MiB.*/\1/p' "$T/$name.out")"
}
read -r p0 r0 <<<"$(rss_run tiny 1 1 --d_model 64 --n_layer 1 --d_ff 128 --seq_len 128 --max_seq_len 128)"
over=$($PY -c "print(f'{$r0 - $p0:.1f}')")
echo "     fixed overhead $over MiB (a tiny model's peak RSS $r0 MiB minus its plan $p0 MiB)"
M=(--d_model 256 --n_layer 4 --d_ff 704 --seq_len 2048 --max_seq_len 2048)
while read -r name np dp args; do
  # shellcheck disable=SC2086
  read -r p r <<<"$(rss_run "$name" "$np" "$dp" "${M[@]}" $args)" || continue
  $PY -c "import sys; p, r, o = $p, $r, $over; e = (p + o - r) / r; print(f'{p:.1f} MiB planned + {o} = {p + o:.1f} against {r:.1f} MiB peak RSS: {100 * e:+.1f} %'); sys.exit(0 if abs(e) <= 0.10 else 1)" \
    >"$T/e" && ok "cpu, $name ($args): $(cat "$T/e")" || bad "cpu, $name: $(cat "$T/e")"
done <<'RUNS'
mlp_tile 1 1 --mlp_tile 512
zero2 2 2 --zero 2 --recompute mlp
zero3 2 2 --zero 3 --recompute full --mlp_tile 1024
RUNS

# ---- the emulated CUDA backend: device peak and pinned host memory with offload ----
E=build/emu
[ -x $E/train ] || { bad "no $E/train: run make cuda-emu"; finish; }
G=(--d_model 128 --n_layer 5 --d_ff 384 --n_head 4 --seq_len 512 --max_seq_len 512 --matmul_precision fp32)
for rc in qkv full; do
  for off in none ckpt; do
    name=emu_${rc}_$off
    RINGLM_CUDA_MEMORY=1 timeout $HANG_S $E/train "${BASE[@]}" "${G[@]}" --out_dir "$T/$name" --recompute $rc --offload $off \
      </dev/null >"$T/$name.out" 2>&1 || { bad "$name: $(tail -2 "$T/$name.out")"; continue; }
    planned h200 1 "${G[@]}" --recompute $rc --offload $off >"$T/$name.plan" || bad "$name plan: $(cat "$T/$name.plan")"
  done
  $PY - "$T/emu_${rc}_none" "$T/emu_${rc}_ckpt" <<'PY' >"$T/e" && ok "emulated cuda, recompute $rc: $(cat "$T/e")" || bad "emulated cuda, recompute $rc: $(cat "$T/e")"
import json, re, sys
out = []
held = {}
for f in sys.argv[1:]:
    p = json.load(open(f + ".plan")); t = open(f + ".out").read()
    m = re.search(r"peak held ([0-9.]+) MiB .*cuBLAS workspace ([0-9.]+) MiB", t)
    dev = float(m.group(1)) + float(m.group(2)); held[f] = float(m.group(1))
    e = (p["total"] / 2**20 - dev) / dev
    pinned = int(re.search(r"pinned host memory at most ([0-9]+) bytes", t).group(1))
    want = int(p["host"])
    out.append(f"offload {'ckpt' if f.endswith('ckpt') else 'none'}: device {p['total'] / 2**20:.1f} MiB planned against "
               f"{dev:.1f} held + workspace ({100 * e:+.1f} %), pinned {want} bytes planned = {pinned} pinned")
    assert abs(e) <= 0.10 and pinned == want, out[-1]
a, b = sys.argv[1:]
pa, pb = (json.load(open(f + ".plan")) for f in (a, b))
drop_plan, drop_held = (pa["total"] - pb["total"]) / 2**20, held[a] - held[b]
assert drop_plan > 0 and abs(drop_held - drop_plan) <= 0.11 + 0.02 * drop_plan, (drop_plan, drop_held)   # (held: 0.1 MiB steps)
print("; ".join(out) + f"; offload saves {drop_held:.2f} MiB of device memory (planned {drop_plan:.2f})")
PY
done
finish
