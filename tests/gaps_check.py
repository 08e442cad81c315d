#!/usr/bin/env python3
"""gaps_check.py — the independent references of tests/test_mutants_gaps.sh (h5py, numpy, torch float64 through
tests/ref_model.py). Each subcommand prints one summary line (or why it failed) and exits 0 on success, 1 on failure.

  val CKPT SHARDS SEQ_LEN NSEQ METRICS...   the mean NLL of the first NSEQ validation windows (tokens
                                            [g T, g T + T + 1) of the shard stream, in file order) under CKPT's
                                            weights, in float64; every METRICS file's val_loss within 1e-5 relative
  moments CKPT DUMP                         after one step: /model equals the dump's param/ bit for bit, and
                                            /optimizer/m = (1 - b1) s g, /optimizer/v = (1 - b2) (s g)^2 with g the
                                            dump's grad/ (the step's reduced gradient) and s the clip factor
                                            min(1, grad_clip / (|g| + 1e-6)), within 1e-5 of each tensor's max
  same_model A B                            /model of two checkpoints bit-identical
  shuffle CKPT SHARDS SEQ_LEN BATCH SEED METRICS
                                            a run at lr 0 from CKPT's weights: the loss of step k equals the mean of
                                            the float64 per-sequence losses of the sequences perm(SEED, epoch, i) of
                                            its windows g = (k - 1) BATCH .. k BATCH - 1 (epoch = g / n, i = g % n),
                                            the permutation written here from data/shards.c's description (Feistel
                                            network on 2k bits keyed by mix64(seed ^ mix64(epoch ^ 0x5DEECE66D)),
                                            6 rounds, cycle walking), within 1e-5 relative
  passkey_model SRC DST SEED MODE           DST = SRC's checkpoint made a bigram model (every layer's output zero, so
                                            logits depend on the current token only) that answers build/eval
                                            --passkey --seed SEED's two trials of one cell: MODE "4of5" gets trial 0's
                                            key right and trial 1's last 4 digits (not its first); "last" also misses
                                            trial 0's last digit. Prints the expected "accuracy digit_accuracy" from the
                                            bigram table (a key counts only with all 5 digits right). The keys follow
                                            eval.c's per-trial seed (keys_of); every token before an answer digit is
                                            in the table, so no scored row has tied logits (be_argmax_hit counts a
                                            tie as a hit)
  passkey_seed                              a --seed whose two trials' keys allow the table above
  buckets CKPT SHARD SEQ_LEN DOCS CSV EDGES per-position float64 NLL of the first DOCS documents (from their token
                                            256, at least SEQ_LEN + 1 tokens) averaged into buckets EDGES
                                            (comma-separated boundaries); CSV's rows equal them: bounds, tokens,
                                            exp(mean NLL) within 1e-5 relative
"""
import json, math, os, sys
import h5py
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_model as R  # noqa: E402
from ckpt_check import xsum64  # noqa: E402

torch.set_num_threads(1)
M64 = (1 << 64) - 1


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def load(ckpt):
    with h5py.File(ckpt, "r") as f:
        raw = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f["/config"].attrs.items()}
        cfg, problems = R.typed_config(raw)
        assert not problems, problems
        P = {n: torch.from_numpy(f["/model/" + n][()].astype(np.float64)) for n in f["/model"].keys()}
    hd = cfg["d_model"] // cfg["n_head"]
    inv, a = R.rope_params(hd, cfg["rope_theta"], cfg["rope_scaling"], cfg["rope_factor"], cfg["rope_original_max_seq_len"])
    return cfg, raw, P, inv, a


def stream(pattern):
    import glob
    toks = []
    for p in sorted(glob.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]:
        h = np.fromfile(p, dtype="<i4", count=256)
        dt = {20240520: "<u2", 20240521: "<u4"}[int(h[0])]
        toks.append(np.fromfile(p, dtype=dt, offset=1024, count=int(h[2])).astype(np.int64))
    return np.concatenate(toks)


def seq_nll(cfg, P, inv, a, windows):
    """windows [n, T + 1] -> per-window mean NLL of its T targets (float64), positions 0..T-1"""
    w = torch.from_numpy(np.asarray(windows))
    T = w.shape[1] - 1
    out = []
    with torch.no_grad():
        for s in range(0, w.shape[0], 16):
            b = w[s:s + 16]
            pos = torch.arange(T)[None].expand(b.shape[0], T)
            logits = R.forward(P, cfg, b[:, :T], pos, inv, a)
            nll = -torch.log_softmax(logits, -1).gather(-1, b[:, 1:, None]).squeeze(-1)
            out += nll.mean(-1).tolist()
    return out


