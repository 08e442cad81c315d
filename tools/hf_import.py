#!/usr/bin/python3
"""hf_import — a local Hugging Face Llama directory (config.json + model.safetensors, or sharded with
model.safetensors.index.json) → a ringlm checkpoint at step 0 for `build/train --init_from` and
`build/eval --ckpt`.

  tools/hf_import HF_DIR --out FILE.h5 [--seed N] [--force]

Reads only local files (a hub id is refused: nothing is downloaded) and needs only h5py and numpy. Writes a
model-only checkpoint (no /optimizer group; step, data cursor and AdamW step 0) with every key of the C config
table in /config: the model keys from config.json (hidden_size → d_model, intermediate_size → d_ff,
num_hidden_layers → n_layer, num_attention_heads → n_head, num_key_value_heads → n_kv_head, vocab_size,
rms_norm_eps → norm_eps, rope_theta, tie_word_embeddings → tie_embeddings, initializer_range → init_std,
max_position_embeddings → max_seq_len, rope_scaling (or transformers 5's rope_parameters) → rope_scaling /
rope_factor / rope_original_max_seq_len), the training keys the C defaults (seq_len at most max_seq_len).
F16/BF16/F32 tensors convert to fp32 exactly (F64 is rounded).
YaRN keys are read as transformers 4.56 and later read them: factor s as given, original_max_position_embeddings
as the original length L, max_seq_len = max(max_position_embeddings, s·L); without
original_max_position_embeddings, max_position_embeddings is L (every release agrees) and max_seq_len = s·L.
When max_position_embeddings differs from s·L the summary notes that transformers 4.51–4.55 use the factor
max_position_embeddings / L instead, and 4.45–4.50 the original length max_position_embeddings.
Refused, with one line naming them: architectures other than LlamaForCausalLM, attention/MLP biases, sliding
windows, rope types other than default/linear/yarn (and YaRN variants with another attention factor,
beta_fast/beta_slow or mscale), a head_dim other than hidden_size / heads, activations other than silu,
partial rotary embeddings, quantized weights, and tensors ringlm has no place for.
Refused before anything is written, in one line naming the file and the field: a config.json, safetensors
header or model.safetensors.index.json that is malformed (a field of the wrong type, out of range, or not finite;
numbers given as strings or booleans; a shape whose product overflows), safetensors byte ranges that leave the
file, overlap, leave gaps or do not match dtype x shape (the format forbids them), tensors named twice or not
where the index says, weights that are inf or NaN (or F64 values that overflow fp32), and config values every
ringlm program would refuse (model/config.c's limits: e.g. rope_theta must be a finite fp32 number > 1,
max_position_embeddings at most 2^31 - 1 and at least 2, head_dim even and at most 2048). The checkpoint is
written as FILE.h5.tmp (when the free space holds it), read back in full (every checksum) and renamed; a failed
write (disk full, read-only) is one line and leaves no FILE.h5.tmp.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_common as H  # noqa: E402

IGNORED_SUFFIX = ("rotary_emb.inv_freq",)      # buffers some old exports carry: recomputed, never stored
BOOL_FEATURES = ("attention_bias", "mlp_bias", "use_sliding_window", "use_qk_norm")


def rope_fields(c):
    """(Fields of rope_scaling, or transformers 5's rope_parameters (which also holds rope_theta), or None; type)."""
    for key in ("rope_scaling", "rope_parameters"):
        rs = c.sub(key, None)
        if rs is not None and rs.obj:
            t = rs.str("rope_type", None)
            t = t if t is not None else rs.str("type", "default")
            return rs, t
    return None, "default"


def unsupported(c):
    """The features of config.json ringlm does not implement, as 'key = value' strings (fields of the wrong type
    are refused on the spot, naming them)."""
    bad = []
    arch = c.list("architectures", ["LlamaForCausalLM"])
    if not all(isinstance(a, str) for a in arch):
        c.fail("architectures", "a list of strings", arch)
    mt = c.str("model_type", "llama")
    if mt != "llama" or arch != ["LlamaForCausalLM"]:
        bad.append(f"architecture {'/'.join(arch)} (model_type {mt}; ringlm is LlamaForCausalLM)")
    for k in BOOL_FEATURES:
        if c.bool(k, False):
            bad.append(f"{k} = true")
    if c.has("sliding_window"):
        bad.append(f"sliding_window = {H.show(c.raw('sliding_window'))}")
    act = c.str("hidden_act", "silu")
    if act not in ("silu", "swish"):
        bad.append(f"hidden_act = {act}")
    prf = c.num("partial_rotary_factor", 1.0, fp32=False)
    if prf != 1.0:
        bad.append(f"partial_rotary_factor = {prf}")
    if c.raw("quantization_config"):
        bad.append("quantization_config (quantized weights)")
    C, nh = c.int("hidden_size"), c.int("num_attention_heads")
    hd = c.int("head_dim", None)
    if hd is not None and hd != C // nh or C % nh:
        bad.append(f"head_dim = {hd if hd is not None else C / nh} (ringlm needs hidden_size / num_attention_heads = {C // nh})")
    rs, kind = rope_fields(c)
    if kind not in ("default", "linear", "yarn"):
        bad.append(f"rope_scaling type {kind}")
    if kind in ("linear", "yarn"):
        f = float(rs.num("factor", gt=0))
        if kind == "yarn":
            if f < 1:
                bad.append(f"yarn factor {f} < 1")
            af = rs.num("attention_factor", None, fp32=False)
            if af is not None and abs(af - (0.1 * math.log(f) + 1.0)) > 1e-6:
                bad.append(f"yarn attention_factor = {af} (ringlm uses 0.1 ln s + 1)")
            bf, bs = rs.num("beta_fast", None, fp32=False), rs.num("beta_slow", None, fp32=False)
            if (bf or 32) != 32 or (bs or 1) != 1:
                bad.append(f"yarn beta_fast/beta_slow = {bf}/{bs} (ringlm uses 32/1)")
            for k in ("mscale", "mscale_all_dim"):
                v = rs.num(k, None, fp32=False)
                if v:
                    bad.append(f"yarn {k} = {v}")
            if rs.bool("truncate", None) is False:
                bad.append("yarn truncate = false")
    return bad


def ringlm_config(c, seed, notes, where):
    """Every key of the C table: model keys from config.json, the rest the C defaults; remarks go to notes. The
    result passes model/config.c's config_validate (checked here with the same limits)."""
    types = {n: t for n, t, _, _ in H.config_table()}
    cfg = H.default_config()
    nh = c.int("num_attention_heads")
    kv = c.int("num_key_value_heads", nh)
    if nh % kv:
        raise H.Fail(f"{where}: num_attention_heads {nh} is not divisible by num_key_value_heads {kv}")
    C = c.int("hidden_size")
    hd = C // nh
    if hd % 2:
        raise H.Fail(f"{where}: head_dim {hd} is odd (RoPE needs an even head_dim)")
    if hd > 2048:
        raise H.Fail(f"{where}: head_dim = hidden_size / num_attention_heads = {hd} exceeds ringlm's limit of 2048")
    maxpos = c.int("max_position_embeddings")
    rs, kind = rope_fields(c)
    theta = c.num("rope_theta", None, gt=1)
    if theta is None:
        theta = rs.num("rope_theta", 10000.0, gt=1) if rs is not None else 10000.0
    vals = {"vocab_size": c.int("vocab_size"), "d_model": C, "n_layer": c.int("num_hidden_layers"),
            "n_head": nh, "n_kv_head": kv, "d_ff": c.int("intermediate_size"), "max_seq_len": maxpos,
            "rope_theta": theta, "norm_eps": c.num("rms_norm_eps", 1e-6, gt=0),
            "tie_embeddings": 1 if c.bool("tie_word_embeddings", False) else 0,
            "init_std": c.num("initializer_range", 0.02, gt=0), "rope_scaling": "none"}
    if kind == "linear":
        vals.update(rope_scaling="linear", rope_factor=float(rs.num("factor", gt=0)))
    elif kind == "yarn":
        s = float(rs.num("factor", gt=0))
        orig = rs.int("original_max_position_embeddings", None)
        if orig is None:                      # every release: max_position_embeddings is the original length
            orig = maxpos
            maxpos = s * maxpos
        else:
            if maxpos != int(round(s * orig)):
                notes.append(f"max_position_embeddings {maxpos} is not factor x original = {s:g} x {orig}: imported as "
                             f"transformers >= 4.56 reads it (4.51-4.55 use the factor {maxpos / orig:g}, 4.45-4.50 "
                             f"the original length {maxpos})")
            maxpos = max(maxpos, s * orig)
        if maxpos > H.INT32_MAX:
            raise H.Fail(f"{where}: rope_scaling factor {s:g} x original length {orig} = {maxpos:.4g} positions exceeds "
                         f"ringlm's max_seq_len limit of {H.INT32_MAX}")
        maxpos = int(math.ceil(maxpos))
        vals.update(rope_scaling="yarn", rope_factor=s, rope_original_max_seq_len=int(orig), max_seq_len=maxpos)
    if maxpos < 2:
        raise H.Fail(f"{where}: max_position_embeddings = {maxpos}: ringlm needs at least 2 positions (its training "
                     "sequences have an even length)")
    if seed is not None:
        vals["seed"] = seed
    for k, v in vals.items():
        cfg[k] = H.canon(types[k], v)
    cfg["seq_len"] = str(min(int(cfg["seq_len"]), maxpos - maxpos % 2))
    H.check_config(cfg, f"{where} imports as a config that ringlm refuses")
    return cfg


def index_files(d):
    """(file names, weight_map or None) of the weights: model.safetensors.index.json's files, or model.safetensors."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.isfile(idx):
        where = f"'{idx}'"
        j = H.Fields(H.load_json(idx, where), where)
        wm = j.dict("weight_map")
        if not wm:
            raise H.Fail(f"{where}: 'weight_map' is empty")
        for name, fn in wm.items():
            if not isinstance(fn, str):
                raise H.Fail(f"{where}: 'weight_map.{name[:80]}' must be a file name (a string), not {H.show(fn)} ({H.kind(fn)})")
            if not fn or fn in (".", "..") or "/" in fn or "\\" in fn or "\0" in fn:
                raise H.Fail(f"{where}: 'weight_map.{name[:80]}' = {H.show(fn)} is not the name of a file in '{d}'")
        return sorted(set(wm.values())), wm
    if os.path.isfile(os.path.join(d, "model.safetensors")):
        return ["model.safetensors"], None
    try:
        other = [n for n in os.listdir(d) if n.endswith((".bin", ".pt", ".pth", ".gguf"))]
    except OSError:
        other = []
    raise H.Fail(f"'{d}' has no model.safetensors or model.safetensors.index.json"
                 + (f" ({other[0]} found: hf_import reads safetensors only)" if other else ""))


def load_tensors(d):
    files, wm = index_files(d)
    out, origin = {}, {}
    for fn in files:
        p = os.path.join(d, fn)
        if not os.path.isfile(p):
            raise H.Fail(f"'{p}' named by the index does not exist")
        for n, t in H.st_read(p).items():
            if n in out:
                raise H.Fail(f"'{d}': tensor '{n}' is stored twice, in '{origin[n]}' and in '{fn}'")
            out[n], origin[n] = t, fn
    if wm is not None:
        for n, fn in origin.items():
            if wm.get(n) != fn:
                raise H.Fail(f"'{os.path.join(d, fn)}' holds tensor '{n}', which model.safetensors.index.json "
                             + (f"places in '{wm[n]}'" if n in wm else "does not name"))
        for n, fn in wm.items():
            if n not in out:
                raise H.Fail(f"model.safetensors.index.json places tensor '{n}' in '{fn}', which does not hold it")
    return out


def check_out(out, force):
    """--out: refused when it exists (without --force), is a directory, or lies under something that is not one."""
    if os.path.isdir(out):
        raise H.Fail(f"--out '{out}' is a directory (give the checkpoint file to write, e.g. {os.path.join(out, 'imported.h5')})")
    if os.path.lexists(out) and not force:
        raise H.Fail(f"'{out}' already exists; pass --force to replace it")
    p = os.path.dirname(os.path.abspath(out))
    while not os.path.lexists(p):
        p = os.path.dirname(p)
    if not os.path.isdir(p):
        raise H.Fail(f"cannot write '{out}': '{p}' is not a directory")


def main():
    ap = H.ArgParser(prog="tools/hf_import", description=__doc__.split("\n\n")[0])
    ap.add_argument("hf_dir", help="a local directory with config.json and safetensors weights")
    ap.add_argument("--out", required=True, help="the checkpoint file to write (e.g. imported.h5)")
    ap.add_argument("--seed", type=int, help="the checkpoint's seed key (data order of a resumed run)")
    ap.add_argument("--force", action="store_true", help="replace an existing --out")
    a = ap.parse_args()
    d = a.hf_dir
    if a.seed is not None and not -2**63 <= a.seed <= H.INT64_MAX:
        raise H.Fail(f"--seed {a.seed} is not a 64-bit integer")
    if not os.path.isdir(d):
        raise H.Fail(f"'{d}' is not a directory (hf_import reads a local directory; it never downloads a hub id)")
    cp = os.path.join(d, "config.json")
    if not os.path.isfile(cp):
        raise H.Fail(f"'{d}' has no config.json")
    where = f"'{cp}'"
    c = H.Fields(H.load_json(cp, where, 16 << 20), where)
    bad = unsupported(c)
    if bad:
        raise H.Fail(f"'{d}': not supported by ringlm: {'; '.join(bad)}")
    notes = []
    cfg = ringlm_config(c, a.seed, notes, where)
    check_out(a.out, a.force)

    st = load_tensors(d)
    biases = sorted(n for n in st if n.endswith(".bias"))
    if biases:
        raise H.Fail(f"'{d}': not supported by ringlm: bias tensors ({', '.join(biases[:3])}"
                     + (", ..." if len(biases) > 3 else "") + ")")
    L = int(cfg["n_layer"])
    if 9 * L + 2 > len(st) + 1:               # before building the table of a huge num_hidden_layers
        raise H.Fail(f"'{d}': num_hidden_layers = {L} needs at least {9 * L + 2} tensors, the files hold {len(st)}")
    want = H.tensor_shapes(cfg)
    if cfg["tie_embeddings"] == "1" and "lm_head.weight" in st:
        emb = st.get("model.embed_tokens.weight")
        same = emb is not None and emb.shape == st["lm_head.weight"].shape and np.array_equal(st["lm_head.weight"].load(), emb.load())
        notes.append("lm_head.weight dropped (tied head)" + ("" if same else
                     ", it differed from the embedding: transformers ties it to the embedding on load as well"))
        del st["lm_head.weight"]
    extra = sorted(n for n in st if n not in want and not n.endswith(IGNORED_SUFFIX))
    missing = sorted(n for n in want if n not in st)
    if extra:
        raise H.Fail(f"'{d}': not supported by ringlm: tensors {', '.join(extra[:4])}" + (", ..." if len(extra) > 4 else ""))
    if missing:
        raise H.Fail(f"'{d}': missing tensors {', '.join(missing[:4])}" + (", ..." if len(missing) > 4 else ""))
    for n, shape in want.items():
        if tuple(st[n].shape) != shape:
            raise H.Fail(f"'{d}': {n} has shape {list(st[n].shape)}, config.json implies {list(shape)}")
    for n in want:                              # before anything is written: ringlm refuses non-finite weights
        nan, over = H.st_nonfinite(st[n])
        if nan or over:
            raise H.Fail(f"{st[n].where} holds " + " and ".join(x for x in (
                f"{nan} inf or NaN values" if nan else "", f"{over} values beyond the fp32 range (they would become inf)"
                if over else "") if x) + "; ringlm refuses non-finite weights, nothing was written")
    H.make_dirs(os.path.dirname(os.path.abspath(a.out)), "the directory of --out")
    H.write_ckpt(a.out, cfg, {n: st[n] for n in want}, {"imported_from": os.path.abspath(d)})
    nparam = sum(H.numel(s) for s in want.values())
    print(f"hf_import: {d} -> {a.out}: {len(want)} tensors, {nparam / 1e6:.2f}M parameters, step 0, no optimizer "
          f"state; d_model {cfg['d_model']}, n_layer {cfg['n_layer']}, heads {cfg['n_head']}/{cfg['n_kv_head']}, "
          f"vocab {cfg['vocab_size']}, rope {cfg['rope_scaling']}"
          + (f" x{cfg['rope_factor']} from {cfg['rope_original_max_seq_len']}" if cfg["rope_scaling"] == "yarn" else "")
          + (f" x{cfg['rope_factor']}" if cfg["rope_scaling"] == "linear" else "")
          + f", max_seq_len {cfg['max_seq_len']}" + "".join(f"; {n}" for n in notes))
    return 0


if __name__ == "__main__":
    H.main_guard(main, "hf_import")
