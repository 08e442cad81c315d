#!/usr/bin/env bash
# build/eval: per-position losses identical across layouts (cp 1, cp 4, tp 2 x cp 2) and equal to an
# independent PyTorch reference; bucketing consistent; sliding windows score every token once; several
# series on one plot, each --rope / --rope_* key / --label applying to the series of the --ckpt it follows (the RoPE
# used in the table, CSV and legend; a WARNING when it replaces the trained scaling); the data's meta.json (default
# --eod, contradictions and other tokenizers refused); passkey grid, refused for a checkpoint trained on a non-byte
# tokenizer; CSV parses, SVG is well-formed XML; bad inputs give one line.
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
CK="$T/run/ckpt_00000015.h5"; CK5="$T/run/ckpt_00000005.h5"
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
# an override with another original length than the trained 128 (yarn:2:64) and another factor (yarn:3:128), at
# cp 2: each series' RoPE (its factor and its original length) against the reference with that RoPE
for rope in yarn:2:64 yarn:3:128; do
  run 2 "${E[@]}" --bucket 1 --cp 2 --rope "$rope" --name "pos_${rope//:/_}" >"$T/o" 2>"$T/e" || bad "eval --rope $rope: $(head -c 300 "$T/e")"
  $PY tests/eval_ref.py "$CK" "$VAL" 256 "$T/ev/pos_${rope//:/_}.csv" 3 "$rope" >"$T/r" 2>&1 && ok "--rope $rope (trained yarn:2:128): $(cat "$T/r")" \
    || bad "--rope $rope against the reference: $(tail -3 "$T/r")"
done

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

# 4. several series: two checkpoints, each with two RoPE settings (a --rope applies to the --ckpt it follows; more
#    --rope after one --ckpt add series of it), on one plot; the setting changes the result. Both checkpoints were
#    trained with yarn:2:128, so only the two yarn:4:128 series warn.
run 2 --ckpt "$CK5" --rope yarn:2:128 --rope yarn:4:128 --ckpt "$CK" --rope yarn:2:128 --rope yarn:4:128 --data "$VAL" --seq_len 256 \
  --docs 2 --cp 2 --out "$T/ev" --name multi >"$T/m.out" 2>"$T/m.err" || bad "multi-series: $(tail -2 "$T/m.err")"
[ "$(grep -c '^WARNING' "$T/m.err")" -eq 2 ] && grep -q "^WARNING: series 2 (ckpt_00000005.h5, rope yarn:4:128): evaluated with RoPE yarn:4:128, not the yarn:2:128 " "$T/m.err" \
  && grep -q "^WARNING: series 4 (ckpt_00000015.h5, rope yarn:4:128): evaluated with RoPE yarn:4:128, not the yarn:2:128 " "$T/m.err" \
  && ok "a WARNING for each series whose --rope replaces the trained yarn:2:128 (yarn:4:128), none for --rope yarn:2:128" \
  || bad "RoPE warnings of the multi-series run: $(grep -c '^WARNING' "$T/m.err") lines: $(grep '^WARNING' "$T/m.err" | head -c 600)"
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
assert {(r["series"], r["rope"], r["rope_trained"]) for r in rows} == {(l, l.split("rope ")[1], "yarn:2:128") for l in labels}, rows[0]
PYEOF

# 4b. RoPE per series: --ckpt CK5 --ckpt CK --rope none --ckpt CK --label "as trained" --ckpt CK --rope_factor 4 is four
#     series: CK5 as trained (the old checkpoints x settings rule ran it with none too), CK with plain RoPE, CK as
#     trained, CK with the one key rope_factor 4. Each series' per-bucket losses equal a run of that checkpoint alone
#     with those RoPE keys; the plain-RoPE series differs from the as-trained one; the CSV's rope / rope_trained
#     columns, the table's RoPE row and the SVG legend say what ran; one WARNING each for the two overrides.
P=(--data "$VAL" --seq_len 256 --docs 2 --log_buckets --out "$T/ev")
run 1 --ckpt "$CK5" --ckpt "$CK" --rope none --ckpt "$CK" --label "as trained" --ckpt "$CK" --rope_factor 4 "${P[@]}" --name per \
  >"$T/per.out" 2>"$T/per.err" || bad "per-series RoPE run: $(tail -2 "$T/per.err")"
