#!/usr/bin/python3
"""prepare_hf — text files and directory trees → llm.c token shards with a Hugging Face tokenizer (tokenizer.json),
for build/train on a real tokenizer's vocabulary (e.g. that of a model brought in with tools/hf_import).

  tools/prepare_hf --tokenizer TOKENIZER --out DIR [--val-frac F] [--doc-per file|dir] [--seed S]
                   [--shard-tokens N] [--sep TOKEN|ID] [--doc-lengths W] [--force] PATH...

TOKENIZER is a tokenizer.json or a directory holding one (and optionally tokenizer_config.json); it is read
locally with the `tokenizers` library, nothing is downloaded. Documents, the walk, what is skipped and the
train/val split are build/prepare's (see `build/prepare --help`): every text file is a document, or with
--doc-per dir every directory PATH; a document goes to val by the same seeded hash of its name, so both tools
split a corpus alike. A document's text (its files' UTF-8 text concatenated) is encoded without the tokenizer's
own special tokens (the text of one, e.g. "<|endoftext|>" inside a document, is encoded as text), and the
document separator is written BEFORE every document, as build/prepare writes its token 256 and llm.c its
<|endoftext|>: the separator is --sep (a token or an id), else the token the tokenizer's post-processor starts
every text with (Llama's <s>), else its BOS token, else the token its post-processor ends every text with, else
its EOS token (GPT-2's <|endoftext|>). Files that are not UTF-8 text are skipped (the
tokenizer takes text) and counted.

Shards: DIR/train_000000.bin, ... and DIR/val_000000.bin, ... with at most --shard-tokens tokens each (documents
may continue in the next shard): llm.c's uint16 shards (magic 20240520) when every id fits in 16 bits, else
ringlm's uint32 variant (magic 20240521). DIR/meta.json describes them, in build/prepare's format ("format":
"ringlm-data-1"; "tokenizer": the absolute path of the tokenizer.json used; "tokenizer_sha256": the SHA-256 of its
bytes; "vocab_size": the tokenizer's vocabulary size, the least a model's vocab_size can be; "eod_id": the
separator; "bos_id": the tokenizer's BOS id or null; "dtype": "uint16" or "uint32"; "documents", "tokens",
"shards": {"train": N, "val": N}; "command": this command line, shell-quoted): build/train and build/eval take
vocab_size and eod from it (and refuse values given to them that contradict it), tools/hf_export finds the
tokenizer through it. Existing shards or DIR/meta.json are an error unless --force. Prints the totals, one line
per split, the tokenizer, the separator and what meta.json records.

Writing: the shards and meta.json are written into a temporary directory inside DIR (DIR/.prepare_hf.new.*), read
back (every shard's header, token count and size; meta.json), and only then swapped in: with --force the previous
shards and meta.json are moved aside (DIR/.prepare_hf.old.*), the new ones renamed into DIR, and the old ones
removed last. Errors (bad input, disk full, read-only directory) are one line on stderr, exit status 1, and leave
DIR as it was: the previous shards and meta.json untouched, no temporary directory, no shard of this run (a DIR
this run created is removed again). With --force the disk needs room for both sets until the swap.

Memory: the corpus is streamed. The walk keeps only the file names (each file is read once to check that it is
UTF-8 text, then again to encode it); documents are encoded one batch at a time (at most 64 documents, about
RINGLM_PREPARE_CHUNK characters) and written as they are encoded. A document longer than RINGLM_PREPARE_CHUNK
characters (default 262144) is read in blocks and encoded in pieces of about that length, each with 4096
characters of context on either side: cut points are chosen where the tokenizer splits the text the same way
with different context (before a newline that follows a letter or digit, else a newline, else a space, checked by
encoding the surroundings twice), and at every cut the two pieces' encodings of the overlap must agree token for
token. Where they do (every tokenizer whose pre-tokenizer splits text into pieces shorter than the context: GPT-2
and Llama 3 style byte-level BPE, SentencePiece-style Metaspace and Llama 2's normalizer, WordLevel, WordPiece),
the ids are exactly those of encoding the whole document at once. A cut where they do not is joined at a token
boundary both pieces share (the text is never duplicated or lost) and counted: the summary then says how many of
the cuts may tokenize differently from whole-document encoding. Peak memory is thus bounded by the chunk size,
independent of the corpus and of any document's length (measured: docs/huggingface.md, "Memory").
"""
import argparse
import codecs
import fnmatch
import hashlib
import itertools
import json
import os
import re
import shlex
import stat
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_common as H  # noqa: E402

SNIFF = 8192
BLOCK = 1 << 20                       # bytes read at a time
MAGIC16, MAGIC32, VERSION, HEADER_INTS = 20240520, 20240521, 1, 256
BATCH_DOCS = 64
VAL_FEW_DOCS = 8                      # a held-out split of fewer documents gets a warning (as build/prepare's)


def env_int(name, default, lo, hi):
    v = os.environ.get(name)
    if v is None:
        return default
    if not v.isdigit() or not lo <= int(v) <= hi:
        raise H.Fail(f"${name} must be an integer in [{lo}, {hi}], not '{v}'")
    return int(v)


# ----------------------------------------------------------------------------------------------- documents
def fnv1a64(b):
    h = 0xCBF29CE484222325
    for c in b:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


mix64 = H.mix64


def doc_u(seed, key):
    """build/prepare's u(seed, key) in [0, 1): FNV-1a of the key's bytes, mixed with the seed."""
    return (mix64(fnv1a64(key) ^ mix64(seed)) >> 11) * 2.0 ** -53


def encode_batch(tok, texts):
    """tokenizers' encode_batch (no special tokens); the library's errors (a tokenizer.json it loads but cannot encode
    with, e.g. a WordLevel model without unk_token) become one line."""
    try:
        return tok.encode_batch(texts, add_special_tokens=False)
    except (KeyboardInterrupt, SystemExit, MemoryError, H.Terminated):
        raise
    except BaseException as e:
        msg = " ".join(str(e).split()) or e.__class__.__name__
        raise H.Fail(f"the tokenizer cannot encode the text: {msg[:160]}")


