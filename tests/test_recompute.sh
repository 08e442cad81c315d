#!/usr/bin/env bash
# Activation recomputation: every mode (mlp, qkv, full) gives bit-identical per-step losses, first-step
# gradients and final weights to `none` (the same arithmetic in the same order), at one process and at
# tp 2 x cp 2; full recomputation rotates K/V around the ring once more per layer (counted in the ring
# statistics); the activation memory falls mode by mode as planned; an unknown mode gives one line.
cd "$(dirname "$0")/.."
source tests/lib.sh

build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
cat > "$T/rc.conf" <<CONF
vocab_size = 259
d_model = 48
n_layer = 3
n_head = 4
n_kv_head = 2
d_ff = 136
max_seq_len = 128
seq_len = 72
batch_size = 4
micro_batch = 2
max_steps = 3
lr = 3e-3
warmup_steps = 1
save_final = 0
train_data = $T/data
CONF
CONF=$T/rc.conf; STEPS=3
for layout in "1" "4 --tp 2 --cp 2"; do
  np=${layout%% *}; args=${layout#"$np"}; tag=p$np
  for rc in none mlp qkv full; do
    # shellcheck disable=SC2086
    train_run "${tag}_$rc" "$np" --recompute $rc $args || continue
  done
  for rc in mlp qkv full; do
    [ -s "$T/${tag}_$rc.dump" ] || continue
    if [ "$(grep -o '"loss": [0-9.e+-]*' "$T/${tag}_none/metrics.jsonl")" = "$(grep -o '"loss": [0-9.e+-]*' "$T/${tag}_$rc/metrics.jsonl")" ]
    then ok "np $np: recompute $rc losses bit-identical to none ($(grep -o '"loss": [0-9.]*' "$T/${tag}_$rc/metrics.jsonl" | tail -n 1))"
    else bad "np $np: recompute $rc losses differ"; fi
    cmp -s "$T/${tag}_none.dump" "$T/${tag}_$rc.dump" && ok "np $np: recompute $rc final weights (and last gradients) bit-identical" \
      || bad "np $np: recompute $rc weights differ"
  done
done
# one ring hop per layer more in the forward of full recomputation: (P - 1) per sequence per layer
t_none=$(grep -o '"cp_transfers": [0-9]*' "$T/p4_none/metrics.jsonl" | head -n 1 | awk '{print $2}')
t_full=$(grep -o '"cp_transfers": [0-9]*' "$T/p4_full/metrics.jsonl" | head -n 1 | awk '{print $2}')
# per step: 2 micro-batches x 2 sequences x 3 layers; hops waited for with P = 2: forward P - 1 = 1, backward
# P = 2 (K/V, then dK/dV home); full recomputation adds a forward's P - 1 = 1
[ "$t_none" = $((2 * 2 * 3 * 3)) ] && [ "$t_full" = $((2 * 2 * 3 * 4)) ] \
  && ok "ring transfers per step: none $t_none, full $t_full (one more forward rotation per layer)" \
  || bad "ring transfers: none '$t_none' (want 36), full '$t_full' (want 48)"
# activation memory falls mode by mode (the printed per-rank activations)
acts() { sed -nE 's/.*activations ([0-9.]+) MiB.*/\1/p' "$T/p1_$1.out"; }
$PY - "$(acts none)" "$(acts mlp)" "$(acts qkv)" "$(acts full)" <<'PY' && ok "activations none > mlp > qkv > full: $(acts none) $(acts mlp) $(acts qkv) $(acts full) MiB" || bad "activation memory not decreasing: $(acts none) $(acts mlp) $(acts qkv) $(acts full)"
import sys
v = [float(x) for x in sys.argv[1:]]
sys.exit(0 if len(v) == 4 and v[0] > v[1] > v[2] > v[3] > 0 else 1)
PY
expect_train_err "$CONF" "unknown recompute mode" "recompute = 'some' must be none, mlp, qkv or full" 2 --recompute some
finish
