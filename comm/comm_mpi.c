// comm_mpi.c — the communication layer over MPI, for host memory.
#include "comm/comm.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

static int count_of(size_t n) {
    if (n > INT_MAX) { fprintf(stderr, "comm: message of %zu elements exceeds MPI's int count\n", n); MPI_Abort(MPI_COMM_WORLD, 1); }
    return (int)n;
}

Group group_world(void) {
    Group g = { MPI_COMM_WORLD, 0, 1 };
    MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g.size);
    return g;
}

void comm_allreduce_sum(const Group* g, float* buf, size_t n) {
    if (g->size > 1 && n) MPI_Allreduce(MPI_IN_PLACE, buf, count_of(n), MPI_FLOAT, MPI_SUM, g->comm);
}
void comm_allreduce_max(const Group* g, float* buf, size_t n) {
    if (g->size > 1 && n) MPI_Allreduce(MPI_IN_PLACE, buf, count_of(n), MPI_FLOAT, MPI_MAX, g->comm);
}
double comm_sum_double(const Group* g, double x) {
    if (g->size > 1) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, g->comm);
    return x;
}
double comm_max_double(const Group* g, double x) {
    if (g->size > 1) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_MAX, g->comm);
    return x;
}
long long comm_sum_ll(const Group* g, long long x) {
    if (g->size > 1) MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_LONG_LONG, MPI_SUM, g->comm);
    return x;
}
void comm_broadcast(const Group* g, void* buf, size_t bytes, int root) {
    if (g->size > 1) MPI_Bcast(buf, count_of(bytes), MPI_BYTE, root, g->comm);
}
void comm_barrier(const Group* g) { if (g->size > 1) MPI_Barrier(g->comm); }
void comm_gather(const Group* g, const void* send, void* recv, size_t bytes, int root) {
    MPI_Gather(send, count_of(bytes), MPI_BYTE, recv, count_of(bytes), MPI_BYTE, root, g->comm);
}

void comm_allgather_int(const Group* g, const int* send, int* recv, size_t n) {
    MPI_Allgather(send, count_of(n), MPI_INT, recv, count_of(n), MPI_INT, g->comm);
}

void comm_allgatherv(const Group* g, float* buf, const int* counts, const int* displs) {
    if (g->size > 1) MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, g->comm);
}

void comm_isend(const Group* g, const float* buf, size_t n, int dst, int tag, CommReqs* r) {
    MPI_Isend(buf, count_of(n), MPI_FLOAT, dst, tag, g->comm, &r->req[r->n++]);
}
void comm_irecv(const Group* g, float* buf, size_t n, int src, int tag, CommReqs* r) {
    MPI_Irecv(buf, count_of(n), MPI_FLOAT, src, tag, g->comm, &r->req[r->n++]);
}
int comm_test(CommReqs* r) {
    if (!r->n) return 1;
    int done = 0;
    MPI_Testall(r->n, r->req, &done, MPI_STATUSES_IGNORE);
    if (done) r->n = 0;
    return done;
}
void comm_wait(CommReqs* r) {
    if (r->n) MPI_Waitall(r->n, r->req, MPI_STATUSES_IGNORE);
    r->n = 0;
}