def read_error(path, e):
    return H.Fail(H.os_error(e, f"cannot read '{os.fsdecode(path)}'"))


JSONL_SUFFIXES = (b".jsonl", b".ndjson", b".json.gz", b".jsonl.gz", b".ndjson.gz")


def is_dataset_dir(d):
    """A directory datasets' save_to_disk wrote (one Dataset: state.json and dataset_info.json)."""
    return os.path.isfile(os.path.join(d, b"state.json")) and os.path.isfile(os.path.join(d, b"dataset_info.json"))


class Doc:
    """A document (kind "text": its files' text, concatenated) or a file of records, each record a document (kind
    "jsonl", "parquet" or "dataset"); key: its split name (bytes); real: its canonical path; files: [(path, size)]."""

    def __init__(self, key, real, kind="text"):
        self.key, self.real, self.kind, self.files, self.valbits = key, real, kind, [], None


class Corpus:
    """The documents of the walk, as file names (no text is kept): build/prepare's documents, walk, skips,
    duplicates and split names (data/prepare.c), plus Parquet files and saved datasets as files of records."""

    def __init__(self, field):
        self.docs = []
        self.skip = dict(binary=0, empty=0, symlinks=0, hidden_dirs=0, other=0, not_utf8=0)
        self.field = field
        self.dup_file = self.dup_content = self.renamed = 0
        self.dup_example = self.renamed_example = ""
        self.empty_records = self.lone_surrogates = 0

    def files(self):
        return [f for d in self.docs for f in d.files]

    def is_text(self, path):
        """The file's size when it is UTF-8 text; None (counted as skipped) when it is empty, binary (a NUL byte in
        the first 8 KiB) or not UTF-8. Read in blocks: the text is not kept."""
        try:
            with open(path, "rb") as f:
                head = f.read(SNIFF)
                if not head:
                    self.skip["empty"] += 1
                    return None
                if b"\0" in head:
                    self.skip["binary"] += 1
                    return None
                dec = codecs.getincrementaldecoder("utf-8")()
                size = len(head)
                try:
                    dec.decode(head)
                    while True:
                        b = f.read(BLOCK)
                        if not b:
                            break
                        size += len(b)
                        dec.decode(b)
                    dec.decode(b"", final=True)
                except UnicodeDecodeError:
                    self.skip["not_utf8"] += 1
                    return None
                return size
        except OSError as e:
            raise read_error(path, e)

    def add_file(self, path, name, key, real, into):
        """A regular file found: with --text-field a JSON Lines or Parquet file is a document of records of its own;
        a text file is a document of its own (into None) or a file of the open --doc-per dir document."""
        kind = None
        if self.field is not None:
            kind = "jsonl" if name.endswith(JSONL_SUFFIXES) else "parquet" if name.endswith(b".parquet") else None
        if kind:
            try:
                size = os.stat(path).st_size
            except OSError as e:
                raise read_error(path, e)
            if not size:
                self.skip["empty"] += 1
                return
            d = Doc(key, real, kind)
            d.files.append((path, size))
            self.docs.append(d)
            return
        size = self.is_text(path)
        if size is None:
            return
        if into is None:
            into = Doc(key, real)
            self.docs.append(into)
        into.files.append((path, size))

    def add_dataset(self, path, key, real):
        d = Doc(key, real, "dataset")
        d.files.append((path, 0))
        self.docs.append(d)

    def walk(self, d, key, real, into):
        try:
            names = sorted(os.listdir(d))            # bytes paths: sorted bytewise, as build/prepare
        except OSError as e:
            raise H.Fail(H.os_error(e, f"cannot open directory '{os.fsdecode(d)}'"))
        for n in names:
            p, k, r = os.path.join(d, n), key + b"/" + n, real + b"/" + n
            try:
                st = os.lstat(p)
            except OSError as e:
                raise read_error(p, e)
            if stat.S_ISLNK(st.st_mode):
                self.skip["symlinks"] += 1
            elif stat.S_ISDIR(st.st_mode):
                if n.startswith(b"."):
                    self.skip["hidden_dirs"] += 1
                elif self.field is not None and is_dataset_dir(p):
                    self.add_dataset(p, k, r)
                else:
                    self.walk(p, k, r, into)
            elif not stat.S_ISREG(st.st_mode):
                self.skip["other"] += 1
            else:
                self.add_file(p, n, k, r, into)

    def collect(self, inputs, per_dir):
        """inputs: [(path, origin)], origin "" for an argument or "LIST:LINE" for a --files-from line."""
        for p, origin in inputs:
            where = f"--files-from {origin}: " if origin else ""
            bp = os.fsencode(p)
            try:
                st = os.stat(bp)
            except OSError as e:
                raise H.Fail(where + H.os_error(e, f"cannot read '{p}'"))
            real = os.path.realpath(bp)
            key = os.path.basename(real) or real
            if stat.S_ISREG(st.st_mode):
                self.add_file(bp, os.path.basename(bp), key, real, None)
            elif stat.S_ISDIR(st.st_mode):
                if self.field is not None and is_dataset_dir(bp):
                    self.add_dataset(bp, key, real)
                    continue
                into = None
                if per_dir:
                    into = Doc(key, real)
                    self.docs.append(into)
                self.walk(bp, key, real, into)
            else:
                raise H.Fail(f"{where}'{p}' is not a regular file or a directory")
        self.docs = [d for d in self.docs if d.files]

    def skip_duplicates(self, keep_copies=False):
        """build/prepare's duplicates, skipped and counted (the first in document order kept): the same file reached
        twice (by inode), then a document of the same bytes as an earlier one (the same kind, its files in order
        byte for byte; saved datasets only by the first rule)."""
        seen = {}
        for d in self.docs:
            keep = []
            for p, size in d.files:
                try:
                    st = os.stat(p)
                except OSError as e:
                    raise read_error(p, e)
                q = seen.setdefault((st.st_dev, st.st_ino), p)
                if q is p:
                    keep.append((p, size))
                    continue
                self.dup_file += 1
                if not self.dup_example:
                    self.dup_example = f"'{os.fsdecode(p)}' is the same file as '{os.fsdecode(q)}'"
            d.files = keep
        self.docs = [d for d in self.docs if d.files]
        if keep_copies:
            return
        groups = {}
        for i, d in enumerate(self.docs):
            if d.kind != "dataset":
                groups.setdefault((d.kind, len(d.files), sum(s for _, s in d.files)), []).append(i)
        drop, first = set(), {}
        for g in groups.values():
            for i in g if len(g) > 1 else ():
                sig = tuple((s, file_digest(p)) for p, s in self.docs[i].files)
                j = first.setdefault((self.docs[i].kind, sig), i)
                if j != i:
                    drop.add(i)
                    self.dup_content += 1
                    if not self.dup_file and (not self.dup_example or i < self._dup_at):
                        name = lambda x: os.fsdecode(x.files[0][0] if len(x.files) == 1 else x.real)
                        self.dup_example = f"'{name(self.docs[i])}' has the same bytes as '{name(self.docs[j])}'"
                        self._dup_at = i
        self.docs = [d for i, d in enumerate(self.docs) if i not in drop]

    def unique_keys(self):
        """build/prepare's split names: documents that share a name are named by their canonical path below the
        deepest directory holding all of their parents; names still shared after that, by their canonical path."""
        for rnd in (0, 1):
            groups = {}
            for d in self.docs:
                groups.setdefault(d.key, []).append(d)
            shared = [g for g in groups.values() if len(g) > 1]
            if not shared:
                return
            for g in shared:
                root = os.path.commonpath([os.path.dirname(d.real) for d in g]) if rnd == 0 else None
                for d in g:
                    name = os.path.relpath(d.real, root) if rnd == 0 else d.real
                    if rnd == 0:
                        if not self.renamed_example:
                            self.renamed_example = f"'{os.fsdecode(d.key)}' is named '{os.fsdecode(name)}'"
                        self.renamed += 1
                    d.key = name

    def records(self, d, count=False):
        """The records of a file of records, one at a time: (name for the split, text) for each non-empty one. A lone
        UTF-16 surrogate (a JSON \\u escape that is no character) becomes U+FFFD, as build/prepare writes it."""
        if d.kind == "jsonl":
            it = jsonl_records(d.files[0][0], self.field)
        elif d.kind == "parquet":
            it = parquet_records(d.files[0][0], self.field)
        else:
            it = dataset_records(d.files[0][0], self.field)
        for ident, text in it:
            if not text:
                self.empty_records += count
                continue
            if d.kind == "jsonl":
                text, n = SURROGATE.subn("\ufffd", text)
                self.lone_surrogates += n if count else 0
            key = d.key[:-3] if d.kind == "jsonl" and d.key.endswith(b".gz") else d.key   # (a compressed copy splits alike)
            yield key + ident, text


