#!/usr/bin/env python3
"""ckpt_check.py — helpers of tests/test_ckpt.sh (h5py + numpy). Each subcommand prints one summary line
(or the reasons it failed) and exits 0 on success, 1 on failure.

  losses A B FIRST LAST (--exact | --rel R)   losses of steps FIRST..LAST in metrics.jsonl A and B: string-equal
                                              (--exact) or within R relative; the last line of each step counts
  inspect CKPT DUMP V C L H KV F              the max_steps-0 checkpoint: root attributes, /config, every
                                              /model and /optimizer dataset's name, shape, dtype and checksum
                                              (xsum64 recomputed in numpy) for that config, and /model equal
                                              bit for bit to the dump's param/ records
  verify CKPT [STEP]                          a complete checkpoint: opens, format/version/step, every dataset's
                                              xsum64 equals its checksum attribute
  same A B                                    two checkpoints hold bit-identical datasets and equal step
  corrupt MODE SRC DST                        a bad copy of SRC: missing | flip | reshape | version
  snap DIR                                    name, size, mtime_ns and md5 of every file under DIR
"""
import hashlib, json, os, re, shutil, sys
import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def mix64(x):
    x = x + GOLDEN
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def xsum64(arr):
    """FORMAT.md's checksum: sum mod 2^64 of mix64(index * golden + bits) over row-major elements."""
    a = np.ascontiguousarray(arr).reshape(-1)
    if a.dtype == np.float32:
        bits = a.view(np.uint32).astype(np.uint64)
    elif a.dtype == np.uint16:
        bits = a.astype(np.uint64)
    else:
        raise ValueError(f"dtype {a.dtype}")
    idx = np.arange(a.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int(mix64(idx * GOLDEN + bits).sum(dtype=np.uint64))


def hf_shapes(V, C, L, H, KV, F, tie=False):
    hd = C // H
    s = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    if not tie:
        s["lm_head.weight"] = (V, C)
    for i in range(L):
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = (C,)
        s[p + "post_attention_layernorm.weight"] = (C,)
        s[p + "self_attn.q_proj.weight"] = (H * hd, C)
        s[p + "self_attn.k_proj.weight"] = (KV * hd, C)
        s[p + "self_attn.v_proj.weight"] = (KV * hd, C)
        s[p + "self_attn.o_proj.weight"] = (C, H * hd)
        s[p + "mlp.gate_proj.weight"] = (F, C)
        s[p + "mlp.up_proj.weight"] = (F, C)
        s[p + "mlp.down_proj.weight"] = (C, F)
    return s


def read_dump(path):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from compare_dumps import read
    return read(path)


def datasets(f):
    import h5py
    out = {}
    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            out["/" + name] = obj
    f.visititems(visit)
    return out


def attr_str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def check_checksums(f, errs):
    n = 0
    for path, d in sorted(datasets(f).items()):
        if "checksum" not in d.attrs:
            errs.append(f"{path}: no checksum attribute")
            continue
        ck = d.attrs["checksum"]
        if np.asarray(ck).dtype != np.uint64:
            errs.append(f"{path}: checksum dtype {np.asarray(ck).dtype}, want uint64")
        got = xsum64(d[()])
        if got != int(ck):
            errs.append(f"{path}: xsum64 {got:#x} != attribute {int(ck):#x}")
        n += 1
    return n


# ---- subcommands ----

def loss_strings(path):
    out = {}
    for line in open(path):
        if not line.strip():
            continue
        step = json.loads(line)["step"]
        m = re.search(r'"loss": ([^,}]+)', line)
        out[step] = m.group(1).strip()
    return out


def cmd_losses(a, b, first, last, mode, tol=None):
    la, lb = loss_strings(a), loss_strings(b)
    steps = range(int(first), int(last) + 1)
    missing = [s for s in steps if s not in la or s not in lb]
    if missing:
        print(f"steps {missing} missing (A has {sorted(la)}, B has {sorted(lb)})")
        return 1
    if mode == "--exact":
        diff = [s for s in steps if la[s] != lb[s]]
        print(f"steps {first}-{last} losses {[la[s] for s in steps]} vs {[lb[s] for s in steps]}"
              + (f": differ at {diff}" if diff else ": identical"))
        return 1 if diff else 0
    worst = max(abs(float(la[s]) - float(lb[s])) / abs(float(lb[s])) for s in steps)
    print(f"steps {first}-{last} losses {[la[s] for s in steps]} worst rel diff {worst:.2e}")
    return 0 if worst <= float(tol) else 1


def cmd_inspect(ckpt, dump, V, C, L, H, KV, F):
    import h5py
    V, C, L, H, KV, F = map(int, (V, C, L, H, KV, F))
    errs = []
    want = hf_shapes(V, C, L, H, KV, F)
    with h5py.File(ckpt, "r") as f:
        a = f.attrs
        expect = {"format": "ringlm-checkpoint", "format_version": 1, "step": 0, "data_cursor": 0,
                  "tokens_seen": 0, "adam_t": 0, "seed": 1337, "saved_tp": 1, "saved_cp": 1, "saved_dp": 1,
                  "saved_zero": 0}
        for k, v in expect.items():
            if k not in a:
                errs.append(f"root attribute {k} missing")
            elif isinstance(v, str):
                if attr_str(a[k]) != v:
                    errs.append(f"root attribute {k} = {a[k]!r}, want {v!r}")
            else:
                if np.asarray(a[k]).dtype != np.int64 or int(a[k]) != v:
                    errs.append(f"root attribute {k} = {a[k]!r} ({np.asarray(a[k]).dtype}), want int64 {v}")
        for k in ("rng", "config"):
            if k not in a:
                errs.append(f"root attribute {k} missing")
        cfg = {}
        for line in attr_str(a.get("config", "")).splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                cfg[k.strip()] = v.strip()
        for k, v in (("vocab_size", V), ("d_model", C), ("n_layer", L), ("n_head", H), ("n_kv_head", KV), ("d_ff", F)):
            if cfg.get(k) != str(v):
                errs.append(f"config text: {k} = {cfg.get(k)!r}, want {v}")
        if "config" not in f:
            errs.append("group /config missing")
        else:
            g = {k: attr_str(v).strip() for k, v in f["config"].attrs.items()}
            if set(g) != set(cfg):
                errs.append(f"/config keys differ from the config text: {sorted(set(g) ^ set(cfg))[:6]}")
            for k in set(g) & set(cfg):
                if g[k] != cfg[k]:
                    errs.append(f"/config:{k} = {g[k]!r} but config text says {cfg[k]!r}")
        ds = datasets(f)
        for grp in ("/model", "/optimizer/m", "/optimizer/v"):
            names = {p[len(grp) + 1:] for p in ds if p.startswith(grp + "/") and "/" not in p[len(grp) + 1:]}
            if names != set(want):
                errs.append(f"{grp}: names differ: extra {sorted(names - set(want))}, missing {sorted(set(want) - names)}")
            for n in sorted(names & set(want)):
                d = ds[f"{grp}/{n}"]
                if d.shape != want[n]:
                    errs.append(f"{grp}/{n}: shape {list(d.shape)}, want {list(want[n])}")
                if d.dtype != np.dtype("<f4"):
                    errs.append(f"{grp}/{n}: dtype {d.dtype}, want <f4")
                if grp != "/model" and np.any(d[()] != 0):
                    errs.append(f"{grp}/{n}: a fresh model's AdamW moment is not zero")
        nck = check_checksums(f, errs)
        dm = read_dump(dump)
        params = {k[len("param/"):]: v for k, v in dm.items() if k.startswith("param/")}
        if set(params) != set(want):
            errs.append(f"dump param/ names differ from the expected set")
        neq = 0
        for n in sorted(set(params) & set(want)):
            p = f"/model/{n}"
            if p not in ds:
                continue
            x = np.ascontiguousarray(ds[p][()])
            y = np.ascontiguousarray(params[n])
            if x.shape != y.shape or not np.array_equal(x.view(np.uint32), y.view(np.uint32)):
                errs.append(f"{p}: differs from the trainer's in-memory tensor (dump param/{n})")
            else:
                neq += 1
        # the documented checksum recomputed for one dataset, spelled out step by step
        p = "/model/model.layers.0.self_attn.k_proj.weight"
        if p in ds:
            x = ds[p][()].astype("<f4")
            s = 0
            flat = x.reshape(-1).view(np.uint32)
            mask = (1 << 64) - 1
            for i in range(flat.size):
                z = (i * 0x9E3779B97F4A7C15 + int(flat[i])) & mask
                z = (z + 0x9E3779B97F4A7C15) & mask
                z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
                z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
                s = (s + (z ^ (z >> 31))) & mask
            if s != int(ds[p].attrs.get("checksum", -1)):
                errs.append(f"{p}: xsum64 in pure Python {s:#x} != attribute")
    for e in errs[:20]:
        print(e)
    if not errs:
        print(f"{len(want)} /model names and shapes as configured, root and /config attributes as documented, "
              f"{nck} checksums recomputed, {neq} tensors bit-equal to the dump")
    return 1 if errs else 0


def cmd_verify(ckpt, step=None):
    import h5py
    errs = []
    try:
        with h5py.File(ckpt, "r") as f:
            if attr_str(f.attrs.get("format", "")) != "ringlm-checkpoint" or int(f.attrs.get("format_version", -1)) != 1:
                errs.append("format / format_version wrong")
            if step is not None and int(f.attrs.get("step", -1)) != int(step):
                errs.append(f"step {f.attrs.get('step')} want {step}")
            n = check_checksums(f, errs)
            if n != 3 * 21:
                errs.append(f"{n} datasets, want 63")
    except Exception as e:  # noqa: BLE001
        errs.append(f"cannot read: {e}")
    for e in errs[:10]:
        print(e)
    if not errs:
        print(f"{os.path.basename(ckpt)}: complete, {n} checksums verify")
    return 1 if errs else 0


def cmd_same(a, b):
    import h5py
    errs = []
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        da, db = datasets(fa), datasets(fb)
        if set(da) != set(db):
            errs.append(f"dataset sets differ: {sorted(set(da) ^ set(db))[:5]}")
        for p in sorted(set(da) & set(db)):
            x, y = np.ascontiguousarray(da[p][()]), np.ascontiguousarray(db[p][()])
            if x.shape != y.shape or not np.array_equal(x.view(np.uint32), y.view(np.uint32)):
                errs.append(f"{p} differs")
            elif int(da[p].attrs["checksum"]) != int(db[p].attrs["checksum"]):
                errs.append(f"{p}: checksum attributes differ")
        for k in ("step", "data_cursor", "tokens_seen", "adam_t"):
            if int(fa.attrs[k]) != int(fb.attrs[k]):
                errs.append(f"attribute {k} differs")
        n = len(set(da) & set(db))
    for e in errs[:10]:
        print(e)
    if not errs:
        print(f"{n} datasets bit-identical")
    return 1 if errs else 0


def cmd_corrupt(mode, src, dst):
    import h5py
    shutil.copyfile(src, dst)
    if mode == "missing":
        with h5py.File(dst, "r+") as f:
            del f["/model/model.layers.1.self_attn.v_proj.weight"]
    elif mode == "flip":
        with h5py.File(dst, "r") as f:
            off = f["/model/model.layers.0.mlp.gate_proj.weight"].id.get_offset()
        with open(dst, "r+b") as fh:
            fh.seek(off + 8)
            b = bytearray(fh.read(4))
            fh.seek(off + 8)
            fh.write(bytes(x ^ 0x5A for x in b))
    elif mode == "reshape":
        with h5py.File(dst, "r+") as f:
            p = "/model/model.layers.0.mlp.down_proj.weight"
            x = f[p][()]
            ck = f[p].attrs["checksum"]
            del f[p]
            d = f.create_dataset(p, data=np.ascontiguousarray(x.T))
            d.attrs["checksum"] = ck
    elif mode == "version":
        with h5py.File(dst, "r+") as f:
            f.attrs["format_version"] = np.int64(2)
    else:
        print(f"unknown mode {mode}")
        return 1
    return 0


def cmd_snap(d):
    out = []
    for root, _, files in os.walk(d):
        for n in files:
            p = os.path.join(root, n)
            st = os.stat(p)
            h = hashlib.md5(open(p, "rb").read()).hexdigest()
            out.append(f"{os.path.relpath(p, d)} {st.st_size} {st.st_mtime_ns} {h}")
    print("\n".join(sorted(out)))
    return 0


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "losses":
        return cmd_losses(*args)
    return {"inspect": cmd_inspect, "verify": cmd_verify, "same": cmd_same, "corrupt": cmd_corrupt,
            "snap": cmd_snap}[cmd](*args)


if __name__ == "__main__":
    sys.exit(main())
