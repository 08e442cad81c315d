// data_cuda.c — the data collectives and the ring hop of comm.h for the CUDA backend's device memory.
//
// Two transports, chosen once for the job (comm_set_transport, before the grid attaches its groups):
//   nccl: one NCCL communicator per group (rank 0's id broadcast over the group's MPI communicator).
//         EVERY NCCL operation runs on one communication stream, in the order the host issues them (the same on
//         every rank: the model graph is the same program on each). NCCL gives no progress guarantee to operations
//         of two communicators that can run at the same time (a GPU may run one and never the other, each rank
//         choosing differently: a deadlock), and a job's groups are several communicators (tp, cp, dp, ...), so no
//         two may be in flight on two streams. A collective waits (event) for what the compute stream holds, and
//         the compute stream waits (event) for the collective: in order with the kernels, as on one stream. A ring
//         hop is one NCCL group (send to next + receive from prev) there too, the compute stream going on; comm_wait
//         / a successful comm_test order the compute stream after it (the host does not block: the wait is the
//         GPU's). The price: a collective queued behind a hop in flight waits for it. NCCL refuses two ranks on one GPU.
//   mpi:  staged through pinned host memory (device → host, MPI, host → device). Works with any placement,
//         including several ranks on one GPU; the hop's MPI transfer overlaps the kernels queued after it
//         (the send is copied to the host when comm_hop is called).
// auto = nccl when every rank of the job has a GPU of its own, mpi otherwise.
// Errors: a failed CUDA or NCCL call ends the job with one line naming the operation.
#include "comm/comm_mpi.h"
#include "comm/data_cuda.h"
#include "comm/grid.h"
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_AUTO, T_NCCL, T_MPI };
static int transport = T_AUTO;   // as asked; resolved to T_NCCL or T_MPI by the first attach
static int resolved = -1;
static int note_stderr = 0;
void comm_set_note_stderr(int on) { note_stderr = on; }
static cudaStream_t comm_stream;
static cudaEvent_t coll_in, coll_out;   // nccl: a collective after the compute stream's work; the compute stream after it

static void die(const char* op, const char* msg) {
    fprintf(stderr, "comm (cuda): %s: %s\n", op, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}
static void cu(cudaError_t e, const char* op) { if (e != cudaSuccess) die(op, cudaGetErrorString(e)); }
static void nc(ncclResult_t r, const char* op) { if (r != ncclSuccess) die(op, ncclGetErrorString(r)); }
static cudaStream_t stream(void) { return (cudaStream_t)cuda_backend_stream(); }

int comm_set_transport(const char* name, char* err, size_t errlen) {
    if (!strcmp(name, "auto")) transport = T_AUTO;
    else if (!strcmp(name, "nccl")) transport = T_NCCL;
    else if (!strcmp(name, "mpi")) transport = T_MPI;
    else { snprintf(err, errlen, "comm: transport '%s' must be auto, nccl or mpi", name); return 1; }
    return 0;
}

// the first attach: start the backend on this rank's device (node-local rank), then pick the transport
static int resolve(char* err, size_t errlen) {
    MPI_Comm node;
    int lr = 0, world = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lr);
    MPI_Comm_free(&node);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (cuda_backend_start(lr, err, errlen)) return 1;
    unsigned char* ids = malloc((size_t)world * 16);
    if (!ids) { snprintf(err, errlen, "comm: out of memory"); return 1; }
    unsigned char mine[16];
    cuda_backend_device_uuid(mine);
    ctl_allgather(group_world(), mine, ids, 16);
    int shared = 0;
    for (int i = 0; i < world && !shared; i++)
        for (int j = i + 1; j < world && !shared; j++) shared = !memcmp(ids + 16 * i, ids + 16 * j, 16);
    free(ids);
    if (transport == T_NCCL && shared) {
        snprintf(err, errlen, "comm: nccl cannot run two ranks on one GPU (this job has %d ranks on fewer GPUs); "
                 "use --comm mpi or one rank per GPU", world);
        return 1;
    }
    resolved = transport == T_MPI || (transport == T_AUTO && shared) ? T_MPI : T_NCCL;
    if (resolved == T_NCCL) {
        cu(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking), "cudaStreamCreate");
        cu(cudaEventCreateWithFlags(&coll_in, cudaEventDisableTiming), "cudaEventCreate");
        cu(cudaEventCreateWithFlags(&coll_out, cudaEventDisableTiming), "cudaEventCreate");
    }
    if (world > 1 && group_rank(group_world()) == 0) {
        FILE* out = note_stderr ? stderr : stdout;
        fprintf(out, "transport: %s\n", resolved == T_NCCL ? "nccl (every rank has a GPU of its own)"
                : shared ? "mpi, staged through pinned host memory (ranks share a GPU)"
                         : "mpi, staged through pinned host memory (comm = mpi)");
        fflush(out);
    }
    return 0;
}

