# The CPU backend: OpenMP + OpenBLAS kernels, host memory, MPI for data collectives.
BACKEND_SRC     := backend/cpu/backend_cpu.c backend/cpu/attn_cpu.c
BACKEND_CFLAGS  := -I$(BLAS_INC)
BACKEND_LDLIBS  := -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB) -lopenblas
