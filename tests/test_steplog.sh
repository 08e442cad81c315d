#!/usr/bin/env bash
# test_steplog.sh — what the step line and metrics.jsonl say about a step's cost, and the start-up config dump:
#  - model FLOPs: each record's model_flops equals a closed form computed here from the config (the forward's
#    matmuls and causal attention counted one by one, x 3 for the backward), for two shapes (GQA with an untied
#    head; tied embeddings with as many KV heads as heads, another seq_len and batch); gflops = model_flops / time
#  - MFU = model_flops / step time / peak_flops with the numbers recorded; peak_flops = ranks x peak_tflops when
#    given (1 and 2 ranks), measured (finite, > 0, the first record says how) when not, on the CPU and the emulated
#    CUDA backend; the step line prints the same MFU and peak memory as the record
#  - the step's peak memory: at least the arenas the trainer reports (parameters, gradients, moments, activations)
#    and at most the process's peak RSS over the run (max over ranks)
#  - the config dump (banner and config.txt) leaves rope_original_max_seq_len out unless rope_scaling = yarn, and
#    a resume from that config.txt of a run with another (unused) value still loads
cd "$(dirname "$0")/.."
source tests/lib.sh
build/prepare --out "$T/d" --val-frac 0 model attention >/dev/null || { bad "build/prepare (run make)"; finish; }
TR=(build/train -c configs/tiny.conf --train_data "$T/d" --val_data "")
SHAPE2=(--tie_embeddings 1 --n_kv_head 4 --seq_len 64 --batch_size 4 --micro_batch 2)

run() {   # NAME NP BIN ARGS...: BIN/train on NP ranks into $T/NAME
  local name=$1 np=$2 bin=$3; shift 3
  timeout $HANG_S $(launch "$np") $bin/train -c configs/tiny.conf --train_data "$T/d" --val_data "" --out_dir "$T/$name" \
    --max_steps 3 "$@" >"$T/$name.out" 2>"$T/$name.err" || { bad "$name: exit $?: $(head -c 400 "$T/$name.err")"; return 1; }
}
run one 1 build --peak_tflops 0.25 && run two 2 build --cp 2 --peak_tflops 0.25 "${SHAPE2[@]}" && run meas 1 build &&
  run meas2 2 build --tp 2 "${SHAPE2[@]}" || finish
[ -x build/emu/train ] && run emu 1 build/emu --max_steps 2 || bad "build/emu/train (make cuda-emu)"

# chk.py RUN NP PEAK_TFLOPS|measured [model keys...]: the checks above for one run (exit status 0: they hold)
cat >"$T/chk.py" <<'PYEOF'
import json, math, re, sys
run, np_, peak = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cfg = {"vocab_size": 257, "d_model": 64, "n_layer": 2, "n_head": 4, "n_kv_head": 2, "d_ff": 160, "seq_len": 128,
       "batch_size": 8, "tie_embeddings": 0}   # configs/tiny.conf, then the run's --key value
args = sys.argv[4:]
for k, v in zip(args[::2], args[1::2]):
    cfg[k.lstrip("-")] = int(v)
V, C, L, H, K, F, T, B = (cfg[k] for k in ("vocab_size", "d_model", "n_layer", "n_head", "n_kv_head", "d_ff", "seq_len", "batch_size"))
hd = C // H
def mm(m, n, k):   # FLOPs of an [m, k] x [k, n] matmul
    return 2 * m * n * k
layer = (mm(T, H * hd, C) + 2 * mm(T, K * hd, C)      # q, k, v projections
         + mm(T, C, H * hd)                            # o projection
         + 3 * mm(T, F, C)                             # gate, up, down
         + H * 2 * (2 * hd * T * T / 2))               # scores and weighted values over the causal half, per head
forward = L * layer + mm(T, V, C)                      # + the LM head (tied or not, a matmul)
want = 3 * forward * B                                 # the backward: twice the forward's FLOPs
recs = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
lines = [l for l in open(f"{run}.out") if l.startswith("step ")]
assert len(recs) == len(lines) >= 2, (len(recs), len(lines))
for r, line in zip(recs, lines):
    f, ms, p, mfu = r["model_flops"], r["step_ms"], r["peak_flops"], r["mfu"]
    assert abs(f - want) <= 1e-8 * want, ("model_flops", f, want)
    tol = 0.0006 / ms + 2e-8                            # step_ms is printed with 3 decimals
    assert abs(r["gflops"] - f / (ms / 1e3) / 1e9) <= tol * r["gflops"] + 1e-4, ("gflops", r["gflops"], f / ms / 1e6)
    assert abs(mfu - f / (ms / 1e3) / p) <= tol * mfu, ("mfu", mfu, f / (ms / 1e3) / p)
    # the step's tokens: B sequences of T; tokens/s = those over the step's time, tokens_seen their running sum
    assert abs(r["tokens_per_s"] - B * T / (ms / 1e3)) <= tol * r["tokens_per_s"] + 1e-3, ("tokens_per_s", r["tokens_per_s"], B * T / (ms / 1e3))
    assert r["tokens_seen"] == r["step"] * B * T, ("tokens_seen", r["tokens_seen"], r["step"], B * T)
    if peak == "measured":
        assert math.isfinite(p) and p > 0, p
    else:
        assert abs(p - np_ * float(peak) * 1e12) <= 1e-8 * p, ("peak_flops", p, np_, peak)
    m = re.search(r"\| MFU ([0-9.e+-]+)% \|.*\| peak mem ([0-9.]+) MiB", line)
    assert m, line
    assert m.group(1) == "%.3g" % (100 * mfu) and m.group(2) == "%.1f" % r["mem_peak_mib"], (line, mfu, r["mem_peak_mib"])
