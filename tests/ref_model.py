#!/usr/bin/env python3
"""ref_model.py — independent float64 PyTorch reference for ringlm's tool_dump output.

  python3 tests/ref_model.py DUMP        check one dump written by build/tests/tool_dump
  python3 tests/ref_model.py --selftest  check the reference itself (YaRN worked case, GQA attention vs a naive
                                         loop, rotate_half RoPE vs explicit pair rotation, AdamW closed form)

The model is a Llama-style causal LM (HF LlamaForCausalLM semantics, written here from the spec, not from HF
code). The dump's initial fp32 parameters are converted exactly to float64 and the whole forward/backward and
the AdamW step are redone in float64, so every difference measured is the C side's fp32 arithmetic (or a bug).

Dump format (little-endian): b"RLMDUMP1", then records until EOF:
  int32 name_len, name bytes, int32 dtype (0 f32, 1 i32, 2 utf-8 text), int32 ndim, int32 dims[ndim], data.

Prints one "ok   ..." / "FAIL ..." line per check, "# ..." info lines, and ends with "N passed, N failed";
exits 1 on any failure.

Tolerances (errors are max |C - ref| / max |ref| over a tensor unless said otherwise):
  rope/inv_freq      per element |C - ref| / |ref| <= 1e-6   (fp32 powf/expf formulations measured <= 7e-7)
  attention factor   relative 1e-6
  logits             1e-4   loss  relative 1e-4
  grad/<name>        1e-4 per tensor (fp32 C side measured <= ~1e-6)
  after/<name>       1e-5 relative to max |param|, two conditions, see check_after():
    (1) the C step equals float64 torch AdamW applied to the dumped params and the C side's OWN dumped grads
        (isolates the optimizer: fp32 rounding of the stored params, measured ~6e-8);
    (2) the C step lies within the range float64 torch AdamW gives for the reference grads perturbed by the
        grad tolerance. A plain comparison with the reference-grad step is not honest: Adam's first step moves
        every element by lr * g / (|g| + eps) ~ lr * sign(g), so an element whose gradient is within fp32
        noise of zero may legitimately move by +lr in C and -lr in the reference (seen with the real fp32
        C side: plain errors up to ~2e-3). The plain error and the number of such sign-ambiguous elements
        (nonzero grads with |g| below the grad tolerance) are printed for information only.
  Together: grads match the reference, the optimizer is exact on the C side's own grads, and the C step is
  consistent with the reference grads.
  step/gnorm         the global gradient norm the C step clipped with, against the reference gradients' norm, 1e-4
  Several steps (tool_dump --steps N; records grad@k/, step@k/lr, step@k/gnorm, after@k/ for k >= 2, adam/m/,
  adam/v/, steps):
    step@k/gnorm       the norm step k clipped with, against the norm of its dumped gradients grad@k/, 1e-5
    grad@k/<name>      the reference's gradient at the C side's parameters after step k - 1 (the same batch), 1e-4
    step@k/lr          the schedule's rate of step k - 1 written out here (warmup, then cosine or constant), 1e-6
    after@k/<name>     one stateful float64 torch AdamW fed the C side's own grads of steps 1..k (clipping each step
                       by their norm), 1e-5 relative to max |param|: the moments carried across steps, the bias
                       corrections of step k, and each step's learning rate
    adam/m, adam/v     that optimizer's exp_avg and exp_avg_sq after the last step, 1e-5 relative to their max
"""
import math
import struct
import sys

import numpy as np
import torch

MAGIC = b"RLMDUMP1"
ROPE_TOL = 1e-6
LOGITS_TOL = 1e-4
LOSS_TOL = 1e-4
GRAD_TOL = 1e-4
AFTER_TOL = 1e-5
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0

F64 = torch.float64
INT_KEYS = ["vocab_size", "d_model", "n_layer", "n_head", "n_kv_head", "d_ff", "max_seq_len",
            "rope_original_max_seq_len", "tie_embeddings"]
FLOAT_KEYS = ["rope_theta", "rope_factor", "norm_eps", "beta1", "beta2", "adam_eps", "weight_decay", "grad_clip"]
STR_KEYS = ["rope_scaling"]


class DumpError(Exception):
    pass


# ----------------------------------------------------------------------------------------------- reporting
class Report:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, good, detail=""):
        good = bool(good)
        if good:
            self.passed += 1
        else:
            self.failed += 1
        print(f"{'ok  ' if good else 'FAIL'} {name}" + (f": {detail}" if detail else ""), flush=True)
        return good

    @staticmethod
    def info(msg):
        print(f"# {msg}", flush=True)

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed", flush=True)
        return 1 if self.failed else 0


def rel_err(got, ref):
    """max |got - ref| / max |ref| (absolute when ref is all zero); inf on shape mismatch or non-finite."""
    got = torch.as_tensor(got, dtype=F64)
    ref = torch.as_tensor(ref, dtype=F64)
    if got.shape != ref.shape:
        return math.inf
    if got.numel() == 0:
        return 0.0
    if not bool(torch.isfinite(got).all()):
        return math.inf
    diff = (got - ref).abs().max().item()
    den = ref.abs().max().item()
    return diff / den if den > 0 else diff


