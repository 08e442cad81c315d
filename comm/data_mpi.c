// data_mpi.c — the data collectives and the ring hop of comm.h over MPI on host memory (the CPU
// backend's transport).
//
// Every wait goes through the watchdog (comm_watch_wait), which polls nonblocking requests. Open MPI's
// nonblocking all-reduce (libnbc) reduces a buffer given in place through a binomial tree (the whole buffer
// up to rank 0 and back) and allocates a buffer of its size on every call: several times slower than the
// blocking one for the megabytes of gradients and activations. So the data collectives of more than a few
// kilobytes are rings of point-to-point transfers here: reduce-scatter (P - 1 steps of 1/P of the data,
// each rank adding what it receives) then all-gather (P - 1 steps), done in segments so that the scratch
// stays small; every rank ends with the same bits (each part is summed on one rank, then copied).
#include "comm/comm_mpi.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REQS 64
#define SMALL_FLOATS 4096          // an all-reduce of at most this many floats is one MPI_Iallreduce
#define SEGMENT_FLOATS (1 << 20)   // a ring moves at most this many floats per part and step (4 MiB scratch);
                                   // at most mpi_max_count() (so the tests' small counts exercise the segments)
static size_t segment(void) { return mpi_max_count() < SEGMENT_FLOATS ? mpi_max_count() : SEGMENT_FLOATS; }
enum { TAG_HOP = 0, TAG_RING = 1 };

// each transfer's peer (a rank of g) is kept for the watchdog's message
struct CommReq { MPI_Request req[MAX_REQS]; int peer[MAX_REQS]; int n; const Group* g; };

int comm_set_transport(const char* name, char* err, size_t errlen) {
    if (!strcmp(name, "auto") || !strcmp(name, "mpi")) return 0;
    snprintf(err, errlen, "comm: transport '%s' is not available in this build (the %s backend moves data with MPI; "
             "nccl needs the CUDA backend)", name, "cpu");
    return 1;
}
int comm_data_attach(Group* g, char* err, size_t errlen) { (void)g; (void)err; (void)errlen; return 0; }
void comm_set_note_stderr(int on) { (void)on; }   // (MPI: nothing to say)

