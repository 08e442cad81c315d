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


class Corpus:
    """The documents of the walk, as file names: docs = [[key (bytes), [(path, size)]]]; no text is kept."""

    def __init__(self):
        self.docs = []
        self.skip = dict(binary=0, empty=0, symlinks=0, hidden_dirs=0, other=0, not_utf8=0)
        self.files = []

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

    def walk(self, d, key, per_file, into):
        try:
            names = sorted(os.listdir(d))            # bytes paths: sorted bytewise, as build/prepare
        except OSError as e:
            raise H.Fail(H.os_error(e, f"cannot open directory '{os.fsdecode(d)}'"))
        for n in names:
            p, k = os.path.join(d, n), key + b"/" + n
            try:
                st = os.lstat(p)
            except OSError as e:
                raise read_error(p, e)
            if stat.S_ISLNK(st.st_mode):
                self.skip["symlinks"] += 1
            elif stat.S_ISDIR(st.st_mode):
                if n.startswith(b"."):
                    self.skip["hidden_dirs"] += 1
                else:
                    self.walk(p, k, per_file, into)
            elif not stat.S_ISREG(st.st_mode):
                self.skip["other"] += 1
            else:
                size = self.is_text(p)
                if size is not None:
                    self.files.append(p)
                    if per_file:
                        self.docs.append([k, [(p, size)]])
                    else:
                        into.append((p, size))

    def collect(self, paths, per_dir):
        for p in paths:
            bp = os.fsencode(p)
            try:
                st = os.stat(bp)
            except OSError as e:
                raise read_error(bp, e)
            real = os.path.realpath(bp)
            key = os.path.basename(real) or real
            if stat.S_ISREG(st.st_mode):
                size = self.is_text(bp)
                if size is not None:
                    self.files.append(bp)
                    self.docs.append([key, [(bp, size)]])
            elif stat.S_ISDIR(st.st_mode):
                files = []
                self.walk(bp, key, not per_dir, files)
                if per_dir and files:
                    self.docs.append([key, files])
            else:
                raise H.Fail(f"'{p}' is not a regular file or a directory")

    def refuse_duplicates(self):
        """The same file reached twice (a PATH given twice, a directory and a path inside it, a hard link) would put
        its text in the data twice: refused, as build/prepare refuses it."""
        seen = {}
        for p in self.files:
            try:
                st = os.stat(p)
            except OSError as e:
                raise read_error(p, e)
            q = seen.setdefault((st.st_dev, st.st_ino), p)
            if q is not p:
                a, b = os.fsdecode(q), os.fsdecode(p)
                if a == b:
                    raise H.Fail(f"'{a}' would be read twice (given twice, or given and also inside a directory given): "
                                 "its text would be in the data twice; give each path once")
                raise H.Fail(f"'{a}' and '{b}' are the same file: its text would be in the data twice (a path given "
                             "twice, a directory and a path inside it, or a link); give each file once")


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


def assign(docs, frac, seed):
    """build/prepare's split: val iff u < frac; with 0 < frac < 1 and >= 2 documents each split gets one."""
    u = [doc_u(seed, k) for k, _ in docs]
    val = [(frac >= 1.0) if len(docs) == 1 else x < frac for x in u]
    if len(docs) >= 2 and 0.0 < frac < 1.0:
        if not any(val):
            val[min(range(len(u)), key=u.__getitem__)] = True
        elif all(val):
            val[max(range(len(u)), key=u.__getitem__)] = False
    return val


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
    if not a.paths:
        raise H.Fail("no input PATH given (see --help)")
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

    c = Corpus()
    c.collect(a.paths, a.doc_per == "dir")
    if not c.docs:
        raise H.Fail("no documents found in the given paths (empty, binary and non-UTF-8 files, symlinks and hidden "
                     "directories are skipped)")
    c.refuse_duplicates()
    val = assign(c.docs, frac, seed)

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
    for split in (0, 1):
        w = writers[split]
        batch, chars = [], 0

        def flush():
            for enc in encode_batch(tok, batch):
                w.put([sep_id])
                w.put(enc.ids)
                w.n_docs += 1
            batch.clear()
        for i, (key, files) in enumerate(c.docs):
            if val[i] != split:
                continue
            if sum(size for _, size in files) <= chunk:          # bytes >= characters: the whole text fits a batch
                text = "".join(text_blocks(files))
                batch.append(text)
                chars += len(text)
                if len(batch) >= BATCH_DOCS or chars >= chunk:
                    flush()
                    chars = 0
                continue
            flush()
            chars = 0
            stats["long"] += 1
            w.put([sep_id])
            for ids in longdoc.ids(text_blocks(files)):
                w.put(ids)
            w.n_docs += 1
        flush()
        w.finish()
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
    print(f"prepare_hf: {len(c.docs)} documents from {len(c.files)} files (skipped: binary {sk['binary']}, empty "
          f"{sk['empty']}, not UTF-8 {sk['not_utf8']}, symlinks {sk['symlinks']}, hidden dirs {sk['hidden_dirs']}, "
          f"other {sk['other']})")
    print(writers[0].line())
    print(writers[1].line())
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
