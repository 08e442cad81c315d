#!/usr/bin/env bash
# experiment_packing.sh — does document-aware packing let the model learn passkey retrieval?
#
#   bash tools/experiments/experiment_packing.sh      (about 35-45 minutes on this 2-core machine; results in out/packing/)
#
# The passkey part of tools/experiments/experiment_longctx.sh, rerun with packed windows instead of short documents and copy
# drills: the same model, the same pretraining and the same budget (2 x 400 steps x 8 x 512 tokens from the
# pretrained model, then 30 steps x 4 x 2048 of YaRN x4 extension on a ring of 2).
#  0. data: the Python standard library's source files, one document each (as experiment_longctx.sh: reused from
#     out/longctx/data when it is there), and passkey documents of the full length range (128..512 tokens for the
#     512-token stages, 128..2048 for the extension; tools/passkey_data.py, no drills; the evaluation draws its keys
#     from another generator and its filler is not the training documents' code);
#  1. pretraining at 512 with plain RoPE and doc_mask (or the base model of out/longctx when it exists);
#  2. passkey stages 1 and 2 (lr 2e-3, then 1e-3): pack = best_fit over passkey documents with the code as a second
#     source (weights PK_W : 1), so that every passkey document lies whole in a window; checkpoints every 100 steps;
#  3. extension to 2048 with YaRN x4 (cp 2): best_fit over 128..2048-token passkey documents and the code, the long
#     documents upsampled (upsample_len 1024, x2);
#     DRILL_FRAC=0.5 makes half of the 512-token stages' passkey documents copy drills (as experiment_longctx.sh's
#     variant), now of 128..512 tokens and whole in their windows;
#     Per stage where they differ (each defaults to the setting of both): STEPS_PK1/2, PK_W1/2, DRILL_FRAC1/2,
#     DRILL_GAP1/2 (-1: the drills' copies apart by any filler length the document allows), LR1/2 and MIN_LR1/2
#     (2e-3 -> 2e-4, then 1e-3 -> 1e-4); PK_TOKENS passkey tokens per stage; CKPT_EVERY (the learning curve's points).
#     Run E of the README (copying first, then retrieval at every distance; LONG=out/packing: the base model of run A):
#       OUT=out/packing_E LONG=out/packing PK_W=8 PK_TOKENS=5500000 STEPS_PK1=400 STEPS_PK2=2400 DRILL_FRAC1=1 DRILL_GAP1=0 \
#       DRILL_FRAC2=0.5 DRILL_GAP2=-1 LR1=2e-3 MIN_LR1=2e-3 LR2=2e-3 MIN_LR2=2e-4 CKPT_EVERY=200 bash tools/experiments/experiment_packing.sh
#     Run F: the same with OUT=out/packing_F STEPS_PK1=1200 STEPS_PK2=1200 DRILL_GAP1=-1 (drills at every distance first).
#     tools/experiments/passkey_digits.py CKPT --drill-gaps 0,90,270,450 then measures what a model retrieves, digit by digit.
#  4. passkey retrieval (whole keys, greedy; and digits, teacher-forced) at 256..2048 and every depth, for each
#     stage, and the learning curve of retrieval over the checkpoints; packing statistics (best_fit beside stream on
#     the same data, from the trainer's packing line); tables in out/packing/results.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/packing}
LONG=${LONG:-out/longctx}           # a finished experiment_longctx.sh run: its data and base model are reused
STEPS1=${STEPS1:-280}
STEPS_PK=${STEPS_PK:-400}
STEPS_EXT=${STEPS_EXT:-30}
PK_W=${PK_W:-3}                     # the passkey source's weight against the code's 1
PK_TRIALS=${PK_TRIALS:-8}
DRILL_FRAC=${DRILL_FRAC:-0}         # > 0: that fraction of the passkey documents are copy drills (passkey_data.py)
DRILL_GAP=${DRILL_GAP:-0}           # the drills' filler between copies: 0 back to back, -1 any length the document allows
PK_TOKENS=${PK_TOKENS:-1500000}     # tokens of passkey documents generated for each 512-token stage
CKPT_EVERY=${CKPT_EVERY:-100}       # checkpoints (points of the learning curve) every this many steps
# per stage (1, 2) where they differ: STEPS_PK1/2, DRILL_FRAC1/2, DRILL_GAP1/2, PK_W1/2, LR1/2 with MIN_LR1/2
STEPS_PK1=${STEPS_PK1:-$STEPS_PK}; STEPS_PK2=${STEPS_PK2:-$STEPS_PK}
DRILL_FRAC1=${DRILL_FRAC1:-$DRILL_FRAC}; DRILL_FRAC2=${DRILL_FRAC2:-$DRILL_FRAC}
DRILL_GAP1=${DRILL_GAP1:-$DRILL_GAP}; DRILL_GAP2=${DRILL_GAP2:-$DRILL_GAP}
PK_W1=${PK_W1:-$PK_W}; PK_W2=${PK_W2:-$PK_W}
LR1=${LR1:-2e-3}; MIN_LR1=${MIN_LR1:-2e-4}; LR2=${LR2:-1e-3}; MIN_LR2=${MIN_LR2:-1e-4}
drill() {   # drill STAGE: passkey_data.py's drill options of that stage
  local f=DRILL_FRAC$1 g=DRILL_GAP$1
  [ "${!f}" != 0 ] && echo --drill-frac "${!f}" --drill-copies 4 --drill-gap "${!g}"; true
}
PY=/usr/bin/python3
MPI=(mpirun -q --oversubscribe -np 2); [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
T0=$(date +%s)
mkdir -p "$OUT/eval"
CMDS=$OUT/commands.txt; : >"$CMDS"
run() { printf '%q ' "$@" >>"$CMDS"; echo >>"$CMDS"; echo "[$(( ($(date +%s) - T0) / 60 )) min] $*" | cut -c1-200; "$@"; }
stage() { echo; echo "== $* ($(( ($(date +%s) - T0) / 60 )) min elapsed)"; echo "# $*" >>"$CMDS"; }
keep() { grep -E "$1" || true; }
[ -x build/train ] && [ -x build/eval ] && [ -x build/prepare ] || { echo "build first: make" >&2; exit 1; }

stage "0. data"
DATA=$OUT/data
if [ -f "$LONG/data/train_000000.bin" ]; then
  DATA=$LONG/data; echo "reusing $DATA"
else
  stdlib=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
  src=(); for f in "$stdlib"/*.py; do [ -L "$f" ] || src+=("$f"); done   # (a link would give a file twice)
  for d in "$stdlib"/*/; do
    case "$(basename "$d")" in test|tests|idlelib|site-packages|dist-packages|__pycache__|lib2to3|config-*|lib-dynload|pydoc_data|encodings|ensurepip) ;;
      *) src+=("$d");; esac
  done
  run build/prepare --out "$DATA" --doc-per file --val-frac 0.1 --seed 3 --force "${src[@]}" | tail -n 2