# --------------------------------------------------------------------------------------------- dump reader
def read_dump(path):
    """Returns {name: (dtype, dims, value)}: value is a numpy array (dtype 0/1) or a str (dtype 2)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != MAGIC:
        raise DumpError(f"bad magic {data[:8]!r} (want {MAGIC!r})")
    off, recs = 8, {}

    def take(n):
        nonlocal off
        if n < 0 or off + n > len(data):
            raise DumpError(f"truncated at byte {off} (need {n} more bytes, file has {len(data)})")
        b = data[off:off + n]
        off += n
        return b

    def i32():
        return struct.unpack("<i", take(4))[0]

    while off < len(data):
        nlen = i32()
        if nlen <= 0 or nlen > 4096:
            raise DumpError(f"bad name length {nlen} at byte {off - 4}")
        name = take(nlen).decode("utf-8")
        dtype, ndim = i32(), i32()
        if dtype not in (0, 1, 2):
            raise DumpError(f"{name}: unknown dtype {dtype}")
        if ndim < 0 or ndim > 8:
            raise DumpError(f"{name}: bad ndim {ndim}")
        dims = [i32() for _ in range(ndim)]
        if any(d < 0 for d in dims):
            raise DumpError(f"{name}: negative dim {dims}")
        n = int(np.prod(dims, dtype=np.int64)) if ndim else 1
        raw = take(n * (1 if dtype == 2 else 4))
        if name in recs:
            raise DumpError(f"duplicate record {name}")
        if dtype == 2:
            val = raw.decode("utf-8")
        else:
            val = np.frombuffer(raw, dtype="<f4" if dtype == 0 else "<i4").reshape(dims).copy()
        recs[name] = (dtype, tuple(dims), val)
    return recs


def parse_config(text):
    cfg = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if "=" not in line:
            raise DumpError(f"config line without '=': {line!r}")
        k, v = line.split("=", 1)
        cfg[k.strip()] = v.strip().strip('"').strip("'")
    return cfg


def typed_config(raw):
    """Returns (cfg dict with typed values, list of problems)."""
    cfg, problems = {}, []
    if "rope_original_max_seq_len" not in raw and raw.get("rope_scaling", "").lower() != "yarn":
        raw = dict(raw, rope_original_max_seq_len="0")   # only YaRN reads it: the config dump leaves it out otherwise
    for k in INT_KEYS + FLOAT_KEYS + STR_KEYS:
        if k not in raw:
            problems.append(f"missing key {k}")
            continue
        v = raw[k]
        try:
            if k in INT_KEYS:
                if v.lower() in ("true", "false"):
                    cfg[k] = int(v.lower() == "true")
                else:
                    fv = float(v)
                    if fv != int(fv):
                        raise ValueError
                    cfg[k] = int(fv)
            elif k in FLOAT_KEYS:
                cfg[k] = float(v)
            else:
                cfg[k] = v.lower()
        except ValueError:
            problems.append(f"bad value {k} = {v!r}")
    if problems:
        return cfg, problems
    C, nh, nkv = cfg["d_model"], cfg["n_head"], cfg["n_kv_head"]
    if min(C, nh, nkv, cfg["vocab_size"], cfg["n_layer"], cfg["d_ff"]) <= 0:
        problems.append("non-positive size")
    elif C % nh:
        problems.append(f"d_model {C} not divisible by n_head {nh}")
    elif nh % nkv:
        problems.append(f"n_head {nh} not divisible by n_kv_head {nkv}")
    elif (C // nh) % 2:
        problems.append(f"head_dim {C // nh} is odd")
    if cfg["rope_scaling"] not in ("none", "linear", "yarn"):
        problems.append(f"unknown rope_scaling {cfg['rope_scaling']!r}")
    if cfg["tie_embeddings"] not in (0, 1):
        problems.append(f"tie_embeddings {cfg['tie_embeddings']} not 0/1")
    return cfg, problems


def expected_shapes(cfg):
    V, C, F = cfg["vocab_size"], cfg["d_model"], cfg["d_ff"]
    nh, nkv = cfg["n_head"], cfg["n_kv_head"]
    hd = C // nh
    s = {"model.embed_tokens.weight": (V, C)}
    for i in range(cfg["n_layer"]):
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = (C,)
        s[p + "self_attn.q_proj.weight"] = (nh * hd, C)
        s[p + "self_attn.k_proj.weight"] = (nkv * hd, C)
        s[p + "self_attn.v_proj.weight"] = (nkv * hd, C)
        s[p + "self_attn.o_proj.weight"] = (C, nh * hd)
        s[p + "post_attention_layernorm.weight"] = (C,)
        s[p + "mlp.gate_proj.weight"] = (F, C)
        s[p + "mlp.up_proj.weight"] = (F, C)
        s[p + "mlp.down_proj.weight"] = (C, F)
    s["model.norm.weight"] = (C,)
    if not cfg["tie_embeddings"]:
        s["lm_head.weight"] = (V, C)
    return s


# --------------------------------------------------------------------------------------------------- RoPE
def yarn_range(hd, theta, orig_len):
    """(low, high) of the YaRN ramp, HF semantics (beta_fast 32, beta_slow 1, truncated)."""
    def corr_dim(rot):
        return hd * math.log(orig_len / (2 * math.pi * rot)) / (2 * math.log(theta))
    low = max(math.floor(corr_dim(YARN_BETA_FAST)), 0)
    high = min(math.ceil(corr_dim(YARN_BETA_SLOW)), hd - 1)
    return float(low), float(high)


def rope_params(hd, theta, scaling, factor, orig_len):
    """float64 inverse frequencies [hd/2] and the attention factor (multiplies cos and sin)."""
    i = torch.arange(hd // 2, dtype=F64)
    base = torch.pow(torch.tensor(theta, dtype=F64), -2.0 * i / hd)
    if scaling == "none":
        return base, 1.0
    if scaling == "linear":
        return base / factor, 1.0
    if scaling == "yarn":
        low, high = yarn_range(hd, theta, orig_len)
        if low == high:
            high += 0.001
        ramp = ((i - low) / (high - low)).clamp(0.0, 1.0)
        extrap = 1.0 - ramp                      # 1: keep the original frequency, 0: interpolate (divide by s)
        inv = (base / factor) * (1.0 - extrap) + base * extrap
        attn = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
        return inv, attn
    raise ValueError(f"unknown rope_scaling {scaling!r}")


def rope_cos_sin(positions, inv_freq, attn_factor):
    """positions [B, T] -> cos, sin [B, T, 1, hd] (both halves share frequency i), times the attention factor."""
    ang = positions.to(F64)[..., None] * inv_freq          # [B, T, hd/2]
    ang = torch.cat([ang, ang], dim=-1)
    return (torch.cos(ang) * attn_factor)[:, :, None, :], (torch.sin(ang) * attn_factor)[:, :, None, :]


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


# ---------------------------------------------------------------------------------------------- the model
def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def attention(q, k, v, positions, docs=None):
    """q [B,T,nh,hd], k/v [B,T,nkv,hd]; causal by positions within each sequence; GQA (q head h -> kv h//g).
    docs [B,T] (document masking): the explicit block-diagonal causal mask, key j visible to query i only when
    both belong to the same document."""
    B, T, nh, hd = q.shape
    g = nh // k.shape[2]
    k = k.repeat_interleave(g, dim=2)
    v = v.repeat_interleave(g, dim=2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(hd)
    visible = positions[:, None, :] <= positions[:, :, None]     # [B, i, j]: key j visible to query i
    if docs is not None:
        visible = visible & (docs[:, None, :] == docs[:, :, None])
    s = s.masked_fill(~visible[:, None, :, :], float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("bhij,bjhd->bihd", p, v)


def forward(P, cfg, tokens, positions, inv_freq, attn_factor, docs=None, rope_positions=None):
    """P: {HF name: float64 tensor}. Returns logits [B, T, V]. docs: document ids (block-diagonal mask) or None;
    rope_positions: RoPE's positions when they differ from the attention's (restarted at each document)."""
    B, T = tokens.shape
    nh, nkv, eps = cfg["n_head"], cfg["n_kv_head"], cfg["norm_eps"]
    hd = cfg["d_model"] // nh
    cos, sin = rope_cos_sin(positions if rope_positions is None else rope_positions, inv_freq, attn_factor)
    x = P["model.embed_tokens.weight"][tokens]
    for i in range(cfg["n_layer"]):
        p = f"model.layers.{i}."
        h = rmsnorm(x, P[p + "input_layernorm.weight"], eps)
        q = (h @ P[p + "self_attn.q_proj.weight"].T).view(B, T, nh, hd)
        k = (h @ P[p + "self_attn.k_proj.weight"].T).view(B, T, nkv, hd)
        v = (h @ P[p + "self_attn.v_proj.weight"].T).view(B, T, nkv, hd)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = attention(q, k, v, positions, docs).reshape(B, T, nh * hd)
        x = x + o @ P[p + "self_attn.o_proj.weight"].T
        h2 = rmsnorm(x, P[p + "post_attention_layernorm.weight"], eps)
        gate = torch.nn.functional.silu(h2 @ P[p + "mlp.gate_proj.weight"].T)
        x = x + (gate * (h2 @ P[p + "mlp.up_proj.weight"].T)) @ P[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, P["model.norm.weight"], eps)
    head = P["model.embed_tokens.weight"] if cfg["tie_embeddings"] else P["lm_head.weight"]
    return x @ head.T


def document_ids(tokens, positions, eod, restart):
    """Document masking, written from the spec: a document starts at every eod token of a sequence; a token's
    document id is the number of eod tokens at or before its position; with restart its RoPE position is the
    distance from its document's eod token (a document that started before the sequence keeps its positions)."""
    B, T = tokens.shape
    docs, rpos = torch.zeros_like(positions), positions.clone()
    for b in range(B):
        starts = sorted(int(positions[b, t]) for t in range(T) if int(tokens[b, t]) == eod)
        for t in range(T):
            before = [x for x in starts if x <= int(positions[b, t])]
            docs[b, t] = len(before)
            if restart and before:
                rpos[b, t] = int(positions[b, t]) - before[-1]
    return docs, rpos


def mean_ce(logits, targets):
    valid = targets != -1
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp[valid].gather(-1, targets[valid][:, None].long())
    return -picked.sum() / valid.sum()


# ---------------------------------------------------------------------------------------------- optimizer
def adamw_torch(params, grads, cfg, lr):
    """One float64 torch AdamW step (weight decay only on 2-D tensors, global-norm clip first when grad_clip > 0).
    Returns ({name: new param}, total grad norm before clipping or None)."""
    ps = {}
    for n, p in params.items():
        t = torch.nn.Parameter(p.detach().to(F64).clone())
        t.grad = grads[n].detach().to(F64).clone()
        ps[n] = t
    norm = None
    if cfg["grad_clip"] > 0:
        norm = float(torch.nn.utils.clip_grad_norm_(list(ps.values()), cfg["grad_clip"]))
    decay = [t for t in ps.values() if t.dim() == 2]
    no_decay = [t for t in ps.values() if t.dim() != 2]
    groups = [{"params": decay, "weight_decay": cfg["weight_decay"]}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=lr, betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["adam_eps"])
    opt.step()
    return {n: t.detach() for n, t in ps.items()}, norm


def clip_coef(grads, clip):
    """torch.nn.utils.clip_grad_norm_'s factor: min(1, clip / (norm + 1e-6)); 1 when clipping is off."""
    if clip <= 0:
        return 1.0
    norm = math.sqrt(sum(float((g.to(F64) ** 2).sum()) for g in grads.values()))
    return min(1.0, clip / (norm + 1e-6))


def first_step_update(g, eps):
    """AdamW's first step moves p by -lr * m_hat / (sqrt(v_hat) + eps) = -lr * g / (|g| + eps) (monotone in g)."""
    return g / (g.abs() + eps)


# -------------------------------------------------------------------------------------------- dump checks
def get_record(recs, name, dtype, shape=None):
    """Returns (value, problem): value a torch tensor (dtype 0/1) or None with a problem string."""
    if name not in recs:
        return None, "missing"
    dt, dims, val = recs[name]
    if dt != dtype:
        return None, f"dtype {dt}, want {dtype}"
    if shape is not None and tuple(dims) != tuple(shape):
        return None, f"shape {list(dims)}, want {list(shape)}"
    return torch.from_numpy(val), None


def check_names(rep, recs, prefix, shapes):
    got = {n[len(prefix):] for n in recs if n.startswith(prefix)}
    want = set(shapes)
    missing, extra = sorted(want - got), sorted(got - want)
    bad = []
    for n in sorted(want & got):
        dt, dims, _ = recs[prefix + n]
        if dt != 0 or tuple(dims) != shapes[n]:
            bad.append(f"{n} dtype {dt} shape {list(dims)} (want f32 {list(shapes[n])})")
    detail = f"{len(got)} tensors, want {len(want)}"
    if missing:
        detail += f"; missing {missing}"
    if extra:
        detail += f"; extra {extra}"
    if bad:
        detail += f"; wrong {bad}"
    return rep.check(f"names {prefix}", not (missing or extra or bad), detail)


def check_after(rep, name, after_c, p0, g_ref, g_c, lr, wd, eps, coef_ref, after_ref_torch, after_cg_torch):
    """after/<name>: see the module doc. All tensors float64."""
    scale = after_ref_torch.abs().max().item()
    scale = scale if scale > 0 else 1.0
    if not bool(torch.isfinite(after_c).all()):
        return rep.check(f"after/{name}", False, "non-finite values")
    # (1) optimizer exactness against the C side's own grads
    err_opt = (after_c - after_cg_torch).abs().max().item() / scale
    # (2) within the step range allowed by the reference grads +- the grad tolerance (and clip-factor slack)
    g = coef_ref * g_ref
    delta = 2.0 * GRAD_TOL * coef_ref * g_ref.abs().max().item()
    base = p0 * (1.0 - lr * wd)
    lo = base - lr * first_step_update(g + delta, eps)
    hi = base - lr * first_step_update(g - delta, eps)
    dist = torch.maximum(torch.maximum(lo - after_c, after_c - hi), torch.zeros_like(after_c))
    err_rng = dist.max().item() / scale
    err_plain = (after_c - after_ref_torch).abs().max().item() / scale
    ambiguous = int(((g.abs() <= delta) & ((g != 0) | (g_c != 0))).sum())
    good = err_opt <= AFTER_TOL and err_rng <= AFTER_TOL
    return rep.check(f"after/{name}", good,
                     f"vs AdamW(C grads) {err_opt:.2e}, outside ref-grad range {err_rng:.2e} (tol {AFTER_TOL:.0e}); "
                     f"plain vs ref {err_plain:.2e}, sign-ambiguous {ambiguous}/{g.numel()}")


def schedule_lr(raw, step):
    """The learning rate of 0-based step `step`, written from the spec (linear warmup to lr over warmup_steps, then
    cosine to min_lr at max_steps, or constant). None for the other schedules and for lr_horizon."""
    lr, min_lr = float(raw["lr"]), float(raw["min_lr"])
    warm, total = int(raw["warmup_steps"]), int(raw["max_steps"])
    sched, horizon = raw.get("lr_schedule", "cosine"), int(raw.get("lr_horizon", "0"))
    if step < warm:
        return lr * (step + 1) / warm
    if sched == "constant":
        return lr
    if sched != "cosine" or horizon:
        return None
    if total - warm <= 0:
        return lr
    frac = min(1.0, (step - warm) / (total - warm))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * frac)) * (lr - min_lr)