run 1 --ckpt "$CK5" "${P[@]}" --name per1 >/dev/null 2>&1 && run 1 --ckpt "$CK" --rope_scaling none "${P[@]}" --name per2 >/dev/null 2>&1 &&
  run 1 --ckpt "$CK" "${P[@]}" --name per3 >"$T/per3.out" 2>"$T/per3.err" && run 1 --ckpt "$CK" --rope yarn:4:128 "${P[@]}" --name per4 >/dev/null 2>&1 \
  || bad "single-series RoPE runs"
$PY - "$T/ev" <<'PYEOF' && ok "--rope and --rope_* keys apply to the series of their --ckpt: each of 4 series equals its own single run; rope columns" || bad "RoPE per series"
import csv, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(f"{d}/per.csv")))
labels = list(dict.fromkeys(r["series"] for r in rows))
assert labels == ["ckpt_00000005.h5", "ckpt_00000015.h5, rope none", "as trained", "ckpt_00000015.h5, rope yarn:4:128"], labels
def nll(rs, l=None): return [float(r["mean_nll"]) for r in rs if l is None or r["series"] == l]
for l, k in zip(labels, "1234"):
    alone = list(csv.DictReader(open(f"{d}/per{k}.csv")))
    a, b = nll(rows, l), nll(alone)
    assert len(a) == len(b) == 9 and max(abs(x - y) / abs(y) for x, y in zip(a, b)) <= 1e-9, (l, a, b)
    assert {(r["rope"], r["rope_trained"]) for r in alone} == {(r["rope"], r["rope_trained"]) for r in rows if r["series"] == l}
ropes = [next((r["rope"], r["rope_trained"]) for r in rows if r["series"] == l) for l in labels]
assert ropes == [("yarn:2:128", "yarn:2:128"), ("none", "yarn:2:128"), ("yarn:2:128", "yarn:2:128"), ("yarn:4:128", "yarn:2:128")], ropes
plain, trained = nll(rows, labels[1]), nll(rows, labels[2])
worst = max(abs(x - y) for x, y in zip(plain, trained))
print(f"     plain RoPE vs as trained: largest per-bucket NLL difference {worst:.2e}")
assert worst > 1e-6, "the override did not change the losses"
PYEOF
$PY - "$T/ev/per.svg" <<'PYEOF' && ok "the SVG legend gives each series' RoPE under its label" || bad "RoPE in the legend"
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
leg = [t.text for g in ET.parse(sys.argv[1]).getroot().iter(f"{ns}g") if g.get("id") == "legend" for t in g.iter(f"{ns}text")]
assert leg == ["ckpt_00000005.h5", "RoPE yarn:2:128 (as trained)", "ckpt_00000015.h5, rope none",
               "RoPE none (override; trained yarn:2:128)", "as trained", "RoPE yarn:2:128 (as trained)",
               "ckpt_00000015.h5, rope yarn:4:128", "RoPE yarn:4:128 (override; trained yarn:2:128)"], leg
PYEOF
grep -qE "^RoPE +\| yarn:2:128 \(as trained\) +\| none \(override; trained yarn:2:128\) +\| yarn:2:128 \(as trained\) +\| yarn:4:128 \(override; trained yarn:2:128\)$" "$T/per.out" \
  && grep -q "^series 2: ckpt_00000015.h5, rope none \[RoPE none (override; trained yarn:2:128)\] — 2 documents" "$T/per.out" \
  && ok "the table's RoPE row and the series lines" || bad "RoPE in the table: $(grep -E '^(RoPE|series)' "$T/per.out")"
