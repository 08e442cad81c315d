// cu_common.h — what the CUDA backend's own files share (C++ only; nothing outside backend/cuda/ includes it).
//
// One device per process, one compute stream: every kernel, copy and cuBLAS call of the backend is queued
// on it, in order, so that the model graph's sequential semantics hold without any other synchronisation.
// The device transport (comm/data_cuda.c) orders its communication stream against it with events.
#pragma once
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>

extern "C" {
#include "backend/backend.h"
#include "comm/data_cuda.h"
}

// the compute stream (valid after the backend started)
cudaStream_t cu_stream(void);

// matmul precision (be_set_matmul_precision): the attention kernels follow it too (bf16 and tf32: bf16
// tensor-core kernels; fp32: the fp32 kernels)
enum { CU_BF16 = 0, CU_TF32 = 1, CU_FP32 = 2 };
int cu_precision(void);
int cu_sm_count(void);   // multiprocessors of the device

// one line "cuda backend: <op>: <error string>" on stderr, exit(1)
[[noreturn]] void cu_die(const char* op, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// a failed CUDA call ends the process with one line naming the operation
void cu_check_(cudaError_t e, const char* op);
#define CU_CHECK(call, op) cu_check_((call), (op))
// after a kernel launch: launch errors now, execution errors at the next synchronising call
#define CU_LAUNCHED(op) cu_check_(cudaGetLastError(), (op))

// Scratch in device memory, one growable buffer per slot, taken from the stream-ordered allocator (growing
// never synchronises the device). Contents are undefined. A slot's pointer is valid until the next call
// for the same slot with a larger size.
enum { WS_RMS_DW, WS_EMB, WS_SUMSQ, WS_SUMSQ_TAB, WS_ADAM_TAB, WS_COPY,
       WS_ATT_Q, WS_ATT_K, WS_ATT_V, WS_ATT_DO, WS_ATT_MM,
       WS_ATT_PART, WS_ATT_ST_FWD, WS_ATT_ST_DKDV, WS_ATT_FLAGS,
       WS_FA_Q, WS_FA_K, WS_FA_V, WS_FA_DO, WS_FA_OC, WS_FA_O, WS_FA_ST, WS_FA_DK, WS_FA_DV, WS_FA_WS, WS_COUNT };
void* cu_workspace(int slot, size_t bytes);

// the own attention kernels (attn_cuda.cu): attention.h's block calls on them; attn_block_forward / _backward
// (attn_engine.cu) route each block to them or to cuDNN
void own_block_forward(float* out, float* lse, const float* q, const int* qpos, const int* qdoc, int Tq, const float* k,
                       const float* v, const int* kpos, const int* kdoc, int Tk, int nh, int nkv, int hd, float scale,
                       int mask);
void own_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* lse, const float* D,
                        const int* qpos, const int* qdoc, int Tq, const float* k, const float* v, const int* kpos,
                        const int* kdoc, int Tk, int nh, int nkv, int hd, float scale, int mask);

