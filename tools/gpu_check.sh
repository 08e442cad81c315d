#!/usr/bin/env bash
# gpu_check.sh — every GPU check and benchmark of ringlm in one short run on a GPU machine (one H200: ~6 min).
#
#   make gpu-bundle                  here (the build machine; = bash tools/gpu_check.sh prepare): builds the CUDA
#                                    programs with portable x86 code, makes the CPU reference losses and the data,
#                                    and packs the Debian runtime libraries the GPU machine lacks (Open MPI with
#                                    mpirun, HDF5, OpenBLAS for the kernel test's CPU reference, their
#                                    dependencies), all into build/gpu_bundle/ (~25 MiB; the tree + that folder travel)
#   bash tools/gpu_check.sh run      there, from the repository root: log and results under $OUT (else out/gpu_check/)
#
# The run, each step ok/FAIL, the last line "N passed, N failed":
#   1. build/cuda/tests/test_cuda: every kernel against the CPU backend, in fp32, tf32 and bf16;
#   2. 20 training steps of a small model on the GPU against the CPU backend's losses (fp32 1e-5, bf16 1e-2);
#   3. ring attention on 2 and 4 ranks sharing the GPU (--comm mpi, host-staged) against one process (fp32,
#      1e-5; --verify_attention), with mpirun from the bundle;
#   4. bench_kernels: the bf16 matmul peak, the attention kernels alone (head_dim 64 and 128, causal, T 8K-64K);
#   5. training throughput and model-FLOPs utilisation against that peak: configs/llama_125m_128k.conf and the 1B
#      config at seq_len 8K, 32K and 64K (a length that does not fit says so), with the device memory per rank.
set -uo pipefail
cd "$(dirname "$0")/.."
G=build/gpu_bundle
SMALL=(--vocab_size 257 --d_model 128 --n_layer 2 --n_head 4 --n_kv_head 2 --d_ff 352 --max_seq_len 256
       --seq_len 256 --batch_size 4 --micro_batch 2 --lr 3e-3 --warmup_steps 2 --max_steps 20 --log_every 1
       --seed 7 --ckpt_every 0 --save_final 0 --adam_eps 1e-6)

