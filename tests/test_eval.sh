#!/usr/bin/env bash
# build/eval: per-position losses identical across layouts (cp 1, cp 4, tp 2 x cp 2) and equal to an
# independent PyTorch reference; bucketing consistent; sliding windows score every token once; several
# series on one plot; passkey grid; CSV parses, SVG is well-formed XML; bad inputs give one line.
cd "$(dirname "$0")/.."
source tests/lib.sh
run() { local np=$1; shift; $(launch "$np") build/eval "$@"; }   # np args...

# documents: every source file of these trees is one document (many are longer than 256 tokens)
build/prepare --out "$T/data" --val-frac 0.3 --seed 5 model attention comm checkpoint eval >/dev/null || { bad prepare; finish; }
VAL=$(ls "$T"/data/val_*.bin | head -1)
build/train --vocab_size 257 --d_model 64 --n_layer 2 --n_head 4 --n_kv_head 2 --d_ff 128 --max_seq_len 256 \
  --seq_len 128 --batch_size 4 --micro_batch 2 --max_steps 15 --lr 3e-3 --warmup_steps 2 --rope_scaling yarn \
  --rope_factor 2 --rope_original_max_seq_len 128 --train_data "$T/data/train_*.bin" --out_dir "$T/run" --ckpt_every 5 \
  >"$T/train.out" 2>&1 || { bad "training: $(tail -2 "$T/train.out")"; finish; }
CK="$T/run/ckpt_00000015.h5"
E=(--ckpt "$CK" --data "$VAL" --seq_len 256 --docs 3 --out "$T/ev")

# 1. per-position losses at three layouts
for lay in "1 1 1" "4 1 4" "4 2 2" "2 1 1"; do
  read -r np tp cp <<<"$lay"
  name="pos_tp${tp}cp${cp}"; [ $((tp * cp)) -lt "$np" ] && name="${name}dp$((np / (tp * cp)))"
  run "$np" "${E[@]}" --bucket 1 --tp "$tp" --cp "$cp" --name "$name" >"$T/o" 2>"$T/e" || bad "eval $name: $(head -c 300 "$T/e")"
done
$PY - "$T/ev" <<'PYEOF' && ok "per-position losses equal at cp 1, cp 4, tp 2 x cp 2 and dp 2 (1e-6 relative)" || bad "per-position losses differ across layouts"
import csv, sys
d = sys.argv[1]
a, b, c, e = ({int(r["bucket_lo"]): float(r["mean_nll"]) for r in csv.DictReader(open(f"{d}/pos_{n}.csv"))}
              for n in ("tp1cp1", "tp1cp4", "tp2cp2", "tp1cp1dp2"))
assert len(a) == len(b) == len(c) == len(e) == 256
worst = max(max(abs(a[p] - b[p]), abs(a[p] - c[p]), abs(a[p] - e[p])) / abs(a[p]) for p in a)
print(f"     worst rel diff {worst:.2e}")
sys.exit(0 if worst <= 1e-6 else 1)
PYEOF
$PY tests/eval_ref.py "$CK" "$VAL" 256 "$T/ev/pos_tp1cp1.csv" 3 >"$T/r" 2>&1 && ok "$(cat "$T/r")" || bad "reference: $(tail -3 "$T/r")"

# 2. bucketing: width 32 and log buckets from the per-position numbers, computed here by hand
run 1 "${E[@]}" --bucket 32 --name b32 >/dev/null 2>&1 && run 1 "${E[@]}" --log_buckets --name blog >"$T/blog.out" 2>&1 || bad "bucket runs"
$PY - "$T/ev" <<'PYEOF' && ok "fixed and log buckets equal exp(mean NLL) of their positions" || bad "bucketing"
import csv, math, sys
d = sys.argv[1]
pos = {int(r["bucket_lo"]): (float(r["mean_nll"]), int(r["tokens"])) for r in csv.DictReader(open(f"{d}/pos_tp1cp1.csv"))}
def check(name, edges):
    rows = list(csv.DictReader(open(f"{d}/{name}.csv")))
    assert [(int(r["bucket_lo"]), int(r["bucket_hi"])) for r in rows] == edges, [(r["bucket_lo"], r["bucket_hi"]) for r in rows]
    for r, (lo, hi) in zip(rows, edges):
        tok = sum(pos[p][1] for p in range(lo, hi)); mean = sum(pos[p][0] * pos[p][1] for p in range(lo, hi)) / tok
        assert int(r["tokens"]) == tok and abs(float(r["ppl"]) - math.exp(mean)) <= 1e-6 * math.exp(mean), (r, mean)
