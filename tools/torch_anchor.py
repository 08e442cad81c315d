#!/usr/bin/env python3
"""torch_anchor.py — the field's anchors beside ringlm, measured with PyTorch on the same GPU in the same run
(tools/gpu_check.sh step "torch"). Needs only torch and the standard library.

  python3 tools/torch_anchor.py [--json FILE] [--md FILE] [--budget S] [--T 8192,...] [--hd 64,128]
                                [--heads 16] [--kv 4] [--reps 5] [--gemm 8192]
                                [--train CONF:SEQ_LEN,...] [--steps 3] [--warmup 2] [--smoke]
  python3 tools/torch_anchor.py --nominal "NVIDIA H200"     (the nominal dense bf16 peak; no torch needed)

Measures, in this order, each row printed as it is measured and FILE rewritten after each:
  1. the bf16 matmul peak: GEMM^3 on random normal data (never zeros), median of --reps, CUDA events;
  2. a training step of each CONF (below: 4.), first, so that the budget never cuts the training rows;
  3. attention alone: torch.nn.functional.scaled_dot_product_attention, causal, bf16, with one backend forced
     at a time (flash, then cuDNN, through torch.nn.attention.sdpa_kernel), one sequence of T tokens, --heads
     query heads sharing --kv K/V heads: grouped-query attention through enable_gqa=True where the backend
     takes it, else K/V repeated to every query head before timing (the row says which). Forward, and forward
     + backward, TFLOP/s with bench_kernels.c's convention: forward 4 * T^2/2 * hd * heads, backward 2.5 x
     forward, so forward + backward is 3.5 x forward;
  4. a training step of each CONF (a ringlm config file: d_model, n_layer, n_head, n_kv_head, d_ff,
     vocab_size, tie_embeddings, norm_eps, rope_theta) at SEQ_LEN: RMSNorm, RoPE, GQA attention through SDPA
     (PyTorch picks the backend), SwiGLU, tied embeddings where the config says so, cross-entropy, gradient
     clipping at 1.0 and fused AdamW, in bf16 autocast with fp32 parameters, one sequence per step; tokens/s
     is the median of --steps timed steps after --warmup; model TFLOP/s uses model/model.c's
     model_flops_per_token (6 x matmul parameters + 6 x n_layer x seq_len x d_model per token).
RoPE tables are plain (YaRN changes the tables' values, not the cost). Eager mode (no torch.compile).
A shape that runs out of device memory says so in its row; when --budget seconds (from the start) are spent
the remaining rows say "skipped". Without PyTorch, or without a CUDA device outside --smoke, one line says so
and the exit status is 3.

--smoke: tiny shapes on the CPU (defaults T 256,512, heads 4, kv 2, gemm 256, train configs/tiny.conf:128),
for the tests of a machine without a GPU; a PyTorch without scaled_dot_product_attention (before 2.0) gets an
explicit softmax attention there, and the rows say so.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

T_START = time.monotonic()

# nominal dense (no sparsity) bf16 tensor-core peaks, TFLOP/s, from the vendors' data sheets; the first
# name fragment found in the device name wins, so the more specific names come first
NOMINAL_BF16 = [
    ("H200 NVL", 835.0), ("GH200", 989.0), ("H200", 989.0),
    ("H100 NVL", 835.0), ("H100 PCIe", 756.0), ("H100", 989.0),
    ("B200", 2250.0), ("A100", 312.0),
]


def nominal_bf16(name):
    for frag, tf in NOMINAL_BF16:
        if frag.lower() in (name or "").lower():
            return tf
    return None


def say(*a):
    print("torch_anchor:", *a, flush=True)


def read_conf(path):
    """key = value lines of a ringlm config file (comments after #)."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if "=" in line:
                k, v = (s.strip() for s in line.split("=", 1))
                out[k] = v
    return out


def model_flops_per_token(c, seq_len):
    """model/model.c model_flops_per_token: 6 x matmul parameters (LM head included) + causal attention."""
    C, nh, nkv, F, L, V = c["d_model"], c["n_head"], c["n_kv_head"], c["d_ff"], c["n_layer"], c["vocab_size"]
    hd = C / nh
    per_layer = C * nh * hd * 2 + C * nkv * hd * 2 + 3 * C * F
    return 6.0 * (L * per_layer + V * C) + 6.0 * L * seq_len * C


def int_list(s):
    return [int(x) for x in s.split(",") if x]


class Results:
    def __init__(self, path_json, path_md):
        self.path_json, self.path_md = path_json, path_md
        self.d = {"status": "ok", "versions": {}, "device": None, "nominal_bf16_tflops": None, "matmul": None,
                  "attention": [], "train": [], "notes": []}

    def note(self, msg):
        say(msg)
        self.d["notes"].append(msg)

    def save(self):
        if self.path_json:
            tmp = self.path_json + ".tmp"
            with open(tmp, "w") as f:
                json.dump(self.d, f, indent=1)
            os.replace(tmp, self.path_json)

    def markdown(self):
        d = self.d
        L = [f"PyTorch anchors on {d['device']} ({', '.join(f'{k} {v}' for k, v in d['versions'].items())})", ""]
        if d["matmul"]:
            m = d["matmul"]
            nom = f"{fmt(d['nominal_bf16_tflops'])} TFLOP/s" if d["nominal_bf16_tflops"] else "unknown"
            L.append(f"bf16 matmul {m['n']}^3 (random data): {fmt(m.get('tflops'))} TFLOP/s; nominal dense bf16: {nom}")
            L.append("")
        L += ["| backend | head_dim | T | heads (kv) | GQA | forward ms | forward TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s "
              "| backward TFLOP/s | status |", "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---|"]
        for r in d["attention"]:
            L.append(f"| {r['backend']} | {r['hd']} | {r['T']} | {r['heads']} ({r['kv']}) | {r.get('gqa', '')} | "
                     f"{fmt(r.get('fwd_ms'))} | {fmt(r.get('fwd_tflops'))} | {fmt(r.get('fwdbwd_ms'))} | "
                     f"{fmt(r.get('fwdbwd_tflops'))} | {fmt(r.get('bwd_tflops'))} | {r['status']} |")
        L += ["", "| config | seq_len | tokens/s | step ms | model TFLOP/s | peak memory GiB | optimizer | status |",
              "|---|---:|---:|---:|---:|---:|---|---|"]
        for r in d["train"]:
            L.append(f"| {r['config']} | {r['seq_len']} | {fmt(r.get('tokens_per_s'), 0)} | {fmt(r.get('step_ms'))} | "
                     f"{fmt(r.get('model_tflops'))} | {fmt(r.get('peak_mem_gib'))} | {r.get('optimizer', '')} | "
                     f"{r['status']} |")
        for n in d["notes"]:
            L.append(f"\nnote: {n}")
        if self.path_md:
            with open(self.path_md, "w") as f:
                f.write("\n".join(L) + "\n")


def fmt(x, nd=1):
    if x is None:
        return ""
    if isinstance(x, float):
        return f"{x:.{nd}f}" if abs(x) >= 1 or x == 0 else f"{x:.3g}"
    return str(x)


def main():
    ap = argparse.ArgumentParser(description="PyTorch anchors for tools/gpu_check.sh")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--md")
    ap.add_argument("--budget", type=float, default=50.0)
    ap.add_argument("--T")
    ap.add_argument("--hd", default="64,128")
    ap.add_argument("--heads", type=int)
    ap.add_argument("--kv", type=int)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--gemm", type=int)
    ap.add_argument("--train")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--nominal")
    a = ap.parse_args()
    if a.nominal is not None:
        tf = nominal_bf16(a.nominal)
        print(f"{tf:g}" if tf else "unknown")
        return 0
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if a.smoke:
        a.T = a.T or "256,512"
        a.heads, a.kv, a.gemm = a.heads or 4, a.kv or 2, a.gemm or 256
        a.train = a.train if a.train is not None else "configs/tiny.conf:128"
        a.reps, a.steps, a.warmup = min(a.reps, 2), min(a.steps, 2), min(a.warmup, 1)
    else:
        a.T = a.T or "8192,16384,32768,65536"
        a.heads, a.kv, a.gemm = a.heads or 16, a.kv or 4, a.gemm or 8192
        if a.train is None:
            a.train = ("configs/llama_125m_128k.conf:8192,configs/llama_125m_128k.conf:32768,"
                       "configs/llama_1b_128k.conf:8192,configs/llama_1b_128k.conf:32768")
    res = Results(a.json, a.md)
    try:
        import torch
    except Exception as e:   # noqa: BLE001 — any import failure means: no usable PyTorch here
        res.d["status"] = f"no PyTorch ({type(e).__name__}: {e})"
        say(f"no PyTorch here ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}): "
            "the anchors are not measured")
        res.save()
        return 3
    v = res.d["versions"]
    v["torch"] = torch.__version__
    v["cuda"] = getattr(torch.version, "cuda", None) or "none"
    try:
        v["cudnn"] = str(torch.backends.cudnn.version())
    except Exception:  # noqa: BLE001
        v["cudnn"] = "none"
    if a.smoke:
        dev = torch.device("cpu")
        res.d["device"] = "CPU (smoke)"
    else:
        if not torch.cuda.is_available():
            res.d["status"] = "no CUDA device"
            say(f"PyTorch {torch.__version__} sees no CUDA device (CUDA build {v['cuda']}): the anchors are not "
                "measured")
            res.save()
            return 3
        dev = torch.device("cuda")
        res.d["device"] = torch.cuda.get_device_name(0)
        try:
            nv = torch.cuda.nccl.version()
            v["nccl"] = ".".join(map(str, nv)) if isinstance(nv, tuple) else str(nv)
        except Exception:  # noqa: BLE001
            v["nccl"] = "none"
        res.d["nominal_bf16_tflops"] = nominal_bf16(res.d["device"])
    say(f"PyTorch {v['torch']} (CUDA {v['cuda']}, cuDNN {v['cudnn']}{', NCCL ' + v['nccl'] if 'nccl' in v else ''}) "
        f"on {res.d['device']}; budget {a.budget:.0f} s")
    res.save()
    bench = Bench(torch, dev, res, a)
    bench.matmul()
    # the training rows first (the 1B @ 32K step is the MFU comparison's anchor), then attention alone in what the
    # budget leaves
    for item in [s for s in a.train.split(",") if s]:
        conf, _, L = item.rpartition(":")
        path = conf if os.path.isabs(conf) else os.path.join(repo, conf)
        bench.train(path, int(L))
    bench.attention(int_list(a.hd), int_list(a.T))
    res.markdown()
    return 0


class Bench:
    def __init__(self, torch, dev, res, a):
        self.torch, self.dev, self.res, self.a = torch, dev, res, a
        self.cuda = dev.type == "cuda"
        F = torch.nn.functional
        self.has_sdpa = hasattr(F, "scaled_dot_product_attention")
        self.kernel_ctx = None   # backend name -> context manager factory
        self.no_math = lambda: None   # the training step's: every fused backend, never the T x T math one
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            self.kernel_ctx = {name: (lambda b=getattr(SDPBackend, attr, None): sdpa_kernel([b]) if b is not None else None)
                               for name, attr in (("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"))}
            fused = [getattr(SDPBackend, n) for n in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")
                     if hasattr(SDPBackend, n)]
            self.no_math = lambda: sdpa_kernel(fused)
        except Exception:  # noqa: BLE001 — torch before 2.3: only the older switch, which has no cuDNN backend
            if self.has_sdpa and hasattr(torch.backends.cuda, "sdp_kernel"):
                self.kernel_ctx = {"flash": lambda: torch.backends.cuda.sdp_kernel(
                    enable_flash=True, enable_math=False, enable_mem_efficient=False), "cudnn": lambda: None}
                self.no_math = lambda: torch.backends.cuda.sdp_kernel(
                    enable_flash=True, enable_math=False, enable_mem_efficient=True)
        if not self.has_sdpa:
            res.note(f"PyTorch {torch.__version__} has no scaled_dot_product_attention: explicit softmax attention "
                     "(materialises T x T) stands in for it")

    def left(self):
        return self.a.budget - (time.monotonic() - T_START)

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def time_ms(self, fn, reps):
        """median milliseconds of fn() over reps runs after one warm-up (CUDA events on a GPU)."""
        torch = self.torch
        fn()
        self.sync()
        ts = []
        for _ in range(reps):
            if self.cuda:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                e1.synchronize()
                ts.append(e0.elapsed_time(e1))
            else:
                t0 = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)

    def oom(self, e):
        msg = str(e)
        return "out of memory" in msg.lower() or type(e).__name__ == "OutOfMemoryError"

    def free(self):
        if self.cuda:
            self.torch.cuda.empty_cache()

    def matmul(self):
        torch, n = self.torch, self.a.gemm
        row = {"n": n, "dtype": "bf16", "status": "ok"}
        try:
            A = torch.randn(n, n, device=self.dev, dtype=torch.bfloat16)
            B = torch.randn(n, n, device=self.dev, dtype=torch.bfloat16)
            ms = self.time_ms(lambda: A @ B, self.a.reps)
            row.update(ms=ms, tflops=2.0 * n ** 3 / (ms * 1e-3) / 1e12)
            A = B = None
        except Exception as e:  # noqa: BLE001
            row["status"] = "out of memory" if self.oom(e) else f"error: {str(e).splitlines()[0][:160]}"
        self.free()
        self.res.d["matmul"] = row
        self.res.save()
        say(f"matmul {n}^3 bf16: {fmt(row.get('tflops'))} TFLOP/s ({row['status']})")

    # ---- attention alone
    def sdpa(self, q, k, v, gqa):
        F = self.torch.nn.functional
        if not self.has_sdpa:
            return self.explicit_attention(q, k, v)
        if gqa == "enable_gqa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def explicit_attention(self, q, k, v):
        torch = self.torch
        T, hd = q.shape[-2], q.shape[-1]
        if k.shape[1] != q.shape[1]:
            r = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1)
        s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(hd)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)

    def attention(self, hds, Ts):
        nh, nkv = self.a.heads, self.a.kv
        if not self.cuda:   # the CPU smoke: the GPU backends do not exist there
            backends = [("explicit softmax" if not self.has_sdpa else "SDPA (CPU default)", None)]
        else:
            backends = []
            for be in ("flash", "cudnn"):
                f = (self.kernel_ctx or {}).get(be)
                if f is None or f() is None:
                    self.res.note(f"SDPA backend {be} cannot be forced in PyTorch {self.torch.__version__}: its rows "
                                  "are missing")
                else:
                    backends.append((be, f))
        for be, ctx_f in backends:
            for hd in hds:
                for T in Ts:
                    row = {"backend": be, "hd": hd, "T": T, "heads": nh, "kv": nkv}
                    if self.left() <= 0:
                        row["status"] = "skipped: time budget spent"
                    else:
                        self.attention_case(row, ctx_f)
                    self.res.d["attention"].append(row)
                    self.res.save()
                    say(f"attention {be} hd {hd} T {T}: forward {fmt(row.get('fwd_tflops'))}, fwd+bwd "
                        f"{fmt(row.get('fwdbwd_tflops'))} TFLOP/s ({row['status']}"
                        f"{', ' + row['gqa'] if 'gqa' in row else ''})")

    def attention_case(self, row, ctx_f):
        torch, reps = self.torch, self.a.reps
        hd, T, nh, nkv = row["hd"], row["T"], row["heads"], row["kv"]
        fl = 4.0 * T * T / 2 * hd * nh
        ctx = ctx_f() if ctx_f else None
        q = k = v = do = kk = vv = None
        try:
            if ctx is not None:
                ctx.__enter__()
            g = torch.Generator(device=self.dev).manual_seed(hd * 100003 + T)
            mk = lambda h: torch.randn(1, h, T, hd, device=self.dev, dtype=torch.bfloat16, generator=g)  # noqa: E731
            q, k, v, do = mk(nh), mk(nkv), mk(nkv), mk(nh)
            q.requires_grad_(True)
            gqa, last = None, None
            # GQA as the backend takes it, forward and backward: enable_gqa, else K/V repeated to every query head
            for mode in (["enable_gqa", "repeated K/V"] if self.has_sdpa else ["repeated K/V"]):
                kk, vv = (k, v) if mode == "enable_gqa" else (k.repeat_interleave(nh // nkv, 1),
                                                              v.repeat_interleave(nh // nkv, 1))
                kk, vv = kk.detach().requires_grad_(True), vv.detach().requires_grad_(True)
                try:
                    self.sdpa(q, kk, vv, mode).backward(do)
                    gqa = mode
                    break
                except (RuntimeError, TypeError) as e:
                    if self.oom(e):
                        raise
                    last = e
            if gqa is None:
                row["status"] = f"unavailable: {str(last).splitlines()[0][:160]}"
                return
            row["gqa"] = gqa

            def fwd():
                return self.sdpa(q, kk, vv, gqa)

            def fwdbwd():
                q.grad = kk.grad = vv.grad = None
                self.sdpa(q, kk, vv, gqa).backward(do)

            f_ms = self.time_ms(fwd, reps)
            row.update(fwd_ms=f_ms, fwd_tflops=fl / (f_ms * 1e-3) / 1e12, status="ok (forward only)")
            fb_ms = self.time_ms(fwdbwd, reps)
            row.update(fwdbwd_ms=fb_ms, fwdbwd_tflops=3.5 * fl / (fb_ms * 1e-3) / 1e12,
                       bwd_tflops=2.5 * fl / ((fb_ms - f_ms) * 1e-3) / 1e12 if fb_ms > f_ms else None, status="ok")
        except Exception as e:  # noqa: BLE001
            why = "out of memory" if self.oom(e) else f"error: {str(e).splitlines()[0][:160]}"
            row["status"] = why if "fwd_ms" not in row else f"forward only; forward+backward: {why}"
        finally:
            if ctx is not None:
                ctx.__exit__(None, None, None)
            q = k = v = do = kk = vv = None
            self.free()

    # ---- a training step of a Llama configuration
    def train(self, path, L):
        name = os.path.splitext(os.path.basename(path))[0]
        row = {"config": name, "seq_len": L}
        if self.left() <= 0:
            row["status"] = "skipped: time budget spent"
        else:
            try:
                raw = read_conf(path)
                cfg = {k: int(raw[k]) for k in ("vocab_size", "d_model", "n_layer", "n_head", "n_kv_head", "d_ff")}
                cfg["tie"] = raw.get("tie_embeddings", "0") == "1"
                cfg["eps"] = float(raw.get("norm_eps", "1e-5"))
                cfg["theta"] = float(raw.get("rope_theta", "10000"))
                ctx = self.no_math() if self.cuda else None
                if ctx is None:
                    self.train_case(row, cfg, L)
                else:
                    with ctx:
                        self.train_case(row, cfg, L)
                    row["attention"] = "SDPA: flash, cuDNN or efficient, PyTorch's choice (math excluded)"
            except Exception as e:  # noqa: BLE001
                row["status"] = "out of memory" if self.oom(e) else f"error: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
            self.free()
        self.res.d["train"].append(row)
        self.res.save()
        say(f"train {name} at {L}: {fmt(row.get('tokens_per_s'), 0)} tokens/s, {fmt(row.get('model_tflops'))} model "
            f"TFLOP/s ({row['status']})")

    def train_case(self, row, cfg, T):
        torch = self.torch
        nn, F = torch.nn, torch.nn.functional
        bench = self
        C, nh, nkv, Fd, V = cfg["d_model"], cfg["n_head"], cfg["n_kv_head"], cfg["d_ff"], cfg["vocab_size"]
        hd = C // nh

        class RMSNorm(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.ones(C))

            def forward(self, x):
                xf = x.float()
                return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + cfg["eps"]) * self.w).to(x.dtype)

        def rope(x, cos, sin):
            h = x.shape[-1] // 2
            x1, x2 = x[..., :h].float(), x[..., h:].float()
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).to(x.dtype)

        class Layer(nn.Module):
            def __init__(self):
                super().__init__()
                self.n1, self.n2 = RMSNorm(), RMSNorm()
                self.q = nn.Linear(C, nh * hd, bias=False)
                self.k = nn.Linear(C, nkv * hd, bias=False)
                self.v = nn.Linear(C, nkv * hd, bias=False)
                self.o = nn.Linear(nh * hd, C, bias=False)
                self.gate = nn.Linear(C, Fd, bias=False)
                self.up = nn.Linear(C, Fd, bias=False)
                self.down = nn.Linear(Fd, C, bias=False)

            def forward(self, x, cos, sin):
                B = x.shape[0]
                h = self.n1(x)
                q = self.q(h).view(B, T, nh, hd).transpose(1, 2)
                k = self.k(h).view(B, T, nkv, hd).transpose(1, 2)
                v = self.v(h).view(B, T, nkv, hd).transpose(1, 2)
                q, k = rope(q, cos, sin), rope(k, cos, sin)
                if bench.train_gqa != "enable_gqa":
                    k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
                y = bench.sdpa(q, k, v, bench.train_gqa)
                x = x + self.o(y.transpose(1, 2).reshape(B, T, nh * hd))
                h = self.n2(x)
                return x + self.down(F.silu(self.gate(h)) * self.up(h))

        class Llama(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(V, C)
                self.layers = nn.ModuleList(Layer() for _ in range(cfg["n_layer"]))
                self.norm = RMSNorm()
                self.head = None if cfg["tie"] else nn.Linear(C, V, bias=False)

            def forward(self, idx, tgt, cos, sin):
                x = self.emb(idx)
                for layer in self.layers:
                    x = layer(x, cos, sin)
                x = self.norm(x)
                logits = F.linear(x, self.emb.weight) if self.head is None else self.head(x)
                return F.cross_entropy(logits.float().view(-1, V), tgt.view(-1))

        # grouped-query attention: enable_gqa where SDPA takes it (tried on a tiny input), else repeated K/V
        self.train_gqa = "repeated K/V"
        if self.has_sdpa:
            try:
                t = torch.zeros(1, nh, 16, hd, device=self.dev, dtype=torch.bfloat16)
                self.sdpa(t, t[:, :nkv], t[:, :nkv], "enable_gqa")
                self.train_gqa = "enable_gqa"
            except (RuntimeError, TypeError):
                pass
        if hasattr(torch.device, "__enter__"):   # PyTorch 2: parameters made on the device (no host init)
            with torch.device(self.dev):
                model = Llama()
        else:
            model = Llama().to(self.dev)
        params = list(model.parameters())
        try:
            opt = torch.optim.AdamW(params, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
            row["optimizer"] = "fused AdamW"
        except TypeError:
            opt = torch.optim.AdamW(params, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
            row["optimizer"] = "AdamW (this PyTorch has no fused AdamW)"
        except RuntimeError as e:
            opt = torch.optim.AdamW(params, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
            row["optimizer"] = "AdamW (fused refused: " + str(e).splitlines()[0][:60] + ")"
        inv = 1.0 / (cfg["theta"] ** (torch.arange(0, hd, 2, device=self.dev, dtype=torch.float32) / hd))
        ang = torch.arange(T, device=self.dev, dtype=torch.float32)[:, None] * inv[None, :]
        cos, sin = ang.cos(), ang.sin()
        g = torch.Generator(device=self.dev).manual_seed(T)
        idx = torch.randint(0, V, (1, T), device=self.dev, generator=g)
        tgt = torch.randint(0, V, (1, T), device=self.dev, generator=g)

        def step():
            with torch.autocast(device_type=self.dev.type, dtype=torch.bfloat16):
                loss = model(idx, tgt, cos, sin)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
        ts = []
        for i in range(self.a.warmup + self.a.steps):
            if i > 0 and self.left() <= 0:
                break
            self.sync()
            t0 = time.perf_counter()
            loss = step()
            self.sync()
            if i >= self.a.warmup:
                ts.append(time.perf_counter() - t0)
        if not math.isfinite(float(loss)):
            raise RuntimeError(f"loss {float(loss)} is not finite")
        row["gqa"] = self.train_gqa
        if not ts:
            row["status"] = "skipped: time budget spent during the warm-up"
            return
        s = statistics.median(ts)
        row.update(tokens_per_s=T / s, step_ms=s * 1e3, steps=len(ts),
                   model_tflops=T / s * model_flops_per_token(cfg, T) / 1e12, status="ok")
        if len(ts) < self.a.steps:
            row["status"] = f"ok ({len(ts)} of {self.a.steps} steps: time budget spent)"
        if self.cuda:
            row["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30


if __name__ == "__main__":
    sys.exit(main())
