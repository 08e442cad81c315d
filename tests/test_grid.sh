#!/usr/bin/env bash
# The 3-D grid (dp x cp x tp): every layout trains the same model as one process — per-step losses within
# 1e-5 relative, final weights (gathered) within 1e-5 — ZeRO-1 equals plain AdamW, a vocabulary not
# divisible by tp matches, and invalid layouts give one line and a non-zero exit on every rank.
cd "$(dirname "$0")/.."
source tests/lib.sh

build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
cat > "$T/g.conf" <<CONF
vocab_size = 257       # not divisible by tp = 2 or 4: the vocabulary is padded
d_model = 64
n_layer = 2
n_head = 8
n_kv_head = 4          # GQA, divisible by tp = 4
d_ff = 96
max_seq_len = 128
seq_len = 64
batch_size = 8
micro_batch = 1
max_steps = 5
lr = 3e-3
warmup_steps = 2
adam_eps = 1e-6        # see test_cp.sh: keeps AdamW from amplifying fp32 rounding of near-zero gradients
train_data = $T/data
CONF
CONF=$T/g.conf; STEPS=5   # for train_run and same_losses (lib.sh)
train_run ref 1 || finish
for layout in "2 1 1" "1 2 1" "2 2 1" "4 2 1" "2 2 2" "1 4 2" "2 1 4"; do
  read -r tp cp dp <<<"$layout"; np=$((tp * cp * dp)); name="tp${tp}cp${cp}dp${dp}"
  train_run "$name" "$np" --tp "$tp" --cp "$cp" || continue
  grep -q "grid: world $np = dp $dp x cp $cp x tp $tp" "$T/$name.out" || bad "$name: grid line missing"
  same_losses ref "$name" 1e-5 && ok "$name: per-step losses equal 1 rank within 1e-5" || bad "$name: losses differ"
  $PY tests/compare_dumps.py "$T/$name.dump" "$T/ref.dump" --abs 1e-5 >"$T/cmp" \
    && ok "$name: gathered final weights equal 1 rank within 1e-5 ($(cat "$T/cmp"))" || bad "$name weights: $(cat "$T/cmp")"
done
# the grid printout of the issue's example
grep -q "tp    groups: {0,1} {2,3} {4,5} {6,7}" "$T/tp2cp2dp2.out" && grep -q "ring  groups: {0,2} {1,3} {4,6} {5,7}" "$T/tp2cp2dp2.out" \
  && grep -q "dp    groups: {0,4} {1,5} {2,6} {3,7}" "$T/tp2cp2dp2.out" && ok "tp2 cp2 dp2: groups {0,1}.., rings {0,2}.., dp {0,4}.." \
  || bad "grid groups: $(grep groups "$T/tp2cp2dp2.out" | tr '\n' ' ')"

# tied embeddings (the vocab-parallel head shares the embedding's shards) with YaRN, at tp 4 x cp 2
TIED=(--tie_embeddings 1 --rope_scaling yarn --rope_factor 2 --rope_original_max_seq_len 32)
train_run tied1 1 "${TIED[@]}" && train_run tied8 8 --tp 4 --cp 2 "${TIED[@]}" && same_losses tied1 tied8 1e-5 && \
  $PY tests/compare_dumps.py "$T/tied8.dump" "$T/tied1.dump" --abs 1e-5 >"$T/cmp" \
  && ok "tied embeddings + YaRN at tp 4 x cp 2 match 1 rank ($(cat "$T/cmp"))" || bad "tied at tp4 cp2: $(cat "$T/cmp" 2>/dev/null)"

