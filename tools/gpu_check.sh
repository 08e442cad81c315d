#!/usr/bin/env bash
# gpu_check.sh — every GPU check and benchmark of ringlm in one run of at most 8 minutes on a GPU machine (one
# H200), with the field's anchors (PyTorch) measured beside it in the same run.
#
#   make gpu-bundle                  here, the build machine (= bash tools/gpu_check.sh prepare): the CUDA programs,
#                                    portable x86 CPU builds, data, the CPU reference losses, the planner's verdicts
#                                    and the Debian runtime libraries the GPU machine lacks, in build/gpu_bundle/
#   bash tools/gpu_check.sh run      there, from the repository root (the tree and build/gpu_bundle travel)
#   bash tools/gpu_check.sh rehearse here, without a GPU, as root: every step of `run`, the GPU steps' command lines on
#                                    the emulated CUDA backend (build/emu, a dry run: every flag, file and call checked,
#                                    no kernel executed, values not compared), with the system's Open MPI, PMIx, hwloc,
#                                    HDF5, OpenBLAS (every library the bundle carries) and mpirun hidden from the
#                                    programs (a private mount namespace)
#   bash tools/gpu_check.sh caps     the per-step time caps, their sum and the run's deadline
#   bash tools/gpu_check.sh complete exit 0 when build/gpu_bundle is stamped and complete, else one line saying why
#   GPU_CHECK_ONLY=step,step         (run, rehearse) only the named steps (setup and summary always; cp2 brings
#                                    train_fp32, ring_bf16 brings engine: their references), e.g. to redo what failed
#
# The run, each check ok/FAIL (a skipped one says so and counts as neither), the last line "N passed, N failed".
# Correctness first, then benchmarks; every step has a cap (CAPS below) and the run a deadline, so it ends within
# RUN_LIMIT seconds even if steps hang:
#   setup       unpack the runtime libraries (gzip), GPU/driver/CUDA facts, the loader check: every bundled program
#               and shared object (MPI/PMIx plugins included) finds its libraries, and each program starts;
#   mpirun_cpu  the bundle's mpirun: the CPU build on 2 ranks (ring attention, --comm mpi) against the CPU reference;
#   test_cuda   every kernel against the CPU backend, in fp32, tf32 and bf16;
#   train_*     20 training steps of a small model against the CPU backend's losses (tight for steps 1-5, losses and
#               gradient norms, then a bound that grows as training amplifies rounding: see compare in the helper);
#   cp2         ring attention on 2 ranks sharing the GPU (--comm mpi) against one process (fp32, the same rule);
#   engine      attention's block engines (docs/attention_engine.md): the start-up self-check's verdicts for head_dim
#               64 and 128 (attn_engine = auto, one line per class of block) and one process on each engine, bf16;
#   ring_bf16   a bf16 ring of 2 and 4 ranks sharing the GPU (staged transport) against one process, on each engine
#               (own, cudnn), over 10 steps (the same rule, bf16's bounds);
#   kernels     bench_kernels: the bf16 matmul peak, the attention blocks alone (head_dim 64/128, causal, 8K-64K) on
#               the own kernels and on cuDNN's engine;
#   tp_*        tokens/s, model TFLOP/s and device memory of the 125M config at 32K and the 1B config at 8K and 32K
#               (the 1B at 32K with RINGLM_CUDA_PROFILE: where a step's time goes; again on the own kernels), then
#               at 64K; a length the planner (build/plan, run in prepare) says does not fit without recomputation
#               runs at recompute none (the refusal, as planned) and at the cheapest recompute mode that fits;
#   torch       tools/torch_anchor.py: cuBLAS bf16 peak, a PyTorch training step of the same configs at 8K and 32K,
#               then SDPA flash and cuDNN attention at the same shapes (without PyTorch: one line, and on);
#   offload     the 1B config with offload = ckpt (recompute qkv, 4K-token sequences) at the largest micro-batch whose
#               pinned host memory is at most PIN_GIB (the planner, in prepare): 2 steps without offload and 2 with it
#               (tokens/s, device and pinned host memory: with offload the device holds less, by about what is pinned);
#               a machine with too little host memory for the pinned copies refuses with one line (a note);
#   summary     $OUT/summary.md (one page: date, GPU, driver, CUDA, PyTorch/cuDNN/NCCL; checks; ringlm beside the
#               anchors with ratios; MFU against the measured and the nominal peak; the 1B @ 32K profile).
# Everything is written to a work folder (GPU_CHECK_WORK, else a new folder in /tmp); $OUT (else out/gpu_check/)
# gets at most 6 files: log.txt, summary.md, results.json, attention.csv, training.csv and rest.tar.gz (the rest).
set -uo pipefail
cd "$(dirname "$0")/.."
SELF=tools/gpu_check.sh
G=build/gpu_bundle
PORT=build/x86-64-v3          # the portable CPU build carried in the bundle
PORT_OPT='-O3 -march=x86-64-v3'
PY=${PYTHON:-python3}
SMALL=(--vocab_size 257 --d_model 128 --n_layer 2 --n_head 4 --n_kv_head 2 --d_ff 352 --max_seq_len 256
       --seq_len 256 --batch_size 4 --micro_batch 2 --lr 3e-3 --warmup_steps 2 --max_steps 20 --log_every 1
       --seed 7 --ckpt_every 0 --save_final 0 --adam_eps 1e-6)
# The call: the device tool's 8 minutes (CALL_LIMIT) hold the machine's start-up, the transfer of the tree and the
# bundle, this run and the packing of $OUT: the run's steps (their caps, the summary's included) get RUN_LIMIT, which
# leaves at least 60 s.
CALL_LIMIT=480
RUN_LIMIT=420
# Per-step caps in seconds (each step also stops at the run's deadline); their sum is at most RUN_LIMIT. Sized from
# the CPU costs measured on the build machine (2026-12-05) plus the GPU work each step queues (estimated from the step
# anatomy and bench figures; the first GPU run measures it): a cuDNN plan's NVRTC compile ~0.5 s of CPU
# (tests/gpu/cudnn_graphs.cc: 16 plans in 7.4 s) — the start-up self-check is 6 of them, paid once per (head_dim,
# heads per KV head) thanks to the verdict cache (RINGLM_ATTN_CHECK_CACHE), test_cuda's engine pass ~16 more; the 1B
# config's parameter init ~30 s of CPU (perf: Box-Muller in params_init), ~3 s on the GPU machine's 16 cores, per
# 1B process; the small model's 20 CPU steps 1.0 s (mpirun_cpu); a process's CUDA context, cuBLAS and cuDNN
# loads ~2-3 s (cuDNN's engine libraries are ~1 GB). So: test_cuda 40 (plans ~11 s, the CPU references, ~200
# checks); engine 28 (3 processes, 12 plans); ring_bf16 40 (4 multi-rank runs, each rank its own plans); kernels 43
# (cuDNN: 16 plans of the benchmark's shapes); the 1B rows init + 3 steps (~2 s each at 32K, more at 64K); offload 20
# (two 1B processes of 2 short steps); torch takes what its budget leaves.
CAPS=(setup=20 mpirun_cpu=12 test_cuda=40 train_fp32=10 train_bf16=10 cp2=15 engine=28 ring_bf16=40 kernels=43
      tp_125m_32k=16 tp_1b_8k=18 tp_1b_32k=30 tp_1b_32k_own=30 torch=41 tp_1b_64k=40 offload=20
      summary=7)
# the offload row's pinned host memory at most (GiB): pinning is the cost, ~1-2 s per GiB on a large host
PIN_GIB=4
# throughput rows: config (configs/NAME.conf), seq_len, steps (the first is the warm-up), cap[, attention engine
# (default: auto)]; the run's, then the rehearsal's (the CPU build: a row that runs, and one that no recompute mode fits)
ROWS_A=("llama_125m_128k 32768 4 tp_125m_32k" "llama_1b_128k 8192 3 tp_1b_8k" "llama_1b_128k 32768 3 tp_1b_32k"
        "llama_1b_128k 32768 3 tp_1b_32k_own own")
ROWS_B=("llama_1b_128k 65536 3 tp_1b_64k")
# the engine checks' model: SMALL with head_dim 64 (GQA 4/2) and 128 (4/1), where cuDNN's engine applies
E64=(--d_model 256 --n_head 4 --n_kv_head 2 --matmul_precision bf16 --max_steps 10)
E128=(--d_model 512 --n_head 4 --n_kv_head 1 --matmul_precision bf16 --max_steps 10)
PROFILE_ROW="llama_1b_128k 32768"
TORCH_TRAIN=configs/llama_125m_128k.conf:8192,configs/llama_125m_128k.conf:32768,configs/llama_1b_128k.conf:8192,configs/llama_1b_128k.conf:32768
# shellcheck disable=SC2054 # the commas are in values
ATT=(--T 8192,16384,32768,65536 --hd 64,128 --heads 16 --kv 4)
R_ROWS_A=("tiny 128 4 tp_125m_32k" "tiny 192 3 tp_1b_8k" "tiny 256 3 tp_1b_32k" "tiny 256 3 tp_1b_32k_own own")
R_ROWS_B=("llama_1b_128k 1048576 3 tp_1b_64k")
R_PROFILE_ROW="tiny 256"
# the rehearsal's offload row: CONF SEQ_LEN MICRO_BATCH [ARGS...] (offload needs more than 2 layers)
R_OFFLOAD="tiny 256 4 --n_layer 6"
# shellcheck disable=SC2054
R_ATT=(--T 256,512 --hd 64,128 --heads 4 --kv 2)

