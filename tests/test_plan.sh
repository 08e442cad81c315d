#!/usr/bin/env bash
# The capacity planner: build/plan's per-rank memory equals what build/train allocates (the same plan) for
# every recompute mode, for tp 2 x cp 2 with ZeRO-1, the all-to-all, all-to-all x ring and sequence parallelism; its longest seq_len is the last that fits; a layout
# that cannot fit stops build/train on every rank with one line naming needed vs available, before
# allocating; bad planner input gives one line.
cd "$(dirname "$0")/.."
source tests/lib.sh

build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
cat > "$T/p.conf" <<CONF
vocab_size = 259
d_model = 64
n_layer = 3
n_head = 4
n_kv_head = 2
d_ff = 168
max_seq_len = 256
seq_len = 96
batch_size = 4
micro_batch = 2
max_steps = 1
save_final = 0
train_data = $T/data
CONF
CONF=$T/p.conf; STEPS=1
# plan_vs_train NAME NP DP ARGS...: the trainer's printed memory line equals the plan's numbers
plan_vs_train() {
  local name=$1 np=$2 dp=$3; shift 3
  train_run "$name" "$np" "$@" || return
  build/plan -c "$CONF" --device cpu --dp "$dp" --json "$@" >"$T/$name.plan" 2>&1 || { bad "$name: plan: $(cat "$T/$name.plan")"; return; }
  $PY - "$T/$name.plan" "$T/$name.out" <<'PY' >"$T/$name.cmp" && ok "$name: plan = allocation ($(cat "$T/$name.cmp"))" || bad "$name: $(cat "$T/$name.cmp")"
import json, re, sys
p = json.load(open(sys.argv[1])); M = 1 / 1048576
want = "params %.2f MiB, grads %.2f MiB, AdamW moments %.2f MiB, activations %.1f MiB, ring buffers %.1f MiB" % (
    p["params"] * M, p["grads"] * M, p["moments"] * M, (p["acts_kept"] + p["acts_work"] + p["acts_scratch"]) * M, p["ring"] * M)
line = [l for l in open(sys.argv[2]) if l.startswith("memory per rank:")]
got = line[0].split("memory per rank: ")[1].split(", peak RSS")[0] if line else "(no memory line)"
print(got)
sys.exit(0 if got == want else 1)
PY
}
for rc in none mlp qkv full; do plan_vs_train "p1_$rc" 1 1 --recompute "$rc"; done
plan_vs_train tp2cp2_zero 4 1 --tp 2 --cp 2 --zero 1 --recompute qkv
plan_vs_train cp2dp2_zero 4 2 --cp 2 --zero 1
plan_vs_train cp2dp2_zero2 4 2 --cp 2 --zero 2 --recompute mlp
plan_vs_train tp2cp2_zero3 4 1 --tp 2 --cp 2 --zero 3 --recompute full
plan_vs_train dp2_zero3_tied 2 2 --zero 3 --tie_embeddings 1
# the all-to-all (KV heads replicated: 2 KV heads for 4 ranks) and its product with the ring; sequence parallelism
plan_vs_train a2a_cp4 4 1 --cp 4 --cp_comm a2a
plan_vs_train a2aring_full 4 1 --cp 4 --cp_comm a2a+ring --cp_a2a 2 --recompute full
plan_vs_train tp2_sp 2 1 --tp 2 --tp_sp 1
plan_vs_train tile_none 1 1 --mlp_tile 70
plan_vs_train tile_tp2_sp_full 2 1 --tp 2 --tp_sp 1 --mlp_tile 50 --recompute full
plan_vs_train tp2cp2_a2a_sp_mlp 4 1 --tp 2 --cp 2 --cp_comm a2a --tp_sp 1 --recompute mlp

# the longest seq_len: it fits, one chunking unit more does not (8 GiB device, 1B-like model)
L=$(build/plan -c configs/llama_1b_128k.conf --device h200 --memory_gib 24 --cp 2 --batch_size 2 --micro_batch 1 --dp 1 --json --recompute full |
    $PY -c 'import json,sys; print(json.load(sys.stdin)["longest"]["full"])')
fits() { build/plan -c configs/llama_1b_128k.conf --device h200 --memory_gib 24 --cp 2 --batch_size 2 --micro_batch 1 --dp 1 \
         --recompute full --seq_len "$1" | grep -q " fits ("; }
if [ -n "$L" ] && [ "$L" -gt 0 ] && fits "$L" && ! fits $((L + 512)); then ok "longest seq_len with recompute full on 24 GiB: $L fits, $((L + 512)) does not"
else bad "longest seq_len '$L'"; fi
# more recomputation, longer sequences
build/plan -c configs/llama_1b_128k.conf --cp 8 --batch_size 8 --micro_batch 1 --seq_len 131072 --json >"$T/long.json"
$PY - "$T/long.json" <<'PY' && ok "longest none < mlp < qkv < full: $(cat "$T/long.txt")" || bad "longest: $(cat "$T/long.json")"
import json, sys
l = json.load(open(sys.argv[1]))["longest"]
open(sys.argv[1].replace(".json", ".txt"), "w").write(str(l))
sys.exit(0 if 0 < l["none"] < l["mlp"] < l["qkv"] < l["full"] else 1)
PY

