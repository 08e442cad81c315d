#!/usr/bin/env python3
"""hf_check.py — the Python side of tests/test_hf.sh: Hugging Face's own code (transformers' LlamaForCausalLM,
tokenizers, safetensors) as the reference for ringlm's import, export and tokenized data.

  hf_check.py CMD ARGS... [::: CMD ARGS ...]    several commands in one process (torch and transformers load once)

Commands (NAME labels the printed checks):
  tokenizers OUT FILE...                 train small tokenizers locally (no download): OUT/bpe (byte-level BPE,
                                         GPT-2 style <|endoftext|>), OUT/llama (same, Llama style: <s> prepended by
                                         the post-processor), OUT/nospecial (no special token), OUT/wide (WordLevel,
                                         70002 tokens: ids above 65535)
  make-hf OUT VOCAB                      random HF Llama models saved with save_pretrained: m1 (GQA 4/2, untied,
                                         YaRN x4 from 32 in the >= 4.51 form: max_position_embeddings 128 +
                                         original_max_position_embeddings 32), m1s (m1 sharded, with the index),
                                         m2 (MQA 4/1, tied, head_dim 12, YaRN x2 without original_max_position_embeddings,
                                         rope_theta 5e5), m3 (MHA, untied, linear x2)
  logits NAME DUMP HFDIR                 ringlm's logits and per-position losses (build/tests/tool_dump) against
                                         HF's on the same tokens and positions, in float32 and float64: 1e-4
  asis NAME DUMP HFDIR                   information: the same comparison loading HFDIR exactly as written
                                         (no <4.51 YaRN adjustment), i.e. what this transformers release computes
  evalref NAME CSV SHARD SEP L NDOCS HFDIR   build/eval's per-position NLL (--bucket 1 CSV) against HF's on the
                                         first NDOCS documents of SHARD (each starting at token SEP): 1e-4 relative
  same NAME A.h5 B.h5                    every /model tensor bit-identical, model config keys equal (float keys
                                         as the fp32 value their text reads as)
  exported NAME DIR CKPT                 an export's files: config.json keys, safetensors tensors (parsed here) equal to
                                         the checkpoint's (fp32 bitwise, bf16 = round-to-nearest-even), never padded
  hfstate NAME DIR_A DIR_B equal|bf16    both directories load with from_pretrained; B's state equals A's (or A's
                                         rounded to bf16)
  autotok NAME DIR TEXTFILE              AutoTokenizer.from_pretrained(DIR) encodes TEXTFILE as tokenizers does
  generate NAME DIR PROMPT N OUTFILE     docs/huggingface.md's transformers example (step 6) on
                                         the export DIR: tok(PROMPT, return_tensors="pt") gives only input_ids and
                                         attention_mask; model.generate(**tok(...), max_new_tokens=N) as that example
                                         loads the model gives the ids of a greedy decode computed here by repeated
                                         full forwards (no cache) and argmax, stopping at EOS; OUTFILE (the
                                         snippet's stdout, run by test_hf.sh) ends with their decoded text
  decode NAME HF_SHARDS BYTE_SHARDS TOKENIZER SEP [SKIPPED]   prepare_hf's documents (train and val) decode to
                                         the text of build/prepare's documents on the same corpus, in the same
                                         order and split (SKIPPED: documents prepare_hf skips as not UTF-8)

Prints "ok   ..." / "FAIL ..." per check and "# ..." information, then "N passed, N failed"; exit 1 on a failure.
The YaRN keys: transformers before 4.51 ignore original_max_position_embeddings and use max_position_embeddings
as the original length, so for those releases the model is built with max_position_embeddings set to the
original length (docs/huggingface.md, "YaRN keys across transformers releases"); `asis` measures what happens without that.
"""
import glob
import json
import os
import struct
import sys

import numpy as np

TOL = 1e-4
passed = failed = 0


def check(name, good, detail=""):
    global passed, failed
    if good:
        passed += 1
    else:
        failed += 1
    print(f"{'ok  ' if good else 'FAIL'} {name}" + (f": {detail}" if detail else ""), flush=True)


def info(msg):
    print(f"# {msg}", flush=True)


