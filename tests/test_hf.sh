#!/usr/bin/env bash
# Hugging Face interop and context extension (issue 13): tools/hf_export, tools/hf_import, tools/prepare_hf and
# build/train --init_from, checked against Hugging Face's own code.
#  - without transformers (h5py + numpy only): export → import is bit-identical (fp32, also sharded), bf16 and
#    sharded exports, a padded (tp 2) vocabulary is never exported, --init_from (changed YaRN factor and
#    max_seq_len, across a ring of 2, fresh moments/cursor/step: bit-identical to starting from the export's
#    re-import), every refusal in one line; the export of a YaRN model prints one line on how transformers
#    4.45-4.50 read its keys (a plain-RoPE one none); the exported tokenizer_config.json names model_input_names
#    [input_ids, attention_mask] (written, or put into a copied one); without --tokenizer, the tokenizer that a
#    meta.json beside the checkpoint's train_data names (absolute or relative path, SHA-256 checked) is exported,
#    with one line, and a wrong SHA-256, a missing path, a non-path name, --tokenizer and --no_tokenizer are handled;
#  - with transformers 4.46.3 in build/hfenv (tools/setup/hf_env.sh; one "skip:" line when PyPI cannot be reached):
#    tokenizers trained locally, prepare_hf's shards decode to build/prepare's documents, its DIR/meta.json
#    (build/prepare's format) holds what the shards, the tokenizer.json's bytes, the tokenizers library and the
#    command line say, an existing one is refused without --force and replaced with it, an error once the shards
#    are written leaves the previous shards and meta.json as they were (and nothing of the run), hf_export finds the tokenizer of a run trained on
#    prepare_hf data through it; random HF Llama models
#    (GQA/MQA/MHA, YaRN in both key forms, linear, tied/untied, sharded) imported give HF's logits and
#    per-position losses in float32 and float64 (1e-4), also through build/eval on a ring; an imported model
#    extended with --init_from on its tokenizer's data (tp 2 x cp 2) and the other ringlm runs exported load in
#    LlamaForCausalLM.from_pretrained with matching logits; AutoTokenizer loads an export; docs/huggingface.md's step 6
#    (export, from_pretrained, AutoTokenizer, model.generate(**tok(...))) runs as printed, and generate() gives
#    the ids of a greedy decode by full forwards (which needs tools/setup/hf_torch_py311.py in build/hfenv: PyTorch
#    1.13's torch.distributed.fsdp under Python 3.11); docs/huggingface.md holds the snippet this test runs.
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
YARN_NOTE="hf_export: YaRN: transformers 4.45-4.50 ignore original_max_position_embeddings (64) and take max_position_embeddings (128) as the original length"
grep -qF "$YARN_NOTE" "$T/check.out" && grep -qF "set config.max_position_embeddings = 64 before from_pretrained" "$T/check.out" \
  && [ "$(grep -c '' "$T/check.out")" -eq 2 ] \
  && ok "the export of a YaRN model says how transformers 4.45-4.50 read its keys (one line: $(grep -o 'set config.max_position_embeddings = 64 before from_pretrained' "$T/check.out"))" \
  || bad "export X: no YaRN line: $(cat "$T/check.out")"
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

# the YaRN line only for YaRN: X with plain RoPE (import of a changed export) exports without it
variant norope 'c["rope_scaling"]=None'
check "import X with plain RoPE" "${SY[@]}" tools/hf_import "$T/v_norope" --out "$T/nr.h5"
check "export X with plain RoPE" "${SY[@]}" tools/hf_export "$T/nr.h5" --out "$T/enr"
grep -q "YaRN" "$T/check.out" && bad "a plain-RoPE export mentions YaRN: $(cat "$T/check.out")" \
  || ok "a plain-RoPE export prints no YaRN line ($(grep -o 'rope default; max_position_embeddings [0-9]*' "$T/check.out"))"

