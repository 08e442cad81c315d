#!/usr/bin/python3
"""corpora_hf.py — the tokenizers library (build/hfenv) as the reference for tests/test_corpora.sh's checks of
ringlm's byte-level BPE decoding and of tools/train_tokenizer.

  corpora_hf.py tokinfo TOKENIZER VOCAB           the trained tokenizer: byte-level BPE, the 256 byte tokens, VOCAB
                                                  tokens, <|endoftext|> id 0 special, tokenizer_config's eos
  corpora_hf.py variant TOKENIZER OUT             OUT/tokenizer.json: TOKENIZER plus added tokens (a special one, and
                                                  ones holding characters outside the byte table and spaces)
  corpora_hf.py ids TOKENIZER OUT SEED TEXTFILE   OUT: sequences of ids, one a line: every id alone, random sequences
                                                  over the whole vocabulary (added tokens and an id past it
                                                  included), and the encodings of TEXTFILE's lines (multi-byte
                                                  characters split over tokens)
  corpora_hf.py detok TOKENIZER IDS HEX TEXTFILE  HEX (build/tests/tool_detok --lines on IDS): each line's bytes,
                                                  read as UTF-8 with invalid sequences replaced, equal the library's
                                                  decode(ids, skip_special_tokens=False); the encodings of TEXTFILE's
                                                  lines decode to exactly their UTF-8 bytes
  corpora_hf.py sample TOKENIZER IDSFILE TEXTFILE build/sample's text output (TEXTFILE, its statistics line dropped)
                                                  is the library's decode of build/sample --ids' output (IDSFILE)
  corpora_hf.py trainsample TOKENIZER OUT STEP IDSFILE   training's sample line of STEP in OUT (its text escaped
                                                  on one line) is the decode of IDSFILE (build/sample --ids)
  corpora_hf.py encode TOKENIZER TEXT             the ids of TEXT (no special tokens), comma-separated
Prints "ok   ..." / "FAIL ..." per check, then "N passed, N failed"; exit 1 on a failure.
"""
import json
import os
import random
import sys

from tokenizers import Tokenizer

passed = failed = 0


def check(name, good, detail=""):
    global passed, failed
    passed += bool(good)
    failed += not good
    print(f"{'ok  ' if good else 'FAIL'} {name}" + (f": {detail}" if detail and not good else ""), flush=True)


def tj(spec):
    return spec if spec.endswith(".json") else os.path.join(spec, "tokenizer.json")


def cmd_tokinfo(spec, vocab):
    t = Tokenizer.from_file(tj(spec))
    j = json.load(open(tj(spec)))
    v = t.get_vocab(with_added_tokens=True)
    from tokenizers import pre_tokenizers
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    cfg = json.load(open(os.path.join(spec, "tokenizer_config.json")))
    special = [a for a in j["added_tokens"] if a["special"]]
    good = (j["model"]["type"] == "BPE" and j["decoder"]["type"] == "ByteLevel" and j["pre_tokenizer"]["type"] == "ByteLevel"
            and t.get_vocab_size(with_added_tokens=True) == int(vocab) and alphabet <= set(v)
            and special == [dict(special[0], content="<|endoftext|>", id=0)] and cfg["eos_token"] == "<|endoftext|>")
    check(f"train_tokenizer: byte-level BPE of {len(v)} tokens (asked {vocab}), all 256 byte tokens, <|endoftext|> id 0 "
          "special, tokenizer_config.json's eos_token", good,
          f"model {j['model']['type']}, decoder {j['decoder']}, vocab {len(v)}, bytes {len(alphabet & set(v))}, special {special}")


def cmd_variant(spec, out):
    t = Tokenizer.from_file(tj(spec))
    t.add_special_tokens(["<|sep|>"])
    t.add_tokens([" hello world", "\u00fcn\u00ef", "\u65e5\u672c", "Ġspaced"])
    os.makedirs(out, exist_ok=True)
    t.save(os.path.join(out, "tokenizer.json"))
    print(f"# variant: {t.get_vocab_size(with_added_tokens=True)} tokens with the added ones")


def cmd_ids(spec, out, seed, textfile):
    t = Tokenizer.from_file(tj(spec))
    n = t.get_vocab_size(with_added_tokens=True)
    r = random.Random(int(seed))
    seqs = [[i] for i in range(n)]
    seqs += [[r.randrange(n) for _ in range(r.randrange(1, 40))] for _ in range(300)]
    seqs.append([1, n + 5, 2])                                           # an id no token has
    texts = [l.rstrip("\n") for l in open(textfile, encoding="utf-8")]
    seqs += [t.encode(x, add_special_tokens=False).ids for x in texts]
    with open(out, "w") as f:
        for s in seqs:
            f.write(",".join(map(str, s)) + "\n")


