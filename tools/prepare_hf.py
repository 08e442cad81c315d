#!/usr/bin/python3
"""prepare_hf — text files and directory trees → llm.c token shards with a Hugging Face tokenizer (tokenizer.json),
for build/train on a real tokenizer's vocabulary (e.g. that of a model brought in with tools/hf_import).

  tools/prepare_hf --tokenizer TOKENIZER --out DIR [--val-frac F] [--doc-per file|dir] [--seed S]
                   [--shard-tokens N] [--sep TOKEN|ID] [--force] PATH...

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
"shards": {"train": N, "val": N}; "command": this command line, shell-quoted). It is written last (a temporary
file in DIR, renamed), so it exists only beside a complete set of shards: build/train and build/eval take
vocab_size and eod from it (and refuse values given to them that contradict it), tools/hf_export finds the
tokenizer through it. Existing shards or DIR/meta.json are an error unless --force (which deletes them first).
Prints the totals, one line per split, the tokenizer, the separator and what meta.json records. Errors: one line
on stderr, exit status 1, and nothing of this run is left (no shard, no meta.json).
"""
import argparse
import fnmatch
import hashlib
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
MAGIC16, MAGIC32, VERSION, HEADER_INTS = 20240520, 20240521, 1, 256
created = []


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


class Corpus:
    def __init__(self):
        self.docs = []            # [key (bytes), [file paths]]
        self.skip = dict(binary=0, empty=0, symlinks=0, hidden_dirs=0, other=0, not_utf8=0)

    def text_of(self, path):
        """The file's text, or None (counted as skipped) when it is empty, binary or not UTF-8."""
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise H.Fail(f"cannot read '{os.fsdecode(path)}': {e.strerror}")
        if not data:
            self.skip["empty"] += 1
            return None
        if b"\0" in data[:SNIFF]:
            self.skip["binary"] += 1
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            self.skip["not_utf8"] += 1
            return None

    def walk(self, d, key, per_file, into):
        try:
            names = sorted(os.listdir(d))            # bytes paths: sorted bytewise, as build/prepare
        except OSError as e:
            raise H.Fail(f"cannot open directory '{os.fsdecode(d)}': {e.strerror}")
        for n in names:
            p, k = os.path.join(d, n), key + b"/" + n
            try:
                st = os.lstat(p)
            except OSError as e:
                raise H.Fail(f"cannot read '{os.fsdecode(p)}': {e.strerror}")
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
                t = self.text_of(p)
                if t is not None:
                    if per_file:
                        self.docs.append([k, [t]])
                    else:
                        into.append(t)

    def collect(self, paths, per_dir):
        for p in paths:
            bp = os.fsencode(p)
            try:
                st = os.stat(bp)
            except OSError as e:
                raise H.Fail(f"cannot read '{p}': {e.strerror}")
            real = os.path.realpath(bp)
            key = os.path.basename(real) or real
            if stat.S_ISREG(st.st_mode):
                t = self.text_of(bp)
                if t is not None:
                    self.docs.append([key, [t]])
            elif stat.S_ISDIR(st.st_mode):
                texts = []
                self.walk(bp, key, not per_dir, texts)
                if per_dir and texts:
                    self.docs.append([key, texts])
            else:
                raise H.Fail(f"'{p}' is not a regular file or a directory")


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