def cmd_val(ckpt, shards, T, n, metrics):
    cfg, _, P, inv, a = load(ckpt)
    toks = stream(shards)
    wins = [toks[g * T:g * T + T + 1] for g in range(n)]
    ref = sum(seq_nll(cfg, P, inv, a, wins)) / n
    bad, got = [], []
    for m in metrics:
        recs = [json.loads(l) for l in open(m) if "val_loss" in l]
        v = recs[-1]["val_loss"] if recs else float("nan")
        got.append(f"{v:.7f}")
        if not abs(v - ref) <= 1e-5 * abs(ref):
            bad.append(f"{m}: {v} vs reference {ref:.7f}")
    print(f"val_loss {' '.join(got)} vs the float64 reference {ref:.7f} over {n} windows" + (f": {bad}" if bad else ""))
    return not bad


def cmd_moments(ckpt, dump):
    d = R.read_dump(dump)
    with h5py.File(ckpt, "r") as f:
        c = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f["/config"].attrs.items()}
        b1, b2, clip = float(c["beta1"]), float(c["beta2"]), float(c["grad_clip"])
        t = int(f.attrs["adam_t"])
        names = list(f["/model"].keys())
        g = {n: d["grad/" + n][2].astype(np.float64) for n in names}
        norm = math.sqrt(sum(float((x * x).sum()) for x in g.values()))
        s = min(1.0, clip / (norm + 1e-6)) if clip > 0 else 1.0
        errs = []
        for n in names:
            if not np.array_equal(f["/model/" + n][()], d["param/" + n][2]):
                errs.append(f"/model/{n} differs from the trainer's parameters")
            for key, want in (("m", (1 - b1) * s * g[n]), ("v", (1 - b2) * (s * g[n]) ** 2)):
                have = f[f"/optimizer/{key}/{n}"][()].astype(np.float64)
                e = np.abs(have - want).max() / (np.abs(want).max() or 1.0)
                if not e <= 1e-5:
                    errs.append(f"/optimizer/{key}/{n}: err {e:.2e} (max stored {np.abs(have).max():.3e}, want {np.abs(want).max():.3e})")
    print(f"adam_t {t}, {len(names)} tensors, |g| {norm:.5g}, clip factor {s:.5g}" + (f": {errs[:4]}" if errs else
          ": /model = the trainer's parameters; m = (1-b1) s g and v = (1-b2) (s g)^2 within 1e-5"))
    return t == 1 and not errs


def cmd_same_model(a, b):
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        diff = [n for n in fa["/model"].keys() if not np.array_equal(fa["/model/" + n][()], fb["/model/" + n][()])]
    print(f"/model of {os.path.basename(a)} and {os.path.basename(b)}: " + (f"differ in {diff}" if diff else "bit-identical"))
    return not diff


def feistel(x, k, key):
    mask = (1 << k) - 1
    l, r = (x >> k) & mask, x & mask
    for rnd in range(6):
        f = mix64(r ^ mix64((key + rnd) & M64)) & mask
        l, r = r, l ^ f
    return (l << k) | r


def perm(seed, epoch, i, n):
    if n <= 1:
        return 0
    k = 1
    while k < 31 and (1 << (2 * k)) < n:
        k += 1
    key = mix64(seed ^ mix64(epoch ^ 0x5DEECE66D))
    x = feistel(i, k, key)
    while x >= n:
        x = feistel(x, k, key)
    return x


