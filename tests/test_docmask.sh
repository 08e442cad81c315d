#!/usr/bin/env bash
# test_docmask.sh — document masking (doc_mask, doc_positions) through the ring, against one process and the PyTorch
# reference with an explicit block-diagonal causal mask:
#  1. attention: build/tests/mpi_ring --docs at P = 1, 2, 4, both layouts: ring = one-process kernel = naive double
#     reference (1e-5) for sequences with a document across ranks, a rank whose tokens are all one document's tail,
#     boundaries exactly at chunk boundaries, restarted positions; segment pairs skipped / unmasked / masked per rank
#     equal a brute-force count;
#  2. the model at P = 1: tests/tool_dump (forward, every gradient, one AdamW step) against tests/ref_model.py with
#     the block-diagonal mask (also doc_positions with YaRN, and the eod key);
#  3. training at cp 2 and 4 in both layouts, tp 2 x cp 2, dp 2 x cp 2 and recompute = full at cp 2 gives the
#     one-process losses (1e-5) and first-step gradients (1e-5 relative); --verify_attention (ring vs one process,
#     with documents) agrees; the mask changes the loss; doc_positions at cp 4 equals cp 1;
#  4. build/eval --doc_mask on packed windows crafted so that documents span ranks, ranks hold only a tail, and
#     boundaries fall on chunk boundaries: per-position NLL at cp 1, 2, 4 (both layouts) equals the PyTorch
#     block-diagonal reference, with the windows per position and their standard errors;
#  5. bad input: one line, non-zero exit on every rank.
cd "$(dirname "$0")/.."
source tests/lib.sh

# ---- 1. ring attention with documents
for P in 1 2 4; do
  timeout $HANG_S $(launch "$P") build/tests/mpi_ring --docs >"$T/ring$P" 2>&1; rc=$?
  grep -E "^FAIL|segment pairs" "$T/ring$P" | grep -E "^FAIL|B=1 docs\(tail\)" | sed "s/^/  [P=$P] /" | head -4
  sub_result "mpi_ring --docs P = $P" $rc "$T/ring$P"
  echo "# mpi_ring --docs P = $P: $(tail -1 "$T/ring$P")"
done

