#!/usr/bin/env bash
# Document-aware packing (pack = doc_start | best_fit) and upsampling through build/train (issue 22):
#  - padding is never trained on: the first step's loss over best_fit windows (one 65-token document + 64 padding
#    slots each) equals build/eval's mean NLL of the same documents under the same initial weights;
#  - layout independence: best_fit and doc_start (with doc_mask) give the one-process losses at tp 2, cp 2 (both
#    layouts) and dp 2, and a resume on another layout continues the losses of the uninterrupted run; a resume with
#    another packing is refused (--force continues, with a note);
#  - the printed statistics: best_fit cuts no document shorter than a window, stream windows cut many;
#  - two sources with weights 1 and 3: the trained mixture equals the weighted token shares, also in packing.json;
#  - the document length distribution: eval --doc_lengths against a count, build/prepare --doc-lengths = eval's;
#  - bad input: pack without an eod, source weights with stream windows, a bad weight.
cd "$(dirname "$0")/.."
source tests/lib.sh

# D1: 8 documents of exactly 65 tokens (eod 256 + 64 bytes); D2: documents of 2..400 tokens (two sources)
$PY - "$T" <<'EOF' || { bad "making data"; finish; }
import json, os, random, sys
import numpy as np
T = sys.argv[1]
def shard(path, toks):
    h = np.zeros(256, np.int32); h[0], h[1], h[2] = 20240520, 1, len(toks)
    with open(path, "wb") as f: f.write(h.tobytes()); f.write(np.array(toks, np.uint16).tobytes())
def meta(d, docs, ntok):
    json.dump({"format": "ringlm-data-1", "tokenizer": "bytes", "tokenizer_sha256": None, "vocab_size": 257, "eod_id": 256,
               "bos_id": None, "dtype": "uint16", "documents": {"train": docs, "val": 0}, "tokens": {"train": ntok, "val": 0},
               "shards": {"train": 1, "val": 0}, "command": "test_pack.sh"}, open(f"{d}/meta.json", "w"))
r = random.Random(5)
os.makedirs(f"{T}/d1"); toks = []
for i in range(8): toks += [256] + [r.randrange(32, 127) for _ in range(64)]
shard(f"{T}/d1/train_000000.bin", toks); meta(f"{T}/d1", 8, len(toks))
for name, n, lo, hi in (("a", 300, 2, 400), ("b", 150, 2, 160)):
    os.makedirs(f"{T}/{name}"); toks = []
    for i in range(n):
        L = r.randrange(lo, hi) if r.random() < 0.85 else r.randrange(hi, 3 * hi)
        toks += [256] + [r.randrange(32, 127) for _ in range(L - 1)]
    shard(f"{T}/{name}/train_000000.bin", toks); meta(f"{T}/{name}", n, len(toks))
EOF
CONF=configs/tiny.conf

# ---- 1. padding never trained on ----
build/train -c $CONF --train_data "$T/d1" --val_data "" --out_dir "$T/p0" --max_steps 0 --seq_len 128 >/dev/null 2>&1
build/train -c $CONF --train_data "$T/d1" --val_data "" --out_dir "$T/p1" --max_steps 1 --seq_len 128 --batch_size 8 \
  --micro_batch 4 --pack best_fit --log_every 1 --grad_clip 0 >"$T/p1.out" 2>&1
build/eval --ckpt "$T/p0" --data "$T/d1" --seq_len 64 --docs 0 --out "$T/p0e" --name e >"$T/p0e.out" 2>&1
l_train=$(sed -nE 's/^\{"step": 1, "loss": ([^,]*),.*/\1/p' "$T/p1/metrics.jsonl")
l_eval=$(awk '/^all positions/ {print $(NF-1)}' "$T/p0e.out")
win=$(sed -nE 's/^packing: best_fit: ([0-9]+) windows.*/\1/p' "$T/p1.out")
if [ "$win" = 8 ] && $PY -c "import sys; a, b = float('$l_train'), float('$l_eval'); sys.exit(0 if abs(a - b) <= 2e-5 * b else 1)" 2>/dev/null; then
  ok "padding is not trained on: 8 windows of one 65-token document + 64 padding slots; step-1 loss $l_train = eval's NLL of the 8 documents $l_eval"
else bad "padding: windows '$win', step-1 loss '$l_train' vs eval '$l_eval': $(grep -m1 'train:\|packing' "$T/p1.out")"; fi

