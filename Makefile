# ringlm — build with `make`, test with `make test`, showcase with `make demo`.
# BACKEND selects the folder backend/$(BACKEND)/ whose backend.mk names its sources and libraries.
CC        := mpicc
BACKEND   ?= cpu
BLAS_INC  := /usr/include/x86_64-linux-gnu/openblas-openmp
BLAS_LIB  := /usr/lib/x86_64-linux-gnu/openblas-openmp
H5_INC    := /usr/include/hdf5/openmpi
H5_LIB    := /usr/lib/x86_64-linux-gnu/hdf5/openmpi
OPT       ?= -O3 -march=native

ifeq ($(wildcard backend/$(BACKEND)/backend.mk),)
$(error BACKEND=$(BACKEND): there is no backend/$(BACKEND)/backend.mk (backends: $(notdir $(wildcard backend/*/))))
endif
include backend/$(BACKEND)/backend.mk

CFLAGS    := -std=c11 -D_GNU_SOURCE $(OPT) -fopenmp -Wall -Wextra -I. -I$(H5_INC) $(BACKEND_CFLAGS)
LDLIBS    := $(BACKEND_LDLIBS) -L$(H5_LIB) -Wl,-rpath,$(H5_LIB) -lhdf5 -fopenmp -lm

# library sources shared by every program (programs' main files are listed separately)
CORE_SRC  := $(wildcard common/*.c model/*.c attention/*.c checkpoint/*.c optim/*.c) comm/comm_mpi.c comm/grid.c \
             eval/report.c eval/passkey.c data/shards.c train/dump.c
LIB_SRC   := $(CORE_SRC) $(BACKEND_SRC)
LIB_OBJ   := $(LIB_SRC:%.c=build/obj/%.o)
TEST_SRC  := $(wildcard tests/test_*.c tests/mpi_*.c tests/tool_*.c)
TEST_BIN  := $(TEST_SRC:tests/%.c=build/tests/%)
PROGRAMS  := build/train build/prepare build/eval build/sgemm_peak build/bench_attention build/reshard

.PHONY: all test demo deps bench clean print-lib-src
.SECONDARY:
all: $(PROGRAMS) $(TEST_BIN)

build/obj/%.o: %.c $(wildcard */*.h */*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

build/train: build/obj/train/train.o $(LIB_OBJ)
	$(CC) $^ -o $@ $(LDLIBS)
build/prepare: build/obj/data/prepare.o $(LIB_OBJ)
	$(CC) $^ -o $@ $(LDLIBS)
build/reshard: build/obj/tools/reshard.o $(LIB_OBJ)
	$(CC) $^ -o $@ $(LDLIBS)
build/eval: build/obj/eval/eval.o $(LIB_OBJ)
	$(CC) $^ -o $@ $(LDLIBS)
build/bench_attention: build/obj/tools/bench_attention.o $(LIB_OBJ)
	$(CC) $^ -o $@ $(LDLIBS)
build/sgemm_peak: build/obj/tools/sgemm_peak.o build/obj/common/util.o
	$(CC) $^ -o $@ $(LDLIBS)
build/tests/%: build/obj/tests/%.o $(LIB_OBJ)
	@mkdir -p build/tests
	$(CC) $^ -o $@ $(LDLIBS)

# the library sources of this backend's build, one per line (tests/test_build.sh checks the selection)
print-lib-src:
	@printf '%s\n' $(LIB_SRC)

# installs missing Debian packages (as root; otherwise prints the apt-get command)
deps:
	@bash tools/install_deps.sh

test: deps
	@$(MAKE) --no-print-directory all
	@bash tests/run_all.sh

demo: deps
	@$(MAKE) --no-print-directory all
	@bash tools/demo.sh

bench: deps
	@$(MAKE) --no-print-directory all
	@bash tools/bench_train.sh

clean:
	rm -rf build