src = recs[0]["peak_source"]
assert (src == f"peak_tflops = {peak} per rank") if peak != "measured" else src.startswith("measured: ") and "matmul" in src, src
mem = [l for l in open(f"{run}.out") if l.startswith("memory per rank:")][0]
arena = sum(float(x) for x in re.findall(r"(?:params|grads|AdamW moments|activations) ([0-9.]+) MiB", mem))
rss = float(re.search(r"peak RSS ([0-9.]+) MiB", mem).group(1))
backend = re.search(r"backend (\w+)", open(f"{run}.out").read()).group(1)
for r in recs:   # the CPU: the resident set holds the arenas; a GPU: the backend holds them (and its workspace)
    assert arena <= r["mem_peak_mib"] + 0.05, ("mem_peak_mib below the arenas", r["mem_peak_mib"], arena)
    assert backend != "cpu" or r["mem_peak_mib"] <= rss + 0.05, ("mem_peak_mib above the run's peak RSS", r["mem_peak_mib"], rss)
print(f"model_flops {want:.6g} per step, MFU {[round(r['mfu'], 4) for r in recs]}, peak {recs[0]['peak_flops']:.4g} "
      f"FLOP/s ({src}), step peak memory {recs[-1]['mem_peak_mib']:.1f} MiB (arenas {arena:.1f}, run's peak RSS {rss:.1f})")
PYEOF
check "1 rank, peak_tflops 0.25: FLOPs = closed form, MFU = FLOPs / time / peak, step line = record" $PY "$T/chk.py" "$T/one" 1 0.25
check "2 ranks (cp 2), peak_tflops 0.25, tied head, 4 KV heads, seq_len 64: FLOPs, MFU, peak = 2 x 0.25" \
  $PY "$T/chk.py" "$T/two" 2 0.25 "${SHAPE2[@]}"
check "1 rank, measured peak" $PY "$T/chk.py" "$T/meas" 1 measured
check "2 ranks (tp 2), measured peak, the second shape" $PY "$T/chk.py" "$T/meas2" 2 measured "${SHAPE2[@]}"
[ -f "$T/emu/metrics.jsonl" ] && check "emulated CUDA backend: measured device peak, FLOPs, MFU, device memory peak" \
  $PY "$T/chk.py" "$T/emu" 1 measured
grep -q "^MFU peak: .* TFLOP/s in all (measured: cpu matmul [0-9]*^3, fp32 operands, on each of the 2 ranks at once" "$T/meas2.out" &&
  grep -q "^MFU peak: 0.5 TFLOP/s in all (peak_tflops = 0.25 per rank" "$T/two.out" &&
  ok "the banner's MFU peak line: $(grep '^MFU peak' "$T/meas2.out")" || bad "MFU peak line: $(grep '^MFU peak' "$T/meas2.out" "$T/two.out")"
ERR_RC=1 expect_err "peak_tflops below 0" "peak_tflops = -1|must be in [0, 1e6]" 1 "${TR[@]}" --out_dir "$T/bad" --peak_tflops -1

# ---- the config dump: rope_original_max_seq_len only where rope_scaling = yarn uses it
"${TR[@]}" --out_dir "$T/none" --max_steps 1 --rope_original_max_seq_len 512 >"$T/none.out" 2>&1 &&
  "${TR[@]}" --out_dir "$T/yarn" --max_steps 0 --rope_scaling yarn --rope_factor 2 --rope_original_max_seq_len 64 >"$T/yarn.out" 2>&1 ||
  bad "config dump runs: $(tail -n 2 "$T/none.out" "$T/yarn.out")"
! grep -q "rope_original_max_seq_len" "$T/none.out" "$T/none/config.txt" && grep -q "^rope_scaling = none$" "$T/none/config.txt" &&
  grep -qx "rope_original_max_seq_len = 64" "$T/yarn.out" && grep -qx "rope_original_max_seq_len = 64" "$T/yarn/config.txt" &&
  ok "config dump: no rope_original_max_seq_len with rope_scaling = none (banner, config.txt); yarn's 64 in both" ||
  bad "config dump: $(grep -h rope_ "$T/none/config.txt" "$T/yarn/config.txt" | tr '\n' ' ')"
build/train -c "$T/none/config.txt" --out_dir "$T/none" --max_steps 2 --resume latest >"$T/res.out" 2>&1 &&
  grep -q "^resumed from .*ckpt_00000001.h5: step 1" "$T/res.out" &&
  ok "a resume from that config.txt (the checkpoint's unused rope_original_max_seq_len 512, the default 4096) loads" ||
  bad "resume from config.txt: $(tail -n 2 "$T/res.out")"
expect_err "a resume at another rope_scaling still names it" "rope_scaling (checkpoint none, run yarn)" 1 \
  build/train -c "$T/none/config.txt" --out_dir "$T/none" --max_steps 3 --resume latest --rope_scaling yarn --rope_factor 2
finish
