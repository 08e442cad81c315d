#!/usr/bin/env bash
# Hugging Face interop and context extension (issue 13): tools/hf_export, tools/hf_import, tools/prepare_hf and
# build/train --init_from, checked against Hugging Face's own code.
#  - without transformers (h5py + numpy only): export → import is bit-identical (fp32, also sharded), bf16 and
#    sharded exports, a padded (tp 2) vocabulary is never exported, --init_from (changed YaRN factor and
#    max_seq_len, across a ring of 2, fresh moments/cursor/step: bit-identical to starting from the export's
#    re-import), every refusal in one line;
#  - with transformers 4.46.3 in build/hfenv (tools/hf_env.sh; one "skip:" line when PyPI cannot be reached):
#    tokenizers trained locally, prepare_hf's shards decode to build/prepare's documents, random HF Llama models
#    (GQA/MQA/MHA, YaRN in both key forms, linear, tied/untied, sharded) imported give HF's logits and
#    per-position losses in float32 and float64 (1e-4), also through build/eval on a ring; an imported model
#    extended with --init_from on its tokenizer's data (tp 2 x cp 2) and the other ringlm runs exported load in
#    LlamaForCausalLM.from_pretrained with matching logits; AutoTokenizer loads an export.
cd "$(dirname "$0")/.."
source tests/lib.sh

# ---------------------------------------------------------------------------------------------- part 1: no HF
build/prepare --out "$T/bytes" --val-frac 0 model attention >/dev/null || { bad "prepare byte data"; finish; }
cat > "$T/x.conf" <<CONF
vocab_size = 257
d_model = 48
n_layer = 2
n_head = 4
n_kv_head = 2
d_ff = 96
max_seq_len = 128
rope_scaling = yarn
rope_factor = 2
rope_original_max_seq_len = 64
seq_len = 64
batch_size = 4
micro_batch = 2
max_steps = 3
lr = 3e-3
warmup_steps = 1
adam_eps = 1e-6
train_data = $T/bytes
CONF
CONF=$T/x.conf
SY=(env RINGLM_PYTHON=/usr/bin/python3)        # export/import need only h5py and numpy: the system python
CHK="$PY tests/hf_check.py"
# X: a trained run, GQA + YaRN x2 from 64, on tp 2 (vocabulary 257 padded to 258 in memory, never stored)
train_run X 2 --tp 2 && X=$T/X/ckpt_00000003.h5 && [ -f "$X" ] && ok "trained X (tp 2, YaRN, 3 steps)" || bad "no checkpoint X"

check "export X (fp32)" "${SY[@]}" tools/hf_export "$T/X" --out "$T/eX"
check "export X (bf16, sharded at 30KB)" "${SY[@]}" tools/hf_export "$X" --out "$T/eXb" --dtype bf16 --max_shard_size 30KB
check "export X (fp32, sharded at 30KB)" "${SY[@]}" tools/hf_export "$X" --out "$T/eXs" --max_shard_size 30KB
check "import the fp32 export" "${SY[@]}" tools/hf_import "$T/eX" --out "$T/X2.h5"
check "import the sharded export" "${SY[@]}" tools/hf_import "$T/eXs" --out "$T/Xs.h5"
$CHK exported "export X" "$T/eX" "$X" ::: exported "bf16 sharded export X" "$T/eXb" "$X" ::: exported "fp32 sharded export X" "$T/eXs" "$X" \
  ::: same "import(export(X))" "$X" "$T/X2.h5" ::: same "import(sharded export(X))" "$X" "$T/Xs.h5" >"$T/c1" 2>&1
sub_result "export/import checks" $? "$T/c1"; grep -E '^(ok|FAIL|#)' "$T/c1"
check "build/reshard --verify accepts the imported checkpoint" build/reshard --verify "$T/X2.h5"