[ "$(grep -c '^WARNING' "$T/per.err")" -eq 2 ] && grep -q "^WARNING: series 2 (ckpt_00000015.h5, rope none): evaluated with RoPE none, not the yarn:2:128 that checkpoint $CK was trained with" "$T/per.err" \
  && grep -q "^WARNING: series 4 (ckpt_00000015.h5, rope yarn:4:128): evaluated with RoPE yarn:4:128, not the yarn:2:128 " "$T/per.err" \
  && ! grep -q WARNING "$T/per3.err" && ok "a WARNING for plain RoPE and for rope_factor 4 on a yarn:2:128 checkpoint; none as trained" \
  || bad "RoPE warnings: $(grep WARNING "$T/per.err" "$T/per3.err" | head -c 600)"

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

# 5b'. tools/experiments/passkey_digits.py builds eval/passkey.h's document (needle at round(depth * (len - 103)) + 1,
#      exactly len tokens with the 5 answer digits) and reports one line per document and the two totals
$PY - <<'PYEOF' && ok "passkey_digits.py: its prompts are eval/passkey.h's documents without the answer (12 lengths x depths)" || bad "passkey_digits.py prompts"
import sys
sys.path.insert(0, "tools/experiments")
from passkey_digits import prompt
for L in (103, 256, 301):
    for d in (0, 0.3, 0.5, 1):
        p = prompt(L, d, "48213")
        pos = int(d * (L - 103) + 0.5) + 1
        text = bytes(p[1:]).decode()
        assert p[0] == 256 and len(p) + 5 == L, (L, d, len(p))
        assert text[pos - 1:].startswith("The pass key is 48213. Remember it. 48213 is the pass key. "), (L, d, text)
        assert text.endswith("What is the pass key? The pass key is "), text
PYEOF
if $PY tools/experiments/passkey_digits.py "$CK" --lens 128 --depths 0,1 --keys 48213 >"$T/pd.out" 2>&1 \
   && [ "$(grep -c '^length 128 depth [01] key 48213: greedy answer .....$' "$T/pd.out")" = 2 ] \
   && grep -q '^digits right given the previous ones (teacher-forced): digit 1 [0-2]/2, digit 2 [0-2]/2, digit 3 [0-2]/2, digit 4 [0-2]/2, digit 5 [0-2]/2$' "$T/pd.out" \
   && grep -q '^greedy answers: [0-2]/2 right, [0-2]/2 the key' "$T/pd.out" \
   && $PY tools/experiments/passkey_digits.py "$CK" --lens 128 --depths 0 --keys 48213,70592 --drill-gaps 0 >"$T/pd2.out" 2>&1 \
   && [ "$(grep -c '^drill gap 0 key \(48213 70592\|70592 48213\): greedy copy [47]...........$' "$T/pd2.out")" = 2 ] \
   && grep -q '^drill copies at gap 0: [0-2]/2 exact, digits right in place [0-9]*/18$' "$T/pd2.out"; then
  ok "passkey_digits.py on a checkpoint: $(tail -n 1 "$T/pd.out"); $(tail -n 1 "$T/pd2.out")"
else bad "passkey_digits.py: $(tail -n 3 "$T/pd.out")"; fi

