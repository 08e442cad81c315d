#!/usr/bin/env bash
# experiment_longctx.sh — does a ringlm-trained model use its context, and does YaRN extend it? (issue 14)
#
#   bash tools/experiments/experiment_longctx.sh          (about 45 minutes on this shared 2-core machine; results in out/longctx/)
#
#  0. data: every Python source file of this machine's standard library (outside its test suite) is one document
#     (build/prepare --doc-per file; whole files held out for validation), plus a documented synthetic fraction of
#     passkey documents (tools/passkey_data.py, the format build/eval --passkey scores; training only, about 30% of
#     the training stream);
#  1. pretraining at a context of 512 with plain RoPE and document masking (doc_mask = 1);
#  2. context extension to 4x (2048) by short fine-tunes from that checkpoint (--init_from), the same steps and tokens
#     for each: (a) no scaling, (b) linear interpolation x4, (c) YaRN x4 — on a ring of 2 ranks (cp 2, doc_mask = 1);
#     the pretrained model is also given each RoPE setting without any fine-tune (step-0 checkpoints via --init_from);
#     and a passkey variant: the pretrained model fine-tuned on passkey documents of 103..256 tokens and copy drills,
#     half and half (tools/passkey_data.py --drill-frac 0.5: lists of random numbers written 2..4 times back to
#     back), in 512-token windows (so most documents lie whole in one window), in two stages (lr 2e-3, then 1e-3).
#     On passkey documents alone this 3M-parameter byte-level model stayed on a plateau (training loss flat for 2.5M
#     tokens, digits right at chance); the drills reward the copy-from-earlier-in-the-document pattern retrieval is
#     made of on every number after the first list;
#  3. perplexity by position (log buckets, held-out documents longer than 4096 tokens, standard error over
#     documents) of every model at 512, 2048 and 4096 (4096 on a ring of 2), and passkey retrieval accuracy over
#     lengths x depths;
#  4. tables (out/longctx/results.md) and SVG plots.
# Every command is logged to out/longctx/commands.txt as run. Knobs (environment): OUT, STEPS1, STEPS2, STEPS_PK,
# DOCS, PK_TRIALS; PASSKEY_ONLY=1 reruns only the passkey variant and the passkey evaluations (and the tables) on
# a finished run's models in OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-out/longctx}
STEPS1=${STEPS1:-280}      # pretraining steps at 512: 16 sequences of 512 tokens each
STEPS2=${STEPS2:-30}       # fine-tuning steps at 2048, each RoPE setting: 4 sequences of 2048 tokens each
STEPS_PK=${STEPS_PK:-400}  # the passkey variant's steps in each of its two stages: 8 sequences of 512 tokens each
DOCS=${DOCS:-20}           # held-out documents per perplexity evaluation (24 are longer than 4096 tokens)
PK_TRIALS=${PK_TRIALS:-8}  # passkey documents per (length, depth) cell
PY=/usr/bin/python3
MPI=(mpirun -q --oversubscribe -np 2); [ "$(id -u)" -eq 0 ] && MPI+=(--allow-run-as-root)
DATA=$OUT/data
CMDS=$OUT/commands.txt
T0=$(date +%s)

