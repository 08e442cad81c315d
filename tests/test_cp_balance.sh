#!/usr/bin/env bash
# test_cp_balance.sh — context parallelism over packed documents: cp_shard = document (each long document split into
# the layout's chunks, the others placed whole on ranks balanced by attention work; attention/shard.h), the ring's
# pruned schedule (cp_prune: K/V hops and rows no rank further on can see are not sent; attention/ring.h) and
# build/plan --balance (model/balance.h):
#  1. training with document sharding at cp 2 and 4 (zigzag and contiguous), tp 2 x cp 2, a2a 2 x ring 2, dp 2 x cp 2
#     and on the emulated CUDA backend (NCCL) gives one process's loss and first-step gradients (1e-5); three steps at
#     cp 4 give its losses (and --verify_attention agrees), with the pruned and the full schedule bit-identical;
#  2. the ring bytes the comm layer counts (rank 0, every step) equal build/plan --balance's prediction for the same
#     windows, pruned and full, and the pruned schedule sends less;
#  3. build/eval --doc_mask --cp_shard document books every target at its position in its document: per-position NLL
#     at cp 2 and 4 (both layouts) equals the one-process evaluation (1e-5), with the same token counts; passkey
#     retrieval at cp 2 equals one process's;
#  4. build/plan --balance on synthetic mixes at cp 8 (tools/bench/cp_mixes.py): document sharding keeps the work's
#     imbalance within 1.05 on every mix where the window layout does not; on the all-short mix the ring sends the
#     full schedule's bytes less the share of K/V hops nobody can see;
#  5. bad input: one line, non-zero exit on every rank.
cd "$(dirname "$0")/.."
source tests/lib.sh

# documents of 2..30 tokens (three in four) and 60..200 (one in four), each a repeated random word after the eod 256:
# a window of 128 holds a long document or two beside short ones, cut anywhere
$PY - "$T/data" <<'PYEOF' || bad "writing the data"
import os, sys, random
import numpy as np
d = sys.argv[1]; os.makedirs(d)
def shard(path, toks):
    h = np.zeros(256, np.int32); h[0], h[1], h[2] = 20240520, 1, len(toks)
    with open(path, "wb") as f: f.write(h.tobytes()); f.write(np.array(toks, np.uint16).tobytes())
rng = random.Random(11)
def stream(n):
    toks = []
    while len(toks) < n:
        L = rng.choice([rng.randrange(60, 200), rng.randrange(2, 30), rng.randrange(2, 30), rng.randrange(2, 12)])
        word = [rng.randrange(97, 123) for _ in range(rng.randrange(2, 7))] + [32]
        toks += [256] + (word * 100)[:L - 1]
    return toks
shard(f"{d}/train_000000.bin", stream(20000))
shard(f"{d}/val_000000.bin", stream(6 * 64 + 1))
PYEOF
cat > "$T/cp.conf" <<CONF
vocab_size = 257
d_model = 48
n_layer = 2
n_head = 6
n_kv_head = 2
d_ff = 96
max_seq_len = 256
seq_len = 128          # cp 4 zigzag: chunks of 16
batch_size = 4
micro_batch = 2
max_steps = 1
lr = 3e-3
warmup_steps = 1
adam_eps = 1e-6
doc_mask = 1
save_final = 0
train_data = $T/data/train_000000.bin
CONF
CONF=$T/cp.conf
DOC=(--cp_shard document --cp_shard_min 40)   # documents of 40 tokens and more split, shorter ones whole

# ---- 1. training: one step per layout (loss and gradients), three at cp 4
loss1() { $PY -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['loss'])" "$T/$1/metrics.jsonl"; }
train_run g1 1 || finish
for lay in "cp2z 2 --cp 2" "cp2c 2 --cp 2 --cp_layout contiguous" "cp4z 4 --cp 4" "cp4c 4 --cp 4 --cp_layout contiguous" \
           "tp2cp2 4 --tp 2 --cp 2" "a2aring 4 --cp 4 --cp_comm a2a+ring --cp_a2a 2" "dp2cp2 4 --cp 2"; do
  read -r name np args <<<"$lay"
  # shellcheck disable=SC2086
  train_run "$name" "$np" $args "${DOC[@]}" || continue
  $PY - "$(loss1 g1)" "$(loss1 "$name")" <<'PYEOF' >"$T/l" && ok "document sharding, $args on $np ranks: loss $(cat "$T/l") equals one process within 1e-5" || bad "$args loss: $(cat "$T/l")"