fi
PK=$OUT/pk; mkdir -p "$PK"
for i in 1 2; do
  [ -f "$PK/pk512_$i/train_000000.bin" ] || { mkdir -p "$PK/pk512_$i"; run $PY tools/passkey_data.py --out "$PK/pk512_$i/train_000000.bin" \
    --tokens "$PK_TOKENS" --min-len 128 --max-len 512 --seed $((30 + i)) $(drill $i) >/dev/null; }
done
[ -f "$PK/pk2048/train_000000.bin" ] || { mkdir -p "$PK/pk2048"; run $PY tools/passkey_data.py --out "$PK/pk2048/train_000000.bin" \
  --tokens 1000000 --min-len 128 --max-len 2048 --seed 33 >/dev/null; }
CODE="$DATA/train_0*.bin"
MODEL=(--vocab_size 257 --d_model 256 --n_layer 4 --n_head 8 --n_kv_head 2 --d_ff 704 --rope_theta 10000 --seed 1337)

BASE=$LONG/base
if [ ! -f "$BASE/latest" ]; then
  BASE=$OUT/base
  stage "1. pretraining at 512 ($STEPS1 steps x 16 x 512 tokens)"
  [ -f "$BASE/latest" ] || OMP_NUM_THREADS=2 run build/train "${MODEL[@]}" --max_seq_len 512 --rope_scaling none --seq_len 512 \
    --batch_size 16 --micro_batch 4 --max_steps "$STEPS1" --lr 2e-3 --min_lr 2e-4 --warmup_steps 20 --doc_mask 1 \
    --train_data "$CODE" --val_data "$DATA/val_*.bin" --val_batches 4 --log_every 40 --out_dir "$BASE" | keep "^(params|step|done)"
