#!/usr/bin/python3
"""hf_export — a ringlm checkpoint → a Hugging Face Llama directory that transformers'
LlamaForCausalLM.from_pretrained(DIR) loads.

  tools/hf_export CKPT|RUN_DIR --out DIR [--dtype fp32|bf16] [--max_shard_size 5GB]
                  [--tokenizer TOKENIZER | --no_tokenizer] [--bos_token_id N] [--eos_token_id N] [--force]

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
= L before building the model (docs/huggingface.md, "YaRN keys across transformers releases"). The export of a YaRN model prints a line
saying so.

TOKENIZER (a tokenizer.json or a directory holding one) is copied with the tokenizer_config.json,
special_tokens_map.json and tokenizer.model beside it when present; a tokenizer_config.json naming a generic fast
tokenizer and the BOS/EOS tokens is written when there is none, so that AutoTokenizer loads DIR. Either way the
exported tokenizer_config.json says "model_input_names": ["input_ids", "attention_mask"] (a copied one that
names other inputs is changed, and the summary says so): LlamaForCausalLM takes no token_type_ids, which a
generic fast tokenizer otherwise returns, so that model.generate(**tok(text, return_tensors="pt")) works.
Without --tokenizer (and without --no_tokenizer) the tokenizer of the training data is used when it can be found:
the checkpoint's train_data (a directory, a file or a glob pattern, as the run was given it, relative to the
current directory) names the shard directory, whose meta.json (written beside the shards) names the tokenizer
("tokenizer": a path, tried as given and relative to the shard directory); when that path exists, and its
tokenizer.json's SHA-256 equals meta.json's "tokenizer_sha256" if that is given, it is used and one line says so.
A tokenizer name that is not a path (build/prepare's "bytes") is passed over silently; a path that is not a
tokenizer.json or a directory holding one, a SHA-256 that differs, or shard directories that name different
tokenizers are reported in one line and the export goes on without a tokenizer.
A byte-level model (vocab_size 257: build/prepare's 256 bytes and the end-of-document token 256) given no tokenizer,
whose training data's meta.json names none or "bytes", gets ringlm's byte tokenizer, written: tokenizer.json (token id = byte value, <|eod|> = 256; see
byte_tokenizer) and tokenizer_config.json, so that AutoTokenizer encodes text as build/prepare and build/sample do.
Any other model without a tokenizer is exported without one, and the summary line says so.
The ids of bos/eos in config.json: --bos_token_id / --eos_token_id, else the tokenizer's BOS / EOS tokens, else
256 for the byte tokenizer's vocabulary of 257 (build/prepare's document token), else none.

Writing: everything is written into a temporary directory inside DIR (DIR/.hf_export.new.*), fsynced and verified
(every safetensors file parsed back and every tensor's checksum recomputed, every JSON file read back, every copied
tokenizer file compared with its source), and only then swapped in: the previous export's files (with --force) are
moved aside into DIR/.hf_export.old.*, the new ones renamed into DIR, and the old ones removed last. A failure at
any point before (disk full, read-only directory, a bad input) is one line and leaves DIR as it was: the previous
export intact, no temporary directory. Inputs (the tokenizer, even one inside DIR) are read before the swap. With
--force the disk needs room for both exports until the swap.
"""
import glob
import hashlib
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_common as H  # noqa: E402

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model")
OUTPUT_FILES = ("config.json", "generation_config.json", "model.safetensors.index.json") + TOKENIZER_FILES
MODEL_INPUT_NAMES = ["input_ids", "attention_mask"]     # LlamaForCausalLM's inputs (no token_type_ids)


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


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


BYTE_EOD = "<|eod|>"                    # build/sample shows the end-of-document token so