check("b32", [(i, i + 32) for i in range(0, 256, 32)])
check("blog", [(0, 1), (1, 2), (2, 4), (4, 8), (8, 16), (16, 32), (32, 64), (64, 128), (128, 256)])
PYEOF
grep -q "all positions" "$T/blog.out" && grep -q "\[128, 256)" "$T/blog.out" && ok "table on stdout" || bad "table"
grep -qE "eval series 1/1: 3/3, [0-9.]+ s elapsed, ETA 0.0 s" "$T/blog.out" && ok "progress with an ETA" || bad "no progress line with ETA"

# 3. sliding windows: every token of the first doc_len scored once; the first window equals the plain eval
run 1 --ckpt "$CK" --data "$VAL" --seq_len 128 --docs 2 --out "$T/ev" --bucket 1 --name plain128 >/dev/null 2>&1 &&
run 1 --ckpt "$CK" --data "$VAL" --seq_len 128 --docs 2 --out "$T/ev" --bucket 1 --stride 32 --doc_len 256 --name slide >"$T/s.out" 2>&1 \
  || bad "sliding run: $(tail -2 "$T/s.out")"
$PY - "$T/ev" <<'PYEOF' && ok "sliding windows (stride 32): 256 positions scored once each; window 1 equals the plain eval" || bad "sliding windows"
import csv, sys
d = sys.argv[1]
s = {int(r["bucket_lo"]): r for r in csv.DictReader(open(f"{d}/slide.csv"))}
p = {int(r["bucket_lo"]): r for r in csv.DictReader(open(f"{d}/plain128.csv"))}
assert len(s) == 256 and all(int(r["tokens"]) == 2 for r in s.values())
assert max(abs(float(s[i]["mean_nll"]) - float(p[i]["mean_nll"])) for i in range(128)) <= 1e-6
PYEOF

# 4. several series: two checkpoints x two RoPE settings on one plot; the setting changes the result
run 2 --ckpt "$T/run/ckpt_00000005.h5" --ckpt "$CK" --rope yarn:2:128 --rope yarn:4:128 --data "$VAL" --seq_len 256 \
  --docs 2 --cp 2 --out "$T/ev" --name multi >"$T/m.out" 2>&1 || bad "multi-series: $(tail -2 "$T/m.out")"
$PY - "$T/ev/multi.csv" "$T/ev/multi.svg" <<'PYEOF' && ok "4 series in the CSV and as 4 lines with a legend in well-formed SVG" || bad "multi-series outputs"
import csv, sys, xml.etree.ElementTree as ET
rows = list(csv.DictReader(open(sys.argv[1])))
labels = sorted({r["series"] for r in rows})
assert len(labels) == 4, labels
by = {l: [float(r["mean_nll"]) for r in rows if r["series"] == l] for l in labels}
a = [l for l in labels if "ckpt_00000015" in l]
assert by[a[0]] != by[a[1]], "the RoPE setting must change the losses"
root = ET.parse(sys.argv[2]).getroot()
assert root.tag == "{http://www.w3.org/2000/svg}svg"
ns = "{http://www.w3.org/2000/svg}"
assert len(root.findall(f".//{ns}polyline")) == 4
text = " ".join(t.text or "" for t in root.iter(f"{ns}text"))
assert all(l in text for l in labels)
PYEOF