def cmd_detok(spec, idsfile, hexfile, textfile):
    t = Tokenizer.from_file(tj(spec))
    seqs = [[int(x) for x in l.split(",") if x] for l in open(idsfile).read().split("\n")[:-1]]
    got = [bytes.fromhex(l) for l in open(hexfile).read().split("\n")[:-1]]
    texts = [l.rstrip("\n") for l in open(textfile, encoding="utf-8")]
    if len(got) != len(seqs):
        check("tool_detok: a line per sequence", False, f"{len(got)} lines for {len(seqs)} sequences")
        return
    bad = [(s, g) for s, g in zip(seqs, got) if g.decode("utf-8", "replace") != t.decode(s, skip_special_tokens=False)]
    n_single = t.get_vocab_size(with_added_tokens=True)
    lossy = sum(1 for g in got if "\ufffd" in g.decode("utf-8", "replace"))
    check(f"data/tokenizer.c decodes {len(seqs)} id sequences as tokenizers' decode does ({n_single} single ids, 300 random "
          f"sequences with special and added tokens, an unknown id, {len(texts)} encoded texts; {lossy} hold bytes that are "
          "not UTF-8 alone, compared after the same replacement)", not bad,
          "; ".join(f"{s[:8]}: {g[:24]!r} vs {t.decode(s, skip_special_tokens=False)[:24]!r}" for s, g in bad[:3]))
    enc = got[len(got) - len(texts):]
    split = sum(1 for x in texts for tok in t.encode(x, add_special_tokens=False).ids
                if t.decode([tok]).count("\ufffd"))
    check(f"... the encodings of {len(texts)} texts (non-ASCII, {split} tokens holding part of a character) decode to exactly "
          "their UTF-8 bytes", enc == [x.encode("utf-8") for x in texts] and split > 0,
          next((f"{g!r} vs {x!r}" for g, x in zip(enc, texts) if g != x.encode("utf-8")), f"split tokens {split}"))


def strip_stats(data):
    return data.rsplit(b"\nsample: ", 1)[0]


def cmd_sample(spec, idsfile, textfile):
    t = Tokenizer.from_file(tj(spec))
    ids = [int(x) for x in open(idsfile).read().split("\n")[0].split(",")]
    text = strip_stats(open(textfile, "rb").read())
    want = t.decode(ids, skip_special_tokens=False)
    check(f"build/sample's text = tokenizers' decode of its {len(ids)} ids", text.decode("utf-8", "replace") == want,
          f"{text[:60]!r} vs {want[:60]!r}")


def cmd_trainsample(spec, out, step, idsfile):
    t = Tokenizer.from_file(tj(spec))
    ids = [int(x) for x in open(idsfile).read().split("\n")[0].split(",")]
    want = t.decode(ids, skip_special_tokens=False)
    lines = [l for l in open(out, encoding="utf-8", errors="replace") if l.startswith(f"sample (step {step},")]
    if len(lines) != 1:
        check(f"training printed one sample at step {step}", False, f"{len(lines)} lines")
        return
    body = lines[0].split(": ", 1)[1].rstrip("\n")
    esc = "".join("\\n" if c == "\n" else "\\\\" if c == "\\" else f"\\x{ord(c):02x}" if ord(c) < 32 or ord(c) == 127 else c
                  for c in want)
    check(f"training's step-{step} sample is the text of build/sample's ids on that checkpoint, on one line: {body[:50]}...",
          body == f'"{esc}"', f"{body[:60]!r} vs {esc[:60]!r}")


def main(argv):
    cmds = {"tokinfo": cmd_tokinfo, "variant": cmd_variant, "ids": cmd_ids, "detok": cmd_detok, "sample": cmd_sample,
            "trainsample": cmd_trainsample}
    if argv[0] == "encode":
        print(",".join(map(str, Tokenizer.from_file(tj(argv[1])).encode(argv[2], add_special_tokens=False).ids)))
        return 0
    cmds[argv[0]](*argv[1:])
    if argv[0] in ("variant", "ids"):
        return 0
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


sys.exit(main(sys.argv[1:]))
