#!/usr/bin/env bash
# Hostile Hugging Face files and failing disks for tools/hf_import, tools/hf_export and tools/prepare_hf (issue 23,
# items 5 and 7-11), with tests/hf_hostile.py writing the files:
#  - item 9: malformed config.json, safetensors headers, model.safetensors.index.json and tokenizer files (a config
#    that is a list, a header that is a list or null, null index entries, numbers given as strings or booleans,
#    non-finite or absurd factors, shape products that overflow 64 bits, duplicate keys, missing or mistyped
#    tokenizer fields) and output paths under a regular file: one line naming the file and the field, exit 1,
#    nothing written;
#  - item 10: safetensors byte ranges that overlap, leave gaps, do not end at the end of the file or do not match
#    dtype x shape: refused;
#  - item 11: NaN/inf weights (F32, F16, BF16), F64 values beyond fp32, rope_theta 1e39, max_position_embeddings 2^40
#    or 1, head_dim > 2048: refused before anything is written, never called a "diverged run";
#  - item 7: a write that fails (the file size limit of `ulimit -f`, EFBIG, fails a write as a full disk does; as
#    root also a full and a read-only tmpfs): one line, exit 1, no crash, no x.h5.tmp or temporary directory left;
#  - item 5: hf_export --force and prepare_hf --force write into a temporary directory, verify, then swap: a failure
#    while writing, or while swapping (RINGLM_TEST_HF_FAIL), leaves the previous export / shards byte for byte;
#    --tokenizer pointing into the export being replaced is read before the swap; SIGTERM stops a run the same way;
#  - item 8 (with build/hfenv): prepare_hf's peak memory on a 3 MB document is bounded by its chunk size, not by the
#    document, and long documents encoded in pieces give exactly the ids of whole-document encoding for byte-level
#    BPE (GPT-2 and Llama 3 style), Llama 2's normalizer, Metaspace/Unigram, WordPiece and WordLevel tokenizers;
#  - a seeded fuzz (HF_FUZZ_N mutants, default 200; HF_FUZZ_SEED, default 1) of the safetensors header, the index,
#    config.json, tokenizer.json and tokenizer_config.json through hf_import / prepare_hf: every run exits 0 or 1
#    in time, one line without a traceback when it refuses, no temporary file left, and every checkpoint an accepted
#    mutant gives is accepted by build/sample (the C loader: config, checksums, finite values).
# The checks that need the tokenizers library are skipped with one "skip:" line where build/hfenv cannot be made.
cd "$(dirname "$0")/.."
source tests/lib.sh
MOUNTS=()
hostile_exit() { local m; for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done; lib_exit; }
trap hostile_exit EXIT
SY=(env RINGLM_PYTHON=/usr/bin/python3)       # import/export need only h5py and numpy: the system python
IMP=("${SY[@]}" tools/hf_import)
EXP=("${SY[@]}" tools/hf_export)
HH="$PY tests/hf_hostile.py"
LIM=(bash -c 'ulimit -f 40 && exec "$@"' limited)   # LIM CMD...: CMD's writes past 40 KiB fail (EFBIG)
snapfile() { echo "$T/snap_$(echo "$1" | tr / _)"; }
snap() { (cd "$1" && ls -A | tr '\n' ' ' && sha256sum -- *) > "$(snapfile "$1")"; }        # snap DIR: its names and bytes
unchanged() { (cd "$1" && ls -A | tr '\n' ' ' && sha256sum -- *) | cmp -s - "$(snapfile "$1")"; }   # DIR as at snap
can_mount=0
if [ "$(id -u)" -eq 0 ] && mkdir -p "$T/probe" && mount -t tmpfs -o size=1m tmpfs "$T/probe" 2>/dev/null; then
  umount "$T/probe"; can_mount=1
fi
mnt() { mkdir -p "$T/$1" && mount -t tmpfs -o size="$2" tmpfs "$T/$1" && MOUNTS+=("$T/$1"); }   # NAME SIZE