int comm_data_attach(Group* g, char* err, size_t errlen) {
    if (resolved < 0 && resolve(err, errlen)) return 1;
    if (resolved != T_NCCL || g->size == 1) return 0;
    ncclUniqueId id;
    if (g->rank == 0) nc(ncclGetUniqueId(&id), "ncclGetUniqueId");
    ctl_bcast(g, &id, sizeof id, 0);
    ncclComm_t* c = malloc(sizeof *c);
    if (!c) { snprintf(err, errlen, "comm: out of memory"); return 1; }
    ncclResult_t r = ncclCommInitRank(c, g->size, id, g->rank);
    if (r != ncclSuccess) {
        snprintf(err, errlen, "comm: cannot make the NCCL communicator of the %s group (%d ranks): %s", g->name, g->size,
                 ncclGetErrorString(r));
        free(c);
        return 1;
    }
    g->data = c;
    return 0;
}
static ncclComm_t nccl_of(const Group* g) { return *(ncclComm_t*)g->data; }

// The grid attaches every group it makes. A group used without that (a program that speaks to the world group
// directly) is attached at its first data call, which all its members make; the first attach of the job also
// picks the transport, collectively over the world.
static void attach_late(const Group* g) {
    if (resolved >= 0 && (resolved != T_NCCL || g->size == 1 || g->data)) return;
    char err[512];
    if (comm_data_attach((Group*)g, err, sizeof err)) die("comm_data_attach", err);
}

// ---- host staging (the mpi transport) ----
static float* stage;        // pinned, grown on demand
static size_t stage_n;
static float* staged(size_t n) {
    if (n > stage_n) {
        if (stage) cudaFreeHost(stage);
        stage_n = n + n / 4;
        cu(cudaMallocHost((void**)&stage, stage_n * sizeof(float)), "cudaMallocHost (staging buffer)");
    }
    return stage;
}
static void d2h(float* h, const float* d, size_t n) {
    cuda_backend_note_xfer(0, n * sizeof(float));
    cuda_backend_note_sync("staged transport (device to host)");
    cu(cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, stream()), "staging (device to host)");
    cu(cudaStreamSynchronize(stream()), "staging (a queued kernel failed)");
}
static void h2d(float* d, const float* h, size_t n) {
    cuda_backend_note_xfer(1, n * sizeof(float));
    cuda_backend_note_sync("staged transport (host to device)");
    cu(cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, stream()), "staging (host to device)");
    cu(cudaStreamSynchronize(stream()), "staging (host to device)");
}
static void staged_allreduce(const Group* g, float* buf, size_t n, MPI_Op op) {
    float* h = staged(n);
    d2h(h, buf, n);
    mpi_allreduce(g, h, n, MPI_FLOAT, sizeof(float), op);
    h2d(buf, h, n);
}

