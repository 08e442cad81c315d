#!/usr/bin/env bash
# The step anatomy (RINGLM_CUDA_ANATOMY, backend/cuda/anatomy.cu) on the emulated CUDA backend:
#   1. every kernel of a training step has a declared traffic formula, and the emulation's page count of each launch
#      (RINGLM_EMU_TRAFFIC) lies within two pages per pointer of its formula (bounds for gathers and strides);
#   2. the dry run (RINGLM_EMU_DRY: nothing executed, what tools/bench/step_anatomy.sh uses for the large configs)
#      counts the same launches, synchronisations and copies as the run that executes, and the same bytes;
#   3. on a ring of 2 (NCCL) both ranks write their report, with the ring's collectives counted;
#   the attention FLOPs of one rank (and with recompute = full) and the sum over a ring's ranks equal the closed form;
#   4. ZeRO-3 with offload and a tiled MLP on dp 2 (NCCL, 3 layers): every kernel within its formula, the gathers
#      (prefetched on the communication stream) and the reduce-scatters counted, the offload copies counted as copies
#      on the copy queue, a cast per gathered unit (its bf16 copy) and still one host synchronisation per step;
#   and every step has exactly one host synchronisation: the download of its loss and gradient norm at its end; with
#   bf16 activations (the defaults) every matmul has bf16 operands and nothing is converted but the weights (once per
#   step) and the attention output (stored once per layer), with act_dtype = fp32 fp32 operands and no cast.
cd "$(dirname "$0")/.."
source tests/lib.sh
E=build/emu
[ -x $E/train ] || { bad "no $E/train: run make cuda-emu"; finish; }
build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null 2>"$T/prep.err" || { bad "prepare: $(cat "$T/prep.err")"; finish; }
cat > "$T/a.conf" <<CONF
vocab_size = 257
d_model = 128
n_layer = 2
n_head = 4
n_kv_head = 2
d_ff = 352
max_seq_len = 256
seq_len = 128
batch_size = 2
micro_batch = 2
max_steps = 2
lr = 3e-3
warmup_steps = 1
log_every = 1
val_every = 0
ckpt_every = 0
save_final = 0
train_data = $T/data/train_*.bin
CONF
arun() {   # NAME NP [ENV=VALUE ...] -- [ARGS...]: the anatomy of step 2 into $T/NAME.md
  local name=$1 np=$2; shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" RINGLM_CUDA_ANATOMY="$T/$name.md" timeout $HANG_S $(launch "$np") $E/train -c "$T/a.conf" \
    --out_dir "$T/$name" "$@" </dev/null >"$T/$name.out" 2>"$T/$name.err" \
    || { bad "$name: exit $?: $(head -c 400 "$T/$name.err")"; return 1; }
  [ -s "$T/$name.md" ] && [ -s "$T/$name.md.json" ] || { bad "$name: no report $T/$name.md(.json)"; return 1; }
}

# ---- 1. declared traffic against the emulation's page count ----
arun traffic 1 RINGLM_EMU_TRAFFIC=1 -- &&
  $PY - "$T/traffic.md.json" "$T/traffic.md" <<'PYEOF' >"$T/t.out" 2>&1 && ok "traffic: $(cat "$T/t.out")" || bad "traffic: $(cat "$T/t.out")"
import json, sys
a = json.load(open(sys.argv[1])); md = open(sys.argv[2]).read()
assert a["kernels"] > 50 and a["undeclared"] == 0, ("kernels without a formula", a["undeclared"])
assert a["traffic_counted"] == a["kernels"], ("every launch counted", a["traffic_counted"], a["kernels"])
bad = [k for k, v in a["kernels_by_name"].items() if v["bad"]]
assert a["traffic_departs"] == 0 and not bad, ("counted traffic departs from the formula", bad)
for c in ("matmul", "attention forward", "attention backward", "norms and pointwise", "embedding", "cross-entropy", "optimizer"):
    assert a["classes"][c]["launches"] > 0, c