# --init_from: context extension (YaRN x2 → x4, max_seq_len 128 → 256, seq_len 128) from X on one process, on
# a ring of 2, and from import(export(X)) — a model-only step-0 file: X's moments, step and cursor must not matter
EXT=(--rope_factor 4 --max_seq_len 256 --seq_len 128 --batch_size 2 --micro_batch 1 --max_steps 2 --warmup_steps 1)
STEPS=2
train_run Y1 1 --init_from "$X" "${EXT[@]}"
train_run Y2 2 --init_from "$T/X" --cp 2 "${EXT[@]}"
train_run Y3 1 --init_from "$T/X2.h5" "${EXT[@]}"
grep -q "init_from: model keys changed from the checkpoint: max_seq_len 128 -> 256, rope_factor 2 -> 4$" "$T/Y1.out" \
  && grep -q "parameters only; step 0, fresh AdamW moments, data cursor 0" "$T/Y1.out" \
  && ok "--init_from logs the changed model keys: $(grep -o 'max_seq_len 128 -> 256, rope_factor 2 -> 4' "$T/Y1.out")" \
  || bad "--init_from log: $(grep init "$T/Y1.out" | head -3)"
$PY - "$T/Y1/metrics.jsonl" <<'PYEOF' && ok "--init_from starts at step 1 and saves ckpt_00000002 with rope_factor 4, max_seq_len 256" || bad "--init_from steps/checkpoint"
import json, sys, h5py
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
assert steps == [1, 2], steps
with h5py.File(sys.argv[1].replace("metrics.jsonl", "ckpt_00000002.h5")) as f:
    c = {k: v.decode() for k, v in f["config"].attrs.items()}
    assert (c["rope_factor"], c["max_seq_len"], c["seq_len"]) == ("4", "256", "128"), c
    assert f.attrs["step"] == 2 and f.attrs["data_cursor"] == 4, (f.attrs["step"], f.attrs["data_cursor"])
PYEOF
same_losses Y1 Y2 1e-5 && ok "--init_from on a ring of 2 (cp 2) trains the one-process losses (1e-5)" || bad "--init_from cp 2 losses differ"
cmp -s <(grep -o '"loss": [^,]*' "$T/Y1/metrics.jsonl") <(grep -o '"loss": [^,]*' "$T/Y3/metrics.jsonl") \
  && ok "--init_from X (step 3, AdamW moments, cursor 12) and --init_from import(export(X)) (model-only, step 0) train bit-identically" \
  || bad "--init_from depends on more than the parameters: $(grep -o '"loss": [^,]*' "$T/Y1/metrics.jsonl" "$T/Y3/metrics.jsonl" | tr '\n' ' ')"
head -c 20000 "$X" > "$T/trunc.h5"
expect_train_err "$CONF" "--init_from with a changed d_model is refused" "--init_from|model keys differ from the checkpoint: d_model (checkpoint 48, run 64)|only rope_scaling" 1 --init_from "$X" --d_model 64
expect_train_err "$CONF" "--init_from with changed d_ff and tie_embeddings names both (2 ranks)" "d_ff (checkpoint 96, run 128), tie_embeddings (checkpoint 0, run 1)" 2 --init_from "$X" --d_ff 128 --tie_embeddings 1
expect_train_err "$CONF" "--init_from with resume is refused" "--init_from and resume exclude each other" 1 --init_from "$X" --resume "$X"
expect_train_err "$CONF" "--init_from a missing file" "--init_from '$T/nope.h5': checkpoint: '$T/nope.h5' does not exist" 1 --init_from "$T/nope.h5"
expect_train_err "$CONF" "--init_from a truncated file" "trunc.h5' cannot be opened as HDF5" 2 --init_from "$T/trunc.h5"
expect_train_err "$CONF" "--init_from a directory without latest" "has no 'latest' pointer" 1 --init_from "$T/bytes"

