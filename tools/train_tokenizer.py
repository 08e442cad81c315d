#!/usr/bin/python3
"""train_tokenizer — a byte-level BPE tokenizer (GPT-2 style, Hugging Face `tokenizers`) trained on your own text, for
tools/prepare_hf --tokenizer and for the text of build/sample and training's samples.

  tools/train_tokenizer --out DIR --vocab-size N [--special TOKEN ...] [--min-frequency F] [--doc-per file|dir]
                        [--text-field FIELD] [--files-from LIST] [--force] PATH...

The documents are tools/prepare_hf's (and build/prepare's): the same walk, skips (binary, empty, non-UTF-8 files,
symlinks, hidden directories), duplicates and inputs (text files and trees; with --text-field, JSON Lines, Parquet and
saved datasets, a record's FIELD a document; --files-from LIST). Train on the corpus you will prepare, so that its
words get tokens of their own.

The tokenizer: the 256 bytes as its first tokens (every text encodes, nothing is unknown), then the special tokens
(default <|endoftext|>, the document separator tools/prepare_hf writes before every document), then merges up to
--vocab-size tokens in all (fewer when the corpus has no more pairs to merge: the summary says so). Pre-tokenizer,
decoder and post-processor ByteLevel (no prefix space), as GPT-2's. DIR gets tokenizer.json and tokenizer_config.json
(eos_token: the first special token; AutoTokenizer loads the directory); both are written to temporary files, read back
(the tokenizer must encode and decode the first document back to its text), then renamed into place. An existing
tokenizer.json is an error unless --force. Errors: one line on stderr, exit status 1.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_common as H  # noqa: E402
import prepare_hf as P  # noqa: E402

MIN_VOCAB = 256


def documents(c):
    """The corpus's documents' texts, one at a time (a long one in blocks of about 1 MiB)."""
    for d in c.docs:
        if d.kind == "text":
            yield from P.text_blocks(d.files)
        else:
            for _, text in c.records(d):
                for i in range(0, len(text), P.BLOCK):
                    yield text[i:i + P.BLOCK]


def first_text(c):
    for d in c.docs:
        if d.kind == "text":
            return "".join(P.text_blocks(d.files))
        for _, text in c.records(d):
            return text
    return ""


def main():
    ap = H.ArgParser(prog="tools/train_tokenizer", description=__doc__.split("\n\n")[0],
                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("paths", nargs="*", metavar="PATH", help="text files and directories")
    ap.add_argument("--out", help="output directory (created; required)")
    ap.add_argument("--vocab-size", help=f"tokens in all, bytes and special tokens included (at least {MIN_VOCAB} + the "
                    "special tokens; required)")
    ap.add_argument("--special", action="append", metavar="TOKEN", help="a special token (repeatable; default "
                    "<|endoftext|>); the first is the EOS token and tools/prepare_hf's separator")
    ap.add_argument("--min-frequency", default="2", help="merge only pairs seen at least this often (default 2)")
    ap.add_argument("--doc-per", default="file", help="file (default) or dir, as tools/prepare_hf (it decides only "
                    "where the documents' texts are cut)")
    ap.add_argument("--text-field", metavar="FIELD", help="read JSON Lines, Parquet and saved datasets (see "
                    "tools/prepare_hf --help)")
    ap.add_argument("--files-from", metavar="LIST", action="append", help="also take the paths listed in LIST")
    ap.add_argument("--keep-duplicates", action="store_true", help="keep documents of the same bytes as an earlier one")
    ap.add_argument("--force", action="store_true", help="replace an existing DIR/tokenizer.json")
    a = ap.parse_args()
    if not a.out:
        raise H.Fail("--out DIR is required (see --help)")
    specials = a.special or ["<|endoftext|>"]
    if any(not s for s in specials) or len(set(specials)) != len(specials):
        raise H.Fail(f"--special: each special token must be a non-empty text, given once (got {specials})")
    lo = MIN_VOCAB + len(specials)
    if not (a.vocab_size or "").isdigit() or not lo <= int(a.vocab_size) <= 2**31 - 1:
        raise H.Fail(f"--vocab-size expects an integer in [{lo}, 2147483647] (the 256 bytes, {len(specials)} special "
                     f"token{'s' if len(specials) > 1 else ''} and the merges), got '{a.vocab_size}'")
    vocab_size = int(a.vocab_size)
    if not a.min_frequency.isdigit():
        raise H.Fail(f"--min-frequency expects a whole number, got '{a.min_frequency}'")
    if a.doc_per not in ("file", "dir"):
        raise H.Fail(f"--doc-per expects 'file' or 'dir', got '{a.doc_per}'")
    if a.text_field == "":
        raise H.Fail("--text-field expects the name of the records' text field (e.g. text), got ''")
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    except ImportError:
        raise H.Fail("the Python package 'tokenizers' is missing: run 'bash tools/setup/hf_env.sh' (a virtual "
                     "environment build/hfenv; the tools use it by themselves)")
    tj = os.path.join(a.out, "tokenizer.json")
    if os.path.lexists(a.out) and not os.path.isdir(a.out):
        raise H.Fail(f"--out '{a.out}' exists and is not a directory")
    if os.path.lexists(tj) and not a.force:
        raise H.Fail(f"'{tj}' already exists (use --force to replace it)")

    inputs = [(p, "") for p in a.paths]
    for lst in a.files_from or []:
        inputs += P.read_list(lst)
    if not inputs:
        raise H.Fail("the --files-from list names no path" if a.files_from else "no input PATH given (see --help)")
    c = P.Corpus(a.text_field)
    c.collect(inputs, a.doc_per == "dir")
    c.skip_duplicates(a.keep_duplicates)
    if not c.docs:
        raise H.Fail("no documents found in the given paths (empty, binary and non-UTF-8 files, symlinks and hidden "
                     "directories are skipped)")

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=int(a.min_frequency), special_tokens=specials,
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(documents(c), trainer=trainer)
    got = tok.get_vocab_size(with_added_tokens=True)

    keys = [H.remove_on_failure(a.out)] if H.make_dirs(a.out, "output directory") else []   # (made here: removed on failure)
    text = tok.to_str(pretty=True).encode("utf-8")
    cfg = json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": specials[0], "bos_token": None,
                      "unk_token": None, "model_input_names": ["input_ids", "attention_mask"],
                      "clean_up_tokenization_spaces": False}, indent=2).encode("utf-8") + b"\n"
    tmp = {}
    for name, data in (("tokenizer.json", text), ("tokenizer_config.json", cfg)):
        tmp[name] = os.path.join(a.out, f".{name}.{os.getpid()}.tmp")
        keys.append(H.remove_on_failure(tmp[name]))
        P.write_file(tmp[name], data)
    back = Tokenizer.from_file(tmp["tokenizer.json"])              # read back: it loads, and a document round-trips
    sample = first_text(c)[:4096]
    ids = back.encode(sample, add_special_tokens=False).ids
    if back.decode(ids, skip_special_tokens=False) != sample or back.get_vocab_size(with_added_tokens=True) != got:
        raise H.Fail(f"'{tmp['tokenizer.json']}' does not read back as the tokenizer trained (a file system error?)")
    try:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            os.replace(tmp[name], os.path.join(a.out, name))
    except OSError as e:
        raise H.Fail(H.os_error(e, f"cannot rename '{tmp[name]}' to '{os.path.join(a.out, name)}'"))
    for k in keys:
        H.forget(k)
    H.fsync_path(a.out, directory=True)
    ids = {s: tok.token_to_id(s) for s in specials}
    n_docs = sum(1 for d in c.docs if d.kind == "text") + sum(1 for d in c.docs if d.kind != "text" for _ in c.records(d))
    print(f"train_tokenizer: {n_docs} documents from {len(c.files())} files; vocabulary {got}"
          + (f" (asked {vocab_size}: the corpus has no more pairs seen {a.min_frequency} times to merge)" if got < vocab_size else "")
          + f": 256 bytes, special {', '.join(f'{s!r} id {i}' for s, i in ids.items())}, {got - 256 - len(specials)} merges")
    print(f"wrote {tj} and {os.path.join(a.out, 'tokenizer_config.json')}; prepare data with: tools/prepare_hf --tokenizer "
          f"{a.out} --out DIR PATH...")
    return 0


if __name__ == "__main__":
    H.main_guard(main, "train_tokenizer")