# bad planner input
plan_err() { ERR_RC=1 expect_err "$1" "$2" 1 build/plan -c "$CONF" "${@:3}"; }
# ---- the chooser: --choose at a target length, --longest per option ----
ONEB=(-c configs/llama_1b_128k.conf --cp 8 --batch_size 8 --micro_batch 1 --dp 1)
choose_check() {   # NAME ARGS...: the cheapest that fits is the least step time among the candidates that fit, and
                   # build/plan with its options says it fits (what every cheaper candidate does not)
  local name=$1; shift
  build/plan "${ONEB[@]}" --choose --json "$@" >"$T/$name.choose" 2>&1 || { bad "$name: $(cat "$T/$name.choose")"; return; }
  $PY - "$T/$name.choose" "$@" <<'PY' >"$T/$name.txt" && ok "$name: $(cat "$T/$name.txt")" || bad "$name: $(cat "$T/$name.txt")"
import json, subprocess, sys
j = json.load(open(sys.argv[1])); extra = sys.argv[2:]
c = j["candidates"]; fit = [x for x in c if x["fits"]]
best = fit[0] if fit else None   # the list is cheapest first
assert best and j["cheapest"] == best["args"] and best["step_s"] == min(x["step_s"] for x in fit), (j["cheapest"], best)
assert all(a["step_s"] <= b["step_s"] for a, b in zip(c, c[1:])), "not cheapest first"
assert all(not x["fits"] for x in c if x["step_s"] < best["step_s"])
p = json.loads(subprocess.run(["build/plan", "-c", "configs/llama_1b_128k.conf", "--cp", "8", "--batch_size", "8",
    "--micro_batch", "1", "--dp", "1", "--json"] + extra + j["cheapest"].split(), capture_output=True, text=True, check=True).stdout)
assert p["total"] <= j["memory"] and p["host"] <= j["host_memory"], p
print(f"{j['cheapest']} ({p['total'] / 2**30:.1f} GiB, {p['host'] / 2**30:.1f} GiB pinned; {len(fit)} of {len(c)} fit; "
      f"{sum(x['step_s'] < best['step_s'] for x in c)} cheaper ones do not)")
PY
}
choose_check "choose at 128K (everything fits: no recomputation, ZeRO-1)" --seq_len 131072
grep -q '"cheapest": "--recompute none --mlp_tile 0 --zero 1 --offload none"' "$T/choose at 128K (everything fits: no recomputation, ZeRO-1).choose" \
  && ok "at 128K the cheapest is no recomputation, no tiles, ZeRO-1, no offload" || bad "128K: $(head -c 300 "$T"/choose*128K*.choose)"
choose_check "choose at 2M tokens (needs recomputation or more)" --seq_len 2097152 --max_seq_len 2097152
choose_check "choose at 3M tokens on 80 GB (needs tiles and offload)" --seq_len 3145728 --max_seq_len 3145728 --memory_gib 74
# --longest: each option's length fits and one chunking unit (8 ranks x 2 x 128 tokens) more does not
build/plan "${ONEB[@]}" --longest --json >"$T/longest.json" 2>&1 || bad "longest: $(cat "$T/longest.json")"
$PY - "$T/longest.json" <<'PY' >"$T/longest.txt" && ok "--longest: $(cat "$T/longest.txt")" || bad "--longest: $(cat "$T/longest.txt")"
import json, subprocess, sys
j = json.load(open(sys.argv[1]))
def plan(args, L):
    return json.loads(subprocess.run(["build/plan", "-c", "configs/llama_1b_128k.conf", "--cp", "8", "--batch_size", "8",
        "--micro_batch", "1", "--dp", "1", "--json", "--seq_len", str(L), "--max_seq_len", str(L)] + args.split(),
        capture_output=True, text=True, check=True).stdout)
fits = lambda p: p["total"] <= j["memory"] and p["host"] <= j["host_memory"]
rows = {r["option"]: r for r in j["rows"]}
out = []
for r in j["rows"]:
    L = r["longest"]
    assert L > 0 and fits(plan(r["args"], L)) and not fits(plan(r["args"], L + 2048)), r
    out.append(f"{r['option'].split(' (')[0]} {L}")
base = rows["recompute full (the best before these options)"]["longest"]
assert all(r["longest"] >= base for r in j["rows"][4:]), "an option shortens the longest sequence"
off = rows["full + offload ckpt"]
assert "all: full + mlp_tile + zero 3 + offload ckpt" in rows
ex = 14 * (max(0, off["offload_xfer_s"] - off["layer_fwd_s"]) + max(0, off["offload_xfer_s"] - off["layer_bwd_s"]))
assert off["offload_exposed_s"] == 0 and ex == 0, off   # 16 layers, 14 offloaded; one sequence per micro-batch
print("; ".join(out) + f"; each fits, 2048 tokens more do not; offload copy {off['offload_xfer_s']*1e3:.1f} ms per layer "
      f"against {off['layer_fwd_s']:.2f} s of forward: hidden")