[ -x build/train ] && [ -x build/eval ] && [ -x build/prepare ] || { echo "build first: make" >&2; exit 1; }
help=$(build/train --help 2>&1 || true)
[[ $help == *--init_from* ]] || { echo "build/train has no --init_from" >&2; exit 1; }
if [ "${PASSKEY_ONLY:-0}" = 1 ]; then   # reuse a finished run's models and perplexity tables
  for f in base base_none base_linear base_yarn ft_none ft_linear ft_yarn eval/ppl_512.csv eval/ppl_2048.csv eval/ppl_4096.csv; do
    [ -e "$OUT/$f" ] || { echo "PASSKEY_ONLY=1 needs a finished run in $OUT: $OUT/$f is missing (run without it first)" >&2; exit 1; }
  done
  rm -rf "$OUT/passkey_short" "$OUT/passkey" "$OUT"/eval/*_passkey.*
  echo "# PASSKEY_ONLY=1 rerun of the passkey variant and the passkey evaluations, $(date -u +%F)" >>"$CMDS"
else
  rm -rf "$OUT"; mkdir -p "$OUT/eval"
  : >"$CMDS"
fi
# run CMD...: log the command (and the elapsed minutes), then run it
run() { printf '%q ' "$@" >>"$CMDS"; echo >>"$CMDS"; echo "[$(( ($(date +%s) - T0) / 60 )) min] $*" | cut -c1-220; "$@"; }
stage() { echo; echo "== $* ($(( ($(date +%s) - T0) / 60 )) min elapsed)"; echo "# $*" >>"$CMDS"; }
keep() { grep -E "$1" || true; }    # output filters (a failing command still stops the script: pipefail)
drop() { grep -vE "$1" || true; }

# ---- 0. data
stage "0. data"
if [ "${PASSKEY_ONLY:-0}" != 1 ]; then
stdlib=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
src=(); for f in "$stdlib"/*.py; do [ -L "$f" ] || src+=("$f"); done   # (a link would give a file twice)
for d in "$stdlib"/*/; do
  case "$(basename "$d")" in test|tests|idlelib|site-packages|dist-packages|__pycache__|lib2to3|config-*|lib-dynload|pydoc_data|encodings|ensurepip) ;;
    *) src+=("$d");; esac
done
run build/prepare --out "$DATA" --doc-per file --val-frac 0.1 --seed 3 "${src[@]}" | tail -n 4
# passkey documents: about 30% of the stream each stage trains on (stage 1: 128..512 tokens; stage 2: 128..2048),
# and the passkey variant's two streams: passkey documents of 103..256 tokens and copy drills, half and half
run $PY tools/passkey_data.py --out "$DATA/train_a_passkey512.bin" --tokens 3500000 --min-len 128 --max-len 512 --seed 11
run $PY tools/passkey_data.py --out "$DATA/train_b_passkey2048.bin" --tokens 3500000 --min-len 128 --max-len 2048 --seed 12
fi
for i in 1 2; do
  run $PY tools/passkey_data.py --out "$DATA/pk_drill$i.bin" --tokens 2000000 --min-len 103 --max-len 256 --drill-frac 0.5 \
    --drill-copies 4 --drill-gap 0 --seed $((12 + i))
done
TRAIN1="$DATA/train_[0a]*.bin"; TRAIN2="$DATA/train_[0b]*.bin"; VAL="$DATA/val_*.bin"

MODEL=(--vocab_size 257 --d_model 256 --n_layer 4 --n_head 8 --n_kv_head 2 --d_ff 704 --rope_theta 10000 --seed 1337)

BASE=$OUT/base
if [ "${PASSKEY_ONLY:-0}" != 1 ]; then
# ---- 1. pretraining at 512, plain RoPE, document masking
stage "1. pretraining at 512 ($STEPS1 steps x 16 x 512 tokens, one process, 2 threads)"
OMP_NUM_THREADS=2 run build/train "${MODEL[@]}" --max_seq_len 512 --rope_scaling none --seq_len 512 --batch_size 16 \
  --micro_batch 4 --max_steps "$STEPS1" --lr 2e-3 --min_lr 2e-4 --warmup_steps 20 --doc_mask 1 \
  --train_data "$TRAIN1" --val_data "$VAL" --val_batches 4 --log_every 20 --out_dir "$OUT/base" | keep "^(params|step|done)"

# ---- 2. context extension to 2048: three fine-tunes (same steps, tokens, data order), and step-0 RoPE variants
EXT=(--max_seq_len 2048 --seq_len 2048 --rope_factor 4 --rope_original_max_seq_len 512)
declare -A ROPE=([none]="--rope_scaling none --rope_factor 1" [linear]="--rope_scaling linear" [yarn]="--rope_scaling yarn")
for r in none linear yarn; do
  stage "2. fine-tune at 2048, RoPE $r ($STEPS2 steps x 4 x 2048 tokens, cp 2)"
  OMP_NUM_THREADS=1 run "${MPI[@]}" build/train --init_from "$BASE" "${EXT[@]}" ${ROPE[$r]} --cp 2 --batch_size 4 --micro_batch 1 \
    --max_steps "$STEPS2" --lr 5e-4 --min_lr 5e-5 --warmup_steps 5 --doc_mask 1 --train_data "$TRAIN2" --log_every 10 \
    --out_dir "$OUT/ft_$r" | keep "^(init_from|step|done|ring)"
  # the pretrained model with this RoPE setting and no fine-tune: its parameters in a step-0 checkpoint
  OMP_NUM_THREADS=2 run build/train --init_from "$BASE" "${EXT[@]}" ${ROPE[$r]} --batch_size 1 --max_steps 0 --train_data "$TRAIN2" \
    --out_dir "$OUT/base_$r" | keep "^init_from: model keys"