# the rehearsal runs on a build machine that may be busy: its caps (and deadline) are SCALE times the run's, so that
# they catch a hang there without deciding a verdict by that machine's speed
SCALE=1
ONLY=""
cap_of() { local c; for c in "${CAPS[@]}"; do [ "${c%%=*}" = "$1" ] && { echo $((${c#*=} * SCALE)); return 0; }; done; echo 0; }
caps() {
  local c t=0
  for c in "${CAPS[@]}"; do printf '%-14s %4d s\n' "${c%%=*}" "${c#*=}"; t=$((t + ${c#*=})); done
  echo "total $t s (limit $RUN_LIMIT s)"
  echo "deadline: the steps end by $((RUN_LIMIT - $(cap_of summary) - 10)) s into the run, the summary by $RUN_LIMIT s; the" \
       "$CALL_LIMIT s call leaves $((CALL_LIMIT - t)) s for start-up, transfer and packing"
}
# every step's name, in the order of the run
step_names() { local c; for c in "${CAPS[@]}"; do echo "${c%%=*}"; done; }

# ---------------------------------------------------------------------------------------------------- prepare
# helpers of prepare in Python (the build machine has it): plan verdicts and the runtime package closure
prep_py() {
  /usr/bin/python3 - "$@" <<'PY'
import glob, json, os, re, subprocess, sys
cmd = sys.argv[1]
if cmd == "planrow":   # planrow CONF L JSON: one line "CONF L none mlp qkv full total_none_bytes"
    p = json.load(open(sys.argv[4])); lo = p["longest"]
    print(sys.argv[2], sys.argv[3], lo["none"], lo["mlp"], lo["qkv"], lo["full"], int(p["total"]))
    sys.exit(0)
# closure G PROGRAM...: Debian packages of every library the programs, mpirun and whatever the bundle brings (its
# MPI/PMIx plugins included) load, the C runtime excepted, unpacked into G/root; repeated until nothing is new
G, progs = sys.argv[2], sys.argv[3:]
root, debs = os.path.join(G, "root"), os.path.join(G, "debs")
BASE = {"libc6", "libgcc-s1", "libstdc++6"}
owner = {}
for lst in glob.glob("/var/lib/dpkg/info/*.list"):
    pkg = os.path.basename(lst)[:-5].split(":")[0]
    for line in open(lst, errors="replace"):
        owner[line.rstrip("\n")] = pkg
def pkg_of(path):
    cands = {path, os.path.realpath(path)}
    for p in list(cands):
        cands.add(p[4:] if p.startswith("/usr/lib/") else "/usr" + p if p.startswith("/lib/") else p)
    for p in cands:
        if p in owner:
            return owner[p]
    return None
def is_elf(p):
    try:
        with open(p, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False
def elves():
    out = []
    for d, _, fs in os.walk(root):
        out += [os.path.join(d, f) for f in fs if not os.path.islink(os.path.join(d, f)) and is_elf(os.path.join(d, f))]
    return out
def ld_path():
    dirs = sorted({d for d, _, fs in os.walk(root) if any(f.startswith("lib") and ".so" in f for f in fs)},
                  key=lambda d: (d.count("/"), d))
    return ":".join(dirs)
def scan(files):
    env = dict(os.environ, LD_LIBRARY_PATH=ld_path())
    need, missing = set(), []
    for f in files:
        r = subprocess.run(["ldd", f], capture_output=True, text=True, env=env)
        for line in r.stdout.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) >= 3:
                target = parts[parts.index("=>") + 1]
                if target == "not":
                    missing.append((os.path.relpath(f, root) if f.startswith(root) else f, parts[0]))
                elif target.startswith("/") and not os.path.realpath(target).startswith(os.path.realpath(root)) \
                        and "/usr/local/cuda" not in target:
                    p = pkg_of(target)
                    if p and p not in BASE:
                        need.add(p)
    return need, missing
def version(p):
    r = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", p], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None
updated = [False]
def fetch(specs):   # one apt-get call for all (one call per package took a minute): None, or apt-get's stderr
    r = subprocess.run(["apt-get", "download"] + specs, cwd=debs, capture_output=True, text=True)
    return None if r.returncode == 0 else (r.stderr.strip() or "?")
def download(pkgs):
    os.makedirs(debs, exist_ok=True)
    pkgs = sorted(pkgs)
    vers = {p: version(p) for p in pkgs}
    # all at once: the installed versions, the archive's for those the archive no longer has (apt-get names them);
    # else each package on its own, the installed version and then the archive's; a fresh machine may have no
    # package lists yet: fetch them once (as root) and try again
    err = fetch([f"{p}={vers[p]}" if vers[p] else p for p in pkgs])
    if err is not None:
        gone = set(re.findall(r"Can't find a source to download version '[^']*' of '([^':]+)", err))
        if gone:
            err = fetch([f"{p}={vers[p]}" if vers[p] and p not in gone else p for p in pkgs])
    if err is None:
        return unpack()
    for f in glob.glob(os.path.join(debs, "*.deb")):
        os.remove(f)
    for p in pkgs:
        for attempt in range(2):
            for spec in ([f"{p}={vers[p]}"] if vers[p] else []) + [p]:
                err = fetch([spec])
                if err is None:
                    break
            else:
                if attempt == 0 and not updated[0] and os.geteuid() == 0:
                    updated[0] = True
                    subprocess.run(["apt-get", "update", "-qq"], capture_output=True)
                    continue
                sys.exit(f"gpu_check: apt-get download {p} failed: {err.splitlines()[-1]}")
            break
    unpack()
def unpack():
    for d in glob.glob(os.path.join(debs, "*.deb")):
        subprocess.run(["dpkg", "-x", d, root], check=True)
        os.remove(d)
have = set()
want = {"openmpi-bin", "libopenmpi3", "openmpi-common"}   # mpirun, its plugins and help files
want |= scan(progs)[0]
for _ in range(8):
    new = want - have
    if not new:
        break
    download(new)
    have |= new
    want |= scan(elves() + progs)[0]
else:
    sys.exit("gpu_check: the runtime package closure did not settle in 8 rounds")
missing = scan(elves() + progs)[1]
with open(os.path.join(G, "packages.txt"), "w") as f:
    f.writelines(f"{p} {version(p) or '(archive version)'}\n" for p in sorted(have))
with open(os.path.join(G, "loader_known.txt"), "w") as f:   # unresolvable on the build machine too
    f.writelines(f"{a} {b}\n" for a, b in sorted(set(missing)) if not a.startswith(G))
with open(os.path.join(G, "ldpath.txt"), "w") as f:
    f.writelines(os.path.relpath(d, root) + "\n" for d in ld_path().split(":") if d)
need = 0
for f in elves() + progs:
    with open(f, "rb") as fh:
        need = max([need] + [int(v) for v in re.findall(rb"GLIBC_2\.(\d+)", fh.read())])
with open(os.path.join(G, "build_info.txt"), "a") as f:
    f.write(f"glibc_needed: 2.{need}\n")
print(f"gpu_check: {len(have)} runtime packages; {len(missing)} library references unresolvable here too "
      f"(listed in {G}/loader_known.txt)")
PY
}

# bundle_complete DIR: every file a run reads is in DIR and whole (the reference losses of all steps, a planner
# verdict per row, an intact runtime archive); one line naming what is missing otherwise
bundle_complete() {
  local d=$1 f n
  for f in cuda/train cuda/eval cuda/bench_kernels cuda/tests/test_cuda cpu/train cpu/bench_kernels; do
    [ -x "$d/$f" ] || { echo "$d/$f is missing"; return 1; }
  done
  for f in data/meta.json ref/metrics.jsonl plan.tsv offload.txt build_info.txt packages.txt ldpath.txt runtime.tar.gz; do
    [ -s "$d/$f" ] || { echo "$d/$f is missing or empty"; return 1; }
  done
  n=$(grep -c . "$d/ref/metrics.jsonl"); [ "$n" -eq 20 ] || { echo "$d/ref/metrics.jsonl has $n of 20 steps"; return 1; }
  n=$(grep -c . "$d/plan.tsv"); f=$(( ${#ROWS_A[@]} + ${#ROWS_B[@]} + ${#R_ROWS_A[@]} + ${#R_ROWS_B[@]} ))
  [ "$n" -eq "$f" ] || { echo "$d/plan.tsv has $n of $f planner verdicts"; return 1; }
  gzip -t "$d/runtime.tar.gz" 2>/dev/null || { echo "$d/runtime.tar.gz is not a whole gzip file"; return 1; }
}

# The bundle is made in $G.new (this script's alone: an interrupted earlier attempt there is removed), checked
# complete, stamped (.gpu_check_bundle, written last), and only then put in the place of $G
prepare() {
  set -e
  local jobs B=$G.new why; jobs=$(nproc)
  if [ -e "$G" ] && [ ! -e "$G/.gpu_check_bundle" ] && [ ! -e "$G/ref/metrics.jsonl" ]; then   # (ref/: an older bundle)
    echo "gpu_check: $G exists and was not made by this script; move it away first" >&2; exit 1
  fi
  make -s -j"$jobs" build/prepare build/plan
  make -s -j"$jobs" cuda
  # portable CPU programs for the bundle: this build machine's -march=native code may not run on the GPU machine
  make -s -j"$jobs" BD="$PORT" OPT="$PORT_OPT" "$PORT/train" "$PORT/bench_kernels"
  rm -rf "$B"; mkdir -p "$B/cuda/tests" "$B/cpu"
  cp build/cuda/train build/cuda/eval build/cuda/bench_kernels "$B/cuda/"
  cp build/cuda/tests/test_cuda "$B/cuda/tests/"
  cp "$PORT/train" "$PORT/bench_kernels" "$B/cpu/"
  # data: this repository's sources (the small runs) and, for 64K-token windows, Python's standard library too
  local src=(model attention data train tests tools backend comm checkpoint eval optim) d
  for d in /usr/lib/python3.11/email /usr/lib/python3.11/json /usr/lib/python3.11/asyncio; do [ -d "$d" ] && src+=("$d"); done
  build/prepare --out "$B/data" --val-frac 0 --doc-per dir "${src[@]}" >/dev/null
  "$B/cpu/train" --train_data "$B/data/train_*.bin" --out_dir "$B/ref" "${SMALL[@]}" >/dev/null
  echo "gpu_check: CPU reference losses in $G/ref/metrics.jsonl"
  # the planner's verdicts for every throughput row (one H200, one sequence per step)
  local row conf L max extra
  : >"$B/plan.tsv"
  for row in "${ROWS_A[@]}" "${ROWS_B[@]}" "${R_ROWS_A[@]}" "${R_ROWS_B[@]}"; do
    read -r conf L _ _ <<<"$row"
    max=$(sed -n 's/^max_seq_len *= *\([0-9]*\).*/\1/p' "configs/$conf.conf"); extra=()
    [ "$L" -gt "${max:-0}" ] && extra=(--max_seq_len "$L")
    build/plan -c "configs/$conf.conf" --seq_len "$L" "${extra[@]}" --batch_size 1 --micro_batch 1 --device h200 \
      --json >"$B/plan.json"
    prep_py planrow "$conf" "$L" "$B/plan.json" >>"$B/plan.tsv"
  done
  rm -f "$B/plan.json"
  # the offload row, sized by its pinned host memory (pinning, not the GPU, is its cost): the largest micro-batch of
  # 4096-token sequences (recompute qkv) whose offload = ckpt pins at most PIN_GIB and that fits one H200 (the
  # planner's 139 GiB) with and without offload: "CONF SEQ_LEN MICRO_BATCH GiB_WITHOUT GiB_WITH PINNED_GiB"
  local mb a b row=""
  for mb in $(seq 1 32); do
    a=$(build/plan -c configs/llama_1b_128k.conf --seq_len 4096 --batch_size "$mb" --micro_batch "$mb" --recompute qkv \
        --offload none --device h200 --json | "$PY" -c 'import json,sys; p=json.load(sys.stdin); print(p["total"] / 2**30, p["memory"] / 2**30)')
    b=$(build/plan -c configs/llama_1b_128k.conf --seq_len 4096 --batch_size "$mb" --micro_batch "$mb" --recompute qkv \
        --offload ckpt --device h200 --json | "$PY" -c 'import json,sys; p=json.load(sys.stdin); print(p["total"] / 2**30, p["host"] / 2**30)')
    "$PY" -c "import sys; a, m = map(float, '$a'.split()); b, h = map(float, '$b'.split()); sys.exit(0 if a <= m and b <= m and 0 < h <= $PIN_GIB else 1)" || break
    row="llama_1b_128k 4096 $mb ${a%% *} $b"
  done
  [ -n "$row" ] || { echo "gpu_check: no micro-batch of the offload row pins at most $PIN_GIB GiB" >&2; exit 1; }
  echo "$row" >"$B/offload.txt"
  { echo "built: $(date -u +'%Y-%m-%d %H:%M UTC') on $(hostname)"
    echo "ringlm: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git status --porcelain 2>/dev/null | grep -c . | sed 's/^0$//; s/^[1-9].*/ + local changes/')"
    echo "cuda_build: $("${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  } >"$B/build_info.txt"
  # runtime libraries: the Debian packages of everything the carried programs and mpirun load
  prep_py closure "$B" "$B"/cuda/train "$B"/cuda/eval "$B"/cuda/bench_kernels "$B"/cuda/tests/test_cuda \
    "$B"/cpu/train "$B"/cpu/bench_kernels
  rm -rf "$B/debs" "$B/root/usr/share/doc" "$B/root/usr/share/man" "$B/root/usr/share/locale" \
    "$B/root/usr/share/lintian" "$B/root/usr/share/bug" "$B/root/usr/share/info" "$B/root/usr/include"
  tar -C "$B" -czf "$B/runtime.tar.gz" root && rm -rf "$B/root"
  why=$(bundle_complete "$B") || { echo "gpu_check: the new bundle is incomplete ($why); $G is left as it was" >&2; exit 1; }
  : >"$B/.gpu_check_bundle"                        # the stamp: last, once the bundle is complete
  rm -rf "$G.old"; [ ! -e "$G" ] || mv "$G" "$G.old"
  mv "$B" "$G"; rm -rf "$G.old"
  echo "gpu_check: $G is $(du -sh "$G" | cut -f1) ($(grep -c . "$G/packages.txt") runtime packages, gzip)"
  echo "gpu_check: on the GPU machine: bash tools/gpu_check.sh run   (with the tree and $G)"
}

# ------------------------------------------------------------------------------------- the hidden-library view
# hide_list ROOT_LISTING: the system paths the rehearsal covers: every folder one level below a library folder and
# every file directly in one that the bundle carries, its programs, its /etc and /usr/share folders of Open
# MPI, PMIx and hwloc, and ssh/rsh (the GPU machine has no remote shell either); not what the covering itself
# (mount, bash, env, ldd and the shell tools) needs
hide_list() {
  local keep="" f lib
  for f in bash mount env grep sed awk sort cat timeout find readlink dirname tr wc; do
    f=$(command -v "$f") || continue
    while read -r lib; do keep+=" $(readlink -f "$lib")"; done < <(ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
  done
  tar -tzf "$1" | sed -n 's|^root/||p' | awk -v keep="$keep" '
    BEGIN { n = split(keep, k, " "); for (i = 1; i <= n; i++) K[k[i]] = 1 }
    { p = $0; sub(/\/$/, "", p) }
    (p ~ /^(usr\/)?lib\/x86_64-linux-gnu\/[^\/]+$/) || (p ~ /^(usr\/)?s?bin\/[^\/]+$/) ||
    (p ~ /^etc\/[^\/]+$/) || (p ~ /^usr\/share\/(openmpi|pmix|hwloc)$/) { print "/" p }
    END { print "/usr/bin/ssh"; print "/usr/bin/rsh" }' | while read -r p; do
    [ -e "$p" ] || [ -L "$p" ] || continue
    f=$(readlink -f "$p")
    [[ " $keep " == *" $f "* ]] && continue
    echo "$f"
  done | sort -u
}

# _hidden W -- CMD...: (inside `unshare --mount`) CMD with every path of W/hide.txt covered by an empty file or folder
hidden_exec() {
  local w=$1 p; shift; [ "${1:-}" = -- ] && shift
  while IFS= read -r p; do
    [ -e "$p" ] || continue
    if [ -d "$p" ]; then mount --bind "$w/empty/d" "$p"; else mount --bind "$w/empty/f" "$p"; fi ||
      { echo "gpu_check: cannot cover $p in the rehearsal's mount namespace" >&2; exit 1; }
  done <"$w/hide.txt"
  exec "$@"
}

# --------------------------------------------------------------------------------------------- the loader check
# list_deps FILE: the libraries FILE loads, as the dynamic loader resolves them in the bundle's environment (the
# loader itself lists them: no shell tool runs with the bundle's libraries)
RTLD=/lib64/ld-linux-x86-64.so.2
list_deps() { if [ -x "$RTLD" ]; then env "${LENV[@]}" "$RTLD" --list "$1" 2>&1; else env "${LENV[@]}" ldd "$1" 2>&1; fi; }
# deps_problems FILE NAME: prints what keeps FILE from loading (a library not found, a file the loader rejects, a
# missing symbol version), but references listed in the bundle's loader_known.txt (counted in NOTES); 1 on a problem
deps_problems() {
  local out rc line lib bad=""
  out=$(list_deps "$1"); rc=$?
  while IFS= read -r line; do
    case $line in
      *"=> not found"*) read -r lib _ <<<"$line"
                        if grep -qxF "$2 $lib" <<<"$KNOWN"; then NOTES=$((NOTES + 1)); else bad+=" $lib not found;"; fi ;;
      *"not found"*|*error*|*"too short"*|*"wrong ELF"*) line=${line#"$1": }; bad+=" $(tr -s ' \t' ' ' <<<"$line");" ;;
    esac
  done <<<"$out"
  [ -n "$bad" ] || [ "$rc" -eq 0 ] || bad=" the loader exits $rc: $(tr -s ' \t\n' ' ' <<<"$out" | cut -c1-200)"
  [ -z "$bad" ] && return 0
  echo "cannot load $2:$bad" | cut -c1-600
  return 1
}
# _loader ROOT [-u NAME]... NAME=VALUE...: with that environment (env's words: the bundle's), every bundled program and shared object finds
# its libraries (references the build machine could not resolve either are notes), and each program starts; one
# line per problem, then the summary line; exit 0 when there is no problem
loader_check() {
  local root=$1 f out problems=0 nprog=0 nso=0 rc; shift
  LENV=("$@"); NOTES=0
  KNOWN=$(cat "$G/loader_known.txt" 2>/dev/null)
  for f in "$G"/cuda/train "$G"/cuda/eval "$G"/cuda/bench_kernels "$G"/cuda/tests/test_cuda "$G"/cpu/train \
           "$G"/cpu/bench_kernels "$root"/usr/bin/orterun; do
    nprog=$((nprog + 1))
    [ -x "$f" ] || { echo "missing program: $f"; problems=$((problems + 1)); continue; }
    deps_problems "$f" "$f" || problems=$((problems + 1))
  done
  while IFS= read -r f; do
    nso=$((nso + 1))
    deps_problems "$f" "${f#"$root"/}" || problems=$((problems + 1))
  done < <(find "$root" -type f -name '*.so*')
  # start each program: the loader, the bundled MPI's initialisation (train, eval), the argument parser
  for f in "$G"/cuda/train "$G"/cuda/eval "$G"/cpu/train "$G"/cuda/bench_kernels "$G"/cpu/bench_kernels \
           "$root"/usr/bin/orterun; do
    case $f in
      *bench_kernels) out=$(env "${LENV[@]}" "$f" --reps 2>&1) ;;
      *orterun) out=$(env "${LENV[@]}" "$f" --version 2>&1) ;;
      *) out=$(env "${LENV[@]}" "$f" --help 2>&1) ;;
    esac
    rc=$?
    if [ $rc -eq 127 ] || [ $rc -gt 128 ] || grep -qE 'error while loading shared libraries|opal_init|orte_init' <<<"$out"; then
      echo "cannot start ${f#"$root"/} (exit $rc): $(tr -s ' \t\n' ' ' <<<"$out" | cut -c1-300)"; problems=$((problems + 1))
    fi
  done
  echo "loader: $nprog programs and $nso shared objects of the bundle checked, $problems with problems, $NOTES references unresolvable on the build machine too"
  [ $problems -eq 0 ]
}

# ------------------------------------------------------------------------------------------------ the run itself
# helpers in Python (standard library only), written into the work folder: loss comparison, a throughput row,
# the summary
write_helper() {
  cat >"$W/gpu_check_helper.py" <<'PY'
import csv, glob, json, os, re, statistics as st, sys
cmd, a = sys.argv[1], sys.argv[2:]

def losses(p):
    return [json.loads(l)["loss"] for l in open(p) if l.strip()]

if cmd == "compare":   # REF.jsonl RUN.jsonl TIGHT LOOSE GN_TOL DRY: a run against its reference, step by step
    # Two correct implementations of one step differ by the rounding of their sums (another order: cuBLAS tiles and
    # splits k, the CPU's OpenBLAS does not; ranks split the rows): ~1e-7 relative per product. Steps 1-5 start from
    # (nearly) the same weights, so their losses and gradient norms must agree within TIGHT and GN_TOL: the emulated
    # backend, whose cuBLAS sums in another order than the CPU's, measured (2026-12-05, the small model below, fp32)
    # losses <= 1.4e-7 and gradient norms <= 5.5e-7 relative over steps 1-5 (bf16: 9e-5 and 1.1e-3), while a wrong
    # kernel moves the first loss by more than 1e-3. Later, training amplifies the weights' difference: ~100x per 10
    # steps after a gradient-norm spike (docs/gpu_step.md; the emulated fp32 run grew to 1.1e-6 by step 18, its
    # gradient norms to 1.8e-5), so from step 6 the bound grows 10x per 5 steps, TIGHT * 10^((t - 5) / 5), up to
    # LOOSE: a run that drifts further than that from its reference within 20 steps is not the same arithmetic.
    # DRY (the rehearsal: a dry run computes nothing): the steps are counted, not compared.
    x = [json.loads(l) for l in open(a[0]) if l.strip()]
    y = [json.loads(l) for l in open(a[1]) if l.strip()]
    tight, loose, gtol, dry = float(a[2]), float(a[3]), float(a[4]), a[5] == "1"
    if len(x) != len(y) or not x:
        print(f"{len(y)} steps logged, {len(x)} expected")
        sys.exit(1)
    if dry:
        print(f"{len(y)} steps logged (a dry run: values not compared)")
        sys.exit(0)
    bound = lambda t: tight if t <= 5 else min(loose, tight * 10 ** ((t - 5) / 5))
    worst, at, gw = 0.0, 1, 0.0
    for t, (p, q) in enumerate(zip(x, y), 1):
        r = abs(p["loss"] - q["loss"]) / abs(p["loss"]) / bound(t)
        if not r <= worst:
            worst, at = r, t
        if t <= 5 and "grad_norm" in p:
            g = abs(p["grad_norm"] - q["grad_norm"]) / max(abs(p["grad_norm"]), 1e-30)
            gw = g if not g <= gw else gw
    print(f"{len(y)} steps: worst loss diff {worst * bound(at):.2e} at step {at} (bound there {bound(at):.0e}; steps 1-5 "
          f"{tight:.0e}, then x10 per 5 steps up to {loose:.0e}), gradient norms of steps 1-5 within {gw:.1e} (tol {gtol:.0e}); "
          f"first/last {x[0]['loss']:.5f}/{x[-1]['loss']:.5f} vs {y[0]['loss']:.5f}/{y[-1]['loss']:.5f}")
    sys.exit(0 if worst <= 1 and gw <= gtol else 1)

if cmd == "train_row":   # OUT.jsonl CONF L MODE RC LOG METRICS PLANROW PROFILE ENGINE: one attempt; prints its status
    out, conf, L, mode, rc, log, metrics, planrow, prof, eng = a
    text = open(log, errors="replace").read() if os.path.exists(log) else ""
    recs = []
    for l in (open(metrics) if os.path.exists(metrics) else []):
        try:
            recs.append(json.loads(l))
        except ValueError:   # a line cut by the cap
            pass
    r = {"config": conf, "seq_len": int(L), "recompute": mode, "rc": int(rc), "steps_logged": len(recs), "engine": eng}
    ran = [l.replace("attention engine: ", "") for l in text.splitlines() if l.startswith("attention engine: ")]
    if ran:
        r["engine_lines"] = ran
    if recs:
        r["attn_blocks"] = {"own": recs[-1].get("attn_blocks_own"), "cudnn": recs[-1].get("attn_blocks_fast")}
    pl = planrow.split()
    if len(pl) == 7:
        r["planner_longest"] = dict(zip(["none", "mlp", "qkv", "full"], map(int, pl[2:6])))
        r["planner_total_none_gib"] = round(int(pl[6]) / 2 ** 30, 2)
    m = re.search(r"this layout needs ([0-9.]+) GiB per rank.*", text)
    mem = re.findall(r"device in use (?:at most )?([0-9.]+) of ([0-9.]+) GiB", text)
    if mem:
        r["device_gib"], r["device_total_gib"] = float(mem[-1][0]), float(mem[-1][1])
    meas = recs[1:] if len(recs) > 1 else recs
    if recs and (r["rc"] == 0 or len(recs) > 1):
        r["tokens_per_s"] = st.median(x["tokens_per_s"] for x in meas)
        r["step_ms"] = st.median(x["step_ms"] for x in meas)
        r["model_tflops"] = st.median(x["gflops"] for x in meas) / 1e3
        r["status"] = "ok" if r["rc"] == 0 else "partial"
        r["detail"] = (f"median of {len(meas)} steps after the warm-up" if len(recs) > 1 else "the warm-up step only")
        if r["rc"] != 0:
            r["detail"] += f", cut at the cap (exit {rc}) after {len(recs)} steps"
    elif m:
        av = re.search(r"but ([0-9.]+) GiB are available", m.group(0))
        r["status"], r["needs_gib"], r["message"] = "refused", float(m.group(1)), m.group(0)[:400]
        r["detail"] = f"needs {m.group(1)} GiB per rank" + (f", {av.group(1)} GiB available" if av else "")
    elif re.search(r"out of (device )?memory", text):
        r["status"] = "out of memory"
        r["detail"] = next(l for l in text.splitlines() if re.search(r"out of (device )?memory", l))[:300]
    elif r["rc"] in (124, 137):
        r["status"], r["detail"] = "timed out", f"no step finished within the cap (exit {rc})"
    else:
        r["status"] = "failed"
        err = [l for l in text.splitlines() if re.search(r"^(cuda backend|train|data|comm|nccl)[a-z_ ]*:|rror|Abort|egmentation", l)]
        r["detail"] = (err[0] if err else " ".join(text.strip().splitlines()[-3:]))[:300] or f"exit {rc}, no output"
    if prof:
        r["profile"] = prof if os.path.exists(prof) else None
    with open(out, "a") as f:
        f.write(json.dumps(r) + "\n")
    extra = (f": {r['tokens_per_s']:.0f} tokens/s, {r['model_tflops']:.1f} model TFLOP/s" if "tokens_per_s" in r
             else "")
    print(f"{r['status']}{extra}; {r['detail']}")
    sys.exit(0)

if cmd != "summary":
    sys.exit(f"gpu_check: unknown helper {cmd}")
# summary W OUT PASS FAIL SKIP MODE: summary.md, results.json, attention.csv, training.csv
W, OUT, npass, nfail, nskip, mode = a
def kv(path):
    d = {}
    if os.path.exists(path):
        for line in open(path, errors="replace"):
            if ":" in line:
                k, v = line.split(":", 1)
                d[k.strip()] = v.strip()
    return d
mach = kv(os.path.join(W, "machine.txt"))
checks = [l.rstrip("\n").split("\t") + ["", ""] for l in open(os.path.join(W, "checks.tsv"))] \
    if os.path.exists(os.path.join(W, "checks.tsv")) else []
torch = {}
if os.path.exists(os.path.join(W, "torch_anchor.json")):
    try:
        torch = json.load(open(os.path.join(W, "torch_anchor.json")))
    except ValueError:
        torch = {"status": "torch_anchor.json unreadable"}
# ringlm's attention blocks (bench_kernels' tables): on the own kernels (rk), on cuDNN's engine (rkc)
rk_mm = None
def bench_table(path, source):
    global rk_mm
    t = {}
    if not os.path.exists(path):
        return t
    for line in open(path, errors="replace"):
        mm = re.match(r"matmul (\d+)\^3 (\S+): ([0-9.e+-]+) TFLOP/s", line)
        if mm:
            rk_mm = {"n": int(mm.group(1)), "precision": mm.group(2), "tflops": float(mm.group(3))}
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) in (7, 9) and c[0].isdigit() and c[1].isdigit():
            hd, T = int(c[0]), int(c[1])
            nh = int(c[2].split()[0])
            fl = 4.0 * T * T / 2 * hd * nh
            fm, bm = float(c[3]), float(c[5])
            t[(hd, T)] = {"source": source, "hd": hd, "T": T, "heads": c[2], "fwd_ms": fm, "fwd_tflops": float(c[4]),
                          "bwd_ms": bm, "bwd_tflops": float(c[6]),
                          "model_fwd_ms": float(c[7]) if len(c) == 9 and c[7] != "—" else None,
                          "model_bwd_ms": float(c[8]) if len(c) == 9 and c[8] != "—" else None,
                          "fwdbwd_tflops": 3.5 * fl / ((fm + bm) * 1e-3) / 1e12 if fm + bm > 0 else None}
    return t
rk = bench_table(os.path.join(W, "bench_kernels.md"), "ringlm")
rkc = bench_table(os.path.join(W, "bench_kernels_cudnn.md"), "ringlm cudnn")
tatt = {}
for r in torch.get("attention", []):
    tatt.setdefault(r["backend"], {})[(r["hd"], r["T"])] = r
tb = list(tatt)
tm = (torch.get("matmul") or {}).get("tflops")
peak, peak_src = (tm, "cuBLAS bf16 through PyTorch") if tm else ((rk_mm or {}).get("tflops"), "ringlm's be_matmul bf16")
try:
    nominal = float(mach.get("nominal_bf16_tflops", ""))
except ValueError:
    nominal = torch.get("nominal_bf16_tflops")
rows = [json.loads(l) for l in open(os.path.join(W, "training.jsonl"))] \
    if os.path.exists(os.path.join(W, "training.jsonl")) else []
ttrain = {(r["config"], r["seq_len"]): r for r in torch.get("train", [])}

def f(x, nd=1):
    if x is None or x == "":
        return "—"
    if isinstance(x, (int, float)):
        return f"{x:.{nd}f}" if abs(x) >= 1 or x == 0 else f"{x:.3g}"
    return str(x)
def ratio(x, y):
    return f"{x / y:.2f}" if x and y else "—"
def pct(x, y):
    return f"{100 * x / y:.0f} %" if x and y else "—"

v = torch.get("versions", {})
L = [f"# ringlm GPU check{' (rehearsal: no GPU; the GPU steps on the emulated backend, a dry run: no values)' if mode == 'rehearse' else ''}", "",
     "| date | GPU | memory | driver | CUDA (driver) | CUDA (build) | PyTorch | CUDA (PyTorch) | cuDNN | NCCL | ringlm |",
     "|---|---|---|---|---|---|---|---|---|---|---|",
     f"| {mach.get('date', '—')} | {mach.get('gpu', '—')} | {mach.get('gpu_memory', '—')} | {mach.get('driver', '—')} | "
     f"{mach.get('cuda_driver', '—')} | {mach.get('cuda_build', '—')} | {v.get('torch', torch.get('status', '—'))} | "
     f"{v.get('cuda', '—')} | {v.get('cudnn', '—')} | {v.get('nccl', '—')} | {mach.get('ringlm', '—')} |", ""]
L += [f"**{npass} passed, {nfail} failed**{f' ({nskip} skipped)' if nskip != '0' else ''} — "
      f"host: {mach.get('cores', '?')} cores; run {mach.get('elapsed', '?')}", "",
      "| check | result | detail |", "|---|---|---|"]
for c in checks:
    L.append(f"| {c[1]} | {c[0]} | {c[2][:150].replace('|', '/')} |")
L += ["", "## Peaks", "",
      f"bf16 matmul {((torch.get('matmul') or {}).get('n') or (rk_mm or {}).get('n') or '?')}³ on random data: cuBLAS "
      f"through PyTorch {f(tm) + ' TFLOP/s' if tm else 'not measured'}, ringlm's be_matmul "
      f"{f(rk_mm['tflops']) + ' TFLOP/s' if rk_mm else 'not measured'}; nominal dense bf16 "
      f"of this GPU: {f(nominal, 0) + ' TFLOP/s' if nominal else 'unknown'}. MFU below: model FLOPs (model_flops_per_token) "
      f"against the measured peak ({peak_src}) / against the nominal one."]
L += ["", "## Attention alone (causal, bf16, one sequence; TFLOP/s, FLOPs as bench_kernels counts them)", ""]
if rk or rkc or tatt:
    keys = sorted(set(rk) | set(rkc) | {k for b in tatt.values() for k in b})
    heads = (next(iter((rk or rkc).values()))["heads"] if rk or rkc else "")
    gq = sorted({r.get("gqa", "") for b in tatt.values() for r in b.values() if r.get("gqa")})
    L.append(f"heads (kv): {heads or '?'}; PyTorch's GQA: {', '.join(gq) or '—'}; ringlm own = its own kernels, "
             f"ringlm cuDNN = its cuDNN engine (cuDNN's fused attention with ringlm's conversions and merges)")
    L.append("")
    ours = [("own", rk), ("cuDNN", rkc)]
    hdr = ["head_dim", "T"] + [f"ringlm {n} fwd" for n, _ in ours] + [f"{b} fwd" for b in tb] + \
          [f"ringlm {n}/{b}" for n, _ in ours for b in tb] + [f"ringlm {n} fwd+bwd" for n, _ in ours] + \
          [f"{b} fwd+bwd" for b in tb] + [f"ringlm {n}/{b}" for n, _ in ours for b in tb]
    L += ["| " + " | ".join(hdr) + " |", "|" + "---:|" * len(hdr)]
    cell = lambda x, key: f(x.get(key)) if x.get("status", "ok") == "ok" else x.get("status", "—")[:24]
    for k in keys:
        rs = [t.get(k, {}) for _, t in ours]
        t = [tatt[b].get(k, {}) for b in tb]
        L.append("| " + " | ".join([str(k[0]), str(k[1])] + [f(r.get("fwd_tflops")) for r in rs] + [cell(x, "fwd_tflops") for x in t] +
                                   [ratio(r.get("fwd_tflops"), x.get("fwd_tflops")) for r in rs for x in t] +
                                   [f(r.get("fwdbwd_tflops")) for r in rs] + [cell(x, "fwdbwd_tflops") for x in t] +
                                   [ratio(r.get("fwdbwd_tflops"), x.get("fwdbwd_tflops")) for r in rs for x in t]) + " |")
    if any(r.get("model_fwd_ms") for r in rk.values()):   # the anatomy's model of the own kernels beside the clock
        L += ["", "Own kernels, measured against the step anatomy's model (tiles x per-tile cost from the SASS; "
              "docs/attention_kernels.md): ms, and measured / model", "",
              "| head_dim | T | fwd ms | model fwd ms | fwd measured/model | bwd ms | model bwd ms | bwd measured/model |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for k in sorted(rk):
            r = rk[k]
            L.append(f"| {k[0]} | {k[1]} | {f(r['fwd_ms'], 2)} | {f(r.get('model_fwd_ms'), 2)} | "
                     f"{ratio(r['fwd_ms'], r.get('model_fwd_ms'))} | {f(r['bwd_ms'], 2)} | {f(r.get('model_bwd_ms'), 2)} | "
                     f"{ratio(r['bwd_ms'], r.get('model_bwd_ms'))} |")
else:
    L.append("not measured")
L += ["", "## Training step (one sequence per step, bf16; tokens/s and model TFLOP/s: medians after a warm-up step)", "",
      "| config | seq_len | recompute | attention engine (blocks own / cuDNN) | ringlm tokens/s | PyTorch tokens/s | "
      "ringlm/PyTorch | ringlm TFLOP/s | MFU measured / nominal | PyTorch TFLOP/s | PyTorch MFU measured / nominal | "
      "device GiB | status |",
      "|---|---:|---|---|---:|---:|---:|---:|---|---:|---|---:|---|"]
for r in rows:
    t = ttrain.get((r["config"], r["seq_len"]), {}) if r.get("tokens_per_s") else {}
    st_ = r["status"] if r["status"] in ("ok",) else f"{r['status']}: {r.get('detail', '')[:110]}"
    if "profile" in r:
        st_ += " (with the profile on)"
    ab = r.get("attn_blocks") or {}
    eng = f"{r.get('engine', 'auto')} ({ab.get('own', '—')} / {ab.get('cudnn', '—')})"
    L.append(f"| {r['config']} | {r['seq_len']} | {r['recompute']} | {eng} | {f(r.get('tokens_per_s'), 0)} | "
             f"{f(t.get('tokens_per_s'), 0)} | {ratio(r.get('tokens_per_s'), t.get('tokens_per_s'))} | "
             f"{f(r.get('model_tflops'))} | {pct(r.get('model_tflops'), peak)} / {pct(r.get('model_tflops'), nominal)} | "
             f"{f(t.get('model_tflops'))} | {pct(t.get('model_tflops'), peak)} / {pct(t.get('model_tflops'), nominal)} | "
             f"{f(r.get('device_gib'))} | {st_.replace('|', '/')} |")
for k, t in ttrain.items():
    if not any((r["config"], r["seq_len"]) == k and r.get("tokens_per_s") for r in rows):
        L.append(f"| {k[0]} | {k[1]} | — | — | — | {f(t.get('tokens_per_s'), 0)} | — | — | — | {f(t.get('model_tflops'))} | "
                 f"{pct(t.get('model_tflops'), peak)} / {pct(t.get('model_tflops'), nominal)} | — | PyTorch: {t.get('status')} |")
if torch.get("status", "ok") != "ok" or not torch:
    L.append(f"\nPyTorch anchors: {torch.get('status', 'not run')}")
for n in torch.get("notes", []):
    L.append(f"\nPyTorch: {n}")
prof = [r for r in rows if "profile" in r]
L += ["", "## Where a step's time goes" + (f" ({prof[-1]['config']} at {prof[-1]['seq_len']}, recompute "
                                         f"{prof[-1]['recompute']}; RINGLM_CUDA_PROFILE)" if prof else ""), ""]
ptab = None
for r in reversed(prof):
    if r.get("profile"):
        ptab = open(r["profile"], errors="replace").read().strip()
        break
if ptab:
    L.append(ptab)
else:
    L.append("no profile: " + (f"the profiled run ({prof[-1]['status']}) left no table at RINGLM_CUDA_PROFILE"
                                if prof else "the profiled run did not happen"))
# the step anatomy of the profiled run (backend/cuda/anatomy.cu): the roofline's prediction per kernel class beside the
# milliseconds measured with events in the same step, to calibrate the model
an = [r["profile"].replace("profile_", "anatomy_") for r in reversed(prof) if r.get("profile")]
an = [p for p in an if os.path.exists(p)]
L += ["", "## Predicted (step anatomy) and measured per kernel class", ""]
if an:
    txt = open(an[0], errors="replace").read()
    keep = [l for l in txt.splitlines() if re.match(r"\| (predicted|measured|host synchronisations|launches)", l)]
    cls = txt.split("## By kernel class", 1)[1].split("\n## ", 1)[0].strip() if "## By kernel class" in txt else ""
    L += ["| | |", "|---|---:|"] + keep + ["", cls, "", f"(whole report: {os.path.basename(an[0])} in rest.tar.gz)"]
else:
    L.append("no step anatomy: the profiled run left no report at RINGLM_CUDA_ANATOMY")
os.makedirs(OUT, exist_ok=True)
open(os.path.join(OUT, "summary.md"), "w").write("\n".join(L) + "\n")
with open(os.path.join(OUT, "attention.csv"), "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["source", "head_dim", "T", "heads", "kv", "gqa", "fwd_ms", "fwd_tflops", "fwdbwd_ms", "fwdbwd_tflops",
                "bwd_tflops", "status"])
    for (hd, T), r in sorted(rk.items()) + sorted(rkc.items()):
        w.writerow([r["source"], hd, T, r["heads"].split()[0], r["heads"].split("(")[-1].rstrip(")"), "native",
                    r["fwd_ms"], r["fwd_tflops"], r["fwd_ms"] + r["bwd_ms"], r["fwdbwd_tflops"], r["bwd_tflops"], "ok"])
    for b in tb:
        for (hd, T), r in sorted(tatt[b].items()):
            w.writerow([f"torch {b}", hd, T, r.get("heads"), r.get("kv"), r.get("gqa", ""), r.get("fwd_ms", ""),
                        r.get("fwd_tflops", ""), r.get("fwdbwd_ms", ""), r.get("fwdbwd_tflops", ""),
                        r.get("bwd_tflops", ""), r.get("status", "")])
with open(os.path.join(OUT, "training.csv"), "w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["source", "config", "seq_len", "recompute", "status", "tokens_per_s", "step_ms", "model_tflops",
                "mfu_measured", "mfu_nominal", "device_gib", "detail"])
    for r in rows:
        mt = r.get("model_tflops")
        w.writerow([f"ringlm ({r.get('engine', 'auto')} engine)", r["config"], r["seq_len"], r["recompute"], r["status"], r.get("tokens_per_s", ""),
                    r.get("step_ms", ""), mt or "", mt / peak if mt and peak else "", mt / nominal if mt and nominal else "",
                    r.get("device_gib", ""), r.get("detail", "")])
    for (c, Lq), t in ttrain.items():
        mt = t.get("model_tflops")
        w.writerow(["torch", c, Lq, "none", t.get("status"), t.get("tokens_per_s", ""), t.get("step_ms", ""), mt or "",
                    mt / peak if mt and peak else "", mt / nominal if mt and nominal else "",
                    t.get("peak_mem_gib", ""), t.get("optimizer", "")])
json.dump({"mode": mode, "machine": mach, "passed": int(npass), "failed": int(nfail), "skipped": int(nskip),
           "checks": [{"result": c[0], "check": c[1], "detail": c[2]} for c in checks],
           "peak": {"measured_tflops": peak, "measured_source": peak_src, "nominal_tflops": nominal,
                    "ringlm_matmul": rk_mm},
           "attention_ringlm": list(rk.values()) + list(rkc.values()), "training_ringlm": rows, "torch": torch,
           "profile": ptab}, open(os.path.join(OUT, "results.json"), "w"), indent=1)
PY
}
run_py() { "$PY" "$W/gpu_check_helper.py" "$@"; }

pass=0; fail=0; skipped=0
ok()   { echo "ok   $*"; pass=$((pass + 1)); printf 'ok\t%s\t%s\n' "${1%%:*}" "${*#*: }" >>"$W/checks.tsv"; }
bad()  { echo "FAIL $*"; fail=$((fail + 1)); printf 'FAIL\t%s\t%s\n' "${1%%:*}" "${*#*: }" >>"$W/checks.tsv"; }
skip() { echo "skip $*"; skipped=$((skipped + 1)); printf 'skipped\t%s\t%s\n' "${1%%:*}" "${*#*: }" >>"$W/checks.tsv"; }
note() { echo "note $*"; }
oneline() { tail -n "${2:-3}" "$1" 2>/dev/null | tr -s ' \t\n' ' ' | cut -c1-300; }
# why FILE: the line of a program's output that says what went wrong (ringlm's errors are one line), else its end
why() {
  local l; l=$(grep -m1 -E '^(cuda backend|train|eval|bench_kernels|plan|comm|nccl|data)[a-z_ ]*:|rror|FAIL|Abort|egmentation' "$1" 2>/dev/null)
  if [ -n "$l" ]; then cut -c1-300 <<<"$l"; else oneline "$1"; fi
}

# step NAME: starts the capped step NAME (its end: the cap, or the run's deadline if sooner); 1 when no time is left or
# GPU_CHECK_ONLY leaves it out
step() {
  if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$1,"* ]]; then echo "   ($1: not in GPU_CHECK_ONLY)"; return 1; fi
  local cap; cap=$(cap_of "$1")
  STEP_END=$((SECONDS + cap))
  [ "$1" = summary ] || [ "$STEP_END" -le "$DEADLINE" ] || STEP_END=$DEADLINE
  if [ $((STEP_END - SECONDS)) -lt 3 ]; then skip "$1: the run's time is spent"; return 1; fi
  echo "== $1 (cap ${cap} s, $((SECONDS - T0)) s into the run)"
}
# gpu_step NAME: a step that needs the GPU (the rehearsal runs its command lines on the emulated backend, dry)
gpu_step() { step "$1"; }
# only_steps LIST: GPU_CHECK_ONLY checked and completed (setup and summary always; the references of cp2 and ring_bf16)
only_steps() {
  local n out="setup,summary" all
  all=",$(step_names | tr '\n' ','),"
  IFS=, read -ra n <<<"$1"
  for s in "${n[@]}"; do
    [ -n "$s" ] || continue
    [[ $all == *",$s,"* ]] || { echo "gpu_check: GPU_CHECK_ONLY names '$s', not a step (the steps: $(step_names | tr '\n' ' ' | sed 's/ $//'))" >&2; return 1; }
    out+=",$s"
    case $s in cp2) out+=",train_fp32" ;; ring_bf16) out+=",engine" ;; esac
  done
  echo "$out"
}
# capped [-m] CMD...: CMD under timeout until the step's end; KILL to its process group (-m: TERM first, for
# mpirun, which then ends its ranks; KILL 3 s later). Exit 124 or 137 when cut.
capped() {
  local sig=(-s KILL) margin=0
  if [ "$1" = -m ]; then sig=(-k 3 -s TERM); margin=3; shift; fi
  local left=$((STEP_END - SECONDS - margin))
  [ "$left" -ge 1 ] || return 124
  timeout "${sig[@]}" "$left" "$@"
}
cut_note() { case $1 in 124|137) echo " (cut at the step's cap)" ;; esac; }

# planner verdict for CONF L: the recompute modes that fit, cheapest first (empty: none fits)
plan_row() { local c l r; while read -r c l r; do [ "$c" = "$1" ] && [ "$l" = "$2" ] && { echo "$c $l $r"; return; }; done <"$G/plan.tsv"; }
fitting_modes() {
  local -a p; read -ra p <<<"$(plan_row "$1" "$2")"
  [ ${#p[@]} -eq 7 ] || { echo "?"; return; }
  local i m=(none mlp qkv full) out=""
  for i in 0 1 2 3; do [ "${p[$((i + 2))]}" -ge "$2" ] && out+="${m[$i]} "; done
  echo "$out"
}

# attempt CONF L MODE STEPS ENGINE [ARGS...]: one training run for throughput (ARGS: more trainer options, after the
# row's; MODE is then a label whose first word is the recompute mode); A_STATUS: its status word
attempt() {
  local conf=$1 L=$2 mode=$3 steps=$4 eng=$5 d max extra=() envs=() prof="" rc
  shift 5
  d=$W/tp_${conf}_${L}_${mode// /_}_$eng; rm -rf "$d"
  max=$(sed -n 's/^max_seq_len *= *\([0-9]*\).*/\1/p' "configs/$conf.conf")
  [ "$L" -gt "${max:-0}" ] && extra=(--max_seq_len "$L")
  if [ "$conf $L" = "$PROF_ROW" ] && [ "$eng" = auto ]; then   # the profile, and the step anatomy of step 2 (predicted beside measured)
    prof=$W/profile_${conf}_$L.md; envs=(RINGLM_CUDA_PROFILE="$prof" RINGLM_CUDA_ANATOMY="$W/anatomy_${conf}_$L.md"); fi
  capped "${PRE[@]}" OMP_NUM_THREADS="$NCPU" "${envs[@]}" "$TRAIN" -c "configs/$conf.conf" --train_data "$DATA" \
    --val_data "" --out_dir "$d" --seq_len "$L" "${extra[@]}" --batch_size 1 --micro_batch 1 --max_steps "$steps" \
    --warmup_steps 1 --log_every 1 --save_final 0 --ckpt_every 0 --val_every 0 --recompute "${mode%% *}" \
    --doc_mask 0 --attn_engine "$eng" "$@" >"$d.txt" 2>&1   # (full causal attention, as the PyTorch anchor computes it)
  rc=$?
  A_LINE=$(run_py train_row "$W/training.jsonl" "$conf" "$L" "$mode" "$rc" "$d.txt" "$d/metrics.jsonl" \
           "$(plan_row "$conf" "$L")" "$prof" "$eng" 2>&1)
  A_STATUS=${A_LINE%%[:;]*}
}

# tp_row CONF L STEPS CAP: the throughput of one configuration and length; the refusal at recompute none first when
# the planner says it needs recomputation, then the cheapest mode that fits (the next one if the trainer refuses it)
tp_row() {
  local conf=$1 L=$2 steps=$3 cap=$4 eng=${5:-auto} fits m name="throughput $1 at $2${5:+ on the $5 engine}"
  step "$cap" || return
  fits=$(fitting_modes "$conf" "$L")
  if [ "$fits" = "?" ]; then bad "$name: no planner verdict in $G/plan.tsv (run 'make gpu-bundle' again)"; return; fi
  if [ "${fits%% *}" != none ]; then
    attempt "$conf" "$L" none "$steps" "$eng"
    case $A_STATUS in
      refused) ok "$name: refused at recompute none as the planner says (${A_LINE#*; })" ;;
      ok|partial) ok "$name: runs at recompute none although the planner says it needs recomputation: $A_LINE"; return ;;
      *) bad "$name at recompute none: expected the capacity refusal, got $A_LINE" ;;
    esac
    [ -n "$fits" ] || { note "$name: no recompute mode fits one GPU (planner)"; return; }
  fi
  for m in $fits; do
    [ $((STEP_END - SECONDS)) -ge 3 ] || { bad "$name: no time left for recompute $m"; return; }
    attempt "$conf" "$L" "$m" "$steps" "$eng"
    case $A_STATUS in
      ok|partial) ok "$name (recompute $m): $A_LINE"; return ;;
      refused) note "$name: the trainer refuses recompute $m, which the planner says fits: $A_LINE" ;;
      *) bad "$name (recompute $m): $A_LINE"; return ;;
    esac
  done
  bad "$name: refused at every recompute mode the planner says fits"
}

# the offload row (prepare's offload.txt; the rehearsal's: R_OFFLOAD): 2 steps without offload, 2 with it; with it the
# backend holds less device memory (its peak, RINGLM_CUDA_MEMORY: by about what is pinned, at least half of it), and
# the pinned host memory is printed beside the planner's
offload_row() {
  step offload || return
  local conf L mb gnone gwith pinned name extra=() extra_s="" dn dc pin devn devc heldn heldc
  if [ "$MODE" = rehearse ]; then read -r conf L mb extra_s <<<"$R_OFFLOAD"; read -ra extra <<<"$extra_s"; gnone=nan gwith=nan pinned=nan
  else read -r conf L mb gnone gwith pinned <"$G/offload.txt" || { bad "offload: no row in $G/offload.txt (run 'make gpu-bundle' again)"; return; }; fi
  name="offload: $conf, $mb sequences of $L tokens per micro-batch, recompute qkv"
  attempt "$conf" "$L" "qkv offload none micro_batch $mb" 2 auto --batch_size "$mb" --micro_batch "$mb" --offload none "${extra[@]}"
  dn=$W/tp_${conf}_${L}_qkv_offload_none_micro_batch_${mb}_auto
  case $A_STATUS in
    ok|partial) ;;
    *) bad "$name, offload none: $A_LINE"; return ;;
  esac
  attempt "$conf" "$L" "qkv offload ckpt micro_batch $mb" 2 auto --batch_size "$mb" --micro_batch "$mb" --offload ckpt "${extra[@]}"
  dc=$W/tp_${conf}_${L}_qkv_offload_ckpt_micro_batch_${mb}_auto
  pin=$(sed -nE 's/.*pinned host memory at most ([0-9]+) bytes.*/\1/p' "$dc.txt" | tail -n 1)
  devn=$(sed -nE 's/.*device in use at most ([0-9.]+) of.*/\1/p' "$dn.txt" | tail -n 1)
  devc=$(sed -nE 's/.*device in use at most ([0-9.]+) of.*/\1/p' "$dc.txt" | tail -n 1)
  heldn=$(sed -nE 's/.*memory: peak held ([0-9.]+) MiB.*/\1/p' "$dn.txt" | tail -n 1)
  heldc=$(sed -nE 's/.*memory: peak held ([0-9.]+) MiB.*/\1/p' "$dc.txt" | tail -n 1)
  case $A_STATUS in
    ok|partial)
      if "$PY" -c "import sys; p, a, b = float('${pin:-0}') / 2**20, float('${heldn:-0}'), float('${heldc:-0}'); sys.exit(0 if p > 0 and a - b >= 0.5 * p else 1)"; then
        ok "$name, offload ckpt: $A_LINE; pinned host $(awk -v b="${pin:-0}" 'BEGIN { printf "%.3f", b / 2^30 }') GiB (planned $(printf %.2f "$pinned")); the backend's device peak $heldc MiB against $heldn without offload (device in use ${devc:-?} and ${devn:-?} GiB; planned $(printf %.1f "$gwith") and $(printf %.1f "$gnone") GiB)"
      else bad "$name: with offload the backend's device peak is ${heldc:-?} MiB against ${heldn:-?} without, pinned ${pin:-?} bytes (it should be less by at least half of what is pinned)"; fi ;;
    *) if grep -q "offload = ckpt keeps .* pinned host memory" "$dc.txt"; then note "$name: this machine's host memory is too small: $(why "$dc.txt")"
       else bad "$name, offload ckpt: $A_LINE"; fi ;;
  esac
}