# 5. passkey retrieval grid
run 2 --passkey --ckpt "$CK" --passkey_lens 128,256 --passkey_depths 0,0.5,1 --passkey_trials 2 --cp 2 --out "$T/ev" --name pk \
  >"$T/p.out" 2>&1 || bad "passkey run: $(tail -2 "$T/p.out")"
$PY - "$T/ev/pk_passkey.csv" "$T/ev/pk_passkey.svg" <<'PYEOF' && ok "passkey: CSV of 2 x 3 cells in [0, 1], digits of 2 x 5 per cell, SVG heatmap parses" || bad "passkey outputs"
import csv, sys, xml.etree.ElementTree as ET
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 6 and all(float(r["accuracy"]) in (0, 0.5, 1) for r in rows)
# digit accuracy: k of the 2 trials x 5 answer digits; a document counts as retrieved only with all 5 right
for r in rows:
    k = float(r["digit_accuracy"]) * 10
    assert abs(k - round(k)) < 1e-9 and 0 <= k <= 10 and float(r["digit_accuracy"]) >= float(r["accuracy"]), r
    assert round(k) >= 5 * round(float(r["accuracy"]) * 2), r
assert sorted({int(r["context"]) for r in rows}) == [128, 256]
ET.parse(sys.argv[2])
PYEOF

# 5b. tools/passkey_data.py (synthetic passkey training documents) writes exactly the format build/eval --passkey
#     scores (the strings of eval/passkey.c), lengths within bounds, and copy drills as documented
$PY tools/passkey_data.py --out "$T/pk.bin" --tokens 20000 --min-len 110 --max-len 300 --drill-frac 0.3 --drill-copies 4 --seed 4 >"$T/pkd" 2>&1 &&
$PY - "$T/pk.bin" eval/passkey.c <<'PYEOF' && ok "passkey_data.py: documents in eval/passkey.c's format, lengths 110..300, copy drills" || bad "passkey_data.py: $(tail -2 "$T/pkd")"
import re, sys, numpy as np
src = open(sys.argv[2]).read()
filler = re.search(r'FILLER\[\] = "([^"]*)"', src).group(1)
needle = re.search(r'"(The pass key is %s[^"]*)"', src).group(1).replace(".", r"\.").replace("%s", "{k}")
question = re.search(r'"(What is the pass key[^"]*)"', src).group(1).replace(".", r"\.").replace("?", r"\?").replace("%s", "{k}")
t = np.fromfile(sys.argv[1], dtype=np.uint16, offset=1024)
starts = np.flatnonzero(t == 256).tolist()
assert starts[0] == 0 and len(t) >= 20000
rep = filler * 20
def is_filler(s): return s == "" or s in rep
npk = ndrill = 0
for a, b in zip(starts, starts[1:] + [len(t)]):
    text = bytes(t[a + 1:b].astype(np.uint8)).decode()
    m = re.fullmatch(r"(.*?)The pass key is (\d{5})\. (.*)", text, re.S)
    if m:
        k = m.group(2)
        full = re.fullmatch("(.*?)" + needle.format(k=k) + "(.*?)" + question.format(k=k), text, re.S)
        assert full and is_filler(full.group(1)) and is_filler(full.group(2)), text
        assert 110 <= b - a <= 300, b - a
        npk += 1
    else:
        m = re.match(r"((?:\d{5} ){1,4}\d{5}\. )", text)
        assert m, text
        keys = m.group(1)
        parts = text.split(keys)
        assert parts[0] == "" and parts[-1] == "" and 3 <= len(parts) <= 5 and all(is_filler(p) for p in parts), text
        assert b - a <= 300, b - a
        ndrill += 1
frac = ndrill / (npk + ndrill)
assert 0.15 < frac < 0.45, frac
print(f"     {npk} passkey documents, {ndrill} drills")
PYEOF