import sys
a, b = float(sys.argv[1]), float(sys.argv[2]); print(f"{b:.7f} (one process {a:.7f})"); sys.exit(abs(a - b) > 1e-5 * abs(a))
PYEOF
  $PY tests/compare_dumps.py "$T/$name.dump" "$T/g1.dump" --rel 1e-5 --prefix grad/ >"$T/cmp" \
    && ok "document sharding, $args on $np ranks: first-step gradients equal one process within 1e-5 relative ($(cat "$T/cmp"))" \
    || bad "$args gradients: $(cat "$T/cmp")"
done
# (1e-5 for the first step's loss and gradients: the emulated cuBLAS sums in another order than the CPU's, so they
# differ by fp32 rounding, ~1e-7 relative; a document sharded to the wrong rank moves them by far more)
if [ -x build/emu/train ]; then
  if RINGLM_EMU_DEVICES=8 timeout $HANG_S $(launch 4) build/emu/train -c "$CONF" --out_dir "$T/emu" --dump_weights "$T/emu.dump" \
       --matmul_precision fp32 --cp 4 "${DOC[@]}" </dev/null >"$T/emu.out" 2>"$T/emu.err" &&
     $PY tests/compare_dumps.py "$T/emu.dump" "$T/g1.dump" --rel 1e-5 --prefix grad/ >"$T/cmp" &&
     $PY -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-5 * abs(a))" "$(loss1 g1)" "$(loss1 emu)"
  then ok "emulated CUDA backend, cp 4 document sharding ($(grep -m1 '^transport' "$T/emu.out")): loss and first-step gradients equal one process ($(cat "$T/cmp"))"
  else bad "emulated CUDA, cp 4 document sharding: $(head -c 300 "$T/emu.err") $(cat "$T/cmp" 2>/dev/null)"; fi
else bad "no build/emu/train (make cuda-emu)"; fi

STEPS=3
train_run one 1 --max_steps 3 || true
train_run cp4 4 --max_steps 3 --cp 4 "${DOC[@]}" --verify_attention 1 || true
train_run cp4full 4 --max_steps 3 --cp 4 "${DOC[@]}" --cp_prune 0 || true
grep -q "verify_attention step 3: ring vs one process" "$T/cp4.out" && ! grep -q WARNING "$T/cp4.out" \
  && ok "cp 4 document sharding: --verify_attention agrees: $(grep -m1 -o 'max rel diff [0-9.e+-]*' "$T/cp4.out")" \
  || bad "cp 4 document sharding: verify_attention missing or warned"
same_losses one cp4 1e-5 >"$T/cmp" && ok "document sharding at cp 4, three steps: losses equal one process within 1e-5 ($(sed 's/^ *//' "$T/cmp"))" || bad "cp 4 three steps: $(cat "$T/cmp")"
[ -s "$T/cp4/metrics.jsonl" ] && [ "$(grep -o '"loss": [0-9.e+-]*' "$T/cp4/metrics.jsonl")" = "$(grep -o '"loss": [0-9.e+-]*' "$T/cp4full/metrics.jsonl")" ] \
  && ok "pruned and full schedule: bit-identical losses ($(grep -o '"loss": [0-9.]*' "$T/cp4/metrics.jsonl" | tr '\n' ' '))" \
  || bad "pruned and full schedule losses differ"