// Kernel launches and shared memory, written once for nvcc and for the host emulation (make cuda-emu, CUDA_EMU:
// backend/cuda/emu/): LAUNCH(kernel, grid, block, smem, args...) queues a kernel on the compute stream;
// SHARED(type, name, dims) declares a static shared array (e.g. SHARED(float, sh, [8][33])); DYN_SMEM(type, name)
// names the dynamic shared memory.
// Every launch is counted by the step anatomy (below) while it counts a step.
#ifdef CUDA_EMU
#define LAUNCH(kernel, grid, block, smem, ...)                                                                      \
    do {                                                                                                            \
        if (cu_anat_on) cu_anat_launch_(#kernel);                                                                   \
        emu_launch(#kernel, kernel, dim3(grid), dim3(block), (size_t)(smem), (void*)cu_stream(), __VA_ARGS__);      \
        if (cu_anat_on) cu_anat_launched_();                                                                        \
    } while (0)
#else
#define LAUNCH(kernel, grid, block, smem, ...)                                                                      \
    do {                                                                                                            \
        if (cu_anat_on) cu_anat_launch_(#kernel);                                                                   \
        kernel<<<(grid), (block), (smem), cu_stream()>>>(__VA_ARGS__);                                              \
    } while (0)
#define SHARED(type, name, dims) __shared__ type name dims
#define DYN_SMEM(type, name) extern __shared__ __align__(16) type name[]
#endif

// The profile by kernel class (RINGLM_CUDA_PROFILE, see backend_cuda.cu): PROF(class) at the top of a backend call
// brackets the rest of the call; nested brackets count for the outermost.
enum { PROF_MATMUL, PROF_ATTN_FWD, PROF_ATTN_BWD, PROF_POINTWISE, PROF_EMBED, PROF_XENT, PROF_OPTIM, PROF_COPY,
       PROF_COMM, PROF_NCLASS };
void cu_prof_begin(int cls);
void cu_prof_end(void);
struct CuProfScope {
    explicit CuProfScope(int cls) { cu_prof_begin(cls); }
    ~CuProfScope() { cu_prof_end(); }
};
#define PROF(cls) CuProfScope prof_scope_(cls)
int cu_class_now(void);                  // the class of the backend call running now (-1: none)
const char* cu_class_name(int cls);
int cu_prof_totals(double ms[PROF_NCLASS]);   // 1 and the profile's milliseconds per class so far, 0 if it is off
size_t cu_memory_peak_held(void);
const char* cu_device_name(void);        // bytes: the peak of allocations + scratch, and the cuBLAS workspace

// ---- the step anatomy (RINGLM_CUDA_ANATOMY, backend/cuda/anatomy.cu): while cu_anat_on, what the backend queues ----
extern int cu_anat_on;
enum { TR_EXACT, TR_BOUNDS, TR_ATTN };   // declared traffic: exact; within bounds (gathers, strides); attention
enum { CU_DT_F32 = 0, CU_DT_BF16 = 1 };
void cu_anat_traffic_(double rd, double wr, int kind, double rd_lo, double rd_hi, double wr_lo, double wr_hi);
void cu_anat_launch_(const char* kernel);
void cu_anat_launched_(void);
// TRAFFIC(read, written): the device-memory bytes the next LAUNCH reads and writes, a formula of its arguments (each
// byte once: what a kernel touches twice comes from cache). TRAFFIC_BOUNDS adds what the emulation's page count of
// the launch may be (gathers: rows repeat or lie a page apart; strided columns: the pages of the rows they lie in).
// TRAFFIC_ATTN: an attention kernel (its time comes from its FLOPs; tiles may be skipped, so at most these bytes).
#define TRAFFIC(rd, wr) \
    (cu_anat_on ? cu_anat_traffic_((double)(rd), (double)(wr), TR_EXACT, (double)(rd), (double)(rd), (double)(wr), (double)(wr)) : (void)0)
#define TRAFFIC_BOUNDS(rd, wr, rd_lo, rd_hi, wr_lo, wr_hi) \
    (cu_anat_on ? cu_anat_traffic_((double)(rd), (double)(wr), TR_BOUNDS, (double)(rd_lo), (double)(rd_hi), (double)(wr_lo), \
                                   (double)(wr_hi)) : (void)0)
#define TRAFFIC_ATTN(rd, wr) \
    (cu_anat_on ? cu_anat_traffic_((double)(rd), (double)(wr), TR_ATTN, 0.0, (double)(rd), 0.0, (double)(wr)) : (void)0)
// the most pages' bytes that `rows` gathered rows of row_bytes each can touch
static inline double cu_gather_hi(double rows, double row_bytes) { return rows * (ceil(row_bytes / 4096.0) + 1) * 4096.0; }
void cu_anat_gemm(int m, int n, int k, int ta, int tb, int atype, int btype, int ctype, int compute, int beta_nonzero);
void cu_anat_op(const char* name, double read_bytes, double written_bytes);   // a memset or a device copy
void cu_anat_collective(const char* name, double bytes);
void cu_anat_xfer(int to_device, double bytes);
void cu_anat_xfer_async(int to_device, double bytes);   // a copy on the copy stream (offload): counted, hidden behind compute
void cu_anat_sync(const char* why);
void cu_anat_attention(int backward, int Tq, int Tk, int nh, int hd, int causal, int fp32);
// the own bf16 attention kernel about to be launched (attn_cuda.cu): its tile configuration, for the anatomy's model of
// its time (tiles x the per-tile cost counted from its SASS); backward 0: forward (tile = key tile), 1: the backward
// (tile = its key tile; query tiles of 32 rows)
void cu_anat_attn_kernel(int backward, int hd_pad, int tile, int Tq, int Tk, int nh, int causal);
// the device (backend_cuda.cu): shared memory a block may opt in to, shared memory per SM, compute capability x 10
size_t cu_smem_optin(void);
size_t cu_smem_per_sm(void);
int cu_cc(void);
// What the host emulation adds to the anatomy (backend/cuda/emu/): a dry run (nothing executed), and the pages each
// kernel touched; on a GPU: 0.
#ifdef CUDA_EMU
static inline int cu_dry_run(void) { return emu_dry(); }
static inline int cu_counted_traffic(double* rd, double* wr, int* nptr) { return emu_traffic_last(rd, wr, nptr); }
#else
static inline int cu_dry_run(void) { return 0; }
static inline int cu_counted_traffic(double* rd, double* wr, int* nptr) { (void)rd; (void)wr; (void)nptr; return 0; }
#endif

// launch geometry helper
static inline unsigned cu_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b);
}