// ---- data collectives ----
// nccl: a collective on the communication stream, after what the compute stream holds now (coll_begin), and the
// compute stream after it (coll_end)
static cudaStream_t coll_begin(void) {
    cu(cudaEventRecord(coll_in, stream()), "cudaEventRecord");
    cu(cudaStreamWaitEvent(comm_stream, coll_in, 0), "cudaStreamWaitEvent");
    return comm_stream;
}
static void coll_end(void) {
    cu(cudaEventRecord(coll_out, comm_stream), "cudaEventRecord");
    cu(cudaStreamWaitEvent(stream(), coll_out, 0), "cudaStreamWaitEvent");
}
static void comm_allreduce_sum_(const Group* g, float* buf, size_t n) {
    if (g->size == 1 || !n) return;
    if (resolved == T_MPI) { staged_allreduce(g, buf, n, MPI_SUM); return; }
    cuda_backend_note_collective("ncclAllReduce", n * sizeof(float));
    nc(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, nccl_of(g), coll_begin()), "ncclAllReduce (sum)");
    coll_end();
}
static void comm_allreduce_sum_f64_(const Group* g, double* buf, size_t n) {
    if (g->size == 1 || !n) return;
    if (resolved == T_MPI) {   // staged as 2 n floats' bytes
        float* h = staged(2 * n);
        d2h(h, (const float*)buf, 2 * n);
        mpi_allreduce(g, h, n, MPI_DOUBLE, sizeof(double), MPI_SUM);
        h2d((float*)buf, h, 2 * n);
        return;
    }
    cuda_backend_note_collective("ncclAllReduce", n * sizeof(double));
    nc(ncclAllReduce(buf, buf, n, ncclDouble, ncclSum, nccl_of(g), coll_begin()), "ncclAllReduce (sum, double)");
    coll_end();
}
static void comm_allreduce_max_(const Group* g, float* buf, size_t n) {
    if (g->size == 1 || !n) return;
    if (resolved == T_MPI) { staged_allreduce(g, buf, n, MPI_MAX); return; }
    cuda_backend_note_collective("ncclAllReduce", n * sizeof(float));
    nc(ncclAllReduce(buf, buf, n, ncclFloat, ncclMax, nccl_of(g), coll_begin()), "ncclAllReduce (max)");
    coll_end();
}
static void comm_broadcast_(const Group* g, float* buf, size_t n, int root) {
    if (g->size == 1 || !n) return;
    if (resolved == T_MPI) {
        float* h = staged(n);
        if (g->rank == root) d2h(h, buf, n);
        ctl_bcast(g, h, n * sizeof(float), root);
        if (g->rank != root) h2d(buf, h, n);
        return;
    }
    cuda_backend_note_collective("ncclBroadcast", n * sizeof(float));
    nc(ncclBroadcast(buf, buf, n, ncclFloat, root, nccl_of(g), coll_begin()), "ncclBroadcast");
    coll_end();
}
// Staged all-gather: the other parts zeroed, then summed (x + 0 is exact, so every part arrives unchanged).
// Staged reduce-scatter: a sum over the whole buffer (the own part is what reduce-scatter defines).
static void comm_allgather_(const Group* g, float* buf, size_t n) {
    if (g->size == 1 || !n) return;
    if (resolved == T_MPI) {
        size_t all = (size_t)g->size * n;
        float* h = staged(all);
        d2h(h + (size_t)g->rank * n, buf + (size_t)g->rank * n, n);
        memset(h, 0, (size_t)g->rank * n * sizeof(float));
        memset(h + (size_t)(g->rank + 1) * n, 0, (all - (size_t)(g->rank + 1) * n) * sizeof(float));
        mpi_allreduce(g, h, all, MPI_FLOAT, sizeof(float), MPI_SUM);
        h2d(buf, h, all);
        return;
    }
    cuda_backend_note_collective("ncclAllGather", (size_t)g->size * n * sizeof(float));
    nc(ncclAllGather(buf + (size_t)g->rank * n, buf, n, ncclFloat, nccl_of(g), coll_begin()), "ncclAllGather");
    coll_end();
}
static void comm_reduce_scatter_sum_(const Group* g, float* buf, size_t n) {
    if (g->size == 1 || !n) return;
    if (resolved == T_MPI) { staged_allreduce(g, buf, (size_t)g->size * n, MPI_SUM); return; }
    cuda_backend_note_collective("ncclReduceScatter", (size_t)g->size * n * sizeof(float));
    nc(ncclReduceScatter(buf, buf + (size_t)g->rank * n, n, ncclFloat, ncclSum, nccl_of(g), coll_begin()),
       "ncclReduceScatter");
    coll_end();
}