# ----------------------------------------------------------------------------------------------- files
def read_dump(path):
    out, data = {}, open(path, "rb").read()
    assert data[:8] == b"RLMDUMP1", path
    o = 8
    while o < len(data):
        (n,) = struct.unpack_from("<i", data, o); o += 4
        name = data[o:o + n].decode(); o += n
        dt, nd = struct.unpack_from("<ii", data, o); o += 8
        dims = struct.unpack_from(f"<{nd}i", data, o); o += 4 * nd
        cnt = int(np.prod(dims))
        if dt == 2:
            out[name] = data[o:o + cnt].decode(); o += cnt
        else:
            out[name] = np.frombuffer(data, dtype="<f4" if dt == 0 else "<i4", count=cnt, offset=o).reshape(dims); o += 4 * cnt
    return out


def read_shards(pattern):
    toks = []
    for p in sorted(glob.glob(pattern)):
        h = np.fromfile(p, dtype="<i4", count=256)
        assert h[0] in (20240520, 20240521) and h[1] == 1, (p, h[:3])
        dt = "<u2" if h[0] == 20240520 else "<u4"
        t = np.fromfile(p, dtype=dt, offset=1024)
        assert len(t) == h[2], (p, len(t), h[2])
        toks.append(t.astype(np.int64))
    return np.concatenate(toks) if toks else np.zeros(0, np.int64), [int(np.fromfile(p, "<i4", 1)[0]) for p in sorted(glob.glob(pattern))]


def docs_of(toks, sep):
    starts = np.flatnonzero(toks == sep).tolist() + [len(toks)]
    return [toks[s + 1:e] for s, e in zip(starts[:-1], starts[1:])], (starts[0] if len(starts) > 1 else None)


