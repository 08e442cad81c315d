#!/usr/bin/python3
"""passkey_digits.py — which answer digits a byte-level model retrieves, position by position (docs/experiments.md, "Runs D, E and F").

  /usr/bin/python3 tools/experiments/passkey_digits.py CKPT [--lens 256,512] [--depths 0,0.25,0.5,0.75,1]
                                                        [--keys 48213,70592,31867,95240] [--drill-gaps 0,90,270]

For every length x depth x key: a passkey document in build/eval --passkey's format (eval/passkey.h; the filler of
tools/passkey_data.py) up to "The pass key is ", then for each answer position i the greedy next token given the
key's first i digits (teacher forcing, build/sample --greedy --max_tokens 1), and the greedy 5-token answer.
Prints, per digit position, how often it is right, and how many greedy answers are a permutation of the key's
digits in another order (a model that retrieves the set of digits but not their order). The default keys are not
drawn by the training generator's seeds (any key may be given). Needs build/sample (make).

--drill-gaps G,..: ordered copying outside the passkey format, at each distance: a copy drill (tools/passkey_data.py)
"K1 K2. " + G tokens of filler + the first digit of K1 (K2: the next key of the list), and the greedy continuation
against the rest of the copy ("8213 70592."): copies exact, and digits right in place.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from passkey_data import filler_tail, passkey_text  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def prompt(length, depth, key):
    """the document of build/eval --passkey (eval/passkey.c passkey_make) without its 5 answer digits"""
    return [256] + list(passkey_text(length, depth, key)[:-len(key)].encode())


def generate(ckpt, ids, n):
    r = subprocess.run([os.path.join(ROOT, "build", "sample"), "--ckpt", ckpt, "--prompt_ids", ",".join(map(str, ids)),
                        "--greedy", "--max_tokens", str(n), "--stop_at_eod", "0", "--ids"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"passkey_digits: build/sample failed: {(r.stderr.strip() or r.stdout.strip()).splitlines()[-1:]}")
    lines = [l for l in r.stdout.splitlines() if l.strip() and not l.startswith("sample:")]
    toks = [int(t) for t in lines[-1].replace(" ", "").split(",") if t]
    return toks[-n:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt")
    ap.add_argument("--lens", default="256,512")
    ap.add_argument("--depths", default="0,0.25,0.5,0.75,1")
    ap.add_argument("--keys", default="48213,70592,31867,95240")
    ap.add_argument("--drill-gaps", default="")
    a = ap.parse_args()
    lens = [int(x) for x in a.lens.split(",")]
    depths = [float(x) for x in a.depths.split(",")]
    keys = a.keys.split(",")
    if any(len(k) != 5 or not k.isdigit() for k in keys) or any(not 0 <= d <= 1 for d in depths) or min(lens) < 103:
        sys.exit("passkey_digits: keys are 5 digits, depths within [0, 1], lengths at least 103")
    right, n, perm, exact = [0] * 5, 0, 0, 0
    for L in lens:
        for d in depths:
            for k in keys:
                base = prompt(L, d, k)
                n += 1
                for i in range(5):
                    if generate(a.ckpt, base + list(k[:i].encode()), 1) == [ord(k[i])]:
                        right[i] += 1
                ans = "".join(chr(t) if 32 <= t < 127 else "?" for t in generate(a.ckpt, base, 5))
                exact += ans == k
                perm += ans != k and sorted(ans) == sorted(k)
                print(f"length {L} depth {d:g} key {k}: greedy answer {ans}")
    print("digits right given the previous ones (teacher-forced): "
          + ", ".join(f"digit {i + 1} {right[i]}/{n}" for i in range(5)))
    print(f"greedy answers: {exact}/{n} right, {perm}/{n} the key's digits in another order")
    for g in [int(x) for x in a.drill_gaps.split(",") if x]:
        copies = digits = ndig = 0
        for i, k in enumerate(keys):
            k2 = keys[(i + 1) % len(keys)]
            want = k[1:] + " " + k2 + "."
            got = "".join(chr(t) if 32 <= t < 127 else "?" for t in
                          generate(a.ckpt, [256] + list((f"{k} {k2}. " + filler_tail(g) + k[0]).encode()), len(want)))
            copies += got == want
            digits += sum(x == y for x, y in zip(got, want) if y.isdigit())
            ndig += sum(y.isdigit() for y in want)
            print(f"drill gap {g} key {k} {k2}: greedy copy {k[0]}{got}")
        print(f"drill copies at gap {g}: {copies}/{len(keys)} exact, digits right in place {digits}/{ndig}")


if __name__ == "__main__":
    main()
