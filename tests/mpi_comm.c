// mpi_comm.c — the communication layer (comm/comm.h) over the MPI world, against values computed here.
//
// Run: mpirun -np P build/tests/mpi_comm [--overflow]   (tests/test_comm.sh runs P = 1..4, also with
// RINGLM_COMM_MAX_COUNT small so that every collective is split into several MPI calls; and the same program on the
// emulated CUDA backend, build/emu/tests/mpi_comm, over NCCL and over the staged transport).
// Every rank fills buffers with small integers (exact in fp32), so each expected result is exact: sums,
// maxima, gathers, reduce-scatter parts, all-to-all blocks, broadcasts, and the ring hop (two hops in flight on one request,
// driven by comm_test, then completed by comm_wait, each arriving from the previous rank in order).
// --overflow starts more hops than a request can hold without waiting: the layer must stop the job with
// its message (a programming error, caught instead of overrunning the request list).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/grid.h"
#include "tests/testutil.h"

static const Group* W;
static int P, RK;

#define RCHECK(cond, ...) do { int c_ = !ctl_any(W, !(cond)); if (RK == 0) CHECK(c_, __VA_ARGS__); } while (0)

static float* dev(size_t n) { return be_alloc((n ? n : 1) * sizeof(float)); }
static float* host(size_t n) { return malloc((n ? n : 1) * sizeof(float)); }

static float val(int rank, size_t i) { return (float)(rank * 1000 + (int)(i % 997)); }

static void control(void) {
    RCHECK(ctl_sum(W, RK + 1) == P * (P + 1) / 2.0, "ctl_sum of rank + 1 = %d", P * (P + 1) / 2);
    RCHECK(ctl_max(W, RK) == P - 1, "ctl_max of rank = %d", P - 1);
    RCHECK(ctl_any(W, RK == P - 1) == 1 && ctl_any(W, 0) == 0, "ctl_any: set on the last rank only / nowhere");
    uint64_t u[3] = { UINT64_MAX, (uint64_t)RK, 1 };
    ctl_sum_u64(W, u, 3);   // mod 2^64
    RCHECK(u[0] == (uint64_t)(-(int64_t)P) && u[1] == (uint64_t)(P * (P - 1) / 2) && u[2] == (uint64_t)P, "ctl_sum_u64 wraps mod 2^64");
    double d[5];
    for (int i = 0; i < 5; i++) d[i] = RK * 10 + i;
    ctl_max_f64(W, d, 5);
    int ok = 1;
    for (int i = 0; i < 5; i++) ok &= d[i] == (P - 1) * 10 + i;
    RCHECK(ok, "ctl_max_f64 element-wise over 5 values");
    char text[300];
    if (RK == P - 1) for (int i = 0; i < 300; i++) text[i] = (char)('a' + i % 26);
    else memset(text, 0, sizeof text);
    ctl_bcast(W, text, sizeof text, P - 1);
    ok = 1;
    for (int i = 0; i < 300; i++) ok &= text[i] == (char)('a' + i % 26);
    RCHECK(ok, "ctl_bcast of 300 bytes from the last rank");
    int mine[3] = { RK, -RK, 7 }, *all = malloc(3 * P * sizeof(int));
    ctl_allgather(W, mine, all, sizeof mine);
    ok = 1;
    for (int r = 0; r < P; r++) ok &= all[3 * r] == r && all[3 * r + 1] == -r && all[3 * r + 2] == 7;
    RCHECK(ok, "ctl_allgather of 3 ints in rank order");
    memset(all, 0, 3 * P * sizeof(int));
    ctl_gather(W, mine, all, sizeof mine, 0);
    ok = 1;
    for (int r = 0; RK == 0 && r < P; r++) ok &= all[3 * r] == r && all[3 * r + 1] == -r;
    RCHECK(ok, "ctl_gather to rank 0 in rank order");
    free(all);
}

static void data(size_t n) {
    float *d = dev(P * n), *h = host(P * n);
    int ok = 1;
    // all-reduce: sum and max
    for (size_t i = 0; i < n; i++) h[i] = val(RK, i);
    be_upload(d, h, n * sizeof(float));
    comm_allreduce_sum(W, d, n);
    be_download(h, d, n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < P; r++) want += val(r, i);
        ok &= h[i] == want;
    }
    RCHECK(ok, "allreduce_sum of %zu floats", n);
    for (size_t i = 0; i < n; i++) h[i] = (float)((RK * 7 + (int)i) % P);
    be_upload(d, h, n * sizeof(float));
    comm_allreduce_max(W, d, n);
    be_download(h, d, n * sizeof(float));
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= h[i] == (float)(P - 1);
    RCHECK(ok, "allreduce_max of %zu floats", n);
    // broadcast from the last rank
    for (size_t i = 0; i < n; i++) h[i] = RK == P - 1 ? val(RK, i) : -1;
    be_upload(d, h, n * sizeof(float));
    comm_broadcast(W, d, n, P - 1);
    be_download(h, d, n * sizeof(float));
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= h[i] == val(P - 1, i);
    RCHECK(ok, "broadcast of %zu floats from rank %d", n, P - 1);
    // allgather: own part in, every part out
    for (size_t i = 0; i < P * n; i++) h[i] = i / n == (size_t)RK ? val(RK, i % n) : -1;
    be_upload(d, h, P * n * sizeof(float));
    comm_allgather(W, d, n);
    be_download(h, d, P * n * sizeof(float));
    ok = 1;
    for (size_t i = 0; i < P * n; i++) ok &= h[i] == val((int)(i / n), i % n);
    RCHECK(ok, "allgather of %d parts of %zu floats", P, n);
    // reduce-scatter: every part in, the own part's sum out; the other parts may be anything
    for (size_t i = 0; i < P * n; i++) h[i] = val(RK, i) + (float)(i / n);
    be_upload(d, h, P * n * sizeof(float));
    comm_reduce_scatter_sum(W, d, n);
    be_download(h, d, P * n * sizeof(float));
    ok = 1;
    for (size_t i = 0; i < n; i++) {
        size_t j = (size_t)RK * n + i;
        float want = 0;
        for (int r = 0; r < P; r++) want += val(r, j) + (float)RK;
        ok &= h[j] == want;
    }
    RCHECK(ok, "reduce_scatter_sum of %d parts of %zu floats (own part = sum over ranks)", P, n);
    // all-to-all: block j of rank r goes to rank j; rank r's block i comes from rank i
    float* d2 = dev(P * n);
    for (size_t i = 0; i < P * n; i++) h[i] = val(RK * P + (int)(i / n), i % n);
    be_upload(d, h, P * n * sizeof(float));
    comm_alltoall(W, d, d2, n);
    be_download(h, d2, P * n * sizeof(float));
    ok = 1;
    for (size_t i = 0; i < P * n; i++) ok &= h[i] == val((int)(i / n) * P + RK, i % n);
    RCHECK(ok, "alltoall of %d blocks of %zu floats (block i from rank i)", P, n);
    be_free(d2);
    be_free(d); free(h);
}

