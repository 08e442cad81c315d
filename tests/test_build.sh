#!/usr/bin/env bash
# The seams hold: the build selects a backend by folder (make BACKEND=...), and the code outside a backend or
# the transport names no implementation — no MPI outside comm/ (and MPI-IO in checkpoint/h5util.c), no BLAS or
# OpenMP kernels outside backend/cpu/ (and the CPU benchmark tools), no include of a backend's files, no
# model/ <-> attention/ include cycle, and one copy of the shared helpers (common/).
cd "$(dirname "$0")/.."
source tests/lib.sh

src=$(make -s --no-print-directory print-lib-src)
be=$(echo "$src" | grep '^backend/' | sort | tr '\n' ' ')
[ "$be" = "backend/cpu/attn_cpu.c backend/cpu/backend_cpu.c " ] && ok "make BACKEND=cpu (default) selects backend/cpu/ only: $be" \
  || bad "backend sources of the default build: '$be'"
echo "$src" | grep -qx 'comm/data_mpi.c' && ! echo "$src" | grep -q 'comm/data_.*' | grep -v data_mpi \
  && ok "the CPU build's data transport is comm/data_mpi.c" || bad "transport sources: $(echo "$src" | grep comm/ | tr '\n' ' ')"
out=$(make -s --no-print-directory BACKEND=nosuch print-lib-src 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "BACKEND=nosuch: there is no backend/nosuch/backend.mk" \
  && ok "make BACKEND=nosuch fails naming the missing backend.mk" || bad "BACKEND=nosuch: exit $rc: $out"
emu=$(make -s --no-print-directory BACKEND=cuda CUDA_EMU=1 print-lib-src | grep -E '^(backend|comm)/' | sort | tr '\n' ' ')
[ "$emu" = "backend/cuda/anatomy.cu backend/cuda/attn_cuda.cu backend/cuda/attn_engine.cu backend/cuda/backend_cuda.cu backend/cuda/cudnn_sdpa.cu backend/cuda/emu/emu_cublas.cc backend/cuda/emu/emu_nccl.cc backend/cuda/emu/emu_runtime.cc comm/comm_mpi.c comm/data_cuda.c comm/grid.c " ] \
  && ok "make cuda-emu builds the real CUDA sources and transport with the emulation: $emu" || bad "emulated build's sources: '$emu'"
grep -n 'backend/' Makefile | grep -v 'backend/\$(BACKEND)' | grep -q . \
  && bad "the Makefile names a backend's files: $(grep -n 'backend/' Makefile | grep -v 'backend/\$(BACKEND)' | head -3)" \
  || ok "the Makefile names no backend's files (only backend/\$(BACKEND)/backend.mk)"

# files outside the backends and the transport (C sources and headers of the project)
core=$(ls common/*.[ch] model/*.[ch] attention/*.[ch] optim/*.[ch] train/*.[ch] eval/*.[ch] checkpoint/*.[ch] data/*.[ch] \
          tools/*.c tools/*/*.c tests/*.c 2>/dev/null)
hits=$(grep -ln 'MPI_\|<mpi.h>\|comm/comm_mpi.h' $core | grep -v '^checkpoint/h5util.c$')
[ -z "$hits" ] && ok "no MPI outside comm/ (checkpoint/h5util.c hands the group to MPI-IO)" || bad "MPI used in: $hits"
hits=$(grep -ln 'cblas\|openblas' $core backend/*.h backend/cuda/*.cu backend/cuda/*.h comm/*.[ch] \
       | grep -v '^tools/bench/sgemm_peak.c$\|^tools/bench/bench_attention.c$')
[ -z "$hits" ] && ok "no BLAS outside backend/cpu/ (and the CPU benchmark tools; the CUDA emulation's reference GEMM is in backend/cuda/emu/)" \
  || bad "BLAS used in: $hits"
hits=$(grep -ln 'CUDA_EMU\|emu_' backend/cuda/*.cu comm/*.c | grep -v '^backend/cuda/attn_cuda.cu$')
[ -z "$hits" ] && ok "the CUDA sources have no emulation-only code paths (attn_cuda.cu: only its PTX wrappers)" || bad "emulation code in: $hits"
hits=$(grep -ln '#pragma omp\|<omp.h>' model/model.[ch] model/verify.[ch] attention/*.[ch] optim/*.[ch] checkpoint/*.[ch] eval/*.[ch] backend/*.h)
[ -z "$hits" ] && ok "no OpenMP in the model graph, the ring, the optimizer, checkpoints, eval or the contract" || bad "OpenMP in: $hits"
hits=$(grep -n '#include "backend/[a-z]*/' $core backend/*.h comm/*.[ch])
[ -z "$hits" ] && ok "nothing outside a backend includes a backend's files" || bad "includes: $hits"
hits=$(grep -ln '#include "model/' attention/*.[ch] backend/*.h comm/*.[ch])
[ -z "$hits" ] && ok "attention/, the backend contract and comm/ include nothing of model/ (no include cycle)" || bad "cycle: $hits"
hits=$(grep -ln '#include "train/' checkpoint/*.[ch] optim/*.[ch] model/*.[ch] eval/*.[ch])
[ -z "$hits" ] && ok "checkpoint/, optim/, model/ and eval/ include no train/ header" || bad "train/ included by: $hits"
hits=$(grep -n 'clock_gettime' $(ls */*.c */*/*.c) | grep -v '^common/util.c:')
[ -z "$hits" ] && ok "one monotonic clock (common/util.c)" || bad "clocks: $hits"
n=$(grep -l 'x ^ (x >> 30)) \* 0xBF58476D1CE4E5B9\|z ^ (z >> 30)) \* 0xBF58476D1CE4E5B9' $(ls */*.[ch] */*/*.[ch] 2>/dev/null) | tr '\n' ' ')
[ "$n" = "common/util.h " ] && ok "one copy of the 64-bit mixer (common/util.h)" || bad "mixer copies: $n"
n=$(grep -ln 'int make_dirs\|static void make_dirs' $(ls */*.c) | tr '\n' ' ')
[ "$n" = "common/files.c " ] && ok "one make_dirs (common/files.c)" || bad "make_dirs in: $n"
hits=$(grep -n 'strcmp(\*(char\* const\*)' $(ls */*.c) | grep -v '^common/util.c:')
[ -z "$hits" ] && ok "one string comparator for qsort (common/util.c)" || bad "comparators: $hits"

# quiet builds: one short line a file by default, the full command line with V=1; ptxas's resource table only when
# asked (PTXAS_V=1 or V=1). One object compiled into a folder of this test's (BD on the command line).
make --no-print-directory BD="$T/qb" "$T/qb/obj/common/util.o" >"$T/q1" 2>&1
make --no-print-directory -B V=1 BD="$T/qb" "$T/qb/obj/common/util.o" >"$T/q2" 2>&1
[ "$(cat "$T/q1")" = "  CC    $T/qb/obj/common/util.o" ] && grep -q "^mpicc .* -c common/util.c -o $T/qb/obj/common/util.o$" "$T/q2" \
  && ok "a quiet build prints '$(sed "s|$T/||" "$T/q1")' a file; V=1 the command line" || bad "quiet build: $(head -c 300 "$T/q1") | V=1: $(head -c 300 "$T/q2")"
f=backend/cuda/attn_cuda.cu
a=$(make --no-print-directory -n -B BACKEND=cuda NVCC=nvcc BD="$T/cb" "$T/cb/obj/${f%.cu}.o" 2>&1 | grep -c 'warn-spills,-v')
b=$(make --no-print-directory -n -B BACKEND=cuda NVCC=nvcc PTXAS_V=1 BD="$T/cb" "$T/cb/obj/${f%.cu}.o" 2>&1 | grep -c 'warn-spills,-v')
c=$(make --no-print-directory -n -B BACKEND=cuda NVCC=nvcc V=1 BD="$T/cb" "$T/cb/obj/${f%.cu}.o" 2>&1 | grep -c 'warn-spills,-v')
[ "$a" = 0 ] && [ "$b" = 1 ] && [ "$c" = 1 ] && ok "nvcc: ptxas -v only with PTXAS_V=1 or V=1 (spill warnings always)" || bad "ptxas -v: default $a, PTXAS_V=1 $b, V=1 $c"

finish
