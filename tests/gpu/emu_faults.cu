// emu_faults.cu — programs that break a rule of the CUDA hardware or runtime, one per case, for the host emulation
// (built by `make cuda-emu` into build/emu/tests/emu_faults; run by tests/test_cuda_emu.sh): each must end the
// process with one line on stderr naming the kernel or call and what was wrong, and a non-zero exit — where a real
// GPU would fault, hang or silently compute garbage. `ok` is the control: correct code of the same shapes runs.
//   emu_faults CASE      (CASE: ok, host_read, oob, use_after_free, host_arg, block_limit, smem_optin, smem_oob,
//                         race, race_kernel, divergent_barrier, deadlock, shfl_exited, block_order, memcpy_range,
//                         memcpy_kind, double_free, nccl_streams; traffic, with RINGLM_EMU_TRAFFIC=1: the page counts
//                         of the step anatomy; nccl_ok: the control of nccl_streams)
#include "backend/cuda/cu_common.h"
#include "backend/cuda/emu/emu_attn.h"   // flag_wait, flag_set, ticket_take: the attention backward's waits
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mpi.h>
#include <nccl.h>

// what cu_common.h's LAUNCH needs: the compute stream of this test
static cudaStream_t g_s;
cudaStream_t cu_stream(void) { return g_s; }
int cu_anat_on = 0;   // and the step anatomy's switch (never on here)
void cu_anat_launch_(const char*) {}
void cu_anat_launched_(void) {}

__global__ void fill_k(float* x, int n, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}
__global__ void sum_k(float* out, const float* x, int n) {   // one block: a shared-memory tree
    SHARED(float, sh, [256]);
    float v = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[i];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = sh[0];
}
__global__ void smem_k(float* out, int n) {   // n floats of dynamic shared memory, and one more when asked
    DYN_SMEM(float, sm);
    for (int i = threadIdx.x; i < n; i += blockDim.x) sm[i] = (float)i;
    __syncthreads();
    if (threadIdx.x == 0) *out = sm[n - 1];
}
__global__ void divergent_k(float* out) {   // __syncthreads reached by half the block only
    if (threadIdx.x < 32) __syncthreads();
    out[threadIdx.x] = 1.0f;
}
__global__ void deadlock_k(float* out) {   // half of warp 1 waits at __syncthreads, the other half at a shuffle
    float v = (float)threadIdx.x;
    if (threadIdx.x < 48) __syncthreads();
    else v += __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}
__global__ void shfl_k(float* out) {   // lanes 16..31 exit before the shuffle
    if ((threadIdx.x & 31) >= 16) return;
    float v = (float)threadIdx.x;
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    out[threadIdx.x] = v;
}
// a chain over the grid: the block holding tile i > 0 waits until tile i - 1's block has set its flag (flags zeroed),
// records which block held tile i, and sets its own flag; tile = blockIdx.x (a wait for a block that may not have
// started: a deadlock on a GPU) or a ticket (a wait only for a block that took a lower ticket: one already running)
__global__ void chain_k(int* held, int* flags, int* ticket, int by_ticket) {
    SHARED(int, tile, [1]);
    if (threadIdx.x == 0) tile[0] = by_ticket ? ticket_take(ticket) : (int)blockIdx.x;
    __syncthreads();
    if (threadIdx.x == 0) {
        const int i = tile[0];
        if (i > 0) flag_wait(flags + i - 1, 1);
        held[i] = (int)blockIdx.x;
        flag_set(flags + i, 1);
    }
}

static int check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) { fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e)); return 1; }
    return 0;
}