// two hops in flight on one request: each brings the previous rank's buffer, in the order started
static void hops(size_t n) {
    float *a = dev(n), *b = dev(n), *ra = dev(n), *rb = dev(n), *h = host(n);
    for (size_t i = 0; i < n; i++) h[i] = val(RK, i);
    be_upload(a, h, n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = -val(RK, i) - 1;
    be_upload(b, h, n * sizeof(float));
    CommReq* rq = comm_req_create();
    comm_hop(W, a, ra, n, rq);
    comm_hop(W, b, rb, n, rq);
    long polls = 0;
    while (!comm_test(rq) && polls < 100000000L) polls++;
    comm_wait(rq);   // already complete: returns at once
    int prev = (RK - 1 + P) % P, ok = 1;
    be_download(h, ra, n * sizeof(float));
    for (size_t i = 0; i < n; i++) ok &= h[i] == val(prev, i);
    be_download(h, rb, n * sizeof(float));
    for (size_t i = 0; i < n; i++) ok &= h[i] == -val(prev, i) - 1;
    RCHECK(ok, "two ring hops of %zu floats on one request arrive from the previous rank, in order (test, then wait)", n);
    // a hop completed by comm_wait alone, reusing the request
    comm_hop(W, ra, b, n, rq);
    comm_wait(rq);
    int prev2 = (RK - 2 + 2 * P) % P;
    be_download(h, b, n * sizeof(float));
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= h[i] == val(prev2, i);
    RCHECK(ok, "a second round on the same request brings the block from two ranks back (%zu floats)", n);
    comm_req_free(rq);
    be_free(a); be_free(b); be_free(ra); be_free(rb); free(h);
}

// hops that grow on one request, and the request freed right after its wait: a staged transport must not free its
// pinned buffers while the copy that lands the last hop may still read them (the emulation stops the job if it does)
static void hops_growing(size_t n) {
    float *a = dev(3 * n), *r = dev(3 * n), *h = host(3 * n);
    for (size_t i = 0; i < 3 * n; i++) h[i] = val(RK, i);
    be_upload(a, h, 3 * n * sizeof(float));
    CommReq* rq = comm_req_create();
    comm_hop(W, a, r, n, rq);
    comm_wait(rq);                      // the landing copy is queued, not waited for
    comm_hop(W, a, r, 3 * n, rq);       // a larger hop: the request's pinned buffers grow
    comm_wait(rq);
    comm_req_free(rq);                  // right after the wait
    be_download(h, r, 3 * n * sizeof(float));
    int prev = (RK - 1 + P) % P, ok = 1;
    for (size_t i = 0; i < 3 * n; i++) ok &= h[i] == val(prev, i);
    RCHECK(ok, "hops of %zu then %zu floats on one request, freed right after the wait: the data arrives", n, 3 * n);
    be_free(a); be_free(r); free(h);
}

int main(int argc, char** argv) {
    grid_mpi_init(&argc, &argv);
    static Grid G;   // tp = cp = 1: the world group attached as the trainer's groups are (a GPU per node-local rank)
    char err[256];
    if (grid_build(&G, 1, 1, 1, err, sizeof err)) { fprintf(stderr, "%s\n", err); grid_exit(1); }
    W = G.world_g;
    P = group_size(W); RK = group_rank(W);
    if (be_init(G.local_rank, err, sizeof err)) { fprintf(stderr, "%s\n", err); grid_exit(1); }
    if (argc > 1 && !strcmp(argv[1], "--overflow")) {   // more hops than a request holds, never waited for
        float *s = dev(4), *r = dev(4);
        CommReq* rq = comm_req_create();
        for (int i = 0; i < 100; i++) comm_hop(W, s, r, 4, rq);
        printf("overflow not caught\n");
        grid_exit(0);
    }
    const char* mc = getenv("RINGLM_COMM_MAX_COUNT");
    if (RK == 0) printf("mpi_comm: P = %d ranks, RINGLM_COMM_MAX_COUNT = %s\n", P, mc ? mc : "(unset)");
    control();
    size_t sizes[] = { 1, 37, 1000, 5003 };
    for (int i = 0; i < 4; i++) { data(sizes[i]); hops(sizes[i]); }
    hops_growing(1000);
    int failed = RK == 0 ? tu_failed : 0;
    ctl_bcast(W, &failed, sizeof failed, 0);
    if (RK == 0) { tu_finish(); fflush(stdout); }
    grid_exit(failed ? 1 : 0);
}