PY
# --longest with a pinned host of 1 GiB: the offload rows bind on the host (every row within it, and shorter than with
# the default 224 GiB), and one chunking unit more does not fit the host
build/plan "${ONEB[@]}" --longest --json --host_gib 1 >"$T/longest1.json" 2>&1 || bad "longest --host_gib 1: $(cat "$T/longest1.json")"
$PY - "$T/longest1.json" "$T/longest.json" <<'PY' >"$T/l1.txt" && ok "--longest --host_gib 1: $(cat "$T/l1.txt")" || bad "--longest --host_gib 1: $(cat "$T/l1.txt")"
import json, subprocess, sys
j, big = (json.load(open(f)) for f in sys.argv[1:])
assert j["host_memory"] == 2**30, j["host_memory"]
wide = {r["option"]: r["longest"] for r in big["rows"]}
out = []
for r in j["rows"]:
    assert r["host"] <= j["host_memory"], r
    if r["args"].endswith("--offload ckpt"):
        L = r["longest"]
        assert 0 < L < wide[r["option"]], (r, wide[r["option"]])
        more = json.loads(subprocess.run(["build/plan", "-c", "configs/llama_1b_128k.conf", "--cp", "8", "--batch_size", "8",
            "--micro_batch", "1", "--dp", "1", "--json", "--host_gib", "1", "--seq_len", str(L + 2048), "--max_seq_len",
            str(L + 2048)] + r["args"].split(), capture_output=True, text=True, check=True).stdout)
        assert more["host"] > j["host_memory"] or more["total"] > j["memory"], more
        out.append(f"{r['option']} {L} (with 224 GiB: {wide[r['option']]}; {r['host'] / 2**30:.2f} GiB pinned)")
assert len(out) == 2, out
print("; ".join(out) + "; every row within 1 GiB of pinned host memory")
PY
# a host link too slow to hide the copies: exposed, counted into the step
build/plan "${ONEB[@]}" --seq_len 524288 --max_seq_len 524288 --recompute full --offload ckpt --pcie_gbs 0.01 --json >"$T/slow.json" &&
  $PY - "$T/slow.json" <<'PY' >"$T/slow.txt" && ok "offload over a 0.01 GB/s link: $(cat "$T/slow.txt")" || bad "slow link: $(cat "$T/slow.txt")"
import json, sys
p = json.load(open(sys.argv[1]))
x, f, b = p["offload_xfer_s"], p["layer_fwd_s"], p["layer_bwd_s"]
want = 8 * 14 * (max(0, x - f) + max(0, x - b))   # 8 micro-batches per step, 14 of 16 layers offloaded
assert x > f and abs(p["offload_exposed_s"] - want) <= 1e-5 * want, (p["offload_exposed_s"], want)   # (JSON: 6 digits)
assert abs(p["step_s"] - (p["flops_exec"] / (0.4 * 989e12) + p["dp_sent"] / 450e9 + want)) <= 1e-5 * p["step_s"]
print(f"one layer's copy {x:.2f} s against {f:.2f} s forward, {b:.2f} s backward: {want:.0f} s exposed per step, in the step time")
PY
plan_err "plan: --choose and --longest" "--choose and --longest are two questions" --choose --longest
plan_err "plan: MFU above 1" "--mfu 2 must be at most 1" --mfu 2
plan_err "plan: offload on the cpu" "offload = ckpt needs a GPU (--device h200)" --device cpu --recompute full --offload ckpt
plan_err "plan: zero 3 on one replica" "zero = 3 shards over the dp x cp ranks, and this layout has one" --zero 3
plan_err "plan: offload without saved inputs" "offload = ckpt moves the layers' saved inputs to host memory, and recompute = mlp" --offload ckpt --recompute mlp

# a layout that cannot fit: one line on every rank, before the arenas are allocated (no time spent)
BIG=(--d_model 4096 --n_head 32 --n_kv_head 8 --d_ff 11008 --n_layer 40)
expect_train_err "$CONF" "too large for this machine (1 rank)" "needs|GiB per rank|are available (1 ranks on this node)" 1 "${BIG[@]}"
expect_train_err "$CONF" "too large for this machine (2 ranks, cp 2)" "needs|are available (2 ranks on this node)|recompute = full" 2 "${BIG[@]}" --cp 2
plan_err "plan: unknown recompute mode" "recompute = 'half' must be none, mlp, qkv or full" --recompute half
plan_err "plan: unknown device" "--device 'tpu' must be h200 or cpu" --device tpu
plan_err "plan: bad memory" "--memory_gib '-3' must be a positive number" --memory_gib -3
plan_err "plan: layout does not divide" "do not divide" --dp 3
finish
