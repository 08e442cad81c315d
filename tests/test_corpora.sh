#!/usr/bin/env bash
# test_corpora.sh — data from real corpora (issue 38): build/prepare's split names, JSON Lines, --files-from and
# duplicates against tests/corpora_ref.py (an independent reference of the documented rules: the shards must hold
# exactly its documents, in order, in its splits); bad input in one line. With build/hfenv (tools/setup/hf_env.sh;
# one "skip:" line when PyPI cannot be reached): tools/prepare_hf splits and reads them as build/prepare does and
# reads Parquet files and saved datasets; tools/train_tokenizer's tokenizer prepares data that decodes back to its
# text; data/tokenizer.c's decoding (build/tests/tool_detok) against the tokenizers library's decode on many ids;
# build/sample, training's samples and tools/sample_text print a BPE model's text as the library decodes its ids.
cd "$(dirname "$0")/.."
source tests/lib.sh
PREP=build/prepare
REF="$PY tests/corpora_ref.py"
[ -x "$PREP" ] || { bad "build/prepare is not built"; finish; }
prep() { timeout $HANG_S "$PREP" "$@"; }
# prep_err DESCRIPTION WORDS ARGS...: exit 1, one line on stderr starting "prepare: " with WORDS ('|'-separated), no stdout
prep_err() { ERR_RC=1 ERR_ALSO='[ ! -s "$T/o" ] && grep -q "^prepare: " "$T/e"' expect_err "$1" "$2" 1 "$PREP" "${@:3}"; }

# ---------------------------------------------------------------------------------------------- 1. split names
# 40 files of one basename given as PATHs (a glob: pkg*/README.md) and 3 of unique names. Before: every README.md had
# the key "README.md", so all 40 landed on one side (39 + the one the at-least-one rule moves)
C=$T/docs; mkdir -p "$C"
for i in $(seq -w 1 40); do mkdir -p "$C/pkg$i"; printf 'package %s\nreadme text %s\n' "$i" "$((10#$i * 7))" > "$C/pkg$i/README.md"; done
for n in alpha beta gamma; do echo "unique $n" > "$C/$n.txt"; done
prep --out "$T/s1" --val-frac 0.5 --seed 2 "$C"/pkg*/README.md "$C"/*.txt > "$T/s1.out" 2>&1
check "40 README.md files and 3 unique ones at --val-frac 0.5: the split the reference gives (names below their common directory)" \
  $REF expect "$T/s1" 2 0.5 file - "$C"/pkg*/README.md "$C"/*.txt
nv=$(sed -n 's/^val: \([0-9]*\) documents.*/\1/p' "$T/s1.out")
[ "${nv:-0}" -ge 10 ] && [ "$nv" -le 33 ] && ok "... $nv of 43 documents in val (a fair share, not 1 or 42)" || bad "val has '$nv' of 43 documents: $(head -3 "$T/s1.out")"
grep -q "^split: 40 documents shared their name with another .* e.g. 'README.md' is named 'pkg01/README.md'$" "$T/s1.out" \
  && ok "one line says which names were shared and how they are named: $(grep -o "e.g. .*" "$T/s1.out")" || bad "no split: line: $(cat "$T/s1.out" | head -5)"
