// emu_nccl.cc — NCCL for the host emulation, carried over MPI between the emulated ranks (see nccl.h).
//
// A communicator is an MPI communicator of its members, made from the unique id (which names the world rank
// that created it): every member tells the creator its world rank, the creator answers with the member list in
// NCCL rank order, and the members create the group's communicator. Members must be on different emulated
// devices, as NCCL requires.
// An operation is posted when it is enqueued (at ncclGroupEnd inside a group): its send data is copied then
// (everything before it on its stream has run), its receive buffer is filled with NaN bytes (the data is in
// flight: reading it before the operation completes is a race, and shows), and nonblocking MPI transfers
// start. It completes in stream order: when a later operation on its stream runs, when an event recorded after
// it is waited for or queried, or at a synchronisation; then the received data lands. Reductions gather every
// rank's contribution and sum them in rank order, so every rank gets the same bits. An operation that does not
// complete within RINGLM_EMU_TIMEOUT_S (default 300) ends the job with one line naming it.
// Progress across communicators: NCCL promises none to two operations of different communicators that can run at
// the same time (NCCL's maintainers: two NCCL operations on two streams may hang), so an operation posted while one
// of another communicator on another stream is not ordered before it by an event ends the job with one line naming
// both (emu::nccl_order) — where a real GPU could deadlock, whether or not this run's ranks would have. Operations
// on one stream run one after the other (the next is posted when the one before it completed), so ranks that issue
// one stream's operations of two communicators in different orders hang here as they would on a GPU, and end after
// the timeout with one line.
#include "emu_internal.h"
#include "nccl.h"
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mpi.h>
#include <unistd.h>
#include <vector>

struct EmuNccl {
    MPI_Comm comm;
    int rank, size;
    bool dead;
};

namespace {
const int TAG_INIT = 31000, TAG_P2P = 30999;
char g_last[512];
unsigned g_ids = 0;

ncclResult_t err(ncclResult_t r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t err(ncclResult_t r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_last, sizeof g_last, fmt, ap);
    va_end(ap);
    return r;
}

size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    }
    return 0;
}

template <class T> void reduce_into(T* out, const unsigned char* all, size_t count, int nranks, ncclRedOp_t op) {
    const T* x = (const T*)all;
    for (size_t i = 0; i < count; i++) {
        T a = x[i];
        for (int r = 1; r < nranks; r++) {
            T b = x[(size_t)r * count + i];
            a = op == ncclSum || op == ncclAvg ? a + b : op == ncclProd ? a * b : op == ncclMax ? (b > a ? b : a) : (b < a ? b : a);
        }
        if (op == ncclAvg) a = a / (T)nranks;
        out[i] = a;
    }
}
void reduce(void* out, const unsigned char* all, size_t count, int nranks, ncclDataType_t t, ncclRedOp_t op) {
    switch (t) {
    case ncclFloat32: reduce_into((float*)out, all, count, nranks, op); break;
    case ncclFloat64: reduce_into((double*)out, all, count, nranks, op); break;
    case ncclInt32: reduce_into((int32_t*)out, all, count, nranks, op); break;
    case ncclUint32: reduce_into((uint32_t*)out, all, count, nranks, op); break;
    case ncclInt64: reduce_into((int64_t*)out, all, count, nranks, op); break;
    case ncclUint64: reduce_into((uint64_t*)out, all, count, nranks, op); break;
    case ncclInt8: reduce_into((int8_t*)out, all, count, nranks, op); break;
    case ncclUint8: reduce_into((uint8_t*)out, all, count, nranks, op); break;
    default: emu::die("NCCL reduction of a 16-bit floating-point type is not emulated");
    }
}

enum Kind { ALLREDUCE, BROADCAST, ALLGATHER, REDUCESCATTER, SEND, RECV };
const char* kind_name[] = { "ncclAllReduce", "ncclBroadcast", "ncclAllGather", "ncclReduceScatter", "ncclSend", "ncclRecv" };

struct Op : emu::Deferred {
    Kind kind;
    EmuNccl* c;
    const void* send;
    void* recv;
    size_t count, es;
    ncclDataType_t type;
    ncclRedOp_t red;
    int peer;              // root (broadcast) or peer (send, receive)
    cudaStream_t stream;
    std::vector<unsigned char> out, in;
    MPI_Request rq = MPI_REQUEST_NULL;
    double started = 0;

    bool test() override {
        int done = 0;
        MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
        return done != 0;
    }
    void wait() override {
        double t0 = emu::now(), limit = 300;
        const char* s = getenv("RINGLM_EMU_TIMEOUT_S");
        if (s && atof(s) > 0) limit = atof(s);
        for (long i = 0;; i++) {
            if (test()) return;
            if (emu::now() - t0 > limit)
                emu::die("%s of %zu elements on a communicator of %d ranks (this is rank %d) did not complete within %.0f s: "
                         "a peer did not take part", kind_name[kind], count, c->size, c->rank, limit);
            if (i > 1000) usleep(100);
        }
    }
    void finish() override {
        size_t bytes = count * es;
        switch (kind) {
        case ALLREDUCE: reduce(recv, in.data(), count, c->size, type, red); break;
        case REDUCESCATTER: reduce(recv, in.data(), count, c->size, type, red); break;
        case BROADCAST: case RECV: memcpy(recv, in.data(), bytes); break;
        case ALLGATHER: memcpy(recv, in.data(), bytes * c->size); break;
        case SEND: break;
        }
    }
};

