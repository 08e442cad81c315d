#!/usr/bin/python3
"""corpora_ref.py — an independent reference of build/prepare's documented rules for tests/test_corpora.sh (numpy
and the standard library only): the walk, JSON Lines records (--text-field), duplicates, the split names (unique per
document: shared names keyed below their common directory) and the seeded split, checked against the shards.

  corpora_ref.py expect OUT SEED FRAC MODE FIELD|- PATH...   OUT's train and val shards hold exactly the documents
                                                            the rules give, in order; prints the counts (MODE: file
                                                            or dir, with ",keep" for --keep-duplicates)
  corpora_ref.py rows OUT SEED FRAC NAME TEXTFILE           OUT's documents decoded (shards of prepare_hf, the
                                                            tokenizer in OUT/meta.json) are the records of a file of
                                                            rows named NAME: its split names NAME#ROW, the texts one
                                                            JSON string a line in TEXTFILE (null: an empty record)
"""
import glob
import json
import os
import re
import stat
import sys

import numpy as np

M64 = (1 << 64) - 1


def fnv1a64(b):
    h = 0xCBF29CE484222325
    for c in b:
        h = ((h ^ c) * 0x100000001B3) & M64
    return h


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def u(seed, key):
    return (mix64(fnv1a64(key) ^ mix64(seed)) >> 11) / 2.0 ** 53


JSONL = (b".jsonl", b".ndjson", b".json.gz", b".jsonl.gz", b".ndjson.gz")


def is_text(p):
    with open(p, "rb") as f:
        head = f.read(8192)
    return len(head) > 0 and b"\0" not in head


def records(path, field):
    """[(line number, UTF-8 bytes)] of a JSON Lines file's non-empty records (the rules of data/jsonl.h)."""
    import gzip
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    out = []
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip(b" \t\r"):
            continue
        pairs = json.loads(line.decode("utf-8"), object_pairs_hook=lambda p: p)
        v = [x for k, x in pairs if k == field]
        assert len(v) == 1, (path, n, v)
        if v[0]:
            out.append((n, re.sub("[\ud800-\udfff]", "\ufffd", v[0]).encode("utf-8")))
    return out


class Doc:
    def __init__(self, key, real, kind):
        self.key, self.real, self.kind, self.files = key, real, kind, []


