#!/usr/bin/env bash
# tools/gpu_check.sh and tools/torch_anchor.py without a GPU: the script's properties (per-step caps within 420 s,
# leaving at least 60 s of the 8-minute call; pipefail-safe library checks, gzip and not xz; GPU_CHECK_ONLY refusing
# a name that is no step), the PyTorch anchors on the CPU (--smoke), and the rehearsal of `run`: the bundle (make
# gpu-bundle, when missing or older than its programs or this script), every step — the GPU steps' command lines on
# the emulated backend (build/emu, dry) — with the system's Open MPI, PMIx, hwloc, HDF5 and OpenBLAS hidden from the
# programs, an ok line from each step, at most 8 files back; a second rehearsal with GPU_CHECK_ONLY=cp2 runs only
# that step and its reference; the loader check must also catch a library missing from the bundle. Without root and
# unshare, or without nvcc to build the bundle, one line says the rehearsal is skipped and why.
cd "$(dirname "$0")/.."
source tests/lib.sh
S=tools/gpu_check.sh; G=build/gpu_bundle

check "gpu_check.sh parses" bash -n $S
bash $S caps >"$T/caps.out" 2>&1
total=$(sed -n 's/^total \([0-9]*\) s.*/\1/p' "$T/caps.out"); limit=$(sed -n 's/.*(limit \([0-9]*\) s).*/\1/p' "$T/caps.out")
left=$(sed -n 's/.* call leaves \([0-9]*\) s for start-up.*/\1/p' "$T/caps.out")
if [ -n "$total" ] && [ "$total" -le "${limit:-0}" ] && [ "$limit" -le 420 ] && [ "${left:-0}" -ge 60 ]; then
  ok "per-step caps sum to $total s (at most the run's $limit s); $(tail -n 1 "$T/caps.out")"
else bad "caps: sum '$total', limit '$limit', left '$left': $(tr '\n' ' ' <"$T/caps.out")"; fi
ERR_RC=2 expect_err "GPU_CHECK_ONLY with a name that is no step" "GPU_CHECK_ONLY names 'trian_fp32', not a step|train_fp32" 1 \
  env GPU_CHECK_ONLY=train_bf16,trian_fp32 bash $S run
lines=$(grep -nE '^[^#]*\btimeout +(-[a-zA-Z] +[A-Z0-9]+ +)*[0-9]' $S)
if [ -z "$lines" ]; then ok "every timeout comes from a step's cap"; else bad "literal timeouts: $lines"; fi
lines=$(grep -nE '^[^#]*\|\s*(grep\s+(-[a-zA-Z]*q|--quiet)|head)\b' $S)
if [ -z "$lines" ]; then ok "no pipe ends in grep -q or head (pipefail and SIGPIPE)"; else bad "SIGPIPE-prone pipes: $lines"; fi
lines=$(grep -nE '^[^#]*(\bxz\b|XZ_OPT|\.tar\.xz|tar +-[a-zA-Z]*J)' $S)
if [ -z "$lines" ] && grep -q 'runtime.tar.gz' $S; then ok "the runtime is packed with gzip, not xz"; else bad "xz: $lines"; fi

# the anchors on the CPU: every section runs; the nominal peak table
if $PY tools/torch_anchor.py --smoke --json "$T/ta.json" --md "$T/ta.md" >"$T/ta.out" 2>&1; then
  if $PY - "$T/ta.json" >"$T/ta.chk" 2>&1 <<'PY'; then ok "torch_anchor --smoke: $(cat "$T/ta.chk")"; else bad "torch_anchor --smoke: $(cat "$T/ta.chk")"; fi
import json, sys
d = json.load(open(sys.argv[1]))
att = [r for r in d["attention"] if r["status"] == "ok" and r["fwd_tflops"] > 0 and r["fwdbwd_tflops"] > 0]
tr = [r for r in d["train"] if r["status"] == "ok" and r["tokens_per_s"] > 0]
assert d["matmul"]["tflops"] > 0 and len(att) == 4 and len(tr) == 1, (d["matmul"], d["attention"], d["train"])
print(f"torch {d['versions']['torch']}: {len(att)} attention rows ({att[0]['backend']}), {tr[0]['tokens_per_s']:.0f} tokens/s")
PY
else bad "torch_anchor --smoke: $(head -c 600 "$T/ta.out")"; fi
n1=$($PY tools/torch_anchor.py --nominal "NVIDIA H200"); n2=$($PY tools/torch_anchor.py --nominal "NVIDIA H100 PCIe"); n3=$($PY tools/torch_anchor.py --nominal "Quadro X")
if [ "$n1 $n2 $n3" = "989 756 unknown" ]; then ok "nominal bf16 peaks by device name (H200 989, H100 PCIe 756, unknown)"; else bad "nominal peaks: $n1 $n2 $n3"; fi

