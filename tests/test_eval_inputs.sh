#!/usr/bin/env bash
# build/eval's inputs that were accepted silently or explained wrongly (issue 23, items 13, 15, 16): RoPE specs with
# NaN, infinite or absurd factors and lengths; two checkpoints of different vocabularies in one table; --passkey with
# --eod -1; NaN passkey depths; a --name that leaves --out; data in which the separator never occurs.
cd "$(dirname "$0")/.."
source tests/lib.sh

build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
A=(-c configs/tiny.conf --train_data "$T/data" --val_data "" --max_steps 1 --seq_len 64 --batch_size 4 --micro_batch 4)
build/train "${A[@]}" --out_dir "$T/m" >/dev/null 2>&1 || { bad "training m"; finish; }
build/train "${A[@]}" --out_dir "$T/v300" --data_meta 0 --vocab_size 300 >/dev/null 2>&1 || { bad "training v300"; finish; }
E=(build/eval --ckpt "$T/m" --data "$T/data" --seq_len 64 --out "$T/out")

for spec in linear:nan yarn:nan yarn:1e30 yarn:inf linear:-2 yarn:4:0.5 yarn:4:1e40; do
  expect_err "--rope $spec" "invalid value '$spec' for --rope" 1 "${E[@]}" --rope "$spec"
done
ERR_ALSO='[ ! -e "$T/out/ppl.csv" ]' expect_err "two checkpoints of different vocabularies in one table" \
  "vocab_size 257|vocab_size 300|different vocabularies|separate runs" 1 "${E[@]}" --ckpt "$T/v300" --data_meta 0
expect_err "--passkey with --eod -1" "--eod -1 means none" 1 build/eval --passkey --ckpt "$T/m" --eod -1 --out "$T/out"
expect_err "--passkey_depths nan" "invalid value 'nan' for --passkey_depths" 1 build/eval --passkey --ckpt "$T/m" \
  --passkey_depths nan --out "$T/out"
mkdir -p "$T/deep/er"
ERR_ALSO='[ -z "$(ls "$T/deep")" ] || [ "$(ls "$T/deep")" = er ]' expect_err "--name ../x (outside --out)" \
  "--name '../x' must be a plain file name" 1 build/eval --ckpt "$T/m" --data "$T/data" --seq_len 64 --out "$T/deep/er" --name ../x
expect_err "a separator that never occurs in the data" "the longest has 0, split at eod 7|check --eod" 1 "${E[@]}" \
  --eod 7 --data_meta 0
expect_train_err configs/tiny.conf "rope_factor 1e30 in a config" "rope_factor = 1e+30 must be in (0, 1e6]" 1 \
  --rope_scaling yarn --rope_factor 1e30 --train_data "$T/data" --max_steps 1
finish