# bad input to the tools: one line, non-zero exit
cp "$X" "$T/corrupt.h5"
$PY - "$T/corrupt.h5" <<'PYEOF'
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    d = f["model/model.norm.weight"]; d[0] = d[0] + 1.0
PYEOF
expect_err "export of a corrupt checkpoint" "corrupt.h5': checksum mismatch in /model/model.norm.weight" 1 "${SY[@]}" tools/hf_export "$T/corrupt.h5" --out "$T/e_bad"
expect_err "export into an existing export" "hf_export: '$T/eX' already holds an export|--force" 1 "${SY[@]}" tools/hf_export "$X" --out "$T/eX"
expect_err "export of a missing checkpoint" "hf_export: checkpoint '$T/nope.h5' does not exist" 1 "${SY[@]}" tools/hf_export "$T/nope.h5" --out "$T/e_bad"
expect_err "export with an unknown option" "hf_export: unrecognized arguments: --bogus" 1 "${SY[@]}" tools/hf_export "$X" --out "$T/e_bad" --bogus
expect_err "import of a hub id" "hf_import: 'meta-llama/Llama-2-7b-hf' is not a directory|never downloads" 1 "${SY[@]}" tools/hf_import meta-llama/Llama-2-7b-hf --out "$T/i.h5"
expect_err "import over an existing file" "hf_import: '$T/X2.h5' already exists; pass --force" 1 "${SY[@]}" tools/hf_import "$T/eX" --out "$T/X2.h5"
variant() {   # variant NAME PYTHON-STATEMENT: a copy of the export with config.json changed (c is the dict)
  mkdir -p "$T/v_$1" && cp "$T/eX"/* "$T/v_$1/" && $PY -c "import json,sys; p='$T/v_$1/config.json'; c=json.load(open(p)); $2; json.dump(c,open(p,'w'))"
}
variant bias 'c["attention_bias"]=True'
variant llama3 'c["rope_scaling"]={"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}'
variant mistral 'c["architectures"]=["MistralForCausalLM"]; c["model_type"]="mistral"; c["sliding_window"]=4096'
variant gelu 'c["hidden_act"]="gelu"; c["head_dim"]=16'
variant shape 'c["intermediate_size"]=100'
expect_err "import refuses attention biases" "not supported by ringlm: attention_bias = true" 1 "${SY[@]}" tools/hf_import "$T/v_bias" --out "$T/i.h5"
expect_err "import refuses another rope type" "not supported by ringlm: rope_scaling type llama3" 1 "${SY[@]}" tools/hf_import "$T/v_llama3" --out "$T/i.h5"
expect_err "import refuses another architecture and a sliding window" "architecture MistralForCausalLM|sliding_window = 4096" 1 "${SY[@]}" tools/hf_import "$T/v_mistral" --out "$T/i.h5"
expect_err "import refuses gelu and a head_dim other than hidden/heads" "hidden_act = gelu|head_dim = 16 (ringlm needs hidden_size / num_attention_heads = 12)" 1 "${SY[@]}" tools/hf_import "$T/v_gelu" --out "$T/i.h5"
expect_err "import refuses tensors that do not fit config.json" "model.layers.0.mlp.gate_proj.weight has shape [96, 48], config.json implies [100, 48]" 1 "${SY[@]}" tools/hf_import "$T/v_shape" --out "$T/i.h5"
mkdir -p "$T/v_empty" && cp "$T/eX/config.json" "$T/v_empty/"
expect_err "import of a directory without weights" "has no model.safetensors or model.safetensors.index.json" 1 "${SY[@]}" tools/hf_import "$T/v_empty" --out "$T/i.h5"

# ---------------------------------------------------------------------------------------------- part 2: with HF
if ! HFPY=$(bash tools/hf_env.sh 2>"$T/env.err"); then
  echo "skip: the checks against transformers, tokenizers and safetensors: $(head -n 1 "$T/env.err")"
  finish
fi
HCHK="$HFPY tests/hf_check.py"

# a corpus with the cases build/prepare skips, non-ASCII text and a file that is not UTF-8
C=$T/corpus; mkdir -p "$C/src/sub" "$C/src/.hidden" "$C/docs" "$C/other"
cp model/*.c "$C/src/"; cp eval/report.c "$C/src/sub/"; cp README.md checkpoint/FORMAT.md "$C/docs/"
printf 'Größe – ελληνικά – 日本語 – emoji 🙂\n\ttabs and  spaces \r\n' > "$C/docs/unicode.txt"
printf 'caf\xe9 latin-1\n' > "$C/other/latin1.txt"
printf 'special-token text is text: <|endoftext|> <s> </s>\n' > "$C/docs/specials.txt"
printf 'bin\x00ary' > "$C/src/blob.bin"; : > "$C/src/empty.txt"; echo hidden > "$C/src/.hidden/x.c"; ln -s ../docs/README.md "$C/src/link.md"
$HCHK tokenizers "$T/tok" "$C"/src/*.c "$C/docs/README.md" >"$T/c2" 2>&1; sub_result "tokenizers" $? "$T/c2"; grep '^#' "$T/c2"
VOCAB=$($PY -c "import json; print(len(json.load(open('$T/tok/bpe/tokenizer.json'))['model']['vocab']))")

# prepare_hf against build/prepare on the same corpus: same documents, split and order; decoded text equal
PH=(env RINGLM_HFENV="$(dirname "$(dirname "$HFPY")")" tools/prepare_hf)
check "prepare_hf (byte-level BPE, GPT-2 style <|endoftext|>)" "${PH[@]}" --tokenizer "$T/tok/bpe" --out "$T/hd" --val-frac 0.3 "$C/src" "$C/docs" "$C/other"
grep -q "^separator: '<|endoftext|>' id 0 before every document (the tokenizer's EOS token); evaluate with build/eval --eod 0$" "$T/check.out" \
  && grep -q "not UTF-8 1" "$T/check.out" && ok "prepare_hf names the separator and counts the non-UTF-8 file" || bad "prepare_hf output: $(cat "$T/check.out")"
check "build/prepare on the same corpus" build/prepare --out "$T/bd" --val-frac 0.3 "$C/src" "$C/docs" "$C/other"
check "prepare_hf --doc-per dir (Llama style: <s> from the post-processor)" "${PH[@]}" --tokenizer "$T/tok/llama/tokenizer.json" --out "$T/hd2" --doc-per dir --seed 7 --shard-tokens 5000 "$C/src" "$C/docs"
grep -q "^separator: '<s>' id 1 before every document (the tokenizer's post-processor starts every text with it)" "$T/check.out" \
  && ok "Llama-style tokenizer: <s> (id 1) is the separator" || bad "Llama-style separator: $(grep separator "$T/check.out")"
check "build/prepare --doc-per dir on the same corpus" build/prepare --out "$T/bd2" --doc-per dir --seed 7 "$C/src" "$C/docs"
mkdir -p "$T/wc/a" "$T/wc/b"
$PY -c "
import random; r = random.Random(5)
for i, d in enumerate('ab'):
    open('$T/wc/%s/w.txt' % d, 'w').write(' '.join('w%d' % r.randrange(70000) for _ in range(400)))"
check "prepare_hf with a 70002-token vocabulary (uint32 shards)" "${PH[@]}" --tokenizer "$T/tok/wide" --out "$T/hw" --val-frac 0.5 "$T/wc"
check "build/prepare on the word corpus" build/prepare --out "$T/bw" --val-frac 0.5 "$T/wc"
$HCHK decode "prepare_hf per file" "$T/hd" "$T/bd" "$T/tok/bpe" 0 1 ::: decode "prepare_hf per dir, 5000-token shards" "$T/hd2" "$T/bd2" "$T/tok/llama" 1 0 \
  ::: decode "prepare_hf wide vocabulary" "$T/hw" "$T/bw" "$T/tok/wide" 0 >"$T/c3" 2>&1
sub_result "prepare_hf decoding" $? "$T/c3"; grep -E '^(ok|FAIL)' "$T/c3"
expect_err "prepare_hf without --tokenizer" "prepare_hf: --tokenizer TOKENIZER is required" 1 "${PH[@]}" --out "$T/hx" "$C/src"
expect_err "prepare_hf: a tokenizer without BOS/EOS needs --sep" "names no BOS or EOS token|--sep TOKEN" 1 "${PH[@]}" --tokenizer "$T/tok/nospecial" --out "$T/hx" "$C/src"
expect_err "prepare_hf: an unknown --sep" "--sep '<nope>' is neither a token nor an id" 1 "${PH[@]}" --tokenizer "$T/tok/bpe" --sep '<nope>' --out "$T/hx" "$C/src"
expect_err "prepare_hf over existing shards" "train_000000.bin' already exists (use --force" 1 "${PH[@]}" --tokenizer "$T/tok/bpe" --out "$T/hd" "$C/src"
expect_err "prepare_hf with no documents" "no documents found" 1 "${PH[@]}" --tokenizer "$T/tok/bpe" --out "$T/hx" "$C/src/.hidden/../empty.txt"
expect_err "prepare_hf with a missing tokenizer" "tokenizer '$T/nope.json' does not exist" 1 "${PH[@]}" --tokenizer "$T/nope.json" --out "$T/hx" "$C/src"

# random HF models → import → ringlm's logits (tool_dump) and build/eval's per-position losses (ring of 2)
$HCHK make-hf "$T/hf" "$VOCAB" >"$T/c4" 2>&1; sub_result "make HF models" $? "$T/c4"; grep '^#' "$T/c4"
for m in m1 m1s m2 m3; do check "import HF $m" "${SY[@]}" tools/hf_import "$T/hf/$m" --out "$T/$m.h5"; done
D=build/tests/tool_dump
for m in m1 m2 m3; do check "tool_dump $m" $D --ckpt "$T/$m.h5" --out "$T/$m.dump" --seq_len 48 --micro_batch 2; done
check "build/eval of imported m1 on prepare_hf data (cp 2, --eod 0)" "${MPI[@]}" -np 2 build/eval --ckpt "$T/m1.h5" --data "$T/hd/train_*.bin" \
  --eod 0 --seq_len 64 --bucket 1 --docs 3 --cp 2 --out "$T/ev" --name m1
# ringlm runs and imports exported: X (trained, tp 2), Y2 (extended at cp 2: YaRN x4 with
# original_max_position_embeddings), m2 (tied), m1 with the tokenizer; import(export(import(m1))) = import(m1)
check "export Y2" "${SY[@]}" tools/hf_export "$T/Y2" --out "$T/eY"
check "export imported m2 (tied)" "${SY[@]}" tools/hf_export "$T/m2.h5" --out "$T/em2"
check "export imported m1" "${SY[@]}" tools/hf_export "$T/m1.h5" --out "$T/em1"
# the whole chain on the BPE tokenizer: imported m1 (YaRN x4 from 32) extended to x8 and 256 tokens on its own
# prepare_hf data, on tp 2 x cp 2, then exported with the tokenizer
printf 'seq_len = 256\nbatch_size = 2\nmax_steps = 2\nwarmup_steps = 1\nlr = 1e-3\n' > "$T/z.conf"   # training keys only
CONF=$T/z.conf train_run Z 4 --init_from "$T/m1.h5" --train_data "$T/hd/train_*.bin" --tp 2 --cp 2 --rope_factor 8 --max_seq_len 256 \
  && grep -q "init_from: model keys changed from the checkpoint: max_seq_len 128 -> 256, rope_factor 4 -> 8$" "$T/Z.out" \
  && ok "--init_from the imported m1 on its tokenizer's data, tp 2 x cp 2: YaRN x4 -> x8, 256 tokens ($(grep -o 'final loss [0-9.]*' "$T/Z.out"))" \
  || bad "--init_from m1 on tp 2 x cp 2: $(grep -h init "$T/Z.out" "$T/Z.err" | head -3)"
check "export Z with the tokenizer" "${SY[@]}" tools/hf_export "$T/Z" --out "$T/eZ" --tokenizer "$T/tok/bpe/tokenizer.json"
check "tool_dump Z" $D --ckpt "$T/Z/ckpt_00000002.h5" --out "$T/Z.dump" --seq_len 200 --micro_batch 1
check "re-import the m1 export" "${SY[@]}" tools/hf_import "$T/em1" --out "$T/m1b.h5"
check "tool_dump X" $D --ckpt "$X" --out "$T/X.dump" --seq_len 64 --micro_batch 2
check "tool_dump Y2" $D --ckpt "$T/Y2/ckpt_00000002.h5" --out "$T/Y2.dump" --seq_len 96 --micro_batch 2
$HCHK logits "HF m1 (GQA, untied, YaRN >= 4.51 form) imported" "$T/m1.dump" "$T/hf/m1" \
  ::: logits "HF m2 (MQA, tied, YaRN without original_max_position_embeddings) imported" "$T/m2.dump" "$T/hf/m2" \
  ::: logits "HF m3 (MHA, linear) imported" "$T/m3.dump" "$T/hf/m3" ::: asis "HF m1" "$T/m1.dump" "$T/hf/m1" \
  ::: same "HF m1 sharded vs unsharded import" "$T/m1.h5" "$T/m1s.h5" ::: same "import(export(import(m1)))" "$T/m1.h5" "$T/m1b.h5" \
  ::: evalref "build/eval cp 2 on m1" "$T/ev/m1.csv" "$T/hd/train_*.bin" 0 64 3 "$T/hf/m1" \
  ::: logits "trained X (tp 2) exported, from_pretrained" "$T/X.dump" "$T/eX" \
  ::: logits "extended Y2 (cp 2, YaRN x4 from 64) exported, from_pretrained" "$T/Y2.dump" "$T/eY" \
  ::: asis "extended Y2 export" "$T/Y2.dump" "$T/eY" \
  ::: logits "Z (m1 extended on tp 2 x cp 2) exported with the tokenizer, from_pretrained" "$T/Z.dump" "$T/eZ" \
  ::: logits "imported m2 (tied) exported, from_pretrained" "$T/m2.dump" "$T/em2" \
  ::: exported "m2 export (tied)" "$T/em2" "$T/m2.h5" \
  ::: hfstate "X: sharded fp32 export vs unsharded" "$T/eX" "$T/eXs" equal ::: hfstate "X: bf16 export" "$T/eX" "$T/eXb" bf16 \
  ::: autotok "Z export with --tokenizer" "$T/eZ" "$C/docs/unicode.txt" >"$T/c5" 2>&1
sub_result "HF reference checks" $? "$T/c5"; grep -E '^(ok|FAIL|#)' "$T/c5"

# passkey and the separator of a non-byte vocabulary
expect_err "passkey on a non-byte vocabulary needs --eod" "eval: --passkey writes byte-level text|vocab_size $VOCAB|--eod ID" 1 \
  build/eval --passkey --ckpt "$T/m1.h5" --passkey_lens 128 --passkey_depths 0.5 --passkey_trials 1 --out "$T/pk"
check "passkey with --eod 0 on imported m1" build/eval --passkey --ckpt "$T/m1.h5" --eod 0 --passkey_lens 128 --passkey_depths 0.5 --passkey_trials 1 --out "$T/pk"
expect_err "--eod outside the vocabulary" "eval: --eod 999 is not a token of checkpoint" 1 \
  build/eval --ckpt "$T/m1.h5" --data "$T/hd/val_*.bin" --seq_len 64 --eod 999 --out "$T/ev2"
finish