prepare() {
  set -e
  make -s build/train build/prepare
  make -s cuda
  rm -rf "$G"; mkdir -p "$G/cuda/tests" "$G/debs"
  cp build/cuda/train build/cuda/eval build/cuda/bench_kernels "$G/cuda/"
  cp build/cuda/tests/test_cuda "$G/cuda/tests/"
  # data: this repository's sources (the small runs) and, for 64K-token windows, Python's standard library too
  local src=(model attention data train tests tools backend comm checkpoint eval optim)
  [ -d /usr/lib/python3.11 ] && src+=(/usr/lib/python3.11/email /usr/lib/python3.11/json /usr/lib/python3.11/asyncio)
  build/prepare --out "$G/data" --val-frac 0 --doc-per dir "${src[@]}" >/dev/null
  build/train --train_data "$G/data/train_*.bin" --out_dir "$G/ref" "${SMALL[@]}" >/dev/null
  echo "gpu_check: CPU reference losses in $G/ref/metrics.jsonl"
  # runtime libraries: what the carried programs load from Debian packages (not the C runtime), plus mpirun
  local pkgs
  pkgs=$(for b in "$G"/cuda/train "$G"/cuda/tests/test_cuda; do ldd "$b"; done | awk '{print $3}' | grep '^/' |
         grep -v /usr/local/cuda | while read -r f; do dpkg -S "$(readlink -f "$f")" 2>/dev/null || dpkg -S "$f"; done |
         cut -d: -f1 | sort -u | grep -vE '^(libc6|libgcc-s1|libstdc\+\+6)$')
  pkgs="$pkgs libopenmpi3 openmpi-bin openmpi-common libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libgfortran5"
  (cd "$G/debs" && apt-get download $pkgs >/dev/null 2>&1) || { echo "gpu_check: apt-get download failed for: $pkgs" >&2; exit 1; }
  for d in "$G"/debs/*.deb; do dpkg -x "$d" "$G/root"; done
  rm -rf "$G/debs" "$G/root/usr/share/doc" "$G/root/usr/share/man" "$G/root/usr/share/locale"
  XZ_OPT=-T0 tar -C "$G" -cJf "$G/runtime.tar.xz" root && rm -rf "$G/root"
  echo "gpu_check: $G is $(du -sh "$G" | cut -f1) ($(echo $pkgs | wc -w) runtime packages)"
  echo "gpu_check: on the GPU machine: bash tools/gpu_check.sh run   (with the tree and $G)"
}

pass=0; fail=0
ok()  { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
# same_losses A.jsonl B.jsonl TOL: per-step losses within TOL relative; prints the worst difference
same_losses() {
  python3 - "$@" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1])]; b = [json.loads(l)["loss"] for l in open(sys.argv[2])]
w = max(abs(x - y) / abs(x) for x, y in zip(a, b)) if a and len(a) == len(b) else float("inf")
print(f"{len(b)} steps, worst rel diff {w:.2e} (first/last {a[0]:.5f}/{a[-1]:.5f} vs {b[0]:.5f}/{b[-1]:.5f})")
sys.exit(0 if w <= float(sys.argv[3]) else 1)
PY
}

run() {
  [ -x "$G/cuda/train" ] && [ -f "$G/runtime.tar.xz" ] || { echo "gpu_check: no $G: run 'make gpu-bundle' first"; exit 1; }
  local R=/tmp/ringlm_runtime root
  rm -rf "$R"; mkdir -p "$R" && tar -C "$R" -xJf "$G/runtime.tar.xz" || exit 1
  root=$R/root
  # CUDA libraries: the toolkit's, else those a Python wheel brought (site-packages/nvidia/*/lib)
  local extra="" lib f
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    if ! ldconfig -p | grep -q "$lib" && [ ! -e /usr/local/cuda/lib64/$lib ]; then
      f=$(find / -xdev -name "$lib" -path '*nvidia*' 2>/dev/null | head -n 1)
      if [ -n "$f" ]; then extra="$extra:$(dirname "$f")"; else echo "gpu_check: $lib not found on this machine"; fi
    fi
  done
  local L=$root/usr/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH="$L:$L/openblas-openmp:$L/hdf5/openmpi:$L/openmpi/lib:/usr/local/cuda/lib64$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export OPAL_PREFIX=$root/usr OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=4 RINGLM_CUDA_MEMORY=1
  local MPIRUN=("$root/usr/bin/orterun" --oversubscribe -x LD_LIBRARY_PATH -x OPAL_PREFIX -x OMPI_MCA_pml -x OMPI_MCA_btl)
  local C=$G/cuda DATA="$G/data/train_*.bin"
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
    date -u +"date: %Y-%m-%d %H:%M UTC"; } | tee "$OUT/machine.txt"

  echo "== 1. kernels against the CPU backend"
  timeout 300 "$C/tests/test_cuda" >"$OUT/test_cuda.txt" 2>&1; local rc=$?
  grep -E '^(ok|FAIL)' "$OUT/test_cuda.txt" | sed 's/^/   /'
  local line; line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$OUT/test_cuda.txt" | tail -n 1)
  if [ $rc -eq 0 ] && [ -n "$line" ]; then ok "test_cuda: $line"; else bad "test_cuda: exit $rc: $(tail -n 3 "$OUT/test_cuda.txt" | tr '\n' ' ')"; fi

  echo "== 2. 20 training steps against the CPU backend"
  local prec tol
  for prec in fp32 bf16; do
    tol=1e-2; [ $prec = fp32 ] && tol=1e-5
    rm -rf "$OUT/t_$prec"
    if timeout 300 "$C/train" --train_data "$DATA" --out_dir "$OUT/t_$prec" "${SMALL[@]}" --matmul_precision $prec \
        >"$OUT/t_$prec.txt" 2>&1; then
      if same_losses "$G/ref/metrics.jsonl" "$OUT/t_$prec/metrics.jsonl" $tol >"$OUT/cmp.txt" 2>&1
      then ok "train $prec within $tol of the CPU: $(cat "$OUT/cmp.txt")"; else bad "train $prec: $(tail -n 2 "$OUT/cmp.txt" | tr '\n' ' ')"; fi
    else bad "train $prec: exit status: $(tail -n 3 "$OUT/t_$prec.txt" | tr '\n' ' ')"; fi
  done

  echo "== 3. ring attention on ranks sharing the GPU (--comm mpi) against one process"
  local np
  for np in 2 4; do
    rm -rf "$OUT/cp$np"
    if timeout 300 "${MPIRUN[@]}" -np $np "$C/train" --train_data "$DATA" --out_dir "$OUT/cp$np" "${SMALL[@]}" \
        --matmul_precision fp32 --cp $np --comm mpi --verify_attention 5 >"$OUT/cp$np.txt" 2>&1; then
      if same_losses "$OUT/t_fp32/metrics.jsonl" "$OUT/cp$np/metrics.jsonl" 1e-5 >"$OUT/cmp.txt" 2>&1 &&
         grep -q "verify_attention step" "$OUT/cp$np.txt" && ! grep -q WARNING "$OUT/cp$np.txt"
      then ok "cp $np equals one process: $(cat "$OUT/cmp.txt")"; else bad "cp $np: $(tail -n 2 "$OUT/cmp.txt" | tr '\n' ' ')"; fi
    else bad "cp $np: $(tail -n 3 "$OUT/cp$np.txt" | tr '\n' ' ')"; fi
  done

  echo "== 4. kernels alone"
  local peak=""
  if timeout 180 "$C/bench_kernels" --precision bf16 --gemm 8192 --T 8192,16384,32768,65536 --hd 64,128 --heads 16 --kv 4 \
      --reps 5 >"$OUT/bench_kernels.md" 2>&1; then
    cat "$OUT/bench_kernels.md"
    peak=$(sed -nE 's/^matmul .*: ([0-9.e+]+) TFLOP\/s.*/\1/p' "$OUT/bench_kernels.md")
    ok "bench_kernels (bf16 matmul peak $peak TFLOP/s)"
  else bad "bench_kernels: $(tail -n 3 "$OUT/bench_kernels.md" | tr '\n' ' ')"; fi

  echo "== 5. training throughput, one GPU, bf16"
  { echo "| config | seq_len | tokens/s | step ms | model TFLOP/s | MFU (of the bf16 matmul peak ${peak:-?}) | device memory |"
    echo "|---|---:|---:|---:|---:|---:|---|"; } | tee "$OUT/bench_train.md"
  local conf Lq
  for conf in configs/llama_125m_128k.conf configs/llama_1b_128k.conf; do
    for Lq in 8192 32768 65536; do
      rm -rf "$OUT/b"
      if timeout 240 "$C/train" -c "$conf" --train_data "$DATA" --val_data "" --out_dir "$OUT/b" --seq_len $Lq \
          --batch_size 1 --micro_batch 1 --max_steps 4 --warmup_steps 1 --log_every 1 --save_final 0 --val_every 0 \
          >"$OUT/b.txt" 2>&1; then
        python3 - "$OUT/b/metrics.jsonl" "$(basename "$conf" .conf)" $Lq "${peak:-0}" \
          "$(grep -o 'device in use [0-9.]* of [0-9.]* GiB' "$OUT/b.txt" | tail -n 1)" <<'PY' | tee -a "$OUT/bench_train.md"