else echo "reusing the pretrained model $BASE"; fi

PKA=(--seq_len 512 --batch_size 8 --micro_batch 4 --warmup_steps 10 --doc_mask 1 --pack best_fit
     --ckpt_every "$CKPT_EVERY" --keep_last 0 --log_every 50)
stage "2. passkey stage 1: best_fit over passkey documents (128..512) and code, weights $PK_W1 : 1"
rm -rf "$OUT/pk1" "$OUT/pk2" "$OUT/ext"
OMP_NUM_THREADS=2 run build/train --init_from "$BASE" "${PKA[@]}" --max_steps "$STEPS_PK1" --lr "$LR1" --min_lr "$MIN_LR1" \
  --train_data "$PK/pk512_1@$PK_W1;$CODE@1" --out_dir "$OUT/pk1" | keep "^(packing|mixture|step|done)" | tee "$OUT/pk1.log"
stage "2. passkey stage 2: new passkey documents, weights $PK_W2 : 1"
OMP_NUM_THREADS=2 run build/train --init_from "$OUT/pk1" "${PKA[@]}" --max_steps "$STEPS_PK2" --lr "$LR2" --min_lr "$MIN_LR2" \
  --train_data "$PK/pk512_2@$PK_W2;$CODE@1" --out_dir "$OUT/pk2" | keep "^(packing|mixture|step|done)" | tee "$OUT/pk2.log"
stage "3. extension to 2048, YaRN x4, cp 2: best_fit, documents over 1024 tokens x2"
OMP_NUM_THREADS=1 run "${MPI[@]}" build/train --init_from "$OUT/pk2" --max_seq_len 2048 --seq_len 2048 --rope_scaling yarn \
  --rope_factor 4 --rope_original_max_seq_len 512 --cp 2 --batch_size 4 --micro_batch 1 --max_steps "$STEPS_EXT" --lr 5e-4 \
  --min_lr 5e-5 --warmup_steps 5 --doc_mask 1 --pack best_fit --upsample_len 1024 --upsample_factor 2 \
  --train_data "$PK/pk2048@$PK_W;$CODE@1" --log_every 10 --out_dir "$OUT/ext" | keep "^(packing|mixture|step|done)" | tee "$OUT/ext.log"

stage "4. passkey retrieval"
PKE=(--passkey_depths 0,0.25,0.5,0.75,1 --passkey_trials "$PK_TRIALS" --force)
for m in pk1 pk2; do
  OMP_NUM_THREADS=2 run build/eval --passkey --ckpt "$OUT/$m" --passkey_lens 256,512,1024,2048 "${PKE[@]}" --out "$OUT/eval" \
    --name "$m" | keep "^(passkey|context|[0-9])"
done
OMP_NUM_THREADS=2 run build/eval --passkey --ckpt "$OUT/ext" --passkey_lens 256,512,1024,2048 "${PKE[@]}" --out "$OUT/eval" \
  --name ext | keep "^(passkey|context|[0-9])"
