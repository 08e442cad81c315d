#!/usr/bin/env python3
"""docmask_ref.py CKPT SHARD SEQ_LEN NWIN EOD CSV [CSV ...]: build/eval --doc_mask against the independent float64
PyTorch model (tests/ref_model.py) with an explicit block-diagonal causal mask.

The reference takes the checkpoint's weights (h5py), cuts SHARD into the packed windows build/eval scores
(window i = tokens [i L, i L + L], i < NWIN), builds each window's documents from the spec (a document starts at
every EOD token; tokens before the first one belong to a document that started earlier), masks every key of another
document (and every later key), restarts RoPE positions at each document when the checkpoint's doc_positions is 1,
and books each target's NLL at its position in its document (the distance from its document's EOD token, or from
the window's start). Every CSV (build/eval --bucket 1 at some layout) must give the same mean NLL per position
(1e-4 relative), token counts, and per position the number of windows (docs) and the standard error of the mean
over windows (se_nll, the cluster / ratio-estimator form of eval/report.h, recomputed here; 1e-4 relative to
max(se, 0.1): the fp32 model's NLL differs from float64 by ~1e-7, which a small se amplifies).
Also prints how much the plain causal mask would change the loss (the test is sensitive to the mask)."""
import csv, math, sys
import h5py, numpy as np, torch
sys.path.insert(0, __file__.rsplit("/", 1)[0])
import ref_model as R

ckpt, shard, L, nwin, eod = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
with h5py.File(ckpt, "r") as f:
    raw = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f["/config"].attrs.items()}
    cfg, problems = R.typed_config(raw)
    assert not problems, problems
    P = {n: torch.from_numpy(f["/model/" + n][()].astype(np.float64)) for n in f["/model"].keys()}
restart = int(raw.get("doc_positions", "0"))
toks = np.fromfile(shard, dtype=np.uint16, offset=1024).astype(np.int64)
assert len(toks) >= nwin * L + 1, f"{len(toks)} tokens: fewer than {nwin} windows of {L} + 1"
hd = cfg["d_model"] // cfg["n_head"]
inv, a = R.rope_params(hd, cfg["rope_theta"], cfg["rope_scaling"], cfg["rope_factor"], cfg["rope_original_max_seq_len"])
s_u = np.zeros((nwin, L)); n_u = np.zeros((nwin, L))   # per window and booked position: NLL sum, tokens
plain_total = masked_total = 0.0
with torch.no_grad():
    for i in range(nwin):
        w = torch.from_numpy(toks[i * L:i * L + L + 1])
        pos = torch.arange(L)[None]
        docs, rpos = R.document_ids(w[None, :L], pos, eod, restart)
        book = R.document_ids(w[None, :L], pos, eod, 1)[1][0]   # booked at the distance from the document's start
        logits = R.forward(P, cfg, w[None, :L], pos, inv, a, docs, rpos)[0]
        nll = -torch.log_softmax(logits, -1).gather(-1, w[1:, None]).squeeze(-1)
        plain = -torch.log_softmax(R.forward(P, cfg, w[None, :L], pos, inv, a)[0], -1).gather(-1, w[1:, None]).squeeze(-1)
        masked_total += nll.sum().item(); plain_total += plain.sum().item()
        for t in range(L):
            s_u[i, book[t]] += nll[t].item(); n_u[i, book[t]] += 1
S, N = s_u.sum(0), n_u.sum(0)
print(f"# {nwin} windows of {L}: mean NLL {masked_total / (nwin * L):.6f} with the block-diagonal mask, "
      f"{plain_total / (nwin * L):.6f} with the plain causal mask (doc_positions {restart})")
fails = 0
for path in sys.argv[6:]:
    rows = {int(r["bucket_lo"]): r for r in csv.DictReader(open(path))}
    worst = worst_se = 0.0
    ok = sorted(rows) == list(range(L))
    for p in range(L):
        r = rows.get(p)
        if r is None:
            continue
        if int(r["tokens"]) != int(N[p]):
            ok = False; continue
        if N[p] == 0:
            ok &= r["mean_nll"] == ""; continue
        m = S[p] / N[p]
        worst = max(worst, abs(float(r["mean_nll"]) - m) / abs(m))
        units = [i for i in range(nwin) if n_u[i, p] > 0]
        ok &= int(r["docs"]) == len(units)
        if len(units) >= 2:
            se = math.sqrt(len(units) / (len(units) - 1) * sum((s_u[i, p] - m * n_u[i, p]) ** 2 for i in units)) / N[p]
            worst_se = max(worst_se, abs(float(r["se_nll"]) - se) / max(se, 0.1))
        else:
            ok &= r["se_nll"] == ""
    good = ok and worst <= 1e-4 and worst_se <= 1e-4
    fails += not good
    print(f"{'ok  ' if good else 'FAIL'} {path.rsplit('/', 1)[-1]}: per-position NLL vs the PyTorch block-diagonal reference: "
          f"worst rel diff {worst:.2e}; token counts, windows per position{' ' if ok else ' (MISMATCH) '}and their "
          f"standard errors (worst rel diff {worst_se:.2e})")
print(f"{len(sys.argv) - 6 - fails} passed, {fails} failed")
sys.exit(1 if fails else 0)