def st_parse(path):
    """safetensors, parsed here from the format's definition: {name: (dtype, shape, raw bytes)}."""
    data = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", data, 0)
    head = json.loads(data[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = (v["dtype"], tuple(v["shape"]), data[8 + n + a:8 + n + b])
    return out


def ckpt_model(path):
    import h5py
    with h5py.File(path, "r") as f:
        cfg = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in f["config"].attrs.items()}
        t = {k: f["model"][k][()] for k in f["model"].keys()}
    return cfg, t


MODEL_KEYS = ("vocab_size", "d_model", "n_layer", "n_head", "n_kv_head", "d_ff", "max_seq_len", "rope_theta",
              "rope_scaling", "rope_factor", "rope_original_max_seq_len", "norm_eps", "tie_embeddings", "init_std")
FLOAT_KEYS = ("rope_theta", "rope_factor", "norm_eps", "init_std")


# ----------------------------------------------------------------------------------------------- HF side
_tf = None


def tf():
    global _tf
    if _tf is None:
        import torch
        import transformers
        from packaging import version
        transformers.logging.set_verbosity_error()
        _tf = (torch, transformers, version.parse(transformers.__version__) < version.parse("4.51"))
        info(f"transformers {transformers.__version__}, torch {torch.__version__}")
    return _tf


def hf_load(d, dtype=None, asis=False):
    """from_pretrained(d); with transformers < 4.51 a YaRN config that names original_max_position_embeddings is
    built with max_position_embeddings = that original length (those releases read the original length there)."""
    torch, transformers, old = tf()
    cfg = transformers.LlamaConfig.from_pretrained(d)
    rs = cfg.rope_scaling or {}
    adjusted = False
    if not asis and old and rs.get("rope_type", rs.get("type")) == "yarn" and rs.get("original_max_position_embeddings"):
        cfg.max_position_embeddings = rs["original_max_position_embeddings"]
        adjusted = True
    m = transformers.LlamaForCausalLM.from_pretrained(d, config=cfg, torch_dtype=dtype or torch.float32,
                                                      attn_implementation="eager")
    return m.eval(), adjusted


def per_position_nll(logits, targets):
    import torch
    lp = torch.log_softmax(logits.double(), -1)
    t = targets.clamp(min=0)
    nll = -lp.gather(-1, t[..., None]).squeeze(-1)
    return nll, targets >= 0


def cmd_logits(name, dump, hfdir, asis=False):
    torch, _, _ = tf()
    D = read_dump(dump)
    tok = torch.from_numpy(D["tokens"].astype(np.int64))
    pos = torch.from_numpy(D["positions"].astype(np.int64))
    tgt = torch.from_numpy(D["targets"].astype(np.int64))
    ours = torch.from_numpy(D["logits"].astype(np.float64))
    m, adjusted = hf_load(hfdir, asis=asis)
    nll_c, valid = per_position_nll(ours, tgt)
    for label in ("float32",) if asis else ("float32", "float64"):
        model = m if label == "float32" else m.double()          # (in place: after the float32 pass)
        with torch.no_grad():
            ref = model(input_ids=tok, position_ids=pos).logits.double()
        err = ((ours - ref).abs().max() / ref.abs().max()).item()
        nll_r, _ = per_position_nll(ref, tgt)
        lerr = ((nll_c - nll_r).abs() / nll_r.abs())[valid].max().item()
        what = (f"{name}: ringlm vs HF LlamaForCausalLM {label}" + (" (YaRN built with the original length, < 4.51)" if adjusted else ""))
        if asis:
            info(f"{name}: loaded exactly as written, this transformers release's logits differ from ringlm's by "
                 f"{err:.2e} (max |diff| / max |logit|), per-position losses by {lerr:.2e} relative")
            return
        check(what, err <= TOL and lerr <= TOL,
              f"logits max|diff|/max|ref| {err:.2e}, per-position losses ({int(valid.sum())} targets) worst rel {lerr:.2e} (tol {TOL:g})")


def cmd_evalref(name, csv_path, shard, sep, L, ndocs, hfdir):
    import csv
    torch, _, _ = tf()
    sep, L, ndocs = int(sep), int(L), int(ndocs)
    toks, _ = read_shards(shard)
    starts = np.flatnonzero(toks == sep).tolist() + [len(toks)]
    docs = [s for s, e in zip(starts[:-1], starts[1:]) if e - s >= L + 1][:ndocs]
    m, _ = hf_load(hfdir)
    rows = list(csv.DictReader(open(csv_path)))
    got = np.array([float(r["mean_nll"]) for r in rows])
    ok_rows = len(rows) == L and all(int(r["tokens"]) == ndocs for r in rows) and len(docs) == ndocs
    for label in ("float32", "float64"):
        model = m if label == "float32" else m.double()
        nll = torch.zeros(L, dtype=torch.float64)
        with torch.no_grad():
            for s in docs:
                w = torch.from_numpy(toks[s:s + L + 1])
                lg = model(input_ids=w[None, :L], position_ids=torch.arange(L)[None]).logits[0]
                nll += per_position_nll(lg, w[1:])[0]
        nll /= max(len(docs), 1)
        worst = float(np.max(np.abs(got - nll.numpy()) / np.abs(nll.numpy()))) if ok_rows else float("inf")
        check(f"{name}: build/eval per-position NLL vs HF {label} over {len(docs)} documents of {L} tokens",
              ok_rows and worst <= TOL, f"worst rel diff {worst:.2e} (tol {TOL:g})")


def cmd_same(name, a, b):
    ca, ta = ckpt_model(a)
    cb, tb = ckpt_model(b)
    def same_value(k, x, y):    # float keys by the fp32 value their text reads as ("1e-05" = "9.99999975e-06")
        if k in FLOAT_KEYS and x is not None and y is not None:
            try:
                return np.float32(float(x)) == np.float32(float(y))
            except ValueError:
                pass
        return x == y
    diff_keys = [k for k in MODEL_KEYS if not same_value(k, ca.get(k), cb.get(k))]
    bad = [n for n in ta if n not in tb or ta[n].dtype != tb[n].dtype or ta[n].shape != tb[n].shape
           or ta[n].tobytes() != tb[n].tobytes()]
    check(f"{name}: {len(ta)} tensors bit-identical, model config keys equal", not bad and set(ta) == set(tb) and not diff_keys,
          f"differing tensors {bad[:3]}, keys {diff_keys}" if bad or diff_keys else f"{sum(x.size for x in ta.values())} values")


def bf16_round(x):
    """bf16 bits of fp32 values, round to nearest (ties to even), chosen by comparing the two bf16 neighbours'
    distances in float64 (finite values)."""
    x = np.ascontiguousarray(x, np.float32).reshape(-1)
    lo = x.view(np.uint32) & np.uint32(0xFFFF0000)
    hi = lo + np.uint32(0x10000)
    xd = x.astype(np.float64)
    dlo, dhi = np.abs(xd - lo.view(np.float32).astype(np.float64)), np.abs(hi.view(np.float32).astype(np.float64) - xd)
    up = (dhi < dlo) | ((dhi == dlo) & (((lo >> np.uint32(16)) & np.uint32(1)) == 1))
    return (np.where(up, hi, lo) >> np.uint32(16)).astype(np.uint16)


def cmd_exported(name, d, ckpt):
    cfg, t = ckpt_model(ckpt)
    c = json.load(open(os.path.join(d, "config.json")))
    g = json.load(open(os.path.join(d, "generation_config.json")))
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        wmap = json.load(open(idx))["weight_map"]
        files = sorted(set(wmap.values()))
    else:
        wmap, files = None, ["model.safetensors"]
    st = {}
    for fn in files:
        part = st_parse(os.path.join(d, fn))
        if wmap is not None and any(wmap.get(k) != fn for k in part):
            check(f"{name}: index names the file of every tensor", False, fn)
        st.update(part)
    V, s, L = int(cfg["vocab_size"]), float(cfg["rope_factor"]), int(cfg["rope_original_max_seq_len"])
    tied = cfg["tie_embeddings"] == "1"
    rs = c.get("rope_scaling")
    want_rs = {"none": None, "linear": {"rope_type": "linear", "factor": s},
               "yarn": {"rope_type": "yarn", "factor": s, "original_max_position_embeddings": L, "beta_fast": 32.0,
                        "beta_slow": 1.0}}[cfg["rope_scaling"]]
    maxpos = int(round(s * L)) if cfg["rope_scaling"] == "yarn" else int(cfg["max_seq_len"])
    conf_ok = (c["architectures"] == ["LlamaForCausalLM"] and c["vocab_size"] == V and c["hidden_size"] == int(cfg["d_model"])
               and c["num_attention_heads"] == int(cfg["n_head"]) and c["num_key_value_heads"] == int(cfg["n_kv_head"])
               and c["intermediate_size"] == int(cfg["d_ff"]) and c["num_hidden_layers"] == int(cfg["n_layer"])
               and np.float32(c["rms_norm_eps"]) == np.float32(float(cfg["norm_eps"]))
               and np.float32(c["rope_theta"]) == np.float32(float(cfg["rope_theta"]))
               and c["tie_word_embeddings"] == tied and rs == want_rs and c["max_position_embeddings"] == maxpos
               and c["torch_dtype"] in ("float32", "bfloat16") and "_from_model_config" in g)
    check(f"{name}: config.json and generation_config.json", conf_ok,
          f"rope_scaling {rs}, max_position_embeddings {c['max_position_embeddings']}, tie_word_embeddings {c['tie_word_embeddings']}, "
          f"torch_dtype {c['torch_dtype']}")
    bf16 = c["torch_dtype"] == "bfloat16"
    names_ok = set(st) == set(t) and ("lm_head.weight" not in st) == tied
    vals_bad = []
    for n, x in t.items():
        if n not in st:
            continue
        dt, shape, raw = st[n]
        want = bf16_round(x).tobytes() if bf16 and x.dtype == np.float32 else x.astype("<f4" if x.dtype == np.float32 else "<u2").tobytes()
        if dt != ("BF16" if bf16 else "F32") or shape != x.shape or raw != want:
            vals_bad.append(n)
    emb = st.get("model.embed_tokens.weight", (None, (0,), b""))[1]
    check(f"{name}: {len(st)} tensors in {len(files)} file{'s' if len(files) > 1 else ''}, "
          + ("bf16 = the checkpoint rounded to nearest even" if bf16 else "fp32 bit-identical to the checkpoint")
          + (", tied: no lm_head.weight" if tied else ", untied") + f", embedding [{emb[0]}, {emb[1] if len(emb) > 1 else ''}] = vocab_size {V} (no padding)",
          names_ok and not vals_bad and emb[0] == V, f"bad {vals_bad[:3]}, names {sorted(set(st) ^ set(t))[:3]}" if vals_bad or not names_ok else "")


def cmd_hfstate(name, da, db, mode):
    torch, _, _ = tf()
    a, _ = hf_load(da)
    b, _ = hf_load(db, dtype=torch.bfloat16 if mode == "bf16" else None)
    sa, sb = a.state_dict(), b.state_dict()
    bad = []
    for k, v in sa.items():
        w = sb.get(k)
        if w is None:
            bad.append(k)
        elif mode == "bf16":
            if w.dtype != torch.bfloat16 or not torch.equal(v.to(torch.bfloat16).view(torch.int16), w.view(torch.int16)):
                bad.append(k)
        elif not torch.equal(v, w):
            bad.append(k)
    check(f"{name}: from_pretrained loads both; {'B = A rounded to bf16' if mode == 'bf16' else 'identical state dicts'}",
          not bad and set(sa) == set(sb), f"{len(sa)} entries" + (f", differ: {bad[:3]}" if bad else ""))


def cmd_autotok(name, d, textfile):
    _, transformers, _ = tf()
    from tokenizers import Tokenizer
    text = open(textfile, encoding="utf-8").read()
    at = transformers.AutoTokenizer.from_pretrained(d)
    ids = at(text, add_special_tokens=False)["input_ids"]
    ref = Tokenizer.from_file(os.path.join(d, "tokenizer.json")).encode(text, add_special_tokens=False).ids
    back = at.decode(ids)
    check(f"{name}: AutoTokenizer loads the export's tokenizer ({type(at).__name__}): same ids as tokenizers, decodes back",
          ids == ref and back == text, f"{len(ids)} tokens")


GREEDY_TOL = 1e-3


def greedy_why(torch, model, seq, nprompt, tol=GREEDY_TOL):
    """'' when seq (ids: nprompt prompt tokens, then generated ones) is a greedy decode of model for any correct
    arithmetic: teacher-forced on seq, every generated token's logit is within tol of the largest at its position
    (two correct programs -- a KV cache and full forwards, C and PyTorch, two BLAS kernels -- may part only at such a
    near-tie); otherwise the first position that is not greedy"""
    with torch.no_grad():
        L = model(input_ids=torch.tensor([seq[:-1]]), use_cache=False).logits[0].double()
    for i in range(nprompt, len(seq)):
        best, chosen = L[i - 1].max().item(), L[i - 1, seq[i]].item()
        if best - chosen > tol:
            return (f"position {i}: {seq[i]} has logit {chosen:.6f}, the argmax {int(L[i - 1].argmax())} {best:.6f} "
                    f"({best - chosen:.2e} higher; tolerance {tol:g}): {seq}")
    return ""


def cmd_generate(name, d, prompt, n, outfile):
    torch, transformers, old = tf()
    n = int(n)
    tok = transformers.AutoTokenizer.from_pretrained(d)
    enc = tok(prompt, return_tensors="pt")
    check(f"{name}: tok(prompt, return_tensors='pt') gives {', '.join(enc.keys())} ({type(tok).__name__})",
          sorted(enc.keys()) == ["attention_mask", "input_ids"], "LlamaForCausalLM.generate() takes no token_type_ids")
    cfg = transformers.LlamaConfig.from_pretrained(d)          # docs/huggingface.md's loading: the YaRN line for < 4.51
    rs = cfg.rope_scaling or {}
    if old and rs.get("rope_type", rs.get("type")) == "yarn" and rs.get("original_max_position_embeddings"):
        cfg.max_position_embeddings = rs["original_max_position_embeddings"]
    model = transformers.LlamaForCausalLM.from_pretrained(d, config=cfg).eval()
    eos = model.generation_config.eos_token_id
    eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    ids = enc["input_ids"]
    with torch.no_grad():
        gen = model.generate(**enc, max_new_tokens=n)               # docs/huggingface.md's call
    new = gen.shape[1] - ids.shape[1]
    why = greedy_why(torch, model, gen[0].tolist(), ids.shape[1])
    ends = [i for i, t in enumerate(gen[0].tolist()[ids.shape[1]:]) if t in eos]
    if not why and ends != ([new - 1] if new < n or ends else []):   # only the last new token may be an EOS
        why = f"{new} of {n} new tokens, EOS tokens at {ends}"
    check(f"{name}: model.generate(**tok(prompt), max_new_tokens={n}) is a greedy decode by full forwards "
          f"({new} new tokens{', ended by EOS' if new < n else ''})", not why, why)
    ids = gen
    text = tok.decode(ids[0])
    got = open(outfile, encoding="utf-8").read()
    check(f"{name}: the docs' snippet printed tok.decode() of those ids", got.endswith(text + "\n"),
          "" if got.endswith(text + "\n") else f"printed {got[-200:]!r}, decoded {text[-200:]!r}")


def cmd_bytetok(name, d, sample_ids, prompt, n):
    """the byte tokenizer hf_export writes for a byte-level model: AutoTokenizer encodes text to its UTF-8 bytes (ids =
    byte values) and decodes them back, <|eod|> is 256; generate() (greedy) gives build/sample --greedy's ids"""
    torch, transformers, _ = tf()
    tok = transformers.AutoTokenizer.from_pretrained(d)
    texts = ["the quick brown fox", "naïve café — 東京\n\ttabs  and  spaces ", "".join(chr(i) for i in range(1, 128)),
             "\u00ff\u0100\U0001F600 x"]
    bad = [t for t in texts if tok(t)["input_ids"] != list(t.encode()) or tok.decode(tok(t)["input_ids"]) != t]
    check(f"{name}: AutoTokenizer ({type(tok).__name__}, {len(tok)} tokens) encodes {len(texts)} texts (ASCII, UTF-8, "
          "controls, 4-byte) to their UTF-8 bytes and decodes them back; <|eod|> = 256 = eos",
          not bad and len(tok) == 257 and tok.convert_ids_to_tokens(256) == "<|eod|>" and tok.eos_token_id == 256,
          f"differs for {bad[:1]!r}" if bad else "")
    want = [int(x) for x in open(sample_ids).readline().strip().split(",") if x]
    model = transformers.LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32).eval()
    enc = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        gen = model.generate(**enc, max_new_tokens=int(n), do_sample=False, pad_token_id=256)[0].tolist()
    p = enc["input_ids"].shape[1]
    why = greedy_why(torch, model, want, p) or greedy_why(torch, model, gen, p)
    if not why and (len(gen) != len(want) or want[:p] != gen[:p]):
        why = f"generate {gen}, build/sample {want}"
    check(f"{name}: generate(**tok({prompt!r}), greedy, {n} new tokens) and build/sample --greedy's ids are both greedy "
          f"decodes by the exported model ({len(gen) - p} new, {'the same ids' if gen == want else 'parting at a near-tie'}): "
          f"{tok.decode(gen)[:40]!r}...", not why, why)