# ---- 2. the bytes counted against build/plan --balance (the same windows: rank 0 runs dp replica 0's)
for v in "cp4 1" "cp4full 0"; do
  read -r name prune <<<"$v"
  build/plan -c "$CONF" --cp 4 "${DOC[@]}" --cp_prune "$prune" --balance --windows 12 --json >"$T/$name.bal" 2>&1
  $PY - "$T/$name.bal" "$T/$name/metrics.jsonl" "$prune" <<'PYEOF' >"$T/b" 2>&1 && ok "cp_prune $prune: ring bytes counted per step = build/plan --balance: $(cat "$T/b")" || bad "cp_prune $prune bytes: $(cat "$T/b")"
import json, sys
p = json.load(open(sys.argv[1])); r = [json.loads(l) for l in open(sys.argv[2])]
got = [x["sent_hop_bytes"] for x in r]; pruned = [x["cp_blocks_pruned"] for x in r]
print(f"{got}; blocks not sent per step {pruned}")
assert got == p["step_hop_bytes_rank0"], (got, p["step_hop_bytes_rank0"])
assert sys.argv[3] == "1" or not any(pruned)   # (the full schedule leaves nothing out; rank 0 here shortens, not skips)
PYEOF
done
$PY - "$T/cp4.bal" "$T/cp4full.bal" <<'PYEOF' >"$T/b" 2>&1 && ok "the pruned schedule sends less: $(cat "$T/b")" || bad "pruned vs full bytes: $(cat "$T/b")"
import json, sys
a, b = (json.load(open(x)) for x in sys.argv[1:3])
print(f"{a['ring_bytes']:.0f} of {b['ring_bytes']:.0f} bytes per layer and window, dead {a['dead_bytes']:.0f} of {b['dead_bytes']:.0f}")
assert a["ring_bytes"] < b["ring_bytes"] == b["ring_bytes_full"] and a["dead_bytes"] < b["dead_bytes"]
PYEOF

# ---- 3. evaluation by position and passkey under document sharding
train_run init 1 --init_std 0.3 --max_steps 0 --save_final 1 || true
CK=$(ls "$T"/init/ckpt_*.h5 2>/dev/null | tail -1)
ev() {   # NAME NP ARGS...: build/eval --doc_mask by position on the val windows
  local name=$1 np=$2; shift 2
  timeout $HANG_S $(launch "$np") build/eval --ckpt "$CK" --data "$T/data/val_000000.bin" --doc_mask --seq_len 64 --docs 6 \
    --bucket 1 --out "$T/ev" --name "$name" "$@" >"$T/$name.out" 2>&1 || bad "eval $name: $(tail -c 300 "$T/$name.out")"
}
ev e1 1
for lay in "e2 2 --cp 2" "e4 4 --cp 4" "e4c 4 --cp 4 --cp_layout contiguous"; do
  read -r name np args <<<"$lay"
  # shellcheck disable=SC2086
  ev "$name" "$np" $args --cp_shard document --cp_shard_min 20
  $PY - "$T/ev/e1.csv" "$T/ev/$name.csv" <<'PYEOF' >"$T/c" 2>&1 && ok "eval by position, $args, document sharding = one process: $(cat "$T/c")" || bad "eval $args: $(cat "$T/c")"
import csv, sys
a, b = ([r for r in csv.DictReader(open(p))] for p in sys.argv[1:3])
assert len(a) == len(b) == 64, (len(a), len(b))
worst = 0
for x, y in zip(a, b):
    assert (x["bucket_lo"], x["tokens"], x["docs"]) == (y["bucket_lo"], y["tokens"], y["docs"]), (x, y)
    worst = max(worst, abs(float(x["mean_nll"]) - float(y["mean_nll"])) / abs(float(x["mean_nll"])))
print(f"64 positions, {sum(int(r['tokens']) for r in a)} targets, worst rel diff {worst:.1e}")
assert worst <= 1e-5
PYEOF
done
for v in "pk1 1" "pk2 2 --cp 2 --cp_shard document --cp_shard_min 16"; do
  read -r name np args <<<"$v"
  # shellcheck disable=SC2086
  timeout $HANG_S $(launch "$np") build/eval --passkey --doc_mask --ckpt "$CK" --passkey_lens 128,256 --passkey_depths 0,1 \
    --passkey_trials 2 --out "$T/ev" --name "$name" $args >"$T/$name.out" 2>&1 || bad "passkey $name: $(tail -c 300 "$T/$name.out")"