# ---- 2. the model against PyTorch with the block-diagonal mask (one process)
cat > "$T/ref.conf" <<CONF
vocab_size = 64
d_model = 48
n_layer = 2
n_head = 6
n_kv_head = 2
d_ff = 80
max_seq_len = 64
init_std = 0.3        # peaked attention: the mask changes the loss visibly (printed by ref_model.py)
seq_len = 24
batch_size = 2
micro_batch = 2
lr = 1e-2
warmup_steps = 0
weight_decay = 0
grad_clip = 0
doc_mask = 1
eod = 63
CONF
for v in "plain|" "doc_positions + yarn|--doc_positions 1 --rope_scaling yarn --rope_factor 4 --rope_original_max_seq_len 16"; do
  tag=${v%%|*}; args=${v#*|}
  build/tests/tool_dump -c "$T/ref.conf" $args --out "$T/ref.dump" >"$T/dump.out" 2>&1 || { bad "tool_dump ($tag): $(tail -2 "$T/dump.out")"; continue; }
  $PY tests/ref_model.py "$T/ref.dump" >"$T/ref.out" 2>&1; rc=$?
  grep -E "^FAIL|document mask" "$T/ref.out" | sed "s/^/  [$tag] /"
  sub_result "ref_model.py ($tag)" $rc "$T/ref.out"
  echo "# [$tag] ref_model.py: $(tail -1 "$T/ref.out")"
done

# ---- 3. training through the ring
# a stream of short documents (8..100 tokens, each a repeated random word, after the eod token 256): a
# sequence of 120 tokens holds a few documents, which the ring's chunks (15..60 tokens) cut anywhere
$PY - "$T/data" <<'PYEOF' || bad "writing the data"
import os, sys, random
import numpy as np
d = sys.argv[1]; os.makedirs(d)
def shard(path, toks):
    h = np.zeros(256, np.int32); h[0], h[1], h[2] = 20240520, 1, len(toks)
    with open(path, "wb") as f: f.write(h.tobytes()); f.write(np.array(toks, np.uint16).tobytes())
rng = random.Random(7); toks = []
while len(toks) < 12000:
    word = [rng.randrange(97, 123) for _ in range(rng.randrange(2, 7))] + [32]
    n = rng.randrange(8, 100)
    toks += [256] + (word * 100)[:n - 1]
shard(f"{d}/train_000000.bin", toks)
# eval windows of 64 (cp 4: zigzag chunks of 8, contiguous of 16): window 0 has starts at 0, 8 (a chunk edge) and
# 13, whose document runs on to 80 (every rank's last chunk in window 0 is its tail); window 1 starts documents at
# 80 (= 16), 96 (= 32), 97 and 120, whose document fills all of window 2 (no eod: one tail on every rank); window 3
# starts one every 5 tokens
ev = [rng.randrange(97, 123) for _ in range(4 * 64 + 1)]
for p in [0, 8, 13, 80, 96, 97, 120] + list(range(192, 256, 5)): ev[p] = 256
shard(f"{d}/val_000000.bin", ev)
PYEOF
cat > "$T/cp.conf" <<CONF
vocab_size = 257
d_model = 48
n_layer = 2
n_head = 6
n_kv_head = 2
d_ff = 96
max_seq_len = 256
seq_len = 120          # cp 4 zigzag: chunks of 15, not a multiple of the kernel's tiles
batch_size = 4
micro_batch = 2
max_steps = 3
lr = 3e-3
warmup_steps = 1
adam_eps = 1e-6
doc_mask = 1
train_data = $T/data/train_000000.bin
CONF
CONF=$T/cp.conf; STEPS=3   # for train_run and same_losses (lib.sh)
train_run cp1 1 || true
train_run g1 1 --max_steps 1 || true
train_run nomask 1 --doc_mask 0 --save_final 0 || true
d=$($PY - "$T/cp1/metrics.jsonl" "$T/nomask/metrics.jsonl" <<'PYEOF'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:3])
print(f"step 1 loss {a[0]:.6f} masked vs {b[0]:.6f} unmasked")
sys.exit(0 if abs(a[0] - b[0]) > 1e-5 * abs(b[0]) else 1)
PYEOF
) && ok "doc_mask changes the training loss: $d" || bad "doc_mask does not change the loss: $d"
for lay in "2 zigzag" "2 contiguous" "4 zigzag" "4 contiguous"; do
  read -r cp layout <<<"$lay"; n="cp${cp}_$layout"
  train_run "$n" "$cp" --cp "$cp" --cp_layout "$layout" --verify_attention 1 --save_final 0 || continue
  same_losses cp1 "$n" 1e-5 && ok "cp=$cp $layout with doc_mask: per-step losses equal cp=1 within 1e-5" || bad "cp=$cp $layout losses differ"
  grep -q "verify_attention step 3: ring vs one process" "$T/$n.out" && ! grep -q WARNING "$T/$n.out" \
    && ok "cp=$cp $layout: --verify_attention (documents) agrees: $(grep -m1 -o 'max rel diff [0-9.e+-]*' "$T/$n.out")" \
    || bad "cp=$cp $layout: verify_attention missing or warned"
  train_run "g$n" "$cp" --cp "$cp" --cp_layout "$layout" --max_steps 1 --save_final 0 && \
  $PY tests/compare_dumps.py "$T/g$n.dump" "$T/g1.dump" --rel 1e-5 --prefix grad/ >"$T/cmp" \
    && ok "cp=$cp $layout: first-step gradients equal cp=1 within 1e-5 relative ($(cat "$T/cmp"))" || bad "cp=$cp $layout gradients: $(cat "$T/cmp")"