# 5c. each series' ETA comes from its own rate: two equal series (one checkpoint twice) on the test clock that
#     advances 1 s per reading (RINGLM_TEST_PROGRESS_TICK: no verdict depends on this machine's speed; 3 readings a
#     document: after each of the model's 2 layers, for the lines inside a document, and at its end); series 2's
#     first progress line counts its own time, not series 1's too, and its ETA is its own rate times what is left
#     (before: elapsed since series 1 began, ETA ~4x too long)
RINGLM_TEST_PROGRESS_TICK=1 run 1 --ckpt "$CK" --ckpt "$CK" --data "$VAL" --seq_len 128 --doc_len 512 --docs 4 --out "$T/ev" --name eta \
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
assert [e for _, e, _ in s["1"]] == [e for _, e, _ in s["2"]] == [3, 6, 9, 12], "elapsed: three ticks per document"
assert all(abs(eta - e / d * (4 - d)) < 1e-9 for k in "12" for d, e, eta in s[k]), "ETA = elapsed / done x left"
assert e2_first < s1_total, "series 2's elapsed includes series 1"
assert eta2_first == s2_rest, "series 2's ETA is not what series 2 then took"
PYEOF

# 5c'. progress inside a document (one window at 100K tokens takes minutes): on the test clock at 10 s per reading
#     (every reading is PROGRESS_S after the last line) a line after every layer of every sliding window, with the
#     window, the layer, the elapsed time and the ETA from the fraction done, computed here
RINGLM_TEST_PROGRESS_TICK=10 run 1 --ckpt "$CK" --data "$VAL" --seq_len 128 --stride 64 --doc_len 256 --docs 2 --out "$T/ev" \
  --name inner >"$T/inner.out" 2>"$T/inner.err" || bad "inner progress run: $(tail -2 "$T/inner.err")"
$PY - "$T/inner.err" <<'PYEOF' && ok "progress inside documents: a line per layer of each sliding window, elapsed and ETA exact" || bad "progress inside a document: $(grep 'eval series' "$T/inner.err" | head -3 | tr '\n' ' ')"
import sys
got = [l.rstrip("\n") for l in open(sys.argv[1]) if l.startswith("eval series")]
want, k = [], 0
for d in range(2):                      # 2 documents x 3 windows (256 tokens, 128 a window, stride 64) x 2 layers
    for w in range(3):
        for l in (1, 2):
            k += 1; el = 10.0 * k; f = (d + (w + l / 2) / 3) / 2
            want.append(f"eval series 1/1: {d}/2, in {d + 1}: window {w + 1}/3, layer {l}/2, {el:.1f} s elapsed, ETA {el / f * (1 - f):.1f} s")
    k += 1; el = 10.0 * k
    want.append(f"eval series 1/1: {d + 1}/2, {el:.1f} s elapsed, ETA {el / (d + 1) * (1 - d):.1f} s")
assert got == want, [(g, w) for g, w in zip(got, want) if g != w][:2] or (len(got), len(want))
PYEOF

# 5c''. stdout into a file is line-buffered: the first line ("data: ...") is in the file while the first document
#     runs. Deterministic: eval's stderr is a pipe that is not read after series 1's first progress line (after a
#     layer of the first window), and more than the pipe holds is still to print (a line per layer of 969 sliding
#     windows on the test clock), so eval waits there, alive, with its stdout as it is at that moment (before:
#     block-buffered, nothing until much later)
$PY - "$T/lb.out" build/eval --ckpt "$CK" --data "$VAL" --seq_len 32 --stride 1 --doc_len 1000 --docs 1 \
  --out "$T/ev" --name lb <<'PYEOF' >"$T/lb.res" 2>&1 && ok "stdout into a file: $(cat "$T/lb.res")" || bad "stdout into a file: $(tail -3 "$T/lb.res")"
import os, subprocess, sys
out = sys.argv[1]
p = subprocess.Popen(sys.argv[2:], stdout=open(out, "w"), stderr=subprocess.PIPE, text=True,
                     env=dict(os.environ, RINGLM_TEST_PROGRESS_TICK="10"))
for line in p.stderr:
    if line.startswith("eval series 1/1:"): break
alive = p.poll() is None
have = [l for l in open(out) if l.startswith("data: ")]
rest = p.stderr.read(); rc = p.wait()
assert rc == 0, rest[-300:]
assert alive, "eval ended before the check (the pipe should have held it)"
assert have, "the first line is not in the file while the first document runs"
print("the first line is in the file while the first document runs")
PYEOF