# the same corpus at another path (and through a relative path): the same shards; unique names keep their old key
mkdir -p "$T/moved/deeper" && cp -r "$C" "$T/moved/deeper/docs"
(cd "$T/moved" && "$OLDPWD/$PREP" --out "$T/s2" --val-frac 0.5 --seed 2 deeper/docs/pkg*/README.md deeper/docs/*.txt >/dev/null 2>&1)
check "the corpus moved elsewhere and given by relative paths: the same shards" diff -r -x meta.json "$T/s1" "$T/s2"
# a split too small for its expectation says why
prep --out "$T/s3" --val-frac 0.1 --seed 1 "$C"/*.txt "$C/pkg01" "$C/pkg02" > "$T/s3.out" 2>&1
grep -q "^WARNING: the held-out split has only 1 document (0.1 x 5 documents is 0.5): " "$T/s3.out" \
  && ok "a tiny held-out split's warning says why: $(grep -o '(0.1 x 5 documents is 0.5)' "$T/s3.out")" || bad "tiny split warning: $(grep WARNING "$T/s3.out")"
prep --out "$T/s4" --val-frac 0.2 --doc-per dir "$C/pkg01" "$C/pkg02" "$C/pkg03" > "$T/s4.out" 2>&1
grep -q "(0.2 x 3 documents is 0.6; --doc-per dir makes each directory PATH one document)" "$T/s4.out" \
  && ok "... and names --doc-per dir when it made the documents few" || bad "doc-per dir warning: $(grep WARNING "$T/s4.out")"

# ---------------------------------------------------------------------------------------------- 2. JSON Lines
J=$T/jl; mkdir -p "$J/sub"
$PY - "$J" <<'PYEOF'
import gzip, json, sys
d = sys.argv[1]
recs = [{"id": i, "text": f"record {i}: caf\u00e9 \u65e5\u672c \U0001F642 tab\tquote\" back\\ nl\n", "meta": {"text": "not this", "n": [1, 2.5e3, None, True]}} for i in range(60)]
recs[3]["text"] = ""; recs[7]["text"] = None
with open(f"{d}/a.jsonl", "w", encoding="utf-8") as f:
    for i, r in enumerate(recs):
        f.write(json.dumps(r, ensure_ascii=(i % 2 == 0)) + ("\r\n" if i % 5 == 0 else "\n"))
        if i == 10: f.write("\n  \t \n")
with gzip.open(f"{d}/sub/b.jsonl.gz", "wt", encoding="utf-8") as f:
    for i in range(25): f.write(json.dumps({"text": f"gzip record {i} " + "x" * i}) + "\n")
open(f"{d}/c.ndjson", "w").write('{"text": "lone \\ud800 surrogate, pair \\ud83d\\ude42, two \\udc00\\ud800"}\n')
open(f"{d}/notes.txt", "w").write("a plain text file among them\n")
open(f"{d}/other.json", "w").write('{"not": "a JSON Lines name"}\n')
PYEOF
prep --out "$T/j1" --text-field text --val-frac 0.3 --seed 4 "$J" > "$T/j1.out" 2>"$T/j1.err"; rc=$?
check "JSON Lines (plain, CRLF, blank lines, gzip, ndjson) and text files: exit 0, the documents and split of the reference" \
  eval '[ $rc -eq 0 ] && [ ! -s "$T/j1.err" ] && $REF expect "$T/j1" 4 0.3 file text "$J"'
grep -q "^jsonl: 84 records with text from 3 JSON Lines files (field 'text'; skipped: empty or null 2)$" "$T/j1.out" \
  && grep -q "^prepare: 86 documents from 5 files " "$T/j1.out" && grep -q "^jsonl: 3 \\\\u escapes of lone UTF-16 surrogates" "$T/j1.out" \
  && ok "the summary counts records, empty ones and lone surrogates: $(grep '^jsonl: 84' "$T/j1.out")" || bad "JSON Lines summary: $(head -4 "$T/j1.out")"
mkdir -p "$T/jz" && gzip -c "$J/a.jsonl" > "$T/jz/a.jsonl.gz"
prep --out "$T/jz1" --text-field text --val-frac 0.3 --seed 4 "$J/a.jsonl" >/dev/null 2>&1 && prep --out "$T/jz2" --text-field text --val-frac 0.3 --seed 4 "$T/jz/a.jsonl.gz" >/dev/null 2>&1
check "a JSON Lines file compressed splits as it did plain (the same shards)" diff -r -x meta.json "$T/jz1" "$T/jz2"
prep --out "$T/j2" --val-frac 0.3 --seed 4 "$J" > /dev/null 2>&1
check "without --text-field a .jsonl file is a text document like any other" $REF expect "$T/j2" 4 0.3 file - "$J"
printf '{"text": "ok"}\n{"text": "b",}\n' > "$T/bad1.jsonl"
printf '{"txt": "a", "id": 3}\n' > "$T/bad2.jsonl"
printf '{"text": 5}\n' > "$T/bad3.jsonl"
printf '{"text": "\xff"}\n' > "$T/bad4.jsonl"
printf '[1, 2]\n' > "$T/bad5.jsonl"
printf '{"text": "a", "text": "b"}\n' > "$T/bad6.jsonl"
printf '{"text": "a"} {"text": "b"}\n' > "$T/bad7.jsonl"
$PY -c "import gzip,sys; g=gzip.compress(b'{\"text\": \"abc\"}\n' * 2000); open(sys.argv[1], 'wb').write(g[:len(g) // 2]); open(sys.argv[2], 'wb').write(g[:12] + bytes(40) + g[52:])" "$T/trunc.jsonl.gz" "$T/corrupt.jsonl.gz"
prep_err "a bad JSON line"              "bad1.jsonl:2: not a valid JSON record"          --out "$T/je" --text-field text "$T/bad1.jsonl"
prep_err "a record without the field"   "bad2.jsonl:1: the record has no field 'text' (its fields: txt, id)|--text-field" --out "$T/je" --text-field text "$T/bad2.jsonl"
prep_err "a field that is not a string" "bad3.jsonl:1: the record's field 'text' is a number, not a string" --out "$T/je" --text-field text "$T/bad3.jsonl"
prep_err "bytes that are not UTF-8"     "bad4.jsonl:1: not a valid JSON record: bytes that are not UTF-8" --out "$T/je" --text-field text "$T/bad4.jsonl"
prep_err "a record that is no object"   "bad5.jsonl:1: not a valid JSON record: a record must be a JSON object" --out "$T/je" --text-field text "$T/bad5.jsonl"
prep_err "the field twice"              "bad6.jsonl:1: the record has the field 'text' twice" --out "$T/je" --text-field text "$T/bad6.jsonl"
prep_err "two records on a line"        "bad7.jsonl:1: not a valid JSON record: more after the record's closing '}'" --out "$T/je" --text-field text "$T/bad7.jsonl"
prep_err "a truncated gzip file"        "trunc.jsonl.gz' cannot be decompressed (gzip: unexpected end of file)" --out "$T/je" --text-field text "$T/trunc.jsonl.gz"
prep_err "a corrupt gzip file"          "corrupt.jsonl.gz' cannot be decompressed (gzip:" --out "$T/je" --text-field text "$T/corrupt.jsonl.gz"
prep_err "--text-field ''"              "--text-field expects the name" --out "$T/je" --text-field "" "$J"
[ ! -e "$T/je" ] && ok "bad JSON Lines wrote no output directory" || bad "bad input left $T/je"

# ---------------------------------------------------------------------------------------------- 3. --files-from
printf '%s\n\n%s\r\n%s\n' "$C/pkg03" "$C/alpha.txt" "$J/a.jsonl" > "$T/list"
prep --out "$T/f1" --text-field text --val-frac 0.4 --files-from "$T/list" "$C/beta.txt" > "$T/f1.out" 2>&1
check "--files-from LIST (a directory, a file, a blank line, CRLF) after the PATH arguments: the reference's documents" \
  $REF expect "$T/f1" 0 0.4 file text "$C/beta.txt" "$C/pkg03" "$C/alpha.txt" "$J/a.jsonl"
prep --out "$T/f2" --text-field text --val-frac 0.4 "$C/beta.txt" "$C/pkg03" "$C/alpha.txt" "$J/a.jsonl" >/dev/null 2>&1
check "... the same shards as the paths given as arguments" diff -r -x meta.json "$T/f1" "$T/f2"
cat "$T/list" | prep --out "$T/f3" --text-field text --val-frac 0.4 --files-from - "$C/beta.txt" >/dev/null 2>&1
check "--files-from - reads the list from standard input" diff -r -x meta.json "$T/f1" "$T/f3"
printf '%s\n%s\n' "$C/beta.txt" "$T/missing.txt" > "$T/list2"
prep_err "a list naming a missing file" "--files-from $T/list2:2: cannot read '$T/missing.txt': No such file or directory" --out "$T/fe" --files-from "$T/list2"
prep_err "a missing list"               "--files-from: cannot read '$T/nolist'" --out "$T/fe" --files-from "$T/nolist"
: > "$T/empty.list"
prep_err "an empty list"                "the --files-from list names no path" --out "$T/fe" --files-from "$T/empty.list"

# ---------------------------------------------------------------------------------------------- 4. duplicates
D=$T/dup; mkdir -p "$D/tree/sub" "$D/copy"
for i in 1 2 3 4; do echo "file $i of the tree" > "$D/tree/sub/f$i.txt"; done
cp "$D/tree/sub/f2.txt" "$D/copy/same_bytes.txt"; echo "only here" > "$D/copy/own.txt"
ln -s tree "$D/linked"; ln "$D/tree/sub/f3.txt" "$D/hardlink.txt"
prep --out "$T/d1" --val-frac 0.3 "$D/tree" "$D/linked" "$D/copy" "$D/hardlink.txt" "$D/tree/sub/f1.txt" > "$T/d1.out" 2>"$T/d1.err"; rc=$?
check "a symlinked directory, a hard link, a copy and a path given twice: exit 0, the reference's documents (the first of each kept)" \
  eval '[ $rc -eq 0 ] && $REF expect "$T/d1" 0 0.3 file - "$D/tree" "$D/linked" "$D/copy" "$D/hardlink.txt" "$D/tree/sub/f1.txt"'
grep -q "duplicates 7: the same file 6, the same bytes 1; e.g. '.*' is the same file as '.*')$" "$T/d1.out" \
  && ok "the duplicates counted in the summary: $(grep -o 'duplicates 7[^;]*' "$T/d1.out")" || bad "duplicates summary: $(head -1 "$T/d1.out")"
prep --out "$T/d3" --val-frac 0.3 --keep-duplicates "$D/tree" "$D/linked" "$D/copy" "$D/hardlink.txt" > "$T/d3.out" 2>&1
check "--keep-duplicates keeps the copy (repeated text on purpose); the same file reached twice is still read once" \
  eval 'grep -q "duplicates 5: the same file 5, the same bytes 0" "$T/d3.out" && $REF expect "$T/d3" 0 0.3 file,keep - "$D/tree" "$D/linked" "$D/copy" "$D/hardlink.txt"'
mkdir -p "$D/tree2" && cp -r "$D/tree/sub" "$D/tree2/"
prep --out "$T/d2" --doc-per dir --val-frac 0 "$D/tree" "$D/tree2" "$D/copy" > "$T/d2.out" 2>&1
check "--doc-per dir: a copy of a whole tree is skipped, equal files inside different trees are kept" \
  eval 'grep -q "duplicates 1: the same file 0, the same bytes 1" "$T/d2.out" && $REF expect "$T/d2" 0 0 dir - "$D/tree" "$D/tree2" "$D/copy"'

# ---------------------------------------------------------------------------------------------- 5. C decoding, no HF
# SHA-256 (data/tokenizer.c, meta.json's tokenizer_sha256) against sha256sum at the block edges
DT=build/tests/tool_detok
for n in 0 1 55 56 63 64 65 1000003; do head -c $n /dev/urandom > "$T/sha$n"; done
bad_sha=""; for n in 0 1 55 56 63 64 65 1000003; do [ "$($DT --sha256 "$T/sha$n")" = "$(sha256sum "$T/sha$n" | cut -d' ' -f1)" ] || bad_sha+=" $n"; done
[ -z "$bad_sha" ] && ok "sha256_file = sha256sum on files of 0, 1, 55, 56, 63, 64, 65 and 1000003 bytes" || bad "sha256_file differs at sizes:$bad_sha"
printf '{"model": {"type": "WordLevel", "vocab": {"a": 0}}, "decoder": null, "added_tokens": []}' > "$T/wl.json"
ERR_RC=1 expect_err "a tokenizer.json without a byte-level decoder is refused in one line" "wl.json': the decoder is none, not ByteLevel|--ids" 1 $DT "$T/wl.json"
printf '{"model": {"vocab": {"a": 0,}}, "decoder": {"type": "ByteLevel"}}' > "$T/broken.json"
ERR_RC=1 expect_err "a tokenizer.json that is not JSON" "broken.json' is not a valid tokenizer.json: a key missing" 1 $DT "$T/broken.json"

# ---------------------------------------------------------------------------------------------- with HF
if ! HFPY=$(bash tools/setup/hf_env.sh 2>"$T/env.err"); then
  echo "skip: the checks against tokenizers, pyarrow and datasets: $(head -n 1 "$T/env.err")"
  finish
fi
HENV=(env RINGLM_HFENV="$(dirname "$(dirname "$HFPY")")")
PH=("${HENV[@]}" tools/prepare_hf); TT=("${HENV[@]}" tools/train_tokenizer); STX=("${HENV[@]}" tools/sample_text)
HC="$HFPY tests/corpora_hf.py"
U=$T/unicode; mkdir -p "$U"
printf 'Größe – ελληνικά – 日本語のテキスト – emoji 🙂🎉 – café naïve façade\n\ttabs and  spaces \r\n' > "$U/u1.txt"
printf 'Ünïcödé lines: Привет мир; 中文字符; עברית; 😀😃😄\n' > "$U/u2.txt"
cat "$U"/*.txt > "$T/texts"; printf 'plain ascii text\n<|endoftext|> in text\n' >> "$T/texts"

# ---------------------------------------------------------------------------------------------- 6. train_tokenizer
check "train_tokenizer --vocab-size 320 on the corpus" "${TT[@]}" --out "$T/tok" --vocab-size 320 --min-frequency 1 "$C" "$U" model
cp "$T/check.out" "$T/tt.out"
nd=$($PREP --out "$T/bp0" --val-frac 0 "$C" "$U" model | sed -n 's/^prepare: \([0-9]*\) documents from .*/\1/p')
grep -q "^train_tokenizer: $nd documents from $nd files; vocabulary 320: 256 bytes, special '<|endoftext|>' id 0, 63 merges$" "$T/tt.out" \
  && ok "train_tokenizer's summary: build/prepare's $nd documents;$(head -1 "$T/tt.out" | cut -d';' -f2)" || bad "train_tokenizer summary ($nd documents): $(head -2 "$T/tt.out")"
$HC tokinfo "$T/tok" 320 >"$T/h1" 2>&1; sub_result "tokinfo" $? "$T/h1"; grep -E '^(ok|FAIL)' "$T/h1"
# its output is what prepare_hf --tokenizer takes: the documents decode back to their text (the byte shards' bytes)
check "prepare_hf --tokenizer (train_tokenizer's)" "${PH[@]}" --tokenizer "$T/tok" --out "$T/hp1" --val-frac 0.3 "$C" "$U" model
check "build/prepare on the same corpus" $PREP --out "$T/bp1" --val-frac 0.3 "$C" "$U" model
$HFPY tests/hf_check.py decode "train_tokenizer's tokenizer, prepare_hf: round trip" "$T/hp1" "$T/bp1" "$T/tok" 0 >"$T/h2" 2>&1
sub_result "round trip" $? "$T/h2"; grep -E '^(ok|FAIL)' "$T/h2"
expect_err "train_tokenizer: a vocabulary below the bytes and special tokens" "train_tokenizer: --vocab-size expects an integer in [257," 1 \
  "${TT[@]}" --out "$T/tok2" --vocab-size 200 "$C"
expect_err "train_tokenizer over an existing tokenizer.json" "train_tokenizer: '$T/tok/tokenizer.json' already exists (use --force" 1 \
  "${TT[@]}" --out "$T/tok" --vocab-size 300 "$C"
check "train_tokenizer on JSON Lines records (--text-field)" "${TT[@]}" --out "$T/tokj" --vocab-size 300 --text-field text "$J"
grep -q "^train_tokenizer: 86 documents from 5 files" "$T/check.out" && ok "... its documents are the 84 records and 2 text files" || bad "train_tokenizer on JSONL: $(head -1 "$T/check.out")"

# ---------------------------------------------------------------------------------------------- 7. prepare_hf = build/prepare
# shared names, JSON Lines (a lone surrogate: U+FFFD in both), --files-from and duplicates: the same documents and split
printf '%s\n' "$D/tree" "$D/linked" "$D/copy" > "$T/list3"
check "prepare_hf: shared names, JSON Lines, --files-from, duplicates" "${PH[@]}" --tokenizer "$T/tok" --out "$T/hp2" --text-field text \
  --val-frac 0.4 --seed 3 "$C"/pkg*/README.md "$C"/*.txt "$J" --files-from "$T/list3"
grep -q "^split: 40 documents shared their name" "$T/check.out" && grep -q "duplicates 4: the same file 4, the same bytes 1" "$T/check.out" \
  || grep -q "duplicates 5: the same file 4, the same bytes 1" "$T/check.out" && ok "prepare_hf's summary names the shared names and the duplicates" \
  || bad "prepare_hf summary: $(head -3 "$T/check.out")"
check "build/prepare on the same inputs" $PREP --out "$T/bp2" --text-field text --val-frac 0.4 --seed 3 "$C"/pkg*/README.md "$C"/*.txt "$J" --files-from "$T/list3"
$HFPY tests/hf_check.py decode "prepare_hf vs build/prepare: shared names, JSON Lines, a list, duplicates" "$T/hp2" "$T/bp2" "$T/tok" 0 >"$T/h3" 2>&1
sub_result "prepare_hf parity" $? "$T/h3"; grep -E '^(ok|FAIL)' "$T/h3"
expect_err "prepare_hf: a bad JSON line" "prepare_hf: $T/bad1.jsonl:2: not a valid JSON record" 1 "${PH[@]}" --tokenizer "$T/tok" --out "$T/hpe" --text-field text "$T/bad1.jsonl"
expect_err "prepare_hf: a record without the field" "bad2.jsonl:1: the record has no field 'text' (its fields: txt, id)" 1 "${PH[@]}" --tokenizer "$T/tok" --out "$T/hpe" --text-field text "$T/bad2.jsonl"
expect_err "prepare_hf: a truncated gzip file" "trunc.jsonl.gz' cannot be decompressed (gzip:" 1 "${PH[@]}" --tokenizer "$T/tok" --out "$T/hpe" --text-field text "$T/trunc.jsonl.gz"
expect_err "prepare_hf: a list naming a missing file" "prepare_hf: --files-from $T/list2:2: cannot read '$T/missing.txt'" 1 "${PH[@]}" --tokenizer "$T/tok" --out "$T/hpe" --files-from "$T/list2"

# ---------------------------------------------------------------------------------------------- 8. Parquet, datasets
R=$T/rows; mkdir -p "$R"
$HFPY - "$R" <<'PYEOF'
import json, sys
import pyarrow as pa, pyarrow.parquet as pq, datasets
datasets.disable_progress_bars()
d = sys.argv[1]
texts = [f"row {i}: {'données ' * (i % 4)}🙂" if i % 9 else (None if i % 2 else "") for i in range(50)]
pq.write_table(pa.table({"id": list(range(50)), "text": texts, "n": [float(i) for i in range(50)]}), f"{d}/t.parquet", row_group_size=7)
open(f"{d}/t.texts", "w", encoding="utf-8").write("".join(json.dumps(t) + "\n" for t in texts))
ds_texts = [f"dataset row {i} ünï" for i in range(30)]
datasets.Dataset.from_dict({"text": ds_texts, "label": list(range(30))}).save_to_disk(f"{d}/ds")
open(f"{d}/ds.texts", "w", encoding="utf-8").write("".join(json.dumps(t) + "\n" for t in ds_texts))
pq.write_table(pa.table({"body": ["a", "b"]}), f"{d}/nocol.parquet")
pq.write_table(pa.table({"text": [1, 2]}), f"{d}/int.parquet")
open(f"{d}/junk.parquet", "wb").write(b"not parquet at all\n" * 10)
PYEOF
check "prepare_hf --text-field text on a Parquet file (row groups of 7, null and empty rows)" "${PH[@]}" --tokenizer "$T/tok" --out "$T/pq" --text-field text --val-frac 0.3 --seed 5 "$R/t.parquet"
check "... its rows are the documents, split by the names t.parquet#ROW" "${HENV[@]}" $HFPY tests/corpora_ref.py rows "$T/pq" 5 0.3 t.parquet "$R/t.texts"
check "prepare_hf --text-field text on a dataset datasets' save_to_disk wrote" "${PH[@]}" --tokenizer "$T/tok" --out "$T/dsd" --text-field text --val-frac 0.3 --seed 5 "$R/ds"
check "... its rows are the documents, split by the names ds#ROW" $HFPY tests/corpora_ref.py rows "$T/dsd" 5 0.3 ds "$R/ds.texts"
expect_err "prepare_hf: a Parquet file without the column" "nocol.parquet: no column 'text' (its columns: body)|--text-field" 1 "${PH[@]}" --tokenizer "$T/tok" --out "$T/hpe" --text-field text "$R/nocol.parquet"
expect_err "prepare_hf: a column that is not text" "int.parquet: column 'text' is of type int64, not a string" 1 "${PH[@]}" --tokenizer "$T/tok" --out "$T/hpe" --text-field text "$R/int.parquet"
expect_err "prepare_hf: a .parquet file that is not Parquet" "junk.parquet' cannot be read as Parquet" 1 "${PH[@]}" --tokenizer "$T/tok" --out "$T/hpe" --text-field text "$R/junk.parquet"

# ---------------------------------------------------------------------------------------------- 9. the C decoder vs tokenizers
$HC variant "$T/tok" "$T/tokv" >"$T/h4" 2>&1 && $HC ids "$T/tokv" "$T/ids" 7 "$T/texts" >>"$T/h4" 2>&1 \
  && $DT "$T/tokv/tokenizer.json" --lines <"$T/ids" >"$T/hex" 2>>"$T/h4" \
  && $HC detok "$T/tokv" "$T/ids" "$T/hex" "$T/texts" >>"$T/h4" 2>&1; sub_result "decoder" $? "$T/h4"; grep -E '^(ok|FAIL|#)' "$T/h4"

# ---------------------------------------------------------------------------------------------- 10. a BPE model's text
cat > "$T/bpe.conf" <<CONF
vocab_size = 320
d_model = 32
n_layer = 1
n_head = 2
n_kv_head = 2
d_ff = 64
max_seq_len = 128
seq_len = 64
batch_size = 4
max_steps = 30
lr = 0.01
warmup_steps = 2
train_data = $T/hp1
CONF
timeout $HANG_S build/train -c "$T/bpe.conf" --out_dir "$T/run" --sample_every 30 --sample_tokens 24 --sample_temperature 0 >"$T/run.out" 2>&1 \
  || bad "training on prepare_hf data: $(tail -3 "$T/run.out")"
grep -q "^sample_every: the samples' text through the tokenizer $T/tok/tokenizer.json$" "$T/run.out" && ok "training names the tokenizer of its samples' text" \
  || bad "training's tokenizer line: $(grep -i 'sample' "$T/run.out" | head -3)"
SM=(timeout $HANG_S build/sample --ckpt "$T/run" --greedy)
"${SM[@]}" --max_tokens 24 >"$T/ts.txt" 2>"$T/ts.err" && "${SM[@]}" --max_tokens 24 --ids >"$T/ts.ids" 2>>"$T/ts.err" \
  && $HC trainsample "$T/tok" "$T/run.out" 30 "$T/ts.ids" >"$T/h5" 2>&1; sub_result "training's sample" $? "$T/h5"; grep -E '^(ok|FAIL)' "$T/h5"
P=$($HC encode "$T/tok" "Größe 日本 def main(")
"${SM[@]}" --prompt_ids "$P" --max_tokens 40 --stop_at_eod 0 >"$T/s1.txt" 2>"$T/s1.err" && [ ! -s "$T/s1.err" ] \
  && "${SM[@]}" --prompt_ids "$P" --max_tokens 40 --stop_at_eod 0 --ids >"$T/s1.ids" 2>/dev/null \
  && $HC sample "$T/tok" "$T/s1.ids" "$T/s1.txt" >"$T/h6" 2>&1; sub_result "build/sample's text" $? "$T/h6"; grep -E '^(ok|FAIL)' "$T/h6"
timeout $HANG_S "${MPI[@]}" -np 2 build/sample --ckpt "$T/run" --greedy --cp 2 --prompt_ids "$P" --max_tokens 40 --stop_at_eod 0 >"$T/s2.txt" 2>/dev/null
cmp -s <(sed '$d' "$T/s1.txt") <(sed '$d' "$T/s2.txt") && ok "... the same text on a ring of 2 (cp 2)" || bad "cp 2 text differs: $(head -c 80 "$T/s2.txt")"
# a text prompt: the route the message names exists and gives build/sample's text for the prompt's ids
ERR_ALSO='[ -x tools/sample_text ]' expect_err "a text prompt to a BPE model names tools/sample_text (which exists)" \
  "sample: a text prompt needs the byte vocabulary|run tools/sample_text" 1 build/sample --ckpt "$T/run" --prompt "def main("
timeout $HANG_S "${STX[@]}" --ckpt "$T/run" --prompt "Größe 日本 def main(" --greedy --max_tokens 40 --stop_at_eod 0 >"$T/s3.txt" 2>"$T/s3.err"
PT="Größe 日本 def main("
cmp -s <(sed '$d' "$T/s1.txt") <(sed '$d' "$T/s3.txt") && [ "$(head -c "$(printf %s "$PT" | wc -c)" "$T/s3.txt")" = "$PT" ] \
  && ok "tools/sample_text --prompt TEXT: the text of build/sample --prompt_ids with the prompt's ids, starting with the prompt" \
  || bad "sample_text: $(head -c 100 "$T/s3.txt") $(cat "$T/s3.err")"
[ "$("${STX[@]}" --ckpt "$T/run" --prompt "Größe 日本 def main(" --print_ids)" = "ids:$P" ] && ok "tools/sample_text --print_ids: ids:$P (for sample_prompt)" \
  || bad "sample_text --print_ids"
timeout $HANG_S "${MPI[@]}" -np 2 "${STX[@]}" --ckpt "$T/run" --prompt "Größe 日本 def main(" --greedy --max_tokens 40 --stop_at_eod 0 --cp 2 >"$T/s4.txt" 2>/dev/null
cmp -s <(sed '$d' "$T/s1.txt") <(sed '$d' "$T/s4.txt") && ok "... under mpirun on a ring of 2 (each rank becomes build/sample)" || bad "sample_text under mpirun: $(head -c 100 "$T/s4.txt")"
# the tokenizer changed since the data was prepared (SHA-256): ids with a note; sample_text refuses; --tokenizer decodes
cp -r "$T/tok" "$T/tok.orig" && printf ' ' >> "$T/tok/tokenizer.json"
"${SM[@]}" --max_tokens 5 >"$T/s5.txt" 2>"$T/s5.err"
grep -q "^sample: note: the tokenizer '$T/tok/tokenizer.json' has changed since the data was prepared (SHA-256 .*): printing token ids" "$T/s5.err" \
  && head -1 "$T/s5.txt" | grep -qE '^[0-9]+(,[0-9]+)*$' && ok "a tokenizer changed since the data was prepared: ids, and one note saying why" \
  || bad "changed tokenizer: $(cat "$T/s5.err") $(head -c 80 "$T/s5.txt")"
expect_err "tools/sample_text with the changed tokenizer" "sample_text: the tokenizer '$T/tok/tokenizer.json' has changed since the training data was prepared|--tokenizer" 1 \
  "${STX[@]}" --ckpt "$T/run" --prompt "def"
"${SM[@]}" --max_tokens 24 --tokenizer "$T/tok.orig" >"$T/s6.txt" 2>"$T/s6.err"
"${SM[@]}" --max_tokens 24 --tokenizer "$T/tok" >"$T/s7.txt" 2>"$T/s7.err"
cmp -s <(sed '$d' "$T/s6.txt") <(sed '$d' "$T/ts.txt") && [ ! -s "$T/s6.err" ] && cmp -s <(sed '$d' "$T/s7.txt") <(sed '$d' "$T/ts.txt") \
  && grep -q "^sample: note: --tokenizer '$T/tok' (SHA-256 .*) is not the tokenizer the training data was prepared with" "$T/s7.err" \
  && ok "--tokenizer decodes with the file given: a copy of the recorded one silently, the changed one with a note" \
  || bad "--tokenizer: $(cat "$T/s6.err" "$T/s7.err")"

finish