done
cmp -s "$T/ev/pk1_passkey.csv" "$T/ev/pk2_passkey.csv" && ok "passkey at cp 2 with document sharding: the same grid as one process" \
  || bad "passkey grids differ: $(diff "$T/ev/pk1_passkey.csv" "$T/ev/pk2_passkey.csv" | head -4 | tr '\n' ' ')"

# ---- 4. build/plan --balance on synthetic mixes at cp 8
$PY tools/bench/cp_mixes.py --out "$T/mix" --seq_len 4096 --windows 8 short long_short powerlaw midchunk >/dev/null || bad "cp_mixes.py"
for mix in short long_short powerlaw midchunk; do
  for sh in window document; do
    build/plan -c "$CONF" --seq_len 4096 --max_seq_len 4096 --train_data "$T/mix/$mix" --shuffle 0 --cp 8 --cp_shard $sh \
      --balance --windows 8 --json >"$T/$mix.$sh" 2>&1 || bad "plan --balance $mix $sh: $(cat "$T/$mix.$sh")"
  done
  $PY - "$mix" "$T/$mix.window" "$T/$mix.document" <<'PYEOF' >"$T/b" 2>&1 && ok "plan --balance, $mix at cp 8: $(cat "$T/b")" || bad "plan --balance $mix: $(cat "$T/b")"
import json, sys
mix, w, d = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
print(f"imbalance window {w['imbalance']:.3f}, document {d['imbalance']:.3f} (worst window {d['imbalance_worst']:.3f}); "
      f"ring bytes document {d['ring_bytes'] / d['ring_bytes_full']:.1%} of the full schedule")
assert d["imbalance"] <= 1.05 and d["imbalance_worst"] <= 1.05
if mix != "short": assert w["imbalance"] > 1.3
if mix == "short":   # aligned short documents: nobody sees another rank's block, nothing is sent
    for x in (w, d): assert x["ring_bytes"] == x["ring_bytes_full"] * (1 - x["kv_hops_blind"] / x["kv_hops"]) == 0
PYEOF
done
build/plan -c "$CONF" --cp 4 --balance --windows 4 --cp_shard document --cp_shard_min 40 >"$T/bt" 2>&1 && grep -q "imbalance (max / mean work" "$T/bt" \
  && ok "plan --balance prints the per-rank table ($(grep -m1 imbalance "$T/bt" | sed 's/^ *//'))" || bad "plan --balance text: $(head -c 300 "$T/bt")"

# ---- 5. bad input
expect_train_err "$CONF" "cp_shard_min 0" "cp_shard_min = 0 must be -1 (seq_len / cp) or a document length from 8 to seq_len = 128" 2 --cp 4 --cp_shard document --cp_shard_min 0
expect_train_err "$CONF" "cp_shard_min above seq_len" "cp_shard_min = 129 exceeds seq_len = 128" 2 --cp 2 --cp_shard document --cp_shard_min 129
expect_train_err "$CONF" "cp_shard_min below 2 cp" "cp_shard_min = 5: a document shorter than 2 * cp = 8 tokens cannot be split" 4 --cp 4 --cp_shard document --cp_shard_min 5
expect_train_err "$CONF" "document sharding without doc_mask" "cp_shard = document needs doc_mask = 1" 2 --cp 2 --cp_shard document --doc_mask 0
expect_train_err "$CONF" "unknown cp_shard" "cp_shard = 'docs' must be window or document" 2 --cp 2 --cp_shard docs
expect_err "eval --cp_shard document without --doc_mask" "eval: --cp_shard document needs --doc_mask" 2 build/eval --ckpt "$CK" --data "$T/data" --seq_len 64 --cp 2 --cp_shard document
expect_err "plan --balance without train_data" "plan: --balance reads the run's training windows: give train_data" 1 build/plan -c "$CONF" --train_data "" --balance

finish
