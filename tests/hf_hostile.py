#!/usr/bin/env python3
"""hf_hostile.py — the Python side of tests/test_hf_hostile.sh: hostile Hugging Face files for tools/hf_import,
tools/prepare_hf and tools/hf_export. Needs numpy; `fuzz` with a tokenizer and the `tokenizers` commands need the
tokenizers library (build/hfenv). The files are written here by code of its own (safetensors included), not by
the tools under test.

  hf_hostile.py model DIR [--dtype F32|F16|BF16|F64] [--shards N] [--seed S]
        a random tiny HF Llama directory (config.json, model.safetensors or N shards + model.safetensors.index.json)
  hf_hostile.py cases OUT MODEL SHARDED
        writes one directory per hostile case under OUT and prints 'name<TAB>dir<TAB>pattern' per case: hf_import
        must refuse DIR in one line containing every '|'-separated part of pattern, writing nothing
  hf_hostile.py tokcases OUT TOKDIR
        the same for tokenizer files (tokenizer.json, tokenizer_config.json), for hf_export --tokenizer / prepare_hf
  hf_hostile.py fuzz SEED N MODEL SHARDED TOKDIR CORPUS WORK [CKPT_CHECK...]
        N seeded mutants (bytes set, bits flipped, runs overwritten, truncations, JSON type swaps) of the safetensors
        header, model.safetensors.index.json, config.json, tokenizer.json and tokenizer_config.json, each run through
        hf_import or prepare_hf in a forked child of this process (the tools imported once): every run must exit 0
        or 1 within 20 s, print nothing on stderr when it succeeds and exactly one line 'hf_import: ...' (or
        'prepare_hf: ...') when it refuses, never a traceback or 'internal error', and leave no temporary file;
        every checkpoint an accepted mutant gives must be accepted by CKPT_CHECK (a command run with the checkpoint
        appended, e.g. build/sample ... --ckpt) as well. Prints ok/FAIL lines and "N passed, N failed".
  hf_hostile.py tokenizers OUT FILE...
        trains small tokenizers of other families locally: l3 (Llama 3 style regex split + byte-level BPE), l2legacy
        (Llama 2's normalizer: prepend and replace spaces by U+2581, no pre-tokenizer, byte fallback), meta (Unigram
        with Metaspace), bert (WordPiece with the BERT normalizer and pre-tokenizer)
  hf_hostile.py whole NAME SHARD_DIR TOKENIZER TEXTFILE
        the single document of SHARD_DIR's train shards equals TEXTFILE's text encoded whole (no special tokens)
"""
import glob
import json
import math
import os
import random
import re
import shutil
import struct
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(os.path.dirname(HERE), "tools")
passed = failed = 0


def check(name, good, detail=""):
    global passed, failed
    if good:
        passed += 1
    else:
        failed += 1
    print(f"{'ok  ' if good else 'FAIL'} {name}" + (f": {detail}" if detail else ""), flush=True)


