#!/usr/bin/env python3
"""compare_dumps.py A B [--rel R | --abs E] [--prefix P]: every tensor named P/... in dump A equals B's
within R relative (max |a-b| / max |b| per tensor) or E absolute (max |a-b|); the name sets must match. Prints one line per failure and a summary
line; exit 1 on any difference."""
import sys, struct, numpy as np

def read(path):
    out = {}
    with open(path, "rb") as f:
        assert f.read(8) == b"RLMDUMP1", f"{path}: not a ringlm dump"
        while True:
            h = f.read(4)
            if not h: break
            (n,) = struct.unpack("<i", h); name = f.read(n).decode()
            dtype, ndim = struct.unpack("<ii", f.read(8))
            dims = struct.unpack(f"<{ndim}i", f.read(4 * ndim))
            cnt = int(np.prod(dims)) if ndim else 1
            dt = {0: np.float32, 1: np.int32, 2: np.uint8}[dtype]
            out[name] = np.frombuffer(f.read(cnt * np.dtype(dt).itemsize), dt).reshape(dims)
    return out

def main():
    args = sys.argv[1:]
    rel, prefix, absolute = 1e-5, "param/", False
    if "--abs" in args: i = args.index("--abs"); rel = float(args[i + 1]); absolute = True; del args[i:i + 2]
    if "--rel" in args: i = args.index("--rel"); rel = float(args[i + 1]); del args[i:i + 2]
    if "--prefix" in args: i = args.index("--prefix"); prefix = args[i + 1]; del args[i:i + 2]
    a, b = read(args[0]), read(args[1])
    na = {k for k in a if k.startswith(prefix)}; nb = {k for k in b if k.startswith(prefix)}
    bad = 0
    if na != nb or not na:
        print(f"name sets differ: only in A {sorted(na - nb)[:5]}, only in B {sorted(nb - na)[:5]}"); bad += 1
    worst, kind = 0.0, "abs" if absolute else "rel"
    for k in sorted(na & nb):
        x, y = a[k].astype(np.float64), b[k].astype(np.float64)
        if x.shape != y.shape: print(f"{k}: shape {x.shape} vs {y.shape}"); bad += 1; continue
        e = np.abs(x - y).max() / (1.0 if absolute else max(np.abs(y).max(), 1e-30))
        worst = max(worst, e)
        if not e <= rel: print(f"{k}: {kind} diff {e:.3e} > {rel}"); bad += 1
    print(f"{len(na & nb)} tensors compared, worst {kind} diff {worst:.3e}, {bad} over {rel}")
    sys.exit(1 if bad else 0)

if __name__ == "__main__":
    main()