def byte_tokenizer(max_len):
    """(tokenizer.json, tokenizer_config.json) objects of ringlm's byte tokenizer for AutoTokenizer: token id = the
    byte's value for the 256 bytes of UTF-8 text, and the end-of-document token 256 as the special token <|eod|>
    (also bos and eos, as config.json's ids). A BPE model without merges over the 256 byte-level symbols (each byte
    as a printable character, the byte-level pre-tokenizer's mapping) with the byte-level decoder: text -> its
    UTF-8 bytes -> one token each, and back; no token is added around the text."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):                        # the other bytes take the characters from 256 on, in order
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): b for b, c in sorted(zip(bs, cs))}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tj = {"version": "1.0", "truncation": None, "padding": None,
          "added_tokens": [{"id": 256, "content": BYTE_EOD, "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True}],
          "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                    "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []}}
    tc = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": max_len, "clean_up_tokenization_spaces": False,
          "model_input_names": MODEL_INPUT_NAMES, "bos_token": BYTE_EOD, "eos_token": BYTE_EOD}
    return tj, tc


def tokenizer_from_meta(cfg):
    """(tokenizer path, message) from meta.json beside the checkpoint's training shards, or (None, message or
    None) when there is none to use (see the module docstring)."""
    td = cfg.get("train_data", "")
    if not td:
        return None, None
    if os.path.isdir(td):
        dirs = [td]
    else:
        d = os.path.dirname(td) or "."
        dirs = sorted(x for x in glob.glob(d) if os.path.isdir(x)) if glob.has_magic(d) else [d]
    found = {}                                    # tokenizer path -> the meta.json files naming it
    for d in dirs:
        mp = os.path.join(d, "meta.json")
        if not os.path.isfile(mp):
            continue
        try:
            meta = H.load_json(mp, mp)
        except H.Fail as e:
            return None, f"{e}; exported without a tokenizer (give --tokenizer)"
        name = meta.get("tokenizer") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name or name == "bytes":   # "bytes": build/prepare's byte tokenizer
            continue
        cands = [name] if os.path.isabs(name) else [name, os.path.join(d, name)]
        path = next((c for c in cands if os.path.isfile(c) or os.path.isfile(os.path.join(c, "tokenizer.json"))), None)
        if path is None:
            if os.sep in name or name.endswith(".json"):     # a path, not a name such as the byte tokenizer's
                return None, (f"{mp} names the tokenizer '{name}', which is not a tokenizer.json or a directory holding "
                              "one here; exported without a tokenizer (give --tokenizer)")
            continue
        want = meta.get("tokenizer_sha256")
        if want is not None and (not isinstance(want, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", want)):
            return None, (f"{mp}: 'tokenizer_sha256' must be 64 hexadecimal digits, not {H.show(want)}; exported without "
                          "a tokenizer (give --tokenizer)")
        if want:
            tj, _ = H.tokenizer_files(path)
            try:
                got = sha256_file(tj)
            except OSError as e:
                return None, f"{H.os_error(e, 'cannot read ' + tj)}; exported without a tokenizer (give --tokenizer)"
            if got != str(want).lower():
                return None, (f"{mp} names the tokenizer '{name}', but {tj} has SHA-256 {got[:12]}..., not meta.json's "
                              f"{str(want)[:12]}... (changed since the data was prepared?); exported without a tokenizer "
                              "(give --tokenizer)")
        found.setdefault(os.path.realpath(path), (path, []))[1].append(mp)
    if len(found) > 1:
        return None, (f"the training data's meta.json files name {len(found)} different tokenizers "
                      f"({', '.join(p for p, _ in found.values())}); exported without a tokenizer (give --tokenizer)")
    if not found:
        return None, None
    path, metas = next(iter(found.values()))
    return path, (f"tokenizer {path}, named by {metas[0]}{f' (and {len(metas) - 1} more)' if len(metas) > 1 else ''} "
                  "of the checkpoint's train_data (--tokenizer overrides, --no_tokenizer leaves it out)")


def yarn_note(conf):
    rs = conf["rope_scaling"]
    L, P = rs["original_max_position_embeddings"], conf["max_position_embeddings"]
    return (f"YaRN: transformers 4.45-4.50 ignore original_max_position_embeddings ({L}) and take "
            f"max_position_embeddings ({P}) as the original length, so their logits differ from ringlm's; with those "
            f"releases (this project's build/hfenv has 4.46.3) set config.max_position_embeddings = {L} before "
            "from_pretrained (docs/huggingface.md, \"YaRN keys across transformers releases\"); 4.51 and later compute ringlm's YaRN from these keys")


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def main():
    ap = H.ArgParser(prog="tools/hf_export", description=__doc__.split("\n\n")[0])
    ap.add_argument("ckpt", help="checkpoint file, or a run directory (its latest)")
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="stored dtype (default fp32)")
    ap.add_argument("--max_shard_size", default="5GB", help="shard above this many bytes (default 5GB)")
    tg = ap.add_mutually_exclusive_group()
    tg.add_argument("--tokenizer", help="a tokenizer.json or a directory holding one, copied into --out (default: "
                    "the one meta.json beside the checkpoint's train_data names, when it exists)")
    tg.add_argument("--no_tokenizer", action="store_true", help="export no tokenizer, even when meta.json names one")
    ap.add_argument("--bos_token_id", type=int)
    ap.add_argument("--eos_token_id", type=int)
    ap.add_argument("--force", action="store_true", help="replace an existing export in --out")
    a = ap.parse_args()
    limit = H.parse_size(a.max_shard_size)
    # --out: a directory (or nothing yet) that holds no export unless --force; checked before the work
    if os.path.lexists(a.out) and not os.path.isdir(a.out):
        raise H.Fail(f"--out '{a.out}' exists and is not a directory")
    old = []
    if os.path.isdir(a.out):
        try:
            old = sorted(n for n in os.listdir(a.out) if (n.endswith(".safetensors") or n in OUTPUT_FILES)
                         and not os.path.isdir(os.path.join(a.out, n)))
        except OSError as e:
            raise H.Fail(H.os_error(e, f"cannot list '{a.out}'"))
        if old and not a.force:
            raise H.Fail(f"'{a.out}' already holds an export ({old[0]}); pass --force to replace it")
    path = H.resolve_ckpt(a.ckpt)
    cfg, tensors, attrs = H.read_ckpt(path)          # verifies every /model checksum
    V = int(cfg["vocab_size"])

    bos = eos = None
    tinfo = None
    named = False                                  # meta.json named a tokenizer that cannot be used (said in one line)
    if not a.tokenizer and not a.no_tokenizer:
        a.tokenizer, msg = tokenizer_from_meta(cfg)
        named = bool(msg) and not a.tokenizer
        if msg:
            print(f"hf_export: {msg}")
    if a.tokenizer:
        tinfo = H.tokenizer_info(a.tokenizer)
        if tinfo["vocab_size"] > V:
            raise H.Fail(f"tokenizer {tinfo['json']} has {tinfo['vocab_size']} tokens, the model's vocab_size is {V}")
        bos = (tinfo["bos"] or tinfo["prefix"] or (None, None))[1]
        eos = (tinfo["eos"] or tinfo["suffix"] or (None, None))[1]
    elif V == 257:
        bos = eos = 256
    byte_tok = not tinfo and not a.no_tokenizer and not named and V == 257   # the byte tokenizer (byte_tokenizer)
    bos = a.bos_token_id if a.bos_token_id is not None else bos
    eos = a.eos_token_id if a.eos_token_id is not None else eos
    for name, i in (("bos_token_id", bos), ("eos_token_id", eos)):
        if i is not None and not 0 <= i < V:
            raise H.Fail(f"--{name} {i} is not a token of the model (vocab_size {V})")
    conf = hf_config(cfg, a.dtype, bos, eos)

    # the tokenizer files, read now (they may lie in --out, which the swap replaces)
    tok_files = {}                                   # name -> bytes to write
    copied = []
    if tinfo:
        for n in TOKENIZER_FILES:
            p = tinfo["json"] if n == "tokenizer.json" else os.path.join(tinfo["dir"], n)
            if not os.path.isfile(p):
                continue
            try:
                with open(p, "rb") as f:
                    data = f.read()
            except OSError as e:
                raise H.Fail(H.os_error(e, f"cannot read '{p}'"))
            if n == "tokenizer_config.json":
                tc = H.parse_json(data, f"'{p}'")        # (tokenizer_info has checked it is an object)
                if isinstance(tc, dict) and tc.get("model_input_names") != MODEL_INPUT_NAMES:
                    what = "added" if "model_input_names" not in tc else f"was {tc['model_input_names']}"
                    tc["model_input_names"] = MODEL_INPUT_NAMES
                    tok_files[n] = (json.dumps(tc, indent=2) + "\n").encode()
                    copied.append(f"{n} (model_input_names {MODEL_INPUT_NAMES} {what})")
                    continue
            tok_files[n] = data
            copied.append(n)
        if "tokenizer_config.json" not in tok_files:
            tc = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": conf["max_position_embeddings"],
                  "clean_up_tokenization_spaces": False, "model_input_names": MODEL_INPUT_NAMES}
            for key, t in (("bos_token", tinfo["bos"] or tinfo["prefix"]), ("eos_token", tinfo["eos"] or tinfo["suffix"])):
                if t:
                    tc[key] = t[0]
            tok_files["tokenizer_config.json"] = (json.dumps(tc, indent=2) + "\n").encode()
            copied.append("tokenizer_config.json (written)")

    if byte_tok:
        tj, tc = byte_tokenizer(conf["max_position_embeddings"])
        tok_files["tokenizer.json"] = (json.dumps(tj, indent=2, ensure_ascii=False) + "\n").encode()
        tok_files["tokenizer_config.json"] = (json.dumps(tc, indent=2) + "\n").encode()
        copied.append(f"tokenizer.json and tokenizer_config.json (the byte tokenizer, written: ids = byte values, "
                      f"{BYTE_EOD} = 256)")
    elif not tinfo and not named:
        copied.append("none (--no_tokenizer)" if a.no_tokenizer else
                      f"none written: vocab_size {V} is not the byte tokenizer's 257 and no tokenizer was given or "
                      "found beside the training data (give --tokenizer)")

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
        nbytes = H.numel(t.shape) * (2 if bf16 else 4)
        if cur and size + nbytes > limit:
            shards.append(cur)
            cur, size = [], 0
        cur.append((n, t))
        size += nbytes
    shards.append(cur)
    meta = {"format": "pt", "ringlm_checkpoint": os.path.basename(path), "ringlm_step": str(attrs.get("step", 0))}
    files = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    blk = 4096                                    # (every file takes whole blocks)
    need = (sum(-(-sum(H.numel(t.shape) * (2 if bf16 else 4) + 200 for _, t in sh) // blk) * blk for sh in shards)
            + 4 * blk + sum(-(-len(b) // blk) * blk for b in tok_files.values()))

    # write into a temporary directory inside --out, verify, then swap
    created = H.make_dirs(a.out, "the output directory")
    note = ("; nothing was written" if created else
            f"; '{a.out}' is as it was" + (" (the previous export untouched)" if old else ""))
    free = H.free_bytes(a.out)
    if free is not None and free < need:
        if created:
            os.rmdir(a.out)
        raise H.Fail(f"not enough space in '{a.out}': the export needs about {H.mib(need)}, {H.mib(free)} are free "
                     f"(disk full){note}")
    st = H.Staging(a.out, "hf_export", created, note)
    total, sums, wmap, written = 0, {}, {}, {}
    try:
        for fn, sh in zip(files, shards):
            n_bytes, s = H.st_write(st.path(fn), sh, meta)
            total += n_bytes
            sums.update(s)
            wmap.update({n: fn for n, _ in sh})
        jsons = {"config.json": conf}
        gen = {"_from_model_config": True}
        gen.update({k: v for k, v in (("bos_token_id", bos), ("eos_token_id", eos)) if v is not None})
        jsons["generation_config.json"] = gen
        if len(files) > 1:
            jsons["model.safetensors.index.json"] = {"metadata": {"total_size": total}, "weight_map": wmap}
        for n, obj in jsons.items():
            write_json(st.path(n), obj)
        for n, data in tok_files.items():
            with open(st.path(n), "wb") as f:
                f.write(data)
            written[n] = hashlib.sha256(data).hexdigest()
        H.fault("hf_export:write")
    except OSError as e:
        raise H.Fail(H.os_error(e, f"cannot write the export into '{a.out}'"))
    # verify: every file as a reader will see it
    for fn in files:
        got = H.st_read(st.path(fn))
        for n, t in got.items():
            if H.xsum64(t.raw) != sums.get(n):
                raise H.Fail(f"the export did not verify after writing: {fn}: {n} reads back differently")
    for n, obj in jsons.items():
        if H.load_json(st.path(n)) != obj:
            raise H.Fail(f"the export did not verify after writing: {n} reads back differently")
    for n, h in written.items():
        if sha256_file(st.path(n)) != h:
            raise H.Fail(f"the export did not verify after writing: {n} reads back differently")
    note = st.swap(old, files + list(jsons) + list(tok_files))
    rs = conf["rope_scaling"]
    if rs and rs["rope_type"] == "yarn":
        print(f"hf_export: {yarn_note(conf)}")
    print(f"hf_export: {path} (step {attrs.get('step', 0)}) -> {a.out}: {len(out)} tensors, {total / 1e6:.1f} MB "
          f"{a.dtype} in {len(files)} file{'s' if len(files) > 1 else ''}; checksums verified; "
          f"{'tied' if conf['tie_word_embeddings'] else 'untied'} head; rope {rs['rope_type'] if rs else 'default'}"
          + (f" x{rs['factor']:g}" if rs else "")
          + (f" from {rs['original_max_position_embeddings']}" if rs and "original_max_position_embeddings" in rs else "")
          + f"; max_position_embeddings {conf['max_position_embeddings']}; bos {bos}, eos {eos}"
          + (f"; tokenizer: {', '.join(copied)}" if copied else "")
          + (f"; replaced the previous export ({len(old)} files)" if old else "")
          + (f"; note: {note}" if note else ""))
    return 0


if __name__ == "__main__":
    H.main_guard(main, "hf_export")
