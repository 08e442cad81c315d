// comm_mpi.c — the communication layer (comm.h) over MPI, for host memory: control collectives always,
// data collectives and the ring hop for the CPU backend.
#include "comm/comm_mpi.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REQS 64

struct CommReq { MPI_Request req[MAX_REQS]; int n; };

Group* group_from_mpi(MPI_Comm comm) {
    Group* g = calloc(1, sizeof *g);
    if (!g) { fprintf(stderr, "comm: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    g->comm = comm;
    MPI_Comm_rank(comm, &g->rank);
    MPI_Comm_size(comm, &g->size);
    return g;
}
MPI_Comm group_mpi(const Group* g) { return g->comm; }
int group_rank(const Group* g) { return g->rank; }
int group_size(const Group* g) { return g->size; }

// Largest element count of one MPI call (MPI counts are int). RINGLM_COMM_MAX_COUNT lowers it so that
// the tests exercise the split paths on small models.
static size_t max_count(void) {
    static size_t m = 0;
    if (!m) {
        const char* e = getenv("RINGLM_COMM_MAX_COUNT");
        long long v = e ? atoll(e) : 0;
        m = v > 0 && v < INT_MAX ? (size_t)v : (size_t)INT_MAX;
    }
    return m;
}

// in-place all-reduce of n elements, split into calls of at most max_count() elements
static void allreduce(const Group* g, void* buf, size_t n, MPI_Datatype t, int size, MPI_Op op) {
    if (g->size == 1) return;
    for (size_t o = 0; o < n; o += max_count()) {
        size_t k = n - o < max_count() ? n - o : max_count();
        MPI_Allreduce(MPI_IN_PLACE, (char*)buf + o * size, (int)k, t, op, g->comm);
    }
}

// ---- control collectives ----
void ctl_sum_f64(const Group* g, double* x, size_t n) { allreduce(g, x, n, MPI_DOUBLE, sizeof(double), MPI_SUM); }
void ctl_max_f64(const Group* g, double* x, size_t n) { allreduce(g, x, n, MPI_DOUBLE, sizeof(double), MPI_MAX); }
void ctl_sum_u64(const Group* g, uint64_t* x, size_t n) { allreduce(g, x, n, MPI_UINT64_T, sizeof(uint64_t), MPI_SUM); }
double ctl_sum(const Group* g, double x) { ctl_sum_f64(g, &x, 1); return x; }
double ctl_max(const Group* g, double x) { ctl_max_f64(g, &x, 1); return x; }
int ctl_any(const Group* g, int flag) {
    if (g->size > 1) MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_MAX, g->comm);
    return flag != 0;
}
void ctl_bcast(const Group* g, void* buf, size_t bytes, int root) {
    if (g->size == 1) return;
    for (size_t o = 0; o < bytes; o += max_count()) {
        size_t k = bytes - o < max_count() ? bytes - o : max_count();
        MPI_Bcast((char*)buf + o, (int)k, MPI_BYTE, root, g->comm);
    }
}
void ctl_barrier(const Group* g) { if (g->size > 1) MPI_Barrier(g->comm); }

static int small_count(size_t n, const char* what) {
    if (n > max_count()) {
        fprintf(stderr, "comm: %s of %zu bytes per rank exceeds MPI's int count\n", what, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return (int)n;
}
void ctl_gather(const Group* g, const void* send, void* recv, size_t bytes, int root) {
    int k = small_count(bytes, "gather");
    MPI_Gather(send, k, MPI_BYTE, recv, k, MPI_BYTE, root, g->comm);
}
void ctl_allgather(const Group* g, const void* send, void* recv, size_t bytes) {
    int k = small_count(bytes, "allgather");
    MPI_Allgather(send, k, MPI_BYTE, recv, k, MPI_BYTE, g->comm);
}

// ---- data collectives (host memory) ----
void comm_allreduce_sum(const Group* g, float* buf, size_t n) { allreduce(g, buf, n, MPI_FLOAT, sizeof(float), MPI_SUM); }
void comm_allreduce_max(const Group* g, float* buf, size_t n) { allreduce(g, buf, n, MPI_FLOAT, sizeof(float), MPI_MAX); }
void comm_broadcast(const Group* g, float* buf, size_t n, int root) { ctl_bcast(g, buf, n * sizeof(float), root); }

// allgather / reduce-scatter over equal parts; parts longer than one call are done in slices [o, o + k) of
// every part, packed contiguously (rank order) into a scratch buffer
typedef enum { GATHER, SCATTER } Coll;
static void parts_collective(const Group* g, float* buf, size_t n, Coll c) {
    if (g->size == 1) return;
    int P = g->size, r = g->rank;
    if (n <= max_count()) {
        if (c == GATHER) MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)n, MPI_FLOAT, g->comm);
        else {   // MPI leaves the result at the front of the buffer: move it to the own part
            MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, g->comm);
            if (r) memcpy(buf + (size_t)r * n, buf, n * sizeof(float));
        }
        return;
    }
    size_t k = max_count() / P;
    float* tmp = malloc((size_t)P * k * sizeof(float));
    if (!tmp) { fprintf(stderr, "comm: out of memory for a collective's scratch\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    for (size_t o = 0; o < n; o += k) {
        size_t m = n - o < k ? n - o : k;
        for (int i = 0; i < P; i++) memcpy(tmp + (size_t)i * m, buf + (size_t)i * n + o, m * sizeof(float));
        if (c == GATHER) MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, tmp, (int)m, MPI_FLOAT, g->comm);
        else {
            MPI_Reduce_scatter_block(MPI_IN_PLACE, tmp, (int)m, MPI_FLOAT, MPI_SUM, g->comm);
            if (r) memcpy(tmp + (size_t)r * m, tmp, m * sizeof(float));
        }
        for (int i = 0; i < P; i++)
            if (c == GATHER || i == r) memcpy(buf + (size_t)i * n + o, tmp + (size_t)i * m, m * sizeof(float));
    }
    free(tmp);
}
void comm_allgather(const Group* g, float* buf, size_t n) { parts_collective(g, buf, n, GATHER); }
void comm_reduce_scatter_sum(const Group* g, float* buf, size_t n) { parts_collective(g, buf, n, SCATTER); }

