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
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_common as H  # noqa: E402

IGNORED_SUFFIX = ("rotary_emb.inv_freq",)      # buffers some old exports carry: recomputed, never stored


def rope_dict(c):
    """rope_scaling, or transformers 5's rope_parameters (which also holds rope_theta)."""
    rs = c.get("rope_scaling") or c.get("rope_parameters") or {}
    if not isinstance(rs, dict):
        raise H.Fail(f"config.json: rope_scaling is not an object ({rs!r})")
    return rs


def unsupported(c):
    """The features of config.json ringlm does not implement, as 'key = value' strings."""
    bad = []
    arch = c.get("architectures") or ["LlamaForCausalLM"]
    if c.get("model_type", "llama") != "llama" or arch != ["LlamaForCausalLM"]:
        bad.append(f"architecture {'/'.join(arch)} (model_type {c.get('model_type')}; ringlm is LlamaForCausalLM)")
    for k in ("attention_bias", "mlp_bias", "use_sliding_window", "use_qk_norm"):
        if c.get(k):
            bad.append(f"{k} = true")
    if c.get("sliding_window") is not None:
        bad.append(f"sliding_window = {c['sliding_window']}")
    act = c.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        bad.append(f"hidden_act = {act}")
    if c.get("partial_rotary_factor", 1.0) != 1.0:
        bad.append(f"partial_rotary_factor = {c['partial_rotary_factor']}")
    if c.get("quantization_config"):
        bad.append("quantization_config (quantized weights)")
    C, nh = c.get("hidden_size"), c.get("num_attention_heads")
    if isinstance(C, int) and isinstance(nh, int) and nh > 0:
        hd = c.get("head_dim")
        if hd is not None and hd != C // nh or C % nh:
            bad.append(f"head_dim = {hd if hd is not None else C / nh} (ringlm needs hidden_size / num_attention_heads = {C // nh})")
    rs = rope_dict(c)
    kind = rs.get("rope_type", rs.get("type", "default")) if rs else "default"
    if kind not in ("default", "linear", "yarn"):
        bad.append(f"rope_scaling type {kind}")
    if kind in ("linear", "yarn") and (isinstance(rs.get("factor"), bool) or not isinstance(rs.get("factor"), (int, float))
                                       or not rs["factor"] > 0):
        bad.append(f"{kind} factor = {rs.get('factor')!r} (a positive number is needed)")
    elif kind == "yarn":
        f = float(rs["factor"])
        if f < 1:
            bad.append(f"yarn factor {f} < 1")
        af = rs.get("attention_factor")
        if af is not None and abs(af - (0.1 * math.log(f) + 1.0)) > 1e-6:
            bad.append(f"yarn attention_factor = {af} (ringlm uses 0.1 ln s + 1)")
        if (rs.get("beta_fast") or 32) != 32 or (rs.get("beta_slow") or 1) != 1:
            bad.append(f"yarn beta_fast/beta_slow = {rs.get('beta_fast')}/{rs.get('beta_slow')} (ringlm uses 32/1)")
        for k in ("mscale", "mscale_all_dim"):
            if rs.get(k):
                bad.append(f"yarn {k} = {rs[k]}")
        if rs.get("truncate") is False:
            bad.append("yarn truncate = false")
    return bad