def collect(paths, per_dir, field):
    docs = []

    def add(p, name, key, real, into):
        if field and name.endswith(JSONL):
            if os.path.getsize(p):
                d = Doc(key, real, "jsonl")
                d.files.append(p)
                docs.append(d)
            return
        if not is_text(p):
            return
        if into is None:
            into = Doc(key, real, "text")
            docs.append(into)
        into.files.append(p)

    def walk(d, key, real, into):
        for n in sorted(os.listdir(d)):
            p = os.path.join(d, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                continue
            if stat.S_ISDIR(st.st_mode):
                if not n.startswith(b"."):
                    walk(p, key + b"/" + n, real + b"/" + n, into)
            elif stat.S_ISREG(st.st_mode):
                add(p, n, key + b"/" + n, real + b"/" + n, into)

    for a in map(os.fsencode, paths):
        real = os.path.realpath(a)
        key = os.path.basename(real)
        if os.path.isdir(a):
            into = None
            if per_dir:
                into = Doc(key, real, "text")
                docs.append(into)
            walk(a, key, real, into)
        else:
            add(a, os.path.basename(a), key, real, None)
    return [d for d in docs if d.files]


def dedup(docs, keep_copies=False):
    seen, dups = set(), [0, 0]
    for d in docs:
        keep = []
        for p in d.files:
            st = os.stat(p)
            if (st.st_dev, st.st_ino) in seen:
                dups[0] += 1
            else:
                seen.add((st.st_dev, st.st_ino))
                keep.append(p)
        d.files = keep
    docs = [d for d in docs if d.files]
    if keep_copies:
        return docs, dups
    out, contents = [], set()
    for d in docs:
        sig = (d.kind, tuple(open(p, "rb").read() for p in d.files))
        if sig in contents:
            dups[1] += 1
            continue
        contents.add(sig)
        out.append(d)
    return out, dups


def unique_keys(docs):
    renamed = 0
    for rnd in (0, 1):
        groups = {}
        for d in docs:
            groups.setdefault(d.key, []).append(d)
        for g in groups.values():
            if len(g) < 2:
                continue
            root = os.path.commonpath([os.path.dirname(d.real) for d in g])
            for d in g:
                if rnd == 0:
                    d.key = os.path.relpath(d.real, root)
                    renamed += 1
                else:
                    d.key = d.real
    return renamed


def units(docs, field):
    """[(split name, bytes)] of every document in order."""
    out = []
    for d in docs:
        if d.kind == "text":
            out.append((d.key, b"".join(open(p, "rb").read() for p in d.files)))
        else:
            key = d.key[:-3] if d.key.endswith(b".gz") else d.key
            out += [(key + b":%d" % n, t) for n, t in records(d.files[0], field)]
    return out


def split(units, seed, frac):
    us = [u(seed, k) for k, _ in units]
    val = [x < frac for x in us]
    if len(units) == 1:
        val = [frac >= 1.0]
    elif len(units) >= 2 and 0 < frac < 1:
        if not any(val):
            val[us.index(min(us))] = True
        elif all(val):
            val[us.index(max(us))] = False
    return val


def read_split(out, name):
    toks = []
    for f in sorted(glob.glob(os.path.join(out, name + "_*.bin"))):
        h = np.fromfile(f, dtype="<i4", count=256)
        dt = {20240520: "<u2", 20240521: "<u4"}[int(h[0])]
        toks.append(np.fromfile(f, dtype=dt, offset=1024).astype(np.int64))
    return np.concatenate(toks) if toks else np.zeros(0, np.int64)


def stream(docs):
    return np.array([t for d in docs for t in [256] + list(d)], dtype=np.int64)


def main():
    cmd = sys.argv[1]
    if cmd == "expect":
        out, seed, frac, mode, field, paths = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7:]
        field = None if field == "-" else field
        docs, dups = dedup(collect(paths, mode.startswith("dir"), field), mode.endswith(",keep"))
        renamed = unique_keys(docs)
        us = units(docs, field)
        val = split(us, seed, frac)
        for i, name in enumerate(("train", "val")):
            want = stream([t for (k, t), v in zip(us, val) if v == i])
            got = read_split(out, name)
            assert len(got) == len(want) and (got == want).all(), \
                f"{name}: {len(got)} tokens, expected {len(want)}" + (f" (first difference at {int(np.argmax(got[:len(want)] != want[:len(got)]))})" if len(got) and len(want) else "")
        print(f"train {len(us) - sum(val)}, val {sum(val)} documents; duplicates {dups[0]} + {dups[1]}; renamed {renamed}")
    elif cmd == "rows":
        out, seed, frac, name, textfile = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
        from tokenizers import Tokenizer
        meta = json.load(open(os.path.join(out, "meta.json")))
        tok = Tokenizer.from_file(meta["tokenizer"])
        texts = [json.loads(l) for l in open(textfile, encoding="utf-8")]
        us = [(name.encode() + b"#%d" % r, t) for r, t in enumerate(texts) if t]
        val = split(us, seed, frac)
        for i, sp in enumerate(("train", "val")):
            t = read_split(out, sp)
            cut = list(np.flatnonzero(t == meta["eod_id"])) + [len(t)]
            got = [tok.decode(t[cut[j] + 1:cut[j + 1]].tolist(), skip_special_tokens=False) for j in range(len(cut) - 1)]
            want = [x for (k, x), v in zip(us, val) if v == i]
            assert got == want, f"{sp}: {len(got)} documents, expected {len(want)}; first difference: " + \
                next((f"{a[:40]!r} vs {b[:40]!r}" for a, b in zip(got, want) if a != b), "(lengths)")
        print(f"train {len(us) - sum(val)}, val {sum(val)} rows")


try:
    main()
except AssertionError as e:
    print("   ", e)
    sys.exit(1)
