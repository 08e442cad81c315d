# The CPU backend: OpenMP + OpenBLAS kernels, host memory; data collectives over MPI (comm/data_mpi.c).
BD              := build
BACKEND_SRC     := backend/cpu/backend_cpu.c backend/cpu/attn_cpu.c comm/data_mpi.c
BACKEND_CFLAGS  := -I$(BLAS_INC)
BACKEND_LDLIBS  := -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB) -lopenblas
PROGRAMS        := $(addprefix $(BD)/,train prepare eval plan sgemm_peak bench_attention bench_kernels reshard)
TEST_SRC        := $(wildcard tests/test_*.c tests/mpi_*.c tests/tool_*.c)
TEST_BIN        := $(TEST_SRC:tests/%.c=$(BD)/tests/%) $(BD)/tests/test_attn_emu

# The CUDA attention kernels on the host: backend/cuda/attn_cuda.cu compiled by g++ against an emulation of
# the CUDA features it uses (backend/cuda/cu_emu.h), checked against this backend (tests/gpu/test_attn_emu.cc).
# The CPU backend's names get a cpu_ prefix in that program (tests/gpu/cpu_names.h).
EMU_CPU_OBJ := $(BD)/obj/emu/backend_cpu.o $(BD)/obj/emu/attn_cpu.o $(BD)/obj/emu/cpu_table.o $(BD)/obj/common/util.o
$(BD)/obj/emu/%.o: backend/cpu/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -include tests/gpu/cpu_names.h -c $< -o $@
$(BD)/obj/emu/cpu_table.o: tests/gpu/cpu_table.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -include tests/gpu/cpu_names.h -c $< -o $@
$(BD)/obj/emu/attn_cuda.o: backend/cuda/attn_cuda.cu $(HEADERS)
	@mkdir -p $(dir $@)
	g++ -std=c++20 -O2 -Wall -Wextra -Wno-unknown-pragmas -I. -DATTN_EMU -x c++ -c $< -o $@
$(BD)/obj/emu/test_attn_emu.o: tests/gpu/test_attn_emu.cc $(HEADERS)
	@mkdir -p $(dir $@)
	g++ -std=c++20 -O2 -Wall -Wextra -I. -c $< -o $@
$(BD)/tests/test_attn_emu: $(BD)/obj/emu/test_attn_emu.o $(BD)/obj/emu/attn_cuda.o $(EMU_CPU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $^ -o $@ $(LDLIBS) -lstdc++ -lpthread