static void oom(void) { fprintf(stderr, "comm: out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 1); }

static MPI_Request* next_req(CommReq* r, int peer) {
    if (r->n == MAX_REQS) {
        fprintf(stderr, "comm: more than %d transfers in flight on one request (wait before starting more)\n", MAX_REQS);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    r->peer[r->n] = peer;
    return &r->req[r->n++];
}

// One direction of a transfer: n floats as at most two messages (a message longer than one MPI call's count
// is sent as blocks of a contiguous type, plus the remainder). Receives are posted before sends; MPI matches
// messages between one pair in posting order, so transfers started one after another pair up.
static void post(const Group* g, float* buf, size_t n, int peer, int recv, int tag, CommReq* r) {
    size_t block = (n + mpi_max_count() - 1) / mpi_max_count(), head = n / (block ? block : 1) * block;
    if (block <= 1) head = 0;
    MPI_Datatype t = MPI_FLOAT;
    if (head) MPI_Type_contiguous((int)block, MPI_FLOAT, &t), MPI_Type_commit(&t);
    struct { float* p; size_t count; MPI_Datatype type; } part[2] = { { buf, head / (block ? block : 1), t },
                                                                     { buf + head, n - head, MPI_FLOAT } };
    for (int i = 0; i < 2; i++) {
        if (!part[i].count) continue;
        if (recv) MPI_Irecv(part[i].p, (int)part[i].count, part[i].type, peer, tag, g->comm, next_req(r, peer));
        else MPI_Isend(part[i].p, (int)part[i].count, part[i].type, peer, tag, g->comm, next_req(r, peer));
    }
    if (head) MPI_Type_free(&t);   // freed types stay valid for the operations already started
}

// ---- rings over the parts of a buffer ----
// part i of a ring: `len[i]` floats at `ptr[i]` (every rank passes the same lengths). Rank r sends to r + 1
// and receives from r - 1.
typedef struct { const Group* g; float** ptr; size_t* len; float* tmp; CommReq q; const char* what; } Ring;

static void ring_step(Ring* R, int send_part, float* recv_to, int recv_part) {
    const Group* g = R->g;
    int P = g->size, next = (g->rank + 1) % P, prev = (g->rank + P - 1) % P;
    R->q.n = 0; R->q.g = g;
    post(g, recv_to, R->len[recv_part], prev, 1, TAG_RING, &R->q);
    post(g, R->ptr[send_part], R->len[send_part], next, 0, TAG_RING, &R->q);
    comm_watch_wait(g, R->q.n, R->q.req, R->what, R->q.peer);
    R->q.n = 0;
}
// afterwards part r (this rank's) holds the reduction (sum, or max) over the group of part r
static void ring_reduce_scatter(Ring* R, int max) {
    int P = R->g->size, r = R->g->rank;
    for (int s = 0; s < P - 1; s++) {
        int out = ((r - s - 1) % P + P) % P, in = ((r - s - 2) % P + P) % P;
        ring_step(R, out, R->tmp, in);
        float* d = R->ptr[in];
        const float* x = R->tmp;
        size_t n = R->len[in];
        if (max) for (size_t j = 0; j < n; j++) d[j] = d[j] > x[j] ? d[j] : x[j];
        else for (size_t j = 0; j < n; j++) d[j] += x[j];
    }
}
// afterwards every part holds its owner's part
static void ring_allgather(Ring* R) {
    int P = R->g->size, r = R->g->rank;
    for (int s = 0; s < P - 1; s++) {
        int out = ((r - s) % P + P) % P, in = ((r - s - 1) % P + P) % P;
        ring_step(R, out, R->ptr[in], in);
    }
}

static Ring ring_open(const Group* g, size_t tmp_floats, const char* what) {
    static float* scratch = NULL;   // kept between calls (one thread calls the layer)
    static size_t cap = 0;
    if (tmp_floats > cap) {
        free(scratch);
        cap = tmp_floats;
        if (!(scratch = malloc(cap * sizeof(float)))) oom();
    }
    Ring R;
    memset(&R, 0, sizeof R);
    R.g = g; R.what = what; R.tmp = scratch;
    R.ptr = malloc(g->size * sizeof(float*));
    R.len = malloc(g->size * sizeof(size_t));
    if (!R.ptr || !R.len) oom();
    comm_watch_started(g);   // one collective for the watchdog's count
    return R;
}
static void ring_close(Ring* R) { free(R->ptr); free(R->len); }

// all-reduce of buf[n] in segments of at most P * SEGMENT_FLOATS, each cut into P parts
static void ring_allreduce(const Group* g, float* buf, size_t n, int max, const char* what) {
    size_t P = (size_t)g->size, seg = P * segment();
    Ring R = ring_open(g, (n < seg ? n : seg) / P + 1, what);
    for (size_t o = 0; o < n; o += seg) {
        size_t m = n - o < seg ? n - o : seg;
        for (size_t i = 0; i < P; i++) { R.ptr[i] = buf + o + m * i / P; R.len[i] = m * (i + 1) / P - m * i / P; }
        ring_reduce_scatter(&R, max);
        ring_allgather(&R);
    }
    ring_close(&R);
}

// ---- data collectives (host memory) ----
static void allreduce(const Group* g, float* buf, size_t n, int max, const char* what) {
    if (g->size == 1) return;
    if (n <= SMALL_FLOATS) mpi_allreduce_named(g, buf, n, MPI_FLOAT, sizeof(float), max ? MPI_MAX : MPI_SUM, what);
    else ring_allreduce(g, buf, n, max, what);
}
void comm_allreduce_sum(const Group* g, float* buf, size_t n) {
    comm_traffic_count(TRAFFIC_ALLREDUCE, g, n, 0);
    allreduce(g, buf, n, 0, "comm_allreduce_sum");
}
void comm_allreduce_sum_f64(const Group* g, double* buf, size_t n) {
    comm_traffic_count(TRAFFIC_ALLREDUCE, g, 2 * n, 0);
    if (g->size > 1) mpi_allreduce_named(g, buf, n, MPI_DOUBLE, sizeof(double), MPI_SUM, "comm_allreduce_sum_f64");
}
void comm_allreduce_max(const Group* g, float* buf, size_t n) {
    comm_traffic_count(TRAFFIC_ALLREDUCE, g, n, 0);
    allreduce(g, buf, n, 1, "comm_allreduce_max");
}
void comm_broadcast(const Group* g, float* buf, size_t n, int root) {
    comm_traffic_count(TRAFFIC_BCAST, g, n, root);
    ctl_bcast(g, buf, n * sizeof(float), root);
}

// all-gather / reduce-scatter over equal parts buf[i * n ...], in slices [o, o + k) of every part
typedef enum { GATHER, SCATTER } Coll;
static void parts_collective(const Group* g, float* buf, size_t n, Coll c) {
    if (g->size == 1 || n == 0) return;
    size_t k = n < segment() ? n : segment();
    Ring R = ring_open(g, c == SCATTER ? k : 0, c == GATHER ? "comm_allgather" : "comm_reduce_scatter_sum");
    for (size_t o = 0; o < n; o += k) {
        size_t m = n - o < k ? n - o : k;
        for (int i = 0; i < g->size; i++) { R.ptr[i] = buf + (size_t)i * n + o; R.len[i] = m; }
        if (c == GATHER) ring_allgather(&R);
        else ring_reduce_scatter(&R, 0);
    }
    ring_close(&R);
}
void comm_allgather(const Group* g, float* buf, size_t n) {
    comm_traffic_count(TRAFFIC_PARTS, g, n, 0);
    parts_collective(g, buf, n, GATHER);
}
void comm_alltoall(const Group* g, const float* send, float* recv, size_t n) {
    comm_traffic_count(TRAFFIC_A2A, g, n, 0);
    mpi_alltoall(g, send, recv, n, "comm_alltoall");
}
void comm_reduce_scatter_sum(const Group* g, float* buf, size_t n) {
    comm_traffic_count(TRAFFIC_PARTS, g, n, 0);
    parts_collective(g, buf, n, SCATTER);
}
void comm_allgather_start(const Group* g, float* buf, size_t n, CommReq* r) {   // (complete on return: r stays empty)
    (void)r;
    comm_allgather(g, buf, n);
}

// ---- the ring hop ----
CommReq* comm_req_create(void) {
    CommReq* r = calloc(1, sizeof *r);
    if (!r) oom();
    return r;
}
void comm_req_free(CommReq* r) { free(r); }

void comm_hop_sized(const Group* g, const float* send, size_t ns, float* recv, size_t nr, CommReq* r) {
    if (!send) ns = 0;
    if (!recv) nr = 0;
    if (ns) comm_traffic_count(TRAFFIC_HOP, g, ns, 0);
    r->g = g;
    if (nr) post(g, recv, nr, (g->rank - 1 + g->size) % g->size, 1, TAG_HOP, r);
    if (ns) post(g, (float*)send, ns, (g->rank + 1) % g->size, 0, TAG_HOP, r);
}
void comm_hop(const Group* g, const float* send, float* recv, size_t n, CommReq* r) { comm_hop_sized(g, send, n, recv, n, r); }
int comm_test(CommReq* r) {
    if (!r->n) return 1;
    int done = 0;
    MPI_Testall(r->n, r->req, &done, MPI_STATUSES_IGNORE);
    if (done) r->n = 0;
    return done;
}
void comm_wait(CommReq* r) {   // under the watchdog: a peer that never sends or receives ends the job
    if (r->n) comm_watch_wait(r->g, r->n, r->req, "ring hop", r->peer);
    r->n = 0;
}