stage "4. the learning curve: retrieval at 256 and 512 over the checkpoints"
for m in pk1 pk2; do
  for c in "$OUT/$m"/ckpt_*.h5; do
    s=$(basename "$c" .h5); s=${s#ckpt_}
    [ "$s" = 00000000 ] && continue
    OMP_NUM_THREADS=2 build/eval --passkey --ckpt "$c" --passkey_lens 256,512 "${PKE[@]}" --out "$OUT/eval/curve" \
      --name "${m}_$s" >/dev/null
  done
done
for L in 512 2048; do
  build/eval --doc_lengths --data "$PK/pk${L}$([ $L = 512 ] && echo _1)" --seq_len $L --out "$OUT/eval" --name "pk$L" --force | sed -n 1,2p
done

stage "5. tables"
run $PY - "$OUT" <<'PYEOF'
import csv, glob, json, os, re, sys
out = sys.argv[1]
L = []
def rows(p): return list(csv.DictReader(open(p)))
def steps(run): return int(open(f"{out}/{run}/config.txt").read().split("max_steps = ")[1].split()[0])
for run in ("pk1", "pk2", "ext"):
    log = open(f"{out}/{run}.log").read()
    m = re.search(r"^packing: (.*)$", log, re.M)
    L.append(f"- `{run}` packing: {m.group(1) if m else '?'}")
    m = re.search(r"^mixture: (.*)$", log, re.M)
    if m: L.append(f"  mixture: {m.group(1)}")
    recs = [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl")]
    L.append(f"  {recs[-1]['tokens_seen']} tokens, final training loss {sum(r['loss'] for r in recs[-5:]) / 5:.3f}")
L.append("")
for col, what in (("accuracy", "whole keys right (greedy; chance 1e-5)"), ("digit_accuracy", "answer digits right (teacher-forced; chance 0.1)")):
    L.append(f"**passkey retrieval: {what}** — by context length, mean over depths (in brackets by depth 0, 0.25, 0.5, 0.75, 1)\n")
    L.append("| model | 256 | 512 | 1024 | 2048 |")
    L.append("|---|---|---|---|---|")
    s1, s2 = steps("pk1"), steps("pk2")
    for m, label in (("pk1", f"best_fit, stage 1 ({s1} steps)"), ("pk2", f"best_fit, stage 2 ({s1 + s2} steps)"), ("ext", "+ YaRN x4 extension at 2048")):
        r = rows(f"{out}/eval/{m}_passkey.csv")
        cells = []
        for ctx in ("256", "512", "1024", "2048"):
            acc = [float(x[col]) for x in r if x["context"] == ctx]
            cells.append(f"{sum(acc) / len(acc):.2f} ({' '.join(f'{a:.2f}' for a in acc)})")
        L.append(f"| {label} | " + " | ".join(cells) + " |")
    L.append("")
L.append("**learning curve** (mean over depths; whole keys / digits)\n")
L.append("| checkpoint | tokens | 256 | 512 |")
L.append("|---|---:|---|---|")
for p in sorted(glob.glob(f"{out}/eval/curve/*_passkey.csv")):
    name = os.path.basename(p)[:-len("_passkey.csv")]
    run, step = name.rsplit("_", 1)
    step = int(step)
    offset = 0 if run == "pk1" else steps("pk1")
    r = rows(p)
    cell = []
    for ctx in ("256", "512"):
        a = [float(x["accuracy"]) for x in r if x["context"] == ctx]; d = [float(x["digit_accuracy"]) for x in r if x["context"] == ctx]
        cell.append(f"{sum(a) / len(a):.2f} / {sum(d) / len(d):.2f}")
    L.append(f"| {run} step {step} | {(offset + step) * 8 * 512} | {cell[0]} | {cell[1]} |")
open(f"{out}/results.md", "w").write("\n".join(L) + "\n")
print("\n".join(L))
PYEOF
echo "== done in $(( ($(date +%s) - T0) / 60 )) min: $OUT/results.md, $OUT/eval/*_passkey.svg"