// all-to-all: nccl: one group of a send and a receive per peer (the own block copied on the compute stream);
// mpi: the whole buffer staged to the host, exchanged pairwise, staged back
static void comm_alltoall_(const Group* g, const float* send, float* recv, size_t n) {
    if (!n) return;
    if (g->size == 1) {
        cu(cudaMemcpyAsync(recv, send, n * sizeof(float), cudaMemcpyDeviceToDevice, stream()), "comm_alltoall (copy)");
        return;
    }
    size_t all = (size_t)g->size * n;
    if (resolved == T_MPI) {
        float* h = staged(2 * all);
        d2h(h, send, all);
        mpi_alltoall(g, h, h + all, n, "comm_alltoall");
        h2d(recv, h + all, all);
        return;
    }
    cu(cudaMemcpyAsync(recv + (size_t)g->rank * n, send + (size_t)g->rank * n, n * sizeof(float), cudaMemcpyDeviceToDevice,
                       stream()), "comm_alltoall (own block)");
    cuda_backend_note_collective("ncclSend/ncclRecv (all-to-all)", (size_t)g->size * n * sizeof(float));
    cudaStream_t cs = coll_begin();
    nc(ncclGroupStart(), "ncclGroupStart");
    for (int j = 0; j < g->size; j++) {
        if (j == g->rank) continue;
        nc(ncclSend(send + (size_t)j * n, n, ncclFloat, j, nccl_of(g), cs), "ncclSend (all-to-all)");
        nc(ncclRecv(recv + (size_t)j * n, n, ncclFloat, j, nccl_of(g), cs), "ncclRecv (all-to-all)");
    }
    nc(ncclGroupEnd(), "ncclGroupEnd (all-to-all)");
    coll_end();
}

// ---- the ring hop ----
// A request holds up to MAX_HOPS hops started since its last wait. nccl: one event per hop, recorded on the
// communication stream after the hop's group. mpi: per hop a pinned send and receive buffer (kept and reused
// by the request), the MPI requests of its messages, and the device address the received data goes to.
#define MAX_HOPS 16
#define MAX_MSG 64
typedef struct {
    cudaEvent_t done;                // nccl
    const Group* g;                  // mpi
    float *hsend, *hrecv, *drecv;
    cudaEvent_t landed;              // recorded after the copy of hrecv to the device (hrecv is free again)
    int landing;
    size_t cap, n;
    MPI_Request rq[MAX_MSG];
    int nrq;
} Hop;
struct CommReq { Hop hop[MAX_HOPS]; int n; cudaEvent_t ready; };

CommReq* comm_req_create(void) {
    CommReq* r = calloc(1, sizeof *r);
    if (!r) die("comm_req_create", "out of memory");
    return r;
}
void comm_req_free(CommReq* r) {
    if (!r) return;
    comm_wait(r);
    for (int i = 0; i < MAX_HOPS; i++) {
        if (r->hop[i].landing) cu(cudaEventSynchronize(r->hop[i].landed), "comm_req_free (a landing copy)");
        if (r->hop[i].done) cudaEventDestroy(r->hop[i].done);
        if (r->hop[i].hsend) cudaFreeHost(r->hop[i].hsend);
        if (r->hop[i].hrecv) cudaFreeHost(r->hop[i].hrecv);
        if (r->hop[i].landed) cudaEventDestroy(r->hop[i].landed);
    }
    if (r->ready) cudaEventDestroy(r->ready);
    free(r);
}

