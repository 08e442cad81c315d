# The CPU backend: OpenMP + OpenBLAS kernels, host memory; data collectives over MPI (comm/data_mpi.c).
BD              := build
BACKEND_SRC     := backend/cpu/backend_cpu.c backend/cpu/attn_cpu.c comm/data_mpi.c
BACKEND_CFLAGS  := -I$(BLAS_INC)
BACKEND_LDLIBS  := -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB) -lopenblas
PROGRAMS        := $(addprefix $(BD)/,train prepare eval sample plan sgemm_peak bench_attention bench_kernels reshard)
TEST_SRC        := $(wildcard tests/test_*.c tests/mpi_*.c tests/tool_*.c)
TEST_BIN        := $(TEST_SRC:tests/%.c=$(BD)/tests/%)