SURROGATE = re.compile("[\ud800-\udfff]")


def file_digest(p, cache={}):
    """SHA-256 of a file's bytes, read in blocks."""
    if p not in cache:
        h = hashlib.sha256()
        try:
            with open(p, "rb") as f:
                while True:
                    b = f.read(BLOCK)
                    if not b:
                        break
                    h.update(b)
        except OSError as e:
            raise read_error(p, e)
        cache[p] = h.digest()
    return cache[p]


class _Pairs(list):
    """A JSON object as its (key, value) pairs (so that a field given twice is seen)."""


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def jsonl_records(path, field):
    """JSON Lines records (data/jsonl.h's rules): (b":LINE", the field's text or None) per record."""
    import gzip
    where = os.fsdecode(path)
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        f = gzip.open(path, "rb") if gz else open(path, "rb")
    except OSError as e:
        raise read_error(path, e)
    with f:
        n = 0
        while True:
            try:
                line = f.readline()
            except (OSError, EOFError, gzip.BadGzipFile, zlib_error()) as e:
                raise H.Fail(f"'{where}' cannot be decompressed (gzip: {' '.join(str(e).split()) or type(e).__name__}): "
                             "a corrupt or truncated file?")
            if not line:
                return
            n += 1
            if not line.strip(b" \t\r\n"):
                continue
            try:
                s = line.decode("utf-8")
            except UnicodeDecodeError:
                raise H.Fail(f"{where}:{n}: not a valid JSON record: bytes that are not UTF-8 (JSON text is UTF-8)")
            try:
                obj = json.loads(s, object_pairs_hook=_Pairs, parse_constant=_no_constant)
            except (ValueError, RecursionError) as e:
                raise H.Fail(f"{where}:{n}: not a valid JSON record: {' '.join(str(e).split())[:160]}")
            if not isinstance(obj, _Pairs):
                raise H.Fail(f"{where}:{n}: not a valid JSON record: a record must be a JSON object")
            vals = [v for k, v in obj if k == field]
            if not vals:
                names = ", ".join(k for k, _ in obj)
                raise H.Fail(f"{where}:{n}: the record has no field '{field}' (its fields: {names or 'none'}): name the "
                             "text field with --text-field")
            if len(vals) > 1:
                raise H.Fail(f"{where}:{n}: the record has the field '{field}' twice")
            v = vals[0]
            if v is not None and not isinstance(v, str):
                raise H.Fail(f"{where}:{n}: the record's field '{field}' is {json_kind(v)}, not a string (text)")
            yield b":%d" % n, v


def zlib_error():
    import zlib
    return zlib.error


def json_kind(v):
    return ("a boolean" if isinstance(v, bool) else "a number" if isinstance(v, (int, float)) else
            "an object" if isinstance(v, _Pairs) else "an array")


def arrow_text_column(where, schema, field):
    """Check that the table has a string column FIELD."""
    import pyarrow as pa
    names = list(schema.names)
    if field not in names:
        raise H.Fail(f"{where}: no column '{field}' (its columns: {', '.join(names) or 'none'}): name the text column "
                     "with --text-field")
    t = schema.field(field).type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise H.Fail(f"{where}: column '{field}' is of type {t}, not a string (text)")