static Hop* next_hop(CommReq* r) {
    if (r->n == MAX_HOPS) {
        fprintf(stderr, "comm: more than %d transfers in flight on one request (wait before starting more)\n", MAX_HOPS);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return &r->hop[r->n++];
}

// One direction of a staged hop as at most two messages: n floats longer than one MPI call's count go as blocks
// of a contiguous type, plus the remainder; MPI matches messages between one pair in posting order.
static void post(const Group* g, Hop* h, float* buf, size_t n, int peer, int recv) {
    size_t block = (n + mpi_max_count() - 1) / mpi_max_count(), head = block > 1 ? n / block * block : 0;
    MPI_Datatype t = MPI_FLOAT;
    if (head) { MPI_Type_contiguous((int)block, MPI_FLOAT, &t); MPI_Type_commit(&t); }
    struct { float* p; size_t count; MPI_Datatype type; } part[2] = { { buf, head ? head / block : 0, t },
                                                                     { buf + head, n - head, MPI_FLOAT } };
    for (int i = 0; i < 2; i++) {
        if (!part[i].count) continue;
        if (h->nrq == MAX_MSG) die("comm_hop", "too many messages in flight on one hop");
        if (recv) MPI_Irecv(part[i].p, (int)part[i].count, part[i].type, peer, 0, g->comm, &h->rq[h->nrq++]);
        else MPI_Isend(part[i].p, (int)part[i].count, part[i].type, peer, 0, g->comm, &h->rq[h->nrq++]);
    }
    if (head) MPI_Type_free(&t);   // freed types stay valid for the operations already started
}

static void comm_hop_(const Group* g, const float* send, size_t ns, float* recv, size_t nr, CommReq* r) {
    Hop* h = next_hop(r);
    int next = (g->rank + 1) % g->size, prev = (g->rank - 1 + g->size) % g->size;
    size_t n = ns > nr ? ns : nr;
    h->n = nr;
    if (g->size == 1) {   // a ring of one: the block comes back to itself
        if (ns && nr)
            cu(cudaMemcpyAsync(recv, send, nr * sizeof(float), cudaMemcpyDeviceToDevice, stream()), "comm_hop (copy)");
        h->nrq = 0; h->drecv = NULL;
        if (resolved == T_NCCL) {
            if (!h->done) cu(cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming), "cudaEventCreate");
            cu(cudaEventRecord(h->done, stream()), "cudaEventRecord");
        }
        return;
    }
    if (resolved == T_NCCL) {
        if (!r->ready) cu(cudaEventCreateWithFlags(&r->ready, cudaEventDisableTiming), "cudaEventCreate");
        if (!h->done) cu(cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming), "cudaEventCreate");
        cu(cudaEventRecord(r->ready, stream()), "cudaEventRecord");            // send after what wrote it
        cu(cudaStreamWaitEvent(comm_stream, r->ready, 0), "cudaStreamWaitEvent");
        cuda_backend_note_collective("ncclSend/ncclRecv (ring hop)", n * sizeof(float));
        nc(ncclGroupStart(), "ncclGroupStart");
        if (ns) nc(ncclSend(send, ns, ncclFloat, next, nccl_of(g), comm_stream), "ncclSend (ring hop)");
        if (nr) nc(ncclRecv(recv, nr, ncclFloat, prev, nccl_of(g), comm_stream), "ncclRecv (ring hop)");
        nc(ncclGroupEnd(), "ncclGroupEnd (ring hop)");
        cu(cudaEventRecord(h->done, comm_stream), "cudaEventRecord");
        return;
    }
    // the copy that landed this slot's previous hop reads hrecv: wait for it before hrecv is reused or freed
    if (h->landing && cudaEventQuery(h->landed) == cudaErrorNotReady) {   // a host wait the anatomy counts
        cudaGetLastError();
        cuda_backend_note_sync("staged ring hop (the previous block still landing)");
    }
    if (h->landing) cu(cudaEventSynchronize(h->landed), "comm_hop (host to device)");
    h->landing = 0;
    if (n > h->cap) {
        if (h->hsend) cudaFreeHost(h->hsend);
        if (h->hrecv) cudaFreeHost(h->hrecv);
        h->cap = n;
        cu(cudaMallocHost((void**)&h->hsend, n * sizeof(float)), "cudaMallocHost (ring hop)");
        cu(cudaMallocHost((void**)&h->hrecv, n * sizeof(float)), "cudaMallocHost (ring hop)");
    }
    h->nrq = 0;
    h->g = g;
    h->drecv = nr ? recv : NULL;
    if (nr) post(g, h, h->hrecv, nr, prev, 1);
    if (ns) { d2h(h->hsend, send, ns); post(g, h, h->hsend, ns, next, 0); }
}