# ----------------------------------------------------------------------------------------------- shards
class Writer:
    def __init__(self, out, split, max_tokens, wide):
        self.out, self.split, self.max, self.wide = out, split, max_tokens, wide
        self.dtype = np.uint32 if wide else np.uint16
        self.f, self.n_shard, self.n_shards, self.n_tokens, self.n_docs, self.paths = None, 0, 0, 0, 0, []

    def _close(self):
        if self.f:
            self.f.seek(0)
            self.f.write(struct.pack("<256i", MAGIC32 if self.wide else MAGIC16, VERSION, self.n_shard, *[0] * 253))
            self.f.close()
            self.f = None

    def _open(self):
        path = os.path.join(self.out, f"{self.split}_{self.n_shards:06d}.bin")
        try:
            self.f = open(path, "wb")
        except OSError as e:
            raise H.Fail(f"cannot create '{path}': {e.strerror}")
        created.append(path)
        self.f.write(b"\0" * (4 * HEADER_INTS))
        self.paths.append(path)
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
            self.f.write(a[i:i + n].astype("<u4" if self.wide else "<u2").tobytes())
            self.n_shard += n
            self.n_tokens += n
            i += n

    def finish(self):
        self._close()

    def line(self):
        s = (f"{self.split}: {self.n_docs} document{'' if self.n_docs == 1 else 's'}, {self.n_tokens} tokens, "
             f"{self.n_shards} shard{'' if self.n_shards == 1 else 's'}")
        if not self.n_shards:
            return s + " (none written)"
        return s + f" ({os.path.join(self.out, self.split + '_*.bin')})\n" + "".join(f"  {p}\n" for p in self.paths).rstrip("\n")


def write_meta(out, tokenizer, sha256, vocab_size, eod_id, bos_id, wide, tr, va):
    """DIR/meta.json as build/prepare writes it (data/prepare.c write_meta: same keys, order and layout), written
    to DIR/.meta.json.tmp and renamed, so it only ever describes a complete set of shards."""
    def j(v):   # a JSON value; non-ASCII text as UTF-8, as build/prepare writes it
        return json.dumps(v, ensure_ascii=False)

    def pair(a, b):
        return f'{{"train": {a}, "val": {b}}}'
    fields = [("format", j("ringlm-data-1")), ("tokenizer", j(tokenizer)), ("tokenizer_sha256", j(sha256)),
              ("vocab_size", j(vocab_size)), ("eod_id", j(eod_id)), ("bos_id", j(bos_id)),
              ("dtype", j("uint32" if wide else "uint16")), ("documents", pair(tr.n_docs, va.n_docs)),
              ("tokens", pair(tr.n_tokens, va.n_tokens)), ("shards", pair(tr.n_shards, va.n_shards)),
              ("command", j(shlex.join(sys.argv)))]
    text = "{\n" + ",\n".join(f'  "{k}": {v}' for k, v in fields) + "\n}\n"
    path, tmp = os.path.join(out, "meta.json"), os.path.join(out, ".meta.json.tmp")
    try:
        f = open(tmp, "wb")
    except OSError as e:
        raise H.Fail(f"cannot create '{tmp}': {e.strerror}")
    created.append(tmp)
    try:
        with f:
            f.write(text.encode("utf-8", "surrogateescape"))   # a path or argument that is not UTF-8: its bytes
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise H.Fail(f"cannot write '{tmp}': {e.strerror}")
    try:
        os.replace(tmp, path)
    except OSError as e:
        raise H.Fail(f"cannot rename '{tmp}' to '{path}': {e.strerror}")
    created.append(path)                         # an error after this point (printing) still removes it
    return path


def parse_size(s, what):
    try:
        v = int(s)
    except ValueError:
        v = 0
    if not 1 <= v <= 2**31 - 1:
        raise H.Fail(f"{what} expects an integer in [1, 2147483647], got '{s}'")
    return v