# 5c'''. plain RoPE past the trained context: the note names the trained RoPE's range (CK: yarn x2 over 128 tokens)
#     and the --rope spellings to compare in that range's units (before: yarn:F:seq_len, not the trained one)
run 1 --ckpt "$CK" --rope none --data "$VAL" --seq_len 512 --docs 1 --out "$T/ev" --name hint >"$T/hint.out" 2>&1
grep -qxF "note: context 512 exceeds the trained 128 with plain RoPE, and the model was trained with yarn x2 over 128 tokens: perplexity usually rises past 128 (compare --rope yarn:2:128 as trained, or yarn:4:128 to cover 512)" "$T/hint.out" \
  && ok "plain-RoPE note: compare --rope yarn:2:128 as trained, or yarn:4:128" || bad "plain-RoPE note: $(grep note "$T/hint.out" || tail -2 "$T/hint.out")"

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

# 5g. the data's meta.json. NM: a checkpoint trained with data_meta = 0 (it records no data description); data m10:
#     the data's shards with a meta.json that names eod_id 10 (newline: documents are lines). Without --eod the data's
#     eod 10 is taken (results equal --data_meta 0 --eod 10, and differ from --data_meta 0, the checkpoint's 256).
#     FK: a checkpoint trained on data whose meta.json names another tokenizer (a path; training only reads it).
TR=(--d_model 64 --n_layer 2 --n_head 4 --n_kv_head 2 --d_ff 128 --max_seq_len 256 --seq_len 128 --batch_size 4 --micro_batch 2
    --max_steps 3 --lr 3e-3 --warmup_steps 1)