# ---- 2. layouts and resume ----
STEPS=4
A=(--train_data "$T/a" --val_data "" --seq_len 128 --batch_size 8 --micro_batch 2 --max_steps $STEPS --log_every 1 --doc_mask 1)
for mode in best_fit doc_start; do
  r1="${mode}_1"; train_run_ok=1
  timeout $HANG_S build/train -c $CONF "${A[@]}" --pack $mode --out_dir "$T/$r1" >"$T/$r1.out" 2>&1 || { bad "$mode 1 rank: $(tail -n 2 "$T/$r1.out")"; continue; }
  for lay in "tp 2:--tp 2" "cp 2 zigzag:--cp 2" "cp 2 contiguous:--cp 2 --cp_layout contiguous" "dp 2:--micro_batch 2"; do
    name=${lay%%:*}; args=${lay#*:}; d="${mode}_${name// /_}"
    timeout $HANG_S $(launch 2) build/train -c $CONF "${A[@]}" --pack $mode --out_dir "$T/$d" $args >"$T/$d.out" 2>&1 \
      && check "$mode, $name = 1 rank" same_losses "$r1" "$d" 1e-5 || bad "$mode $name: $(tail -n 2 "$T/$d.out")"
  done
done
# resume: 2 steps on 1 rank, then steps 3-4 on cp 2 = the uninterrupted run
timeout $HANG_S build/train -c $CONF "${A[@]}" --pack best_fit --out_dir "$T/res" --max_steps 2 >/dev/null 2>&1
timeout $HANG_S $(launch 2) build/train -c $CONF "${A[@]}" --pack best_fit --out_dir "$T/res" --cp 2 --resume latest >"$T/res.out" 2>&1 \
  && check "best_fit: 2 steps on 1 rank + 2 resumed on cp 2 = 4 uninterrupted" same_losses best_fit_1 res 1e-5 \
  || bad "resume: $(tail -n 2 "$T/res.out")"

# a resume with another packing: refused (the table differs), --force continues with a note
cp -r "$T/res" "$T/res2"
ERR_ALSO='[ "$(grep -c loss "$T/res2/metrics.jsonl")" = 4 ]' expect_err "resume with pack doc_start from a best_fit checkpoint" \
  "was trained on packed windows (pack = best_fit|this run asks for pack = doc_start|--force" 1 \
  build/train -c $CONF "${A[@]}" --pack doc_start --out_dir "$T/res2" --resume "$T/res2/ckpt_00000002.h5" --max_steps 6
if build/train -c $CONF "${A[@]}" --pack doc_start --out_dir "$T/res2" --resume latest --max_steps 6 --force >"$T/res2.out" 2>&1 \
   && grep -q "note: --force: the packing or its data changed" "$T/res2.out"; then ok "--force: the resume continues on the new table, with a note"
else bad "--force resume: $(tail -n 2 "$T/res2.out")"; fi
# every other key that defines the table of windows, changed alone, is refused too (a checkpoint of a best_fit run
# with length upsampling on, so that upsample_factor matters): pack_buffer, upsample_len, upsample_factor, a source
# weight, seq_len, train_data
U=(--pack best_fit --pack_buffer 64 --upsample_len 200 --upsample_factor 2)
timeout $HANG_S build/train -c $CONF "${A[@]}" "${U[@]}" --out_dir "$T/resu" --max_steps 2 >"$T/resu.out" 2>&1 || bad "upsampled run: $(tail -n 2 "$T/resu.out")"
while IFS='|' read -r what pat args; do
  # shellcheck disable=SC2086
  ERR_ALSO='[ "$(grep -c loss "$T/resu/metrics.jsonl")" = 2 ]' expect_err "resume with another $what" \
    "was trained on packed windows (pack = best_fit, pack_buffer 64, upsample_len 200, upsample_factor 2, seq_len 128|$pat|--force" 1 \
    build/train -c $CONF "${A[@]}" "${U[@]}" --out_dir "$T/resu" --resume latest --max_steps 4 $args
done <<EOF2
pack_buffer|this run asks for pack = best_fit, pack_buffer 32,|--pack_buffer 32
upsample_len|pack_buffer 64, upsample_len 300,|--upsample_len 300
upsample_factor|upsample_len 200, upsample_factor 3,|--upsample_factor 3
source weight|train_data '$T/a@2'|--train_data $T/a@2
seq_len|upsample_factor 2, seq_len 64,|--seq_len 64
train_data|train_data '$T/b'|--train_data $T/b
EOF2

# ---- 3. statistics ----
line=$(grep '^packing: best_fit' "$T/best_fit_1.out")
if [[ "$line" =~ that\ fit\ a\ window,\ ([0-9]+)\ are\ cut.*stream\ windows\ would\ cut\ ([0-9]+) ]] && [ "${BASH_REMATCH[1]}" = 0 ] \
   && [ "${BASH_REMATCH[2]}" -gt 30 ]; then ok "best_fit statistics: ${line#packing: }"
else bad "best_fit statistics: '$line'"; fi

# ---- 4. a mixture of two sources, weights 1 and 3 ----
timeout $HANG_S build/train -c $CONF --train_data "$T/a@1;$T/b@3" --val_data "" --seq_len 128 --max_steps 1 --pack best_fit \
  --out_dir "$T/mix" >"$T/mix.out" 2>&1
mline=$(grep '^mixture:' "$T/mix.out")
if $PY - "$T" "$mline" <<'EOF'; then ok "mixture: ${mline#mixture: }"; else bad "mixture: '$mline'"; fi
import re, sys
import numpy as np
T, line = sys.argv[1], sys.argv[2]
def targets(d):   # document tokens minus one per document (the first token of each is only an input)
    t = np.fromfile(f"{T}/{d}/train_000000.bin", np.uint16, offset=1024)
    return len(t) - int((t == 256).sum())
a, b = targets("a"), targets("b")
got = [float(x) for x in re.findall(r"of the data's tokens -> ([0-9.]+)% of those trained on", line)]
want = [100 * a / (a + 3 * b), 100 * 3 * b / (a + 3 * b)]
import json
pj = json.load(open(f"{T}/mix/packing.json"))
rec = [100 * x["share_trained"] for x in pj["sources"]]
print("trained shares", got, "expected", [round(w, 1) for w in want], "packing.json", [round(x, 2) for x in rec])
sys.exit(0 if len(got) == 2 and all(abs(g - w) < 0.06 for g, w in zip(got, want)) and pj["pack"] == "best_fit"
         and all(abs(a - b) < 0.06 for a, b in zip(rec, got)) else 1)
EOF

# ---- 5. the document length distribution (build/eval --doc_lengths) against a count here ----
if build/eval --doc_lengths --data "$T/a" --seq_len 128 --out "$T/dl" --name a >"$T/dl.out" 2>&1; then
  if $PY - "$T" >"$T/dl.chk" 2>&1 <<'EOF'; then ok "eval --doc_lengths: $(cat "$T/dl.chk"): $(head -n 2 "$T/dl.out" | tail -n 1 | cut -c1-120)..."; else bad "doc_lengths: $(tail -n 3 "$T/dl.chk")"; fi
import csv, sys
import numpy as np
T = sys.argv[1]
t = np.fromfile(f"{T}/a/train_000000.bin", np.uint16, offset=1024)
starts = np.flatnonzero(t == 256); lens = np.diff(np.append(starts, len(t)))
want = {}
for L in lens:
    k = int(L).bit_length() - 1
    d, n = want.get(k, (0, 0)); want[k] = (d + 1, n + int(L))
rows = list(csv.DictReader(open(f"{T}/dl/a_doclen.csv")))
got = {int(r["bucket_lo"]).bit_length() - 1: (int(r["documents"]), int(r["tokens"])) for r in rows}
assert got == want, (got, want)
import xml.dom.minidom as m
assert len(m.parse(f"{T}/dl/a_doclen.svg").getElementsByTagName("rect")) >= 2 * len(rows)
fit = sum(1 for L in lens if L <= 129)
line = open(f"{T}/dl.out").read().splitlines()[1]
assert line.startswith(f"window 128: {fit} documents"), (line, fit)
print(len(rows), "buckets and", len(lens), "documents as counted here,", fit, "fit a window")
EOF
else bad "eval --doc_lengths: $(tail -n 2 "$T/dl.out")"; fi

# build/prepare --doc-lengths W prints the same distribution as eval --doc_lengths on its training shards
if build/prepare --out "$T/pl" --val-frac 0 --doc-lengths 64 model attention >"$T/pl.out" 2>&1 \
   && build/eval --doc_lengths --data "$T/pl/train_*.bin" --seq_len 64 --out "$T/pl_e" >"$T/pl_e.out" 2>&1; then
  a=$(sed -n '/^training documents:/,$p' "$T/pl.out" | tail -n +2); b=$(sed -n '/^document lengths:/,/^wrote/p' "$T/pl_e.out" | sed '1d;$d')
  n=$(echo "$a" | grep -c '^\[')
  if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$n" -gt 2 ]; then ok "prepare --doc-lengths 64: the table of eval --doc_lengths ($n buckets; $(grep '^training documents' "$T/pl.out" | cut -c1-90))"
  else bad "prepare --doc-lengths: '$(echo "$a" | head -n 3)' vs '$(echo "$b" | head -n 3)'"; fi
else bad "prepare --doc-lengths: $(tail -n 2 "$T/pl.out" "$T/pl_e.out")"; fi

# ---- 6. bad input ----
expect_train_err $CONF "pack without an eod token" "pack = best_fit needs the end-of-document token" 1 \
  --train_data "$T/a" --val_data "" --data_meta 0 --vocab_size 300 --pack best_fit
expect_train_err $CONF "source weights with stream windows" "source weights ('@W'), which need pack = doc_start or best_fit" 1 \
  --train_data "$T/a@2" --val_data ""
expect_train_err $CONF "a weight out of range" "its weight 2000 must be in [0, 1000]" 1 --train_data "$T/a@2000" --val_data "" --pack best_fit
expect_train_err $CONF "upsampling with stream windows" "upsample_len / upsample_factor need pack = doc_start or best_fit" 1 \
  --train_data "$T/a" --val_data "" --upsample_len 100 --upsample_factor 2
expect_train_err $CONF "an unknown pack" "pack = 'bestfit' must be stream, doc_start or best_fit" 1 --train_data "$T/a" --val_data "" --pack bestfit
finish
