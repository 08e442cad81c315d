#!/usr/bin/env bash
# Activation offload (offload = ckpt) on the emulated CUDA backend, whose race checker sees every access of the copy
# stream against the compute stream (a copy not ordered by an event stops the run naming both):
#   per-step losses and final weights and gradients bit for bit equal to the same run without offload (fp32): one
#   rank with recompute qkv (5 layers: 3 offloaded), cp 2 by ring on NCCL with recompute full, two micro-batches per
#   step and verify_attention every step (layer 0's inputs brought back after the backward); and with bf16 weights and
#   activations (one rank, recompute qkv: a slot of fp32 and bf16 tensors, its bytes in their dtypes);
#   ZeRO-3 with offload and a tiled MLP on dp 2 (NCCL: compute, communication and copy streams together) within 1e-5
#   of one rank without them;
#   bad combinations, one line each: offload on the CPU backend (2 ranks), with recompute none or mlp, and more pinned
#   host memory than the node has (RINGLM_TEST_HOST_AVAILABLE_MIB, a test hook, stands for the node's MemAvailable).
cd "$(dirname "$0")/.."
source tests/lib.sh
E=build/emu
[ -x $E/train ] || { bad "no $E/train: run make cuda-emu"; finish; }
export RINGLM_EMU_TIMEOUT_S=600
build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
cat > "$T/o.conf" <<CONF
vocab_size = 257
d_model = 64
n_layer = 5
n_head = 4
n_kv_head = 2
d_ff = 160
max_seq_len = 128
seq_len = 64
batch_size = 4
micro_batch = 2
max_steps = 3
lr = 3e-3
warmup_steps = 1
adam_eps = 1e-6
save_final = 0
matmul_precision = fp32
train_data = $T/data
CONF
CONF=$T/o.conf; STEPS=3
erun() {   # NAME NP ARGS...: the emulated trainer (train_run's outputs)
  local name=$1 np=$2; shift 2
  timeout $HANG_S $(launch "$np") $E/train -c "$CONF" --out_dir "$T/$name" --dump_weights "$T/$name.dump" "$@" </dev/null \
    >"$T/$name.out" 2>"$T/$name.err" || { bad "$name: exit $?: $(grep -v ' = ' "$T/$name.err" | head -c 400)"; return 1; }
}
same_bits() {   # DESCRIPTION A B: losses (as printed to 9 digits) and the dumps identical
  if [ "$(grep -o '"loss": [0-9.e+-]*' "$T/$2/metrics.jsonl")" = "$(grep -o '"loss": [0-9.e+-]*' "$T/$3/metrics.jsonl")" ] &&
     cmp -s "$T/$2.dump" "$T/$3.dump"; then
    ok "$1: losses, final weights and gradients bit-identical ($(grep -o '"loss": [0-9.]*' "$T/$3/metrics.jsonl" | tail -n 1); $(grep -o 'pinned host [0-9.]* MiB' "$T/$3.out"))"
  else bad "$1: differ: $(grep -o '"loss": [0-9.e+-]*' "$T/$2/metrics.jsonl" "$T/$3/metrics.jsonl" | tr '\n' ' ')"; fi
}
erun q_none 1 --recompute qkv && erun q_ckpt 1 --recompute qkv --offload ckpt && same_bits "1 rank, recompute qkv" q_none q_ckpt
erun b_none 1 --recompute qkv --matmul_precision bf16 && erun b_ckpt 1 --recompute qkv --matmul_precision bf16 --offload ckpt &&
  same_bits "1 rank, recompute qkv, bf16 weights and activations" b_none b_ckpt
V=(--cp 2 --recompute full --verify_attention 1)
erun r_none 2 "${V[@]}" && erun r_ckpt 2 "${V[@]}" --offload ckpt && same_bits "cp 2 (ring, NCCL), recompute full" r_none r_ckpt
$PY - "$T/r_ckpt/metrics.jsonl" <<'PY' >"$T/v" && ok "verify_attention with offload: $(cat "$T/v")" || bad "verify_attention: $(cat "$T/v")"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
w = max(x["verify_max_abs"] for x in r)
print(f"ring attention of layer 0 (its inputs back from host memory) against one process: max abs {w:.1e} over {len(r)} steps")
sys.exit(0 if len(r) == 3 and w < 1e-5 else 1)
PY
erun z_one 1 && erun z_ckpt 2 --zero 3 --recompute full --offload ckpt --mlp_tile 40 &&
  if same_losses z_one z_ckpt 1e-5 >"$T/c"; then ok "ZeRO-3 + offload + tiled MLP on dp 2 (NCCL) vs 1 rank: $(tail -n 1 "$T/c" | sed 's/^ *//')"
  else bad "ZeRO-3 + offload: $(cat "$T/c")"; fi

# ---- bad combinations ----
expect_err "offload on the CPU backend (2 ranks)" "offload = ckpt moves saved activations from device to host memory, and the cpu backend" \
  2 build/train -c "$CONF" --out_dir "$T/bad1" --recompute full --offload ckpt
for rc in none mlp; do
  expect_err "offload with recompute $rc" "offload = ckpt moves the layers' saved inputs to host memory, and recompute = $rc saves more" \
    1 $E/train -c "$CONF" --out_dir "$T/bad2" --recompute $rc --offload ckpt
done
ERR_SKIP=' = |^data: ' RINGLM_TEST_HOST_AVAILABLE_MIB=0.2 expect_err "too little host memory (2 ranks on a node with 0.2 MiB)" \
  "offload = ckpt keeps|GiB of saved activations per rank in pinned host memory|for the 2 ranks of this node, but the node has" \
  2 $E/train -c "$CONF" --out_dir "$T/bad3" --cp 2 --recompute qkv --offload ckpt
finish