# 5c. each series' ETA comes from its own rate: two equal series (one checkpoint twice, sliding windows so that
#     a series takes ~1 s); series 2's first progress line counts its own time, not series 1's too, and its ETA
#     predicts what series 2 then took (before: elapsed since series 1 began, ETA ~4x too long)
run 1 --ckpt "$CK" --ckpt "$CK" --data "$VAL" --seq_len 128 --stride 1 --doc_len 512 --docs 4 --out "$T/ev" --name eta \
  >"$T/eta.out" 2>"$T/eta.err" || bad "ETA run: $(tail -2 "$T/eta.err")"
$PY - "$T/eta.err" <<'PYEOF' && ok "the second series' elapsed time and ETA are its own" || bad "ETA of the second series: $(grep 'eval series' "$T/eta.err" | tr '\n' ' ')"
import re, sys
lines = [re.match(r"eval series (\d)/2: (\d+)/4, ([0-9.]+) s elapsed, ETA ([0-9.]+) s", l) for l in open(sys.argv[1])]
s = {k: [(int(m.group(2)), float(m.group(3)), float(m.group(4))) for m in lines if m and m.group(1) == k] for k in "12"}
assert [d for d, _, _ in s["1"]] == [d for d, _, _ in s["2"]] == [1, 2, 3, 4], s
s1_total = s["1"][-1][1]
_, e2_first, eta2_first = s["2"][0]
s2_rest = s["2"][-1][1] - e2_first                  # what series 2 took after its first line
print(f"     series 1 {s1_total:.1f} s; series 2 after 1/4: {e2_first:.1f} s elapsed, ETA {eta2_first:.1f} s, took {s2_rest:.1f} s more")
assert s1_total >= 0.3, "too fast to tell"
assert e2_first < s1_total, "series 2's elapsed includes series 1"
assert eta2_first <= 2.5 * s2_rest + 0.3, "series 2's ETA is far off its remaining time"
PYEOF

# 5d. without an end-of-document token (--eod -1) the units are consecutive windows of the stream, and the series
#     line says so (not "documents")
run 1 "${E[@]}" --eod -1 --name nodoc >"$T/nodoc.out" 2>&1 || bad "--eod -1 run: $(tail -2 "$T/nodoc.out")"
grep -q "^series 1: .* — 3 windows at context 256 (consecutive windows of the stream; no end-of-document token)$" "$T/nodoc.out" &&
  ! grep "^series" "$T/nodoc.out" | grep -q "documents" \
  && ok "--eod -1: $(grep '^series 1' "$T/nodoc.out" | sed 's/.* — //')" || bad "--eod -1 series line: $(grep '^series' "$T/nodoc.out")"