assert a["cublas"] > 0 and a["gemm_flops"] > 0 and a["attn_flops"] > 0 and 0 < a["mfu"] < 1, a
# attention FLOPs against the closed form (FlashAttention's convention: 4 hd per visible query-key pair forward, 10
# backward; a causal sequence of T sees T (T + 1) / 2 pairs, the diagonal included): 2 layers x 2 sequences of 128,
# 4 heads of 32
want = (4 + 10) * 32 * 4 * 2 * 2 * 128 * 129 / 2
assert abs(a["attn_flops"] - want) <= 1e-5 * want, ("attention FLOPs", a["attn_flops"], want)
# cuBLAS FLOPs against the model's matmuls: forward 2 N C (C + 2 kv) for q|k|v, 2 N C C for o, 2 N C 2F for gate|up,
# 2 N F C for down per layer, 2 N C V for the head (N = 256 tokens, C 128, kv 64, F 352, V 257); the backward two of
# each (the inputs' and the weights' gradients): 3 x the forward
N, C, KV, F, V, L = 256, 128, 64, 352, 257, 2
fwd = L * (2 * N * C * (C + 2 * KV) + 2 * N * C * C + 2 * N * C * 2 * F + 2 * N * F * C) + 2 * N * C * V
assert abs(a["gemm_flops"] - 3 * fwd) <= 1e-5 * 3 * fwd, ("cuBLAS FLOPs", a["gemm_flops"], 3 * fwd)
assert a["syncs"] == sum(int(l.split("|")[2]) for l in md.splitlines() if l.startswith("| &nbsp;")), "sync causes"
causes = [l.split("|")[1].replace("&nbsp;", "").strip() for l in md.splitlines() if l.startswith("| &nbsp;")]
assert a["syncs"] == 1 and causes == ["be_download"], ("one host synchronisation per step: the step's scalars", causes)
assert a["d2h_copies"] == 1 and a["d2h_bytes"] == 24, ("one download of three doubles", a["d2h_copies"], a["d2h_bytes"])
# bf16 weights and activations (the defaults): every matmul's operands bf16, no conversion inside cuBLAS; one cast of
# the weights per step and one store of each layer's attention output
gemms = [l for l in md.split("## cuBLAS calls by shape", 1)[1].splitlines() if l.startswith("| ") and l[2].isdigit()]
assert gemms and all("| bf16 | bf16 |" in l for l in gemms), ("bf16 operands", gemms)
assert a["conv_bytes"] == 0, ("operand conversions", a["conv_bytes"])
casts = sum(v["launches"] for k, v in a["kernels_by_name"].items() if k.startswith("cast_k"))
assert casts == 1 + 2, ("casts: the weights once, the attention output of each of 2 layers", casts)
print(f"{a['kernels']} kernel launches of {len(a['kernels_by_name'])} kernels x classes, each within two pages per pointer "
      f"of its formula; {a['cublas']} cuBLAS calls, {a['syncs']} host syncs, predicted {a['predicted_s'] * 1e3:.3f} ms; "
      f"attention {a['attn_flops'] / 1e6:.2f} MFLOP = 14 hd heads layers x B T (T + 1) / 2, cuBLAS {a['gemm_flops'] / 1e6:.2f} "
      f"MFLOP = 3 x the model's forward matmuls")
PYEOF

# ---- 2. the dry run counts what the real run does ----
arun dry 1 RINGLM_EMU_DRY=1 -- &&
  $PY - "$T/traffic.md.json" "$T/dry.md.json" <<'PYEOF' >"$T/d.out" 2>&1 && ok "dry run: $(cat "$T/d.out")" || bad "dry run: $(cat "$T/d.out")"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
for k in ("launches", "kernels", "cublas", "ops", "syncs", "h2d_copies", "d2h_copies", "gemm_flops", "attn_flops"):
    assert a[k] == b[k], (k, a[k], b[k])
for k in ("read_bytes", "written_bytes", "h2d_bytes", "d2h_bytes"):
    assert abs(a[k] - b[k]) <= 0.01 * a[k], (k, a[k], b[k])
print(f"the same {a['launches']} launches, {a['syncs']} syncs, {a['h2d_copies']} + {a['d2h_copies']} copies, "
      f"{a['gemm_flops'] / 1e9:.3f} GFLOP and bytes within 1 % with no kernel executed")
PYEOF

# ---- 2a. recompute = full: the attention forward again in the backward (4 + 10 + 4) ----
arun full 1 RINGLM_EMU_DRY=1 -- --recompute full &&
  $PY - "$T/full.md.json" <<'PYEOF' >"$T/f.out" 2>&1 && ok "recompute full: $(cat "$T/f.out")" || bad "recompute full: $(cat "$T/f.out")"
import json, sys
a = json.load(open(sys.argv[1]))
want = (4 + 10 + 4) * 32 * 4 * 2 * 2 * 128 * 129 / 2
assert abs(a["attn_flops"] - want) <= 1e-5 * want, ("attention FLOPs with recompute full", a["attn_flops"], want)
print(f"attention {a['attn_flops'] / 1e6:.2f} MFLOP = 18 hd heads layers x B T (T + 1) / 2 (the forward recomputed)")
PYEOF

# ---- 2b. act_dtype = fp32: fp32 operands (cuBLAS converts them inside under the bf16 compute type), no cast ----
arun a32 1 RINGLM_EMU_DRY=1 -- --act_dtype fp32 &&
  $PY - "$T/a32.md.json" "$T/a32.md" <<'PYEOF' >"$T/a.out" 2>&1 && ok "act_dtype fp32: $(cat "$T/a.out")" || bad "act_dtype fp32: $(cat "$T/a.out")"