def main():
    ap = argparse.ArgumentParser(prog="tools/prepare_hf", description=__doc__.split("\n\n")[0],
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

    info = H.tokenizer_info(a.tokenizer)
    sep_tok, sep_id, why = H.separator(info, a.sep)
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise H.Fail("the Python package 'tokenizers' is missing: run 'bash tools/hf_env.sh' (a virtual environment "
                     "build/hfenv with transformers 4.46.3, tokenizers and safetensors; the tools use it by themselves)")
    # the text is encoded by a copy without the special added tokens (and without the post-processor): a special
    # token's text inside a document ("<|endoftext|>", "<s>") is text, never a forged separator
    try:
        with open(info["json"], "rb") as f:
            raw = f.read()                          # hashed and encoded with: meta.json's SHA-256 is of these bytes
    except OSError as e:
        raise H.Fail(f"cannot read '{info['json']}': {e.strerror}")
    sha256 = hashlib.sha256(raw).hexdigest()
    try:
        j = json.loads(raw.decode("utf-8"))
        j["added_tokens"] = [t for t in j.get("added_tokens") or [] if not t.get("special")]
        j["post_processor"] = None
        tok = Tokenizer.from_str(json.dumps(j))
    except Exception as e:  # the library raises plain Exceptions for malformed files
        raise H.Fail(f"'{info['json']}' cannot be loaded by tokenizers: {str(e).splitlines()[0][:120]}")
    vocab_size = max(info["vocab_size"], tok.get_vocab_size(with_added_tokens=True))
    wide = vocab_size > 65536

    c = Corpus()
    c.collect(a.paths, a.doc_per == "dir")
    if not c.docs:
        raise H.Fail("no documents found in the given paths (empty, binary and non-UTF-8 files, symlinks and hidden "
                     "directories are skipped)")
    val = assign(c.docs, frac, seed)
    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as e:
        raise H.Fail(f"cannot create output directory '{a.out}': {e.strerror}")
    if not os.access(a.out, os.W_OK | os.X_OK):
        raise H.Fail(f"output directory '{a.out}' is not writable")
    old = sorted(n for n in os.listdir(a.out) if fnmatch.fnmatch(n, "train_*.bin") or fnmatch.fnmatch(n, "val_*.bin"))
    if os.path.lexists(os.path.join(a.out, "meta.json")):
        old.append("meta.json")                                 # last: an error names a shard first
    for n in old:
        p = os.path.join(a.out, n)
        if not a.force:
            raise H.Fail(f"'{p}' already exists (use --force to replace the shards in '{a.out}')")
        try:
            os.remove(p)
        except OSError as e:
            raise H.Fail(f"cannot remove '{p}': {e.strerror}")

    writers = {0: Writer(a.out, "train", max_tokens, wide), 1: Writer(a.out, "val", max_tokens, wide)}
    n_files = sum(len(t) for _, t in c.docs)
    for split in (0, 1):
        w = writers[split]
        idx = [i for i in range(len(c.docs)) if val[i] == split]
        for b in range(0, len(idx), 64):                       # encode_batch runs the tokenizer's threads
            batch = [c.docs[i] for i in idx[b:b + 64]]
            for (key, texts), enc in zip(batch, tok.encode_batch(["".join(t) for _, t in batch], add_special_tokens=False)):
                w.put([sep_id])
                w.put(enc.ids)
                w.n_docs += 1
        w.finish()
    tok_path = os.path.abspath(info["json"])
    meta = write_meta(a.out, tok_path, sha256, vocab_size, sep_id, info["bos"][1] if info["bos"] else None, wide,
                      writers[0], writers[1])
    sk = c.skip
    print(f"prepare_hf: {len(c.docs)} documents from {n_files} files (skipped: binary {sk['binary']}, empty "
          f"{sk['empty']}, not UTF-8 {sk['not_utf8']}, symlinks {sk['symlinks']}, hidden dirs {sk['hidden_dirs']}, "
          f"other {sk['other']})")
    print(writers[0].line())
    print(writers[1].line())
    print(f"tokenizer: {tok_path} (sha256 {sha256[:12]}...), vocabulary {vocab_size}; "
          f"{'uint32 shards (magic 20240521)' if wide else 'uint16 shards'}")
    print(f"separator: {sep_tok!r} id {sep_id} before every document ({why})")
    print(f"meta: {meta} records vocab_size {vocab_size} and eod {sep_id}; build/train and build/eval take them from "
          "it (a vocab_size or eod given to them that contradicts it is refused)")
    return 0


def guarded():
    try:
        return main()
    except BaseException:
        for p in created:
            try:
                os.remove(p)
            except OSError:
                pass
        raise


if __name__ == "__main__":
    H.main_guard(guarded)