// ---- the ring hop ----
CommReq* comm_req_create(void) {
    CommReq* r = calloc(1, sizeof *r);
    if (!r) { fprintf(stderr, "comm: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }
    return r;
}
void comm_req_free(CommReq* r) { free(r); }

static MPI_Request* next_req(CommReq* r) {
    if (r->n == MAX_REQS) {
        fprintf(stderr, "comm: more than %d transfers in flight on one request (wait before starting more)\n", MAX_REQS);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return &r->req[r->n++];
}

// receives are posted before sends; MPI matches messages between one pair in posting order, so hops
// started one after another on one communicator pair up correctly without distinct tags
void comm_hop(const Group* g, const float* send, float* recv, size_t n, CommReq* r) {
    int next = (g->rank + 1) % g->size, prev = (g->rank - 1 + g->size) % g->size;
    for (size_t o = 0; o < n; o += max_count()) {
        size_t k = n - o < max_count() ? n - o : max_count();
        MPI_Irecv(recv + o, (int)k, MPI_FLOAT, prev, 0, g->comm, next_req(r));
    }
    for (size_t o = 0; o < n; o += max_count()) {
        size_t k = n - o < max_count() ? n - o : max_count();
        MPI_Isend(send + o, (int)k, MPI_FLOAT, next, 0, g->comm, next_req(r));
    }
}
int comm_test(CommReq* r) {
    if (!r->n) return 1;
    int done = 0;
    MPI_Testall(r->n, r->req, &done, MPI_STATUSES_IGNORE);
    if (done) r->n = 0;
    return done;
}
void comm_wait(CommReq* r) {
    if (r->n) MPI_Waitall(r->n, r->req, MPI_STATUSES_IGNORE);
    r->n = 0;
}
