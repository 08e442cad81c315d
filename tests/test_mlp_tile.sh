#!/usr/bin/env bash
# Tiled MLP (mlp_tile = ROWS): the MLP runs over tiles of a rank's rows (a tile of 40 that divides none of the row
# counts), g, u, h recomputed per tile in the backward. Per-step losses and the last step's gradients equal the untiled
# run of the same layout within 1e-6 and the final weights within 1e-5 (AdamW's normalisation magnifies the rounding of
# near-zero gradients: the weight gradients are sums over tiles, in another order), at one process (recompute none and full), tp 2, tp 2 with tp_sp x cp 2
# (ring), cp 2 by all-to-all; the activation memory falls; the LM head's logits never exist for all rows (the
# planned activations grow by far less than a vocabulary row per token); a tile larger than a rank's rows gives one
# line.
cd "$(dirname "$0")/.."
source tests/lib.sh

build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
cat > "$T/t.conf" <<CONF
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
adam_eps = 1e-6        # see test_cp.sh: keeps AdamW from amplifying fp32 rounding of near-zero gradients
save_final = 0
train_data = $T/data
CONF
CONF=$T/t.conf; STEPS=3
# tiled vs untiled in one layout: NAME NP ARGS...
pair() {
  local name=$1 np=$2; shift 2
  train_run "${name}_u" "$np" "$@" && train_run "${name}_t" "$np" --mlp_tile 40 "$@" || return
  same_losses "${name}_u" "${name}_t" 1e-6 >"$T/cmp" && $PY tests/compare_dumps.py "$T/${name}_t.dump" "$T/${name}_u.dump" --abs 1e-5 >>"$T/cmp" \
    && $PY tests/compare_dumps.py "$T/${name}_t.dump" "$T/${name}_u.dump" --abs 1e-6 --prefix grad/ >>"$T/cmp" \
    && ok "$name: tiled MLP equals untiled (losses 1e-6, last gradients 1e-6, weights 1e-5: $(tr '\n' ' ' <"$T/cmp" | tr -s ' '))" \
    || bad "$name: tiled differs: $(tr '\n' ' ' <"$T/cmp")"
}
pair p1 1
pair p1_full 1 --recompute full
pair tp2 2 --tp 2
pair tp2sp_cp2 4 --tp 2 --tp_sp 1 --cp 2
pair a2a_cp2 2 --cp 2 --cp_comm a2a --recompute qkv
acts() { sed -nE 's/.*activations ([0-9.]+) MiB.*/\1/p' "$T/$1.out"; }
$PY -c "import sys; sys.exit(0 if 0 < float('$(acts p1_t)') < float('$(acts p1_u)') else 1)" \
  && ok "tiling lowers the activations: $(acts p1_u) -> $(acts p1_t) MiB" || bad "activations untiled '$(acts p1_u)', tiled '$(acts p1_t)'"

# the LM head and cross-entropy run in row chunks, forward and backward: with a 32000-word vocabulary and d_model 48,
# a token more costs the plan (= the allocation, test_plan.sh) far less than its 128000-byte logits row
for s in 4096 8192; do
  build/plan -c "$CONF" --device cpu --json --vocab_size 32000 --max_seq_len 8192 --seq_len $s --batch_size 1 --micro_batch 1 \
    >"$T/lm$s.json" || bad "plan at $s: $(cat "$T/lm$s.json")"
done
$PY - "$T/lm4096.json" "$T/lm8192.json" <<'PY' >"$T/lm.txt" && ok "LM head chunked: $(cat "$T/lm.txt")" || bad "LM head: $(cat "$T/lm.txt")"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
per_tok = sum(b[k] - a[k] for k in ("acts_kept", "acts_work", "acts_scratch")) / 4096
print(f"{per_tok:.0f} activation bytes per token against a logits row of {32000 * 4}")
sys.exit(0 if 0 < per_tok < 32000 * 4 / 10 else 1)
PY

expect_train_err "$CONF" "tile larger than a rank's rows" "mlp_tile = 80 is larger than the 72 rows of a rank (micro_batch x seq_len / cp = 2 x 36)" \
  2 --cp 2 --mlp_tile 80
expect_train_err "$CONF" "negative tile" "mlp_tile = -1 must be >= 0" 1 --mlp_tile -1
finish
