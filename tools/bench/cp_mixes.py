#!/usr/bin/python3
"""cp_mixes.py — synthetic document-length mixes for the context-parallel balance measurements (docs/cp_balance.md).

  tools/bench/cp_mixes.py --out DIR --seq_len S [--windows N] [--seed K] MIX...

Writes DIR/MIX/train_000000.bin (llm.c uint16 shard, byte tokenizer: each document is the end-of-document token 256
followed by random bytes) and DIR/MIX/meta.json, N windows of S tokens (+ 1) per mix. Lengths count the eod token.
  short       every document S / 32 tokens (1K in 32K windows; boundaries on chunk edges)
  shortvar    lengths uniform in [S / 64, 3 S / 64] (0.5K..1.5K in 32K: all short, boundaries anywhere)
  long_short  one document of 3 S / 4 then 8 of S / 32, per window (24K + 8 x 1K in 32K): stream windows start at the
              long one
  powerlaw    Pareto lengths (alpha 1.1) from S / 256 up to S, cut at S
  midchunk    lengths uniform in [S / 16, 3 S / 16] (2K..6K in 32K): boundaries fall inside the zigzag chunks of cp 8
"""
import argparse, json, os, random, sys

import numpy as np


def lengths(mix, S, total, rng):
    out, n = [], 0
    while n < total:
        if mix == "short":
            ls = [S // 32]
        elif mix == "shortvar":
            ls = [rng.randint(S // 64, 3 * S // 64)]
        elif mix == "long_short":
            ls = [3 * S // 4] + [S // 32] * 8
        elif mix == "powerlaw":
            lo = max(2, S // 256)
            ls = [min(S, int(lo * (1 - rng.random()) ** (-1 / 1.1)))]
        elif mix == "midchunk":
            ls = [rng.randint(S // 16, 3 * S // 16)]
        else:
            sys.exit(f"cp_mixes.py: unknown mix '{mix}' (short, shortvar, long_short, powerlaw, midchunk)")
        out += ls
        n += sum(ls)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seq_len", type=int, required=True)
    ap.add_argument("--windows", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("mixes", nargs="+")
    a = ap.parse_args()
    for mix in a.mixes:
        rng = random.Random(f"{a.seed}:{mix}")
        total = a.windows * a.seq_len + 1
        toks = []
        for L in lengths(mix, a.seq_len, total, rng):
            toks.append(256)
            toks.extend(rng.randrange(256) for _ in range(L - 1))
        toks = toks[:total]
        d = os.path.join(a.out, mix)
        os.makedirs(d, exist_ok=True)
        h = np.zeros(256, np.int32)
        h[0], h[1], h[2] = 20240520, 1, len(toks)
        with open(os.path.join(d, "train_000000.bin"), "wb") as f:
            f.write(h.tobytes())
            f.write(np.array(toks, np.uint16).tobytes())
        ndocs = sum(1 for t in toks if t == 256)
        meta = {"format": "ringlm-data-1", "tokenizer": "bytes", "tokenizer_sha256": None, "vocab_size": 257,
                "eod_id": 256, "bos_id": None, "dtype": "uint16", "documents": {"train": ndocs, "val": 0},
                "tokens": {"train": len(toks), "val": 0}, "shards": {"train": 1, "val": 0},
                "command": " ".join(sys.argv)}
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f)
        print(f"{mix}: {len(toks)} tokens, {ndocs} documents -> {d}")


if __name__ == "__main__":
    main()