def cmd_shuffle(ckpt, shards, T, B, seed, metrics):
    cfg, _, P, inv, a = load(ckpt)
    toks = stream(shards)
    n = (len(toks) - 1) // T
    per = seq_nll(cfg, P, inv, a, [toks[i * T:i * T + T + 1] for i in range(n)])
    recs = [json.loads(l) for l in open(metrics)]
    bad = []
    order = []
    for r in recs:
        k = r["step"]
        gs = [(k - 1) * B + j for j in range(B)]
        idx = [perm(seed, g // n, g % n, n) for g in gs]
        order += idx
        want = sum(per[i] for i in idx) / B
        if not abs(r["loss"] - want) <= 1e-5 * want:
            bad.append(f"step {k}: loss {r['loss']} vs sequences {idx}: {want:.7f}")
    epochs = (len(recs) * B - 1) // n + 1
    perm_ok = all(sorted(perm(seed, e, i, n) for i in range(n)) == list(range(n)) for e in range(epochs))
    print(f"{len(recs)} steps x {B} of {n} sequences ({epochs} epochs), seed {seed}: first windows {order[:6]} ..., "
          f"epoch 2 starts {order[n:n + 3]}" + (f"; {len(bad)} steps differ: {bad[:3]}" if bad else
          "; every step's loss equals the float64 losses of its sequences") + ("" if perm_ok else "; NOT a permutation"))
    return not bad and perm_ok and len(recs) * B > n


# ---- passkey: a bigram model -------------------------------------------------------------------------
SRC_TOKENS = [32] + list(range(48, 58))   # ' ' and the digits: the tokens that precede an answer digit


def keys_of(seed):
    """build/eval --passkey --seed SEED: the keys of trials 0 and 1 of the first cell (eval.c's per-trial seed
    seed * 1000003 + li * 7919 + di * 104729 + t; key = 10000 + mix64(seed) % 90000, eval/passkey.c)"""
    return [f"{10000 + mix64((seed * 1000003 + t) & M64) % 90000:05d}" for t in range(2)]


def table_for(k0, k1):
    """bigram table {prev char: next char}: trial 0's key whole, trial 1's from its second digit on (its first
    digit then follows ' ' as trial 0's does: wrong unless equal). None when the two keys contradict."""
    tab = {" ": k0[0]}
    for x, y in zip(k0, k0[1:]):
        if tab.setdefault(x, y) != y:
            return None
    for x, y in zip(k1, k1[1:]):
        if tab.setdefault(x, y) != y:
            return None
    return tab if k1[0] != k0[0] else None


def score(tab, key):
    hits = [tab.get(p) == c for p, c in zip(" " + key[:4], key)]
    return all(hits), sum(hits)


def cmd_passkey_seed():
    for s in range(1, 100000):
        k0, k1 = keys_of(s)
        if table_for(k0, k1) and k0[:4].count(k0[3]) == 1 and k0[3] not in k1[:4]:
            print(s)
            return True
    return False


def cmd_passkey_model(src, dst, seed, mode):
    import shutil
    k0, k1 = keys_of(seed)
    tab = table_for(k0, k1)
    assert tab, f"seed {seed}: keys {k0} {k1} do not fit one bigram table"
    if mode == "last":   # trial 0's last digit now follows its 4th wrongly (a source no other answer digit uses)
        tab[k0[3]] = str((int(k0[4]) + 1) % 10)
    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        for name, d in f["/model"].items():
            x = np.zeros(d.shape, np.float32)
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                x[:] = 1.0
            elif name == "model.embed_tokens.weight":
                for j, t in enumerate(SRC_TOKENS):
                    x[t, j] = 1.0
            elif name == "lm_head.weight":
                for p, c in tab.items():
                    x[ord(c), SRC_TOKENS.index(ord(p))] = 10.0
            d[...] = x
            d.attrs.modify("checksum", np.uint64(xsum64(x)))
    res = [score(tab, k) for k in (k0, k1)]
    acc = sum(r[0] for r in res) / 2
    dig = sum(r[1] for r in res) / 10
    print(f"{acc:g} {dig:g}")
    print(f"keys {k0} (trial 0: {res[0][1]} of 5 digits) and {k1} (trial 1: {res[1][1]} of 5)", file=sys.stderr)
    return True


def cmd_buckets(ckpt, shard, L, ndocs, csv_path, edges):
    import csv
    cfg, _, P, inv, a = load(ckpt)
    toks = stream(shard)
    starts = np.flatnonzero(toks == 256).tolist() + [len(toks)]
    docs = [s for s, e in zip(starts[:-1], starts[1:]) if e - s >= L + 1][:ndocs]
    assert len(docs) == ndocs, f"only {len(docs)} documents of {L + 1} tokens"
    nll = torch.zeros(L, dtype=torch.float64)
    with torch.no_grad():
        for s in docs:
            w = torch.from_numpy(toks[s:s + L + 1])
            logits = R.forward(P, cfg, w[None, :L], torch.arange(L)[None], inv, a)[0]
            nll += -torch.log_softmax(logits, -1).gather(-1, w[1:, None]).squeeze(-1)
    e = [int(x) for x in edges.split(",")]
    want = [(lo, hi, (hi - lo) * ndocs, math.exp(nll[lo:hi].sum().item() / ((hi - lo) * ndocs))) for lo, hi in zip(e, e[1:])]
    rows = list(csv.DictReader(open(csv_path)))
    got = [(int(r["bucket_lo"]), int(r["bucket_hi"]), int(r["tokens"]), float(r["ppl"])) for r in rows]
    good = len(got) == len(want) and all(g[:3] == w[:3] and abs(g[3] - w[3]) <= 1e-5 * w[3] for g, w in zip(got, want))
    print(f"{len(got)} buckets {[g[:2] for g in got]}" + ("" if good else f", want {[(w[0], w[1], w[2], round(w[3], 5)) for w in want]}"
          f" got {[(g[0], g[1], g[2], round(g[3], 5)) for g in got]}") + f"; last bucket {got[-1] if got else None} vs reference "
          f"ppl {want[-1][3]:.6f}")
    return good


def main(a):
    cmd = a[1] if len(a) > 1 else ""
    if cmd == "val":
        return cmd_val(a[2], a[3], int(a[4]), int(a[5]), a[6:])
    if cmd == "moments":
        return cmd_moments(a[2], a[3])
    if cmd == "same_model":
        return cmd_same_model(a[2], a[3])
    if cmd == "shuffle":
        return cmd_shuffle(a[2], a[3], int(a[4]), int(a[5]), int(a[6]), a[7])
    if cmd == "passkey_seed":
        return cmd_passkey_seed()
    if cmd == "passkey_model":
        return cmd_passkey_model(a[2], a[3], int(a[4]), a[5])
    if cmd == "buckets":
        return cmd_buckets(a[2], a[3], int(a[4]), int(a[5]), a[6], a[7])
    print(__doc__, file=sys.stderr)
    return False


if __name__ == "__main__":
    sys.exit(0 if main(sys.argv) else 1)
