#!/usr/bin/env bash
# test_data.sh — end-to-end test of build/prepare: builds a temp corpus (text files, a binary file, a .git
# directory, symlinks, a fifo, empty files), runs build/prepare and checks the shards with numpy against an
# independent reference of the documented rules: uint16 llm.c shards, byte tokens, token 256 before every
# document, sorted depth-first walk, --doc-per dir, train/val partition, shard sizes, determinism,
# refusal to overwrite, and one-line errors with exit status 1 for bad input.
cd "$(dirname "$0")/.."
source tests/lib.sh
PREP=$PWD/build/prepare

[ -x "$PREP" ] || { bad "build/prepare is not built"; finish; }
"$PY" -c 'import numpy' 2>/dev/null || { bad "$PY has no numpy"; finish; }

prep() { timeout $HANG_S "$PREP" "$@"; }        # a hang (e.g. reading a fifo) fails instead of blocking

# ---------------------------------------------------------------------------------------------------------
# corpus
C=$T/corpus
mkdir -p "$C/src/util" "$C/docs" "$C/.git/objects" "$C/empty_dir"
printf '# readme\nline two\n' > "$C/README.md"
printf 'int main(void) { return 0; }\n' > "$C/src/main.c"
printf 'Upper-case names sort first\n' > "$C/src/Ab.txt"
printf '#pragma once\n' > "$C/src/util/u.h"
printf 'h\xc3\xa9llo w\xc3\xb6rld\n' > "$C/docs/h\xc3\xa9llo.txt"
printf 'SECRET=1\n' > "$C/.env"                                   # hidden file: kept
printf '[core]\n\tbare = false\n' > "$C/.git/config"               # hidden directory: skipped
printf 'ref: refs/heads/main\n' > "$C/.git/HEAD"
printf '\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR' > "$C/img.png"        # binary: skipped
{ head -c 9000 /dev/zero | tr '\0' 'a'; printf '\x00tail'; } > "$C/late_nul.txt"   # NUL after 8 KiB: text
: > "$C/empty.txt"                                                 # empty: skipped
ln -s README.md "$C/link.md"                                       # symlinks: skipped
ln -s src "$C/linkdir"
mkfifo "$C/pipe"                                                   # non-regular: skipped
printf 'a lone file given directly\n' > "$T/extra.txt"

# reference implementation of the documented rules + shard reader
cat > "$T/ref.py" <<'EOF'
import glob, os, sys
import numpy as np

def is_text(p):
    with open(p, 'rb') as f:
        head = f.read(8192)
    return len(head) > 0 and b'\0' not in head

def walk(d):                                # depth-first, bytewise-sorted names
    files = []
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        if os.path.islink(p): continue
        if os.path.isdir(p):
            if not name.startswith(b'.'): files += walk(p)
        elif os.path.isfile(p) and is_text(p): files.append(p)
    return files

def read(p):
    with open(p, 'rb') as f: return f.read()

def documents(mode, paths):
    docs = []
    for a in map(os.fsencode, paths):
        if os.path.isdir(a):
            fs = walk(a)
            if mode == 'dir':
                if fs: docs.append(b''.join(map(read, fs)))
            else: docs += [read(f) for f in fs]
        elif is_text(a): docs.append(read(a))
    return docs

def stream(docs):
    return np.array([t for d in docs for t in [256] + list(d)], dtype=np.int64)

def read_split(out, split):                 # -> (shard token counts, concatenated tokens); checks headers
    counts, toks = [], []
    for f in sorted(glob.glob(os.path.join(out, split + '_*.bin'))):
        h = np.fromfile(f, dtype='<i4', count=256)
        assert h[0] == 20240520 and h[1] == 1 and (h[3:] == 0).all(), f'{f}: bad header {h[:3]}'
        n = int(h[2])
        assert os.path.getsize(f) == 1024 + 2 * n, f'{f}: size {os.path.getsize(f)} != 1024 + 2*{n}'
        assert os.path.basename(f) == f'{split}_{len(counts):06d}.bin', f'{f}: unexpected name'
        counts.append(n)
        toks.append(np.fromfile(f, dtype='<u2', offset=1024).astype(np.int64))
    return counts, (np.concatenate(toks) if toks else np.zeros(0, np.int64))

def split_docs(t):                          # stream -> documents (each must start with 256)
    assert len(t) == 0 or t[0] == 256, 'stream does not start with 256'
    idx = list(np.flatnonzero(t == 256)) + [len(t)]
    return [bytes(t[idx[i] + 1:idx[i + 1]].astype(np.uint8)) for i in range(len(idx) - 1)]