def check_gnorm(rep, recs, key, grads, tol, what):
    """The global gradient norm the C side clipped step KEY with (its record) against the norm of GRADS (float64)."""
    g, e = get_record(recs, key, 0, (1,))
    if e:
        rep.check(key, False, e)
        return
    want = math.sqrt(sum(float((t.to(F64) ** 2).sum()) for t in grads.values()))
    err = abs(float(g.item()) - want) / want
    rep.check(f"{key} (the norm the step clipped with)", err <= tol, f"{float(g.item()):.7g} vs {what} {want:.7g}: rel {err:.1e}")


def check_steps(rep, recs, raw, cfg, shapes, P0, grads_c1, lr1, fwd):
    """Steps 2..N of a tool_dump --steps N dump (see the module doc). fwd(P) -> loss at params P (float64 leaves)."""
    n_steps, e = get_record(recs, "steps", 1, (1,))
    if e:
        rep.check("steps", False, e)
        return
    n_steps = int(n_steps.item())
    ps = {n: torch.nn.Parameter(P0[n].clone()) for n in shapes}
    decay = [t for n, t in ps.items() if len(shapes[n]) == 2]
    no_decay = [t for n, t in ps.items() if len(shapes[n]) != 2]
    groups = [{"params": decay, "weight_decay": cfg["weight_decay"]}] + ([{"params": no_decay, "weight_decay": 0.0}] if no_decay else [])
    opt = torch.optim.AdamW(groups, lr=lr1, betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["adam_eps"])
    lrs = []
    for k in range(1, n_steps + 1):
        pre = "" if k == 1 else f"@{k}"
        if k == 1:
            g_c, lr = grads_c1, lr1
        else:
            prev = "after" + ("" if k == 2 else f"@{k - 1}") + "/"
            g_c, problems = {}, []
            for n in shapes:
                t, e = get_record(recs, f"grad{pre}/" + n, 0, shapes[n])
                if e:
                    problems.append(f"{n}: {e}")
                else:
                    g_c[n] = t.to(F64)
            if not rep.check(f"step {k}: records grad{pre}/", not problems, "; ".join(problems) or f"{len(g_c)} tensors"):
                return
            check_gnorm(rep, recs, f"step{pre}/gnorm", g_c, 1e-5, "the norm of its dumped gradients")
            P = {}
            for n in shapes:
                t, e = get_record(recs, prev + n, 0, shapes[n])
                if e:
                    rep.check(f"step {k}: {prev}{n}", False, e)
                    return
                P[n] = t.to(F64).clone().requires_grad_(True)
            fwd(P).backward()
            worst = max(rel_err(g_c[n], P[n].grad.detach()) for n in shapes)
            rep.check(f"step {k}: grad{pre}/* (reference gradients at the C parameters after step {k - 1})",
                      worst <= GRAD_TOL, f"worst {worst:.2e} (tol {GRAD_TOL:.0e})")
            lr_t, e = get_record(recs, f"step{pre}/lr", 0, (1,))
            if e:
                rep.check(f"step{pre}/lr", False, e)
                return
            lr = float(lr_t.item())
        want = schedule_lr(raw, k - 1)
        if want is None:
            rep.info(f"step {k}: lr {lr:g} (schedule {raw.get('lr_schedule')} not recomputed here)")
        else:
            rep.check(f"step {k}: lr", abs(lr - want) <= 1e-6 * abs(want) + 1e-12, f"{lr:.9g}, schedule {want:.9g}")
        lrs.append(lr)
        for n in shapes:
            ps[n].grad = g_c[n].clone()
        if cfg["grad_clip"] > 0:
            norm = float(torch.nn.utils.clip_grad_norm_(list(ps.values()), cfg["grad_clip"]))
            rep.info(f"step {k}: C grad norm {norm:.6g}, clip {cfg['grad_clip']:g}" + (" (clipping)" if norm > cfg["grad_clip"] else ""))
        for gr in opt.param_groups:
            gr["lr"] = lr
        opt.step()
        if k == 1:
            continue                            # step 1's after/ is checked above (check_after)
        errs = []
        for n in shapes:
            a_c, e = get_record(recs, f"after{pre}/" + n, 0, shapes[n])
            if e:
                errs.append((math.inf, f"{n}: {e}"))
                continue
            scale = ps[n].detach().abs().max().item() or 1.0
            errs.append(((a_c.to(F64) - ps[n].detach()).abs().max().item() / scale, n))
        worst = max(errs)
        rep.check(f"step {k}: after{pre}/* (stateful torch AdamW on the C grads of steps 1..{k})", worst[0] <= AFTER_TOL,
                  f"worst {worst[0]:.2e} ({worst[1]}; tol {AFTER_TOL:.0e})")
    for key, state in (("m", "exp_avg"), ("v", "exp_avg_sq")):
        errs = []
        for n in shapes:
            t, e = get_record(recs, f"adam/{key}/" + n, 0, shapes[n])
            if e:
                errs.append((math.inf, f"{n}: {e}"))
                continue
            errs.append((rel_err(t, opt.state[ps[n]][state]), n))
        worst = max(errs)
        rep.check(f"adam/{key}/* after step {n_steps} == torch AdamW's {state}", worst[0] <= AFTER_TOL,
                  f"worst {worst[0]:.2e} ({worst[1]}; tol {AFTER_TOL:.0e})")
    rep.info(f"{n_steps} steps at lr {', '.join(f'{x:.6g}' for x in lrs)}")


