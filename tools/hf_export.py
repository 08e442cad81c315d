#!/usr/bin/python3
"""hf_export — a ringlm checkpoint → a Hugging Face Llama directory that transformers'
LlamaForCausalLM.from_pretrained(DIR) loads.

  tools/hf_export CKPT|RUN_DIR --out DIR [--dtype fp32|bf16] [--max_shard_size 5GB]
                  [--tokenizer TOKENIZER] [--bos_token_id N] [--eos_token_id N] [--force]

Writes DIR/model.safetensors (or DIR/model-0000i-of-0000N.safetensors and model.safetensors.index.json when the
tensors exceed --max_shard_size), DIR/config.json and DIR/generation_config.json. Needs only h5py and numpy.
Every checksum of the checkpoint's /model is verified first (the optimizer state is not exported); a corrupt
checkpoint is refused with one line. The tensors are ringlm's whole logical tensors under their HF names: a tensor-parallel
vocabulary padding is never stored, so never exported; a tied head (tie_embeddings = 1) exports as
tie_word_embeddings with no lm_head.weight. --dtype bf16 rounds to nearest even (a bf16 checkpoint of
`reshard --dtype bf16` is exported as stored; with --dtype fp32 it widens exactly).

RoPE: none → no rope_scaling, max_position_embeddings = max_seq_len; linear → {"rope_type": "linear",
"factor": s}, max_position_embeddings = max_seq_len; yarn → {"rope_type": "yarn", "factor": s,
"original_max_position_embeddings": L, "beta_fast": 32.0, "beta_slow": 1.0} with max_position_embeddings
= s·L. transformers reads these keys exactly so from 4.51 on (4.51–4.55 take factor = max_position_embeddings
/ original = s; 4.56 and later take both as given). 4.45–4.50 ignore original_max_position_embeddings and take
max_position_embeddings (s·L) as the original length: with those releases set config.max_position_embeddings
= L before building the model (README, "Extend an existing model").

TOKENIZER (a tokenizer.json or a directory holding one) is copied with the tokenizer_config.json,
special_tokens_map.json and tokenizer.model beside it when present; a tokenizer_config.json naming a generic fast
tokenizer and the BOS/EOS tokens is written when there is none, so that AutoTokenizer loads DIR. The ids of
bos/eos in config.json: --bos_token_id / --eos_token_id, else the tokenizer's BOS / EOS tokens, else 256 for
the byte tokenizer's vocabulary of 257 (build/prepare's document token), else none.
"""
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_common as H  # noqa: E402

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model")
OUTPUT_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json") + TOKENIZER_FILES