def ringlm_config(c, seed, notes):
    """Every key of the C table: model keys from config.json, the rest the C defaults; remarks go to notes."""
    def need(k):
        if not isinstance(c.get(k), int) or c[k] <= 0:
            raise H.Fail(f"config.json: '{k}' is missing or not a positive integer")
        return c[k]
    types = {n: t for n, t, _, _ in H.config_table()}
    cfg = H.default_config()
    nh = need("num_attention_heads")
    kv = c.get("num_key_value_heads") or nh
    if nh % kv:
        raise H.Fail(f"config.json: num_attention_heads {nh} is not divisible by num_key_value_heads {kv}")
    if (need("hidden_size") // nh) % 2:
        raise H.Fail(f"config.json: head_dim {c['hidden_size'] // nh} is odd (RoPE needs an even head_dim)")
    maxpos = need("max_position_embeddings")
    rs = rope_dict(c)
    kind = rs.get("rope_type", rs.get("type", "default")) if rs else "default"
    theta = c.get("rope_theta", rs.get("rope_theta", 10000.0))
    vals = {"vocab_size": need("vocab_size"), "d_model": c["hidden_size"], "n_layer": need("num_hidden_layers"),
            "n_head": nh, "n_kv_head": kv, "d_ff": need("intermediate_size"), "max_seq_len": maxpos,
            "rope_theta": theta, "norm_eps": c.get("rms_norm_eps", 1e-6),
            "tie_embeddings": 1 if c.get("tie_word_embeddings", False) else 0,
            "init_std": c.get("initializer_range", 0.02), "rope_scaling": "none"}
    if kind == "linear":
        vals.update(rope_scaling="linear", rope_factor=float(rs["factor"]))
    elif kind == "yarn":
        s = float(rs["factor"])
        orig = rs.get("original_max_position_embeddings")
        if orig is None:                      # every release: max_position_embeddings is the original length
            orig, maxpos = maxpos, int(math.ceil(s * maxpos))
        else:
            if not isinstance(orig, int) or orig <= 0:
                raise H.Fail(f"config.json: rope_scaling original_max_position_embeddings {orig!r} is not a positive integer")
            if maxpos != int(round(s * orig)):
                notes.append(f"max_position_embeddings {maxpos} is not factor x original = {s:g} x {orig}: imported as "
                             f"transformers >= 4.56 reads it (4.51-4.55 use the factor {maxpos / orig:g}, 4.45-4.50 "
                             f"the original length {maxpos})")
            maxpos = max(maxpos, int(math.ceil(s * orig)))
        vals.update(rope_scaling="yarn", rope_factor=s, rope_original_max_seq_len=int(orig), max_seq_len=maxpos)
    if seed is not None:
        vals["seed"] = seed
    for k, v in vals.items():
        cfg[k] = H.canon(types[k], v)
    if int(cfg["seq_len"]) > int(cfg["max_seq_len"]):
        cfg["seq_len"] = cfg["max_seq_len"]
    for k in ("rope_theta", "norm_eps", "rope_factor"):
        if not float(cfg[k]) > 0 or (k == "rope_theta" and float(cfg[k]) <= 1):
            raise H.Fail(f"config.json: {k} = {cfg[k]} is out of range")
    return cfg


def load_tensors(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.isfile(idx):
        try:
            files = sorted(set(json.load(open(idx))["weight_map"].values()))
        except (ValueError, KeyError, AttributeError):
            raise H.Fail(f"'{idx}' is not a safetensors index (no weight_map)")
    elif os.path.isfile(os.path.join(d, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        other = [n for n in os.listdir(d) if n.endswith((".bin", ".pt", ".pth", ".gguf"))]
        raise H.Fail(f"'{d}' has no model.safetensors or model.safetensors.index.json"
                     + (f" ({other[0]} found: hf_import reads safetensors only)" if other else ""))
    out = {}
    for fn in files:
        p = os.path.join(d, fn)
        if not os.path.isfile(p):
            raise H.Fail(f"'{p}' named by the index does not exist")
        out.update(H.st_read(p))
    return out


def main():
    ap = H.ArgParser(prog="tools/hf_import", description=__doc__.split("\n\n")[0])
    ap.add_argument("hf_dir", help="a local directory with config.json and safetensors weights")
    ap.add_argument("--out", required=True, help="the checkpoint file to write (e.g. imported.h5)")
    ap.add_argument("--seed", type=int, help="the checkpoint's seed key (data order of a resumed run)")
    ap.add_argument("--force", action="store_true", help="replace an existing --out")
    a = ap.parse_args()
    d = a.hf_dir
    if not os.path.isdir(d):
        raise H.Fail(f"'{d}' is not a directory (hf_import reads a local directory; it never downloads a hub id)")
    try:
        c = json.load(open(os.path.join(d, "config.json"), encoding="utf-8"))
    except OSError:
        raise H.Fail(f"'{d}' has no config.json")
    except ValueError as e:
        raise H.Fail(f"'{d}/config.json' is not JSON: {e}")
    bad = unsupported(c)
    if bad:
        raise H.Fail(f"'{d}': not supported by ringlm: {'; '.join(bad)}")
    notes = []
    cfg = ringlm_config(c, a.seed, notes)
    if os.path.exists(a.out) and not a.force:
        raise H.Fail(f"'{a.out}' already exists; pass --force to replace it")

    st = load_tensors(d)
    want = H.tensor_shapes(cfg)
    biases = sorted(n for n in st if n.endswith(".bias"))
    if biases:
        raise H.Fail(f"'{d}': not supported by ringlm: bias tensors ({', '.join(biases[:3])}"
                     + (", ..." if len(biases) > 3 else "") + ")")
    if cfg["tie_embeddings"] == "1" and "lm_head.weight" in st:
        emb = st.get("model.embed_tokens.weight")
        same = emb is not None and np.array_equal(st["lm_head.weight"].load(), emb.load())
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
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    H.write_ckpt(a.out, cfg, {n: st[n] for n in want}, {"imported_from": os.path.abspath(d)})
    nparam = sum(int(np.prod(s)) for s in want.values())
    print(f"hf_import: {d} -> {a.out}: {len(want)} tensors, {nparam / 1e6:.2f}M parameters, step 0, no optimizer "
          f"state; d_model {cfg['d_model']}, n_layer {cfg['n_layer']}, heads {cfg['n_head']}/{cfg['n_kv_head']}, "
          f"vocab {cfg['vocab_size']}, rope {cfg['rope_scaling']}"
          + (f" x{cfg['rope_factor']} from {cfg['rope_original_max_seq_len']}" if cfg["rope_scaling"] == "yarn" else "")
          + (f" x{cfg['rope_factor']}" if cfg["rope_scaling"] == "linear" else "")
          + f", max_seq_len {cfg['max_seq_len']}" + "".join(f"; {n}" for n in notes))
    return 0


if __name__ == "__main__":
    H.main_guard(main)