# the rehearsal
why=""
if [ "$(id -u)" -ne 0 ]; then why="not root"
elif ! unshare --mount --propagation private true 2>/dev/null; then why="unshare --mount fails here"; fi
stale=""
for f in build/cuda/train build/cuda/eval build/cuda/bench_kernels build/cuda/tests/test_cuda $S; do
  [ -e "$G/.gpu_check_bundle" ] && [ ! "$f" -nt "$G/.gpu_check_bundle" ] || stale="$f"
done
[ -e "$G/.gpu_check_bundle" ] || stale="no bundle"
# an incomplete bundle (e.g. one an older version of the script stamped when it started) is rebuilt too
[ -n "$stale" ] || stale=$(bash $S complete) || true
if [ -z "$why" ] && [ -n "$stale" ]; then
  if [ -z "$(command -v nvcc)" ] && [ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then why="no nvcc to build the bundle"
  elif timeout $HANG_S make -s gpu-bundle >"$T/prep.out" 2>&1; then ok "make gpu-bundle ($stale): $(tail -n 2 "$T/prep.out" | head -n 1)"
  else bad "make gpu-bundle (exit $?): $(tail -n 5 "$T/prep.out" | tr '\n' ' ')"
    echo "not run: the rehearsal and its checks (no bundle)"; finish; fi
fi
if [ -n "$why" ]; then
  echo "skipped: the rehearsal of tools/gpu_check.sh run ($why)"
  finish
fi
start=$SECONDS
OUT=$T/out GPU_CHECK_WORK=$T/work PYTHON=$PY timeout $HANG_S bash $S rehearse >"$T/reh.out" 2>&1; rc=$?
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$T/reh.out" | tail -n 1)
if [ $rc -eq 0 ] && [ -n "$line" ] && [[ $line == *" 0 failed" ]]; then
  ok "rehearsal in $((SECONDS - start)) s: $line $(grep -E '^\([0-9]+ skipped\)$' "$T/reh.out")"
else bad "rehearsal: exit $rc: $(grep -E '^(FAIL|gpu_check:)' "$T/reh.out" | head -c 1500)"; fi
miss=""
for s in setup mpirun_cpu test_cuda train_fp32 train_bf16 cp2 "engine: head_dim 64, attn_engine = auto" \
         "engine: head_dim 64, attn_engine = own" "engine: head_dim 128" "ring_bf16: cp 2 on own" "ring_bf16: cp 4 on own" \
         "ring_bf16: cp 2 on cudnn" "ring_bf16: cp 4 on cudnn" "kernels: bench_kernels, attention on own" \
         "kernels: bench_kernels, attention on cudnn" torch "throughput tiny at 128" "throughput tiny at 192" \
         "throughput tiny at 256 (" "throughput tiny at 256 on the own engine" "throughput llama_1b_128k at 1048576: refused" \
         "offload: tiny"; do
  grep -q "^ok   $s" "$T/reh.out" || miss+=" '$s'"
done
[ -z "$miss" ] && ok "rehearsal: an ok line from every step (the GPU steps on the emulated backend, dry): $(grep -c '^ok' "$T/reh.out") ok, $(grep -c '^skip' "$T/reh.out") skipped" \
  || bad "rehearsal: no ok line for$miss"
grep -q "self-check verdict cached in" "$T/work/r2_cudnn.txt" 2>/dev/null && ok "rehearsal: later runs take the self-check's verdicts from the cache ($(grep -c . "$T/work/attn_verdicts.tsv") lines)" \
  || bad "rehearsal: ring_bf16's cuDNN run did not read the verdict cache: $(grep -m1 '^attention engine' "$T/work/r2_cudnn.txt")"
nf=$(find "$T/out" -type f | wc -l); deep=$(find "$T/out" -mindepth 2 | wc -l)
if [ "$nf" -le 8 ] && [ "$deep" -eq 0 ] && [ -s "$T/out/summary.md" ] && [ -s "$T/out/results.json" ] && [ -s "$T/out/rest.tar.gz" ]; then
  ok "rehearsal leaves $nf files in \$OUT: $(cd "$T/out" && echo *)"
else bad "rehearsal: $nf files, $deep nested under \$OUT: $(find "$T/out" | tr '\n' ' ')"; fi
if $PY - "$T/out" >"$T/sum.chk" 2>&1 <<'PY'; then ok "summary: $(cat "$T/sum.chk")"; else bad "summary: $(cat "$T/sum.chk")"; fi
import json, sys
o = sys.argv[1]
r = json.load(open(f"{o}/results.json")); md = open(f"{o}/summary.md").read()
for h in ("| date | GPU |", "## Attention alone", "## Training step", "## Where a step's time goes", "ringlm/"):
    assert h in md, h
st = {x["status"] for x in r["training_ringlm"]}
assert {"ok", "refused"} <= st, st
assert r["torch"].get("train") and r["attention_ringlm"], "torch or ringlm rows missing"
print(f"{len(md.splitlines())} lines; training rows {sorted(st)}; PyTorch rows beside ringlm's")
PY
# GPU_CHECK_ONLY=cp2: setup, train_fp32 (its reference), cp2 and the summary only
OUT=$T/out2 GPU_CHECK_WORK=$T/work2 GPU_CHECK_ONLY=cp2 PYTHON=$PY timeout $HANG_S bash $S rehearse >"$T/reh2.out" 2>&1; rc=$?
ran=$(sed -n 's/^== \([a-z0-9_]*\) .*/\1/p' "$T/reh2.out" | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$ran" = "setup train_fp32 cp2 summary " ] && grep -q "^ok   cp2" "$T/reh2.out"; then
  ok "GPU_CHECK_ONLY=cp2: ran $ran($(grep -E '^[0-9]+ passed' "$T/reh2.out"))"
else bad "GPU_CHECK_ONLY=cp2: exit $rc, ran '$ran': $(grep -E '^(FAIL|gpu_check)' "$T/reh2.out" | head -c 600)"; fi

# the covered view: the system's MPI-linked programs and mpirun cannot start there
if [ -x /usr/bin/mpirun ] && [ -s "$T/work/hide.txt" ]; then
  if unshare --mount bash $S _hidden "$T/work" -- build/train --help >"$T/h.out" 2>&1 ||
     unshare --mount bash $S _hidden "$T/work" -- /usr/bin/mpirun --version >>"$T/h.out" 2>&1; then
    bad "the rehearsal's view still shows the system's libraries: $(head -c 300 "$T/h.out")"
  else ok "the rehearsal's view hides the system's MPI, HDF5, OpenBLAS ($(grep -c . "$T/work/hide.txt") paths): $(head -n 1 "$T/h.out" | cut -c1-100)"; fi
fi
# the loader check catches a library the bundle lacks (libmunge, which PMIx needs)
mkdir -p "$T/rt" && tar -C "$T/rt" -xzf $G/runtime.tar.gz
R=$T/rt/root; m=$(find "$R" -name 'libmunge.so.2*' -type f -print -quit)
if [ -z "$m" ]; then bad "the bundle has no libmunge (PMIx needs it)"
else
  mv "$m" "$T/"
  env_args=(LD_LIBRARY_PATH="$(sed "s|^|$R/|" $G/ldpath.txt | tr '\n' ':')${CUDA_HOME:-/usr/local/cuda}/lib64" OPAL_PREFIX="$R/usr")
  if timeout $HANG_S unshare --mount bash $S _hidden "$T/work" -- bash $S _loader "$R" "${env_args[@]}" >"$T/l.out" 2>&1; then
    bad "the loader check misses a library taken out of the bundle: $(tail -n 1 "$T/l.out")"
  elif grep -q libmunge "$T/l.out"; then ok "the loader check catches a library taken out of the bundle: $(tail -n 1 "$T/l.out")"
  else bad "the loader check fails without naming libmunge: $(head -c 400 "$T/l.out")"; fi
fi
finish