# ----------------------------------------------------------------------------------------------- tokenizers
def cmd_tokenizers(out, *files):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    def bpe(specials):
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.train(list(files), trainers.BpeTrainer(vocab_size=384, special_tokens=specials, show_progress=False,
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        return tok
    for sub in ("bpe", "llama", "nospecial", "wide"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    t = bpe(["<|endoftext|>"])
    t.save(os.path.join(out, "bpe", "tokenizer.json"))
    t = bpe(["<unk>", "<s>", "</s>"])
    t.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", t.token_to_id("<s>"))])
    t.save(os.path.join(out, "llama", "tokenizer.json"))
    json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, open(os.path.join(out, "llama", "tokenizer_config.json"), "w"))
    bpe([]).save(os.path.join(out, "nospecial", "tokenizer.json"))
    vocab = {"<|endoftext|>": 0, "[UNK]": 1}
    vocab.update({f"w{i}": i + 2 for i in range(70000)})
    w = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    w.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    w.add_special_tokens(["<|endoftext|>"])
    w.save(os.path.join(out, "wide", "tokenizer.json"))
    info(f"tokenizers trained locally on {len(files)} files: bpe/llama/nospecial vocabulary "
         f"{Tokenizer.from_file(os.path.join(out, 'bpe', 'tokenizer.json')).get_vocab_size()}, wide {w.get_vocab_size()}")


def cmd_decode(name, hf_dir, byte_dir, tokenizer, sep, skipped="0"):
    from tokenizers import Tokenizer
    tj = tokenizer if tokenizer.endswith(".json") else os.path.join(tokenizer, "tokenizer.json")
    tok = Tokenizer.from_file(tj)
    sep, skipped = int(sep), int(skipped)
    total, bad, magics = 0, [], set()
    for split in ("train", "val"):
        ht, mg = read_shards(os.path.join(hf_dir, f"{split}_*.bin"))
        bt, _ = read_shards(os.path.join(byte_dir, f"{split}_*.bin"))
        magics.update(mg)
        hdocs, first = docs_of(ht, sep)
        bdocs, _ = docs_of(bt, 256)
        texts = [tok.decode(d.tolist(), skip_special_tokens=False) for d in hdocs]
        want = []
        for d in bdocs:
            try:
                want.append(bytes(d.astype(np.uint8).tolist()).decode("utf-8"))
            except UnicodeDecodeError:
                skipped -= 1
        if texts != want or (len(ht) and first != 0):
            bad.append(f"{split}: {len(texts)} vs {len(want)} documents"
                       + next((f", first difference in document {i}: {a[:40]!r} vs {b[:40]!r}" for i, (a, b) in enumerate(zip(texts, want)) if a != b), ""))
        total += len(texts)
    wide = max(int(tok.get_vocab_size(with_added_tokens=True)), 0) > 65536
    want_magic = {20240521 if wide else 20240520}
    check(f"{name}: {total} documents decode to build/prepare's documents' text (same order, same train/val split), "
          f"separator {sep} before each, {'uint32' if wide else 'uint16'} shards",
          not bad and skipped == 0 and magics <= want_magic and magics,
          "; ".join(bad) + (f"; {skipped} skipped documents unaccounted" if skipped else "") + (f"; magics {sorted(magics)}" if magics - want_magic else ""))


# ----------------------------------------------------------------------------------------------- models
def cmd_make_hf(out, vocab):
    torch, transformers, old = tf()
    vocab = int(vocab)
    specs = {
        "m1": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                   max_position_embeddings=128, rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                   rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}),
        "m2": dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                   max_position_embeddings=32, rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                   rope_scaling={"rope_type": "yarn", "factor": 2.0}),
        "m3": dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                   max_position_embeddings=128, rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                   rope_scaling={"rope_type": "linear", "factor": 2.0}),
    }
    torch.manual_seed(1234)
    for name, kw in specs.items():
        cfg = transformers.LlamaConfig(vocab_size=vocab, **kw)
        full = cfg.max_position_embeddings
        orig = (cfg.rope_scaling or {}).get("original_max_position_embeddings")
        if old and orig:
            cfg.max_position_embeddings = orig          # this release reads the original length there
        m = transformers.LlamaForCausalLM(cfg)
        cfg.max_position_embeddings = full               # saved in the form >= 4.51 read
        with torch.no_grad():                            # weights large enough that logits vary
            for _, p in m.named_parameters():
                p.copy_(1.0 + 0.2 * torch.randn_like(p) if p.dim() == 1 else 0.15 * torch.randn_like(p))
        m.save_pretrained(os.path.join(out, name), safe_serialization=True)
        if name == "m1":
            m.save_pretrained(os.path.join(out, "m1s"), safe_serialization=True, max_shard_size="40KB")
    n = len(glob.glob(os.path.join(out, "m1s", "*.safetensors")))
    info(f"random HF Llama models m1 (GQA, untied, YaRN), m1s (m1 in {n} shards), m2 (MQA, tied, YaRN), m3 (linear) saved "
         f"with save_pretrained, vocabulary {vocab}")


COMMANDS = {"tokenizers": cmd_tokenizers, "make-hf": cmd_make_hf, "logits": cmd_logits,
            "asis": lambda n, d, h: cmd_logits(n, d, h, asis=True), "evalref": cmd_evalref, "same": cmd_same,
            "exported": cmd_exported, "hfstate": cmd_hfstate, "autotok": cmd_autotok, "decode": cmd_decode,
            "generate": cmd_generate, "bytetok": cmd_bytetok}


def main(argv):
    jobs, cur = [], []
    for a in argv:
        if a == ":::":
            jobs.append(cur)
            cur = []
        else:
            cur.append(a)
    jobs.append(cur)
    for job in jobs:
        if not job:
            continue
        try:
            COMMANDS[job[0]](*job[1:])
        except Exception as e:  # a crash of one command is one failed check, the others still run
            check(f"{' '.join(job[:2])}", False, f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