// a finished hop: the compute stream waits for it (nccl) or receives its data (mpi)
static void land(Hop* h) {
    if (resolved == T_NCCL) cu(cudaStreamWaitEvent(stream(), h->done, 0), "cudaStreamWaitEvent");
    else if (h->drecv) {
        cuda_backend_note_xfer(1, h->n * sizeof(float));
        cu(cudaMemcpyAsync(h->drecv, h->hrecv, h->n * sizeof(float), cudaMemcpyHostToDevice, stream()),
           "comm_hop (host to device)");
        if (!h->landed) cu(cudaEventCreateWithFlags(&h->landed, cudaEventDisableTiming), "cudaEventCreate");
        cu(cudaEventRecord(h->landed, stream()), "cudaEventRecord");
        h->landing = 1;
    }
}

static int comm_test_(CommReq* r) {
    for (int i = 0; i < r->n; i++) {
        Hop* h = &r->hop[i];
        if (resolved == T_NCCL) {
            cudaError_t e = cudaEventQuery(h->done);
            if (e == cudaErrorNotReady) return 0;
            cu(e, "comm_test (the ring hop failed)");
        } else if (h->nrq) {
            int done = 0;
            MPI_Testall(h->nrq, h->rq, &done, MPI_STATUSES_IGNORE);
            if (!done) return 0;
        }
    }
    for (int i = 0; i < r->n; i++) land(&r->hop[i]);
    r->n = 0;
    return 1;
}

static void comm_wait_(CommReq* r) {
    for (int i = 0; i < r->n; i++) {
        Hop* h = &r->hop[i];
        if (resolved != T_NCCL && h->nrq) comm_watch_wait(h->g, h->nrq, h->rq, "ring hop", NULL);
        land(h);
    }
    r->n = 0;
}

// nccl: the all-gather on the communication stream after what the compute stream holds now, its completion recorded
// as a hop of r (comm_wait makes the compute stream wait for it); mpi: done now, r left empty
static void comm_allgather_start_(const Group* g, float* buf, size_t n, CommReq* r) {
    if (resolved != T_NCCL || g->size == 1 || !n) { comm_allgather_(g, buf, n); return; }
    Hop* h = next_hop(r);
    h->nrq = 0; h->drecv = NULL;
    if (!r->ready) cu(cudaEventCreateWithFlags(&r->ready, cudaEventDisableTiming), "cudaEventCreate");
    if (!h->done) cu(cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming), "cudaEventCreate");
    cu(cudaEventRecord(r->ready, stream()), "cudaEventRecord");
    cu(cudaStreamWaitEvent(comm_stream, r->ready, 0), "cudaStreamWaitEvent");
    cuda_backend_note_collective("ncclAllGather (started, communication stream)", (size_t)g->size * n * sizeof(float));
    nc(ncclAllGather(buf + (size_t)g->rank * n, buf, n, ncclFloat, nccl_of(g), comm_stream), "ncclAllGather (started)");
    cu(cudaEventRecord(h->done, comm_stream), "cudaEventRecord");
}