import json, sys
a = json.load(open(sys.argv[1])); md = open(sys.argv[2]).read()
gemms = [l for l in md.split("## cuBLAS calls by shape", 1)[1].splitlines() if l.startswith("| ") and l[2].isdigit()]
assert gemms and all("| fp32 | fp32 | fp32 | fp32 acc., bf16 inputs |" in l for l in gemms), gemms
assert a["conv_bytes"] > 0 and not any(k.startswith("cast_k") for k in a["kernels_by_name"]), a["conv_bytes"]
print(f"fp32 operands under the bf16 compute type in all {len(gemms)} shapes, {a['conv_bytes'] / 2**20:.1f} MiB of modelled "
      "conversion inside cuBLAS, no cast")
PYEOF

# ---- 3. a ring of 2 over NCCL: a report per rank ----
arun cp2 2 -- --cp 2 &&
  $PY - "$T/cp2.md.json" "$T/cp2.md.rank1.json" <<'PYEOF' >"$T/c.out" 2>&1 && ok "cp 2: $(cat "$T/c.out")" || bad "cp 2: $(cat "$T/c.out")"
import json, sys
for f in sys.argv[1:3]:
    a = json.load(open(f))
    hops = [v["launches"] for k, v in a["kernels_by_name"].items() if k.startswith("ncclSend/ncclRecv (ring hop)")]
    assert hops and sum(hops) > 0, (f, "ring hops")
    assert a["undeclared"] == 0 and a["classes"]["attention forward"]["launches"] > 0, f
    assert a["syncs"] == 1, (f, "host synchronisations over NCCL", a["syncs"])
# the ring's blocks together see each visible pair of the sequence once: the two ranks' attention FLOPs add up to the
# one-process closed form (zigzag: each rank half of it)
tot = sum(json.load(open(f))["attn_flops"] for f in sys.argv[1:3])
want = (4 + 10) * 32 * 4 * 2 * 2 * 128 * 129 / 2
assert abs(tot - want) <= 1e-5 * want, ("the ring's attention FLOPs", tot, want)
print("both ranks report one host synchronisation per step, the ring's hops among the collectives (NCCL); their "
      f"attention FLOPs add up to the one-process closed form ({tot / 1e6:.2f} MFLOP)")
PYEOF

# ---- 4. ZeRO-3, offload and a tiled MLP ----
arun z3 2 RINGLM_EMU_TRAFFIC=1 -- --zero 3 --recompute full --offload ckpt --mlp_tile 96 --n_layer 3 --micro_batch 1 &&
  $PY - "$T/z3.md.json" <<'PYEOF' >"$T/z.out" 2>&1 && ok "ZeRO-3 + offload + tiled MLP: $(cat "$T/z.out")" || bad "ZeRO-3 + offload: $(cat "$T/z.out")"
import json, sys
a = json.load(open(sys.argv[1]))
k = a["kernels_by_name"]
bad = [n for n, v in k.items() if v["bad"]]
assert a["undeclared"] == 0 and a["traffic_departs"] == 0 and not bad, ("formulas", a["undeclared"], bad)
n = lambda p: sum(v["launches"] for name, v in k.items() if name.startswith(p))
# step 2 (the parameters changed by step 1: every buffer stale): the forward gathers the embedding, layer 0 and the
# rest, prefetches layers 1 and 2; the backward holds the rest and layers 2, 1 and prefetches layer 0; a reduce-scatter
# per unit (embedding, 3 layers, rest)
gathers, prefetched, rs = n("ncclAllGather"), n("ncclAllGather (started"), n("ncclReduceScatter")
assert (gathers, prefetched, rs) == (6, 3, 5), ("ZeRO-3 collectives", gathers, prefetched, rs)
casts = n("cast_k")
assert casts == gathers + 3 * 2, ("a cast per gathered unit and the attention output per layer (forward, recompute)", casts)
# offload: layer 0 of 3 goes out after the forward writes it and comes back in the backward (2 micro-batches of 1)
assert a["h2d_copies"] >= 1 and a["d2h_copies"] >= 2 and a["d2h_bytes"] > 24, ("offload copies", a["h2d_copies"], a["d2h_copies"])
assert a["syncs"] == 1, ("one host synchronisation per step", a["syncs"])
print(f"{a['kernels']} launches within their formulas; {gathers} gathers ({prefetched} prefetched), {rs} reduce-scatters, "
      f"{casts} casts; offload {a['d2h_copies'] - 1} copies out ({(a['d2h_bytes'] - 24) / 1024:.0f} KiB), {a['h2d_copies']} "
      f"host-to-device copies; {a['syncs']} host sync")
PYEOF
finish