def import_arrow(what):
    try:
        import pyarrow  # noqa: F401
        if what == "dataset":
            import datasets  # noqa: F401
    except ImportError:
        raise H.Fail(f"the Python package '{'datasets' if what == 'dataset' else 'pyarrow'}' is missing: run 'bash "
                     "tools/setup/hf_env.sh' (it adds datasets and pyarrow to build/hfenv)")


def parquet_records(path, field):
    """The rows of a Parquet file: (b"#ROW", the column's text or None), ROW counted from 0."""
    import_arrow("parquet")
    import pyarrow.parquet as pq
    where = os.fsdecode(path)
    try:
        pf = pq.ParquetFile(where)
        arrow_text_column(where, pf.schema_arrow, field)
        row = 0
        for batch in pf.iter_batches(batch_size=1024, columns=[field]):
            for v in batch.column(0).to_pylist():
                yield b"#%d" % row, v
                row += 1
    except H.Fail:
        raise
    except OSError as e:
        raise H.Fail(f"'{where}' cannot be read as Parquet: {' '.join(str(e).split())[:160]}")
    except Exception as e:  # pyarrow's own errors (ArrowInvalid, ...) for a file that is not Parquet
        raise H.Fail(f"'{where}' cannot be read as Parquet: {' '.join(str(e).split())[:160]}")


def dataset_records(path, field):
    """The rows of a dataset saved by datasets' save_to_disk: (b"#ROW", the column's text or None)."""
    import_arrow("dataset")
    import datasets
    where = os.fsdecode(path)
    try:
        ds = datasets.load_from_disk(where)
    except Exception as e:
        raise H.Fail(f"'{where}' cannot be loaded by datasets.load_from_disk: {' '.join(str(e).split())[:160]}")
    if not isinstance(ds, datasets.Dataset):
        raise H.Fail(f"'{where}' is not one saved Dataset")
    arrow_text_column(where, ds.data.schema, field)
    row = 0
    for batch in ds.select_columns([field]).iter(batch_size=1024):
        for v in batch[field]:
            yield b"#%d" % row, v
            row += 1


def text_blocks(files):
    """A document's text (its files' UTF-8 text, concatenated), as str blocks of at most BLOCK bytes each."""
    for p, _ in files:
        dec = codecs.getincrementaldecoder("utf-8")()
        try:
            with open(p, "rb") as f:
                while True:
                    b = f.read(BLOCK)
                    t = dec.decode(b, final=not b)
                    if t:
                        yield t
                    if not b:
                        break
        except UnicodeDecodeError:
            raise H.Fail(f"'{os.fsdecode(p)}' is no longer UTF-8 text (was it changed while prepare_hf ran?)")
        except OSError as e:
            raise read_error(p, e)


def assign(c, frac, seed):
    """build/prepare's split over its documents (text documents and records): val iff u < frac; with 0 < frac < 1
    and >= 2 documents each split gets one. Text documents get d.val; files of records d.valbits (one per
    record). Returns the number of documents."""
    units = []                                   # (u, doc, record index or -1)
    for d in c.docs:
        if d.kind == "text":
            d.val = doc_u(seed, d.key) < frac
            units.append((doc_u(seed, d.key), d, -1))
            continue
        d.valbits = bytearray()
        for k, (name, _) in enumerate(c.records(d, count=True)):
            u = doc_u(seed, name)
            d.valbits.append(u < frac)
            units.append((u, d, k))

    def setv(unit, v):
        _, d, k = unit
        if k < 0:
            d.val = v
        else:
            d.valbits[k] = v
    n = len(units)
    if n == 1:
        setv(units[0], frac >= 1.0)
    elif n >= 2 and 0.0 < frac < 1.0:
        n_val = sum(int(d.val if k < 0 else d.valbits[k]) for _, d, k in units)
        if n_val == 0:
            setv(min(units, key=lambda x: x[0]), True)
        elif n_val == n:
            setv(max(units, key=lambda x: x[0]), False)
    return n


# ----------------------------------------------------------------------------------------------- long documents
class Toks:
    """The tokens of one encoded piece: start and end offsets (characters of the document) and ids, as arrays."""

    def __init__(self, enc, at):
        o = enc.offsets
        offs = np.fromiter(itertools.chain.from_iterable(o), dtype=np.int64, count=2 * len(o)).reshape(-1, 2)
        self.starts, self.ends = offs[:, 0] + at, offs[:, 1] + at
        self.ids = np.array(enc.ids, dtype=np.int64)

    def within(self, lo, hi):
        m = (self.starts >= lo) & (self.starts < hi)
        return self.starts[m], self.ends[m], self.ids[m]

    def boundaries(self, lo, hi):
        """The positions in [lo, hi] where a token starts and no other token reaches across."""
        if not len(self.starts):
            return np.zeros(0, np.int64)
        o = np.argsort(self.starts, kind="stable")
        st, en = self.starts[o], self.ends[o]
        ok = np.ones(len(st), bool)
        ok[1:] = np.maximum.accumulate(en)[:-1] <= st[1:]
        b = np.unique(st[ok])
        return b[(b >= lo) & (b <= hi)]

    def spans(self, c):
        """Does a token reach across position c (start before it, end after it)?"""
        return bool(np.any((self.starts < c) & (self.ends > c)))


def agree(a, b, lo, hi, c):
    """Do two encodings give the same tokens starting in [lo, hi), and does no token of either reach across c?"""
    x, y = a.within(lo, hi), b.within(lo, hi)
    return all(np.array_equal(u, v) for u, v in zip(x, y)) and not a.spans(c) and not b.spans(c)