// ---- the public calls: bracketed for the backend's profile (class "communication waits") ----
void comm_allreduce_sum(const Group* g, float* buf, size_t n) {
    attach_late(g);
    comm_traffic_count(TRAFFIC_ALLREDUCE, g, n, 0);
    cuda_backend_prof_comm(1);
    comm_allreduce_sum_(g, buf, n);
    cuda_backend_prof_comm(0);
}
void comm_allreduce_sum_f64(const Group* g, double* buf, size_t n) {
    attach_late(g);
    comm_traffic_count(TRAFFIC_ALLREDUCE, g, 2 * n, 0);
    cuda_backend_prof_comm(1);
    comm_allreduce_sum_f64_(g, buf, n);
    cuda_backend_prof_comm(0);
}
void comm_allreduce_max(const Group* g, float* buf, size_t n) {
    attach_late(g);
    comm_traffic_count(TRAFFIC_ALLREDUCE, g, n, 0);
    cuda_backend_prof_comm(1);
    comm_allreduce_max_(g, buf, n);
    cuda_backend_prof_comm(0);
}
void comm_broadcast(const Group* g, float* buf, size_t n, int root) {
    attach_late(g);
    comm_traffic_count(TRAFFIC_BCAST, g, n, root);
    cuda_backend_prof_comm(1);
    comm_broadcast_(g, buf, n, root);
    cuda_backend_prof_comm(0);
}
void comm_allgather(const Group* g, float* buf, size_t n) {
    attach_late(g);
    comm_traffic_count(TRAFFIC_PARTS, g, n, 0);
    cuda_backend_prof_comm(1);
    comm_allgather_(g, buf, n);
    cuda_backend_prof_comm(0);
}
void comm_reduce_scatter_sum(const Group* g, float* buf, size_t n) {
    attach_late(g);
    comm_traffic_count(TRAFFIC_PARTS, g, n, 0);
    cuda_backend_prof_comm(1);
    comm_reduce_scatter_sum_(g, buf, n);
    cuda_backend_prof_comm(0);
}
void comm_allgather_start(const Group* g, float* buf, size_t n, CommReq* r) {
    attach_late(g);
    comm_traffic_count(TRAFFIC_PARTS, g, n, 0);
    cuda_backend_prof_comm(1);
    comm_allgather_start_(g, buf, n, r);
    cuda_backend_prof_comm(0);
}
void comm_hop_sized(const Group* g, const float* send, size_t ns, float* recv, size_t nr, CommReq* r) {
    attach_late(g);
    if (!send) ns = 0;
    if (!recv) nr = 0;
    if (ns) comm_traffic_count(TRAFFIC_HOP, g, ns, 0);
    cuda_backend_prof_comm(1);
    comm_hop_(g, send, ns, recv, nr, r);
    cuda_backend_prof_comm(0);
}
void comm_hop(const Group* g, const float* send, float* recv, size_t n, CommReq* r) { comm_hop_sized(g, send, n, recv, n, r); }
void comm_alltoall(const Group* g, const float* send, float* recv, size_t n) {
    attach_late(g);
    comm_traffic_count(TRAFFIC_A2A, g, n, 0);
    cuda_backend_prof_comm(1);
    comm_alltoall_(g, send, recv, n);
    cuda_backend_prof_comm(0);
}
int comm_test(CommReq* r) {
    cuda_backend_prof_comm(1);
    int done = comm_test_(r);
    cuda_backend_prof_comm(0);
    return done;
}
void comm_wait(CommReq* r) {
    cuda_backend_prof_comm(1);
    comm_wait_(r);
    cuda_backend_prof_comm(0);
}