# ---------------------------------------------------------------------------------------------- fixtures
$HH model "$T/m" && $HH model "$T/ms" --shards 3 || { bad "hf_hostile.py model"; finish; }
check "import the fixture (random tiny HF Llama, one file)" "${IMP[@]}" "$T/m" --out "$T/m.h5"
check "import the fixture sharded in 3 files with an index" "${IMP[@]}" "$T/ms" --out "$T/ms.h5"
check "build/reshard --verify accepts the import" build/reshard --verify "$T/m.h5"
tokjson() {   # tokjson DIR: a WordLevel tokenizer.json with <|endoftext|> (id 0) and a post-processor adding <s> (id 1)
  mkdir -p "$1" && cat > "$1/tokenizer.json" <<'JSON'
{"version": "1.0", "truncation": null, "padding": null,
 "added_tokens": [{"id": 0, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
                  {"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
 "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                    "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
 "decoder": null,
 "model": {"type": "WordLevel", "vocab": {"<|endoftext|>": 0, "<s>": 1, "[UNK]": 2, "a": 3, "b": 4, "c": 5, "def": 6, "return": 7}, "unk_token": "[UNK]"}}
JSON
  echo '{"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "<|endoftext|>", "model_input_names": ["input_ids", "token_type_ids", "attention_mask"]}' > "$1/tokenizer_config.json"
}
tokjson "$T/tokw"

# ---------------------------------------------------------------------------------------------- items 9, 10, 11
# hostile HF directories: one line naming the file and the field, exit 1, no checkpoint and no x.h5.tmp written,
# never "diverged"
$HH cases "$T/cases" "$T/m" "$T/ms" > "$T/cases.txt" || bad "hf_hostile.py cases"
while IFS=$'\t' read -r name dir pat; do
  ERR_RC=1 ERR_ALSO='[ ! -e "$T/out.h5" ] && [ ! -e "$T/out.h5.tmp" ] && ! grep -q diverged "$T/e"' \
    expect_err "hf_import refuses $name" "$pat" 1 "${IMP[@]}" "$dir" --out "$T/out.h5"
  rm -f "$T/out.h5" "$T/out.h5.tmp"
done < "$T/cases.txt"
# hostile tokenizer files (read as JSON: no tokenizers library needed) through hf_export --tokenizer: nothing written
$HH tokcases "$T/tokcases" "$T/tokw" > "$T/tokcases.txt" || bad "hf_hostile.py tokcases"
while IFS=$'\t' read -r name dir pat; do
  ERR_RC=1 ERR_ALSO='[ ! -e "$T/etok" ]' expect_err "hf_export --tokenizer refuses $name" "$pat" 1 "${EXP[@]}" "$T/m.h5" --out "$T/etok" --tokenizer "$dir"
done < "$T/tokcases.txt"
# output paths
: > "$T/afile"
ERR_RC=1 expect_err "hf_import --out under a regular file" "hf_import: cannot write '$T/afile/x.h5': '$T/afile' is not a directory" 1 \
  "${IMP[@]}" "$T/m" --out "$T/afile/x.h5"
ERR_RC=1 expect_err "hf_import --out under a regular file, deeper" "hf_import: cannot write '$T/afile/d/x.h5': '$T/afile' is not a directory" 1 \
  "${IMP[@]}" "$T/m" --out "$T/afile/d/x.h5"
ERR_RC=1 expect_err "hf_import --out a directory" "hf_import: --out '$T/cases' is a directory" 1 "${IMP[@]}" "$T/m" --out "$T/cases"
ERR_RC=1 expect_err "hf_export --out a regular file" "hf_export: --out '$T/afile' exists and is not a directory" 1 "${EXP[@]}" "$T/m.h5" --out "$T/afile"
ERR_RC=1 expect_err "hf_export --out under a regular file" "hf_export: cannot create the output directory '$T/afile/e': '$T/afile' is not a directory" 1 \
  "${EXP[@]}" "$T/m.h5" --out "$T/afile/e"
ERR_RC=1 expect_err "hf_import --seed beyond 64 bits" "hf_import: --seed 18446744073709551616 is not a 64-bit integer" 1 \
  "${IMP[@]}" "$T/m" --out "$T/out.h5" --seed 18446744073709551616

# ---------------------------------------------------------------------------------------------- items 7 and 5
# a write that fails (ulimit -f: EFBIG, as a full disk fails a write): one line, no crash, nothing left
mkdir -p "$T/w1"
ERR_RC=1 ERR_ALSO='[ -z "$(ls -A "$T/w1")" ]' expect_err "hf_import: a write that fails is one line (no crash), no x.h5.tmp left" \
  "hf_import: cannot write '$T/w1/x.h5.tmp': File too large; it was removed" 1 "${LIM[@]}" "${IMP[@]}" "$T/m" --out "$T/w1/x.h5"
ERR_RC=1 ERR_ALSO='[ -z "$(ls -A "$T/w1")" ]' expect_err "hf_import: an error inside HDF5's writing (RINGLM_TEST_HF_FAIL) is one line, no x.h5.tmp left" \
  "hf_import: cannot write '$T/w1/x.h5.tmp': No space left on device (RINGLM_TEST_HF_FAIL) (disk full); it was removed" 1 \
  env RINGLM_TEST_HF_FAIL=hf_import:write "${IMP[@]}" "$T/m" --out "$T/w1/x.h5"
ERR_RC=1 ERR_ALSO='[ ! -e "$T/ex0" ]' expect_err "hf_export: a write that fails into a new directory leaves nothing" \
  "hf_export: cannot write the export into '$T/ex0': File too large; nothing was written" 1 "${LIM[@]}" "${EXP[@]}" "$T/m.h5" --out "$T/ex0"
check "export the fixture with a tokenizer" "${EXP[@]}" "$T/m.h5" --out "$T/ex1" --tokenizer "$T/tokw"
snap "$T/ex1"
ERR_RC=1 ERR_ALSO='unchanged "$T/ex1"' expect_err "hf_export --force: a write that fails leaves the previous export byte for byte" \
  "hf_export: cannot write the export into '$T/ex1': File too large; '$T/ex1' is as it was (the previous export untouched)" 1 \
  "${LIM[@]}" "${EXP[@]}" "$T/m.h5" --out "$T/ex1" --force
ERR_RC=1 ERR_ALSO='unchanged "$T/ex1"' expect_err "hf_export --force: a failure in the middle of the swap puts the previous export back" \
  "hf_export: cannot move the previous files aside in '$T/ex1'|the previous files are back in place" 1 \
  env RINGLM_TEST_HF_FAIL=hf_export:swap "${EXP[@]}" "$T/m.h5" --out "$T/ex1" --force --dtype bf16
ERR_RC=1 ERR_ALSO='unchanged "$T/ex1"' expect_err "hf_export --force: a failure once new files are in place puts the previous export back" \
  "hf_export: cannot move the new files into '$T/ex1'|the previous files are back in place" 1 \
  env RINGLM_TEST_HF_FAIL=hf_export:swap_new "${EXP[@]}" "$T/m.h5" --out "$T/ex1" --force --dtype bf16 --max_shard_size 20KB
check "hf_export --force with --tokenizer pointing into the export it replaces" "${EXP[@]}" "$T/m.h5" --out "$T/ex1" --force --tokenizer "$T/ex1"
unchanged "$T/ex1" && grep -q "; tokenizer: tokenizer.json, tokenizer_config.json; replaced the previous export (5 files)" "$T/check.out" \
  && ok "the tokenizer inside --out is read before the swap: the re-export equals the export byte for byte ($(grep -o 'tokenizer: [^;]*' "$T/check.out"))" \
  || bad "re-export with the tokenizer in --out: $(cat "$T/check.out"); $(ls -A "$T/ex1")"
check "hf_export --force bf16 (5 files replaced)" "${EXP[@]}" "$T/m.h5" --out "$T/ex1" --force --dtype bf16 --tokenizer "$T/tokw"
check "import the bf16 export" "${IMP[@]}" "$T/ex1" --out "$T/ex1.h5"
[ -z "$(ls -A "$T/ex1" | grep '^\.')" ] && ok "no temporary directory left in the export" || bad "left in the export: $(ls -A "$T/ex1")"

if [ $can_mount -eq 1 ]; then
  # a full disk: hf_import (needs ~100 KB) into 64 KB; hf_export fp32 (~93 KB) over a bf16 export (~47 KB) in 96 KB,
  # where the fp32 export does not fit even alone
  mnt full1 64k
  ERR_RC=1 ERR_ALSO='[ -z "$(ls -A "$T/full1")" ]' expect_err "hf_import onto a full disk: one line, nothing left" \
    "hf_import: not enough space for '$T/full1/x.h5.tmp'|(disk full); nothing was written" 1 "${IMP[@]}" "$T/m" --out "$T/full1/x.h5"
  mnt full2 96k
  check "export bf16 into a 96 KB tmpfs" "${EXP[@]}" "$T/m.h5" --out "$T/full2/e" --dtype bf16 --tokenizer "$T/tokw"
  snap "$T/full2/e"
  ERR_RC=1 ERR_ALSO='unchanged "$T/full2/e"' expect_err "hf_export --force fp32 onto the full disk: one line, the bf16 export byte for byte" \
    "hf_export: not enough space in '$T/full2/e'|(disk full); '$T/full2/e' is as it was (the previous export untouched)" 1 \
    "${EXP[@]}" "$T/m.h5" --out "$T/full2/e" --force
  # read-only: an existing export, and hf_import
  mnt ro 1m
  check "export into the tmpfs that becomes read-only" "${EXP[@]}" "$T/m.h5" --out "$T/ro/e"
  snap "$T/ro/e"
  mount -o remount,ro "$T/ro"
  ERR_RC=1 ERR_ALSO='unchanged "$T/ro/e"' expect_err "hf_export --force onto a read-only export: one line, untouched" \
    "hf_export: cannot create a temporary directory in '$T/ro/e': Read-only file system" 1 "${EXP[@]}" "$T/m.h5" --out "$T/ro/e" --force
  ERR_RC=1 expect_err "hf_export into a read-only directory" "hf_export: cannot create the output directory '$T/ro/new': Read-only file system" 1 \
    "${EXP[@]}" "$T/m.h5" --out "$T/ro/new"
  ERR_RC=1 expect_err "hf_import into a read-only directory" "hf_import: cannot create '$T/ro/x.h5.tmp': Read-only file system; nothing was written" 1 \
    "${IMP[@]}" "$T/m" --out "$T/ro/x.h5"
else
  echo "skip disk-full and read-only checks: mounting a tmpfs needs root and mount permission (uid $(id -u))"
fi

# ---------------------------------------------------------------------------------------------- with the tokenizers library
FZPY=$PY
if HFPY=$(bash tools/setup/hf_env.sh 2>"$T/env.err"); then
  FZPY=$HFPY
  PH=(env RINGLM_HFENV="$(dirname "$(dirname "$HFPY")")" tools/prepare_hf)
  mkdir -p "$T/tok" "$T/doc/d"
  cat model/*.c > "$T/train.txt"
  $HFPY tests/hf_check.py tokenizers "$T/tok" "$T/train.txt" README.md docs/*.md >"$T/t1" 2>&1 && $HFPY tests/hf_hostile.py tokenizers "$T/tok" "$T/train.txt" README.md docs/*.md >>"$T/t1" 2>&1 \
    && ok "tokenizers of 7 kinds trained locally" || bad "tokenizers: $(tail -n 3 "$T/t1")"
  # item 8: a long document (model/, comm/, README.md, a run of whitespace, a text without spaces) encoded in pieces
  # of 4096 characters gives exactly the ids of the whole document
  $PY - "$T/doc" <<'PYEOF'
import glob, os, random, sys
d = sys.argv[1]
src = "".join(open(p, encoding="utf-8").read() for p in sorted(glob.glob("model/*.[ch]")) + ["README.md"] + sorted(glob.glob("docs/*.md")))
r = random.Random(7)
junk = "".join(r.choice("aabbcdeeef") for _ in range(9000))
text = src[:120000] + "\n\n \t \n" + " " * 200 + "x\n" + junk[:200] + "\n" + src[120000:160000]
open(os.path.join(d, "long.txt"), "w").write(text)
open(os.path.join(d, "junk.txt"), "w").write(src[:5000] + junk + src[5000:9000])
open(os.path.join(d, "d", "a.txt"), "w").write(src[:30000])
open(os.path.join(d, "d", "b.txt"), "w").write(src[30000:61000])
open(os.path.join(d, "d.txt"), "w").write(src[:61000])
PYEOF
  : > "$T/w.out"
  for t in bpe llama wide l3 l2legacy meta bert; do
    if env RINGLM_PREPARE_CHUNK=4096 "${PH[@]:1}" --tokenizer "$T/tok/$t" --out "$T/p_$t" --val-frac 0 --sep 0 "$T/doc/long.txt" >"$T/p.out" 2>&1; then
      grep -o "long documents: .*" "$T/p.out" | cut -c1-120 | sed "s/^/# $t: /" >> "$T/w.out"
      $HFPY tests/hf_hostile.py whole "prepare_hf, $t tokenizer" "$T/p_$t" "$T/tok/$t" "$T/doc/long.txt" >>"$T/w.out" 2>&1
    else echo "FAIL prepare_hf $t: $(head -c 300 "$T/p.out")" >> "$T/w.out"; echo "0 passed, 1 failed" >> "$T/w.out"; fi
  done
  # a word of 9000 letters, longer than a piece: byte-level BPE still exactly as whole; WordLevel ([UNK] for a word)
  # cannot be, and the summary says so
  for t in bpe l2legacy; do
    env RINGLM_PREPARE_CHUNK=4096 "${PH[@]:1}" --tokenizer "$T/tok/$t" --out "$T/pj_$t" --val-frac 0 --sep 0 "$T/doc/junk.txt" >"$T/p.out" 2>&1 \
      && $HFPY tests/hf_hostile.py whole "prepare_hf, $t tokenizer, a 9000-letter word" "$T/pj_$t" "$T/tok/$t" "$T/doc/junk.txt" >>"$T/w.out" 2>&1 \
      || echo "FAIL prepare_hf $t on junk.txt: $(head -c 300 "$T/p.out")" >> "$T/w.out"
  done
  env RINGLM_PREPARE_CHUNK=4096 "${PH[@]:1}" --tokenizer "$T/tok/wide" --out "$T/pj_wide" --val-frac 0 --sep 0 "$T/doc/junk.txt" >"$T/p.out" 2>&1 \
    && grep -q "^long documents: 1 longer than 4096 characters, encoded in pieces; [1-9][0-9]* of [0-9]* cuts may tokenize differently from whole-document encoding" "$T/p.out" \
    && echo "ok   prepare_hf, WordLevel tokenizer, a 9000-letter word: the summary says $(grep -o '[0-9]* of [0-9]* cuts may tokenize differently' "$T/p.out")" >> "$T/w.out" \
    || echo "FAIL prepare_hf wide on junk.txt: $(head -c 400 "$T/p.out")" >> "$T/w.out"
  env RINGLM_PREPARE_CHUNK=4096 "${PH[@]:1}" --tokenizer "$T/tok/l3" --out "$T/p_dir" --val-frac 0 --doc-per dir "$T/doc/d" >"$T/p.out" 2>&1 \
    && $HFPY tests/hf_hostile.py whole "prepare_hf --doc-per dir (2 files, one document), l3 tokenizer" "$T/p_dir" "$T/tok/l3" "$T/doc/d.txt" >>"$T/w.out" 2>&1 \
    || echo "FAIL prepare_hf --doc-per dir: $(head -c 300 "$T/p.out")" >> "$T/w.out"
  p=$(grep -c '^ok' "$T/w.out"); f=$(grep -c '^FAIL' "$T/w.out"); grep -E '^(ok|FAIL|#)' "$T/w.out"
  pass=$((pass + p)); fail=$((fail + f))
  # item 8: peak memory on a 3 MB document is bounded by the chunk (262144 characters), not by the document
  $PY -c "
import sys; s = open(sys.argv[1]).read(); n = 0
with open(sys.argv[2], 'w') as f:
    while n < 3_000_000: f.write(s); n += len(s)" "$T/train.txt" "$T/doc/big.txt"
  $PY -c "
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)" "${PH[@]}" --tokenizer "$T/tok/bpe" --out "$T/p_big" --val-frac 0 "$T/doc/big.txt" > "$T/rss" 2>&1
  read -r rss rc < "$T/rss"
  [ "${rc:-1}" = 0 ] && [ "${rss:-999999999}" -lt 300000 ] \
    && ok "prepare_hf on a 3 MB document: peak RSS $((rss / 1024)) MiB (< 293 MiB; whole-document encoding takes about 200 bytes per input byte)" \
    || bad "prepare_hf on a 3 MB document: exit ${rc:-?}, peak RSS ${rss:-?} KiB (want < 300000)"
  # item 5 and 7 for prepare_hf: --force failing while writing shards keeps the previous shards; a full disk
  check "prepare_hf into pd" "${PH[@]}" --tokenizer "$T/tok/bpe" --out "$T/pd" --val-frac 0.5 --shard-tokens 20000 model
  snap "$T/pd"; cp "$T/pd/meta.json" "$T/pd.meta"
  ERR_RC=1 ERR_ALSO='unchanged "$T/pd"' expect_err "prepare_hf --force: a failing shard write leaves the previous shards and meta.json byte for byte" \
    "prepare_hf: cannot write '$T/pd/.prepare_hf.new.|train_000000.bin': No space left on device (RINGLM_TEST_HF_FAIL) (disk full); '$T/pd' is as it was (the previous shards and meta.json untouched)" 1 \
    env RINGLM_TEST_HF_FAIL=prepare_hf:shard "${PH[@]:1}" --tokenizer "$T/tok/bpe" --out "$T/pd" --force --val-frac 0.5 eval
  ERR_RC=1 ERR_ALSO='unchanged "$T/pd"' expect_err "prepare_hf --force: a failing swap puts the previous shards back" \
    "prepare_hf: cannot move the previous files aside in '$T/pd'|the previous files are back in place" 1 \
    env RINGLM_TEST_HF_FAIL=prepare_hf:swap "${PH[@]:1}" --tokenizer "$T/tok/bpe" --out "$T/pd" --force --val-frac 0.5 eval
  printf '{"text": "a"}\n{"text": 1}\n' > "$T/bad.jsonl"
  ERR_RC=1 ERR_ALSO='unchanged "$T/pd"' expect_err "prepare_hf --force with a bad JSON Lines record: refused, as build/prepare, the previous shards kept" \
    "prepare_hf: $T/bad.jsonl:2: the record's field 'text' is a number, not a string" 1 "${PH[@]}" --tokenizer "$T/tok/bpe" --out "$T/pd" --force --text-field text "$T/train.txt" "$T/bad.jsonl"
  # SIGTERM the moment the temporary folder exists, before its removal is registered (a test hook): it waits until
  # the removal is registered, then stops the run; nothing is left in pd
  ERR_RC=1 ERR_ALSO='unchanged "$T/pd"' expect_err "prepare_hf --force: SIGTERM as its temporary folder is made leaves nothing behind" \
    "prepare_hf: terminated (SIGTERM); '$T/pd' is as it was (the previous shards and meta.json untouched)" 1 \
    env RINGLM_TEST_HF_FAIL=prepare_hf:staging_made "${PH[@]:1}" --tokenizer "$T/tok/bpe" --out "$T/pd" --force --val-frac 0.5 eval
  # SIGTERM in the middle of a --force run (3 MB to encode): one line, the previous shards byte for byte
  "${PH[@]}" --tokenizer "$T/tok/bpe" --out "$T/pd" --force --val-frac 0 "$T/doc/big.txt" >"$T/o" 2>"$T/e" & job=$!
  # the signal once the run writes (its temporary folder exists: its handlers are in place, whatever the load)
  end=$((SECONDS + HANG_S))
  while [ $SECONDS -lt $end ] && kill -0 $job 2>/dev/null && ! compgen -G "$T/pd/.prepare_hf.new.*" >/dev/null; do sleep 0.05; done
  kill -TERM $job; wait $job; rc=$?
  [ $rc -eq 1 ] && [ "$(cat "$T/e")" = "prepare_hf: terminated (SIGTERM); '$T/pd' is as it was (the previous shards and meta.json untouched)" ] && unchanged "$T/pd" \
    && ok "prepare_hf --force stopped by SIGTERM: one line, the previous shards and meta.json byte for byte" \
    || bad "prepare_hf --force stopped by SIGTERM: exit $rc: $(head -c 300 "$T/e"); $(ls -A "$T/pd")"
  check "prepare_hf --force replaces the shards" "${PH[@]}" --tokenizer "$T/tok/bpe" --out "$T/pd" --force --val-frac 0.5 eval
  grep -q "replaced the previous shards and meta.json" "$T/check.out" && [ -z "$(ls -A "$T/pd" | grep '^\.')" ] && ! cmp -s "$T/pd/meta.json" "$T/pd.meta" \
    && ok "prepare_hf --force: the new shards in place, no temporary directory left" || bad "prepare_hf --force: $(ls -A "$T/pd"); $(tail -n 1 "$T/check.out")"
  if [ $can_mount -eq 1 ]; then
    mnt full3 200k                      # the new shards (~320 KB) do not fit even alone
    check "prepare_hf into a 200 KB tmpfs" "${PH[@]}" --tokenizer "$T/tok/bpe" --out "$T/full3/d" --val-frac 0 model/config.c
    snap "$T/full3/d"
    ERR_RC=1 ERR_ALSO='unchanged "$T/full3/d"' expect_err "prepare_hf --force onto the full disk: one line, the previous shards byte for byte" \
      "prepare_hf: cannot write '$T/full3/d/.prepare_hf.new.|No space left on device (disk full); '$T/full3/d' is as it was (the previous shards and meta.json untouched)" 1 \
      "${PH[@]}" --tokenizer "$T/tok/bpe" --out "$T/full3/d" --force --val-frac 0 model README.md
  fi
else
  echo "skip: the checks that need the tokenizers library (chunked = whole encoding, prepare_hf memory, --force, prepare_hf fuzz): $(head -n 1 "$T/env.err")"
fi

# ---------------------------------------------------------------------------------------------- fuzz
tokjson "$T/tokfz"
mkdir -p "$T/fzc" && printf 'def a b c\nreturn a\n' > "$T/fzc/1.txt" && printf 'b c a def\n' > "$T/fzc/2.txt" && printf 'c c\n' > "$T/fzc/3.txt"
FZ=(build/sample --prompt_ids 0 --max_tokens 1 --ids --ckpt)
[ -x build/sample ] || FZ=()
$FZPY tests/hf_hostile.py fuzz "${HF_FUZZ_SEED:-1}" "${HF_FUZZ_N:-200}" "$T/m" "$T/ms" "$T/tokfz" "$T/fzc" "$T/fz" "${FZ[@]}" >"$T/fz.out" 2>&1
sub_result "fuzz" $? "$T/fz.out"; grep -E '^(ok|FAIL|#)' "$T/fz.out"
finish