def main():
    cmd, out = sys.argv[1], sys.argv[2]
    if cmd == 'exact':                      # exact OUT MODE NDOCS PATH...: every document in train, in order
        mode, ndocs, paths = sys.argv[3], int(sys.argv[4]), sys.argv[5:]
        docs = documents(mode, paths)
        assert len(docs) == ndocs, f'reference finds {len(docs)} documents, test expects {ndocs}'
        counts, t = read_split(out, 'train')
        exp = stream(docs)
        assert len(t) == len(exp), f'train has {len(t)} tokens, expected {len(exp)}'
        assert (t == exp).all(), f'first difference at token {int(np.argmax(t != exp))}'
        assert not glob.glob(os.path.join(out, 'val_*.bin')), 'val shards written with --val-frac 0'
    elif cmd == 'partition':                # partition OUT MODE PATH...: train + val = all docs, order kept
        mode, paths = sys.argv[3], sys.argv[4:]
        docs = documents(mode, paths)
        tr = split_docs(read_split(out, 'train')[1])
        va = split_docs(read_split(out, 'val')[1])
        assert len(tr) >= 1 and len(va) >= 1, f'train {len(tr)} / val {len(va)} documents'
        assert len(tr) + len(va) == len(docs), f'{len(tr)} + {len(va)} != {len(docs)} documents'
        i = j = 0
        for d in docs:
            if i < len(tr) and tr[i] == d: i += 1
            elif j < len(va) and va[j] == d: j += 1
            else: raise AssertionError('a document is missing or out of order')
        print(f'    train {len(tr)}, val {len(va)} documents')
    elif cmd == 'shards':                   # shards OUT SPLIT MAX: all shards full but the last
        split, mx = sys.argv[3], int(sys.argv[4])
        counts, t = read_split(out, split)
        assert len(counts) == -(-len(t) // mx), f'{len(counts)} shards for {len(t)} tokens of {mx}'
        assert all(c == mx for c in counts[:-1]) and 0 < counts[-1] <= mx, f'shard sizes {counts}'
        print(f'    {len(counts)} shards, the last has {counts[-1]} tokens')
    elif cmd == 'contains':                 # contains OUT SPLIT TEXT: does the stream contain TEXT?
        t = read_split(out, sys.argv[3])[1]
        sys.exit(0 if sys.argv[4].encode() in bytes((t % 256).astype(np.uint8)) else 1)

try:
    main()
except AssertionError as e:
    print('   ', e); sys.exit(1)
EOF
ref() { "$PY" "$T/ref.py" "$@"; }

# ---------------------------------------------------------------------------------------------------------
# --doc-per file (default), everything in train: exact stream
O=$T/o_file
prep --out "$O" --val-frac 0 "$C" "$T/extra.txt" > "$T/stdout" 2> "$T/stderr"; rc=$?
check "prepare file mode exits 0 with empty stderr" [ $rc -eq 0 -a ! -s "$T/stderr" ]
check "summary: 'train: 8 documents'" grep -q '^train: 8 documents, ' "$T/stdout"
check "summary lists $O/train_000000.bin" grep -q "$O/train_000000.bin" "$T/stdout"
check "summary: val has 0 documents with --val-frac 0" grep -q '^val: 0 documents' "$T/stdout"
check "train stream = 256 + bytes of each of the 8 documents, in walk order" ref exact "$O" file 8 "$C" "$T/extra.txt"
check "text after a NUL past 8 KiB is kept" ref contains "$O" train "tail"
check ".git content is skipped" eval '! ref contains "$O" train "[core]"'
check "binary file is skipped" eval '! ref contains "$O" train "IHDR"'
check "hidden regular file is kept" ref contains "$O" train "SECRET=1"

# small shards: documents continue across shard boundaries
O=$T/o_small
prep --out "$O" --val-frac 0 --shard-tokens 16 "$C" "$T/extra.txt" > "$T/stdout" 2>&1; rc=$?
check "--shard-tokens 16 exits 0" [ $rc -eq 0 ]
check "--shard-tokens 16: every shard but the last has 16 tokens" ref shards "$O" train 16
check "--shard-tokens 16: concatenated stream unchanged" ref exact "$O" file 8 "$C" "$T/extra.txt"

# --doc-per dir: a directory PATH is one document, a file PATH one document
O=$T/o_dir
prep --out "$O" --val-frac 0 --doc-per dir "$C/src" "$C/docs" "$T/extra.txt" > "$T/stdout" 2>&1; rc=$?
check "--doc-per dir exits 0" [ $rc -eq 0 ]
check "--doc-per dir: 3 documents" grep -q '^train: 3 documents, ' "$T/stdout"
check "--doc-per dir: src/ (Ab.txt, main.c, util/u.h) is one document" ref exact "$O" dir 3 "$C/src" "$C/docs" "$T/extra.txt"
O=$T/o_dir2
prep --out "$O" --val-frac 0 --doc-per=dir "$C" > "$T/stdout" 2>&1
check "--doc-per=dir on the whole corpus: 1 document" ref exact "$O" dir 1 "$C"
check "--val-frac 0: no warning about the held-out split" eval '! grep -q WARNING "$T/stdout"'
# a held-out split of fewer than 8 documents: one WARNING line naming the count (here 3 of 8 files at --val-frac
# 0.5); 8 or more: none
prep --out "$T/o_few" --val-frac 0.5 --seed 1 "$C" "$T/extra.txt" > "$T/stdout" 2>&1
nv=$(sed -n 's/^val: \([0-9]*\) documents.*/\1/p' "$T/stdout")
check "a held-out split of $nv documents: one WARNING naming the count" \
  eval '[ "$nv" -lt 8 ] && [ "$(grep -c "^WARNING: the held-out split has only $nv document" "$T/stdout")" = 1 ]'
mkdir -p "$T/many"; for i in $(seq 1 20); do echo "document $i" >"$T/many/d$i.txt"; done
prep --out "$T/o_many" --val-frac 0.5 --seed 1 "$T/many" > "$T/stdout" 2>&1
nv=$(sed -n 's/^val: \([0-9]*\) documents.*/\1/p' "$T/stdout")
check "a held-out split of $nv documents (>= 8): no warning" eval '[ "$nv" -ge 8 ] && ! grep -q WARNING "$T/stdout"'

# train/val partition
O=$T/o_default
prep --out "$O" "$C" "$T/extra.txt" > "$T/stdout" 2>&1; rc=$?
check "default --val-frac 0.05 exits 0" [ $rc -eq 0 ]
check "default val-frac: each split has >= 1 document, together all 8 in order" ref partition "$O" file "$C" "$T/extra.txt"
O=$T/o_half
prep --out "$O" --val-frac 0.5 --seed 3 "$C" "$T/extra.txt" > "$T/stdout" 2>&1
check "--val-frac 0.5: train + val partition the documents" ref partition "$O" file "$C" "$T/extra.txt"
O=$T/o_all_val
prep --out "$O" --val-frac 1 "$C" > "$T/stdout" 2>&1
check "--val-frac 1: no train shards, all documents in val" \
      eval '[ ! -e "$O/train_000000.bin" ] && grep -q "^val: 7 documents" "$T/stdout"'

# determinism: same input -> identical bytes; the split does not depend on where the corpus lives
prep --out "$T/d1" --val-frac 0.4 --seed 7 --shard-tokens 64 "$C" > /dev/null 2>&1
prep --out "$T/d2" --val-frac 0.4 --seed 7 --shard-tokens 64 "$C" > /dev/null 2>&1
mkdir -p "$T/elsewhere/deeper" && cp -a "$C" "$T/elsewhere/deeper/corpus"
prep --out "$T/d3" --val-frac 0.4 --seed 7 --shard-tokens 64 "$T/elsewhere/deeper/corpus/" > /dev/null 2>&1
# meta.json: the same but for the command that made it
same_dirs() { diff -r -x meta.json "$1" "$2" && diff <(grep -v '"command"' "$1/meta.json") <(grep -v '"command"' "$2/meta.json"); }
check "two runs give identical shards" same_dirs "$T/d1" "$T/d2"
check "same corpus at another path gives identical shards" same_dirs "$T/d1" "$T/d3"
check "meta.json describes the shards: its counts are the shard files', the command is the one run" $PY - "$T/d1" <<'PYEOF'
import glob, json, sys
import numpy as np
d = sys.argv[1]
m = json.load(open(f"{d}/meta.json"))
assert (m["format"], m["tokenizer"], m["tokenizer_sha256"], m["vocab_size"], m["eod_id"], m["dtype"]) == \
    ("ringlm-data-1", "bytes", None, 257, 256, "uint16"), m
for split in ("train", "val"):
    files = sorted(glob.glob(f"{d}/{split}_*.bin"))
    toks = np.concatenate([np.fromfile(f, dtype=np.uint16, offset=1024) for f in files])
    hdr = sum(int(np.fromfile(f, dtype=np.int32, count=3)[2]) for f in files)
    assert m["tokens"][split] == len(toks) == hdr, (split, m["tokens"], len(toks), hdr)
    assert m["documents"][split] == int((toks == 256).sum()), (split, m["documents"])
    assert m["shards"][split] == len(files)
assert m["command"].endswith("--val-frac 0.4 --seed 7 --shard-tokens 64 " + m["command"].split()[-1]) and "--out" in m["command"]
print(f"{m['documents']} {m['tokens']}")
PYEOF
prep --out "$T/d4" --val-frac 0.4 --seed 8 --shard-tokens 64 "$C" > /dev/null 2>&1
check "another seed gives another split" eval '! diff -rq "$T/d1" "$T/d4" > /dev/null'

# refusal to overwrite; --force replaces (stale shards removed)
before=$(ls "$T/d1" | wc -l)
prep --out "$T/d1" "$C" > "$T/stdout" 2> "$T/stderr"; rc=$?
check "existing shards: exit 1" [ $rc -eq 1 ]
check "existing shards: one stderr line naming train_000000.bin and --force" \
      eval '[ $(wc -l < "$T/stderr") -eq 1 ] && grep -q "d1/train_000000.bin.*--force" "$T/stderr"'
check "existing shards: nothing changed" same_dirs "$T/d1" "$T/d2"
check "existing shards: several shards before --force" [ "$before" -gt 2 ]
prep --out "$T/d1" --force --val-frac 0 "$C" > /dev/null 2>&1; rc=$?
check "--force exits 0 and leaves exactly one train shard, no stale val" \
      eval '[ $rc -eq 0 ] && [ "$(ls "$T/d1" | tr "\n" " ")" = "meta.json train_000000.bin " ]'
check "--force output is the fresh stream" ref exact "$T/d1" file 7 "$C"

# bad input: exit 1, exactly one line on stderr starting "prepare: ", nothing on stdout, no shards
mkdir -p "$T/only_binary/.git" && printf 'a\0b' > "$T/only_binary/x.bin" && printf 'x' > "$T/only_binary/.git/c"
printf 'x' > "$T/a_file"
# prep_err DESCRIPTION WORD ARGS...: as expect_err (lib.sh) with exit status 1, the line starting "prepare: ", no stdout
prep_err() { ERR_RC=1 ERR_ALSO='[ ! -s "$T/o" ] && grep -q "^prepare: " "$T/e"' expect_err "$1" "$2" 1 "$PREP" "${@:3}"; }
prep_err "missing path"          "$T/nope"       --out "$T/eo1" "$C" "$T/nope"
prep_err "no documents"          "no documents"  --out "$T/eo2" "$T/only_binary"
prep_err "out dir under a file"  "a_file"        --out "$T/a_file/sub" "$C"
prep_err "out dir is a file"     "a_file"        --out "$T/a_file" "$C"
prep_err "val-frac 2"            "--val-frac"    --out "$T/eo3" --val-frac 2 "$C"
prep_err "val-frac abc"          "abc"           --out "$T/eo3" --val-frac abc "$C"
prep_err "val-frac -0.1"         "--val-frac"    --out "$T/eo3" --val-frac -0.1 "$C"
prep_err "shard-tokens 0"        "--shard-tokens" --out "$T/eo3" --shard-tokens 0 "$C"
prep_err "shard-tokens 3e9"      "--shard-tokens" --out "$T/eo3" --shard-tokens 3000000000 "$C"
prep_err "shard-tokens 10k"      "10k"           --out "$T/eo3" --shard-tokens 10k "$C"
prep_err "seed -1"               "--seed"        --out "$T/eo3" --seed -1 "$C"
prep_err "doc-per foo"           "foo"           --out "$T/eo3" --doc-per foo "$C"
prep_err "unknown option"        "--bogus"       --out "$T/eo3" --bogus "$C"
prep_err "option without value"  "--seed"        --out "$T/eo3" "$C" --seed
prep_err "no --out"              "--out"         "$C"
prep_err "no PATH"               "PATH"          --out "$T/eo3"
prep_err "fifo as PATH"          "pipe"          --out "$T/eo3" "$C/pipe"
check "bad input wrote no output directory" eval '[ ! -e "$T/eo1" ] && [ ! -e "$T/eo2" ] && [ ! -e "$T/eo3" ]'

# --help documents every option
prep --help > "$T/help" 2>&1; rc=$?
check "--help exits 0" [ $rc -eq 0 ]
for o in --out --val-frac --doc-per --seed --shard-tokens --force; do
    check "--help documents $o" grep -q -- "$o" "$T/help"
done

finish