# 5e. --docs N with fewer documents (or packed windows) than N: a note says how many the results cover
NDOC=$($PY -c "
import numpy as np, sys
t = np.fromfile(sys.argv[1], dtype=np.uint16, offset=1024)
s = np.flatnonzero(t == 256).tolist(); e = s[1:] + [len(t)]
print(sum(1 for a, b in zip(s, e) if b - a >= 257), (len(t) - 1) // 256)" "$VAL")
read -r ND NW <<<"$NDOC"
run 1 --ckpt "$CK" --data "$VAL" --seq_len 256 --docs 10000 --out "$T/ev" --name many >"$T/many.out" 2>&1 || bad "--docs 10000 run: $(tail -2 "$T/many.out")"
grep -qF "note: data '$VAL' has only $ND documents of at least 257 tokens, fewer than --docs 10000: the results cover those $ND" "$T/many.out" &&
  grep -q "^series 1: .* — $ND documents at context 256" "$T/many.out" \
  && ok "--docs 10000 with $ND documents: a note, and $ND scored" || bad "--docs beyond the data: $(grep -E '^(note|series)' "$T/many.out")"
run 1 --ckpt "$CK" --data "$VAL" --seq_len 256 --doc_mask --docs 10000 --out "$T/ev" --name manyw >"$T/manyw.out" 2>&1 || bad "--doc_mask --docs 10000 run: $(tail -2 "$T/manyw.out")"
grep -qF "note: data '$VAL' has only $NW packed windows of 256 + 1 tokens, fewer than --docs 10000: the results cover those $NW" "$T/manyw.out" &&
  grep -q "^series 1: .* — $NW windows at context 256" "$T/manyw.out" \
  && ok "--doc_mask --docs 10000 with $NW packed windows: a note, and $NW scored" || bad "--doc_mask --docs beyond the data: $(grep -E '^(note|series)' "$T/manyw.out")"
run 1 "${E[@]}" --name fewdocs >"$T/few.out" 2>&1 && ! grep -q "^note: data" "$T/few.out" \
  && ok "--docs 3 with enough documents: no note" || bad "a note with enough documents: $(grep '^note' "$T/few.out")"

# 5f. options as --name=value and with dashes; an unknown option names the nearest one
run 1 --ckpt="$CK" --data="$VAL" --seq-len=256 --docs=3 --out="$T/ev" --name=dashes --log-buckets --rope-factor=4 >"$T/dash.out" 2>&1 &&
  run 1 "${E[@]}" --log_buckets --rope_factor 4 --name nodash >/dev/null 2>&1 && cmp -s "$T/ev/dashes.csv" "$T/ev/nodash.csv" \
  && ok "--seq-len=256 --rope-factor=4 --log-buckets read as --seq_len 256 --rope_factor 4 --log_buckets" || bad "--name=value / dashes: $(tail -2 "$T/dash.out")"

# 6. bad input: one line, non-zero exit
# (eval_err name pattern np args...: build/eval's progress lines on stderr do not count)
eval_err() { ERR_SKIP="^eval series" expect_err "$1" "$2" "$3" build/eval "${@:4}"; }
eval_err "missing checkpoint" "'$T/none.h5' does not exist" 1 --ckpt "$T/none.h5" --data "$VAL" --seq_len 128 --out "$T/ev" --name x
eval_err "directory without latest" "has no 'latest' pointer" 1 --ckpt "$T/data" --data "$VAL" --seq_len 128 --out "$T/ev" --name x
eval_err "data shorter than the context" "has no document of 100001 tokens" 1 --ckpt "$CK" --data "$VAL" --seq_len 100000 --out "$T/ev" --name x
eval_err "bucket larger than the context" "bucket 512 is larger than the context 256" 1 --ckpt "$CK" --data "$VAL" --seq_len 256 --bucket 512 --out "$T/ev" --name x
eval_err "unknown override" "unknown option or override '--n_layer'" 1 --ckpt "$CK" --data "$VAL" --seq_len 128 --n_layer 3 --out "$T/ev" --name x
eval_err "bad rope spec" "invalid value 'ntk:2' for --rope" 1 --ckpt "$CK" --data "$VAL" --seq_len 128 --rope ntk:2 --out "$T/ev" --name x
eval_err "seq_len not divisible by 2 cp" "seq_len 100 is not divisible by 8" 4 --ckpt "$CK" --data "$VAL" --seq_len 100 --cp 4 --out "$T/ev" --name x
eval_err "missing data" "no files match" 1 --ckpt "$CK" --data "$T/nothing/*.bin" --seq_len 128 --out "$T/ev" --name x
eval_err "output exists" "exists; pass --force" 1 "${E[@]}" --name b32
eval_err "no checkpoint given" "no --ckpt given" 1 --data "$VAL" --seq_len 128
eval_err "misspelt option" "unknown option or override '--bukcet' — did you mean '--bucket'?" 1 "${E[@]}" --bukcet 8 --name x
eval_err "misspelt override" "unknown option or override '--rope_factr' — did you mean '--rope_factor'?" 1 "${E[@]}" --rope-factr=2 --name x
eval_err "flag given a value" "option '--force' takes no value" 1 "${E[@]}" --force=1 --name x
finish