done
fi
stage "2. the passkey variant, stage 1: passkey documents and copy drills of 103..256 tokens ($STEPS_PK steps x 8 x 512)"
OMP_NUM_THREADS=2 run build/train --init_from "$BASE" --seq_len 512 --batch_size 8 --micro_batch 4 --max_steps "$STEPS_PK" \
  --lr 2e-3 --min_lr 2e-4 --warmup_steps 10 --doc_mask 1 --train_data "$DATA/pk_drill1.bin" --log_every 50 \
  --out_dir "$OUT/passkey_short" | keep "^(step|done)"
stage "2. the passkey variant, stage 2: the same kind of stream, new documents ($STEPS_PK steps x 8 x 512)"
OMP_NUM_THREADS=2 run build/train --init_from "$OUT/passkey_short" --seq_len 512 --batch_size 8 --micro_batch 4 \
  --max_steps "$STEPS_PK" --lr 1e-3 --min_lr 1e-4 --warmup_steps 10 --doc_mask 1 --train_data "$DATA/pk_drill2.bin" \
  --log_every 50 --out_dir "$OUT/passkey" | keep "^(step|done)"

# ---- 3. perplexity by position and passkey retrieval
CK() { ls "$1"/ckpt_*.h5 | tail -n 1; }
PRE=(--ckpt "$(CK "$OUT/base_none")" --label "pretrained, no scaling" --ckpt "$(CK "$OUT/base_linear")" --label "pretrained, linear x4"
     --ckpt "$(CK "$OUT/base_yarn")" --label "pretrained, YaRN x4")
FT=(--ckpt "$(CK "$OUT/ft_none")" --label "fine-tuned, no scaling" --ckpt "$(CK "$OUT/ft_linear")" --label "fine-tuned, linear x4"
    --ckpt "$(CK "$OUT/ft_yarn")" --label "fine-tuned, YaRN x4")
if [ "${PASSKEY_ONLY:-0}" != 1 ]; then
stage "3. perplexity at 512 (the pretrained context)"
OMP_NUM_THREADS=2 run build/eval --ckpt "$(CK "$BASE")" --label "pretrained, no scaling" "${FT[@]}" --data "$VAL" \
  --seq_len 512 --docs "$DOCS" --log_buckets --out "$OUT/eval" --name ppl_512 | drop "^(series|note)"
stage "3. perplexity at 2048 (4x: the fine-tuned context)"
OMP_NUM_THREADS=2 run build/eval "${PRE[@]}" "${FT[@]}" --data "$VAL" --seq_len 2048 --docs "$DOCS" --log_buckets \
  --out "$OUT/eval" --name ppl_2048 | drop "^(series|note)"
stage "3. perplexity at 4096 (8x, on a ring of 2)"
OMP_NUM_THREADS=1 run "${MPI[@]}" build/eval "${PRE[@]}" "${FT[@]}" --data "$VAL" --seq_len 4096 --docs "$DOCS" --log_buckets \
  --cp 2 --out "$OUT/eval" --name ppl_4096 | drop "^(series|note)"
fi
for m in passkey_short passkey base_none ft_none ft_linear ft_yarn; do
  stage "3. passkey retrieval: $m"
  OMP_NUM_THREADS=2 run build/eval --passkey --ckpt "$(CK "$OUT/$m")" --passkey_lens 256,512,1024,2048 \
    --passkey_depths 0,0.25,0.5,0.75,1 --passkey_trials "$PK_TRIALS" --out "$OUT/eval" --name "$m" | drop "^note"
done

