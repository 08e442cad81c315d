# ringlm — build with `make`, test with `make test`, showcase with `make demo`.
# BACKEND selects the folder backend/$(BACKEND)/ whose backend.mk names its sources, libraries, programs and
# tests, and the build folder BD (build/ for the CPU, build/<backend>/ otherwise). `make cuda` builds the CUDA
# programs (build/cuda/...) next to the CPU ones; `make test` builds them too when nvcc is found. `make cuda-emu`
# builds the same CUDA sources with the host compiler against the host emulation of CUDA, cuBLAS and NCCL
# (build/emu/...: the CUDA backend without a GPU); `make test` builds and runs it everywhere.
.DEFAULT_GOAL := all
CC        := mpicc
BACKEND   ?= cpu
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard $(CUDA_HOME)/bin/nvcc))
BLAS_INC  := /usr/include/x86_64-linux-gnu/openblas-openmp
BLAS_LIB  := /usr/lib/x86_64-linux-gnu/openblas-openmp
H5_INC    := /usr/include/hdf5/openmpi
H5_LIB    := /usr/lib/x86_64-linux-gnu/hdf5/openmpi
OPT       ?= -O3 -march=native
# quiet by default: one short line a file ("  CC    build/obj/x.o"); `make V=1` prints the full command lines
V         ?= 0
comma     := ,
quiet      = $(if $(filter 1,$(V)),,@printf '  %-5s %s\n' '$(1)' '$(2)';)

# library sources shared by every program (programs' main files are listed separately)
CORE_SRC  := $(wildcard common/*.c model/*.c attention/*.c checkpoint/*.c optim/*.c) comm/comm_mpi.c comm/grid.c \
             eval/report.c eval/passkey.c eval/doclen.c data/shards.c data/meta.c data/pack.c data/json.c data/tokenizer.c \
             train/dump.c train/mfu.c
HEADERS   := $(wildcard */*.h */*/*.h)
LIB_SRC    = $(CORE_SRC) $(BACKEND_SRC)
LIB_OBJ    = $(patsubst %,$(BD)/obj/%.o,$(basename $(LIB_SRC)))

ifeq ($(wildcard backend/$(BACKEND)/backend.mk),)
$(error BACKEND=$(BACKEND): there is no backend/$(BACKEND)/backend.mk (backends: $(notdir $(wildcard backend/*/))))
endif
include backend/$(BACKEND)/backend.mk

# SAN: sanitizer flags, for compiling and linking (`make asan` sets them)
SAN       ?=
CFLAGS    := -std=c11 -D_GNU_SOURCE $(OPT) $(SAN) -fopenmp -Wall -Wextra -I. -I$(H5_INC) $(BACKEND_CFLAGS)
LDLIBS    := $(BACKEND_LDLIBS) -L$(H5_LIB) -Wl,-rpath,$(H5_LIB) -lhdf5 -fopenmp -lm $(SAN)

.PHONY: all cuda cuda-emu asan gpu-bundle test test-quick demo deps bench clean print-lib-src
.SECONDARY:
all: $(PROGRAMS) $(TEST_BIN)

$(BD)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) $(CFLAGS) -c $< -o $@

$(BD)/train: $(BD)/obj/train/train.o $(LIB_OBJ)
	$(call quiet,LD,$@)$(CC) $^ -o $@ $(LDLIBS)
$(BD)/prepare: $(BD)/obj/data/prepare.o $(BD)/obj/data/jsonl.o $(LIB_OBJ)
	$(call quiet,LD,$@)$(CC) $^ -o $@ $(LDLIBS) -lz
$(BD)/reshard: $(BD)/obj/tools/reshard.o $(LIB_OBJ)
	$(call quiet,LD,$@)$(CC) $^ -o $@ $(LDLIBS)
$(BD)/eval: $(BD)/obj/eval/eval.o $(LIB_OBJ)
	$(call quiet,LD,$@)$(CC) $^ -o $@ $(LDLIBS)
$(BD)/sample: $(BD)/obj/eval/sample.o $(LIB_OBJ)
	$(call quiet,LD,$@)$(CC) $^ -o $@ $(LDLIBS)