# tokenizer_config.json: model_input_names [input_ids, attention_mask] (no token_type_ids for LlamaForCausalLM), written
# or put into a copied one; hand-written tokenizer.json files (WordLevel, 5 tokens): no tokenizers library needed
tokjson() {   # tokjson DIR: a small tokenizer.json with <|endoftext|> (id 0) as a special token
  mkdir -p "$1" && cat > "$1/tokenizer.json" <<'JSON'
{"version": "1.0", "truncation": null, "padding": null,
 "added_tokens": [{"id": 0, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
 "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": null, "decoder": null,
 "model": {"type": "WordLevel", "vocab": {"<|endoftext|>": 0, "[UNK]": 1, "a": 2, "b": 3, "c": 4}, "unk_token": "[UNK]"}}
JSON
}
tokjson "$T/tokw"
tokjson "$T/tokc"
echo '{"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "model_input_names": ["input_ids", "token_type_ids", "attention_mask"]}' > "$T/tokc/tokenizer_config.json"
tokcfg() {   # tokcfg DIR: prints the exported tokenizer_config.json's model_input_names and eos_token
  $PY -c "import json,sys; c=json.load(open(sys.argv[1]+'/tokenizer_config.json')); print(c.get('model_input_names'), c.get('eos_token'), c.get('tokenizer_class'))" "$1"
}
check "export X with a tokenizer without tokenizer_config.json" "${SY[@]}" tools/hf_export "$X" --out "$T/eTw" --tokenizer "$T/tokw"
[ "$(tokcfg "$T/eTw")" = "['input_ids', 'attention_mask'] <|endoftext|> PreTrainedTokenizerFast" ] && grep -q "tokenizer_config.json (written)" "$T/check.out" \
  && ok "written tokenizer_config.json: model_input_names [input_ids, attention_mask], eos <|endoftext|>" || bad "written tokenizer_config.json: $(tokcfg "$T/eTw")"
check "export X with a tokenizer whose tokenizer_config.json names token_type_ids" "${SY[@]}" tools/hf_export "$X" --out "$T/eTc" --tokenizer "$T/tokc"
[ "$(tokcfg "$T/eTc")" = "['input_ids', 'attention_mask'] <|endoftext|> PreTrainedTokenizerFast" ] \
  && grep -qF "tokenizer_config.json (model_input_names ['input_ids', 'attention_mask'] was ['input_ids', 'token_type_ids', 'attention_mask'])" "$T/check.out" \
  && ok "copied tokenizer_config.json: model_input_names replaced (and said), its other keys kept" || bad "copied tokenizer_config.json: $(tokcfg "$T/eTc"); $(cat "$T/check.out")"
expect_err "export with --tokenizer and --no_tokenizer" "hf_export: argument --no_tokenizer: not allowed with argument --tokenizer" 1 "${SY[@]}" tools/hf_export "$X" --out "$T/e_bad" --tokenizer "$T/tokw" --no_tokenizer

# the tokenizer of the training data by default: meta.json beside the shards of the checkpoint's train_data ($T/bytes)
M=$T/bytes/meta.json
[ -f "$M" ] && mv "$M" "$M.orig"          # (one build/prepare may have written)
meta() {   # meta TOKENIZER [SHA256]: a hand-written meta.json in $T/bytes
  $PY -c "import json,sys; json.dump({'tokenizer': sys.argv[1], 'tokenizer_sha256': sys.argv[2] or None, 'vocab_size': 5, 'eod_id': 0,
  'bos_id': None, 'dtype': 'uint16', 'documents': 12, 'tokens': 3456, 'command': 'tools/prepare_hf --tokenizer ' + sys.argv[1]}, open(sys.argv[3], 'w'))" "$1" "${2:-}" "$M"
}
exp_meta() {   # exp_meta NAME OUTDIR ARGS...: export X's run directory; output in $T/check.out
  check "$1" "${SY[@]}" tools/hf_export "$T/X" --out "$2" --force "${@:3}"
}
SHA=$(sha256sum "$T/tokw/tokenizer.json" | cut -d' ' -f1)
meta "$T/tokw" "$SHA"
exp_meta "export X without --tokenizer, meta.json names one (SHA-256 given)" "$T/eM1"
grep -qF "hf_export: tokenizer $T/tokw, named by $M of the checkpoint's train_data (--tokenizer overrides, --no_tokenizer leaves it out)" "$T/check.out" \
  && cmp -s "$T/tokw/tokenizer.json" "$T/eM1/tokenizer.json" && [ "$(tokcfg "$T/eM1")" = "['input_ids', 'attention_mask'] <|endoftext|> PreTrainedTokenizerFast" ] \
  && grep -q "bos None, eos 0" "$T/check.out" \
  && ok "without --tokenizer the one meta.json of train_data names is exported, in one line: $(grep -o 'tokenizer [^ ]*, named by [^ ]*' "$T/check.out" | sed "s|$T/||g")" \
  || bad "tokenizer from meta.json: $(sed "s|$T/||g" "$T/check.out")"
meta ../tokw
exp_meta "export X, meta.json names the tokenizer relative to the shard directory (no SHA-256)" "$T/eM2"
grep -qF "hf_export: tokenizer $T/bytes/../tokw, named by $M" "$T/check.out" && cmp -s "$T/tokw/tokenizer.json" "$T/eM2/tokenizer.json" \
  && ok "a tokenizer path relative to the shard directory is found" || bad "relative tokenizer path in meta.json: $(sed "s|$T/||g" "$T/check.out")"
