#!/usr/bin/env python3
"""eval_ref.py CKPT SHARD SEQ_LEN CSV DOCS [ROPE]: the independent float64 PyTorch model (tests/ref_model.py) on the
checkpoint's weights (read with h5py) computes the per-position NLL of the first DOCS documents of SHARD
(each starting at its end-of-document token 256, at least SEQ_LEN + 1 tokens long, first SEQ_LEN targets),
and compares them with build/eval's --bucket 1 CSV (mean_nll per position). ROPE (none | linear:F:L | yarn:F:L)
replaces the checkpoint's RoPE scaling as build/eval's --rope does; the CSV's rope column must then name it.
Exit 1 when any position differs by more than 1e-4 relative."""
import csv, sys
import h5py, numpy as np, torch
sys.path.insert(0, __file__.rsplit("/", 1)[0])
import ref_model as R

ckpt, shard, L, csv_path, ndocs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
with h5py.File(ckpt, "r") as f:
    raw = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f["/config"].attrs.items()}
    cfg, problems = R.typed_config(raw)
    assert not problems, problems
    P = {n: torch.from_numpy(f["/model/" + n][()].astype(np.float64)) for n in f["/model"].keys()}
if len(sys.argv) > 6:   # the override, parsed here from its documented form (none | KIND:FACTOR:ORIGINAL_LENGTH)
    kind, *rest = sys.argv[6].split(":")
    cfg["rope_scaling"] = kind
    if rest:
        cfg["rope_factor"], cfg["rope_original_max_seq_len"] = float(rest[0]), int(rest[1])
toks = np.fromfile(shard, dtype=np.uint16, offset=1024).astype(np.int64)
starts = np.flatnonzero(toks == 256).tolist() + [len(toks)]
docs = [s for s, e in zip(starts[:-1], starts[1:]) if e - s >= L + 1][:ndocs]
assert len(docs) == ndocs, f"only {len(docs)} documents of {L + 1} tokens"
hd = cfg["d_model"] // cfg["n_head"]
inv, a = R.rope_params(hd, cfg["rope_theta"], cfg["rope_scaling"], cfg["rope_factor"], cfg["rope_original_max_seq_len"])
nll = torch.zeros(L, dtype=torch.float64)
with torch.no_grad():
    for s in docs:
        w = torch.from_numpy(toks[s:s + L + 1])
        pos = torch.arange(L)[None]
        logits = R.forward(P, cfg, w[None, :L], pos, inv, a)[0]
        nll += -torch.log_softmax(logits, -1).gather(-1, w[1:, None]).squeeze(-1)
nll /= len(docs)
rows = [r for r in csv.DictReader(open(csv_path))]
got = {int(r["bucket_lo"]): float(r["mean_nll"]) for r in rows}
assert len(got) == L and all(int(r["tokens"]) == ndocs for r in rows), "CSV is not one row per position"
if len(sys.argv) > 6:
    assert all(r["rope"] == sys.argv[6] for r in rows), f"rope column {rows[0].get('rope')!r}, not {sys.argv[6]!r}"
worst = max(abs(got[p] - nll[p].item()) / abs(nll[p].item()) for p in range(L))
print(f"per-position NLL vs the PyTorch float64 reference over {len(docs)} documents: worst rel diff {worst:.2e}")
sys.exit(0 if worst <= 1e-4 else 1)
