#!/usr/bin/env python3
"""sample_ref.py CKPT IDS N: greedy decoding by the independent float64 PyTorch model (tests/ref_model.py) on the
checkpoint's weights (read with h5py): the prompt IDS (comma-separated token ids) and N tokens, each the argmax of a
full forward over the whole sequence so far (no cache). Prints the prompt and the generated ids comma-separated
on one line, then "# smallest top-1 / top-2 logit gap G" (a gap near zero would make the comparison a coin flip)."""
import sys
import h5py, numpy as np, torch
sys.path.insert(0, __file__.rsplit("/", 1)[0])
import ref_model as R

ckpt, ids, n = sys.argv[1], [int(t) for t in sys.argv[2].split(",")], int(sys.argv[3])
with h5py.File(ckpt, "r") as f:
    raw = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f["/config"].attrs.items()}
    cfg, problems = R.typed_config(raw)
    assert not problems, problems
    P = {k: torch.from_numpy(f["/model/" + k][()].astype(np.float64)) for k in f["/model"].keys()}
hd = cfg["d_model"] // cfg["n_head"]
inv, a = R.rope_params(hd, cfg["rope_theta"], cfg["rope_scaling"], cfg["rope_factor"], cfg["rope_original_max_seq_len"])
seq, gap = list(ids), float("inf")
with torch.no_grad():
    for _ in range(n):
        t = torch.tensor(seq)[None]
        row = R.forward(P, cfg, t, torch.arange(len(seq))[None], inv, a)[0, -1]
        top = torch.topk(row, 2).values
        gap = min(gap, (top[0] - top[1]).item())
        seq.append(int(torch.argmax(row)))
print(",".join(map(str, seq)))
print(f"# smallest top-1 / top-2 logit gap {gap:.3e}")