check_run() {
  MODE=$1 DRY=0
  [ "$MODE" = rehearse ] && SCALE=10 DRY=1
  T0=$SECONDS; DEADLINE=$((T0 + RUN_LIMIT * SCALE - $(cap_of summary) - 10)); STEP_END=$DEADLINE
  NCPU=$(nproc 2>/dev/null || echo 4)
  write_helper
  echo "gpu_check $MODE: work folder $W, results in $OUT, $NCPU cores, deadline $((DEADLINE - T0)) s${ONLY:+, only $ONLY}"
  local -a rows_a rows_b att
  if [ "$MODE" = rehearse ]; then rows_a=("${R_ROWS_A[@]}"); rows_b=("${R_ROWS_B[@]}"); att=("${R_ATT[@]}"); PROF_ROW=$R_PROFILE_ROW
  else rows_a=("${ROWS_A[@]}"); rows_b=("${ROWS_B[@]}"); att=("${ATT[@]}"); PROF_ROW=$PROFILE_ROW; fi

  # ---- setup: the runtime, the machine's facts, the loader check
  step setup
  local root=$W/runtime/root
  mkdir -p "$W/runtime" "$W/empty/d" && : >"$W/empty/f"
  if ! capped tar -C "$W/runtime" -xzf "$G/runtime.tar.gz"; then
    bad "setup: cannot unpack $G/runtime.tar.gz"; return
  fi
  local ldp="" dd
  while IFS= read -r dd; do ldp+="${ldp:+:}$root/$dd"; done <"$G/ldpath.txt"
  # CUDA libraries: the system's (ldconfig, /usr/local/cuda), else those a Python wheel brought
  local cache lib f sp cudaextra="" sps
  cache=$({ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null)
  sps=$(capped "$PY" -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null)
  # (cuDNN is loaded at run time by the programs, libnvrtc by cuDNN's runtime-compiled engines: found the same way)
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9 libnvrtc.so.13; do
    [[ $cache == *"$lib "* ]] && continue
    [ -e "${CUDA_HOME:-/usr/local/cuda}/lib64/$lib" ] && continue
    f=""
    for sp in $sps; do
      [ -d "$sp/nvidia" ] && f=$(find "$sp/nvidia" -maxdepth 4 -name "$lib" -print -quit 2>/dev/null)
      [ -n "$f" ] && break
    done
    if [ -n "$f" ]; then cudaextra+=":$(dirname "$f")"; else note "setup: $lib is not on this machine"; fi
  done
  # shellcheck disable=SC2054 # the commas are in values
  RENV=(LD_LIBRARY_PATH="$ldp:${CUDA_HOME:-/usr/local/cuda}/lib64$cudaextra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        OPAL_PREFIX="$root/usr" PMIX_MCA_mca_base_component_path="$root/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix"
        OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_plm=isolated
        OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        RINGLM_CUDA_MEMORY=1 RINGLM_ATTN_CHECK_CACHE="$W/attn_verdicts.tsv")
  local xs=(RINGLM_ATTN_CHECK_CACHE)
  # the rehearsal: the GPU steps on the emulated backend, a dry run (every check, no kernel executed) of an H200's memory
  if [ "$MODE" = rehearse ]; then RENV+=(RINGLM_EMU_DRY=1 RINGLM_EMU_MEMORY_MIB=144384); xs+=(RINGLM_EMU_DRY RINGLM_EMU_MEMORY_MIB); fi
  HIDE=()
  if [ "$MODE" = rehearse ]; then
    hide_list "$G/runtime.tar.gz" >"$W/hide.txt"
    HIDE=(unshare --mount --propagation private bash "$SELF" _hidden "$W" --)
    echo "   the bundled programs run with $(grep -c . "$W/hide.txt") system paths covered (list: hide.txt in rest.tar.gz)"
  fi
  # the image's own MPI settings (an MPI of its own, mpi4py's) must not reach the bundle's Open MPI
  local v; UNSET=()
  for v in $(compgen -e); do case $v in OMPI_*|OPAL_*|PMIX_*|PRTE_*|HWLOC_*) UNSET+=(-u "$v") ;; esac; done
  PRE=("${HIDE[@]}" env "${UNSET[@]}" "${RENV[@]}")
  MPIRUN=("$root/usr/bin/orterun" --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x OPAL_PREFIX
          -x PMIX_MCA_mca_base_component_path -x OMP_NUM_THREADS -x RINGLM_CUDA_MEMORY)
  for v in "${xs[@]}"; do MPIRUN+=(-x "$v"); done
  C=$G/cuda; DATA="$G/data/train_*.bin"
  if [ "$MODE" = rehearse ]; then
    C=$PWD/build/emu
    for f in train bench_kernels tests/test_cuda libcudnn.so.9; do
      [ -e "$C/$f" ] || { bad "setup: the rehearsal runs the GPU steps on $C, which lacks $f (make cuda-emu)"; return; }
    done
  fi
  TRAIN=$C/train
  local smi="" name="" mem="" drv="" cudadrv="" nominal
  if ! command -v nvidia-smi >/dev/null; then note "setup: no nvidia-smi on this machine"
  elif smi=$(capped nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1); then
    IFS=, read -r name mem drv <<<"${smi%%$'\n'*}"
    cudadrv=$(capped nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p')
  else note "setup: nvidia-smi fails: $(tr -s '\n' ' ' <<<"$smi" | cut -c1-200)"; fi
  nominal=$(capped "$PY" tools/torch_anchor.py --nominal "${name:-none}" 2>/dev/null)
  { echo "date: $(date -u +'%Y-%m-%d %H:%M UTC')"
    echo "gpu: ${name:-none (no nvidia-smi)}"; echo "gpu_memory: ${mem# }"; echo "driver: ${drv# }"
    echo "cuda_driver: ${cudadrv:-—}"; echo "cores: $NCPU"; echo "nominal_bf16_tflops: ${nominal:-unknown}"
    sed -n 's/^cuda_build: /cuda_build: /p; s/^ringlm: /ringlm: /p; s/^built: /bundle_built: /p' "$G/build_info.txt" 2>/dev/null
    echo "python: $("$PY" --version 2>&1)"
    echo "glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null | sed 's/^glibc //') (the bundle needs $(sed -n 's/^glibc_needed: //p' "$G/build_info.txt" 2>/dev/null))"; } >"$W/machine.txt"
  sed 's/^/   /' "$W/machine.txt"
  if capped "${HIDE[@]}" bash "$SELF" _loader "$root" "${UNSET[@]}" "${RENV[@]}" >"$W/loader.txt" 2>&1; then ok "setup: $(tail -n 1 "$W/loader.txt")"
  else bad "setup: loader check$(cut_note $?): $(grep -v '^loader:' "$W/loader.txt" | tr '\n' ' ' | cut -c1-600)"; fi

  # ---- the bundle's mpirun, with the CPU build (no GPU needed)
  if step mpirun_cpu; then
    local d=$W/cpu_cp2 rc
    capped -m "${PRE[@]}" OMP_NUM_THREADS=$((NCPU / 2 > 0 ? NCPU / 2 : 1)) "${MPIRUN[@]}" -np 2 "$G/cpu/train" \
      --train_data "$DATA" --out_dir "$d" "${SMALL[@]}" --matmul_precision fp32 --cp 2 --comm mpi >"$d.txt" 2>&1; rc=$?
    if [ $rc -eq 0 ] && run_py compare "$G/ref/metrics.jsonl" "$d/metrics.jsonl" 1e-5 1e-3 1e-4 0 >"$W/cmp.txt" 2>&1; then
      ok "mpirun_cpu: the bundle's mpirun, CPU build, cp 2 equals the CPU reference: $(cat "$W/cmp.txt")"
    else bad "mpirun_cpu: exit $rc$(cut_note $rc): $(why "$d.txt") $(oneline "$W/cmp.txt" 1)"; fi
  fi

  # ---- correctness on the GPU
  if gpu_step test_cuda; then
    local rc line
    # (not the verdict cache: test_cuda checks the self-check itself; the rehearsal: the emulated program without a
    # device, which says so and exits 77 — its path, libraries and start-up; make test runs it on emulated devices)
    if [ "$MODE" = rehearse ]; then
      capped "${PRE[@]}" RINGLM_ATTN_CHECK_CACHE= RINGLM_EMU_DEVICES=0 "$C/tests/test_cuda" >"$W/test_cuda.txt" 2>&1; rc=$?
      if [ $rc -eq 77 ] && grep -q "no CUDA device" "$W/test_cuda.txt"; then ok "test_cuda: starts and finds no device (exit 77): $(oneline "$W/test_cuda.txt" 1)"
      else bad "test_cuda: exit $rc$(cut_note $rc), not 77 with no device: $(why "$W/test_cuda.txt")"; fi
    else
      capped "${PRE[@]}" RINGLM_ATTN_CHECK_CACHE= OMP_NUM_THREADS="$NCPU" "$C/tests/test_cuda" >"$W/test_cuda.txt" 2>&1; rc=$?
      grep -E '^(ok|FAIL)' "$W/test_cuda.txt" | sed 's/^/   /'
      line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$W/test_cuda.txt" | tail -n 1)
      if [ $rc -eq 0 ] && [ -n "$line" ]; then ok "test_cuda: $line"; else bad "test_cuda: exit $rc$(cut_note $rc): $(why "$W/test_cuda.txt")"; fi
    fi
  fi
  local prec tight loose gtol
  for prec in fp32 bf16; do
    gpu_step "train_$prec" || continue
    read -r tight loose gtol <<<"$([ $prec = fp32 ] && echo "1e-5 1e-3 1e-4" || echo "2e-3 1e-2 2e-2")"
    rm -rf "$W/t_$prec"
    capped "${PRE[@]}" OMP_NUM_THREADS="$NCPU" "$C/train" --train_data "$DATA" --out_dir "$W/t_$prec" "${SMALL[@]}" \
      --matmul_precision $prec >"$W/t_$prec.txt" 2>&1; rc=$?
    if [ $rc -ne 0 ]; then bad "train_$prec: exit $rc$(cut_note $rc): $(why "$W/t_$prec.txt")"
    elif run_py compare "$G/ref/metrics.jsonl" "$W/t_$prec/metrics.jsonl" $tight $loose $gtol $DRY >"$W/cmp.txt" 2>&1; then
      ok "train_$prec: against the CPU: $(cat "$W/cmp.txt")"
    else bad "train_$prec: $(oneline "$W/cmp.txt" 2)"; fi
  done
  local np
  for np in 2; do
    gpu_step "cp$np" || continue
    rm -rf "$W/cp$np"
    capped -m "${PRE[@]}" OMP_NUM_THREADS=$((NCPU / np > 0 ? NCPU / np : 1)) "${MPIRUN[@]}" -np $np "$C/train" \
      --train_data "$DATA" --out_dir "$W/cp$np" "${SMALL[@]}" --matmul_precision fp32 --cp $np --comm mpi \
      --verify_attention 5 >"$W/cp$np.txt" 2>&1; rc=$?
    if [ $rc -ne 0 ]; then bad "cp$np: exit $rc$(cut_note $rc): $(why "$W/cp$np.txt")"
    elif [ ! -s "$W/t_fp32/metrics.jsonl" ]; then bad "cp$np: no one-process fp32 losses to compare with (train_fp32 failed)"
    elif run_py compare "$W/t_fp32/metrics.jsonl" "$W/cp$np/metrics.jsonl" 1e-5 1e-3 1e-4 $DRY >"$W/cmp.txt" 2>&1 &&
         grep -q "verify_attention step" "$W/cp$np.txt" && { [ $DRY = 1 ] || ! grep -q WARNING "$W/cp$np.txt"; }; then
      ok "cp$np: equals one process: $(cat "$W/cmp.txt")"
    else bad "cp$np: $(oneline "$W/cmp.txt" 2) $(grep -m1 WARNING "$W/cp$np.txt")"; fi
  done

  # ---- attention's engines: the self-check's verdicts, one process per engine, a bf16 ring on each
  if gpu_step engine; then
    local hdn e vl eargs
    for hdn in 64 128; do
      if [ $hdn = 64 ]; then eargs=("${E64[@]}"); else eargs=("${E128[@]}"); fi
      for e in auto own; do
        [ $hdn = 128 ] && [ $e = own ] && continue
        rm -rf "$W/e${hdn}_$e"
        capped "${PRE[@]}" OMP_NUM_THREADS="$NCPU" "$C/train" --train_data "$DATA" --out_dir "$W/e${hdn}_$e" "${SMALL[@]}" \
          "${eargs[@]}" --attn_engine $e >"$W/e${hdn}_$e.txt" 2>&1; rc=$?
        vl=$(grep '^attention engine:' "$W/e${hdn}_$e.txt" | sed 's/^attention engine: //' | tr '\n' ';' | cut -c1-600)
        if [ $rc -eq 0 ]; then ok "engine: head_dim $hdn, attn_engine = $e: ${vl:-no engine lines}"
        else bad "engine: head_dim $hdn, attn_engine = $e: exit $rc$(cut_note $rc): $(why "$W/e${hdn}_$e.txt")"; fi
      done
    done
  fi
  if gpu_step ring_bf16; then
    local ref
    for e in own cudnn; do
      ref=$W/e64_auto; [ $e = own ] && ref=$W/e64_own
      for np in 2 4; do
        rm -rf "$W/r${np}_$e"
        capped -m "${PRE[@]}" OMP_NUM_THREADS=$((NCPU / np > 0 ? NCPU / np : 1)) "${MPIRUN[@]}" -np $np "$C/train" \
          --train_data "$DATA" --out_dir "$W/r${np}_$e" "${SMALL[@]}" "${E64[@]}" --cp $np --comm mpi --attn_engine $e \
          >"$W/r${np}_$e.txt" 2>&1; rc=$?
        if [ $rc -ne 0 ]; then bad "ring_bf16: cp $np on $e: exit $rc$(cut_note $rc): $(why "$W/r${np}_$e.txt")"
        elif [ ! -s "$ref/metrics.jsonl" ]; then bad "ring_bf16: cp $np on $e: no one-process run to compare with (engine step)"
        # (bf16 against bf16: the ring rounds P and dS at other block boundaries and merges in fp32, no further from
        # one process than bf16 is from the CPU's fp32 — measured there 9e-5 over steps 1-5, gradient norms 1.1e-3)
        elif run_py compare "$ref/metrics.jsonl" "$W/r${np}_$e/metrics.jsonl" 5e-3 1e-2 2e-2 $DRY >"$W/cmp.txt" 2>&1; then
          ok "ring_bf16: cp $np on $e (staged) equals one process: $(cat "$W/cmp.txt")"
        else bad "ring_bf16: cp $np on $e: $(oneline "$W/cmp.txt" 2)"; fi
      done
    done
  fi

  # ---- benchmarks: kernels alone, throughput at 8K/32K (with the profile), the anchors, then 64K
  if step kernels; then
    local kb=$C/bench_kernels kargs=(--gemm 8192 --reps 5) engines=(own cudnn) mm
    for e in "${engines[@]}"; do
      local bk=$W/bench_kernels.md; [ $e = own ] || bk=$W/bench_kernels_$e.md
      [ $e = own ] || kargs=(--gemm 0 "${kargs[@]:2}")
      # (the run's shapes in the rehearsal too: a dry run of them costs seconds)
      capped "${PRE[@]}" OMP_NUM_THREADS="$NCPU" "$kb" --precision bf16 --engine $e "${kargs[@]}" "${ATT[@]}" >"$bk" 2>&1; rc=$?
      sed 's/^/   /' "$bk"
      mm=$(sed -nE 's/^matmul .*: ([0-9.e+]+) TFLOP\/s.*/\1/p' "$W/bench_kernels.md")
      if [ $rc -eq 0 ]; then ok "kernels: bench_kernels, attention on $e${mm:+ (bf16 matmul $mm TFLOP/s)}"
      else bad "kernels: $e: exit $rc$(cut_note $rc): $(grep -c '^| [0-9]' "$bk") attention rows measured; $(why "$bk")"; fi
    done
  fi
  local row
  # shellcheck disable=SC2086 # a row is four words
  for row in "${rows_a[@]}"; do tp_row $row; done
  if step torch; then
    local targs=(--json "$W/torch_anchor.json" --md "$W/torch_anchor.md" --budget $((STEP_END - SECONDS - 8)) "${att[@]}")
    if [ "$MODE" = rehearse ]; then targs+=(--smoke --train configs/tiny.conf:128); else targs+=(--gemm 8192 --train "$TORCH_TRAIN"); fi
    capped "$PY" tools/torch_anchor.py "${targs[@]}" >"$W/torch_anchor.txt" 2>&1; rc=$?
    sed 's/^/   /' "$W/torch_anchor.txt"
    case $rc in
      0) ok "torch: PyTorch anchors: $(grep -c '' "$W/torch_anchor.txt") rows (torch_anchor.md)" ;;
      3) note "torch: $(grep -m1 'torch_anchor:' "$W/torch_anchor.txt" | sed 's/^torch_anchor: //') — ringlm's part goes on" ;;
      *) bad "torch: tools/torch_anchor.py exit $rc$(cut_note $rc): $(oneline "$W/torch_anchor.txt" 2)" ;;
    esac
  fi
  # shellcheck disable=SC2086
  for row in "${rows_b[@]}"; do tp_row $row; done
  offload_row
}