int main(int argc, char** argv) {
    const char* c = argc > 1 ? argv[1] : "ok";
    if (cudaSetDevice(0) || cudaStreamCreateWithFlags(&g_s, cudaStreamNonBlocking)) { fprintf(stderr, "no device\n"); return 2; }
    const int n = 1000;
    float *d, *out, h[1000];
    if (check(cudaMalloc((void**)&d, n * sizeof(float)), "cudaMalloc") || check(cudaMalloc((void**)&out, 256 * sizeof(float)), "cudaMalloc"))
        return 1;
    if (!strcmp(c, "ok")) {   // the same shapes, correctly
        LAUNCH(fill_k, (n + 255) / 256, 256, 0, d, n, 0.5f);
        LAUNCH(sum_k, 1, 256, 0, out, d, n);
        cudaFuncSetAttribute(smem_k, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10);
        LAUNCH(smem_k, 1, 128, 64 << 10, out + 1, (64 << 10) / 4);
        if (check(cudaGetLastError(), "launch")) return 1;
        cudaEvent_t ev;
        cudaStream_t s2;
        cudaEventCreate(&ev);
        cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
        LAUNCH(fill_k, (n + 255) / 256, 256, 0, d, n, 2.0f);
        cudaEventRecord(ev, g_s);
        cudaStreamWaitEvent(s2, ev, 0);
        if (check(cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, s2), "copy")) return 1;
        cudaStreamSynchronize(s2);
        float r[2];
        cudaMemcpy(r, out, 2 * sizeof(float), cudaMemcpyDeviceToHost);
        if (r[0] != 500.0f || r[1] != (float)((64 << 10) / 4 - 1) || h[n - 1] != 2.0f) {
            fprintf(stderr, "wrong results %g %g %g\n", r[0], r[1], h[n - 1]);
            return 1;
        }
        // the ticket chain over 6 blocks: the tickets follow the order the blocks ran, which is docs/cuda.md's (block a
        // before block b iff a has a 1 at the lowest bit where the two differ)
        const int nb = 6;
        int *ib, held[nb], want[nb];
        if (check(cudaMalloc((void**)&ib, (2 * nb + 1) * sizeof(int)), "cudaMalloc") ||
            check(cudaMemsetAsync(ib, 0, (2 * nb + 1) * sizeof(int), g_s), "cudaMemsetAsync")) return 1;
        LAUNCH(chain_k, nb, 32, 0, ib, ib + nb, ib + 2 * nb, 1);
        cudaMemcpyAsync(held, ib, sizeof held, cudaMemcpyDeviceToHost, g_s);
        cudaStreamSynchronize(g_s);
        for (int i = 0; i < nb; i++) want[i] = i;
        std::sort(want, want + nb, [](int a, int b) { return a != b && ((a ^ b) & -(a ^ b) & a); });
        if (memcmp(held, want, sizeof held)) {
            fprintf(stderr, "blocks ran in the order %d %d %d %d %d %d (want %d %d %d %d %d %d)\n", held[0], held[1],
                    held[2], held[3], held[4], held[5], want[0], want[1], want[2], want[3], want[4], want[5]);
            return 1;
        }
        // fresh memory is garbage, not zeros: pool memory (cudaMallocAsync, larger than cudaMalloc's 16 MiB of NaN
        // bytes) and pinned host memory read as NaN
        float *pool, *pinned, pv[2];
        size_t big = (size_t)20 << 20;
        if (check(cudaMallocAsync((void**)&pool, big, g_s), "cudaMallocAsync") || check(cudaMallocHost((void**)&pinned, big), "cudaMallocHost"))
            return 1;
        cudaMemcpyAsync(pv, pool + big / 4 - 1, 4, cudaMemcpyDeviceToHost, g_s);
        cudaMemcpyAsync(pv + 1, pool, 4, cudaMemcpyDeviceToHost, g_s);
        cudaStreamSynchronize(g_s);
        if (!std::isnan(pv[0]) || !std::isnan(pv[1]) || !std::isnan(pinned[0]) || !std::isnan(pinned[big / 4 - 1])) {
            fprintf(stderr, "fresh pool or pinned memory is not garbage: %g %g %g\n", pv[0], pv[1], pinned[0]);
            return 1;
        }
        cudaFreeAsync(pool, g_s);
        cudaStreamSynchronize(g_s);
        cudaFreeHost(pinned);
        printf("ok: sum %g, shared %g, copied %g, blocks ran in the order %d %d %d %d %d %d; fresh pool and pinned memory NaN\n",
               r[0], r[1], h[n - 1], held[0], held[1], held[2], held[3], held[4], held[5]);
        return 0;
    }
    if (!strcmp(c, "nccl_ok") || !strcmp(c, "nccl_streams")) {   // two communicators, two streams: ordered, or not
        MPI_Init(&argc, &argv);
        ncclUniqueId id[2];
        ncclComm_t comm[2];
        cudaStream_t s2;
        cudaEvent_t ev;
        cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
        cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        for (int i = 0; i < 2; i++)
            if (ncclGetUniqueId(&id[i]) != ncclSuccess || ncclCommInitRank(&comm[i], 1, id[i], 0) != ncclSuccess) {
                fprintf(stderr, "cannot make a communicator\n");
                return 1;
            }
        LAUNCH(fill_k, (n + 255) / 256, 256, 0, d, n, 1.0f);
        ncclAllReduce(d, d, 500, ncclFloat, ncclSum, comm[0], g_s);   // one communicator on the compute stream ...
        if (!strcmp(c, "nccl_ok")) { cudaEventRecord(ev, g_s); cudaStreamWaitEvent(s2, ev, 0); }
        ncclAllReduce(d + 500, d + 500, 500, ncclFloat, ncclSum, comm[1], s2);   // ... the other on a second stream
        cudaEventRecord(ev, s2);
        cudaStreamWaitEvent(g_s, ev, 0);
        ncclAllReduce(d, d, 500, ncclFloat, ncclSum, comm[0], g_s);   // (ordered after both: fine)
        cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, g_s);
        cudaStreamSynchronize(g_s);
        if (h[0] != 1.0f || h[n - 1] != 1.0f) { fprintf(stderr, "wrong results %g %g\n", h[0], h[n - 1]); return 1; }
        printf("ok: NCCL operations of two communicators on two streams, ordered by an event\n");
        for (int i = 0; i < 2; i++) ncclCommDestroy(comm[i]);
        MPI_Finalize();
        return 0;
    }
    if (!strcmp(c, "traffic")) {   // RINGLM_EMU_TRAFFIC=1: the pages each kernel read and wrote, counted exactly
        const int m = 20480;           // 80 KiB: 20 whole pages (the allocation ends at a page boundary)
        float* big;
        if (check(cudaMalloc((void**)&big, m * sizeof(float)), "cudaMalloc")) return 1;
        double r[3], w[3];
        int np[3];
        LAUNCH(fill_k, (m + 255) / 256, 256, 0, big, m, 1.0f);              // writes 20 pages, reads none
        int ok0 = emu_traffic_last(&r[0], &w[0], &np[0]);
        LAUNCH(fill_k, (5000 + 255) / 256, 256, 0, big, 5000, 2.0f);        // 20000 bytes: 5 pages written
        int ok1 = emu_traffic_last(&r[1], &w[1], &np[1]);
        LAUNCH(sum_k, 1, 256, 0, out, big, m);                              // reads 20 pages, writes 1 (out)
        int ok2 = emu_traffic_last(&r[2], &w[2], &np[2]);
        float sum;
        cudaMemcpyAsync(&sum, out, sizeof sum, cudaMemcpyDeviceToHost, g_s);
        cudaStreamSynchronize(g_s);
        if (!ok0 || !ok1 || !ok2 || r[0] != 0 || w[0] != 20 * 4096.0 || r[1] != 0 || w[1] != 5 * 4096.0 ||
            r[2] != 20 * 4096.0 || w[2] != 4096.0 || np[2] != 2 || sum != 5000 * 2.0f + (m - 5000) * 1.0f) {
            fprintf(stderr, "traffic counted: %d %d %d, pages read/written %g/%g %g/%g %g/%g, pointers %d, sum %g\n", ok0, ok1,
                    ok2, r[0] / 4096, w[0] / 4096, r[1] / 4096, w[1] / 4096, r[2] / 4096, w[2] / 4096, np[2], sum);
            return 1;
        }
        printf("ok: pages read/written by fill (80 KiB) 0/20, fill (20000 bytes) 0/5, sum 20/1, results right\n");
        return 0;
    }
    if (!strcmp(c, "host_read")) { printf("%g\n", d[3]); return 0; }                  // no cudaMemcpy
    if (!strcmp(c, "oob")) { LAUNCH(fill_k, 4, 256, 0, d, 1024, 1.0f); return 0; }   // 24 floats past the end
    if (!strcmp(c, "use_after_free")) {
        float* stale = d + 10;
        cudaFree(d);
        LAUNCH(fill_k, 1, 32, 0, stale, 32, 1.0f);
        return 0;
    }
    if (!strcmp(c, "host_arg")) { LAUNCH(fill_k, 4, 256, 0, h, n, 1.0f); return 0; }   // a host array
    if (!strcmp(c, "block_limit")) {
        LAUNCH(fill_k, 1, 2048, 0, d, n, 1.0f);
        return check(cudaGetLastError(), "fill_k launch") ? 1 : 0;
    }
    if (!strcmp(c, "smem_optin")) {   // 64 KiB of dynamic shared memory without cudaFuncSetAttribute
        LAUNCH(smem_k, 1, 128, 64 << 10, out, (64 << 10) / 4);
        return check(cudaGetLastError(), "smem_k launch") ? 1 : 0;
    }
    if (!strcmp(c, "smem_oob")) { LAUNCH(smem_k, 1, 128, 4096, out, 4096 / 4 + 300); return 0; }
    if (!strcmp(c, "race")) {   // a copy on a second stream reads what a kernel wrote, without an event
        cudaStream_t s2;
        cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
        LAUNCH(fill_k, (n + 255) / 256, 256, 0, d, n, 2.0f);
        cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, s2);
        return 0;
    }
    if (!strcmp(c, "race_kernel")) {   // a kernel reads what a memset on another stream writes, without an event
        cudaStream_t s2;
        cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
        cudaMemsetAsync(d, 0, n * sizeof(float), s2);
        LAUNCH(sum_k, 1, 256, 0, out, d, n);
        return 0;
    }
    if (!strcmp(c, "divergent_barrier")) { LAUNCH(divergent_k, 1, 64, 0, out); return 0; }
    if (!strcmp(c, "deadlock")) { LAUNCH(deadlock_k, 1, 64, 0, out); return 0; }
    if (!strcmp(c, "shfl_exited")) { LAUNCH(shfl_k, 1, 32, 0, out); return 0; }
    if (!strcmp(c, "block_order")) {   // the chain by blockIdx: block 0 does not run first
        int* ib;
        if (check(cudaMalloc((void**)&ib, 13 * sizeof(int)), "cudaMalloc") ||
            check(cudaMemsetAsync(ib, 0, 13 * sizeof(int), g_s), "cudaMemsetAsync")) return 1;
        LAUNCH(chain_k, 6, 32, 0, ib, ib + 6, ib + 12, 0);
        return 0;
    }
    if (!strcmp(c, "memcpy_range"))   // 4 bytes more than the allocation holds
        return check(cudaMemcpy(h, d, n * sizeof(float) + 4, cudaMemcpyDeviceToHost), "cudaMemcpy") ? 1 : 0;
    if (!strcmp(c, "memcpy_kind"))    // host-to-device with the directions swapped
        return check(cudaMemcpy(h, d, 16, cudaMemcpyHostToDevice), "cudaMemcpy") ? 1 : 0;
    if (!strcmp(c, "double_free")) {
        cudaFree(d);
        return check(cudaFree(d), "cudaFree") ? 1 : 0;
    }
    fprintf(stderr, "emu_faults: unknown case %s\n", c);
    return 2;
}