def hf_config(cfg, dtype, bos, eos):
    C, nh = int(cfg["d_model"]), int(cfg["n_head"])
    s, L = H.f32_json(cfg["rope_factor"]), int(cfg["rope_original_max_seq_len"])
    scaling, maxpos = None, int(cfg["max_seq_len"])
    kind = cfg["rope_scaling"]
    if kind == "linear":
        scaling = {"rope_type": "linear", "factor": s}
    elif kind == "yarn":
        if s < 1:
            raise H.Fail(f"rope_factor {cfg['rope_factor']} < 1 with yarn: ringlm then uses the attention factor 1, "
                         "transformers 0.1 ln s + 1; not exportable")
        scaling = {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": L,
                   "beta_fast": 32.0, "beta_slow": 1.0}
        maxpos = int(round(s * L))
    elif kind != "none":
        raise H.Fail(f"rope_scaling '{kind}' has no transformers equivalent")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": int(cfg["vocab_size"]),
        "hidden_size": C,
        "intermediate_size": int(cfg["d_ff"]),
        "num_hidden_layers": int(cfg["n_layer"]),
        "num_attention_heads": nh,
        "num_key_value_heads": int(cfg["n_kv_head"]),
        "head_dim": C // nh,
        "hidden_act": "silu",
        "max_position_embeddings": maxpos,
        "rms_norm_eps": H.f32_json(cfg["norm_eps"]),
        "rope_theta": H.f32_json(cfg["rope_theta"]),
        "rope_scaling": scaling,
        "tie_word_embeddings": cfg["tie_embeddings"] == "1",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": H.f32_json(cfg.get("init_std", "0.02")),
        "pretraining_tp": 1,
        "use_cache": True,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "torch_dtype": {"fp32": "float32", "bf16": "bfloat16"}[dtype],
    }


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def main():
    ap = H.ArgParser(prog="tools/hf_export", description=__doc__.split("\n\n")[0])
    ap.add_argument("ckpt", help="checkpoint file, or a run directory (its latest)")
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="stored dtype (default fp32)")
    ap.add_argument("--max_shard_size", default="5GB", help="shard above this many bytes (default 5GB)")
    ap.add_argument("--tokenizer", help="a tokenizer.json or a directory holding one, copied into --out")
    ap.add_argument("--bos_token_id", type=int)
    ap.add_argument("--eos_token_id", type=int)
    ap.add_argument("--force", action="store_true", help="replace an existing export in --out")
    a = ap.parse_args()
    limit = H.parse_size(a.max_shard_size)
    path = H.resolve_ckpt(a.ckpt)
    cfg, tensors, attrs = H.read_ckpt(path)          # verifies every /model checksum
    V = int(cfg["vocab_size"])

    bos = eos = None
    tinfo = None
    if a.tokenizer:
        tinfo = H.tokenizer_info(a.tokenizer)
        if tinfo["vocab_size"] > V:
            raise H.Fail(f"tokenizer {tinfo['json']} has {tinfo['vocab_size']} tokens, the model's vocab_size is {V}")
        bos = (tinfo["bos"] or tinfo["prefix"] or (None, None))[1]
        eos = (tinfo["eos"] or tinfo["suffix"] or (None, None))[1]
    elif V == 257:
        bos = eos = 256
    bos = a.bos_token_id if a.bos_token_id is not None else bos
    eos = a.eos_token_id if a.eos_token_id is not None else eos
    for name, i in (("bos_token_id", bos), ("eos_token_id", eos)):
        if i is not None and not 0 <= i < V:
            raise H.Fail(f"--{name} {i} is not a token of the model (vocab_size {V})")
    conf = hf_config(cfg, a.dtype, bos, eos)

    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as e:
        raise H.Fail(f"cannot create '{a.out}': {e.strerror}")
    old = sorted(n for n in os.listdir(a.out) if n.endswith(".safetensors") or n in OUTPUT_FILES)
    if old and not a.force:
        raise H.Fail(f"'{a.out}' already holds an export ({old[0]}); pass --force to replace it")
    for n in old:
        os.remove(os.path.join(a.out, n))

    def convert(t, bf16):                             # the stored array (fp32 or bf16 bits) in the output dtype
        x = t.load()
        if bf16:
            return x if x.dtype == np.uint16 else H.f32_to_bf16(x)
        return H.bf16_to_f32(x) if x.dtype == np.uint16 else x

    bf16 = a.dtype == "bf16"
    out = [(n, H.Lazy(t.shape, "BF16" if bf16 else "F32", lambda t=t: convert(t, bf16)))
           for n, t in tensors.items()]               # the parameter table's order; read one at a time
    shards, cur, size = [], [], 0
    for n, t in out:
        nbytes = int(np.prod(t.shape)) * (2 if bf16 else 4)
        if cur and size + nbytes > limit:
            shards.append(cur)
            cur, size = [], 0
        cur.append((n, t))
        size += nbytes
    shards.append(cur)
    meta = {"format": "pt", "ringlm_checkpoint": os.path.basename(path), "ringlm_step": str(attrs.get("step", 0))}
    total = 0
    if len(shards) == 1:
        files = ["model.safetensors"]
        total = H.st_write(os.path.join(a.out, files[0]), shards[0], meta)
    else:
        files = [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
        wmap = {}
        for fn, sh in zip(files, shards):
            total += H.st_write(os.path.join(a.out, fn), sh, meta)
            wmap.update({n: fn for n, _ in sh})
        write_json(os.path.join(a.out, "model.safetensors.index.json"), {"metadata": {"total_size": total}, "weight_map": wmap})
    write_json(os.path.join(a.out, "config.json"), conf)
    gen = {"_from_model_config": True}
    gen.update({k: v for k, v in (("bos_token_id", bos), ("eos_token_id", eos)) if v is not None})
    write_json(os.path.join(a.out, "generation_config.json"), gen)
    copied = []
    if tinfo:
        for n in TOKENIZER_FILES:
            p = tinfo["json"] if n == "tokenizer.json" else os.path.join(tinfo["dir"], n)
            if os.path.isfile(p):
                shutil.copyfile(p, os.path.join(a.out, n))
                copied.append(n)
        if "tokenizer_config.json" not in copied:
            tc = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": conf["max_position_embeddings"],
                  "clean_up_tokenization_spaces": False}
            for key, t in (("bos_token", tinfo["bos"] or tinfo["prefix"]), ("eos_token", tinfo["eos"] or tinfo["suffix"])):
                if t:
                    tc[key] = t[0]
            write_json(os.path.join(a.out, "tokenizer_config.json"), tc)
            copied.append("tokenizer_config.json (written)")
    rs = conf["rope_scaling"]
    print(f"hf_export: {path} (step {attrs.get('step', 0)}) -> {a.out}: {len(out)} tensors, {total / 1e6:.1f} MB "
          f"{a.dtype} in {len(files)} file{'s' if len(files) > 1 else ''}; checksums verified; "
          f"{'tied' if conf['tie_word_embeddings'] else 'untied'} head; rope {rs['rope_type'] if rs else 'default'}"
          + (f" x{rs['factor']:g}" if rs else "")
          + (f" from {rs['original_max_position_embeddings']}" if rs and "original_max_position_embeddings" in rs else "")
          + f"; max_position_embeddings {conf['max_position_embeddings']}; bos {bos}, eos {eos}"
          + (f"; tokenizer files: {', '.join(copied)}" if copied else ""))
    return 0


if __name__ == "__main__":
    H.main_guard(main)