FAKE=/nonexistent/llama-32k/tokenizer.json
# (each directory holds every shard of data/: meta.json's counts must match its directory's)
for d in m10 fk big; do mkdir -p "$T/$d" && ln -s "$T"/data/*_*.bin "$T/$d/"; done
sed 's/"eod_id": 256/"eod_id": 10/' "$T/data/meta.json" >"$T/m10/meta.json"
sed "s|\"tokenizer\": \"bytes\"|\"tokenizer\": \"$FAKE\"|" "$T/data/meta.json" >"$T/fk/meta.json"
sed "s|\"tokenizer\": \"bytes\"|\"tokenizer\": \"$FAKE\"|; s/\"vocab_size\": 257/\"vocab_size\": 32000/" "$T/data/meta.json" >"$T/big/meta.json"
build/train "${TR[@]}" --vocab_size 257 --data_meta 0 --train_data "$T/data/train_*.bin" --out_dir "$T/nm" >"$T/nm.out" 2>&1 &&
  build/train "${TR[@]}" --train_data "$T/fk/train_*.bin" --out_dir "$T/fkrun" >"$T/fk.out" 2>&1 \
  || bad "training NM and FK: $(tail -2 "$T/nm.out" "$T/fk.out")"
M=(--seq_len 128 --docs 2 --bucket 1 --out "$T/ev")
run 1 --ckpt "$T/nm" --data "$T/m10" "${M[@]}" --name meta10 >"$T/meta10.out" 2>&1 &&
  run 1 --ckpt "$T/nm" --data "$T/m10" --data_meta 0 --eod 10 "${M[@]}" --name eod10 >/dev/null 2>&1 &&
  run 1 --ckpt "$T/nm" --data "$T/m10" --data_meta 0 "${M[@]}" --name eod256 >/dev/null 2>&1 || bad "meta.json eod runs: $(tail -2 "$T/meta10.out")"
grep -qxF "data: $T/m10/meta.json: tokenizer bytes, vocab_size 257, eod 10 (eod taken)" "$T/meta10.out" &&
  cmp -s "$T/ev/meta10.csv" "$T/ev/eod10.csv" && ! cmp -s "$T/ev/meta10.csv" "$T/ev/eod256.csv" \
  && ok "--eod defaults to meta.json's eod_id 10: results equal --eod 10, differ from the checkpoint's 256" \
  || bad "meta.json eod default: $(grep -E '^(data|series)' "$T/meta10.out")"
check "--data_meta 0: a checkpoint of another tokenizer evaluates on byte data" build/eval --ckpt "$T/fkrun" --data "$VAL" --data_meta 0 "${M[@]}" --name fk0
check "--passkey --data_meta 0 on the checkpoint of another tokenizer runs" build/eval --passkey --ckpt "$T/fkrun" --data_meta 0 \
  --passkey_lens 128 --passkey_depths 0.5 --passkey_trials 1 --out "$T/ev" --name pkfk0

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
# series options before any --ckpt; two labels for one series; --passkey on several series
eval_err "--rope before --ckpt" "eval: --rope none comes before any --ckpt: put it after the --ckpt it belongs to" 1 --rope none "${E[@]}" --name x
eval_err "--rope_factor before --ckpt" "eval: --rope_factor 4 comes before any --ckpt: put it after the --ckpt it belongs to" 1 --rope_factor 4 "${E[@]}" --name x
eval_err "--label before --ckpt" "eval: --label a comes before any --ckpt" 1 --label a "${E[@]}" --name x
eval_err "two labels for one series" "eval: two --label for one series ('a' and 'b', series 2 of --ckpt $CK)" 1 --ckpt "$CK5" "${E[@]}" --label a --label b --name x
eval_err "--passkey with two series" "eval: --passkey evaluates one series (one --ckpt, at most one --rope), not 2" 1 --passkey --ckpt "$CK" --rope none --rope yarn:4 --out "$T/ev" --name x
# meta.json: a contradicting --eod; other tokens than the checkpoint's (tokenizer, or eod_id); a larger vocabulary
eval_err "--eod contradicting meta.json" "eval: --eod 10 (command line) contradicts the data's end-of-document id 256 ($T/data/meta.json)|--data_meta 0" 1 \
  "${E[@]}" --eod 10 --name x
eval_err "data of another tokenizer" "eval: checkpoint $CK was trained on other tokens than data '$T/fk/train_*.bin' (tokenizer 'bytes' vs '$FAKE': the checkpoint's vs the data's, from $T/fk/meta.json)" 1 \
  --ckpt "$CK" --data "$T/fk/train_*.bin" --seq_len 128 --out "$T/ev" --name x
eval_err "checkpoint of another tokenizer" "eval: checkpoint $T/fkrun/ckpt_00000003.h5 was trained on other tokens than data '$VAL' (tokenizer '$FAKE' vs 'bytes'" 1 \
  --ckpt "$T/fkrun" --data "$VAL" --seq_len 128 --out "$T/ev" --name x
eval_err "data of another end-of-document id" "(tokenizer bytes for both, but eod_id 256 vs 10: the checkpoint's vs the data's, from $T/m10/meta.json)" 1 \
  --ckpt "$CK" --data "$T/m10" --seq_len 128 --out "$T/ev" --name x
eval_err "data of a larger vocabulary" "eval: data '$T/big' was made with tokenizer $FAKE of vocabulary 32000 ($T/big/meta.json), larger than checkpoint $T/nm/ckpt_00000003.h5's vocab_size 257" 1 \
  --ckpt "$T/nm" --data "$T/big" --seq_len 128 --out "$T/ev" --name x
eval_err "passkey on a checkpoint of another tokenizer" "eval: --passkey writes byte-level text (token = byte value), but checkpoint $T/fkrun/ckpt_00000003.h5 was trained with tokenizer $FAKE, whose tokens are not bytes" 1 \
  --passkey --ckpt "$T/fkrun" --passkey_lens 128 --passkey_depths 0.5 --passkey_trials 1 --out "$T/ev" --name x
finish
