#!/usr/bin/env python3
"""passkey_data.py — a shard of synthetic passkey-retrieval documents in the format build/eval --passkey scores
(eval/passkey.h, byte tokenizer), as a documented synthetic fraction of training data.

  tools/passkey_data.py --out FILE --tokens N [--min-len A] [--max-len B] [--seed S] [--sep 256]
                        [--drill-frac F [--drill-copies C] [--drill-gap G] [--drill-prefix TEXT]]

Every document: [sep] filler_a needle filler_b question, where
  needle   = "The pass key is NNNNN. Remember it. NNNNN is the pass key. "
  question = "What is the pass key? The pass key is NNNNN"
the fillers are the end / the start of the repeated neutral text of eval/passkey.c, the document length is uniform in
[A, B] and the needle's depth uniform in [0, 1]; keys are uniform 10000..99999 from Python's random with seed S (the
evaluation draws its keys from another generator, so no evaluated document is a training document).

--drill-frac F makes a fraction F of the documents copy drills instead: [sep], then a list of 2..5 random 5-digit
numbers (separated by spaces, ended by ". ") written 2..C times (default 3), with neutral filler between the copies
(length uniform in 0..G tokens, the whole document at most B tokens; --drill-gap 0: copies back to back; default:
as far as B allows), e.g. "48213 90311. The sky is blue. Here we go. 48213 90311. "; --drill-prefix TEXT puts TEXT before
every copy (e.g. "The pass key is ", so that the first number of a later copy is found by matching the text before
it, as the question's answer is).
Every copy after the first is predictable only by finding the earlier copy across the filler, so these documents
reward the attention pattern passkey retrieval needs (find the earlier occurrence of the current token, predict
what followed it) far more densely than passkey documents do (10 of ~300 tokens).

Writes documents until N tokens (llm.c uint16 shard: header of 256 int32 — magic 20240520, version 1, count — then the tokens)."""
import argparse
import random
import struct

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "


def filler_tail(n):
    """the last n characters of the endless repetition of FILLER (it ends with a whole sentence)"""
    fl = len(FILLER)
    start = (fl - n % fl) % fl
    return "".join(FILLER[(start + i) % fl] for i in range(n))


def passkey_text(length, depth, key):
    """the text of a length-token document after its separator, the needle at depth in [0, 1] (eval/passkey.c)"""
    needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
    question = f"What is the pass key? The pass key is {key}"
    free = length - 1 - len(needle) - len(question)
    a = int(depth * free + 0.5)
    return filler_tail(a) + needle + filler_tail(free - a) + question


def document(rng, length, sep):
    key = str(rng.randrange(10000, 100000))
    return [sep] + list(passkey_text(length, rng.random(), key).encode())


def drill(rng, max_len, max_copies, max_gap, prefix, sep):
    keys = prefix + " ".join(str(rng.randrange(10000, 100000)) for _ in range(rng.randrange(2, 6))) + ". "
    copies = rng.randrange(2, max_copies + 1)
    room = max(0, (max_len - 1 - copies * len(keys)) // (copies - 1))
    if max_gap >= 0:
        room = min(room, max_gap)
    text = keys
    for _ in range(copies - 1):
        text += filler_tail(rng.randrange(0, room + 1)) + keys
    return [sep] + list(text.encode())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--min-len", type=int, default=128)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sep", type=int, default=256)
    ap.add_argument("--drill-frac", type=float, default=0.0)
    ap.add_argument("--drill-copies", type=int, default=3)
    ap.add_argument("--drill-gap", type=int, default=-1)
    ap.add_argument("--drill-prefix", default="")
    a = ap.parse_args()
    if not 0 <= a.drill_frac <= 1:
        ap.error("--drill-frac must be within [0, 1]")
    if a.drill_copies < 2:
        ap.error("--drill-copies must be at least 2")
    if a.min_len < 103 or a.max_len < a.min_len:
        ap.error("lengths must satisfy 103 <= min-len <= max-len (the needle and the question take 102 tokens)")
    rng = random.Random(a.seed)
    toks, ndoc, ndrill = [], 0, 0
    while len(toks) < a.tokens:
        if a.drill_frac > 0 and rng.random() < a.drill_frac:
            toks += drill(rng, a.max_len, a.drill_copies, a.drill_gap, a.drill_prefix, a.sep)
            ndrill += 1
        else:
            toks += document(rng, rng.randrange(a.min_len, a.max_len + 1), a.sep)
        ndoc += 1
    with open(a.out, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
        f.write(struct.pack(f"<{len(toks)}H", *toks))
    drills = f", {ndrill} of them copy drills" if ndrill else ""
    print(f"passkey_data: {a.out}: {ndoc} documents{drills}, {len(toks)} tokens (lengths {a.min_len}..{a.max_len}, seed {a.seed})")


if __name__ == "__main__":
    main()