# ----------------------------------------------------------------------------------------------- files
ST = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def st_bytes(tensors, metadata=None, header=None):
    """safetensors bytes: tensors [(name, dtype name, array in that dtype (BF16: uint16 bits))]; header(h) may
    change the header object before it is written (its data is written as laid out before)."""
    h, off, blobs = {}, 0, []
    for name, dt, a in tensors:
        b = np.ascontiguousarray(a).tobytes()
        h[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h["__metadata__"] = metadata or {"format": "pt"}
    if header:
        h = header(h)
    hb = h if isinstance(h, bytes) else json.dumps(h).encode()
    hb += b" " * (-len(hb) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(blobs)


def shapes(V, C, L, nh, kv, F, tied=False):
    hd = C // nh
    s = [("model.embed_tokens.weight", (V, C))]
    for i in range(L):
        p = f"model.layers.{i}."
        s += [(p + "input_layernorm.weight", (C,)), (p + "self_attn.q_proj.weight", (nh * hd, C)),
              (p + "self_attn.k_proj.weight", (kv * hd, C)), (p + "self_attn.v_proj.weight", (kv * hd, C)),
              (p + "self_attn.o_proj.weight", (C, nh * hd)), (p + "post_attention_layernorm.weight", (C,)),
              (p + "mlp.gate_proj.weight", (F, C)), (p + "mlp.up_proj.weight", (F, C)), (p + "mlp.down_proj.weight", (C, F))]
    s.append(("model.norm.weight", (C,)))
    if not tied:
        s.append(("lm_head.weight", (V, C)))
    return s


def as_dtype(a, dt):
    if dt == "BF16":
        u = a.astype(np.float32).view(np.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return a.astype(ST[dt])


def cmd_model(d, *opts):
    o = dict(zip(opts[::2], opts[1::2]))
    dt, nshards, seed = o.get("--dtype", "F32"), int(o.get("--shards", 1)), int(o.get("--seed", 1))
    V, C, L, nh, kv, F = 64, 32, 2, 4, 2, 64
    rng = np.random.default_rng(seed)
    os.makedirs(d, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V, "hidden_size": C,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": nh, "num_key_value_heads": kv,
           "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "hidden_act": "silu", "rope_scaling": None, "initializer_range": 0.02, "torch_dtype": "float32"}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=1)
    ts = [(n, dt, as_dtype(rng.standard_normal(s).astype(np.float32) * 0.05 + (1.0 if "norm" in n else 0.0), dt))
          for n, s in shapes(V, C, L, nh, kv, F)]
    if nshards == 1:
        open(os.path.join(d, "model.safetensors"), "wb").write(st_bytes(ts))
        return
    per = math.ceil(len(ts) / nshards)
    wmap = {}
    for i in range(nshards):
        fn = f"model-{i + 1:05d}-of-{nshards:05d}.safetensors"
        part = ts[i * per:(i + 1) * per]
        open(os.path.join(d, fn), "wb").write(st_bytes(part))
        wmap.update({n: fn for n, _, _ in part})
    json.dump({"metadata": {"total_size": 0}, "weight_map": wmap}, open(os.path.join(d, "model.safetensors.index.json"), "w"))


def read_st(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n]), data[8 + n:]


def write_st_raw(path, header, body):
    hb = header if isinstance(header, bytes) else json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + body)


# ----------------------------------------------------------------------------------------------- cases
def cmd_cases(out, model, sharded):
    """Hostile variants of MODEL / SHARDED for items 9-11 of issue 23: (name, how, pattern)."""
    rows = []

    def case(name, pattern, base=model):
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        rows.append((name, d, pattern))
        return d

    def cfg(name, pattern, fn=None, raw=None):
        d = case(name, pattern)
        p = os.path.join(d, "config.json")
        if raw is not None:
            open(p, "wb").write(raw)
            return
        c = json.load(open(p))
        fn(c)                                 # (changes c in place)
        open(p, "w").write(json.dumps(c, allow_nan=True))

    def st(name, pattern, header=None, body=None, raw=None):
        d = case(name, pattern)
        p = os.path.join(d, "model.safetensors")
        if raw is not None:
            data = open(p, "rb").read()
            open(p, "wb").write(raw(data))
            return
        h, b = read_st(p)
        if header:
            h = header(h)
            if h is None:
                return
        write_st_raw(p, h, body(b) if body else b)

    def idx(name, pattern, fn):
        d = case(name, pattern, sharded)
        p = os.path.join(d, "model.safetensors.index.json")
        j = json.load(open(p))
        r = fn(j, d)
        open(p, "w").write(json.dumps(j if r is None else r))

    def put(c, k, v):
        c[k] = v

    # config.json: structure and types (item 9)
    cfg("config_list", "config.json' must be a JSON object, not [1, 2] (a list)", raw=b"[1, 2]")
    cfg("config_null", "config.json' must be a JSON object, not null", raw=b"null")
    cfg("config_not_json", "config.json' is not JSON", raw=b'{"hidden_size": 32,')
    cfg("config_not_utf8", "config.json' is not UTF-8 text", raw=b'{"model_type": "ll\xffama"}')
    cfg("config_nested", "config.json' is nested too deeply", raw=b"[" * 200000 + b"]" * 200000)
    cfg("config_duplicate_key", "config.json' is not valid: duplicate key 'hidden_size'",
        raw=open(os.path.join(model, "config.json"), "rb").read().replace(b'"hidden_size": 32', b'"hidden_size": 32, "hidden_size": 64'))
    cfg("heads_string", "'num_attention_heads' must be an integer in [1, 2147483647], not \"4\" (a string)",
        lambda c: put(c, "num_attention_heads", "4"))
    cfg("heads_bool", "'num_attention_heads' must be an integer in [1, 2147483647], not true (a boolean)",
        lambda c: put(c, "num_attention_heads", True))
    cfg("kv_heads_string", "'num_key_value_heads' must be an integer in [1, 2147483647], not \"2\" (a string)",
        lambda c: put(c, "num_key_value_heads", "2"))
    cfg("hidden_float", "'hidden_size' must be an integer in [1, 2147483647], not 32.5 (a number)",
        lambda c: put(c, "hidden_size", 32.5))
    cfg("hidden_missing", "'hidden_size' is missing; it must be an integer", lambda c: c.pop("hidden_size"))
    cfg("vocab_huge", "'vocab_size' must be an integer in [1, 2147483647], not 1099511627776", lambda c: put(c, "vocab_size", 2**40))
    cfg("vocab_zero", "'vocab_size' must be an integer in [1, 2147483647], not 0", lambda c: put(c, "vocab_size", 0))
    cfg("layers_huge", "num_hidden_layers = 100000000 needs at least 900000002 tensors, the files hold 21",
        lambda c: put(c, "num_hidden_layers", 100000000))
    cfg("eps_string", "'rms_norm_eps' must be a finite number > 0", lambda c: put(c, "rms_norm_eps", "1e-5"))
    cfg("eps_underflow", "'rms_norm_eps' must be a finite number > 0, not 1e-50 (its fp32 value is 0)", lambda c: put(c, "rms_norm_eps", 1e-50))
    cfg("tie_string", "'tie_word_embeddings' must be true or false, not \"yes\" (a string)", lambda c: put(c, "tie_word_embeddings", "yes"))
    cfg("arch_string", "'architectures' must be a list, not \"LlamaForCausalLM\" (a string)",
        lambda c: put(c, "architectures", "LlamaForCausalLM"))
    cfg("arch_numbers", "'architectures' must be a list of strings", lambda c: put(c, "architectures", [1]))
    cfg("act_number", "'hidden_act' must be a string, not 7 (an integer)", lambda c: put(c, "hidden_act", 7))
    cfg("init_negative", "'initializer_range' must be a finite number > 0", lambda c: put(c, "initializer_range", -1))
    cfg("rope_list", "'rope_scaling' must be an object, not [\"yarn\", 4] (a list)", lambda c: put(c, "rope_scaling", ["yarn", 4]))
    cfg("rope_type_number", "'rope_scaling.rope_type' must be a string, not 4 (an integer)",
        lambda c: put(c, "rope_scaling", {"rope_type": 4, "factor": 2.0}))
    cfg("yarn_factor_string", "'rope_scaling.factor' must be a finite number > 0|not \"4\" (a string)",
        lambda c: put(c, "rope_scaling", {"rope_type": "yarn", "factor": "4"}))
    cfg("yarn_factor_inf", "'rope_scaling.factor' must be a finite number > 0|not Infinity",
        lambda c: put(c, "rope_scaling", {"rope_type": "yarn", "factor": math.inf}))
    cfg("yarn_factor_absurd", "rope_scaling factor 1e+30 x original length 4096|exceeds ringlm's max_seq_len limit of 2147483647",
        lambda c: put(c, "rope_scaling", {"rope_type": "yarn", "factor": 1e30, "original_max_position_embeddings": 4096}))
    cfg("yarn_orig_bool", "'rope_scaling.original_max_position_embeddings' must be an integer in [1, 2147483647], not true",
        lambda c: put(c, "rope_scaling", {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": True}))
    cfg("linear_factor_null", "'rope_scaling.factor' is missing (null)", lambda c: put(c, "rope_scaling", {"type": "linear", "factor": None}))
    cfg("yarn_beta_string", "'rope_scaling.beta_fast' must be a finite number",
        lambda c: put(c, "rope_scaling", {"rope_type": "yarn", "factor": 2.0, "beta_fast": "32"}))
    # config values every ringlm program refuses (item 11)
    cfg("theta_1e39", "'rope_theta' must be a finite number > 1 that fits fp32 (at most 3.4e38 in magnitude), not 1e+39", lambda c: put(c, "rope_theta", 1e39))
    cfg("theta_nan", "'rope_theta' must be a finite number > 1|not NaN", lambda c: put(c, "rope_theta", math.nan))
    cfg("theta_one", "'rope_theta' must be a finite number > 1, not 1 (an integer)", lambda c: put(c, "rope_theta", 1))
    cfg("maxpos_2e40", "'max_position_embeddings' must be an integer in [1, 2147483647], not 1099511627776",
        lambda c: put(c, "max_position_embeddings", 2**40))
    cfg("maxpos_1", "max_position_embeddings = 1: ringlm needs at least 2 positions", lambda c: put(c, "max_position_embeddings", 1))
    cfg("head_dim_4096", "head_dim = hidden_size / num_attention_heads = 4096 exceeds ringlm's limit of 2048",
        lambda c: c.update(hidden_size=8192, num_attention_heads=2, num_key_value_heads=2))
    # safetensors header (item 9)
    st("header_list", "model.safetensors' is not a safetensors file (its header is not a JSON object)", header=lambda h: b"[]")
    st("header_null", "model.safetensors' is not a safetensors file (its header is not a JSON object)", header=lambda h: b"null")
    st("header_not_json", "the safetensors header is not JSON", header=lambda h: b"{\"a\": ")
    st("header_length_huge", "header length 18446744073709551615 exceeds the file's",
       raw=lambda b: struct.pack("<Q", 2**64 - 1) + b[8:])
    st("header_too_short", "is not a safetensors file (too short: 5 bytes)", raw=lambda b: b[:5])
    st("entry_null", "the header entry of tensor 'model.norm.weight' must be an object, not null",
       header=lambda h: {**h, "model.norm.weight": None})
    st("dtype_number", "'model.norm.weight.dtype' must be a string, not 5 (an integer)",
       header=lambda h: {**h, "model.norm.weight": {**h["model.norm.weight"], "dtype": 5}})
    st("dtype_unknown", "tensor 'model.norm.weight' has an unknown dtype \"Q4_K\"",
       header=lambda h: {**h, "model.norm.weight": {**h["model.norm.weight"], "dtype": "Q4_K"}})
    st("dtype_int8", "tensor 'model.norm.weight' has dtype I8; ringlm imports F32, F16, BF16 and F64",
       header=lambda h: {**h, "model.norm.weight": {**h["model.norm.weight"], "dtype": "I8", "shape": [128]}})
    st("shape_strings", "'model.norm.weight.shape' must be a list of non-negative integers, not [\"32\"]",
       header=lambda h: {**h, "model.norm.weight": {**h["model.norm.weight"], "shape": ["32"]}})
    st("shape_negative", "'model.norm.weight.shape' must be a list of non-negative integers, not [-32]",
       header=lambda h: {**h, "model.norm.weight": {**h["model.norm.weight"], "shape": [-32]}})
    st("shape_overflow", "tensor 'model.norm.weight' has shape [4294967296, 4294967296, 4294967296], whose product overflows 64 bits",
       header=lambda h: {**h, "model.norm.weight": {**h["model.norm.weight"], "shape": [2**32] * 3}})
    st("offsets_short", "'model.norm.weight.data_offsets' must be [begin, end], two non-negative integers, not [0]",
       header=lambda h: {**h, "model.norm.weight": {**h["model.norm.weight"], "data_offsets": [0]}})
    st("offsets_reversed", "'model.norm.weight.data_offsets' must be [begin, end] with begin <= end",
       header=lambda h: {**h, "model.norm.weight": {**h["model.norm.weight"],
                                                     "data_offsets": h["model.norm.weight"]["data_offsets"][::-1]}})
    st("offsets_float", "'model.norm.weight.data_offsets' must be [begin, end], two non-negative integers",
       header=lambda h: {**h, "model.norm.weight": {**h["model.norm.weight"],
                                                     "data_offsets": [float(x) for x in h["model.norm.weight"]["data_offsets"]]}})
    st("metadata_list", "'__metadata__' must be an object of strings, not [\"pt\"]", header=lambda h: {**h, "__metadata__": ["pt"]})
    st("metadata_number", "'__metadata__' must be an object of strings", header=lambda h: {**h, "__metadata__": {"format": 1}})
    st("duplicate_tensor", "the safetensors header is not valid: duplicate key 'model.norm.weight'",
       header=lambda h: json.dumps(h).replace('"model.norm.weight":', '"model.norm.weight": {"dtype": "F32", "shape": [0], '
                                               '"data_offsets": [0, 0]}, "model.norm.weight":', 1).encode())
    # safetensors byte ranges (item 10)

    def overlap(h):      # model.norm.weight's bytes taken from the previous layernorm: another tensor's bytes
        a = h["model.layers.1.post_attention_layernorm.weight"]["data_offsets"]
        h["model.norm.weight"]["data_offsets"] = list(a)
        return h
    st("ranges_overlap", "the bytes of tensor|overlap those of|the format forbids overlapping tensors", header=overlap)

    def gap(h):          # the last tensor moved 4 bytes on: a gap before it
        last = max(h.items(), key=lambda kv: kv[1]["data_offsets"][1] if isinstance(kv[1], dict) and "data_offsets" in kv[1] else -1)[0]
        h[last]["data_offsets"] = [x + 4 for x in h[last]["data_offsets"]]
        return h
    st("ranges_gap", "belong to no tensor|the format requires the tensors to cover the data without gaps", header=gap,
       body=lambda b: b + b"\0" * 4)
    st("ranges_trailing", "the data has|the tensors cover|the format requires them to cover the data exactly",
       body=lambda b: b + b"\0" * 64)
    st("ranges_truncated", "(truncated file?)", raw=lambda b: b[:-100])

    def misaligned(h):   # a range 4 bytes longer than dtype x shape
        o = h["model.norm.weight"]["data_offsets"]
        h["model.norm.weight"]["shape"] = [o[1] - o[0] - 4 >> 2]
        return h
    st("ranges_dtype_shape", "tensor 'model.norm.weight' has data_offsets|needs 124 bytes", header=misaligned)

    # model.safetensors.index.json (item 9)
    idx("index_list", "model.safetensors.index.json' must be a JSON object, not [] (a list)", lambda j, d: [])
    idx("index_weight_map_null", "'weight_map' is missing (null)", lambda j, d: {**j, "weight_map": None})
    idx("index_entry_null", "'weight_map.model.norm.weight' must be a file name (a string), not null",
        lambda j, d: j["weight_map"].update({"model.norm.weight": None}))
    idx("index_entry_number", "'weight_map.model.norm.weight' must be a file name (a string), not 3 (an integer)",
        lambda j, d: j["weight_map"].update({"model.norm.weight": 3}))
    idx("index_entry_path", "'weight_map.model.norm.weight' = \"../m/model.safetensors\" is not the name of a file",
        lambda j, d: j["weight_map"].update({"model.norm.weight": "../m/model.safetensors"}))
    idx("index_wrong_file", "holds tensor 'model.norm.weight', which model.safetensors.index.json places in 'model-00001-of-00003.safetensors'",
        lambda j, d: j["weight_map"].update({"model.norm.weight": "model-00001-of-00003.safetensors"}))
    idx("index_missing_tensor", "model.safetensors.index.json places tensor 'model.extra.weight' in 'model-00001-of-00003.safetensors', which does not hold it",
        lambda j, d: j["weight_map"].update({"model.extra.weight": "model-00001-of-00003.safetensors"}))

    def twice(j, d):     # a tensor stored in two shards
        a = os.path.join(d, "model-00001-of-00003.safetensors")
        h, b = read_st(a)
        h2, b2 = read_st(os.path.join(d, "model-00003-of-00003.safetensors"))
        n = "model.norm.weight"
        o = h2[n]["data_offsets"]
        h[n] = {"dtype": "F32", "shape": h2[n]["shape"], "data_offsets": [len(b), len(b) + o[1] - o[0]]}
        write_st_raw(a, h, b + b2[o[0]:o[1]])
    idx("index_tensor_twice", "tensor 'model.norm.weight' is stored twice", twice)
    # non-finite weights (item 11): refused, never 'diverged'
    for dt, val, what in (("F32", math.nan, "1 inf or NaN values"), ("F16", math.inf, "1 inf or NaN values"),
                          ("BF16", math.nan, "1 inf or NaN values"), ("F64", 1e300, "1 values beyond the fp32 range")):
        d = case(f"weights_{dt.lower()}", f"tensor 'model.layers.1.mlp.up_proj.weight' ({dt}) holds {what}|ringlm refuses "
                 "non-finite weights, nothing was written")
        cmd_model(d, "--dtype", dt, "--seed", "3")
        p = os.path.join(d, "model.safetensors")
        h, b = read_st(p)
        o = h["model.layers.1.mlp.up_proj.weight"]["data_offsets"][0]
        v = as_dtype(np.array([val]), dt).tobytes()
        b = b[:o] + v + b[o + len(v):]
        write_st_raw(p, h, b)
    for name, d, pat in rows:
        print(f"{name}\t{d}\t{pat}")


def cmd_tokcases(out, tokdir):
    """Hostile tokenizer files: (name, dir, pattern)."""
    rows = []
    base = json.load(open(os.path.join(tokdir, "tokenizer.json")))

    def case(name, pattern, tj=None, tc=None, raw=None):
        d = os.path.join(out, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        p = os.path.join(d, "tokenizer.json")
        if raw is not None:
            open(p, "wb").write(raw)
        else:
            j = json.loads(json.dumps(base))
            j = tj(j) or j if tj else j
            open(p, "w").write(json.dumps(j))
        if tc is not None:
            open(os.path.join(d, "tokenizer_config.json"), "w").write(json.dumps(tc))
        rows.append((name, d, pattern))

    def put(path, v):
        def f(j):
            o = j
            for k in path[:-1]:
                o = o[k]
            o[path[-1]] = v
        return f
    case("tok_list", "tokenizer.json' must be a JSON object, not [] (a list)", raw=b"[]")
    case("tok_truncated", "tokenizer.json' is not JSON", raw=json.dumps(base).encode()[:100])
    case("tok_model_missing", "'model' is missing; it must be an object", lambda j: j.pop("model"))
    case("tok_model_string", "'model' must be an object, not \"BPE\" (a string)", put(["model"], "BPE"))
    case("tok_vocab_string", "'model.vocab' must be an object {token: id} or a list of [piece, score], not \"abc\"", put(["model", "vocab"], "abc"))
    case("tok_vocab_id_string", "'model.vocab' entry \"a\" must be a token id (an integer in [0, 2147483646]), not \"2\" (a string)",
         put(["model", "vocab", "a"], "2"))
    case("tok_vocab_id_huge", "'model.vocab' entry \"a\" must be a token id (an integer in [0, 2147483646]), not 1099511627776",
         put(["model", "vocab", "a"], 2**40))
    case("tok_vocab_id_negative", "'model.vocab' entry \"a\" must be a token id|not -1", put(["model", "vocab", "a"], -1))
    case("tok_unigram_entry", "'model.vocab' entry 1 must be [piece, score], not [\"a\"]",
         put(["model", "vocab"], [["<unk>", 0.0], ["a"]]))
    case("tok_added_dict", "'added_tokens' must be a list, not {} (an object)", put(["added_tokens"], {}))
    case("tok_added_id_null", "'added_tokens.0.id' is missing (null); it must be an integer", put(["added_tokens", 0, "id"], None))
    case("tok_added_content_number", "'added_tokens.0.content' must be a string, not 5 (an integer)", put(["added_tokens", 0, "content"], 5))
    case("tok_added_special_string", "'added_tokens.0.special' must be true or false, not \"yes\" (a string)",
         put(["added_tokens", 0, "special"], "yes"))
    case("tok_post_list", "'post_processor' must be an object, not [] (a list)", put(["post_processor"], []))
    case("tok_template_id_number", "'post_processor.single.0.SpecialToken.id' must be a string, not 5 (an integer)",
         put(["post_processor"], {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": 5, "type_id": 0}},
                                                                           {"Sequence": {"id": "A", "type_id": 0}}]}))
    case("tok_roberta_cls", "'post_processor.cls' must be [token, id], not \"<s>\"",
         put(["post_processor"], {"type": "RobertaProcessing", "cls": "<s>", "sep": ["</s>", 2]}))
    case("tok_config_list", "tokenizer_config.json' must be a JSON object, not [] (a list)", tc=[])
    case("tok_config_bos_number", "tokenizer_config.json': 'bos_token' must be a string or an object with 'content', not 5",
         tc={"bos_token": 5})
    case("tok_config_bos_content", "tokenizer_config.json': 'bos_token.content' must be a string, not [] (a list)",
         tc={"bos_token": {"content": []}})
    for name, d, pat in rows:
        print(f"{name}\t{d}\t{pat}")


# ----------------------------------------------------------------------------------------------- mutations
SWAPS = [None, True, False, 0, -1, 1, 1.5, -0.0, 1e39, 2**31, 2**40, 2**64, -2**63, math.nan, math.inf, "", "4", "x" * 300,
         [], [1, 2], {}, {"a": None}, [[[]]]]


def json_paths(o, path=(), out=None, depth=0):
    out = [] if out is None else out
    if depth > 6:
        return out
    if isinstance(o, dict):
        for k, v in list(o.items())[:400]:
            out.append(path + (k,))
            json_paths(v, path + (k,), out, depth + 1)
    elif isinstance(o, list):
        for i, v in enumerate(o[:50]):
            out.append(path + (i,))
            json_paths(v, path + (i,), out, depth + 1)
    return out


def mutate_json(rng, o, prefer=()):
    """A copy of the JSON value o with one value replaced (a type swap), a key deleted or a number nudged."""
    o = json.loads(json.dumps(o))
    paths = json_paths(o)
    if not paths:
        return rng.choice(SWAPS)
    pref = [p for p in paths if p[-1] in prefer]
    p = rng.choice(pref) if pref and rng.random() < 0.6 else rng.choice(paths)
    parent = o
    for k in p[:-1]:
        parent = parent[k]
    r = rng.random()
    cur = parent[p[-1]]
    if r < 0.12 and isinstance(parent, dict):
        del parent[p[-1]]
    elif r < 0.35 and isinstance(cur, (int, float)) and not isinstance(cur, bool):
        parent[p[-1]] = rng.choice([cur + 1, cur - 1, cur * 2, -cur, cur // 2 if isinstance(cur, int) else cur / 2, 0])
    else:
        parent[p[-1]] = rng.choice(SWAPS)
    return o


def mutate_bytes(rng, b, lo=0, hi=None):
    """b with a byte set, a bit flipped, a run overwritten or a truncation, inside [lo, hi)."""
    hi = len(b) if hi is None else min(hi, len(b))
    if hi <= lo:
        return b[:rng.randrange(len(b) + 1)]
    b = bytearray(b)
    r = rng.random()
    i = rng.randrange(lo, hi)
    if r < 0.3:
        b[i] = rng.choice([0, 0xFF, 0x7F, 0x80, ord('"'), ord("{"), ord("}"), ord("-"), ord("9"), ord(","), ord("[")])
    elif r < 0.6:
        b[i] ^= 1 << rng.randrange(8)
    elif r < 0.8:
        n = rng.randrange(1, 17)
        b[i:i + n] = bytes(rng.randrange(256) for _ in range(min(n, len(b) - i)))
    else:
        return bytes(b[:i])
    return bytes(b)


def mutate_header(rng, data):
    """A mutant of a safetensors file: its header's bytes, its JSON (type swaps, offsets and shapes nudged), or
    the file truncated."""
    (n,) = struct.unpack("<Q", data[:8])
    r = rng.random()
    if r < 0.4:
        return mutate_bytes(rng, data, 0, 8 + n)
    if r < 0.5:
        return data[:rng.randrange(len(data))]
    h = json.loads(data[8:8 + n])
    body = data[8 + n:]
    if r < 0.8:
        h = mutate_json(rng, h, prefer=("data_offsets", "shape", "dtype", "__metadata__"))
    else:                                   # ranges: one tensor's offsets from another, or shifted
        names = [k for k in h if k != "__metadata__"]
        a, b = rng.choice(names), rng.choice(names)
        if rng.random() < 0.5:
            h[a]["data_offsets"] = list(h[b]["data_offsets"])
        else:
            d = rng.choice([-4, -2, 2, 4, 8])
            h[a]["data_offsets"] = [max(0, x + d) for x in h[a]["data_offsets"]]
    hb = json.dumps(h, allow_nan=True).encode()
    hb += b" " * (-len(hb) % 8)
    return struct.pack("<Q", len(hb)) + hb + body


def mutate_file(rng, data, prefer=()):
    try:
        j = json.loads(data)
    except ValueError:
        j = None
    if j is not None and rng.random() < 0.7:
        return json.dumps(mutate_json(rng, j, prefer), allow_nan=True).encode()
    return mutate_bytes(rng, data)


# ----------------------------------------------------------------------------------------------- fuzz
def run_forked(main, prog, argv, timeout, err_path):
    """main() under H.main_guard in a forked child (stdout to /dev/null, stderr to err_path): its exit status, or
    'timeout' / 'signal N'."""
    import hf_common as H
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 2)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            sys.argv = [prog] + argv
            H.PROG = prog
            try:
                H.main_guard(main, prog)
            except TypeError as e:          # (tools before issue 23: main_guard(fn))
                if "positional argument" not in str(e):
                    raise
                H.main_guard(main)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 99
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    t_end = time.time() + timeout
    while True:
        r, status = os.waitpid(pid, os.WNOHANG)
        if r:
            break
        if time.time() > t_end:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            return "timeout"
        time.sleep(0.002)
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return os.WEXITSTATUS(status)


def leftovers(d):
    """Temporary files or directories the tools write (*.tmp, .hf_export.*, .prepare_hf.*) left in d."""
    out = []
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            if n.endswith(".tmp") or n.startswith((".prepare_hf.", ".hf_export.")):
                out.append(os.path.relpath(os.path.join(root, n), d))
    return out


def cmd_fuzz(seed, n, model, sharded, tokdir, corpus, work, *ckpt_check):
    import subprocess
    sys.path.insert(0, TOOLS)
    import hf_import
    try:
        import tokenizers  # (imported here once, used only in the children)
        have_tok = tokenizers is not None
    except ImportError:
        have_tok = False
    import prepare_hf
    rng = random.Random(int(seed))
    n = int(n)
    t0 = time.time()
    files = {
        "model.safetensors": (model, "model.safetensors"),
        "shard": (sharded, "model-00002-of-00003.safetensors"),
        "index": (sharded, "model.safetensors.index.json"),
        "config": (model, "config.json"),
        "tokenizer.json": (tokdir, "tokenizer.json"),
        "tokenizer_config.json": (tokdir, "tokenizer_config.json"),
    }
    kinds = list(files)
    weights = [3, 1, 2, 3, 3, 1]
    counts = {k: 0 for k in kinds}
    bad, accepted, refused, checked = [], 0, 0, 0
    lines = {}
    os.makedirs(work, exist_ok=True)
    for i in range(n):
        kind = rng.choices(kinds, weights)[0]
        counts[kind] += 1
        base, fname = files[kind]
        d = os.path.join(work, f"m{i:04d}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for f in os.listdir(base):
            if f != fname and os.path.isfile(os.path.join(base, f)):
                os.symlink(os.path.abspath(os.path.join(base, f)), os.path.join(d, f))
        data = open(os.path.join(base, fname), "rb").read()
        if kind in ("model.safetensors", "shard"):
            m = mutate_header(rng, data)
        else:
            m = mutate_file(rng, data, prefer={"config": ("num_attention_heads", "num_key_value_heads", "hidden_size",
                                                          "max_position_embeddings", "rope_theta", "rope_scaling", "factor",
                                                          "vocab_size", "rms_norm_eps", "tie_word_embeddings"),
                                               "index": ("weight_map",),
                                               "tokenizer.json": ("vocab", "added_tokens", "post_processor", "id", "content",
                                                                  "special", "model", "single"),
                                               "tokenizer_config.json": ("bos_token", "eos_token")}.get(kind, ()))
        open(os.path.join(d, fname), "wb").write(m)
        out = os.path.join(d, "out")
        err = os.path.join(d, "stderr")
        if kind.startswith("tokenizer"):
            prog, main, argv = "prepare_hf", prepare_hf.main, ["--tokenizer", d, "--out", out, "--val-frac", "0.3", corpus]
        else:
            os.makedirs(out)
            prog, main, argv = "hf_import", hf_import.main, [d, "--out", os.path.join(out, "x.h5")]
        rc = run_forked(main, prog, argv, 300, err)
        text = open(err, "rb").read().decode("utf-8", "replace")
        ls = text.splitlines()
        left = leftovers(d) if os.path.isdir(d) else []
        why = None
        if rc not in (0, 1):
            why = f"exit {rc}"
        elif "Traceback" in text or "internal error" in text:
            why = "traceback or internal error"
        elif rc == 0 and text.strip():
            why = "output on stderr although it succeeded"
        elif rc == 1 and (len(ls) != 1 or not ls[0].startswith(prog + ": ")):
            why = f"{len(ls)} stderr lines"
        elif left:
            why = f"left {left[:3]}"
        if why:
            bad.append(f"m{i:04d} ({kind}): {why}: {text[:300]!r}")
            continue
        if rc == 1:
            refused += 1
            key = re.sub(r"\d+", "N", ls[0].replace(d + "/", "").replace(d, "DIR"))[:90]
            lines[key] = lines.get(key, 0) + 1
            continue
        accepted += 1
        ck = os.path.join(out, "x.h5")
        if prog == "hf_import" and ckpt_check and os.path.exists(ck):
            import h5py
            with h5py.File(ck, "r") as f:
                msl = int(f["config"].attrs["max_seq_len"].decode())
            if msl > 1 << 16:                       # the C readers allocate RoPE tables of max_seq_len positions
                continue
            p = subprocess.run(list(ckpt_check) + [ck], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
            checked += 1
            if p.returncode != 0:
                bad.append(f"m{i:04d} ({kind}): hf_import accepted it, but {os.path.basename(ckpt_check[0])} refuses the "
                           f"checkpoint: {p.stderr.decode(errors='replace')[:300]!r}")
        if os.path.isdir(d) and not bad:
            shutil.rmtree(d, ignore_errors=True)
    dt = time.time() - t0
    print(f"# fuzz seed {seed}: {n} mutants ({', '.join(f'{k} {v}' for k, v in counts.items())}) in {dt:.1f} s: "
          f"{refused} refused in one line, {accepted} accepted ({checked} of those checked by {os.path.basename(ckpt_check[0]) if ckpt_check else '-'})"
          f"{'' if have_tok else '; no tokenizers library: tokenizer mutants stop at the library check'}")
    print(f"#   {len(lines)} different refusals; the most frequent:")
    for k, v in sorted(lines.items(), key=lambda kv: -kv[1])[:5]:
        print(f"#   {v:4d} x {k}")
    check(f"fuzz of the HF readers ({n} mutants of the safetensors header, index, config.json, tokenizer.json and "
          "tokenizer_config.json through hf_import / prepare_hf): every run exits 0 or 1 (none hangs: 300 s), one line without a "
          "traceback when it refuses, no temporary file left, every accepted import accepted by the C reader",
          not bad, "; ".join(bad[:5]) + (f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""))


# ----------------------------------------------------------------------------------------------- tokenizers
def cmd_tokenizers(out, *files):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    files = list(files)

    def save(t, name):
        os.makedirs(os.path.join(out, name), exist_ok=True)
        t.save(os.path.join(out, name, "tokenizer.json"))
    L3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
          r"\s+(?!\S)|\s+")
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(L3), "isolated"),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    t.train(files, trainers.BpeTrainer(vocab_size=500, special_tokens=["<|begin_of_text|>"], show_progress=False,
                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    save(t, "l3")
    t = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    t.train(files, trainers.BpeTrainer(vocab_size=600, show_progress=False, special_tokens=["<unk>", "<s>", "</s>"]
                                       + [f"<0x{i:02X}>" for i in range(256)]))
    save(t, "l2legacy")
    t = Tokenizer(models.Unigram())
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.train(files, trainers.UnigramTrainer(vocab_size=400, special_tokens=["<s>", "</s>", "<unk>"], unk_token="<unk>",
                                           show_progress=False))
    save(t, "meta")
    t = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer()
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.train(files, trainers.WordPieceTrainer(vocab_size=500, special_tokens=["[UNK]", "[CLS]", "[SEP]"], show_progress=False))
    save(t, "bert")
    print(f"# tokenizers trained locally on {len(files)} files: l3, l2legacy, meta, bert")


def cmd_whole(name, d, tokenizer, textfile):
    from tokenizers import Tokenizer
    tj = tokenizer if tokenizer.endswith(".json") else os.path.join(tokenizer, "tokenizer.json")
    j = json.load(open(tj))
    j["added_tokens"] = [t for t in j.get("added_tokens") or [] if not t.get("special")]
    j["post_processor"] = None
    tok = Tokenizer.from_str(json.dumps(j))
    text = open(textfile, encoding="utf-8").read()
    whole = tok.encode(text, add_special_tokens=False).ids
    m = json.load(open(os.path.join(d, "meta.json")))
    dt = "<u4" if m["dtype"] == "uint32" else "<u2"
    got = np.concatenate([np.fromfile(p, dt, offset=1024) for p in sorted(glob.glob(os.path.join(d, "train_*.bin")))])
    got = got.astype(np.int64).tolist()
    first = next((i for i, (a, b) in enumerate(zip(got[1:], whole)) if a != b), None)
    check(f"{name}: {len(text)} characters in pieces = encoded whole ({len(whole)} tokens)",
          got[:1] == [m["eod_id"]] and got[1:] == whole,
          f"{len(got) - 1} vs {len(whole)} tokens, first difference at {first}")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    {"model": cmd_model, "cases": cmd_cases, "tokcases": cmd_tokcases, "fuzz": cmd_fuzz, "tokenizers": cmd_tokenizers,
     "whole": cmd_whole}[cmd](*args)
    if cmd in ("fuzz", "whole"):
        print(f"{passed} passed, {failed} failed")
        sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
