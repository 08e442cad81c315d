"""hf_common.py — helpers shared by tools/hf_export.py, tools/hf_import.py and tools/prepare_hf.py.

ringlm checkpoints (checkpoint/FORMAT.md) are read and written with h5py + numpy; safetensors files are read
and written here directly (the format is an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the raw little-endian bytes), so export and import need only
h5py and numpy. Errors are one line on stderr and exit status 1 (die()).
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROG = os.path.basename(sys.argv[0]).removesuffix(".py")
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
FORMAT, FORMAT_VERSION = "ringlm-checkpoint", 1
RNG_TEXT = "counter-based: initial weights and data order are pure functions of seed"


class Fail(Exception):
    """One-line error: the tools print it as 'PROG: message' and exit 1."""


def die(msg):
    print(f"{PROG}: {' '.join(str(msg).split())}", file=sys.stderr)
    sys.exit(1)


class ArgParser(argparse.ArgumentParser):
    """argparse with one-line errors (the tools' convention) instead of usage + message + exit 2."""

    def error(self, message):
        raise Fail(f"{message} (see --help)")


def f32_json(x):
    """The shortest decimal that reads back as the same fp32 value (config.json numbers: 1e-05, not 9.99999975e-06)."""
    return float(str(np.float32(float(x))))


def main_guard(fn):
    try:
        sys.exit(fn())
    except Fail as e:
        die(e)
    except KeyboardInterrupt:
        die("interrupted")


# ----------------------------------------------------------------------------------------------- config
def config_table():
    """The C key table (model/config.c): [(name, type, is_model, default)] in table order."""
    path = os.path.join(REPO, "model", "config.c")
    try:
        src = open(path).read()
    except OSError as e:
        raise Fail(f"cannot read the config key table {path}: {e.strerror}")
    keys = re.findall(r'^\s*K\((\w+),\s*(T_\w+),\s*([01]),\s*"((?:[^"\\]|\\.)*)"', src, re.M)
    if not keys:
        raise Fail(f"no config keys found in {path}")
    return [(n, t, m == "1", d) for n, t, m, d in keys]


def canon(typ, value):
    """A value as the C side prints it (config_get): floats as %.9g of the fp32 value."""
    if typ == "T_FLOAT":
        return "%.9g" % float(np.float32(float(value)))
    if typ in ("T_INT", "T_I64"):
        return str(int(value))
    if typ == "T_BOOL":
        return "1" if int(value) else "0"
    return str(value)


def default_config():
    """{key: canonical default string} for every key of the C table, in table order."""
    return {n: canon(t, d) for n, t, _, d in config_table()}


# ----------------------------------------------------------------------------------------------- checksum
def xsum64(a, chunk=1 << 22):
    """FORMAT.md's xsum64 of an fp32 array (32-bit patterns) or a bf16 array stored as uint16."""
    a = np.ascontiguousarray(a).reshape(-1)
    if a.dtype == np.float32:
        bits = a.view(np.uint32)
    elif a.dtype == np.uint16:
        bits = a
    else:
        raise Fail(f"checksum of dtype {a.dtype}")
    total = np.uint64(0)
    c1, c2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
    with np.errstate(over="ignore"):
        for s in range(0, a.size, chunk):
            x = np.arange(s, min(s + chunk, a.size), dtype=np.uint64)
            x *= GOLDEN
            np.add(x, bits[s:s + chunk], out=x, casting="unsafe")
            x += GOLDEN
            t = x >> np.uint64(30)
            x ^= t
            x *= c1
            np.right_shift(x, np.uint64(27), out=t)
            x ^= t
            x *= c2
            np.right_shift(x, np.uint64(31), out=t)
            x ^= t
            total += x.sum(dtype=np.uint64)
    return int(total)


# ----------------------------------------------------------------------------------------------- bf16
def bf16_to_f32(u16):
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(x):
    """Round to nearest even, NaN stays NaN (as checkpoint/h5util.c)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = ((u & np.uint32(0x7F800000)) == np.uint32(0x7F800000)) & ((u & np.uint32(0x007FFFFF)) != 0)
    with np.errstate(over="ignore"):
        r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    return np.where(nan, ((u >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16), r)


# ----------------------------------------------------------------------------------------------- tensors
def tensor_shapes(cfg):
    """{HF name: shape} in the parameter table's order (model/params.c), from a config of canonical strings."""
    V, C, L = int(cfg["vocab_size"]), int(cfg["d_model"]), int(cfg["n_layer"])
    H, KV, F = int(cfg["n_head"]), int(cfg["n_kv_head"]), int(cfg["d_ff"])
    hd = C // H
    s = {"model.embed_tokens.weight": (V, C)}
    for i in range(L):
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = (C,)
        s[p + "self_attn.q_proj.weight"] = (H * hd, C)
        s[p + "self_attn.k_proj.weight"] = (KV * hd, C)
        s[p + "self_attn.v_proj.weight"] = (KV * hd, C)
        s[p + "self_attn.o_proj.weight"] = (C, H * hd)
        s[p + "post_attention_layernorm.weight"] = (C,)
        s[p + "mlp.gate_proj.weight"] = (F, C)
        s[p + "mlp.up_proj.weight"] = (F, C)
        s[p + "mlp.down_proj.weight"] = (C, F)
    s["model.norm.weight"] = (C,)
    if cfg["tie_embeddings"] != "1":
        s["lm_head.weight"] = (V, C)
    return s


# ----------------------------------------------------------------------------------------------- tensors, lazily
class Lazy:
    """A tensor read (and converted) only when load() is called, so that the tools hold one tensor at a time:
    shape, dtype (a numpy dtype, or a safetensors dtype name) and a function returning the array."""

    def __init__(self, shape, dtype, load):
        self.shape, self.dtype, self._load = tuple(shape), dtype, load

    def load(self):
        return self._load()


def loaded(x):
    return x.load() if isinstance(x, Lazy) else x


# ----------------------------------------------------------------------------------------------- checkpoints
def _attr_str(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def resolve_ckpt(spec):
    """A checkpoint file, or a run directory (its `latest`)."""
    if os.path.isdir(spec):
        lf = os.path.join(spec, "latest")
        try:
            name = open(lf).readline().strip()
        except OSError:
            raise Fail(f"'{spec}' has no 'latest' pointer (no completed checkpoint there)")
        if not name or "/" in name:
            raise Fail(f"'{lf}' is empty or malformed")
        spec = os.path.join(spec, name)
    if not os.path.isfile(spec):
        raise Fail(f"checkpoint '{spec}' does not exist")
    return spec


def read_ckpt(path, optimizer=False):
    """Open a ringlm checkpoint, verify format, /config, every /model dataset's shape and xsum64 (with optimizer
    also /optimizer's), one tensor at a time. Returns (config {key: string}, {HF name: Lazy of the stored array, fp32 or uint16 bf16 bits},
    root attributes)."""
    import h5py
    try:
        f = h5py.File(path, "r")
    except OSError:
        raise Fail(f"'{path}' cannot be opened as HDF5 (truncated, corrupt or not a checkpoint)")
    with f:
        if _attr_str(f.attrs.get("format", b"")) != FORMAT:
            raise Fail(f"'{path}' is not a ringlm checkpoint (attribute 'format')")
        if int(f.attrs.get("format_version", -1)) != FORMAT_VERSION:
            raise Fail(f"'{path}' has format_version {f.attrs.get('format_version')}; this tool reads version 1")
        if "config" not in f:
            raise Fail(f"'{path}' lacks the group /config")
        cfg = {k: _attr_str(v) for k, v in f["config"].attrs.items()}
        for k in ("vocab_size", "d_model", "n_layer", "n_head", "n_kv_head", "d_ff", "max_seq_len", "rope_theta",
                  "rope_scaling", "rope_factor", "rope_original_max_seq_len", "norm_eps", "tie_embeddings"):
            if k not in cfg:
                raise Fail(f"'{path}' lacks the model config key /config:{k}")
        want = tensor_shapes(cfg)
        tensors = {}
        groups = ["model"] + [g for g in ("optimizer/m", "optimizer/v") if optimizer and g in f]
        for g in groups:
            names = set(f[g].keys())
            if names != set(want):
                extra, miss = sorted(names - set(want)), sorted(set(want) - names)
                raise Fail(f"'{path}': /{g} does not hold the tensors of its config"
                           + (f"; missing {', '.join(miss[:3])}" if miss else "")
                           + (f"; unexpected {', '.join(extra[:3])}" if extra else ""))
            for n, shape in want.items():
                d = f[g][n]
                if d.shape != shape:
                    hint = " (a padded vocabulary is never stored)" if "embed" in n or "lm_head" in n else ""
                    raise Fail(f"'{path}': /{g}/{n} has shape {list(d.shape)}, the config says {list(shape)}{hint}")
                if d.dtype not in (np.dtype("<f4"), np.dtype("<u2")):
                    raise Fail(f"'{path}': /{g}/{n} has dtype {d.dtype} (fp32 or bf16 expected)")
                if "checksum" not in d.attrs:
                    raise Fail(f"'{path}': /{g}/{n} has no checksum attribute")
                if xsum64(d[()]) != int(d.attrs["checksum"]):
                    raise Fail(f"'{path}': checksum mismatch in /{g}/{n} (the file is corrupt)")
                if g == "model":
                    tensors[n] = Lazy(shape, d.dtype, lambda n=n: _read_dataset(path, "model/" + n))
        attrs = {k: (_attr_str(v) if isinstance(v, (bytes, str)) else v) for k, v in f.attrs.items()}
    return cfg, tensors, attrs


def _read_dataset(path, name):
    import h5py
    with h5py.File(path, "r") as f:
        return f[name][()]


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


def state_checksum(*vals):
    """The root attribute state_checksum: sum mod 2^64 of mix64(i x golden + value_i) over (format_version, step,
    data_cursor, tokens_seen, adam_t) (checkpoint/validate.h)."""
    return sum(mix64((i * 0x9E3779B97F4A7C15 + v) & 0xFFFFFFFFFFFFFFFF) for i, v in enumerate(vals)) & 0xFFFFFFFFFFFFFFFF


def _str_attr(obj, name, value):
    """A fixed-length, NUL-terminated ASCII string attribute, the type the C reader expects."""
    import h5py
    b = value.encode()
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(len(b) + 1)
    tid.set_strpad(h5py.h5t.STR_NULLTERM)
    obj.attrs.create(name, np.array(b, dtype=f"S{len(b) + 1}"), dtype=h5py.Datatype(tid))


def write_ckpt(path, cfg, tensors, extra_attrs=None):
    """A model-only step-0 checkpoint (no /optimizer: the C loader starts AdamW at zero), written as PATH.tmp
    and renamed. cfg: {key: canonical string} holding every key of the C table; tensors: {HF name: fp32 array or
    Lazy}, loaded one at a time."""
    import h5py
    table = config_table()
    missing = [n for n, *_ in table if n not in cfg]
    if missing:
        raise Fail(f"internal: config lacks {missing}")
    text = "".join(f"{n} = {cfg[n]}\n" for n, *_ in table)
    tmp = path + ".tmp"
    with h5py.File(tmp, "w") as f:
        _str_attr(f, "format", FORMAT)
        for k, v in (("format_version", FORMAT_VERSION), ("step", 0), ("data_cursor", 0), ("tokens_seen", 0),
                     ("adam_t", 0), ("seed", int(cfg["seed"])), ("saved_tp", 1), ("saved_cp", 1), ("saved_dp", 1),
                     ("saved_zero", 0)):
            f.attrs.create(k, np.int64(v), dtype=np.int64)
        f.attrs.create("state_checksum", np.uint64(state_checksum(FORMAT_VERSION, 0, 0, 0, 0)), dtype=np.uint64)
        _str_attr(f, "rng", RNG_TEXT)
        _str_attr(f, "config", text)
        for k, v in (extra_attrs or {}).items():
            _str_attr(f, k, v)
        g = f.create_group("config")
        for n, *_ in table:
            _str_attr(g, n, cfg[n])
        m = f.create_group("model")
        for n, shape in tensor_shapes(cfg).items():
            x = np.ascontiguousarray(loaded(tensors[n]), dtype="<f4")
            assert x.shape == shape, (n, x.shape, shape)
            d = m.create_dataset(n, data=x)
            d.attrs.create("checksum", np.uint64(xsum64(x)), dtype=np.uint64)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------- safetensors
ST_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8"}


def st_write(path, tensors, metadata=None):
    """tensors: [(name, Lazy)] whose dtype is "F32" (load() gives <f4) or "BF16" (load() gives <u2 bf16 bits);
    each is loaded and written in turn. Returns the bytes of tensor data."""
    header, off = {}, 0
    for name, t in tensors:
        n = int(np.prod(t.shape, dtype=np.int64)) * (4 if t.dtype == "F32" else 2)
        header[name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, t in tensors:
            a = np.ascontiguousarray(t.load(), dtype="<f4" if t.dtype == "F32" else "<u2")
            assert a.shape == t.shape, (name, a.shape, t.shape)
            f.write(memoryview(a).cast("B"))
    return off


def st_read(path):
    """{name: Lazy fp32 array} of a safetensors file (F32, F16 and BF16 exactly; F64 rounded to fp32), mapped
    from the file, converted when loaded."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise Fail(f"'{path}' is not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", head)
        if n > min(size - 8, 100 << 20):
            raise Fail(f"'{path}' is not a safetensors file (header length {n})")
        try:
            header = json.loads(f.read(n))
        except ValueError:
            raise Fail(f"'{path}' is not a safetensors file (header is not JSON)")
    base = 8 + n
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        ok = (isinstance(t, dict) and isinstance(t.get("shape"), list) and all(isinstance(v, int) and v >= 0 for v in t["shape"])
              and isinstance(t.get("data_offsets"), list) and len(t["data_offsets"]) == 2
              and all(isinstance(v, int) and v >= 0 for v in t["data_offsets"]))
        if not ok:
            raise Fail(f"'{path}' is not a safetensors file (malformed header entry for {name})")
        dt = ST_DTYPES.get(t.get("dtype"))
        if dt is None:
            raise Fail(f"'{path}': tensor {name} has dtype {t.get('dtype')} (ringlm imports F32, F16, BF16, F64)")
        a, b = t["data_offsets"]
        shape = tuple(t["shape"])
        if base + b > size or b - a != int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize:
            raise Fail(f"'{path}': tensor {name} lies outside the file or has a wrong byte range (truncated?)")
        x = np.frombuffer(mm[base + a:base + b], dtype=dt).reshape(shape)

        def load(x=x, bf16=t["dtype"] == "BF16"):
            return bf16_to_f32(x) if bf16 else x.astype(np.float32, copy=False)
        out[name] = Lazy(shape, "F32", load)
    return out


def parse_size(s):
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?\s*", s, re.I)
    if not m:
        raise Fail(f"invalid size '{s}' (e.g. 5GB, 500MB, 2GiB or a number of bytes)")
    unit = (m.group(2) or "B").upper().rstrip("B") or "B"
    mult = {"B": 1, "K": 10**3, "M": 10**6, "G": 10**9, "KI": 2**10, "MI": 2**20, "GI": 2**30}[unit]
    return int(float(m.group(1)) * mult)


# ----------------------------------------------------------------------------------------------- tokenizers
BOS_NAMES = ("<s>", "<|begin_of_text|>", "<bos>", "[BOS]", "<|startoftext|>")
EOS_NAMES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "[EOS]", "<|im_end|>")


def tokenizer_files(spec):
    """(tokenizer.json path, directory) of a tokenizer.json or a directory holding one."""
    if os.path.isdir(spec):
        tj = os.path.join(spec, "tokenizer.json")
        if not os.path.isfile(tj):
            raise Fail(f"'{spec}' has no tokenizer.json (a Hugging Face fast tokenizer file is needed)")
        return tj, spec
    if not os.path.isfile(spec):
        raise Fail(f"tokenizer '{spec}' does not exist (a tokenizer.json or a directory holding one)")
    return spec, os.path.dirname(os.path.abspath(spec))


def tokenizer_info(spec):
    """What a tokenizer.json (and a tokenizer_config.json beside it) says about its vocabulary and special tokens,
    read as JSON (no tokenizers library needed). Returns a dict: json, dir, vocab {token: id}, vocab_size (largest
    id + 1), bos / eos ((token, id) or None), prefix / suffix (the special token the post-processor puts before /
    after every text, or None)."""
    tj, d = tokenizer_files(spec)
    try:
        j = json.load(open(tj, encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise Fail(f"'{tj}' is not a tokenizer.json ({e.__class__.__name__}: {str(e)[:80]})")
    if not isinstance(j, dict) or not isinstance(j.get("model"), dict):
        raise Fail(f"'{tj}' is not a tokenizer.json (no 'model' object)")
    mv = j["model"].get("vocab") or {}
    vocab = dict(mv) if isinstance(mv, dict) else {p[0]: i for i, p in enumerate(mv)}   # Unigram: [[piece, score]]
    special = {}
    for t in j.get("added_tokens") or []:
        vocab[t["content"]] = t["id"]
        if t.get("special"):
            special[t["content"]] = t["id"]
    if not vocab:
        raise Fail(f"'{tj}' has an empty vocabulary")
    tc = {}
    tcp = os.path.join(d, "tokenizer_config.json")
    if os.path.isfile(tcp):
        try:
            tc = json.load(open(tcp, encoding="utf-8"))
        except ValueError:
            raise Fail(f"'{tcp}' is not JSON")

    def named(key):
        t = tc.get(key)
        t = t.get("content") if isinstance(t, dict) else t
        return (t, vocab[t]) if isinstance(t, str) and t in vocab else None

    prefix = suffix = None
    procs = [j.get("post_processor") or {}]
    if procs[0].get("type") == "Sequence":
        procs = procs[0].get("processors") or []
    for pp in procs:
        if pp.get("type") == "TemplateProcessing":
            single = pp.get("single") or []
            toks = [("A" if "Sequence" in x else x.get("SpecialToken", {}).get("id")) for x in single]
            if "A" in toks:
                a = toks.index("A")
                if a > 0 and toks[a - 1] in vocab:
                    prefix = (toks[a - 1], vocab[toks[a - 1]])
                if a + 1 < len(toks) and toks[a + 1] in vocab:
                    suffix = (toks[a + 1], vocab[toks[a + 1]])
        elif pp.get("type") in ("RobertaProcessing", "BertProcessing"):
            prefix, suffix = tuple(pp.get("cls") or ()) or None, tuple(pp.get("sep") or ()) or None
    bos = named("bos_token") or next(((n, special[n]) for n in BOS_NAMES if n in special), None)
    eos = named("eos_token") or next(((n, special[n]) for n in EOS_NAMES if n in special), None)
    return {"json": tj, "dir": d, "vocab": vocab, "vocab_size": max(vocab.values()) + 1, "bos": bos, "eos": eos,
            "prefix": prefix, "suffix": suffix}


def separator(info, spec=None):
    """The document separator (token, id, why) of a tokenizer: SPEC (a token or an id) when given; else the token
    the tokenizer itself starts every text with (Llama's BOS), its BOS token, the token it ends every text with, its
    EOS token (GPT-2's <|endoftext|>, llm.c's convention). ringlm writes it before every document."""
    v = info["vocab"]
    if spec is not None:
        if spec in v:
            return spec, v[spec], "--sep"
        if re.fullmatch(r"\d+", spec):
            i = int(spec)
            inv = {b: a for a, b in v.items()}
            if i in inv:
                return inv[i], i, "--sep"
        raise Fail(f"--sep '{spec}' is neither a token nor an id of the tokenizer {info['json']}")
    for what, t in (("the tokenizer's post-processor starts every text with it", info["prefix"]),
                    ("the tokenizer's BOS token", info["bos"]),
                    ("the tokenizer's post-processor ends every text with it", info["suffix"]),
                    ("the tokenizer's EOS token", info["eos"])):
        if t:
            return t[0], t[1], what
    raise Fail(f"tokenizer {info['json']} names no BOS or EOS token (tokenizer_config.json, special tokens, "
               "post-processor); give the document separator with --sep TOKEN")