exp_meta "export X with --tokenizer: meta.json is not read" "$T/eM3" --tokenizer "$T/tokc"
! grep -q "named by" "$T/check.out" && [ "$(tokcfg "$T/eM3")" = "['input_ids', 'attention_mask'] <|endoftext|> PreTrainedTokenizerFast" ] \
  && grep -q "tokenizer_config.json (model_input_names" "$T/check.out" && ok "--tokenizer overrides meta.json" || bad "--tokenizer with meta.json: $(cat "$T/check.out")"
exp_meta "export X with --no_tokenizer" "$T/eM4" --no_tokenizer
! grep -q "named by" "$T/check.out" && [ ! -e "$T/eM4/tokenizer.json" ] && grep -q "bos 256, eos 256" "$T/check.out" \
  && ok "--no_tokenizer exports none although meta.json names one" || bad "--no_tokenizer: $(cat "$T/check.out")"
meta "$T/tokw" 0000000000000000000000000000000000000000000000000000000000000000
exp_meta "export X, meta.json's tokenizer_sha256 differs" "$T/eM5"
grep -qF "names the tokenizer '$T/tokw', but $T/tokw/tokenizer.json has SHA-256 ${SHA:0:12}..., not meta.json's 000000000000... (changed since the data was prepared?); exported without a tokenizer (give --tokenizer)" "$T/check.out" \
  && [ ! -e "$T/eM5/tokenizer.json" ] && ok "a tokenizer whose SHA-256 differs from meta.json's is not used, in one line" \
  || bad "meta.json SHA-256 mismatch: $(sed "s|$T/||g" "$T/check.out")"
meta "$T/gone/tokenizer.json"
exp_meta "export X, meta.json names a missing tokenizer" "$T/eM6"
grep -qF "$M names the tokenizer '$T/gone/tokenizer.json', which is not a tokenizer.json or a directory holding one here; exported without a tokenizer (give --tokenizer)" "$T/check.out" \
  && [ ! -e "$T/eM6/tokenizer.json" ] && ok "a missing tokenizer path in meta.json: one line, no tokenizer" || bad "missing tokenizer in meta.json: $(sed "s|$T/||g" "$T/check.out")"
meta bytes
exp_meta "export X, meta.json names the byte tokenizer (not a path)" "$T/eM7"
[ "$(grep -c '' "$T/check.out")" -eq 2 ] && grep -qF "; tokenizer: tokenizer.json and tokenizer_config.json (the byte tokenizer, written: ids = byte values, <|eod|> = 256)" "$T/check.out" \
  && [ -s "$T/eM7/tokenizer.json" ] && [ "$(tokcfg "$T/eM7")" = "['input_ids', 'attention_mask'] <|eod|> PreTrainedTokenizerFast" ] \
  && ok "meta.json naming the byte tokenizer: the byte tokenizer is written, said in the summary line" || bad "meta.json naming 'bytes': $(cat "$T/check.out")"
# a model of another vocabulary without a tokenizer: exported without one, and the summary line says so
exp_meta "export X with --no_tokenizer: the summary says so" "$T/eM8" --no_tokenizer
grep -qF "; tokenizer: none (--no_tokenizer)" "$T/check.out" && ok "--no_tokenizer: the summary says 'tokenizer: none (--no_tokenizer)'" || bad "--no_tokenizer summary: $(cat "$T/check.out")"
rm -f "$M"; [ -f "$M.orig" ] && mv "$M.orig" "$M"

# tools/setup/hf_env.sh makes its environment in ENV.new.PID and renames it only when complete: an install that fails
# (here: PyPI made unreachable) leaves no ENV and no temporary folder; the wrappers take an environment's python only
# once it carries the completion stamp (before: as soon as bin/python existed, so hf_export ran a half-made venv)
RINGLM_HFENV="$T/henv" PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_EXTRA_INDEX_URL= PIP_FIND_LINKS= \
  timeout $HANG_S bash tools/setup/hf_env.sh >"$T/henv.out" 2>"$T/henv.err"; rc=$?
[ $rc -eq 2 ] && [ "$(grep -c '' "$T/henv.err")" -eq 1 ] && grep -q "^hf_env: PyPI is not reachable" "$T/henv.err" && [ ! -e "$T/henv" ] \
  && [ -z "$(ls -d "$T"/henv.new.* 2>/dev/null)" ] && ok "hf_env.sh with PyPI unreachable: exit 2, one line, no environment and no temporary folder left" \
  || bad "hf_env.sh failing: exit $rc, $(cat "$T/henv.err"); left: $(ls -d "$T"/henv* 2>/dev/null | tr '\n' ' ')"
