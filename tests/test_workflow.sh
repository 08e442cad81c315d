#!/usr/bin/env bash
# The daily workflow's bookkeeping (issue 21):
#  - the data's meta.json: build/train takes vocab_size and eod from it, refuses values that contradict it (one
#    line naming both), checks val_data against it, records it in checkpoints (root attribute data_meta), and
#    refuses to resume or --init_from a checkpoint trained on other tokens; data_meta = 0 ignores it;
#  - learning-rate schedules: every logged lr equals the schedule's formula (computed here independently) for
#    cosine, linear, wsd and constant; a resume whose max_steps moves the lr prints one WARNING with both values;
#    --lr_horizon keeps a cosine decay where it was (no warning, lr continues); wsd extends without a jump;
#  - a run that completed no step does not lock its out_dir; a run that did still does;
#  - the params line: the model's total and each tp rank's share, against a count from the config.
cd "$(dirname "$0")/.."
source tests/lib.sh

build/prepare --out "$T/data" --val-frac 0.1 model attention >/dev/null || { bad "prepare"; finish; }
grep -v '^vocab_size' configs/tiny.conf >"$T/novocab.conf"
A=(--train_data "$T/data/train_*.bin" --val_data "" --log_every 1 --val_every 0)

# fake_meta DIR VOCAB EOD TOKENIZER SHA: a copy of $T/data in DIR whose meta.json names another tokenizer
fake_meta() {
  mkdir -p "$1" && cp "$T"/data/*.bin "$1"/ || return 1
  $PY - "$T/data/meta.json" "$1/meta.json" "$2" "$3" "$4" "$5" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
m.update(vocab_size=int(sys.argv[3]), eod_id=int(sys.argv[4]), tokenizer=sys.argv[5], tokenizer_sha256=sys.argv[6])
json.dump(m, open(sys.argv[2], "w"), indent=1)
EOF
}
# key DIR NAME: the value of NAME in DIR/config.txt
key() { sed -nE "s/^$2 = (.*)/\1/p" "$1/config.txt"; }

# ---- 1. meta.json ----
fake_meta "$T/bpe" 300 7 /models/tok/tokenizer.json "$(printf 'a%.0s' {1..64})"
fake_meta "$T/bpe2" 300 7 /models/other/tokenizer.json "$(printf 'b%.0s' {1..64})"
if build/train -c "$T/novocab.conf" --train_data "$T/bpe" --val_data "" --out_dir "$T/m1" --max_steps 2 \
     --log_every 1 --ckpt_every 2 >"$T/m1.out" 2>&1; then
  v=$(key "$T/m1" vocab_size); e=$(key "$T/m1" eod)
  emb=$($PY -c "import h5py,sys; print(h5py.File(sys.argv[1])['model/model.embed_tokens.weight'].shape[0])" "$T/m1/ckpt_00000002.h5" 2>&1)
  if [ "$v" = 300 ] && [ "$e" = 7 ] && [ "$emb" = 300 ] && grep -q "vocab_size taken, eod taken" "$T/m1.out"; then
    ok "vocab_size and eod taken from meta.json: config.txt vocab_size $v, eod $e; embedding rows $emb; $(grep '^data:' "$T/m1.out" | sed "s|$T/||g")"
  else bad "meta.json defaults: vocab_size '$v' eod '$e' embedding '$emb': $(grep -m1 '^data:\|train:' "$T/m1.out")"; fi
  if $PY - "$T/m1/ckpt_00000002.h5" "$T/bpe/meta.json" <<'EOF'
import h5py, json, sys
saved = h5py.File(sys.argv[1]).attrs["data_meta"]
saved = saved.decode() if isinstance(saved, bytes) else str(saved)
assert json.loads(saved) == json.load(open(sys.argv[2])), saved[:200]
EOF
  then ok "the checkpoint records the data's meta.json (root attribute data_meta = the file's content)"
  else bad "the checkpoint's data_meta differs from meta.json"; fi
else bad "training on BPE-described data: $(tail -n 3 "$T/m1.out")"; fi

expect_train_err "$T/novocab.conf" "--eod contradicting meta.json" "eod = 5 (command line)|end-of-document id 7|meta.json" 1 \
  --train_data "$T/bpe" --val_data "" --eod 5 --max_steps 1
expect_train_err configs/tiny.conf "vocab_size (config file) below the data's vocabulary" \
  "vocab_size = 257 (config file)|vocabulary of 300|/models/tok/tokenizer.json" 1 --train_data "$T/bpe" --val_data "" --max_steps 1
expect_train_err "$T/novocab.conf" "vocab_size on the command line below it, 2 ranks" "vocab_size = 299 (command line)" 2 \
  --train_data "$T/bpe" --val_data "" --vocab_size 299 --max_steps 1 --cp 2
if build/train -c "$T/novocab.conf" --train_data "$T/bpe" --val_data "" --out_dir "$T/m2" --max_steps 1 --vocab_size 320 \
     --eod 7 >"$T/m2.out" 2>&1 && [ "$(key "$T/m2" vocab_size)" = 320 ] && grep -q "vocab_size 320 as given, eod as given" "$T/m2.out"
then ok "a larger vocab_size and the same eod are accepted as given"; else bad "larger vocab_size: $(tail -n 2 "$T/m2.out")"; fi
if build/train -c configs/tiny.conf --train_data "$T/bpe" --val_data "" --out_dir "$T/m3" --max_steps 1 --data_meta 0 \
     --eod 3 >"$T/m3.out" 2>&1 && [ "$(key "$T/m3" vocab_size)" = 257 ] && [ "$(key "$T/m3" eod)" = 3 ] && ! grep -q '^data:' "$T/m3.out"
then ok "data_meta = 0 ignores meta.json (vocab_size 257, eod 3 as given)"; else bad "data_meta 0: $(tail -n 2 "$T/m3.out")"; fi
expect_train_err "$T/novocab.conf" "val_data of other tokens" "val_data and train_data were made with different tokens|tokenizer" 1 \
  --train_data "$T/bpe" --val_data "$T/bpe2" --max_steps 1
echo '{"format": "ringlm-data-1", "vocab_size": ' >"$T/broken.json"
mkdir -p "$T/broken" && cp "$T"/data/*.bin "$T/broken/" && cp "$T/broken.json" "$T/broken/meta.json"
expect_train_err configs/tiny.conf "a meta.json that is not JSON" "meta.json" 1 --train_data "$T/broken" --val_data "" --max_steps 1
if [ -f "$T/m1/ckpt_00000002.h5" ]; then
  expect_train_err "$T/novocab.conf" "resume on data of another tokenizer" "trained on other tokens|/models/tok/tokenizer.json|/models/other/tokenizer.json" 1 \
    --train_data "$T/bpe2" --val_data "" --resume "$T/m1/ckpt_00000002.h5" --max_steps 4 --force
  expect_train_err "$T/novocab.conf" "--init_from a checkpoint of another tokenizer, 2 ranks" "--init_from|trained on other tokens" 2 \
    --train_data "$T/bpe2" --val_data "" --init_from "$T/m1/ckpt_00000002.h5" --max_steps 4 --tp 2
fi

# ---- 2. learning-rate schedules ----
# lr_check DIR [FROM]: every record's lr in DIR/metrics.jsonl (from step FROM on) against the schedule of
# DIR/config.txt (the formula below)
lr_check() {
  $PY - "$1" "${2:-1}" <<'EOF'
import json, math, sys
d, first = sys.argv[1], int(sys.argv[2])
c = dict(l.split(" = ", 1) for l in open(d + "/config.txt").read().splitlines() if " = " in l)
lr, mn, W, S = float(c["lr"]), float(c["min_lr"]), int(c["warmup_steps"]), int(c["max_steps"])
sched, H, C = c["lr_schedule"], int(c["lr_horizon"]), int(c["lr_cooldown"])
def at(s):  # s: 0-based step index
    if s < W: return lr * (s + 1) / W
    if sched == "constant": return lr
    if sched == "wsd":
        start = max(S - (C if C > 0 else S // 5), W)
        if s < start: return lr
        return lr + min(1.0, (s - start + 1) / (S - start)) * (mn - lr)
    end = H if H > 0 else S
    f = min(1.0, (s - W) / (end - W))
    return lr + f * (mn - lr) if sched == "linear" else mn + 0.5 * (1 + math.cos(math.pi * f)) * (lr - mn)
recs = [json.loads(l) for l in open(d + "/metrics.jsonl") if '"loss"' in l and '"val_loss"' not in l]
recs = [r for r in recs if r["step"] >= first]
worst = max(abs(r["lr"] - at(r["step"] - 1)) / at(r["step"] - 1) for r in recs)
print(f"{len(recs)} steps, lr {recs[0]['lr']:.3e} .. {recs[-1]['lr']:.3e}, worst rel diff {worst:.1e}")
sys.exit(0 if worst < 1e-6 and len(recs) > 0 else 1)
EOF
}
B=(-c configs/tiny.conf "${A[@]}" --warmup_steps 2 --lr 1e-3 --min_lr 1e-4)
for s in cosine linear constant "wsd --lr_cooldown 4" "wsd" "wsd --lr_cooldown 11"; do   # (11: a cooldown longer than max_steps - warmup_steps)
  n=s_${s// /_}; n=${n//--/}
  if build/train "${B[@]}" --out_dir "$T/$n" --max_steps 12 --lr_schedule $s >"$T/$n.out" 2>&1; then
    check "lr_schedule $s: logged lr = formula" lr_check "$T/$n"
  else bad "lr_schedule $s: $(tail -n 2 "$T/$n.out")"; fi
done
if build/train "${B[@]}" --out_dir "$T/s_horizon" --max_steps 12 --lr_horizon 8 >"$T/s_horizon.out" 2>&1; then
  check "cosine with lr_horizon 8 < max_steps 12 (min_lr after it): logged lr = formula" lr_check "$T/s_horizon"
else bad "lr_horizon: $(tail -n 2 "$T/s_horizon.out")"; fi

# a cosine run of 10 steps, resumed to 20: the warning names both rates (the schedules' values at step 11)
if build/train "${B[@]}" --out_dir "$T/lr" --max_steps 10 >"$T/lr.out" 2>&1; then
  cp -r "$T/lr" "$T/lr_h"
  build/train "${B[@]}" --out_dir "$T/lr" --max_steps 20 --resume latest >"$T/lr2.out" 2>&1
  w=$(grep -c '^WARNING: the learning rate jumps' "$T/lr2.out")
  vals=$($PY -c "
import math
lr, mn, W = 1e-3, 1e-4, 2
cos = lambda s, S: mn + 0.5 * (1 + math.cos(math.pi * min(1, (s - W) / (S - W)))) * (lr - mn)
print('%.3e %.3e' % (cos(10, 10), cos(10, 20)))")
  read -r was now <<<"$vals"
  if [ "$w" = 1 ] && grep -q "step 11 had lr $was under the checkpoint's schedule (cosine, max_steps 10)" "$T/lr2.out" \
     && grep -q "gets $now under this run's (cosine, max_steps 20)" "$T/lr2.out" && grep -q -- "--lr_horizon 10" "$T/lr2.out"; then
    ok "resume to max_steps 20 warns once: lr $was -> $now at step 11, suggests --lr_horizon 10"
  else bad "lr jump warning ($w lines, expected lr $was -> $now): $(grep -m1 WARNING "$T/lr2.out" | head -c 400)"; fi
  check "the resumed run logs the new schedule's lr from step 11" lr_check "$T/lr" 11
  build/train "${B[@]}" --out_dir "$T/lr_h" --max_steps 20 --lr_horizon 10 --resume latest >"$T/lr3.out" 2>&1
  l10=$(sed -n '10p' "$T/lr_h/metrics.jsonl" | sed -E 's/.*"lr": ([^,]*),.*/\1/'); l11=$(sed -n '11p' "$T/lr_h/metrics.jsonl" | sed -E 's/.*"lr": ([^,]*),.*/\1/')
  if ! grep -q WARNING "$T/lr3.out" && [ "$(grep -c '"loss"' "$T/lr_h/metrics.jsonl")" = 20 ] && lr_check "$T/lr_h" >/dev/null \
     && $PY -c "import sys; sys.exit(0 if abs($l11 - 1e-4) < 1e-10 and $l10 >= $l11 else 1)"; then
    ok "resume to max_steps 20 with --lr_horizon 10: no warning, lr continues at min_lr (step 10 $l10, step 11 $l11)"
  else bad "lr_horizon extension: $(grep -m1 WARNING "$T/lr3.out" | head -c 300) steps 10/11 lr $l10 $l11"; fi
else bad "cosine run: $(tail -n 2 "$T/lr.out")"; fi
# wsd: stopped in its stable phase (a checkpoint at step 6 of 12), extended to 24 steps: no jump
if build/train "${B[@]}" --out_dir "$T/wsd" --max_steps 12 --lr_schedule wsd --lr_cooldown 4 --ckpt_every 6 --keep_last 5 \
     >"$T/wsd.out" 2>&1; then
  build/train "${B[@]}" --out_dir "$T/wsd" --max_steps 24 --lr_schedule wsd --lr_cooldown 4 \
    --resume "$T/wsd/ckpt_00000006.h5" >"$T/wsd2.out" 2>&1
  if ! grep -q WARNING "$T/wsd2.out" && [ "$(grep -c '"loss"' "$T/wsd/metrics.jsonl")" = 24 ] && lr_check "$T/wsd" >/dev/null; then
    ok "wsd resumed from its stable phase to twice the steps: no warning, lr = formula over 24 steps ($(lr_check "$T/wsd"))"
  else bad "wsd extension: $(grep -m1 'WARNING\|train:' "$T/wsd2.out" | head -c 300)"; fi
else bad "wsd run: $(tail -n 2 "$T/wsd.out")"; fi

# ---- 3. a run that completed no step does not lock its out_dir ----
build/train -c configs/tiny.conf "${A[@]}" --out_dir "$T/lock" --max_steps 2 --data_meta 0 --vocab_size 100 >"$T/l1.out" 2>"$T/l1.err"
rc=$?
if [ $rc -ne 0 ] && [ -f "$T/lock/metrics.jsonl" ] && [ ! -s "$T/lock/metrics.jsonl" ]; then
  if build/train -c configs/tiny.conf "${A[@]}" --out_dir "$T/lock" --max_steps 2 >"$T/l2.out" 2>&1 \
     && grep -q "completed no step" "$T/l2.out" && [ "$(grep -c '"loss"' "$T/lock/metrics.jsonl")" = 2 ]; then
    ok "a run that failed before its first step ($(sed "s|$T/||g" "$T/l1.err" | cut -c1-80)...) does not lock out_dir: the rerun trains, with a note"
  else bad "rerun after a failed start: $(tail -n 2 "$T/l2.out")"; fi
  ERR_ALSO='[ "$(grep -c loss "$T/lock/metrics.jsonl")" = 2 ]' expect_err "a run that completed steps still locks out_dir" \
    "exists from an earlier run|--force" 1 build/train -c configs/tiny.conf "${A[@]}" --out_dir "$T/lock" --max_steps 2
else bad "the bad-vocab run: exit $rc, metrics.jsonl $(ls -la "$T/lock" 2>&1 | tr '\n' ' ')"; fi

# ---- 4. the params line: the model's total, each tp rank's share ----
# params_expect TP: total and per-rank count from the config (every tensor; vocab padded to a multiple of tp)
params_expect() {
  $PY -c "
V, D, L, H, KV, F, tp = 257, 64, 2, 4, 2, 160, $1
hd = D // H; Vp = (V + tp - 1) // tp * tp
split = L * (D * D + 2 * D * KV * hd + D * D + 3 * D * F)
norms = 2 * L * D + D
print(2 * V * D + split + norms, 2 * Vp * D // tp + split // tp + norms)"
}
for tp in 1 2; do
  timeout $HANG_S $(launch $tp) build/train -c configs/tiny.conf "${A[@]}" --out_dir "$T/p$tp" --max_steps 1 --tp $tp >"$T/p$tp.out" 2>&1
  line=$(grep -m1 '^params ' "$T/p$tp.out")
  read -r tot per <<<"$(params_expect $tp)"
  if [[ "$line" == "params $tot ("*") in the model; $per ("*") on each of the tp = $tp ranks"* ]]; then
    ok "tp $tp: params line: ${line%% |*}"
  else bad "tp $tp: expected total $tot, per rank $per: '$line'"; fi
done
finish