$(BD)/bench_attention: $(BD)/obj/tools/bench/bench_attention.o $(LIB_OBJ)
	$(call quiet,LD,$@)$(CC) $^ -o $@ $(LDLIBS)
$(BD)/plan: $(BD)/obj/tools/plan.o $(LIB_OBJ)
	$(call quiet,LD,$@)$(CC) $^ -o $@ $(LDLIBS)
$(BD)/bench_kernels: $(BD)/obj/tools/bench/bench_kernels.o $(LIB_OBJ)
	$(call quiet,LD,$@)$(CC) $^ -o $@ $(LDLIBS)
$(BD)/sgemm_peak: $(BD)/obj/tools/bench/sgemm_peak.o $(LIB_OBJ)
	$(call quiet,LD,$@)$(CC) $^ -o $@ $(LDLIBS)
$(BD)/tests/%: $(BD)/obj/tests/%.o $(LIB_OBJ)
	@mkdir -p $(BD)/tests
	$(call quiet,LD,$@)$(CC) $^ -o $@ $(LDLIBS)

# the CUDA programs, next to the CPU ones (a machine without nvcc says so and stops)
cuda:
	@[ -n "$(NVCC)" ] || { echo "make cuda: no nvcc on PATH or in CUDA_HOME=$(CUDA_HOME)/bin" >&2; exit 1; }
	@$(MAKE) --no-print-directory BACKEND=cuda

# the CUDA programs built by the host compiler against the emulation (no GPU, no nvcc needed)
cuda-emu:
	@$(MAKE) --no-print-directory BACKEND=cuda CUDA_EMU=1

# the CPU programs built with AddressSanitizer and UndefinedBehaviorSanitizer into build/asan/ (tests/test_asan.sh runs
# them): a memory error or undefined behaviour stops the program with a report instead of passing unseen
ASAN_PROGRAMS := train eval sample reshard plan prepare
asan:
	@$(MAKE) --no-print-directory BD=build/asan OPT='-O1 -g -fno-omit-frame-pointer' \
	  SAN='-fsanitize=address,undefined -fno-sanitize-recover=undefined' $(addprefix build/asan/,$(ASAN_PROGRAMS))

# the library sources of this backend's build, one per line (tests/test_build.sh checks the selection)
print-lib-src:
	@printf '%s\n' $(LIB_SRC)

# installs missing Debian packages (as root; otherwise prints the apt-get command)
deps:
	@bash tools/setup/install_deps.sh

# everything tools/gpu_check.sh needs on a GPU machine, in build/gpu_bundle/ (see that script)
gpu-bundle:
	@bash tools/gpu_check.sh prepare

# builds in parallel (JOBS: the cores), then runs the suite several tests at a time (tests/run_all.sh)
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test: deps
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@if [ -n "$(NVCC)" ]; then $(MAKE) --no-print-directory -j$(JOBS) cuda; else echo "make test: no nvcc: the CUDA programs are not built"; fi
	@$(MAKE) --no-print-directory -j$(JOBS) cuda-emu
	@$(MAKE) --no-print-directory -j$(JOBS) asan
	@bash tests/run_all.sh

# the smoke subset (about 2 minutes on 2 cores): the model against the PyTorch reference, the attention kernel, ring
# attention, training on a ring and in the 3-D grid, the communication layer, training/resume, sampling, data and
# the runner (with their checks of the emulated CUDA backend: make cuda-emu, not the nvcc build). `make test` is the
# whole suite and what CI runs.
QUICK_TESTS := build/tests/test_attention build/tests/test_data tests/test_reference.sh tests/test_ring_attention.sh \
               tests/test_cp.sh tests/test_comm.sh tests/test_train.sh tests/test_sample.sh tests/test_build.sh \
               tests/test_cli.sh tests/test_runner.sh
test-quick: deps
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@$(MAKE) --no-print-directory -j$(JOBS) cuda-emu
	@bash tests/run_all.sh $(QUICK_TESTS)

demo: deps
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@bash tools/experiments/demo.sh

bench: deps
	@$(MAKE) --no-print-directory -j$(JOBS) all
	@bash tools/bench/bench_train.sh

clean:
	rm -rf build