# ZeRO-1 (moments sharded over dp x cp, gradients reduce-scattered, parameters all-gathered): over 2 ranks the
# sums are the same two-term sums as plain AdamW's all-reduce, so the result is bit-identical; splitting every
# collective into many MPI calls (RINGLM_COMM_MAX_COUNT) changes nothing either
train_run zr0 4 --tp 2 --cp 2 && train_run zr1 4 --tp 2 --cp 2 --zero 1 && same_losses zr0 zr1 0 && \
  $PY tests/compare_dumps.py "$T/zr1.dump" "$T/zr0.dump" --abs 0 >"$T/cmp" && \
  $PY tests/compare_dumps.py "$T/zr1.dump" "$T/zr0.dump" --abs 0 --prefix grad/ >>"$T/cmp" && \
  ok "ZeRO-1 with reduce-scatter over dp x cp = 2 is bit-identical to plain AdamW (weights and gradients: $(tr '\n' ' ' <"$T/cmp"))" \
  || bad "ZeRO-1 over 2 ranks differs: $(cat "$T/cmp" 2>/dev/null)"
RINGLM_COMM_MAX_COUNT=1000 train_run zr1s 4 --tp 2 --cp 2 --zero 1 && same_losses zr1 zr1s 0 && \
  $PY tests/compare_dumps.py "$T/zr1s.dump" "$T/zr1.dump" --abs 0 >"$T/cmp" \
  && ok "ZeRO-1 with every collective split into calls of 1000 elements is bit-identical ($(cat "$T/cmp"))" \
  || bad "split collectives differ: $(cat "$T/cmp" 2>/dev/null)"
$PY - "$T/zr0.out" "$T/zr1.out" <<'PYEOF' && ok "ZeRO-1 halves the AdamW moments per rank over dp x cp = 2" || bad "ZeRO-1 moments not halved: $(grep moments "$T/zr1.out")"
import re, sys
m = [float(re.search(r"AdamW moments ([0-9.]+) MiB", open(f).read()).group(1)) for f in sys.argv[1:]]
print(f"     moments per rank: plain {m[0]} MiB, ZeRO-1 {m[1]} MiB")
sys.exit(0 if abs(m[1] - m[0] / 2) <= 0.011 else 1)
PYEOF

# ZeRO-1 (moments sharded over dp x cp) equals plain AdamW within 1e-6
train_run z0 8 --tp 2 --cp 2 && train_run z1 8 --tp 2 --cp 2 --zero 1 && same_losses z0 z1 1e-6 && \
  $PY tests/compare_dumps.py "$T/z1.dump" "$T/z0.dump" --abs 1e-6 >"$T/cmp" && ok "ZeRO-1 equals plain AdamW within 1e-6 ($(cat "$T/cmp"))" \
  || bad "ZeRO-1 differs: $(cat "$T/cmp" 2>/dev/null)"
train_run z1b 4 --tp 1 --cp 1 --zero 1 && same_losses ref z1b 1e-5 && \
  $PY tests/compare_dumps.py "$T/z1b.dump" "$T/ref.dump" --abs 1e-5 >"$T/cmp" && ok "ZeRO-1 over 4 data-parallel ranks matches 1 rank ($(cat "$T/cmp"))" \
  || bad "ZeRO-1 dp4: $(cat "$T/cmp" 2>/dev/null)"

# ---- invalid layouts: one line, non-zero exit on every rank, no hang ----
expect_train_err "$T/g.conf" "heads not divisible by tp" "n_head = 8 is not divisible by tp = 3" 3 --tp 3
expect_train_err "$T/g.conf" "KV heads not divisible by tp" "n_kv_head = 4 is not divisible by tp = 8" 8 --tp 8
expect_train_err "$T/g.conf" "world not divisible by tp*cp" "world size 6 is not divisible by tp * cp = 4 * 1" 6 --tp 4
expect_train_err "$T/g.conf" "world not divisible by tp*cp (cp)" "world size 4 is not divisible by tp * cp = 2 * 4" 4 --tp 2 --cp 4
expect_train_err "$T/g.conf" "batch not divisible by micro_batch*dp" "batch_size = 8 is not a multiple of micro_batch * dp = 1 * 3" 3
expect_train_err "$T/g.conf" "zero out of range" "zero = 4 must be 0, 1, 2 or 3" 2 --zero 4

finish