import json, sys, statistics as st
r = [json.loads(l) for l in open(sys.argv[1])][1:]
tf = st.median(x["gflops"] for x in r) / 1e3; pk = float(sys.argv[4])
print(f"| {sys.argv[2]} | {sys.argv[3]} | {st.median(x['tokens_per_s'] for x in r):.0f} | {st.median(x['step_ms'] for x in r):.0f} | "
      f"{tf:.1f} | {100 * tf / pk if pk else 0:.0f} % | {sys.argv[5]} |")
PY
        ok "throughput $(basename "$conf") at $Lq"
      elif grep -q "out of device memory" "$OUT/b.txt"; then
        echo "| $(basename "$conf" .conf) | $Lq | does not fit: $(grep -m1 'out of device memory' "$OUT/b.txt" | cut -c1-90) |||||" | tee -a "$OUT/bench_train.md"
      else bad "throughput $(basename "$conf") at $Lq: $(tail -n 2 "$OUT/b.txt" | tr '\n' ' ')"; fi
    done
  done
  echo "$pass passed, $fail failed" | tee "$OUT/summary.txt"
  [ "$fail" -eq 0 ]
}

case "${1:-}" in
  prepare) prepare ;;
  run) OUT=${OUT:-out/gpu_check}; mkdir -p "$OUT"; run 2>&1 | tee "$OUT/log.txt" ;;
  *) echo "usage: bash tools/gpu_check.sh prepare|run" >&2; exit 2 ;;
esac
