// data_mpi.c — the data collectives and the ring hop of comm.h over MPI on host memory (the CPU
// backend's transport).
#include "comm/comm_mpi.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REQS 64

struct CommReq { MPI_Request req[MAX_REQS]; int n; };

int comm_set_transport(const char* name, char* err, size_t errlen) {
    if (!strcmp(name, "auto") || !strcmp(name, "mpi")) return 0;
    snprintf(err, errlen, "comm: transport '%s' is not available in this build (the %s backend moves data with MPI; "
             "nccl needs the CUDA backend)", name, "cpu");
    return 1;
}
int comm_data_attach(Group* g, char* err, size_t errlen) { (void)g; (void)err; (void)errlen; return 0; }

// ---- data collectives (host memory) ----
void comm_allreduce_sum(const Group* g, float* buf, size_t n) { mpi_allreduce(g, buf, n, MPI_FLOAT, sizeof(float), MPI_SUM); }
void comm_allreduce_max(const Group* g, float* buf, size_t n) { mpi_allreduce(g, buf, n, MPI_FLOAT, sizeof(float), MPI_MAX); }
void comm_broadcast(const Group* g, float* buf, size_t n, int root) { ctl_bcast(g, buf, n * sizeof(float), root); }

// allgather / reduce-scatter over equal parts; parts longer than one call are done in slices [o, o + k) of
// every part, packed contiguously (rank order) into a scratch buffer
typedef enum { GATHER, SCATTER } Coll;
static void parts_collective(const Group* g, float* buf, size_t n, Coll c) {
    if (g->size == 1) return;
    int P = g->size, r = g->rank;
    if (n <= mpi_max_count()) {
        if (c == GATHER) MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)n, MPI_FLOAT, g->comm);
        else {   // MPI leaves the result at the front of the buffer: move it to the own part
            MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, g->comm);
            if (r) memcpy(buf + (size_t)r * n, buf, n * sizeof(float));
        }
        return;
    }
    size_t k = mpi_max_count() / P;
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

// One direction of a hop: n floats as at most two messages (a message longer than one MPI call's count is
// sent as blocks of a contiguous type, plus the remainder). Receives are posted before sends; MPI matches
// messages between one pair in posting order, so hops started one after another pair up without tags.
static void post(const Group* g, float* buf, size_t n, int peer, int recv, CommReq* r) {
    size_t block = (n + mpi_max_count() - 1) / mpi_max_count(), head = n / (block ? block : 1) * block;
    if (block <= 1) head = 0;
    MPI_Datatype t = MPI_FLOAT;
    if (head) MPI_Type_contiguous((int)block, MPI_FLOAT, &t), MPI_Type_commit(&t);
    struct { float* p; size_t count; MPI_Datatype type; } part[2] = { { buf, head / (block ? block : 1), t },
                                                                     { buf + head, n - head, MPI_FLOAT } };
    for (int i = 0; i < 2; i++) {
        if (!part[i].count) continue;
        if (recv) MPI_Irecv(part[i].p, (int)part[i].count, part[i].type, peer, 0, g->comm, next_req(r));
        else MPI_Isend(part[i].p, (int)part[i].count, part[i].type, peer, 0, g->comm, next_req(r));
    }
    if (head) MPI_Type_free(&t);   // freed types stay valid for the operations already started
}

void comm_hop(const Group* g, const float* send, float* recv, size_t n, CommReq* r) {
    post(g, recv, n, (g->rank - 1 + g->size) % g->size, 1, r);
    post(g, (float*)send, n, (g->rank + 1) % g->size, 0, r);
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
