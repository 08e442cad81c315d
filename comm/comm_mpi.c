// comm_mpi.c — groups and the control collectives of comm.h over MPI (host memory, every backend).
#include "comm/comm_mpi.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

size_t mpi_max_count(void) {
    static size_t m = 0;
    if (!m) {
        const char* e = getenv("RINGLM_COMM_MAX_COUNT");
        long long v = e ? atoll(e) : 0;
        m = v > 0 && v < INT_MAX ? (size_t)v : (size_t)INT_MAX;
    }
    return m;
}

void mpi_allreduce(const Group* g, void* buf, size_t n, MPI_Datatype t, int size, MPI_Op op) {
    if (g->size == 1) return;
    for (size_t o = 0; o < n; o += mpi_max_count()) {
        size_t k = n - o < mpi_max_count() ? n - o : mpi_max_count();
        MPI_Allreduce(MPI_IN_PLACE, (char*)buf + o * size, (int)k, t, op, g->comm);
    }
}

// ---- control collectives ----
void ctl_sum_f64(const Group* g, double* x, size_t n) { mpi_allreduce(g, x, n, MPI_DOUBLE, sizeof(double), MPI_SUM); }
void ctl_max_f64(const Group* g, double* x, size_t n) { mpi_allreduce(g, x, n, MPI_DOUBLE, sizeof(double), MPI_MAX); }
void ctl_sum_u64(const Group* g, uint64_t* x, size_t n) { mpi_allreduce(g, x, n, MPI_UINT64_T, sizeof(uint64_t), MPI_SUM); }
double ctl_sum(const Group* g, double x) { ctl_sum_f64(g, &x, 1); return x; }
double ctl_max(const Group* g, double x) { ctl_max_f64(g, &x, 1); return x; }
int ctl_any(const Group* g, int flag) {
    if (g->size > 1) MPI_Allreduce(MPI_IN_PLACE, &flag, 1, MPI_INT, MPI_MAX, g->comm);
    return flag != 0;
}
void ctl_bcast(const Group* g, void* buf, size_t bytes, int root) {
    if (g->size == 1) return;
    for (size_t o = 0; o < bytes; o += mpi_max_count()) {
        size_t k = bytes - o < mpi_max_count() ? bytes - o : mpi_max_count();
        MPI_Bcast((char*)buf + o, (int)k, MPI_BYTE, root, g->comm);
    }
}
void ctl_barrier(const Group* g) { if (g->size > 1) MPI_Barrier(g->comm); }

static int small_count(size_t n, const char* what) {   // control messages are small: one call
    if (n > INT_MAX) {
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