done
train_run tp2cp2 4 --tp 2 --cp 2 --save_final 0 && same_losses cp1 tp2cp2 1e-5 && ok "tp 2 x cp 2 with doc_mask matches cp=1" || bad "tp 2 x cp 2"
train_run dp2cp2 4 --cp 2 --cp_layout contiguous --save_final 0 && same_losses cp1 dp2cp2 1e-5 && ok "dp 2 x cp 2 (contiguous) with doc_mask matches cp=1" || bad "dp 2 x cp 2"
train_run rc2 2 --cp 2 --recompute full --save_final 0 && same_losses cp1 rc2 1e-5 && ok "recompute = full at cp 2 (the ring recomputes attention with the documents) matches cp=1" || bad "recompute full cp 2"
train_run rp1 1 --doc_positions 1 --save_final 0 && train_run rp4 4 --cp 4 --doc_positions 1 --save_final 0 \
  && same_losses rp1 rp4 1e-5 && ok "doc_positions: cp=4 matches cp=1" || bad "doc_positions cp=4"
# RoPE scores depend on position differences only, so restarting positions inside documents changes nothing but rounding
same_losses cp1 rp1 1e-5 >"$T/rp" && ok "doc_positions = 1 equals doc_positions = 0 up to rounding (RoPE is relative):$(cat "$T/rp")" || bad "doc_positions changed the loss: $(cat "$T/rp")"

# ---- 4. build/eval --doc_mask on crafted packed windows, every layout, against PyTorch
# a fresh model with peaked attention (init_std 0.3): the mask changes its losses visibly (docmask_ref.py prints by how much)
train_run init 1 --init_std 0.3 --max_steps 0 || true
CK=$(ls "$T"/init/ckpt_*.h5 2>/dev/null | tail -1)
csvs=()
for lay in "1 zigzag" "2 zigzag" "2 contiguous" "4 zigzag" "4 contiguous"; do
  read -r cp layout <<<"$lay"; n="ev_cp${cp}_$layout"
  timeout $HANG_S $(launch "$cp") build/eval --ckpt "$CK" --data "$T/data/val_000000.bin" --doc_mask --seq_len 64 --docs 4 --bucket 1 \
    --cp "$cp" --cp_layout "$layout" --out "$T/ev" --name "$n" >"$T/$n.out" 2>&1 && csvs+=("$T/ev/$n.csv") || bad "eval $n: $(tail -c 300 "$T/$n.out")"
done
grep -q "4 windows at context 64 (packed windows, document-masked)" "$T/ev_cp1_zigzag.out" && ok "eval --doc_mask says what it scored" || bad "eval --doc_mask summary line"
$PY tests/docmask_ref.py "$CK" "$T/data/val_000000.bin" 64 4 256 "${csvs[@]}" >"$T/dref" 2>&1; rc=$?
grep -v "passed, .* failed" "$T/dref"
sub_result "docmask_ref.py" $rc "$T/dref"
timeout $HANG_S build/eval --ckpt "$CK" --data "$T/data/val_000000.bin" --doc_mask --seq_len 64 --docs 4 --log_buckets --out "$T/ev" \
  --name band >/dev/null 2>&1 && $PY - "$T/ev/band.svg" <<'PYEOF' && ok "eval --doc_mask --log_buckets: the SVG has a shaded standard-error band" || bad "no band in the SVG"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.findall(".//{http://www.w3.org/2000/svg}polygon")
PYEOF

# ---- 5. bad input
expect_train_err "$T/cp.conf" "doc_mask without an eod token" "doc_mask = 1 needs the end-of-document token: set eod (vocab_size = 300" 1 --vocab_size 300
expect_train_err "$T/cp.conf" "eod outside the vocabulary" "eod = 257 must be -1 or a token id below vocab_size = 257" 2 --cp 2 --eod 257
expect_train_err "$T/cp.conf" "doc_positions without doc_mask" "doc_positions = 1 needs doc_mask = 1" 2 --doc_mask 0 --doc_positions 1
expect_err "eval --doc_positions without --doc_mask" "eval: --doc_positions needs --doc_mask" 1 build/eval --ckpt "$CK" --data "$T/data" --seq_len 64 --doc_positions 1
expect_err "eval --doc_mask with --stride" "eval: --doc_mask (packed windows) and --stride exclude each other" 2 build/eval --ckpt "$CK" --data "$T/data" --seq_len 64 --doc_mask --stride 16

finish