mkdir -p "$T/half/bin" && printf '#!/bin/sh\necho "half-made environment used" >&2; exit 3\n' >"$T/half/bin/python" && chmod +x "$T/half/bin/python"
RINGLM_HFENV="$T/half" tools/hf_export --help >"$T/half.out" 2>&1 && grep -q "^usage" "$T/half.out" && touch "$T/half/.ringlm-transformers==4.46.3" \
  && ! RINGLM_HFENV="$T/half" tools/hf_export --help >"$T/half2.out" 2>&1 && grep -q "half-made environment used" "$T/half2.out" \
  && ok "the wrappers pass over an environment without the completion stamp (and take one with it)" \
  || bad "wrapper and a half-made environment: $(head -c 200 "$T/half.out") | $(head -c 200 "$T/half2.out" 2>/dev/null)"

# ---------------------------------------------------------------------------------------------- part 2: with HF
if ! HFPY=$(bash tools/setup/hf_env.sh 2>"$T/env.err"); then
  echo "skip: the checks against transformers, tokenizers and safetensors: $(head -n 1 "$T/env.err")"
  finish
fi
HCHK="$HFPY tests/hf_check.py"

# a corpus with the cases build/prepare skips, non-ASCII text and a file that is not UTF-8
C=$T/corpus; mkdir -p "$C/src/sub" "$C/src/.hidden" "$C/docs" "$C/other"
cp model/*.c "$C/src/"; cp eval/report.c "$C/src/sub/"; cat README.md docs/*.md >"$C/docs/README.md"; cp checkpoint/FORMAT.md "$C/docs/"
printf 'Größe – ελληνικά – 日本語 – emoji 🙂\n\ttabs and  spaces \r\n' > "$C/docs/unicode.txt"
printf 'caf\xe9 latin-1\n' > "$C/other/latin1.txt"
printf 'special-token text is text: <|endoftext|> <s> </s>\n' > "$C/docs/specials.txt"
printf 'bin\x00ary' > "$C/src/blob.bin"; : > "$C/src/empty.txt"; echo hidden > "$C/src/.hidden/x.c"; ln -s ../docs/README.md "$C/src/link.md"
$HCHK tokenizers "$T/tok" "$C"/src/*.c "$C/docs/README.md" >"$T/c2" 2>&1; sub_result "tokenizers" $? "$T/c2"; grep '^#' "$T/c2"
VOCAB=$($PY -c "import json; print(len(json.load(open('$T/tok/bpe/tokenizer.json'))['model']['vocab']))")

# prepare_hf against build/prepare on the same corpus: same documents, split and order; decoded text equal
PH=(env RINGLM_HFENV="$(dirname "$(dirname "$HFPY")")" tools/prepare_hf)
check "prepare_hf (byte-level BPE, GPT-2 style <|endoftext|>)" "${PH[@]}" --tokenizer "$T/tok/bpe" --out "$T/hd" --val-frac 0.3 "$C/src" "$C/docs" "$C/other"
grep -q "^separator: '<|endoftext|>' id 0 before every document (the tokenizer's EOS token)$" "$T/check.out" \
  && grep -qF "meta: $T/hd/meta.json records vocab_size $VOCAB and eod 0; build/train and build/eval take them from it (a vocab_size or eod given to them that contradicts it is refused)" "$T/check.out" \
  && grep -q "not UTF-8 1" "$T/check.out" && ok "prepare_hf names the separator, what meta.json records, and counts the non-UTF-8 file" || bad "prepare_hf output: $(cat "$T/check.out")"
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

# prepare_hf --doc-lengths W: build/eval --doc_lengths's table of the training shards (the separator from meta.json),
# its document and token counts against the shards read here; DIR gets only shards and meta.json
check "prepare_hf --doc-lengths 512" "${PH[@]}" --tokenizer "$T/tok/llama/tokenizer.json" --out "$T/hd3" --val-frac 0.2 \
  --doc-lengths 512 "$C/src" "$C/docs"
cp "$T/check.out" "$T/dl_ph.out"
if build/eval --doc_lengths --data "$T/hd3/train_*.bin" --seq_len 512 --out "$T/dl_e" >"$T/dl_e.out" 2>&1; then
  a=$(sed -n '/^document lengths: /,$p' "$T/dl_ph.out"); b=$(grep -v '^wrote ' "$T/dl_e.out")
  n=$($PY -c "
import glob, numpy as np
t = np.concatenate([np.fromfile(f, dtype=np.uint16, offset=1024) for f in sorted(glob.glob('$T/hd3/train_*.bin'))])
print(int((t == 1).sum()), t.size)")
  [ -n "$a" ] && [ "$a" = "$b" ] && head -n 1 "$T/dl_ph.out" | grep -q . \
    && grep -q "^document lengths: $T/hd3/train_\*.bin (eod 1): ${n% *} documents, ${n#* } tokens" "$T/dl_ph.out" \
    && grep -q "^window 512: " "$T/dl_ph.out" && [ "$(ls "$T/hd3" | grep -cv -e '^train_' -e '^val_' -e '^meta.json$')" = 0 ] \
    && ok "prepare_hf --doc-lengths 512: eval --doc_lengths's table, eod 1 from meta.json, ${n% *} documents and ${n#* } tokens as counted here; no other file in DIR" \
    || bad "prepare_hf --doc-lengths: '$(echo "$a" | head -n 2)' vs '$(echo "$b" | head -n 2)' (counted: $n)"
else bad "eval --doc_lengths on prepare_hf's shards: $(tail -n 2 "$T/dl_e.out")"; fi
expect_err "prepare_hf --doc-lengths 1 (not a window)" "prepare_hf: --doc-lengths expects a window of 0 or 2..2147483647 tokens (0: none), got '1'" 1 \
  "${PH[@]}" --tokenizer "$T/tok/llama/tokenizer.json" --out "$T/hd4" --doc-lengths 1 "$C/src"
[ ! -e "$T/hd4" ] && ok "nothing written after a bad --doc-lengths" || bad "a bad --doc-lengths left $T/hd4"
mkdir -p "$T/notbuilt/tools"; cp tools/prepare_hf tools/prepare_hf.py tools/hf_common.py "$T/notbuilt/tools/"
expect_err "prepare_hf --doc-lengths without build/eval" "prepare_hf: --doc-lengths computes the table with build/eval, which is not built|run make first; nothing was written" 1 \
  env RINGLM_HFENV="$(dirname "$(dirname "$HFPY")")" "$T/notbuilt/tools/prepare_hf" --tokenizer "$T/tok/llama/tokenizer.json" --out "$T/hd5" --doc-lengths 64 "$C/src"
[ ! -e "$T/hd5" ] && ok "nothing written when build/eval is missing" || bad "a missing build/eval left $T/hd5"

# DIR/meta.json (build/prepare's format) against facts found without prepare_hf: counts from the shard files, dtype
# from their magic, the SHA-256 of the tokenizer.json's bytes, vocabulary and ids from the tokenizers library, the
# layout of build/prepare's meta.json, the command line that ran
meta_check() {   # meta_check NAME DIR TOKENIZER_JSON SEP_TOKEN BOS_TOKEN|'' ARGS...: ARGS as given to tools/prepare_hf
  $HFPY - "$@" "$T/bd/meta.json" >"$T/mc.out" 2>&1 <<'PYEOF' && ok "$1: $(tail -n 1 "$T/mc.out")" || bad "$1: $(tail -n 5 "$T/mc.out" | tr '\n' ' ')"
import glob, hashlib, json, os, shlex, sys
import numpy as np
from tokenizers import Tokenizer
name, d, tj, sep, bos, *args = sys.argv[1:]
args, ref = args[:-1], args[-1]
text = open(os.path.join(d, "meta.json"), "rb").read().decode("utf-8")
m = json.loads(text)
keys = ["format", "tokenizer", "tokenizer_sha256", "vocab_size", "eod_id", "bos_id", "dtype", "documents", "tokens",
        "shards", "command"]
assert list(m) == keys, list(m)
layout = lambda t: [l.split(":")[0] for l in t.splitlines()]
assert layout(text) == layout(open(ref).read()), (text, "is not laid out as build/prepare's meta.json")
assert m["format"] == "ringlm-data-1", m["format"]
assert os.path.isabs(m["tokenizer"]) and m["tokenizer"] == os.path.abspath(tj), (m["tokenizer"], tj)
assert m["tokenizer_sha256"] == hashlib.sha256(open(tj, "rb").read()).hexdigest(), m["tokenizer_sha256"]
tok = Tokenizer.from_file(tj)
vocab = tok.get_vocab(with_added_tokens=True)
assert m["vocab_size"] == max(vocab.values()) + 1, (m["vocab_size"], max(vocab.values()) + 1)
assert m["eod_id"] == tok.token_to_id(sep), (m["eod_id"], sep, tok.token_to_id(sep))
assert m["bos_id"] == (tok.token_to_id(bos) if bos else None), (m["bos_id"], bos)
magics = set()
for split in ("train", "val"):
    toks, counts = [], []
    paths = sorted(glob.glob(os.path.join(d, f"{split}_*.bin")))
    for p in paths:
        h = np.fromfile(p, "<i4", 256)
        magics.add(int(h[0]))
        dt = {20240520: "<u2", 20240521: "<u4"}[int(h[0])]
        assert h[1] == 1 and os.path.getsize(p) == 1024 + int(h[2]) * np.dtype(dt).itemsize, (p, h[:3])
        counts.append(int(h[2]))
        toks.append(np.fromfile(p, dt, offset=1024))
    t = np.concatenate(toks) if toks else np.zeros(0, np.int64)
    assert m["shards"][split] == len(paths), (split, m["shards"], len(paths))
    assert m["tokens"][split] == sum(counts) == len(t), (split, m["tokens"], sum(counts))
    assert m["documents"][split] == int((t == m["eod_id"]).sum()), (split, m["documents"], int((t == m["eod_id"]).sum()))
    assert not len(t) or (t[0] == m["eod_id"] and int(t.max()) < m["vocab_size"]), split
assert len(magics) == 1 and m["dtype"] == {20240520: "uint16", 20240521: "uint32"}[magics.pop()], (magics, m["dtype"])
cmd = shlex.split(m["command"])
assert cmd[1:] == args, (cmd, args)
assert os.path.realpath(cmd[0]).removesuffix(".py") == os.path.realpath("tools/prepare_hf"), cmd[0]
assert not os.path.exists(os.path.join(d, ".meta.json.tmp"))
print(f"format, tokenizer (absolute), SHA-256, vocab_size {m['vocab_size']}, eod_id {m['eod_id']}, bos_id {m['bos_id']}, "
      f"dtype {m['dtype']}, documents {m['documents']}, tokens {m['tokens']}, shards {m['shards']}, command: as found")
PYEOF
}
meta_check "meta.json of prepare_hf per file (BPE, <|endoftext|>)" "$T/hd" "$T/tok/bpe/tokenizer.json" '<|endoftext|>' '' \
  --tokenizer "$T/tok/bpe" --out "$T/hd" --val-frac 0.3 "$C/src" "$C/docs" "$C/other"
meta_check "meta.json of prepare_hf per dir, 5000-token shards (Llama style, BOS <s>)" "$T/hd2" "$T/tok/llama/tokenizer.json" '<s>' '<s>' \
  --tokenizer "$T/tok/llama/tokenizer.json" --out "$T/hd2" --doc-per dir --seed 7 --shard-tokens 5000 "$C/src" "$C/docs"
meta_check "meta.json of prepare_hf with the wide vocabulary" "$T/hw" "$T/tok/wide/tokenizer.json" '<|endoftext|>' '' \
  --tokenizer "$T/tok/wide" --out "$T/hw" --val-frac 0.5 "$T/wc"
# relative paths (the tokenizer is recorded absolute), arguments that need shell quoting, no val documents
mkdir -p "$T/it's docs" && cp model/config.c model/params.c "$T/it's docs/"
PHA=("${PH[@]:0:2}" "$PWD/tools/prepare_hf")
(cd "$T" && "${PHA[@]}" --tokenizer tok/llama --out rel --sep '<s>' --val-frac 0 "it's docs") >"$T/check.out" 2>&1 \
  && ok "prepare_hf run from \$T with relative paths" || bad "prepare_hf with relative paths: $(head -c 600 "$T/check.out")"
meta_check "meta.json of a run with relative paths and quoted arguments, no val split" "$T/rel" "$T/tok/llama/tokenizer.json" '<s>' '<s>' \
  --tokenizer tok/llama --out rel --sep '<s>' --val-frac 0 "it's docs"
expect_err "prepare_hf without --tokenizer" "prepare_hf: --tokenizer TOKENIZER is required" 1 "${PH[@]}" --out "$T/hx" "$C/src"
expect_err "prepare_hf: a tokenizer without BOS/EOS needs --sep" "names no BOS or EOS token|--sep TOKEN" 1 "${PH[@]}" --tokenizer "$T/tok/nospecial" --out "$T/hx" "$C/src"
expect_err "prepare_hf: an unknown --sep" "--sep '<nope>' is neither a token nor an id" 1 "${PH[@]}" --tokenizer "$T/tok/bpe" --sep '<nope>' --out "$T/hx" "$C/src"
cp "$T/hd/meta.json" "$T/hd.meta"
ERR_RC=1 ERR_ALSO='cmp -s "$T/hd/meta.json" "$T/hd.meta"' \
  expect_err "prepare_hf over existing shards and meta.json (the shards are named)" "prepare_hf: '$T/hd/train_000000.bin' already exists (use --force" 1 "${PH[@]}" --tokenizer "$T/tok/bpe" --out "$T/hd" "$C/src"
mkdir -p "$T/hm" && cp "$T/hd/meta.json" "$T/hm/"
ERR_RC=1 ERR_ALSO='cmp -s "$T/hm/meta.json" "$T/hd.meta" && [ "$(ls -A "$T/hm")" = meta.json ]' \
  expect_err "prepare_hf over an existing meta.json alone" "prepare_hf: '$T/hm/meta.json' already exists (use --force to replace the shards in '$T/hm')" 1 \
  "${PH[@]}" --tokenizer "$T/tok/llama" --out "$T/hm" "$T/wc"
check "prepare_hf --force over the existing meta.json" "${PH[@]}" --tokenizer "$T/tok/llama" --out "$T/hm" --force --val-frac 0.5 "$T/wc"
meta_check "meta.json replaced with --force" "$T/hm" "$T/tok/llama/tokenizer.json" '<s>' '<s>' --tokenizer "$T/tok/llama" --out "$T/hm" --force --val-frac 0.5 "$T/wc"
# an error once the shards are written (writing meta.json fails: RINGLM_TEST_HF_FAIL simulates a full disk there):
# with --force the previous shards and meta.json stay as they were and nothing of the run is left (no temporary
# directory); into a new directory, not even the directory
HM_LS=$(ls -A "$T/hm" | tr '\n' ' '); (cd "$T/hm" && sha256sum -- *) > "$T/hm.sum"
ERR_RC=1 ERR_ALSO='(cd "$T/hm" && sha256sum --quiet -c "$T/hm.sum") && [ "$(ls -A "$T/hm" | tr "\n" " ")" = "$HM_LS" ]' \
  expect_err "prepare_hf --force: an error once the shards are written leaves the previous shards and meta.json as they were" \
  "prepare_hf: cannot write '$T/hm/.prepare_hf.new.|/meta.json': No space left on device|'$T/hm' is as it was (the previous shards and meta.json untouched)" 1 \
  env RINGLM_TEST_HF_FAIL=prepare_hf:meta "${PH[@]:1}" --tokenizer "$T/tok/llama" --out "$T/hm" --force --val-frac 0.5 "$T/wc"
ERR_RC=1 ERR_ALSO='[ ! -e "$T/hn" ]' \
  expect_err "prepare_hf: the same into a new directory leaves nothing" "prepare_hf: cannot write '$T/hn/.prepare_hf.new.|; nothing was written" 1 \
  env RINGLM_TEST_HF_FAIL=prepare_hf:meta "${PH[@]:1}" --tokenizer "$T/tok/bpe" --out "$T/hn" --shard-tokens 1000 "$C/src"
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
grep -qF "; tokenizer: none written: vocab_size $VOCAB is not the byte tokenizer's 257 and no tokenizer was given or found beside the training data (give --tokenizer)" "$T/check.out" \
  && [ ! -e "$T/em2/tokenizer.json" ] && ok "a model of another vocabulary without a tokenizer: the summary says none was written" \
  || bad "no tokenizer, vocab $VOCAB: $(cat "$T/check.out")"
# a byte-level run (a memorised text; plain RoPE) exported without --tokenizer gets the byte tokenizer; generate()
# from the export equals build/sample --greedy on the checkpoint
mkdir -p "$T/fox"; for i in $(seq 1 40); do echo "the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs." >"$T/fox/d$i.txt"; done
build/prepare --out "$T/foxd" --val-frac 0 --keep-duplicates "$T/fox" >/dev/null \
  && build/train --vocab_size 257 --d_model 48 --n_layer 2 --n_head 4 --n_kv_head 2 --d_ff 96 --max_seq_len 128 --seq_len 64 \
     --batch_size 8 --micro_batch 8 --max_steps 120 --lr 1e-2 --warmup_steps 5 --train_data "$T/foxd" --out_dir "$T/F" >"$T/F.out" 2>&1 \
  && check "export the byte-level run F (no --tokenizer)" "${SY[@]}" tools/hf_export "$T/F" --out "$T/eF" \
  && timeout $HANG_S build/sample --ckpt "$T/F" --prompt "the quick" --greedy --max_tokens 40 --ids >"$T/F.ids" 2>"$T/F.err" \
  || bad "byte-level run F: $(tail -n 2 "$T/F.out" "$T/F.err" 2>/dev/null)"
check "export imported m1" "${SY[@]}" tools/hf_export "$T/m1.h5" --out "$T/em1"
# the whole chain on the BPE tokenizer: imported m1 (YaRN x4 from 32) extended to x8 and 256 tokens on its own
# prepare_hf data, on tp 2 x cp 2, then exported with the tokenizer
printf 'seq_len = 256\nbatch_size = 2\nmax_steps = 2\nwarmup_steps = 1\nlr = 1e-3\n' > "$T/z.conf"   # training keys only
CONF=$T/z.conf train_run Z 4 --init_from "$T/m1.h5" --train_data "$T/hd/train_*.bin" --tp 2 --cp 2 --rope_factor 8 --max_seq_len 256 \
  && grep -q "init_from: model keys changed from the checkpoint: max_seq_len 128 -> 256, rope_factor 4 -> 8$" "$T/Z.out" \
  && ok "--init_from the imported m1 on its tokenizer's data, tp 2 x cp 2: YaRN x4 -> x8, 256 tokens ($(grep -o 'final loss [0-9.]*' "$T/Z.out"))" \
  || bad "--init_from m1 on tp 2 x cp 2: $(grep -h init "$T/Z.out" "$T/Z.err" | head -3)"
check "export Z with the tokenizer" "${SY[@]}" tools/hf_export "$T/Z" --out "$T/eZ" --tokenizer "$T/tok/bpe/tokenizer.json"
check "export Z without --tokenizer" "${SY[@]}" tools/hf_export "$T/Z" --out "$T/eZm"
grep -qF "hf_export: tokenizer $T/tok/bpe/tokenizer.json, named by $T/hd/meta.json of the checkpoint's train_data" "$T/check.out" \
  && cmp -s "$T/tok/bpe/tokenizer.json" "$T/eZm/tokenizer.json" && cmp -s "$T/eZ/tokenizer_config.json" "$T/eZm/tokenizer_config.json" \
  && ok "hf_export finds the tokenizer of Z's training data through the meta.json prepare_hf wrote (SHA-256 checked)" \
  || bad "export Z through prepare_hf's meta.json: $(sed "s|$T/||g" "$T/check.out" | tr '\n' ' ')"
# docs/huggingface.md's step 6, run as printed from a directory laid out as that recipe's: the
# repository's tools/ and build/hfenv, out/ext = the run Z, M = ~/models/llama-4k = Z's BPE tokenizer (the recipe's
# real-model example; tests/test_hf_recipe.sh runs the whole recipe with its tiny model); hf_check's
# `generate` then checks its printed text and the ids of that generate() call against a greedy decode of its own
R=$T/readme
cat > "$T/step6.sh" <<'README'
tools/hf_export out/ext --out out/ext/hf --dtype bf16 --tokenizer "$M"
build/hfenv/bin/python - <<'EOF'
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
d = "out/ext/hf"
cfg = LlamaConfig.from_pretrained(d)
cfg.max_position_embeddings = cfg.rope_scaling["original_max_position_embeddings"]   # transformers < 4.51 only
model = LlamaForCausalLM.from_pretrained(d, config=cfg)
tok = AutoTokenizer.from_pretrained(d)
out = model.generate(**tok("def main(", return_tensors="pt"), max_new_tokens=32)
print(tok.decode(out[0]))
EOF
README
$PY -c "import sys; sys.exit(open(sys.argv[2]).read() not in open(sys.argv[1]).read())" docs/huggingface.md "$T/step6.sh" \
  && ok "docs/huggingface.md's step 6 is the snippet run here ($(grep -c '' "$T/step6.sh") lines)" \
  || bad "docs/huggingface.md's step 6 is not the snippet tests/test_hf.sh runs: update one of them"
mkdir -p "$R/build" "$R/out" "$R/home/models" && ln -s "$PWD/tools" "$R/tools" && ln -s "$(dirname "$(dirname "$HFPY")")" "$R/build/hfenv" \
  && ln -s "$T/Z" "$R/out/ext" && ln -s "$T/tok/bpe" "$R/home/models/llama-4k"
(cd "$R" && env -u RINGLM_PYTHON -u RINGLM_HFENV HOME="$R/home" M="$R/home/models/llama-4k" timeout $HANG_S bash -e "$T/step6.sh") >"$T/step6.out" 2>"$T/step6.err" \
  && ok "docs/huggingface.md's step 6 runs as printed (export bf16 with the tokenizer; from_pretrained, AutoTokenizer, generate): prints $(tail -n 1 "$T/step6.out" | head -c 40 | LC_ALL=C tr -c '[:print:]' '?')..." \
  || bad "docs/huggingface.md's step 6: exit $?: $(tail -n 3 "$T/step6.err" | tr '\n' ' ' | head -c 600)"
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
  ::: autotok "Z export with --tokenizer" "$T/eZ" "$C/docs/unicode.txt" \
  ::: generate "docs/huggingface.md's step 6 on Z" "$T/Z/hf" "def main(" 32 "$T/step6.out" \
  ::: bytetok "byte-level F exported with the byte tokenizer" "$T/eF" "$T/F.ids" "the quick" 40 >"$T/c5" 2>&1
sub_result "HF reference checks" $? "$T/c5"; grep -E '^(ok|FAIL|#)' "$T/c5"

# passkey and the separator of a non-byte vocabulary
expect_err "passkey on a non-byte vocabulary needs --eod" "eval: --passkey writes byte-level text|vocab_size $VOCAB|--eod ID" 1 \
  build/eval --passkey --ckpt "$T/m1.h5" --passkey_lens 128 --passkey_depths 0.5 --passkey_trials 1 --out "$T/pk"
check "passkey with --eod 0 on imported m1" build/eval --passkey --ckpt "$T/m1.h5" --eod 0 --passkey_lens 128 --passkey_depths 0.5 --passkey_trials 1 --out "$T/pk"
expect_err "--eod outside the vocabulary" "eval: --eod 999 is not a token of checkpoint" 1 \
  build/eval --ckpt "$T/m1.h5" --data "$T/hd/val_*.bin" --seq_len 64 --eod 999 --out "$T/ev2"
finish
