# The CUDA backend: one GPU per process, cuBLAS matmuls, own kernels (backend_cuda.cu) and attention block
# kernels (attn_cuda.cu); data collectives over NCCL, or staged through pinned host memory over MPI
# (comm/data_cuda.c). Built into build/cuda/ by `make cuda` (= make BACKEND=cuda); needs nvcc.
# With CUDA_EMU=1 (`make cuda-emu`) the same sources are built by the host compiler against the host emulation of
# the CUDA runtime, cuBLAS and NCCL in backend/cuda/emu/ into build/emu/: programs that run without a GPU.

# The kernel test links the CPU backend too (the reference), its names prefixed cpu_ (tests/gpu/cpu_names.h).
CPU_REF_OBJ = $(BD)/obj/ref/backend_cpu.o $(BD)/obj/ref/attn_cpu.o $(BD)/obj/ref/cpu_table.o

ifeq ($(CUDA_EMU),1)
BD              := build/emu
EMU_INC         := -Ibackend/cuda/emu/include
EMU_SRC         := backend/cuda/emu/emu_runtime.cc backend/cuda/emu/emu_cublas.cc backend/cuda/emu/emu_nccl.cc
BACKEND_SRC     := backend/cuda/backend_cuda.cu backend/cuda/attn_cuda.cu backend/cuda/attn_engine.cu backend/cuda/cudnn_sdpa.cu backend/cuda/anatomy.cu \
                   comm/data_cuda.c $(EMU_SRC)
BACKEND_CFLAGS  := $(EMU_INC)
# -rdynamic: the emulated cuDNN (a library loaded at run time) calls the emulation's runtime in the program. The
# programs find it beside themselves ($ORIGIN, $ORIGIN/.. for build/emu/tests/); DT_RPATH (not RUNPATH) so that it
# comes before LD_LIBRARY_PATH, where a real libcudnn.so.9 may be.
BACKEND_LDLIBS  := -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB) -lopenblas -lstdc++ -ldl -rdynamic -Wl,--disable-new-dtags \
                   -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,'$$ORIGIN/..'
EMU_CXX         := mpicxx -std=c++20 -O2 -g -fno-omit-frame-pointer -Wall -Wextra -Wno-unknown-pragmas -Werror \
                   -DCUDA_EMU -DOMPI_SKIP_MPICXX=1 -I. $(EMU_INC) -I$(BLAS_INC) -I$(H5_INC)
PROGRAMS        := $(addprefix $(BD)/,train eval sample bench_kernels)
TEST_BIN        := $(BD)/tests/test_cuda $(BD)/tests/emu_faults $(BD)/tests/mpi_comm $(BD)/libcudnn.so.9

# the emulated cuDNN: loaded at run time by backend/cuda/cudnn_sdpa.cu as the real one is
$(BD)/libcudnn.so.9: backend/cuda/emu/emu_cudnn.cc $(wildcard backend/cuda/emu/*.h backend/cuda/emu/include/*.h)
	@mkdir -p $(dir $@)
	$(call quiet,CXX,$@)$(EMU_CXX) -fPIC -shared $< -o $@

# rule breakers for the emulation's own checks (tests/test_cuda_emu.sh)
$(BD)/tests/emu_faults: $(BD)/obj/tests/gpu/emu_faults.o $(patsubst %,$(BD)/obj/%.o,$(basename $(EMU_SRC)))
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $^ -o $@ $(BACKEND_LDLIBS)
$(BD)/obj/%.o: %.cu $(HEADERS) $(wildcard backend/cuda/emu/*.h backend/cuda/emu/include/*.h)
	@mkdir -p $(dir $@)
	$(call quiet,CXX,$@)$(EMU_CXX) -x c++ -c $< -o $@
$(BD)/obj/%.o: %.cc $(HEADERS) $(wildcard backend/cuda/emu/*.h backend/cuda/emu/include/*.h)
	@mkdir -p $(dir $@)
	$(call quiet,CXX,$@)$(EMU_CXX) -c $< -o $@
else
BD              := build/cuda
# portable x86 code: the binaries may run on another machine than the one that built them
OPT             := -O3 -march=x86-64-v3
# a fat binary: Ampere (sm_80: A100; sm_86: A40, A10, RTX 30xx), Ada (sm_89: L40S, L4, RTX 40xx), Hopper (sm_90a:
# H100, H200; `a`: the arch-specific features cuDNN's and cuBLAS's Hopper kernels use are theirs, not ours) and
# compute_80 PTX that newer GPUs compile at load time. The own kernels need sm_80 (mma.sync bf16, ldmatrix,
# cp.async); be_init refuses older devices with one line. NVCC_ARCH=-gencode=arch=compute_90a,code=sm_90a builds
# Hopper only (a third of the compile time).
NVCC_ARCH       ?= -gencode=arch=compute_80,code=[sm_80,compute_80] -gencode=arch=compute_86,code=sm_86 \
                   -gencode=arch=compute_89,code=sm_89 -gencode=arch=compute_90a,code=sm_90a
# ptxas's per-kernel resource table (registers, shared memory, spills; tools/sass_counts.py reads it) only when asked:
# `make cuda PTXAS_V=1` (or V=1); spills are warnings, and warnings are errors, either way
PTXAS_V         ?= $(V)
NVCC_FLAGS      := -std=c++17 -O3 $(NVCC_ARCH) -Xptxas -warn-spills$(if $(filter 1,$(PTXAS_V)),$(comma)-v) -Xcompiler -Wall,-Wextra,-march=x86-64-v3 \
                   -Werror all-warnings -I. -I$(CUDA_HOME)/include -I$(H5_INC)
CUDA_LIB        := $(CUDA_HOME)/lib64
BACKEND_SRC     := backend/cuda/backend_cuda.cu backend/cuda/attn_cuda.cu backend/cuda/attn_engine.cu backend/cuda/cudnn_sdpa.cu backend/cuda/anatomy.cu \
                   comm/data_cuda.c
BACKEND_CFLAGS  := -I$(CUDA_HOME)/include
# (cuDNN is not linked: backend/cuda/cudnn_sdpa.cu loads it at run time)
BACKEND_LDLIBS  := -L$(CUDA_LIB) -Wl,-rpath,$(CUDA_LIB) -lcublasLt -lcublas -lnccl -lcudart -lstdc++ -ldl
PROGRAMS        := $(addprefix $(BD)/,train eval sample bench_kernels)
TEST_BIN        := $(BD)/tests/test_cuda

$(BD)/obj/%.o: %.cu $(HEADERS)
	@mkdir -p $(dir $@)
	$(call quiet,NVCC,$@)$(NVCC) $(NVCC_FLAGS) -c $< -o $@
endif

$(BD)/obj/ref/%.o: backend/cpu/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) $(CFLAGS) -I$(BLAS_INC) -include tests/gpu/cpu_names.h -c $< -o $@
$(BD)/obj/ref/cpu_table.o: tests/gpu/cpu_table.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) $(CFLAGS) -include tests/gpu/cpu_names.h -c $< -o $@
$(BD)/tests/test_cuda: $(BD)/obj/tests/gpu/test_cuda.o $(CPU_REF_OBJ) $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $^ -o $@ $(LDLIBS) -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB) -lopenblas