int g_depth = 0;
std::vector<Op*> g_queued;
unsigned long g_launch = 0;   // launches: one per ungrouped operation or ncclGroupEnd (emu::nccl_order's group)

int mpi_ready() {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    if (init) MPI_Finalized(&fin);
    return init && !fin;
}

int check_count(size_t bytes) { return bytes <= (size_t)0x7fffffff; }

// post one operation of a group whose stream's turn came at time t (emu::begin_op): the operations of one group
// are one NCCL kernel on a real GPU and run together; the next group on the stream starts after this one ends
void post(Op* o, uint64_t t) {
    emu::Stream* s = emu::stream_of(o->stream);
    const char* name = kind_name[o->kind];
    size_t bytes = o->count * o->es, n = (size_t)o->c->size;
    size_t sbytes = o->kind == REDUCESCATTER ? bytes * n : bytes, rbytes = o->kind == ALLGATHER ? bytes * n : bytes;
    bool sends = o->kind != RECV && !(o->kind == BROADCAST && o->c->rank != o->peer);
    bool recvs = o->kind != SEND;
    emu::nccl_order(s, t, name, o->c, o->c->size, g_launch);
    if (sends) emu::access(s, t, name, o->send, sbytes, false);
    if (recvs) emu::access(s, t, name, o->recv, rbytes, true);
    {
        emu::DeviceAccess da;
        if (sends) o->out.assign((const unsigned char*)o->send, (const unsigned char*)o->send + sbytes);
        if (recvs) memset(o->recv, 0xFF, rbytes);   // in flight
    }
    MPI_Comm comm = o->c->comm;
    int b = (int)bytes;
    switch (o->kind) {
    case ALLREDUCE:
        o->in.resize(bytes * n);
        MPI_Iallgather(o->out.data(), b, MPI_BYTE, o->in.data(), b, MPI_BYTE, comm, &o->rq);
        break;
    case REDUCESCATTER:
        o->in.resize(bytes * n);
        MPI_Ialltoall(o->out.data(), b, MPI_BYTE, o->in.data(), b, MPI_BYTE, comm, &o->rq);
        break;
    case ALLGATHER:
        o->in.resize(bytes * n);
        MPI_Iallgather(o->out.data(), b, MPI_BYTE, o->in.data(), b, MPI_BYTE, comm, &o->rq);
        break;
    case BROADCAST:
        if (o->c->rank == o->peer) o->in = o->out;
        else o->in.resize(bytes);
        MPI_Ibcast(o->in.data(), b, MPI_BYTE, o->peer, comm, &o->rq);
        break;
    case SEND: MPI_Isend(o->out.data(), b, MPI_BYTE, o->peer, TAG_P2P, comm, &o->rq); break;
    case RECV:
        o->in.resize(bytes);
        MPI_Irecv(o->in.data(), b, MPI_BYTE, o->peer, TAG_P2P, comm, &o->rq);
        break;
    }
    o->op = name;
    emu::defer(s, o);
}

ncclResult_t enqueue(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t red, int peer,
                     ncclComm_t c, cudaStream_t stream) {
    const char* name = kind_name[kind];
    if (!c || c->dead) return err(ncclInvalidArgument, "%s: an invalid or destroyed communicator", name);
    size_t es = type_size(type);
    if (!es) return err(ncclInvalidArgument, "%s: unknown data type %d", name, (int)type);
    size_t bytes = count * es, n = (size_t)c->size;
    if (!check_count(bytes * n)) return err(ncclInvalidArgument, "%s: %zu bytes exceed this emulation's 2 GiB per message", name, bytes * n);
    if ((kind == SEND || kind == RECV || kind == BROADCAST) && (peer < 0 || peer >= c->size))
        return err(ncclInvalidArgument, "%s: rank %d of a communicator of %d", name, peer, c->size);
    if (kind == SEND && peer == c->rank) return err(ncclInvalidUsage, "%s to itself", name);
    bool sends = kind != RECV && !(kind == BROADCAST && c->rank != peer);
    if (count) {
        if (sends) emu::need_device(name, "the send buffer", send, kind == REDUCESCATTER ? bytes * n : bytes);
        if (kind != SEND) emu::need_device(name, "the receive buffer", recv, kind == ALLGATHER ? bytes * n : bytes);
    }
    emu::stream_of(stream);
    if (!count) return ncclSuccess;
    Op* o = new Op();
    o->kind = kind; o->c = c; o->send = send; o->recv = recv; o->count = count; o->es = es; o->type = type; o->red = red;
    o->peer = peer; o->stream = stream;
    if (g_depth > 0) g_queued.push_back(o);
    else {
        g_launch++;
        post(o, emu::begin_op(emu::stream_of(stream), name));
    }
    return ncclSuccess;
}

