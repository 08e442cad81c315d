# The CPU backend: OpenMP + OpenBLAS kernels, host memory; data collectives over MPI (comm/data_mpi.c).
BACKEND_SRC     := backend/cpu/backend_cpu.c backend/cpu/attn_cpu.c comm/data_mpi.c
BACKEND_CFLAGS  := -I$(BLAS_INC)
BACKEND_LDLIBS  := -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB) -lopenblas