def run_dump(path, rep):
    try:
        recs = read_dump(path)
    except (OSError, DumpError, UnicodeDecodeError, ValueError) as e:
        rep.check("dump readable", False, f"{path}: {e}")
        return
    rep.check("dump readable", True, f"{len(recs)} records")

    # ---- config
    if "config" not in recs or recs["config"][0] != 2:
        rep.check("config", False, "no text record 'config'")
        return
    try:
        raw = parse_config(recs["config"][2])
    except DumpError as e:
        rep.check("config", False, str(e))
        return
    cfg, problems = typed_config(raw)
    if not rep.check("config", not problems, "; ".join(problems) if problems else "all keys present and valid"):
        return
    V, C, nh, nkv = cfg["vocab_size"], cfg["d_model"], cfg["n_head"], cfg["n_kv_head"]
    hd = C // nh
    rep.info(f"V {V} C {C} L {cfg['n_layer']} heads {nh}/{nkv} hd {hd} F {cfg['d_ff']} rope {cfg['rope_scaling']} "
             f"(theta {cfg['rope_theta']:g}, factor {cfg['rope_factor']:g}, orig {cfg['rope_original_max_seq_len']}) "
             f"tied {cfg['tie_embeddings']} wd {cfg['weight_decay']:g} clip {cfg['grad_clip']:g}")

    # ---- batch
    tokens, e1 = get_record(recs, "tokens", 1)
    targets, e2 = get_record(recs, "targets", 1)
    positions, e3 = get_record(recs, "positions", 1)
    problems = [f"{n}: {e}" for n, e in (("tokens", e1), ("targets", e2), ("positions", e3)) if e]
    if not problems:
        if tokens.dim() != 2 or targets.shape != tokens.shape or positions.shape != tokens.shape:
            problems.append(f"shapes tokens {list(tokens.shape)} targets {list(targets.shape)} "
                            f"positions {list(positions.shape)} (want equal [B, T])")
        else:
            if tokens.numel() == 0:
                problems.append("empty batch")
            elif tokens.min() < 0 or tokens.max() >= V:
                problems.append(f"tokens outside [0, {V})")
            if ((targets < -1) | (targets >= V)).any():
                problems.append(f"targets outside {{-1}} u [0, {V})")
            if not (targets != -1).any():
                problems.append("no target counted (all -1)")
            if positions.numel() and (positions.min() < 0 or positions.max() >= cfg["max_seq_len"]):
                problems.append(f"positions outside [0, max_seq_len {cfg['max_seq_len']})")
    if not rep.check("batch", not problems, "; ".join(problems) if problems else
                     f"B {tokens.shape[0]} T {tokens.shape[1]}, {int((targets != -1).sum())} counted targets, "
                     f"positions {int(positions.min())}..{int(positions.max())}"):
        return
    tokens, targets, positions = tokens.long(), targets.long(), positions.long()

    # ---- tensor name sets
    shapes = expected_shapes(cfg)
    check_names(rep, recs, "param/", shapes)
    check_names(rep, recs, "grad/", shapes)
    check_names(rep, recs, "after/", shapes)
    if any(get_record(recs, "param/" + n, 0, s)[1] for n, s in shapes.items()):
        return                                  # the reference cannot run without every expected param

    # ---- RoPE
    inv_ref, attn_ref = rope_params(hd, cfg["rope_theta"], cfg["rope_scaling"], cfg["rope_factor"],
                                    cfg["rope_original_max_seq_len"])
    if cfg["rope_scaling"] == "yarn":
        low, high = yarn_range(hd, cfg["rope_theta"], cfg["rope_original_max_seq_len"])
        rep.info(f"yarn ramp low {low:g} high {high:g}, attention factor {attn_ref:.6f}")
    inv_c, e = get_record(recs, "rope/inv_freq", 0, (hd // 2,))
    if e:
        rep.check("rope/inv_freq", False, e)
    else:
        err = ((inv_c.to(F64) - inv_ref).abs() / inv_ref.abs()).max().item()
        err = err if math.isfinite(err) else math.inf
        rep.check("rope/inv_freq", err <= ROPE_TOL, f"max rel err {err:.2e} (tol {ROPE_TOL:.0e})")
    af_c, e = get_record(recs, "rope/attention_factor", 0, (1,))
    if e:
        rep.check("rope/attention_factor", False, e)
    else:
        err = abs(af_c.item() - attn_ref) / attn_ref
        rep.check("rope/attention_factor", err <= ROPE_TOL,
                  f"{af_c.item():.7f} vs {attn_ref:.7f}, rel err {err:.2e} (tol {ROPE_TOL:.0e})")

    # ---- forward / backward in float64 from the dumped initial params
    P0 = {n: torch.from_numpy(recs["param/" + n][2]).to(F64) for n in shapes}
    P = {n: t.clone().requires_grad_(True) for n, t in P0.items()}
    docs, rpos = None, None
    if int(raw.get("doc_mask", "0")):   # document masking (keys absent from older dumps: off)
        eod = int(raw.get("eod", "-1"))
        eod = eod if eod >= 0 else (256 if V == 257 else -1)
        docs, rpos = document_ids(tokens, positions, eod, int(raw.get("doc_positions", "0")))
        with torch.no_grad():
            plain = mean_ce(forward(P0, cfg, tokens, positions, inv_ref, attn_ref), targets).item()
            masked = mean_ce(forward(P0, cfg, tokens, positions, inv_ref, attn_ref, docs, rpos), targets).item()
        rep.info(f"document mask (eod {eod}, doc_positions {raw.get('doc_positions', '0')}): documents per sequence "
                 f"{[int(d.max()) + 1 - int(d.min()) for d in docs]}; the loss with the block-diagonal mask {masked:.6f}, "
                 f"with the plain causal mask {plain:.6f}")
    logits = forward(P, cfg, tokens, positions, inv_ref, attn_ref, docs, rpos)
    loss = mean_ce(logits, targets)
    loss.backward()
    grads_ref = {n: P[n].grad.detach() for n in shapes}

    lg_c, e = get_record(recs, "logits", 0, tuple(logits.shape))
    if e:
        rep.check("logits", False, e)
    else:
        err = rel_err(lg_c, logits.detach())
        rep.check("logits", err <= LOGITS_TOL, f"err {err:.2e} (tol {LOGITS_TOL:.0e})")
    # greedy hits: 1 where the target is the argmax of the logits (ignored targets 0); rows whose two largest
    # logits are within 1e-4 are ambiguous in fp32 and skipped
    hits_c, e = get_record(recs, "hits", 0, tuple(targets.shape))
    if e:
        rep.check("hits", False, e)
    else:
        lg = logits.detach()
        top2 = lg.topk(2, dim=-1).values
        clear = (top2[..., 0] - top2[..., 1]) > 1e-4
        ref_hits = ((lg.argmax(-1) == targets) & (targets != -1)).to(F64)
        got = torch.as_tensor(hits_c).to(F64)
        bad = int(((got != ref_hits) & clear).sum())
        rep.check("hits", bad == 0, f"{int(got.sum())} hits, {bad} disagree with torch argmax "
                                    f"({int((~clear).sum())} ambiguous rows skipped)")
    ls_c, e = get_record(recs, "loss", 0, (1,))
    if e:
        rep.check("loss", False, e)
    else:
        err = abs(ls_c.item() - loss.item()) / abs(loss.item())
        err = err if math.isfinite(err) else math.inf
        rep.check("loss", err <= LOSS_TOL, f"{ls_c.item():.7f} vs ref {loss.item():.7f}, rel err {err:.2e} "
                                           f"(tol {LOSS_TOL:.0e})")

    grads_c = {}
    for n in shapes:
        g_c, e = get_record(recs, "grad/" + n, 0, shapes[n])
        if e:
            rep.check(f"grad/{n}", False, e)
            continue
        grads_c[n] = g_c.to(F64)
        err = rel_err(grads_c[n], grads_ref[n])
        rep.check(f"grad/{n}", err <= GRAD_TOL, f"err {err:.2e} (tol {GRAD_TOL:.0e})")

    # ---- one AdamW step
    lr_c, e = get_record(recs, "step/lr", 0, (1,))
    if e:
        rep.check("step/lr", False, e)
        return
    lr = float(lr_c.item())
    if not rep.check("step/lr", math.isfinite(lr) and lr > 0, f"{lr:g}"):
        return
    check_gnorm(rep, recs, "step/gnorm", grads_ref, GRAD_TOL, "the reference gradients' norm")
    after_ref, norm_ref = adamw_torch(P0, grads_ref, cfg, lr)
    coef_ref = clip_coef(grads_ref, cfg["grad_clip"])
    if cfg["grad_clip"] > 0:
        rep.info(f"ref grad norm {norm_ref:.6g}, clip {cfg['grad_clip']:g} -> factor {coef_ref:.6g}"
                 + (" (clipping active)" if coef_ref < 1 else " (no clipping)"))
    if len(grads_c) != len(shapes):             # the C-grad step needs every C grad (global clip norm)
        rep.check("after/*", False, "cannot check: some grad/ tensors missing or malformed")
        return
    after_cg, _ = adamw_torch(P0, grads_c, cfg, lr)
    for n in shapes:
        a_c, e = get_record(recs, "after/" + n, 0, shapes[n])
        if e:
            rep.check(f"after/{n}", False, e)
            continue
        wd = cfg["weight_decay"] if len(shapes[n]) == 2 else 0.0
        check_after(rep, n, a_c.to(F64), P0[n], grads_ref[n], grads_c[n], lr, wd, cfg["adam_eps"],
                    coef_ref, after_ref[n], after_cg[n])
    want = schedule_lr(raw, 0)
    if want is not None:
        rep.check("step/lr (schedule)", abs(lr - want) <= 1e-6 * abs(want) + 1e-12, f"{lr:.9g}, schedule {want:.9g}")
    if "steps" in recs:
        check_steps(rep, recs, raw, cfg, shapes, P0, grads_c, lr,
                    lambda Pk: mean_ce(forward(Pk, cfg, tokens, positions, inv_ref, attn_ref, docs, rpos), targets))


# ----------------------------------------------------------------------------------------------- selftest
def naive_attention(q, k, v, positions):
    """Loop over every (b, head, query): softmax over visible keys, kv head = h // (nh / nkv)."""
    B, T, nh, hd = q.shape
    nkv = k.shape[2]
    out = torch.zeros_like(q)
    for b in range(B):
        for h in range(nh):
            kvh = h // (nh // nkv)
            for i in range(T):
                js = [j for j in range(T) if positions[b, j] <= positions[b, i]]
                s = [sum(q[b, i, h, d].item() * k[b, j, kvh, d].item() for d in range(hd)) / math.sqrt(hd)
                     for j in js]
                m = max(s)
                w = [math.exp(x - m) for x in s]
                z = sum(w)
                for d in range(hd):
                    out[b, i, h, d] = sum(w[t] * v[b, j, kvh, d].item() for t, j in enumerate(js)) / z
    return out


def naive_rope(x, positions, inv_freq, a):
    """Explicit rotation of each pair (i, i + hd/2) by angle pos * inv_freq[i], scaled by a."""
    B, T, H, hd = x.shape
    h = hd // 2
    out = torch.zeros_like(x)
    for b in range(B):
        for t in range(T):
            for i in range(h):
                th = positions[b, t].item() * inv_freq[i].item()
                c, s = math.cos(th) * a, math.sin(th) * a
                x1, x2 = x[b, t, :, i], x[b, t, :, i + h]
                out[b, t, :, i] = x1 * c - x2 * s
                out[b, t, :, i + h] = x2 * c + x1 * s
    return out


def selftest(rep):
    # YaRN worked case: hd 64, theta 1e4, s 4, L 4096 -> low 10, high 23, a = 1.1386
    hd, theta, s, L = 64, 1e4, 4.0, 4096
    low, high = yarn_range(hd, theta, L)
    rep.check("yarn range hd64/theta1e4/L4096", (low, high) == (10.0, 23.0), f"low {low:g} high {high:g} (want 10, 23)")
    inv, a = rope_params(hd, theta, "yarn", s, L)
    base = theta ** (-2.0 * torch.arange(hd // 2, dtype=F64) / hd)
    e_keep = ((inv[:11] - base[:11]).abs() / base[:11]).max().item()
    e_div = ((inv[23:] - base[23:] / s).abs() / (base[23:] / s)).max().item()
    mid = inv[11:23]
    between = bool(((mid < base[11:23]) & (mid > base[11:23] / s)).all())
    rep.check("yarn i 0..10 unchanged", e_keep < 1e-15, f"max rel err {e_keep:.1e}")
    rep.check("yarn i 23..31 divided by 4", e_div < 1e-15, f"max rel err {e_div:.1e}")
    rep.check("yarn i 11..22 strictly interpolated", between)
    ramp17 = (17 - 10) / 13
    want17 = base[17] / s * ramp17 + base[17] * (1 - ramp17)
    rep.check("yarn i 17 ramp 7/13", abs(inv[17].item() - want17.item()) < 1e-15 * want17.item())
    rep.check("yarn attention factor 1.1386", round(a, 4) == 1.1386, f"{a:.6f}")
    # a long original context: the ramp's upper end between d/2 and d - 1 (hd 64, theta 1e4, L 65536 -> 20, 33), so
    # the last frequency is only 11/13 of the way to theta_i / s
    lo3, hi3 = yarn_range(64, 1e4, 65536)
    inv3, _ = rope_params(64, 1e4, "yarn", 4.0, 65536)
    w31 = base[31] / 4 * (11 / 13) + base[31] * (2 / 13)
    rep.check("yarn hd64/theta1e4/L65536: low 20 high 33, i 31 at ramp 11/13", (lo3, hi3) == (20.0, 33.0)
              and abs(inv3[31].item() - w31.item()) < 1e-15 * w31.item() and inv3[20].item() == base[20].item(),
              f"low {lo3:g} high {hi3:g}")
    _, a1 = rope_params(hd, theta, "yarn", 1.0, L)
    rep.check("yarn factor 1 -> attention factor 1", a1 == 1.0)
    inv_l, a_l = rope_params(hd, theta, "linear", 2.5, L)
    rep.check("linear = base / factor, factor 1", bool(torch.allclose(inv_l, base / 2.5, rtol=1e-15)) and a_l == 1.0)
    # degenerate ramp (low == high -> high += 0.001) still yields a valid monotone ramp
    lo2, hi2 = yarn_range(10, 1e4, 16)
    inv2, _ = rope_params(10, 1e4, "yarn", 4.0, 16)
    b2 = 1e4 ** (-2.0 * torch.arange(5, dtype=F64) / 10)
    rep.check("yarn hd10/L16 (config b): i 0 kept, 1..4 divided", (lo2, hi2) == (0.0, 1.0)
              and abs(inv2[0].item() - b2[0].item()) < 1e-15
              and bool(torch.allclose(inv2[1:], b2[1:] / 4, rtol=1e-14)), f"low {lo2:g} high {hi2:g}")

    g = torch.Generator().manual_seed(0)
    # GQA attention vs naive loop, positions not equal to the row index (packed docs, repeats, out of order)
    B, T, nh, nkv, hd = 2, 7, 6, 2, 4
    q = torch.randn(B, T, nh, hd, generator=g, dtype=F64)
    k = torch.randn(B, T, nkv, hd, generator=g, dtype=F64)
    v = torch.randn(B, T, nkv, hd, generator=g, dtype=F64)
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 0, 1, 3, 2]])
    err = (attention(q, k, v, pos) - naive_attention(q, k, v, pos)).abs().max().item()
    rep.check("attention GQA 6/2 == naive loop", err < 1e-12, f"max abs err {err:.1e}")
    k1 = k[:, :, :1].contiguous()
    v1 = v[:, :, :1].contiguous()
    err = (attention(q, k1, v1, pos) - naive_attention(q, k1, v1, pos)).abs().max().item()
    rep.check("attention MQA 6/1 == naive loop", err < 1e-12, f"max abs err {err:.1e}")

    # rotate_half RoPE vs explicit pair rotation
    x = torch.randn(B, T, 3, 10, generator=g, dtype=F64)
    inv3, a3 = rope_params(10, 1e4, "yarn", 4.0, 16)
    cos, sin = rope_cos_sin(pos, inv3, a3)
    err = (apply_rope(x, cos, sin) - naive_rope(x, pos, inv3, a3)).abs().max().item()
    rep.check("rope rotate_half == pair (i, i+hd/2) rotation x attention factor", err < 1e-12, f"max abs err {err:.1e}")

    # AdamW closed form used by the after/ range check == torch AdamW (clip active, two groups)
    cfg = {"grad_clip": 0.5, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.95, "adam_eps": 1e-8}
    ps = {"w": torch.randn(5, 4, generator=g, dtype=F64), "n": torch.randn(4, generator=g, dtype=F64)}
    gs = {"w": torch.randn(5, 4, generator=g, dtype=F64), "n": torch.randn(4, generator=g, dtype=F64) * 1e-7}
    after, _ = adamw_torch(ps, gs, cfg, 1e-2)
    c = clip_coef(gs, 0.5)
    err = max((after[n] - (ps[n] * (1 - 1e-2 * (0.1 if n == "w" else 0.0))
                           - 1e-2 * first_step_update(c * gs[n], 1e-8))).abs().max().item() for n in ps)
    rep.check("AdamW step-1 closed form == torch AdamW", c < 1 and err < 1e-14, f"clip factor {c:.3f}, err {err:.1e}")


def main(argv):
    torch.set_num_threads(1)
    rep = Report()
    if len(argv) == 2 and argv[1] == "--selftest":
        selftest(rep)
    elif len(argv) == 2 and not argv[1].startswith("-"):
        run_dump(argv[1], rep)
    else:
        print(__doc__.split("\n\n")[0] if __doc__ else "", file=sys.stderr)
        print("usage: ref_model.py DUMP | --selftest", file=sys.stderr)
        return 2
    return rep.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
