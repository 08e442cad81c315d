#!/usr/bin/env bash
# The capacity planner: build/plan's per-rank memory equals what build/train allocates (the same plan) for
# every recompute mode, for tp 2 x cp 2 with ZeRO-1, the all-to-all, all-to-all x ring and sequence parallelism; its longest seq_len is the last that fits; a layout
# that cannot fit stops build/train on every rank with one line naming needed vs available, before
# allocating; bad planner input gives one line.
cd "$(dirname "$0")/.."
source tests/lib.sh

build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
cat > "$T/p.conf" <<CONF
vocab_size = 259
d_model = 64
n_layer = 3
n_head = 4
n_kv_head = 2
d_ff = 168
max_seq_len = 256
seq_len = 96
batch_size = 4
micro_batch = 2
max_steps = 1
save_final = 0
train_data = $T/data
CONF
CONF=$T/p.conf; STEPS=1
# plan_vs_train NAME NP DP ARGS...: the trainer's printed memory line equals the plan's numbers
plan_vs_train() {
  local name=$1 np=$2 dp=$3; shift 3
  train_run "$name" "$np" "$@" || return
  build/plan -c "$CONF" --device cpu --dp "$dp" --json "$@" >"$T/$name.plan" 2>&1 || { bad "$name: plan: $(cat "$T/$name.plan")"; return; }
  $PY - "$T/$name.plan" "$T/$name.out" <<'PY' >"$T/$name.cmp" && ok "$name: plan = allocation ($(cat "$T/$name.cmp"))" || bad "$name: $(cat "$T/$name.cmp")"
import json, re, sys
p = json.load(open(sys.argv[1])); M = 1 / 1048576
want = "params %.2f MiB, grads %.2f MiB, AdamW moments %.2f MiB, activations %.1f MiB, ring buffers %.1f MiB" % (
    p["params"] * M, p["grads"] * M, p["moments"] * M, (p["acts_kept"] + p["acts_work"] + p["acts_scratch"]) * M, p["ring"] * M)
line = [l for l in open(sys.argv[2]) if l.startswith("memory per rank:")]
got = line[0].split("memory per rank: ")[1].split(", peak RSS")[0] if line else "(no memory line)"
print(got)
sys.exit(0 if got == want else 1)
PY
}
for rc in none mlp qkv full; do plan_vs_train "p1_$rc" 1 1 --recompute "$rc"; done
plan_vs_train tp2cp2_zero 4 1 --tp 2 --cp 2 --zero 1 --recompute qkv
plan_vs_train cp2dp2_zero 4 2 --cp 2 --zero 1
plan_vs_train cp2dp2_zero2 4 2 --cp 2 --zero 2 --recompute mlp
plan_vs_train tp2cp2_zero3 4 1 --tp 2 --cp 2 --zero 3 --recompute full
plan_vs_train dp2_zero3_tied 2 2 --zero 3 --tie_embeddings 1
# the all-to-all (KV heads replicated: 2 KV heads for 4 ranks) and its product with the ring; sequence parallelism
plan_vs_train a2a_cp4 4 1 --cp 4 --cp_comm a2a
plan_vs_train a2aring_full 4 1 --cp 4 --cp_comm a2a+ring --cp_a2a 2 --recompute full
plan_vs_train tp2_sp 2 1 --tp 2 --tp_sp 1
plan_vs_train tile_none 1 1 --mlp_tile 70
plan_vs_train tile_tp2_sp_full 2 1 --tp 2 --tp_sp 1 --mlp_tile 50 --recompute full
plan_vs_train tp2cp2_a2a_sp_mlp 4 1 --tp 2 --cp 2 --cp_comm a2a --tp_sp 1 --recompute mlp

# the longest seq_len: it fits, one chunking unit more does not (8 GiB device, 1B-like model)
L=$(build/plan -c configs/llama_1b_128k.conf --device h200 --memory_gib 24 --cp 2 --batch_size 2 --micro_batch 1 --dp 1 --json --recompute full |
    $PY -c 'import json,sys; print(json.load(sys.stdin)["longest"]["full"])')
fits() { build/plan -c configs/llama_1b_128k.conf --device h200 --memory_gib 24 --cp 2 --batch_size 2 --micro_batch 1 --dp 1 \
         --recompute full --seq_len "$1" | grep -q " fits ("; }
if [ -n "$L" ] && [ "$L" -gt 0 ] && fits "$L" && ! fits $((L + 512)); then ok "longest seq_len with recompute full on 24 GiB: $L fits, $((L + 512)) does not"
else bad "longest seq_len '$L'"; fi
# more recomputation, longer sequences
build/plan -c configs/llama_1b_128k.conf --cp 8 --batch_size 8 --micro_batch 1 --seq_len 131072 --json >"$T/long.json"
$PY - "$T/long.json" <<'PY' && ok "longest none < mlp < qkv < full: $(cat "$T/long.txt")" || bad "longest: $(cat "$T/long.json")"
import json, sys
l = json.load(open(sys.argv[1]))["longest"]
open(sys.argv[1].replace(".json", ".txt"), "w").write(str(l))
sys.exit(0 if 0 < l["none"] < l["mlp"] < l["qkv"] < l["full"] else 1)
PY

# a layout that cannot fit: one line on every rank, before the arenas are allocated (no time spent)
BIG=(--d_model 4096 --n_head 32 --n_kv_head 8 --d_ff 11008 --n_layer 40)
expect_train_err "$CONF" "too large for this machine (1 rank)" "needs|GiB per rank|are available (1 ranks on this node)" 1 "${BIG[@]}"
expect_train_err "$CONF" "too large for this machine (2 ranks, cp 2)" "needs|are available (2 ranks on this node)|recompute = full" 2 "${BIG[@]}" --cp 2
# bad planner input
plan_err() { ERR_RC=1 expect_err "$1" "$2" 1 build/plan -c "$CONF" "${@:3}"; }
plan_err "plan: unknown recompute mode" "recompute = 'half' must be none, mlp, qkv or full" --recompute half
plan_err "plan: unknown device" "--device 'tpu' must be h200 or cpu" --device tpu
plan_err "plan: bad memory" "--memory_gib '-3' must be a positive number" --memory_gib -3
plan_err "plan: layout does not divide" "do not divide" --dp 3
finish