struct IdBody { char magic[8]; int creator; unsigned serial; };
}   // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return g_last[0] ? g_last : "invalid argument";
    case ncclInvalidUsage: return g_last[0] ? g_last : "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}
const char* ncclGetLastError(ncclComm_t comm) { (void)comm; return g_last; }
ncclResult_t ncclGetVersion(int* v) { *v = 22809; return ncclSuccess; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    if (!mpi_ready()) return err(ncclSystemError, "ncclGetUniqueId: the emulation carries NCCL over MPI, which is not initialised");
    memset(id, 0, sizeof *id);
    IdBody b;
    memcpy(b.magic, "EMUNCCL", 8);
    MPI_Comm_rank(MPI_COMM_WORLD, &b.creator);
    b.serial = g_ids++;
    memcpy(id->internal, &b, sizeof b);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
    emu::ensure_init();
    if (!mpi_ready()) return err(ncclSystemError, "ncclCommInitRank: MPI is not initialised");
    IdBody b;
    memcpy(&b, id.internal, sizeof b);
    if (memcmp(b.magic, "EMUNCCL", 8)) return err(ncclInvalidArgument, "ncclCommInitRank: not a unique id from ncclGetUniqueId");
    if (nranks < 1 || rank < 0 || rank >= nranks) return err(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int tag = TAG_INIT - (int)(b.serial % 1000) * 2;
    std::vector<int> world(nranks, -1);
    if (me == b.creator) {
        world[rank] = me;
        for (int i = 0; i < nranks - 1; i++) {
            int msg[2];
            MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (msg[0] < 0 || msg[0] >= nranks || world[msg[0]] >= 0)
                emu::die("ncclCommInitRank: two members claim rank %d of %d", msg[0], nranks);
            world[msg[0]] = msg[1];
        }
        for (int r = 0; r < nranks; r++)
            if (world[r] != me) MPI_Send(world.data(), nranks, MPI_INT, world[r], tag - 1, MPI_COMM_WORLD);
    } else {
        int msg[2] = { rank, me };
        MPI_Send(msg, 2, MPI_INT, b.creator, tag, MPI_COMM_WORLD);
        MPI_Recv(world.data(), nranks, MPI_INT, b.creator, tag - 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Group wg, g;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_incl(wg, nranks, world.data(), &g);
    MPI_Comm c;
    MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, &c);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    // NCCL refuses two ranks of one communicator on one device
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceProp p;
    cudaGetDeviceProperties(&p, dev);
    std::vector<char> uu((size_t)nranks * 16);
    MPI_Allgather(p.uuid.bytes, 16, MPI_BYTE, uu.data(), 16, MPI_BYTE, c);
    for (int i = 0; i < nranks; i++)
        for (int j = i + 1; j < nranks; j++)
            if (!memcmp(&uu[(size_t)i * 16], &uu[(size_t)j * 16], 16)) {
                MPI_Comm_free(&c);
                return err(ncclInvalidUsage, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", i, j, dev);
            }
    EmuNccl* e = new EmuNccl();
    e->comm = c;
    e->rank = rank;
    e->size = nranks;
    e->dead = false;
    *comm = e;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm || comm->dead) return err(ncclInvalidArgument, "ncclCommDestroy: an invalid communicator");
    cudaDeviceSynchronize();
    comm->dead = true;
    MPI_Comm_free(&comm->comm);
    return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }
ncclResult_t ncclCommCount(ncclComm_t comm, int* count) { *count = comm->size; return ncclSuccess; }
ncclResult_t ncclCommUserRank(ncclComm_t comm, int* rank) { *rank = comm->rank; return ncclSuccess; }

ncclResult_t ncclGroupStart(void) { g_depth++; return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) {
    if (g_depth <= 0) return err(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--g_depth == 0) {
        std::vector<Op*> q;
        q.swap(g_queued);
        g_launch++;
        std::vector<std::pair<cudaStream_t, uint64_t>> turn;   // each stream's turn, taken before anything is posted
        for (Op* o : q) {
            bool seen = false;
            for (auto& x : turn) seen |= x.first == o->stream;
            if (!seen) turn.push_back({ o->stream, emu::begin_op(emu::stream_of(o->stream), kind_name[o->kind]) });
        }
        for (Op* o : q)
            for (auto& x : turn)
                if (x.first == o->stream) { post(o, x.second); break; }
    }
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t s) {
    return enqueue(ALLREDUCE, send, recv, count, t, op, 0, comm, s);
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                           cudaStream_t s) {
    return enqueue(BROADCAST, send, recv, count, t, ncclSum, root, comm, s);
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t comm, cudaStream_t s) {
    return enqueue(ALLGATHER, send, recv, count, t, ncclSum, 0, comm, s);
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t s) {
    return enqueue(REDUCESCATTER, send, recv, count, t, op, 0, comm, s);
}
ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s) {
    return enqueue(SEND, send, NULL, count, t, ncclSum, peer, comm, s);
}
ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t s) {
    return enqueue(RECV, NULL, recv, count, t, ncclSum, peer, comm, s);
}

}   // extern "C"