# the whole run or rehearsal, then the summary and the files for $OUT (the last line: N passed, N failed)
main() {
  check_run "$1"
  STEP_END=$((SECONDS + $(cap_of summary)))
  echo "== summary ($((SECONDS - T0)) s into the run)"
  echo "elapsed: $((SECONDS - T0)) s" >>"$W/machine.txt"
  if ! capped "$PY" "$W/gpu_check_helper.py" summary "$W" "$OUT" "$pass" "$fail" "$skipped" "$1" >"$W/summary.txt" 2>&1; then
    bad "summary: $(oneline "$W/summary.txt" 2)"
    { echo "# ringlm GPU check: the summary failed ($(oneline "$W/summary.txt" 2))"; echo; cat "$W/checks.tsv"; } >"$OUT/summary.md"
  fi
  # the rest: every file of the work folder but the runtime, those over 2 MiB listed instead
  (cd "$W" && find . -path ./runtime -prune -o -path ./empty -prune -o -name files.txt -prune -o -type f -size +2M \
     -fprintf big_files.txt '%s %p\n' -o -type f -fprint files.txt && tar -czf "$OUT/rest.tar.gz" -T files.txt) ||
    bad "summary: packing $OUT/rest.tar.gz failed"
  echo "   $OUT: $(find "$OUT" -maxdepth 1 -type f -printf '%f ')"
  rm -rf "$W/runtime"   # the unpacked libraries; the rest of the work folder stays
  [ "$skipped" -eq 0 ] || echo "($skipped skipped)"
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}