# ---- 4. tables
stage "4. tables"
run $PY - "$OUT" "$PK_TRIALS" <<'PYEOF'
import csv, json, math, sys
out, PKT = sys.argv[1], int(sys.argv[2])
lines = []
def rows(name): return list(csv.DictReader(open(f"{out}/eval/{name}.csv")))
def loss_of(run):   # final training loss (mean of the last 5 steps) and tokens
    m = [json.loads(l) for l in open(f"{out}/{run}/metrics.jsonl")]
    return sum(r["loss"] for r in m[-5:]) / len(m[-5:]), m[-1]["tokens_seen"], m[-1].get("val_loss")
b = loss_of("base")
lines.append(f"pretraining: {b[1]} tokens, final train loss {b[0]:.3f}, val loss {b[2]:.3f}" if b[2] else "")
for r in ("none", "linear", "yarn"):
    f = loss_of(f"ft_{r}")
    lines.append(f"fine-tune {r}: {f[1]} tokens, final train loss {f[0]:.3f}")
f, g = loss_of("passkey_short"), loss_of("passkey")
lines.append(f"passkey variant: {f[1]} + {g[1]} tokens, final train loss {f[0]:.3f} (stage 1), {g[0]:.3f} (stage 2)")
lines.append("")
for ctx, picks in ((512, [16, 128, 256]), (2048, [128, 512, 1024]), (4096, [256, 1024, 2048])):
    r = rows(f"ppl_{ctx}")
    series = list(dict.fromkeys(x["series"] for x in r))
    cell = {(x["series"], int(x["bucket_lo"])): x for x in r}
    hi = {int(x["bucket_lo"]): int(x["bucket_hi"]) for x in r}
    lines.append(f"**context {ctx}** — perplexity by position (log buckets; in brackets exp(mean NLL -/+ one standard "
                 f"error over the {cell[(series[0], 0)]['docs']} documents)\n")
    lines.append("| model | " + " | ".join(f"[{lo}, {hi[lo]})" for lo in picks) + " | all positions |")
    lines.append("|---|" + "---:|" * (len(picks) + 1))
    for s in series:
        cells = []
        for lo in picks:
            x = cell[(s, lo)]
            cells.append(f"{float(x['ppl']):.2f} ({float(x['ppl_lo']):.2f}–{float(x['ppl_hi']):.2f})")
        mine = [x for x in r if x["series"] == s and int(x["tokens"]) > 0]
        n = sum(int(x["tokens"]) for x in mine)
        cells.append(f"{math.exp(sum(float(x['mean_nll']) * int(x['tokens']) for x in mine) / n):.2f}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines.append("")
PK = (("passkey_short", "passkey variant, stage 1"), ("passkey", "passkey variant, stage 2"),
      ("base_none", "pretrained, no scaling"),
      ("ft_none", "fine-tuned, no scaling"), ("ft_linear", "fine-tuned, linear x4"), ("ft_yarn", "fine-tuned, YaRN x4"))
for col, what in (("accuracy", "documents with all 5 digits right (greedy; chance 1e-5)"),
                  ("digit_accuracy", "answer digits right (teacher-forced; chance 0.1)")):
    r0 = rows("passkey_passkey")
    depths = list(dict.fromkeys(x["depth"] for x in r0))
    lines.append(f"**passkey retrieval: {what}** — by context length, mean over depths {', '.join(depths)} "
                 f"({len(depths)} x {PKT} documents); "
                 "in brackets by depth\n")
    lines.append("| model | 256 | 512 | 1024 | 2048 |")
    lines.append("|---|---|---|---|---|")
    for m, label in PK:
        r = rows(f"{m}_passkey")
        cells = []
        for L in ("256", "512", "1024", "2048"):
            acc = [float(x[col]) for x in r if x["context"] == L]
            cells.append(f"{sum(acc) / len(acc):.2f} ({' '.join(f'{a:.2f}' for a in acc)})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
open(f"{out}/results.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
echo
echo "== done in $(( ($(date +%s) - T0) / 60 )) min: $OUT/results.md, $OUT/eval/ppl_{512,2048,4096}.svg/.csv, $OUT/eval/*_passkey.svg/.csv"
echo "   commands: $CMDS"