class LongDoc:
    """Encodes a long document piece by piece (see the module docstring, "Memory"); stats counts the cuts and
    those where the pieces' encodings did not agree."""

    def __init__(self, tok, chunk, ctx, stats):
        self.tok, self.chunk, self.ctx, self.stats = tok, chunk, ctx, stats

    def encode(self, texts):
        return encode_batch(self.tok, texts)

    def probe(self, buf, base, c):
        """Does the tokenizer split at c alike with its context mostly left and mostly right of it?"""
        x = self.ctx
        i = c - base
        ea, eb = self.encode([buf[i - 2 * x:i + x], buf[i - x:i + 2 * x]])
        return agree(Toks(ea, c - 2 * x), Toks(eb, c - x), c - x // 2, c + x // 2, c)

    def cut(self, buf, base, lo, hi):
        """A cut point in [lo, hi] (absolute positions), the best candidate the probe accepts."""
        for cls in ("\n+alnum", "\n", " +alnum"):
            ch = cls[0]
            i, n, scanned = hi - base, 0, 0
            while n < 4 and scanned < 4096:
                j = buf.rfind(ch, lo - base, i + 1)
                if j <= lo - base:
                    break
                i, scanned = j - 1, scanned + 1
                if cls.endswith("alnum") and not buf[j - 1].isalnum():
                    continue
                n += 1
                if self.probe(buf, base, base + j):
                    return base + j
        for k in range(4):                           # no whitespace near: any position the probe accepts
            if self.probe(buf, base, hi - 61 * k):
                return hi - 61 * k
        return hi

    def splice(self, prev, cur, c, emit_from, cur_end):
        """Where to join the previous piece's tokens and this one's at the cut c: (p1, p2, exact): emit the previous
        piece's tokens starting before p1, then text[p1:p2] encoded on its own (when p1 < p2), then this piece's from
        p2 (up to its own cut, cur_end). Exact when both agree around c; else a boundary both share, or a boundary
        of each (p1 of the previous piece at or before c, p2 of this one at or after it): every character is
        encoded once either way."""
        h = self.ctx // 2
        if agree(prev, cur, c - h, c + h, c):
            return c, c, True
        bp, bc = prev.boundaries(max(emit_from, c - h), c + h), cur.boundaries(c - h, c + h)
        common = np.intersect1d(bp, bc)
        if len(common):
            p = int(common[np.argmin(np.abs(common - c))])
            return p, p, False
        b1 = prev.boundaries(emit_from, c)
        p1 = int(b1.max()) if len(b1) else emit_from
        b2 = cur.boundaries(c, cur_end)
        p2 = int(b2.min()) if len(b2) else cur_end        # a token longer than the piece: encoded on its own
        return p1, p2, False

    def ids(self, blocks):
        """The ids of the document whose text the iterator BLOCKS yields, in arrays, piece by piece."""
        chunk, ctx = self.chunk, self.ctx
        buf, base, eof = "", 0, False

        def fill(upto):
            nonlocal buf, eof
            parts = [buf]
            n = base + len(buf)
            while not eof and n < upto:
                try:
                    t = next(blocks)
                except StopIteration:
                    eof = True
                    break
                parts.append(t)
                n += len(t)
            buf = "".join(parts)

        prev, emit_from, c = None, 0, 0
        while True:
            t = c + chunk
            fill(t + 2 * ctx + 1)
            end = base + len(buf)
            last = eof and end <= t + 2 * ctx
            nc = end if last else self.cut(buf, base, c + chunk // 2, t)
            a = c - ctx if c else 0
            b = end if last else nc + ctx
            (enc,) = self.encode([buf[a - base:b - base]])
            cur = Toks(enc, a)
            del enc
            if prev is not None:
                self.stats["cuts"] += 1
                p1, p2, exact = self.splice(prev, cur, c, emit_from, nc)
                self.stats["inexact"] += not exact
                yield prev.within(emit_from, p1)[2]
                if p1 < p2:
                    (e,) = self.encode([buf[p1 - base:p2 - base]])
                    yield np.array(e.ids, dtype=np.int64)
                emit_from = p2
            prev = cur
            if last:
                yield prev.within(emit_from, end + 1)[2]
                return
            c = nc
            keep = min(emit_from, c - 2 * ctx)
            buf, base = buf[keep - base:], keep


# ----------------------------------------------------------------------------------------------- shards
class Writer:
    def __init__(self, out, staging, split, max_tokens, wide):
        self.out, self.dir, self.split, self.max, self.wide = out, staging, split, max_tokens, wide
        self.dtype = np.uint32 if wide else np.uint16
        self.f, self.n_shard, self.n_shards, self.n_tokens, self.n_docs, self.names = None, 0, 0, 0, 0, []

    def _close(self):
        if self.f:
            f, self.f = self.f, None
            path = os.path.join(self.dir, self.names[-1])
            try:
                with f:
                    f.seek(0)
                    f.write(struct.pack("<256i", MAGIC32 if self.wide else MAGIC16, VERSION, self.n_shard, *[0] * 253))
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                raise H.Fail(H.os_error(e, f"cannot write '{path}'"))

    def _open(self):
        name = f"{self.split}_{self.n_shards:06d}.bin"
        path = os.path.join(self.dir, name)
        try:
            self.f = open(path, "wb")
            self.f.write(b"\0" * (4 * HEADER_INTS))
        except OSError as e:
            raise H.Fail(H.os_error(e, f"cannot create '{path}'"))
        self.names.append(name)
        self.n_shards += 1
        self.n_shard = 0

    def put(self, ids):
        a = np.asarray(ids, dtype=np.int64)
        i = 0
        while i < len(a):
            if not self.f or self.n_shard == self.max:
                self._close()
                self._open()
            n = min(len(a) - i, self.max - self.n_shard)
            try:
                self.f.write(a[i:i + n].astype("<u4" if self.wide else "<u2").tobytes())
                H.fault("prepare_hf:shard")
            except OSError as e:
                raise H.Fail(H.os_error(e, f"cannot write '{os.path.join(self.dir, self.names[-1])}'"))
            self.n_shard += n
            self.n_tokens += n
            i += n

    def finish(self):
        self._close()

    def verify(self):
        """Every shard reads back as written: magic, version, token count and file size; the counts sum up."""
        total, item = 0, 4 if self.wide else 2
        for name in self.names:
            path = os.path.join(self.dir, name)
            try:
                with open(path, "rb") as f:
                    h = struct.unpack("<3i", f.read(12))
                    size = os.fstat(f.fileno()).st_size
            except (OSError, struct.error):
                h, size = (0, 0, 0), -1
            if h[0] != (MAGIC32 if self.wide else MAGIC16) or h[1] != VERSION or h[2] <= 0 or \
                    size != 4 * HEADER_INTS + item * h[2]:
                raise H.Fail(f"'{path}' does not read back as written (a file system error?)")
            total += h[2]
        if total != self.n_tokens:
            raise H.Fail(f"the {self.split} shards read back {total} tokens, {self.n_tokens} were written")

    def line(self):
        s = (f"{self.split}: {self.n_docs} document{'' if self.n_docs == 1 else 's'}, {self.n_tokens} tokens, "
             f"{self.n_shards} shard{'' if self.n_shards == 1 else 's'}")
        if not self.n_shards:
            return s + " (none written)"
        paths = [os.path.join(self.out, n) for n in self.names]
        return s + f" ({os.path.join(self.out, self.split + '_*.bin')})\n" + "".join(f"  {p}\n" for p in paths).rstrip("\n")


def meta_text(tokenizer, sha256, vocab_size, eod_id, bos_id, wide, tr, va):
    """DIR/meta.json as build/prepare writes it (data/prepare.c write_meta: same keys, order and layout)."""
    def j(v):   # a JSON value; non-ASCII text as UTF-8, as build/prepare writes it
        return json.dumps(v, ensure_ascii=False)

    def pair(a, b):
        return f'{{"train": {a}, "val": {b}}}'
    fields = [("format", j("ringlm-data-1")), ("tokenizer", j(tokenizer)), ("tokenizer_sha256", j(sha256)),
              ("vocab_size", j(vocab_size)), ("eod_id", j(eod_id)), ("bos_id", j(bos_id)),
              ("dtype", j("uint32" if wide else "uint16")), ("documents", pair(tr.n_docs, va.n_docs)),
              ("tokens", pair(tr.n_tokens, va.n_tokens)), ("shards", pair(tr.n_shards, va.n_shards)),
              ("command", j(shlex.join(sys.argv)))]
    return "{\n" + ",\n".join(f'  "{k}": {v}' for k, v in fields) + "\n}\n"


def write_file(path, data):
    try:
        with open(path, "wb") as f:
            f.write(data)
            H.fault("prepare_hf:meta")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise H.Fail(H.os_error(e, f"cannot write '{path}'"))


def parse_size(s, what):
    try:
        v = int(s)
    except ValueError:
        v = 0
    if not 1 <= v <= 2**31 - 1:
        raise H.Fail(f"{what} expects an integer in [1, 2147483647], got '{s}'")
    return v


def read_list(lst):
    """--files-from LIST: [(path, "LIST:LINE")] for its non-empty lines ('-': standard input)."""
    try:
        data = sys.stdin.buffer.read() if lst == "-" else open(lst, "rb").read()
    except OSError as e:
        raise H.Fail("--files-from: " + H.os_error(e, f"cannot read '{lst}'"))
    out = []
    for n, line in enumerate(data.split(b"\n"), 1):
        line = line.rstrip(b"\r")
        if b"\0" in line:
            raise H.Fail(f"--files-from '{lst}': line {n} holds a NUL byte: not a list of paths, one a line")
        if line:
            out.append((os.fsdecode(line), f"{lst}:{n}"))
    return out


def load_tokenizer(info):
    """(tokenizers.Tokenizer without the special added tokens and the post-processor, raw bytes of tokenizer.json)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise H.Fail("the Python package 'tokenizers' is missing: run 'bash tools/setup/hf_env.sh' (a virtual environment "
                     "build/hfenv with transformers 4.46.3, tokenizers and safetensors; the tools use it by themselves)")
    # the text is encoded by a copy without the special added tokens (and without the post-processor): a special
    # token's text inside a document ("<|endoftext|>", "<s>") is text, never a forged separator
    j = dict(info["data"])
    j["added_tokens"] = [t for t in j.get("added_tokens") or [] if not t.get("special")]
    j["post_processor"] = None
    try:
        return Tokenizer.from_str(json.dumps(j))
    except (KeyboardInterrupt, SystemExit, MemoryError, H.Terminated):
        raise
    except BaseException as e:  # the library raises plain Exceptions (and pyo3's PanicException) for malformed files
        msg = " ".join(str(e).split()) or e.__class__.__name__
        raise H.Fail(f"'{info['json']}' cannot be loaded by tokenizers: {msg[:160]}")


def main():
    ap = H.ArgParser(prog="tools/prepare_hf", description=__doc__.split("\n\n")[0],
                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("paths", nargs="*", metavar="PATH", help="text files and directories")
    ap.add_argument("--tokenizer", help="a tokenizer.json or a directory holding one (required)")
    ap.add_argument("--out", help="output directory (created; required)")
    ap.add_argument("--val-frac", default="0.05", help="fraction of documents for validation, 0..1 (default 0.05)")
    ap.add_argument("--doc-per", default="file", help="file (default): every text file is a document; dir: every "
                    "directory PATH is one document")
    ap.add_argument("--seed", default="0", help="seed of the train/val assignment (default 0)")
    ap.add_argument("--shard-tokens", default="100000000", help="tokens per shard (default 100000000)")
    ap.add_argument("--sep", help="the document separator: a token or an id (default: see below)")
    ap.add_argument("--text-field", metavar="FIELD", help="read JSON Lines files (*.jsonl, *.ndjson, *.json.gz, "
                    "*.jsonl.gz, *.ndjson.gz; gzip or plain), Parquet files (*.parquet) and directories a datasets "
                    "save_to_disk wrote: each record's (row's) string field FIELD is one document, as build/prepare "
                    "--text-field reads JSON Lines (null or \"\": skipped and counted)")
    ap.add_argument("--files-from", metavar="LIST", action="append", help="also take the paths listed in LIST, one a "
                    "line ('-': standard input; empty lines passed over), as PATHs after the others")
    ap.add_argument("--keep-duplicates", action="store_true", help="keep documents of the same bytes as an earlier one, "
                    "as build/prepare --keep-duplicates (the same file reached twice is still read once)")
    ap.add_argument("--force", action="store_true", help="replace existing DIR/train_*.bin, DIR/val_*.bin and "
                    "DIR/meta.json")
    ap.add_argument("--doc-lengths", metavar="W", help="afterwards, print the training documents' length distribution "
                    "(log2 buckets, shares of documents and tokens) and how many fit a training window of W tokens "
                    "(0: no window), as build/prepare --doc-lengths does; build/eval --doc_lengths writes it as CSV and "
                    "SVG too (it computes the table here as well: build/eval must be built)")
    a = ap.parse_args()
    if not a.tokenizer:
        raise H.Fail("--tokenizer TOKENIZER is required (a tokenizer.json or a directory holding one)")
    if not a.out:
        raise H.Fail("--out DIR is required (see --help)")
    if a.text_field == "":
        raise H.Fail("--text-field expects the name of the records' text field (e.g. text), got ''")
    try:
        frac = float(a.val_frac)
    except ValueError:
        frac = -1.0
    if not 0.0 <= frac <= 1.0:
        raise H.Fail(f"--val-frac expects a number in [0, 1], got '{a.val_frac}'")
    if a.doc_per not in ("file", "dir"):
        raise H.Fail(f"--doc-per expects 'file' or 'dir', got '{a.doc_per}'")
    if not a.seed.isdigit() or int(a.seed) >= 2**64:
        raise H.Fail(f"--seed expects an unsigned integer, got '{a.seed}'")
    seed, max_tokens = int(a.seed), parse_size(a.shard_tokens, "--shard-tokens")
    eval_bin = None
    if a.doc_lengths is not None:
        if not a.doc_lengths.isdigit() or int(a.doc_lengths) > 2**31 - 1 or int(a.doc_lengths) == 1:
            raise H.Fail(f"--doc-lengths expects a window of 0 or 2..2147483647 tokens (0: none), got '{a.doc_lengths}'")
        eval_bin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "eval")
        if not os.access(eval_bin, os.X_OK):
            raise H.Fail(f"--doc-lengths computes the table with build/eval, which is not built ('{os.path.normpath(eval_bin)}'"
                         " missing): run make first; nothing was written")
    chunk = env_int("RINGLM_PREPARE_CHUNK", 1 << 18, 1024, 1 << 30)
    ctx = max(64, min(4096, chunk // 16))

    # the tokenizer: read once (hashed and encoded with these bytes: meta.json's SHA-256 is of them)
    tj, _ = H.tokenizer_files(a.tokenizer)
    try:
        with open(tj, "rb") as f:
            raw = f.read(H.TOKENIZER_MAX + 1)
    except OSError as e:
        raise read_error(tj, e)
    if len(raw) > H.TOKENIZER_MAX:
        raise H.Fail(f"'{tj}' is larger than {H.TOKENIZER_MAX >> 20} MiB")
    sha256 = hashlib.sha256(raw).hexdigest()
    info = H.tokenizer_info(a.tokenizer, raw)
    sep_tok, sep_id, why = H.separator(info, a.sep)
    tok = load_tokenizer(info)
    vocab_size = max(info["vocab_size"], tok.get_vocab_size(with_added_tokens=True))
    if vocab_size > 2**31 - 1:
        raise H.Fail(f"'{tj}': a vocabulary of {vocab_size} tokens exceeds ringlm's vocab_size limit of 2147483647")
    wide = vocab_size > 65536

    inputs = [(p, "") for p in a.paths]
    for lst in a.files_from or []:
        inputs += read_list(lst)
    if not inputs:
        raise H.Fail("the --files-from list names no path" if a.files_from else "no input PATH given (see --help)")
    c = Corpus(a.text_field)
    c.collect(inputs, a.doc_per == "dir")
    c.skip_duplicates(a.keep_duplicates)
    if not c.docs:
        raise H.Fail("no documents found in the given paths (empty, binary and non-UTF-8 files, symlinks and hidden "
                     "directories are skipped" + (", and duplicates" if c.dup_file + c.dup_content else "") + ")")
    c.unique_keys()
    n_units = assign(c, frac, seed)

    # the output directory: previous shards and meta.json only with --force; everything is staged inside it
    if os.path.lexists(a.out) and not os.path.isdir(a.out):
        raise H.Fail(f"--out '{a.out}' exists and is not a directory")
    old = []
    if os.path.isdir(a.out):
        try:
            old = sorted(n for n in os.listdir(a.out) if fnmatch.fnmatch(n, "train_*.bin") or fnmatch.fnmatch(n, "val_*.bin"))
        except OSError as e:
            raise H.Fail(H.os_error(e, f"cannot open output directory '{a.out}'"))
        if os.path.lexists(os.path.join(a.out, "meta.json")):
            old.append("meta.json")                             # last: an error names a shard first
        if old and not a.force:
            raise H.Fail(f"'{os.path.join(a.out, old[0])}' already exists (use --force to replace the shards in '{a.out}')")
    created = H.make_dirs(a.out, "output directory")
    if not os.access(a.out, os.W_OK | os.X_OK):
        if created:
            os.rmdir(a.out)
        raise H.Fail(f"output directory '{a.out}' is not writable")
    stage = H.Staging(a.out, "prepare_hf", created, "; nothing was written" if created else
                      f"; '{a.out}' is as it was" + (" (the previous shards and meta.json untouched)" if old else ""))

    writers = {0: Writer(a.out, stage.dir, "train", max_tokens, wide), 1: Writer(a.out, stage.dir, "val", max_tokens, wide)}
    stats = {"cuts": 0, "inexact": 0, "long": 0}
    longdoc = LongDoc(tok, chunk, ctx, stats)
    batches, chars = {0: [], 1: []}, {0: 0, 1: 0}

    def flush(split):
        w = writers[split]
        for enc in encode_batch(tok, batches[split]):
            w.put([sep_id])
            w.put(enc.ids)
            w.n_docs += 1
        batches[split].clear()
        chars[split] = 0

    def put_text(split, text):                                   # a document that fits a batch
        batches[split].append(text)
        chars[split] += len(text)
        if len(batches[split]) >= BATCH_DOCS or chars[split] >= chunk:
            flush(split)

    def put_long(split, blocks):                                 # a document encoded in pieces
        flush(split)
        stats["long"] += 1
        w = writers[split]
        w.put([sep_id])
        for ids in longdoc.ids(blocks):
            w.put(ids)
        w.n_docs += 1
    for d in c.docs:                                             # in document order, each into its split's shards
        if d.kind == "text":
            if sum(size for _, size in d.files) <= chunk:        # bytes >= characters: the whole text fits a batch
                put_text(int(d.val), "".join(text_blocks(d.files)))
            else:
                put_long(int(d.val), text_blocks(d.files))
            continue
        k = -1
        for k, (_, text) in enumerate(c.records(d)):
            if k >= len(d.valbits):
                break
            if len(text) <= chunk:
                put_text(d.valbits[k], text)
            else:
                put_long(d.valbits[k], iter([text[i:i + BLOCK] for i in range(0, len(text), BLOCK)]))
        if k + 1 != len(d.valbits):
            raise H.Fail(f"'{os.fsdecode(d.files[0][0])}' has another number of records than when it was first read "
                         "(was it changed while prepare_hf ran?)")
    for split in (0, 1):
        flush(split)
        writers[split].finish()
    for w in writers.values():
        w.verify()
    tok_path = os.path.abspath(info["json"])
    text = meta_text(tok_path, sha256, vocab_size, sep_id, info["bos"][1] if info["bos"] else None, wide,
                     writers[0], writers[1]).encode("utf-8", "surrogateescape")
    write_file(stage.path("meta.json"), text)
    try:
        with open(stage.path("meta.json"), "rb") as f:
            ok = f.read() == text
    except OSError:
        ok = False
    if not ok:
        raise H.Fail(f"'{stage.path('meta.json')}' does not read back as written (a file system error?)")
    note = stage.swap(old, writers[0].names + writers[1].names + ["meta.json"])
    meta = os.path.join(a.out, "meta.json")
    sk = c.skip
    dups = c.dup_file + c.dup_content
    print(f"prepare_hf: {n_units} documents from {len(c.files())} files (skipped: binary {sk['binary']}, empty "
          f"{sk['empty']}, not UTF-8 {sk['not_utf8']}, symlinks {sk['symlinks']}, hidden dirs {sk['hidden_dirs']}, "
          f"other {sk['other']}" + (f", duplicates {dups}: the same file {c.dup_file}, the same bytes {c.dup_content}; "
                                    f"e.g. {c.dup_example}" if dups else "") + ")")
    n_rec = sum(1 for d in c.docs if d.kind != "text")
    if n_rec:
        print(f"records: {n_units - (len(c.docs) - n_rec)} with text from {n_rec} file{'' if n_rec == 1 else 's'} of "
              f"records (field '{c.field}'; skipped: empty or null {c.empty_records})")
    if c.lone_surrogates:
        print(f"jsonl: {c.lone_surrogates} \\u escapes of lone UTF-16 surrogates (no character) were replaced by U+FFFD")
    if c.renamed:
        print(f"split: {c.renamed} documents shared their name with another (e.g. files of one basename from several "
              f"directories): each is split by its path below the directory that holds them all, e.g. {c.renamed_example}")
    print(writers[0].line())
    print(writers[1].line())
    if frac > 0 and writers[1].n_docs < VAL_FEW_DOCS:
        expect = frac * n_units
        reason = (f"{frac:g} x {n_units} documents is {expect:.1f}" + ("; --doc-per dir makes each directory PATH one document"
               if a.doc_per == "dir" else "") if expect < VAL_FEW_DOCS else
               f"about {expect:.0f} were expected ({frac:g} x {n_units} documents): the seeded hash of the documents' names "
               "gave fewer by chance, another --seed gives another draw")
        print(f"WARNING: the held-out split has only {writers[1].n_docs} document{'' if writers[1].n_docs == 1 else 's'} "
              f"({reason}): a validation loss or a perplexity by position over so few documents is noisy, and differences "
              "between settings may not show; give more documents (more paths"
              + (", or --doc-per file" if a.doc_per == "dir" else "") + ") or a larger --val-frac")
    print(f"tokenizer: {tok_path} (sha256 {sha256[:12]}...), vocabulary {vocab_size}; "
          f"{'uint32 shards (magic 20240521)' if wide else 'uint16 shards'}")
    print(f"separator: {sep_tok!r} id {sep_id} before every document ({why})")
    if stats["long"]:
        print(f"long documents: {stats['long']} longer than {chunk} characters, encoded in pieces; "
              + (f"all {stats['cuts']} cuts agree with whole-document encoding" if not stats["inexact"] else
                 f"{stats['inexact']} of {stats['cuts']} cuts may tokenize differently from whole-document encoding "
                 "(the tokenizer splits there differently with different context; no text is lost or repeated)"))
    print(f"meta: {meta} records vocab_size {vocab_size} and eod {sep_id}; build/train and build/eval take them from "
          "it (a vocab_size or eod given to them that contradicts it is refused)"
          + (f"; replaced the previous shards and meta.json ({len(old)} files)" if old else "")
          + (f"; note: {note}" if note else ""))
    if eval_bin:
        print_doc_lengths(eval_bin, a.out, writers[0].names, int(a.doc_lengths))
    return 0


def print_doc_lengths(eval_bin, out, train_names, window):
    """--doc-lengths: the table of build/eval --doc_lengths over the written training shards (its CSV and SVG go to a
    temporary directory that is removed: this tool writes only the shards and meta.json into DIR)"""
    if not train_names:
        print("document lengths: no training documents")
        return
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory(prefix="prepare_hf_doclen.") as tmp:
        cmd = [eval_bin, "--doc_lengths", "--data", os.path.join(out, "train_*.bin"), "--out", tmp, "--name", "doclen"]
        if window:
            cmd += ["--seq_len", str(window)]
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if r.returncode != 0:
            last = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}").splitlines()[-1]
            raise H.Fail(f"--doc-lengths: build/eval --doc_lengths failed ({last}); the shards and meta.json are written")
        lines = r.stdout.splitlines()
        sys.stdout.write("".join(l + "\n" for l in lines if not l.startswith("wrote ")))


if __name__ == "__main__":
    H.main_guard(main, "prepare_hf")