case "${1:-}" in
  prepare) prepare ;;
  run|rehearse)
    ONLY=""
    if [ -n "${GPU_CHECK_ONLY:-}" ]; then ONLY=$(only_steps "$GPU_CHECK_ONLY") || exit 2; fi
    if [ ! -e "$G/.gpu_check_bundle" ] || ! why=$(bundle_complete "$G"); then
      echo "gpu_check: no complete $G here${why:+ ($why)}: run 'make gpu-bundle' first" >&2; exit 1
    fi
    if [ "$1" = rehearse ]; then
      [ "$(id -u)" -eq 0 ] || { echo "gpu_check: the rehearsal needs root (a private mount namespace hides the system's libraries)" >&2; exit 77; }
      unshare --mount --propagation private true 2>/dev/null ||
        { echo "gpu_check: the rehearsal needs unshare --mount, which fails here" >&2; exit 77; }
    fi
    OUT=${OUT:-out/gpu_check}; mkdir -p "$OUT" || exit 1
    if [ -n "${GPU_CHECK_WORK:-}" ]; then
      W=$GPU_CHECK_WORK; mkdir -p "$W" || exit 1
      [ -z "$(ls -A "$W")" ] || { echo "gpu_check: GPU_CHECK_WORK=$W is not empty: give a new or empty folder" >&2; exit 1; }
    else W=$(mktemp -d "${TMPDIR:-/tmp}/ringlm_gpu_check.XXXXXX") || exit 1; fi
    n=$(find "$OUT" -mindepth 1 -maxdepth 1 ! -name log.txt ! -name summary.md ! -name results.json \
         ! -name attention.csv ! -name training.csv ! -name rest.tar.gz -printf . | wc -c)
    [ "$n" -eq 0 ] || echo "gpu_check: note: $OUT already holds $n other entries (left as they are)"
    main "$1" 2>&1 | tee "$OUT/log.txt" ;;
  caps) caps ;;
  complete) [ -e "$G/.gpu_check_bundle" ] || { echo "no stamp $G/.gpu_check_bundle"; exit 1; }; bundle_complete "$G" ;;
  _hidden) shift; hidden_exec "$@" ;;
  _loader) shift; loader_check "$@" ;;
  hide-list) hide_list "${2:-$G/runtime.tar.gz}" ;;
  *) echo "usage: bash tools/gpu_check.sh prepare|run|rehearse|caps|complete" >&2; exit 2 ;;
esac
