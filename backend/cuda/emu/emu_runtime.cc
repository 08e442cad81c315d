// emu_runtime.cc — a host emulation of the CUDA runtime for ringlm's CUDA backend (make cuda-emu): the real
// sources (backend_cuda.cu, attn_cuda.cu, comm/data_cuda.c) compiled by the host compiler against
// backend/cuda/emu/include/ run on a machine without a GPU, and run strictly:
//
// Device: one emulated Hopper GPU per cudaSetDevice index (RINGLM_EMU_DEVICES per node, default 8; 0 = no
//   device), with an H200's limits (132 SMs, 1024 threads per block, 48 KiB of shared memory per block without
//   the opt-in attribute, 227 KiB with it) and RINGLM_EMU_MEMORY_MIB of memory (default 16384).
//   RINGLM_EMU_CC (default 9.0) sets the compute capability (8.0, 8.6, 8.9: that GPU's shared memory, SMs, threads per SM).
// Pinned host memory: freeing it (cudaFreeHost) while an asynchronous copy from or to it may be running (queued, and
//   not waited for by the host through a synchronisation that covers it) ends the process with one line.
// Memory: every device allocation lies in an address range reserved for the emulated device and ends at a
//   page followed by a guard page; freed allocations stay unmapped (never reused), new allocations are filled with
//   NaN bytes: cudaMalloc's up to 16 MiB (larger ones read as zero until written), cudaMallocAsync's (pool memory,
//   uninitialised and reused on a GPU) and cudaMallocHost's (pinned host memory) whatever their size.
//   RINGLM_EMU_MALLOC_ASYNC: ok (default); unsupported (cudaDevAttrMemoryPoolsSupported is 0 and cudaMallocAsync /
//   cudaFreeAsync fail with cudaErrorNotSupported, as on runtimes without stream-ordered pools); fails (the
//   attribute says 1, the calls still fail). Device memory is mapped readable and writable only while the emulation itself runs an
//   operation (a kernel, a copy, a memset, cuBLAS, NCCL); at any other time a dereference by host code ends the
//   process with one line naming the function (RINGLM_EMU_HOSTCHECK=0 turns that off for speed). An access
//   past the end of an allocation, of freed memory or outside any allocation ends it likewise, naming the
//   kernel, block and thread, or the call. Kernel pointer arguments must point into live device memory (or
//   pinned host memory); copies must stay inside their allocations and match their cudaMemcpyKind.
// Streams: operations run when they are enqueued, in stream order; NCCL operations complete later (when
//   something waits for them: a later operation on their stream or on a stream that waits for an event recorded
//   after them, an event query or synchronisation, a stream synchronisation; cudaStreamWaitEvent itself returns at
//   once, as on a GPU). Each stream carries a vector clock; events, stream waits and host
//   synchronisations merge clocks. An operation that touches bytes another stream touched (one of the two a
//   write) without an event ordering them ends the process with one line naming both operations. Kernels are
//   known by their pointer arguments (a pointer to const is a read, others reads and writes; pointers inside
//   struct arguments count as reads).
// Kernels: see emu_device.h (fibers, barriers, warp collectives, shared memory, launch limits). The blocks of a launch
//   run one after another in a fixed permutation of their index, not ascending (block_order: CUDA promises no order).
// Dry runs (RINGLM_EMU_DRY=1): every check above runs, but no kernel, copy, memset or cuBLAS call is executed and
//   new allocations are not filled: the program's own host code runs as usual on device memory that stays zero, so
//   the step anatomy can count the work of shapes far beyond this machine (results are meaningless).
// Traffic (RINGLM_EMU_TRAFFIC=1): each kernel runs with device memory unmapped; the first read or write of a page
//   faults, is recorded and the page opened (read-only first, read-write at the first write), so the pages a kernel
//   read and wrote are counted (emu_traffic_last): what the step anatomy's declared traffic is checked against.
// What it cannot show: timing, occupancy and register limits, __launch_bounds__ (not checked), bank conflicts,
// memory-model effects that real hardware orders differently, the hardware's accumulation order inside mma
// and cuBLAS (here: fp32 in k order, or OpenBLAS's), and anything the CUDA driver does that is not modelled.
#include "emu_internal.h"
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <deque>
#include <dlfcn.h>
#include <map>
#include <mpi.h>
#include <signal.h>
#include <string>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <vector>

uint3 threadIdx, blockIdx;
dim3 blockDim, gridDim;

namespace emu {

static const size_t PAGE = 4096;
static const size_t POISON_MAX = 16 << 20;
static inline size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

double now(void) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// ---------------------------------------------------------------------------------------------------------
// errors

void die(const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda emulation: %s\n", buf);
    fflush(stderr);
    fflush(stdout);
    int init = 0, fin = 0, size = 1;
    MPI_Initialized(&init);
    if (init) MPI_Finalized(&fin);
    if (init && !fin) MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

static cudaError_t g_last = cudaSuccess;
static cudaError_t g_detail_code = cudaSuccess;
static char g_detail[700];
static cudaError_t fail(cudaError_t e, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static cudaError_t fail(cudaError_t e, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_detail, sizeof g_detail, fmt, ap);
    va_end(ap);
    g_detail_code = e;
    g_last = e;
    return e;
}

// ---------------------------------------------------------------------------------------------------------
// the device

static bool g_init = false;
static int g_ndev = 8, g_dev = 0;
static cudaDeviceProp g_prop;
static size_t g_total = 0, g_used = 0;
static bool g_hostcheck = true;
static double g_timeout = 300;
static bool g_dry = false, g_traffic = false;
static int g_pools = 0;   // RINGLM_EMU_MALLOC_ASYNC: 0 ok, 1 unsupported, 2 fails
bool dry(void) { ensure_init(); return g_dry; }

static void on_fault(int sig, siginfo_t* si, void* ctx);
static void init_memory(void);

static long env_long(const char* name, long def, long lo, long hi) {
    const char* s = getenv(name);
    if (!s || !*s) return def;
    char* e;
    long v = strtol(s, &e, 10);
    if (*e || v < lo || v > hi) die("%s = '%s' must be an integer in [%ld, %ld]", name, s, lo, hi);
    return v;
}

static void fill_props(int dev) {
    memset(&g_prop, 0, sizeof g_prop);
    const char* cc = getenv("RINGLM_EMU_CC");
    int major = 9, minor = 0;
    if (cc && *cc && sscanf(cc, "%d.%d", &major, &minor) != 2) die("RINGLM_EMU_CC = '%s' must be major.minor", cc);
    snprintf(g_prop.name, sizeof g_prop.name, "NVIDIA H200 (host emulation)");
    char host[256] = "host";
    gethostname(host, sizeof host - 1);
    uint64_t h = 1469598103934665603ULL;
    for (const char* p = host; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    memcpy(g_prop.uuid.bytes, &h, 8);
    uint64_t d = 0x454d5544ULL << 32 | (unsigned)dev;   // "EMUD" + index
    memcpy(g_prop.uuid.bytes + 8, &d, 8);
    g_prop.totalGlobalMem = g_total;
    g_prop.sharedMemPerBlock = 48 << 10;
    g_prop.sharedMemPerBlockOptin = 232448;
    g_prop.sharedMemPerMultiprocessor = 233472;
    g_prop.regsPerBlock = 65536;
    g_prop.warpSize = 32;
    g_prop.maxThreadsPerBlock = 1024;
    g_prop.maxThreadsDim[0] = 1024; g_prop.maxThreadsDim[1] = 1024; g_prop.maxThreadsDim[2] = 64;
    g_prop.maxGridSize[0] = 2147483647; g_prop.maxGridSize[1] = 65535; g_prop.maxGridSize[2] = 65535;
    g_prop.major = major; g_prop.minor = minor;
    g_prop.multiProcessorCount = 132;
    g_prop.maxThreadsPerMultiProcessor = 2048;
    if (major == 8) {   // the shared memory, SMs and threads per SM of an A100 (8.0), A40 (8.6), L40S (8.9)
        snprintf(g_prop.name, sizeof g_prop.name, "NVIDIA %s (host emulation)", minor == 0 ? "A100" : minor == 9 ? "L40S" : "A40");
        g_prop.sharedMemPerBlockOptin = minor == 0 ? 166912 : 101376;
        g_prop.sharedMemPerMultiprocessor = minor == 0 ? 167936 : 102400;
        g_prop.multiProcessorCount = minor == 0 ? 108 : minor == 9 ? 142 : 84;
        g_prop.maxThreadsPerMultiProcessor = minor == 0 ? 2048 : 1536;
    }
    g_prop.l2CacheSize = 60 << 20;
    g_prop.clockRate = 1980000;
    g_prop.memoryClockRate = 3201000;
    g_prop.memoryBusWidth = 6144;
    g_prop.pciBusID = dev;
}

void ensure_init(void) {
    if (g_init) return;
    g_init = true;
    g_ndev = (int)env_long("RINGLM_EMU_DEVICES", 8, 0, 64);
    g_total = (size_t)env_long("RINGLM_EMU_MEMORY_MIB", 16384, 1, 1 << 22) << 20;
    g_hostcheck = env_long("RINGLM_EMU_HOSTCHECK", 1, 0, 1) != 0;
    g_timeout = (double)env_long("RINGLM_EMU_TIMEOUT_S", 300, 1, 86400);
    g_dry = env_long("RINGLM_EMU_DRY", 0, 0, 1) != 0;
    g_traffic = env_long("RINGLM_EMU_TRAFFIC", 0, 0, 1) != 0;
    const char* pm = getenv("RINGLM_EMU_MALLOC_ASYNC");
    if (pm && *pm) {
        if (!strcmp(pm, "ok")) g_pools = 0;
        else if (!strcmp(pm, "unsupported")) g_pools = 1;
        else if (!strcmp(pm, "fails")) g_pools = 2;
        else die("RINGLM_EMU_MALLOC_ASYNC = '%s' must be ok, unsupported or fails", pm);
    }
    fill_props(0);
    init_memory();
    // faults become one line: an alternate stack, so that a fiber's stack overflow is reported too
    static char altstack[1 << 16];
    stack_t ss;
    ss.ss_sp = altstack; ss.ss_size = sizeof altstack; ss.ss_flags = 0;
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
}
int device_index(void) { return g_dev; }
const cudaDeviceProp& props(void) { ensure_init(); return g_prop; }

// ---------------------------------------------------------------------------------------------------------
// memory

static uintptr_t g_space_lo, g_space_hi, g_bump;      // the reserved device address range
static std::map<uintptr_t, Alloc*> g_allocs;           // by lo, live and freed (device and pinned)
static std::vector<Alloc*> g_live_dev;                 // live device allocations (their protection toggles)
static unsigned long g_serial = 0;
static int g_device_depth = 0;                         // DeviceAccess nesting

static void init_memory(void) {
    size_t reserve = (size_t)1 << 40;   // 1 TiB of address space, no memory: PROT_NONE, never reused
    void* p = mmap(NULL, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        reserve = (size_t)1 << 36;
        p = mmap(NULL, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) die("cannot reserve address space for the emulated device memory");
    }
    g_space_lo = (uintptr_t)p;
    g_space_hi = g_space_lo + reserve;
    g_bump = g_space_lo + PAGE;   // a guard page first
}

bool in_device_space(const void* p) { return (uintptr_t)p >= g_space_lo && (uintptr_t)p < g_space_hi; }

Alloc* find_alloc(const void* p) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return NULL;
    --it;
    Alloc* r = it->second;
    uintptr_t end = r->hi + (r->kind == DEVICE ? PAGE : 0);
    return a < end ? r : NULL;
}

static int prot_now(void) { return !g_hostcheck || g_device_depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE; }

// poison_all: NaN bytes whatever the size (pool and pinned memory); else up to POISON_MAX
static Alloc* new_alloc(size_t bytes, int kind, const char* how, bool poison_all = false) {
    size_t need = round_up(bytes ? bytes : 1, 16), span = round_up(need, PAGE);
    Alloc* r = new Alloc();
    if (kind == DEVICE) {
        if (g_bump + span + PAGE > g_space_hi) die("%s: the emulated device's address space is exhausted", how);
        r->lo = g_bump;
        r->hi = g_bump + span;
        g_bump = r->hi + PAGE;
        // NaN bytes: uninitialised device memory is garbage. Allocations above POISON_MAX stay zero pages until
        // written (a page touched costs every later protection change of it; the 32 MiB cuBLAS workspace is one)
        if ((span <= POISON_MAX || poison_all) && !g_dry) {
            if (mprotect((void*)r->lo, span, PROT_READ | PROT_WRITE)) die("%s: mprotect failed", how);
            memset((void*)r->lo, 0xFF, span);
        }
        mprotect((void*)r->lo, span, prot_now());
        r->base = r->hi - need;              // the end of the allocation meets the guard page
        g_live_dev.push_back(r);
    } else {
        void* p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { delete r; return NULL; }
        if (!g_dry) memset(p, 0xFF, span);   // pinned host memory is not zero-filled either
        r->lo = (uintptr_t)p;
        r->hi = r->lo + span;
        r->base = r->lo;
    }
    r->size = bytes;
    r->kind = kind;
    r->copy_stream = -1;
    r->copy_time = 0;
    r->live = true;
    r->serial = ++g_serial;
    r->how = how;
    g_allocs[r->lo] = r;
    return r;
}

static void free_alloc(Alloc* r) {
    r->live = false;
    if (r->kind == DEVICE) {
        mprotect((void*)r->lo, r->hi - r->lo, PROT_NONE);
        madvise((void*)r->lo, r->hi - r->lo, MADV_DONTNEED);
        for (size_t i = 0; i < g_live_dev.size(); i++)
            if (g_live_dev[i] == r) { g_live_dev[i] = g_live_dev.back(); g_live_dev.pop_back(); break; }
        g_used -= r->size;
    } else {
        // pinned memory: unmapped, its range kept as a record (a later mapping may reuse the addresses)
        munmap((void*)r->lo, r->hi - r->lo);
        g_allocs.erase(r->lo);
        delete r;
    }
}

Alloc* need_device(const char* op, const char* what, const void* p, size_t bytes) {
    Alloc* r = find_alloc(p);
    if (!r || r->kind != DEVICE) {
        if (in_device_space(p)) die("%s: %s %p lies outside every device allocation", op, what, p);
        die("%s: %s %p is not device memory (a host pointer)", op, what, p);
    }
    if (!r->live) die("%s: %s %p lies in device memory freed earlier (allocation #%lu of %zu bytes)", op, what, p, r->serial, r->size);
    uintptr_t a = (uintptr_t)p;
    if (a < r->base || a + bytes > r->base + r->size)
        die("%s: %s [%p, +%zu bytes) does not lie inside its allocation (#%lu: %zu bytes, the range starts at byte %td)",
            op, what, p, bytes, r->serial, r->size, (ptrdiff_t)(a - r->base));
    return r;
}

static void set_device_prot(int prot) {
    for (Alloc* r : g_live_dev) mprotect((void*)r->lo, r->hi - r->lo, prot);
}
// ---- traffic counting (RINGLM_EMU_TRAFFIC): the pages the running kernel faulted on, read and written ----
struct Traffic {
    bool on = false;            // a kernel runs with device memory unmapped
    std::vector<uintptr_t> rd, wr;
    bool valid = false;         // the last launch was counted
    int nptr = 0;
};
static Traffic g_tr;
static const size_t TRAFFIC_PAGES = (size_t)1 << 20;   // per kernel: 4 GiB of pages (preallocated: a fault allocates nothing)

DeviceAccess::DeviceAccess() {
    if (g_device_depth++ == 0 && g_hostcheck) set_device_prot(PROT_READ | PROT_WRITE);
}
DeviceAccess::~DeviceAccess() {
    if (--g_device_depth == 0 && g_hostcheck) set_device_prot(PROT_NONE);
}

// ---------------------------------------------------------------------------------------------------------
// streams, events, clocks, races

static const int MAXS = 64;
typedef uint64_t Clock[MAXS];
struct Stream;
struct Dep { Stream* s; unsigned long seq; };   // another stream's deferred work up to seq
struct Stream {
    int id;
    unsigned flags;
    bool dead;
    Clock vc;                       // what this stream's next operation is ordered after
    std::deque<Deferred*> pending;  // deferred operations, in order
    unsigned long pseq;             // sequence number of the last deferred operation
    std::deque<std::pair<unsigned long, double>> done;   // recent completions: sequence number, time
    std::vector<Dep> deps;          // what the next operation waits for (cudaStreamWaitEvent: the host does not)
};
static Stream* g_streams[MAXS];
static int g_nstreams = 0;
static Clock g_host;                // what the host has waited for

static Stream* make_stream(unsigned flags) {
    if (g_nstreams == MAXS) die("more than %d streams", MAXS);
    Stream* s = new Stream();
    s->id = g_nstreams;
    s->flags = flags;
    memcpy(s->vc, g_host, sizeof(Clock));
    g_streams[g_nstreams++] = s;
    return s;
}
Stream* stream_of(cudaStream_t cs) {
    ensure_init();
    if (!g_nstreams) make_stream(cudaStreamDefault);   // stream 0: the legacy default stream
    Stream* s = cs ? reinterpret_cast<Stream*>(cs) : g_streams[0];
    if (s->dead) die("use of a destroyed stream");
    return s;
}
int stream_id(const Stream* s) { return s->id; }
static void merge(Clock a, const Clock b) {
    for (int i = 0; i < g_nstreams; i++) if (b[i] > a[i]) a[i] = b[i];
}

// complete s's deferred operations up to sequence number upto; blocking or not (then: false when one is not done)
static bool complete(Stream* s, unsigned long upto, bool blocking) {
    while (!s->pending.empty() && s->pending.front()->seq <= upto) {
        Deferred* d = s->pending.front();
        if (blocking) d->wait();
        else if (!d->test()) return false;
        {
            DeviceAccess da;
            d->finish();
        }
        s->done.push_back({ d->seq, now() });
        if (s->done.size() > 4096) s->done.pop_front();
        s->pending.pop_front();
        delete d;
    }
    return true;
}
static void complete_all(Stream* s) { complete(s, ~0ul, true); }
static double done_time(Stream* s, unsigned long seq) {   // when s's last operation up to seq completed (0: long ago)
    for (auto it = s->done.rbegin(); it != s->done.rend(); ++it)
        if (it->first <= seq) return it->second;
    return 0;
}
// complete the work in deps (blocking or not: false while some is not done); t: the latest completion time
static bool complete_deps(std::vector<Dep>& deps, bool blocking, double* t) {
    for (const Dep& d : deps)
        if (!complete(d.s, d.seq, blocking)) return false;
    for (const Dep& d : deps) {
        double x = done_time(d.s, d.seq);
        if (t && x > *t) *t = x;
    }
    deps.clear();
    return true;
}

void defer(Stream* s, Deferred* d) {
    d->seq = ++s->pseq;
    s->pending.push_back(d);
}

// ---- the access history: operations not yet known to be ordered before every stream's next operation ----
struct Access {
    uintptr_t lo, hi;
    bool write, point;
    int stream;
    uint64_t time;
    const char* op;
};
static std::vector<Access> g_hist;

static void prune(void) {
    uint64_t known[MAXS];
    for (int x = 0; x < g_nstreams; x++) {
        uint64_t k = ~0ull;
        for (int s = 0; s < g_nstreams; s++) {
            if (s == x || g_streams[s]->dead) continue;
            uint64_t v = g_streams[s]->vc[x] > g_host[x] ? g_streams[s]->vc[x] : g_host[x];
            if (v < k) k = v;
        }
        known[x] = k;
    }
    size_t j = 0;
    for (size_t i = 0; i < g_hist.size(); i++)
        if (g_hist[i].time > known[g_hist[i].stream]) g_hist[j++] = g_hist[i];
    g_hist.resize(j);
}

static void describe(char* out, size_t n, uintptr_t a) {
    Alloc* r = find_alloc((void*)a);
    if (r) snprintf(out, n, "byte %td of allocation #%lu (%zu bytes)", (ptrdiff_t)(a - r->base), r->serial, r->size);
    else snprintf(out, n, "address %p", (void*)a);
}

uint64_t begin_op(Stream* s, const char* op) {
    (void)op;
    complete_deps(s->deps, true, NULL);   // the stream waited (cudaStreamWaitEvent) for other streams' work
    complete_all(s);
    if (s->id == 0) {   // the legacy default stream waits for every blocking stream
        for (int i = 1; i < g_nstreams; i++)
            if (!g_streams[i]->dead && !(g_streams[i]->flags & cudaStreamNonBlocking)) {
                complete_all(g_streams[i]);
                merge(s->vc, g_streams[i]->vc);
            }
    } else if (!(s->flags & cudaStreamNonBlocking) && g_nstreams) {
        complete_all(g_streams[0]);
        merge(s->vc, g_streams[0]->vc);
    }
    merge(s->vc, g_host);
    return ++s->vc[s->id];
}

void access(Stream* s, uint64_t t, const char* op, const void* p, size_t bytes, bool write, bool point) {
    uintptr_t lo = (uintptr_t)p, hi = lo + (point ? 1 : bytes);
    if (!point && !bytes) return;
    for (const Access& h : g_hist) {
        if (h.stream == s->id || s->vc[h.stream] >= h.time) continue;
        if (!write && !h.write) continue;
        bool overlap = point && h.point ? lo == h.lo
                     : point ? (h.lo <= lo && lo < h.hi)
                     : h.point ? (lo <= h.lo && h.lo < hi)
                     : (lo < h.hi && h.lo < hi);
        if (!overlap) continue;
        char where[160];
        describe(where, sizeof where, lo > h.lo ? lo : h.lo);
        die("race: %s on stream %d %s device memory (%s) that %s on stream %d %s, and no event orders the two "
            "(cudaEventRecord on one stream, cudaStreamWaitEvent on the other)", op, s->id, write ? "writes" : "reads",
            where, h.op, h.stream, h.write ? "writes" : "reads");
    }
    g_hist.push_back(Access{ lo, hi, write, point, s->id, t, op });
    if (g_hist.size() > 4096) prune();
}

// ---- NCCL operations not yet known to be ordered before every stream's next operation (nccl_order) ----
struct NcclRec { int stream; uint64_t time; const char* op; const void* comm; int size; unsigned long group; };
static std::vector<NcclRec> g_nccl;
void nccl_order(Stream* s, uint64_t t, const char* op, const void* comm, int comm_size, unsigned long group) {
    size_t j = 0;
    for (size_t i = 0; i < g_nccl.size(); i++) {   // drop what every live stream and the host are ordered after
        const NcclRec& h = g_nccl[i];
        bool all = g_host[h.stream] >= h.time;
        if (!all) {
            all = true;
            for (int x = 0; x < g_nstreams && all; x++)
                if (x != h.stream && !g_streams[x]->dead && g_streams[x]->vc[h.stream] < h.time) all = false;
        }
        if (!all) g_nccl[j++] = h;
    }
    g_nccl.resize(j);
    for (const NcclRec& h : g_nccl) {
        if (h.stream == s->id || h.comm == comm || h.group == group || s->vc[h.stream] >= h.time) continue;
        die("%s on stream %d (a communicator of %d ranks) may run at the same time as %s on stream %d (another "
            "communicator, of %d ranks): no event orders the two, and NCCL gives no progress guarantee to operations of two "
            "communicators that run at once (a real GPU may deadlock: issue them on one stream, or order them with events)",
            op, s->id, comm_size, h.op, h.stream, h.size);
    }
    g_nccl.push_back(NcclRec{ s->id, t, op, comm, comm_size, group });
}

static void host_waited(const Clock vc) {
    merge(g_host, vc);
    prune();
}

struct EmuEventRec {
    Stream* s = NULL;
    Clock vc = {};
    unsigned long seq = 0;
    unsigned flags = 0;
    double t_rec = 0, t = 0;
    bool recorded = false, resolved = false, dead = false;
    std::vector<Dep> deps;   // the stream's waits at the time of recording
};

}   // namespace emu

struct EmuEvent : emu::EmuEventRec {};

// ---------------------------------------------------------------------------------------------------------
// kernels: fibers

namespace emu {

extern "C" void emu_ctx_switch(void** save_sp, void* to_sp);
#if defined(__x86_64__)
// saves the callee-saved registers, MXCSR and the x87 control word on the current stack, stores the stack pointer
// in *save_sp, switches to to_sp and restores the same from there
asm(R"(
    .text
    .globl emu_ctx_switch
    .type emu_ctx_switch, @function
emu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_ctx_switch, .-emu_ctx_switch
)");
#else
#error "the CUDA emulation's fibers are written for x86-64"
#endif

enum { F_READY, F_WAIT_BLOCK, F_WAIT_WARP, F_DONE };
struct CpCopy { unsigned char* dst; const unsigned char* src; int bytes; };
// cp.async bookkeeping of one thread: copies in issue order; committed groups end at gend[]; copies before
// `applied` have landed
struct Fiber {
    void* sp;
    int state;
    std::vector<CpCopy> cp;
    size_t applied;
    std::vector<size_t> gend;
    size_t gdone;
};
// A warp collective completes when its last lane arrives: that lane computes every lane's result (release hook)
// into the warp's slots, from which each lane takes its own after the barrier. The next collective's results are
// written only when all lanes have arrived at it again, so one barrier per collective suffices.
struct Warp {
    unsigned live;          // lanes still running
    unsigned arrived;       // lanes at the current collective
    unsigned mask;          // its mask
    unsigned participants;  // lanes of the last completed collective
    int kind, nwait;
    uint64_t v[32], vout[32];
    int src[32];
    uintptr_t addr[32];
    uint32_t a[32][4], b[32][2], r[32][4];
    float c[32][4], d[32][4];
};
typedef void (*ReleaseHook)(Warp& W);

static const size_t STACK = 128 << 10;     // per fiber, with a guard page below
static unsigned char* g_stacks = NULL;     // 1024 stacks
static unsigned char* g_dsm_region = NULL; // dynamic shared memory: [region][guard]
static unsigned char* g_ssm_region = NULL; // static shared memory: [region][guard]
static const size_t DSM_MAX = 232448, SSM_MAX = 48 << 10;
static size_t g_dsm_span, g_ssm_span;
static uint32_t g_mxcsr = 0x1f80;
static uint16_t g_fpucw = 0x37f;

struct Launch {
    const char* name;
    const void* fn;
    Runner run;
    void* tuple;
    dim3 grid, block;
    int nt;
    unsigned char* dsm;         // this launch's dynamic shared memory (ends at the guard page)
    size_t dsm_bytes;
    std::vector<std::pair<const void*, size_t>> statics;   // static shared variables: key, offset
    size_t ssm_used;
    size_t max_dyn;             // the opt-in maximum of dynamic shared memory set for this kernel
    Fiber* fib;                 // g_fibers
    Warp* warps;                // g_warps
    int cur, live, block_arrived;
    void* sched_sp;
    unsigned long block_linear;
};
static Launch* g_L = NULL;
static Fiber g_fibers[1024];   // kept from launch to launch (their vectors keep their capacity)
static Warp g_warps[32];

static void init_kernels(void) {
    if (g_stacks) return;
    size_t per = STACK + PAGE;
    void* p = mmap(NULL, per * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) die("cannot map the emulated threads' stacks");
    g_stacks = (unsigned char*)p;
    for (int i = 0; i < 1024; i++) mprotect(g_stacks + i * per, PAGE, PROT_NONE);
    g_dsm_span = round_up(DSM_MAX, PAGE);
    g_ssm_span = round_up(SSM_MAX, PAGE);
    p = mmap(NULL, g_dsm_span + PAGE + g_ssm_span + PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die("cannot map the emulated shared memory");
    g_dsm_region = (unsigned char*)p;
    g_ssm_region = g_dsm_region + g_dsm_span + PAGE;
    mprotect(g_dsm_region + g_dsm_span, PAGE, PROT_NONE);
    mprotect(g_ssm_region + g_ssm_span, PAGE, PROT_NONE);
    uint32_t mx;
    uint16_t cw;
    asm volatile("stmxcsr %0" : "=m"(mx));
    asm volatile("fnstcw %0" : "=m"(cw));
    g_mxcsr = mx; g_fpucw = cw;
}

static void where(char* out, size_t n) {
    if (!g_L) { snprintf(out, n, "host code"); return; }
    snprintf(out, n, "kernel %s (block (%u, %u, %u) thread (%u, %u, %u) of a %ux%ux%u block)", g_L->name, blockIdx.x,
             blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, g_L->block.x, g_L->block.y, g_L->block.z);
}
[[noreturn]] static void kdie(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void kdie(const char* fmt, ...) {
    char msg[600], w[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    where(w, sizeof w);
    die("%s: %s", w, msg);
}

static void yield(void) {
    Fiber& f = g_L->fib[g_L->cur];
    emu_ctx_switch(&f.sp, g_L->sched_sp);
}

static void release_block(void) {
    for (int t = 0; t < g_L->nt; t++) if (g_L->fib[t].state == F_WAIT_BLOCK) g_L->fib[t].state = F_READY;
    g_L->block_arrived = 0;
}
static ReleaseHook g_hook[32];   // per warp: the result computation of the collective in progress
static void release_warp(int w) {
    Warp& W = g_L->warps[w];
    W.participants = W.arrived;
    if (g_hook[w]) g_hook[w](W);
    W.nwait = 0;
    W.arrived = 0;
    for (int l = 0; l < 32; l++) {
        int t = w * 32 + l;
        if (t < g_L->nt && g_L->fib[t].state == F_WAIT_WARP) g_L->fib[t].state = F_READY;
    }
}
static void maybe_release_warp(int w) {
    Warp& W = g_L->warps[w];
    if (W.nwait && (W.arrived & W.live & W.mask) == (W.live & W.mask)) release_warp(w);
}

[[noreturn]] static void divergent_barrier(void) {
    kdie("__syncthreads in divergent code: %d of the block's %d threads have exited while others wait at (or still "
         "reach) the barrier", g_L->nt - g_L->live, g_L->nt);
}

static void fiber_entry(void) {
    Launch* L = g_L;
    L->run(L->fn, L->tuple);
    int t = L->cur;
    Fiber& f = L->fib[t];
    f.state = F_DONE;
    L->live--;
    Warp& W = L->warps[t / 32];
    W.live &= ~(1u << (t % 32));
    maybe_release_warp(t / 32);
    if (L->block_arrived) divergent_barrier();
    emu_ctx_switch(&f.sp, L->sched_sp);
    __builtin_unreachable();
}

static void fiber_start(int t) {
    unsigned char* top = g_stacks + (size_t)t * (STACK + PAGE) + PAGE + STACK;
    unsigned char* sp = top - 72;
    memset(sp, 0, 72);
    memcpy(sp, &g_mxcsr, 4);
    memcpy(sp + 4, &g_fpucw, 2);
    void (*entry)(void) = fiber_entry;
    memcpy(sp + 56, &entry, sizeof entry);
    Fiber& f = g_L->fib[t];
    f.sp = sp;
    f.state = F_READY;
    f.cp.clear();
    f.applied = 0;
    f.gend.clear();
    f.gdone = 0;
}

int lane(void) { return g_L->cur & 31; }

void block_barrier(void) {
    if (!g_L) die("__syncthreads outside a kernel");
    if (g_L->live < g_L->nt) divergent_barrier();   // the CUDA programming model: every thread reaches it
    Fiber& f = g_L->fib[g_L->cur];
    f.state = F_WAIT_BLOCK;
    if (++g_L->block_arrived == g_L->live) release_block();
    yield();
}

static unsigned collective(unsigned mask, int kind, ReleaseHook hook) {
    if (!g_L) die("a warp collective outside a kernel");
    int t = g_L->cur, w = t / 32, l = t % 32;
    Warp& W = g_L->warps[w];
    if (!(mask >> l & 1)) kdie("a warp collective with mask 0x%08x, which does not include the calling lane %d", mask, l);
    static const char* names[] = { "", "__syncwarp", "a shuffle", "ldmatrix", "mma.sync", "ldmatrix.trans", "a ballot" };
    if (W.nwait == 0) { W.kind = kind; W.mask = mask; W.arrived = 0; g_hook[w] = hook; }
    else if (W.kind != kind || W.mask != mask)
        kdie("the lanes of warp %d meet at different warp collectives (%s with mask 0x%08x and %s with mask 0x%08x): "
             "divergent warp code", w, names[W.kind], W.mask, names[kind], mask);
    W.arrived |= 1u << l;
    W.nwait++;
    g_L->fib[t].state = F_WAIT_WARP;
    maybe_release_warp(w);
    yield();
    return W.participants;
}
unsigned warp_barrier(unsigned mask, int kind) { return collective(mask, kind, NULL); }

static void shfl_release(Warp& W) {
    for (int l = 0; l < 32; l++)
        if (W.participants >> l & 1) W.vout[l] = (W.participants >> W.src[l] & 1) ? W.v[W.src[l]] : ~0ull;
}
uint64_t shfl(unsigned mask, uint64_t v, int src) {
    int t = g_L->cur, l = t % 32;
    Warp& W = g_L->warps[t / 32];
    W.v[l] = v;
    W.src[l] = src;
    unsigned who = collective(mask, K_SHFL, shfl_release);
    if (!(who >> src & 1)) kdie("a shuffle reads lane %d, which has exited or is not in the shuffle", src);
    return W.vout[l];
}

static void ballot_release(Warp& W) {
    uint64_t m = 0;
    for (int l = 0; l < 32; l++) if ((W.participants >> l & 1) && W.v[l]) m |= 1ull << l;
    for (int l = 0; l < 32; l++) W.vout[l] = m;
}
unsigned ballot(unsigned mask, int pred) {
    int l = g_L->cur % 32;
    Warp& W = g_L->warps[g_L->cur / 32];
    W.v[l] = pred != 0;
    collective(mask, K_BALLOT, ballot_release);
    return (unsigned)W.vout[l];
}

unsigned char* dyn_smem(void) {
    if (!g_L) die("dynamic shared memory outside a kernel");
    return g_L->dsm;
}

void* static_smem(const void* key, size_t bytes, size_t align) {
    if (!g_L) die("shared memory outside a kernel");
    for (auto& s : g_L->statics) if (s.first == key) return g_ssm_region + s.second;
    size_t off = round_up(g_L->ssm_used, align < 16 ? 16 : align);
    if (off + bytes > SSM_MAX) kdie("static shared memory beyond %zu bytes", SSM_MAX);
    if (off + bytes + g_L->dsm_bytes > g_prop.sharedMemPerBlockOptin)
        kdie("%zu bytes of static and %zu bytes of dynamic shared memory exceed the device's %zu per block", off + bytes,
             g_L->dsm_bytes, g_prop.sharedMemPerBlockOptin);
    g_L->statics.push_back({ key, off });
    g_L->ssm_used = off + bytes;
    memset(g_ssm_region + off, 0xFF, bytes);
    return g_ssm_region + off;
}

// the attention kernels' own instructions (emu_attn.h): a broken contract, with the kernel, block and thread
void attn_fault(const char* what) { kdie("%s", what); }

void check_smem(const void* p, size_t n, const char* what) {
    const unsigned char* q = (const unsigned char*)p;
    if (q < g_L->dsm || q + n > g_L->dsm + g_L->dsm_bytes || ((uintptr_t)q & 15))
        kdie("%s: shared-memory access at offset %td (%zu bytes) outside the block's %zu bytes of dynamic shared memory "
             "or not 16-byte aligned", what, q - g_L->dsm, n, g_L->dsm_bytes);
}

void cp_async16(uintptr_t dst, const void* src, int src_bytes) {
    check_smem((const void*)dst, 16, "cp.async");
    if (src_bytes != 0 && src_bytes != 16) kdie("cp.async with src-size %d (this emulation: 0 or 16)", src_bytes);
    if (src_bytes && ((uintptr_t)src & 15)) kdie("cp.async.cg from a global address %p that is not 16-byte aligned", src);
    g_L->fib[g_L->cur].cp.push_back(CpCopy{ (unsigned char*)dst, (const unsigned char*)src, src_bytes });
}
void cp_commit(void) {
    Fiber& f = g_L->fib[g_L->cur];
    f.gend.push_back(f.cp.size());
}
void cp_wait(int n) {   // the copies of the oldest groups land now: a missing wait reads stale shared memory
    Fiber& f = g_L->fib[g_L->cur];
    while (f.gend.size() - f.gdone > (size_t)n) {
        size_t end = f.gend[f.gdone++];
        for (; f.applied < end; f.applied++) {
            const CpCopy& c = f.cp[f.applied];
            if (c.bytes) memcpy(c.dst, c.src, 16);
            else memset(c.dst, 0, 16);
        }
    }
    if (f.gdone == f.gend.size() && f.applied == f.cp.size()) {   // all landed: start over
        f.cp.clear(); f.gend.clear(); f.applied = 0; f.gdone = 0;
    }
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: lanes 8i..8i+7 give the row addresses of matrix i; register i
// of lane l holds matrix i's row l/4, columns 2(l%4), 2(l%4)+1 — transposed: rows 2(l%4), 2(l%4)+1 of column l/4
template <bool TRANS> static void ldmatrix_release(Warp& W) {
    if (W.participants != 0xffffffffu) return;   // reported by each lane
    for (int l = 0; l < 32; l++)
        for (int i = 0; i < 4; i++) {
            uint16_t lo, hi;
            if (!TRANS) {
                const uint16_t* row = (const uint16_t*)W.addr[8 * i + l / 4];
                lo = row[2 * (l % 4)]; hi = row[2 * (l % 4) + 1];
            } else {
                const uint16_t* r0 = (const uint16_t*)W.addr[8 * i + 2 * (l % 4)];
                const uint16_t* r1 = (const uint16_t*)W.addr[8 * i + 2 * (l % 4) + 1];
                lo = r0[l / 4]; hi = r1[l / 4];
            }
            W.r[l][i] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
}
void ldmatrix(uint32_t (&r)[4], uintptr_t addr, bool trans) {
    int t = g_L->cur, l = t % 32;
    Warp& W = g_L->warps[t / 32];
    check_smem((const void*)addr, 16, "ldmatrix");
    W.addr[l] = addr;
    unsigned who = collective(0xffffffffu, trans ? K_LDMATRIX_T : K_LDMATRIX, trans ? ldmatrix_release<true> : ldmatrix_release<false>);
    if (who != 0xffffffffu) kdie("ldmatrix.sync.aligned without all 32 lanes of the warp");
    for (int i = 0; i < 4; i++) r[i] = W.r[l][i];
}

static inline float bf_half(uint32_t reg, int hi) {
    uint32_t u = (hi ? reg >> 16 : reg & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: A reg r of lane l = row l/4 + 8(r&1), columns
// 2(l%4) + 8(r>>1) + {0,1}; B reg r = rows 2(l%4) + 8r + {0,1} of column l/4; C/D element e = row l/4 + 8(e>>1),
// column 2(l%4) + (e&1). Products exact in fp32, summed in k order onto the accumulator.
static void mma_release(Warp& W) {
    if (W.participants != 0xffffffffu) return;   // reported by each lane
    float A[16][16], B[16][8];                   // the warp's operands, decoded from the fragments
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, tq = l & 3;
        for (int r = 0; r < 4; r++)
            for (int h = 0; h < 2; h++) A[g + 8 * (r & 1)][2 * tq + 8 * (r >> 1) + h] = bf_half(W.a[l][r], h);
        for (int r = 0; r < 2; r++)
            for (int h = 0; h < 2; h++) B[2 * tq + 8 * r + h][g] = bf_half(W.b[l][r], h);
    }
    for (int l = 0; l < 32; l++) {
        int g = l >> 2, tq = l & 3;
        for (int e = 0; e < 4; e++) {
            int row = g + 8 * (e >> 1), col = 2 * tq + (e & 1);
            float acc = W.c[l][e];
            for (int k = 0; k < 16; k++) acc += A[row][k] * B[k][col];
            W.d[l][e] = acc;
        }
    }
}
void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    int t = g_L->cur, l = t % 32;
    Warp& W = g_L->warps[t / 32];
    for (int i = 0; i < 4; i++) { W.a[l][i] = a[i]; W.c[l][i] = d[i]; }
    W.b[l][0] = b0; W.b[l][1] = b1;
    if (collective(0xffffffffu, K_MMA, mma_release) != 0xffffffffu) kdie("mma.sync.aligned without all 32 lanes of the warp");
    for (int e = 0; e < 4; e++) d[e] = W.d[l][e];
}

// ---- kernel attributes set with cudaFuncSetAttribute ----
static std::map<const void*, int> g_maxdyn;

static void run_block(Launch* L) {
    unsigned long b = L->block_linear;
    if (L->dsm_bytes) memset(L->dsm, 0xFF, L->dsm_bytes);
    if (L->ssm_used) memset(g_ssm_region, 0xFF, L->ssm_used);
    L->live = L->nt;
    L->block_arrived = 0;
    for (int t = 0; t < L->nt; t++) fiber_start(t);
    for (int w = 0; w < (L->nt + 31) / 32; w++) {
        Warp& W = L->warps[w];
        int n = L->nt - (int)w * 32;
        W.live = n >= 32 ? 0xffffffffu : (1u << n) - 1;
        W.arrived = 0; W.nwait = 0; W.participants = 0; W.kind = 0; W.mask = 0;
    }
    bool rev = b & 1;
    unsigned bx = L->block.x, by = L->block.y;
    while (L->live > 0) {
        bool any = false;
        for (int i = 0; i < L->nt; i++) {
            int t = rev ? L->nt - 1 - i : i;
            if (L->fib[t].state != F_READY) continue;
            any = true;
            L->cur = t;
            threadIdx = uint3{ (unsigned)t % bx, ((unsigned)t / bx) % by, (unsigned)t / (bx * by) };
            emu_ctx_switch(&L->sched_sp, L->fib[t].sp);
        }
        if (!any && L->live > 0) {
            int nb = 0, nw = 0;
            for (int t = 0; t < L->nt; t++) { nb += L->fib[t].state == F_WAIT_BLOCK; nw += L->fib[t].state == F_WAIT_WARP; }
            threadIdx = uint3{ 0, 0, 0 };
            kdie("deadlock: %d threads wait at __syncthreads and %d at warp collectives that cannot complete "
                 "(a barrier in divergent code?)", nb, nw);
        }
    }
}

// The order of a launch's blocks. CUDA promises none (the programming guide: blocks must be able to run in any order,
// in parallel or in series), so the emulation runs them neither ascending nor descending but in a fixed permutation of
// the linear block index: i = 0, 1, .., 2^bits - 1 to the complement of its bit reversal (bits: the fewest that hold
// the grid). Block a runs before block b iff a has a 1 at the lowest bit where the two differ: the odd blocks before the
// even ones, block 0 last, and of two blocks as often the higher as the lower first. A block that waits for another
// which has not run yet (in either direction: emu_attn.h's flag_wait ends the process) shows up; deterministic, so
// every run repeats.
static unsigned long block_order(unsigned long i, int bits) {
    unsigned long r = 0;
    for (int k = 0; k < bits; k++) r |= ((i >> k) & 1ul) << (bits - 1 - k);
    return r ^ ((1ul << bits) - 1);
}

void launch(const char* name, const void* fn, dim3 grid, dim3 block, size_t smem, void* stream, const Arg* args, int nargs,
            Runner run, void* tuple) {
    ensure_init();
    init_kernels();
    g_tr.valid = false;
    if (g_L) die("kernel %s launched from inside kernel %s (dynamic parallelism is not used by ringlm)", name, g_L->name);
    const cudaDeviceProp& P = g_prop;
    unsigned long nt = (unsigned long)block.x * block.y * block.z;
    if (!block.x || !block.y || !block.z || block.x > (unsigned)P.maxThreadsDim[0] || block.y > (unsigned)P.maxThreadsDim[1] ||
        block.z > (unsigned)P.maxThreadsDim[2] || nt > (unsigned long)P.maxThreadsPerBlock) {
        fail(cudaErrorInvalidConfiguration, "kernel %s: a block of %ux%ux%u threads (at most %d per block, %dx%dx%d)", name,
             block.x, block.y, block.z, P.maxThreadsPerBlock, P.maxThreadsDim[0], P.maxThreadsDim[1], P.maxThreadsDim[2]);
        return;
    }
    if (!grid.x || !grid.y || !grid.z || grid.x > (unsigned)P.maxGridSize[0] || grid.y > (unsigned)P.maxGridSize[1] ||
        grid.z > (unsigned)P.maxGridSize[2]) {
        fail(cudaErrorInvalidConfiguration, "kernel %s: a grid of %ux%ux%u blocks (at most %dx%dx%d)", name, grid.x, grid.y,
             grid.z, P.maxGridSize[0], P.maxGridSize[1], P.maxGridSize[2]);
        return;
    }
    auto md = g_maxdyn.find(fn);
    size_t maxdyn = md == g_maxdyn.end() ? P.sharedMemPerBlock : (size_t)md->second;
    if (smem > maxdyn) {
        fail(cudaErrorInvalidValue, "kernel %s: %zu bytes of dynamic shared memory, but at most %zu for this kernel%s", name,
             smem, maxdyn, md == g_maxdyn.end() ? " (above 48 KiB needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize))" : "");
        return;
    }
    Stream* s = stream_of((cudaStream_t)stream);
    uint64_t t = begin_op(s, name);
    // pointer arguments: live device (or pinned) memory; they are what the race checks know of the kernel
    for (int i = 0; i < nargs; i++) {
        if (args[i].ptr) {
            const void* p;
            memcpy(&p, args[i].p, sizeof p);
            if (!p) continue;
            Alloc* r = find_alloc(p);
            if (r && r->live && r->kind == PINNED) continue;
            if (!r || !r->live || r->kind != DEVICE || (uintptr_t)p < r->base || (uintptr_t)p > r->base + r->size) {
                if (r && !r->live)
                    die("kernel %s: argument %d (%p) points into device memory freed earlier (allocation #%lu of %zu bytes)",
                        name, i + 1, p, r->serial, r->size);
                if (in_device_space(p) || r)
                    die("kernel %s: argument %d (%p) points outside every device allocation", name, i + 1, p);
                die("kernel %s: argument %d (%p) is host memory, which a kernel cannot read (cudaMalloc or cudaMallocHost)",
                    name, i + 1, p);
            }
            access(s, t, name, p, 1, args[i].ptr == 2, true);
        } else {
            for (size_t o = 0; o + 8 <= args[i].bytes; o += 8) {
                uintptr_t v;
                memcpy(&v, (const char*)args[i].p + o, 8);
                if (!in_device_space((void*)v)) continue;
                Alloc* r = find_alloc((void*)v);
                if (!r || !r->live || v < r->base || v > r->base + r->size)
                    die("kernel %s: argument %d holds a pointer (%p, at byte %zu) to %s", name, i + 1, (void*)v, o,
                        r && !r->live ? "device memory freed earlier" : "no device allocation");
                access(s, t, name, (void*)v, 1, false, true);
            }
        }
    }
    if (g_dry) return;
    Launch L;
    L.name = name; L.fn = fn; L.run = run; L.tuple = tuple; L.grid = grid; L.block = block; L.nt = (int)nt;
    L.dsm_bytes = smem;
    L.dsm = g_dsm_region + g_dsm_span - round_up(smem, 16);
    L.ssm_used = 0;
    L.max_dyn = maxdyn;
    L.fib = g_fibers;
    L.warps = g_warps;
    L.cur = 0;
    blockDim = block;
    gridDim = grid;
    // the blocks in the order of block_order: linear index b = x + grid.x (y + grid.y z), i over [0, 2^bits) mapped,
    // indices past the grid skipped
    auto run_all = [&]() {
        g_L = &L;
        unsigned long n = (unsigned long)grid.x * grid.y * grid.z;
        int bits = 0;
        while ((1ul << bits) < n) bits++;
        for (unsigned long i = 0; i < (1ul << bits); i++) {
            unsigned long b = block_order(i, bits);
            if (b >= n) continue;
            blockIdx = uint3{ (unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y), (unsigned)(b / grid.x / grid.y) };
            L.block_linear = b;
            run_block(&L);
        }
        g_L = NULL;
    };
    if (!g_traffic) {
        DeviceAccess da;
        run_all();
        return;
    }
    // counted: every device page unmapped, opened by the faults of the kernel's first accesses (on_fault)
    if (g_tr.rd.capacity() < TRAFFIC_PAGES) { g_tr.rd.reserve(TRAFFIC_PAGES); g_tr.wr.reserve(TRAFFIC_PAGES); }
    g_tr.rd.clear(); g_tr.wr.clear();
    g_tr.nptr = 0;
    for (int i = 0; i < nargs; i++) {
        if (args[i].ptr) { g_tr.nptr++; continue; }
        for (size_t o = 0; o + 8 <= args[i].bytes; o += 8) {   // device pointers inside struct arguments
            uintptr_t v;
            memcpy(&v, (const char*)args[i].p + o, 8);
            g_tr.nptr += in_device_space((void*)v);
        }
    }
    g_device_depth++;
    set_device_prot(PROT_NONE);
    g_tr.on = true;
    run_all();
    g_tr.on = false;
    g_device_depth--;
    set_device_prot(prot_now());
    g_tr.valid = true;
}

// ---------------------------------------------------------------------------------------------------------
// faults: one line

static void on_fault(int sig, siginfo_t* si, void* ctx) {
    uintptr_t a = (uintptr_t)si->si_addr;
    if (g_tr.on && g_L && sig == SIGSEGV) {   // traffic counting: a kernel's first access of a page
        Alloc* c = find_alloc((void*)a);
        if (c && c->live && c->kind == DEVICE && a >= c->lo && a < c->hi) {
            bool w = (((ucontext_t*)ctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0;   // x86-64 page-fault code: a write
            std::vector<uintptr_t>& v = w ? g_tr.wr : g_tr.rd;
            if (v.size() == v.capacity()) { const char m[] = "cuda emulation: traffic counting: too many pages\n"; if (write(2, m, sizeof m - 1)) {} _exit(1); }
            v.push_back(a & ~(uintptr_t)(PAGE - 1));
            mprotect((void*)(a & ~(uintptr_t)(PAGE - 1)), PAGE, w ? PROT_READ | PROT_WRITE : PROT_READ);
            return;
        }
    }
    char msg[900], w[300], fn[200] = "";
    where(w, sizeof w);
    ucontext_t* uc = (ucontext_t*)ctx;
    Dl_info di;
    void* pc = (void*)uc->uc_mcontext.gregs[REG_RIP];
    if (!g_L && dladdr(pc, &di) && di.dli_sname) {
        int st = 0;
        char* dm = abi::__cxa_demangle(di.dli_sname, NULL, NULL, &st);
        snprintf(fn, sizeof fn, " (in %s)", st == 0 && dm ? dm : di.dli_sname);
    }
    Alloc* r = find_alloc((void*)a);
    size_t per = STACK + PAGE;
    if (g_L && a >= (uintptr_t)(g_dsm_region + g_dsm_span) && a < (uintptr_t)(g_dsm_region + g_dsm_span + PAGE))
        snprintf(msg, sizeof msg, "%s: shared-memory access past the end of the block's %zu bytes of dynamic shared memory",
                 w, g_L->dsm_bytes);
    else if (g_L && a >= (uintptr_t)(g_ssm_region + g_ssm_span) && a < (uintptr_t)(g_ssm_region + g_ssm_span + PAGE))
        snprintf(msg, sizeof msg, "%s: shared-memory access past the end of the static shared memory", w);
    else if (g_stacks && a >= (uintptr_t)g_stacks && a < (uintptr_t)g_stacks + 1024 * per && (a - (uintptr_t)g_stacks) % per < PAGE)
        snprintf(msg, sizeof msg, "%s: the thread's stack (%zu KiB in this emulation) overflowed", w, STACK >> 10);
    else if (r && r->kind == DEVICE) {
        if (!r->live)
            snprintf(msg, sizeof msg, "%s%s: access to device memory freed earlier (byte %td of allocation #%lu of %zu bytes)",
                     w, fn, (ptrdiff_t)(a - r->base), r->serial, r->size);
        else if (a >= r->hi)
            snprintf(msg, sizeof msg, "%s%s: out-of-bounds access %td bytes past the end of a device allocation (#%lu of %zu bytes)",
                     w, fn, (ptrdiff_t)(a - (r->base + r->size)), r->serial, r->size);
        else if (!g_L && g_device_depth == 0)
            snprintf(msg, sizeof msg, "host code%s read or wrote device memory (byte %td of allocation #%lu of %zu bytes) "
                     "without a copy (cudaMemcpy)", fn, (ptrdiff_t)(a - r->base), r->serial, r->size);
        else
            snprintf(msg, sizeof msg, "%s%s: fault at byte %td of device allocation #%lu of %zu bytes", w, fn,
                     (ptrdiff_t)(a - r->base), r->serial, r->size);
    } else if (in_device_space((void*)a))
        snprintf(msg, sizeof msg, "%s%s: access to an address of the emulated device (%p) that no allocation holds", w, fn, (void*)a);
    else
        snprintf(msg, sizeof msg, "%s%s: %s at address %p (not device memory)", w, fn, sig == SIGBUS ? "bus error" : "segmentation fault",
                 (void*)a);
    char line[1000];
    int n = snprintf(line, sizeof line, "cuda emulation: %s\n", msg);
    if (write(2, line, n > 0 ? (size_t)n : 0) < 0) {}
    _exit(1);
}

}   // namespace emu

// =========================================================================================================
// the runtime API

using namespace emu;

extern "C" {

const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
    }
}

static const char* plain_string(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
    }
}

// the last error set with details by the emulation carries them (it names the kernel or call)
const char* cudaGetErrorString(cudaError_t e) {
    static char buf[900];
    if (e != cudaSuccess && e == g_detail_code && g_detail[0]) {
        snprintf(buf, sizeof buf, "%s (%s)", plain_string(e), g_detail);
        return buf;
    }
    return plain_string(e);
}
cudaError_t cudaGetLastError(void) { cudaError_t e = g_last; g_last = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError(void) { return g_last; }

cudaError_t cudaGetDeviceCount(int* n) {
    ensure_init();
    if (g_ndev == 0) { *n = 0; return fail(cudaErrorNoDevice, "RINGLM_EMU_DEVICES = 0"); }
    *n = g_ndev;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) {
    ensure_init();
    if (dev < 0 || dev >= g_ndev) return fail(cudaErrorInvalidDevice, "cudaSetDevice(%d) with %d devices", dev, g_ndev);
    g_dev = dev;
    fill_props(dev);
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* dev) { ensure_init(); *dev = g_dev; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int dev) {
    ensure_init();
    if (dev < 0 || dev >= g_ndev) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d) with %d devices", dev, g_ndev);
    int keep = g_dev;
    fill_props(dev);
    *prop = g_prop;
    fill_props(keep);
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) { *v = 13000; return cudaSuccess; }
cudaError_t cudaRuntimeGetVersion(int* v) { *v = 13000; return cudaSuccess; }

cudaError_t cudaDeviceSynchronize(void) {
    ensure_init();
    stream_of(NULL);
    for (int i = 0; i < g_nstreams; i++) {
        Stream* s = g_streams[i];
        if (s->dead) continue;
        complete_deps(s->deps, true, NULL);
        complete_all(s);
        host_waited(s->vc);
    }
    return cudaSuccess;
}

// ---- memory ----
cudaError_t cudaMalloc(void** p, size_t bytes) {
    ensure_init();
    if (!p) return fail(cudaErrorInvalidValue, "cudaMalloc with a NULL result pointer");
    if (g_used + bytes > g_total)
        return fail(cudaErrorMemoryAllocation, "cudaMalloc of %zu bytes with %zu of %zu bytes of the emulated device in use",
                    bytes, g_used, g_total);
    Alloc* r = new_alloc(bytes, DEVICE, "cudaMalloc");
    g_used += bytes;
    *p = (void*)r->base;
    return cudaSuccess;
}
static cudaError_t free_device(void* p, const char* op) {
    if (!p) return cudaSuccess;
    Alloc* r = find_alloc(p);
    if (!r || r->kind != DEVICE || (uintptr_t)p != r->base)
        return fail(cudaErrorInvalidValue, "%s(%p): not a pointer that cudaMalloc returned", op, p);
    if (!r->live) return fail(cudaErrorInvalidValue, "%s(%p): freed twice (allocation #%lu)", op, p, r->serial);
    free_alloc(r);
    return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
    ensure_init();
    cudaDeviceSynchronize();   // cudaFree synchronises the device
    return free_device(p, "cudaFree");
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int dev) {
    ensure_init();
    if (!value) return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute with a NULL result pointer");
    if (dev < 0 || dev >= g_ndev) return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute(device %d) with %d devices", dev, g_ndev);
    if (attr != cudaDevAttrMemoryPoolsSupported)
        return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute %d is not in this emulation", (int)attr);
    *value = g_pools != 1;
    return cudaSuccess;
}
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t cs) {
    ensure_init();
    Stream* s = stream_of(cs);
    if (g_pools) return fail(cudaErrorNotSupported, "cudaMallocAsync: no stream-ordered memory pools (RINGLM_EMU_MALLOC_ASYNC=%s)",
                             g_pools == 1 ? "unsupported" : "fails");
    begin_op(s, "cudaMallocAsync");
    if (g_used + bytes > g_total)
        return fail(cudaErrorMemoryAllocation, "cudaMallocAsync of %zu bytes with %zu of %zu bytes of the emulated device in use",
                    bytes, g_used, g_total);
    Alloc* r = new_alloc(bytes, DEVICE, "cudaMallocAsync", true);
    g_used += bytes;
    *p = (void*)r->base;
    return cudaSuccess;
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t cs) {
    ensure_init();
    Stream* s = stream_of(cs);
    if (g_pools) return fail(cudaErrorNotSupported, "cudaFreeAsync: no stream-ordered memory pools (RINGLM_EMU_MALLOC_ASYNC=%s)",
                             g_pools == 1 ? "unsupported" : "fails");
    begin_op(s, "cudaFreeAsync");
    // every stream's deferred work is finished first: this emulation frees at once
    for (int i = 0; i < g_nstreams; i++) if (!g_streams[i]->dead) complete_all(g_streams[i]);
    return free_device(p, "cudaFreeAsync");
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
    ensure_init();
    Alloc* r = new_alloc(bytes, PINNED, "cudaMallocHost");
    if (!r) return fail(cudaErrorMemoryAllocation, "cudaMallocHost of %zu bytes", bytes);
    *p = (void*)r->base;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
    ensure_init();
    if (!p) return cudaSuccess;
    Alloc* r = find_alloc(p);
    if (!r || r->kind != PINNED || (uintptr_t)p != r->base)
        return fail(cudaErrorInvalidValue, "cudaFreeHost(%p): not a pointer that cudaMallocHost returned", p);
    // strict: an asynchronous copy from or to it that the host has not waited for may still read or write it
    if (r->copy_stream >= 0 && g_host[r->copy_stream] < r->copy_time)
        die("cudaFreeHost(%p): pinned memory that an asynchronous copy queued on stream %d may still be using (the host "
            "has not waited for it: cudaEventSynchronize or cudaStreamSynchronize before freeing)", p, r->copy_stream);
    free_alloc(r);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* fr, size_t* tot) {
    ensure_init();
    *fr = g_total - g_used;
    *tot = g_total;
    return cudaSuccess;
}
int emu_pointer_kind(const void* p) {
    ensure_init();
    Alloc* r = find_alloc(p);
    if (!r || !r->live || (uintptr_t)p < r->base || (uintptr_t)p >= r->base + r->size) return 0;
    return r->kind;
}

int emu_dry(void) { return dry(); }
int emu_traffic_last(double* rd, double* wr, int* nptr) {
    if (!g_tr.valid) return 0;
    *rd = (double)g_tr.rd.size() * PAGE;
    *wr = (double)g_tr.wr.size() * PAGE;
    *nptr = g_tr.nptr;
    return 1;
}

static bool is_dev(const void* p) { return in_device_space(p); }

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t cs) {
    ensure_init();
    Stream* s = stream_of(cs);
    if (!bytes) return cudaSuccess;
    bool dd = is_dev(dst), sd = is_dev(src);
    if (kind == cudaMemcpyDefault) kind = (cudaMemcpyKind)((sd ? 2 : 0) + (dd ? 1 : 0));
    static const char* kinds[] = { "cudaMemcpyHostToHost", "cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
                                   "cudaMemcpyDeviceToDevice" };
    if ((int)kind < 0 || (int)kind > 3) return fail(cudaErrorInvalidValue, "cudaMemcpyAsync: kind %d", (int)kind);
    bool want_dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool want_sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (dd != want_dd || sd != want_sd)
        return fail(cudaErrorInvalidValue, "cudaMemcpyAsync with %s, but the destination %p is %s and the source %p is %s",
                    kinds[kind], dst, dd ? "device memory" : "host memory", src, sd ? "device memory" : "host memory");
    if (dd) need_device("cudaMemcpyAsync", "destination", dst, bytes);
    if (sd) need_device("cudaMemcpyAsync", "source", src, bytes);
    if ((const char*)dst < (const char*)src + bytes && (const char*)src < (const char*)dst + bytes)
        return fail(cudaErrorInvalidValue, "cudaMemcpyAsync: the source and destination ranges overlap (%zu bytes)", bytes);
    uint64_t t = begin_op(s, kinds[kind]);
    if (sd) access(s, t, kinds[kind], src, bytes, false);
    if (dd) access(s, t, kinds[kind], dst, bytes, true);
    for (const void* hp : { sd ? NULL : src, dd ? NULL : (const void*)dst }) {   // pinned host memory it uses until done
        Alloc* r = hp ? find_alloc(hp) : NULL;
        if (r && r->kind == PINNED && r->live) { r->copy_stream = s->id; r->copy_time = t; }
    }
    if (g_dry) return cudaSuccess;
    DeviceAccess da;
    memcpy(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, NULL);
    if (e == cudaSuccess) cudaStreamSynchronize(NULL);
    return e;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t cs) {
    ensure_init();
    Stream* s = stream_of(cs);
    if (!bytes) return cudaSuccess;
    if (!is_dev(p)) return fail(cudaErrorInvalidValue, "cudaMemsetAsync on %p, which is not device memory", p);
    need_device("cudaMemsetAsync", "destination", p, bytes);
    uint64_t t = begin_op(s, "cudaMemsetAsync");
    access(s, t, "cudaMemsetAsync", p, bytes, true);
    if (g_dry) return cudaSuccess;
    DeviceAccess da;
    memset(p, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
    cudaError_t e = cudaMemsetAsync(p, value, bytes, NULL);
    if (e == cudaSuccess) cudaStreamSynchronize(NULL);
    return e;
}

// ---- streams ----
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
    ensure_init();
    stream_of(NULL);
    *s = reinterpret_cast<cudaStream_t>(make_stream(flags));
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t cs) {
    Stream* s = stream_of(cs);
    if (s->id == 0) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy of the default stream");
    complete_deps(s->deps, true, NULL);
    complete_all(s);
    s->dead = true;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t cs) {
    Stream* s = stream_of(cs);
    begin_op(s, "cudaStreamSynchronize");   // (a blocking stream also waits for the default stream)
    complete_all(s);
    host_waited(s->vc);
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t cs) {
    Stream* s = stream_of(cs);
    if (!complete_deps(s->deps, false, NULL) || !complete(s, ~0ul, false)) return cudaErrorNotReady;
    host_waited(s->vc);
    return cudaSuccess;
}

// ---- events ----
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
    ensure_init();
    EmuEvent* ev = new EmuEvent();
    ev->flags = flags;
    *e = ev;
    return cudaSuccess;
}
static EmuEvent* live_event(cudaEvent_t e, const char* op) {
    if (!e) die("%s: a NULL event", op);
    if (e->dead) die("%s: an event that was destroyed", op);
    return e;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    live_event(e, "cudaEventDestroy")->dead = true;   // kept: a later use is reported
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t cs) {
    EmuEvent* ev = live_event(e, "cudaEventRecord");
    Stream* s = stream_of(cs);
    merge(s->vc, g_host);
    memcpy(ev->vc, s->vc, sizeof(Clock));
    ev->s = s;
    ev->seq = s->pseq;
    ev->t_rec = now();
    ev->recorded = true;
    ev->deps = s->deps;
    ev->resolved = s->pending.empty() && s->deps.empty();   // nothing deferred before it: complete when recorded
    ev->t = ev->t_rec;
    return cudaSuccess;
}
// the event's work done (blocking or not): its time is when the last of it completed
static bool resolve(EmuEvent* ev, bool blocking) {
    if (!ev->recorded) return true;   // never recorded: complete at once (CUDA's rule)
    if (!ev->resolved) {
        if (!complete_deps(ev->deps, blocking, &ev->t) || !complete(ev->s, ev->seq, blocking)) return false;
        ev->resolved = true;
        double x = done_time(ev->s, ev->seq);
        if (x > ev->t) ev->t = x;
    }
    return true;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
    EmuEvent* ev = live_event(e, "cudaEventQuery");
    if (!resolve(ev, false)) return cudaErrorNotReady;
    if (ev->recorded) host_waited(ev->vc);
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    EmuEvent* ev = live_event(e, "cudaEventSynchronize");
    resolve(ev, true);
    if (ev->recorded) host_waited(ev->vc);
    return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t cs, cudaEvent_t e, unsigned flags) {
    (void)flags;
    EmuEvent* ev = live_event(e, "cudaStreamWaitEvent");
    Stream* s = stream_of(cs);
    if (!ev->recorded) return cudaSuccess;
    // the host goes on at once, as on a GPU; s's next operation (or a synchronisation) completes the work first
    merge(s->vc, ev->vc);
    if (!ev->resolved) {
        s->deps.insert(s->deps.end(), ev->deps.begin(), ev->deps.end());
        s->deps.push_back(Dep{ ev->s, ev->seq });
    }
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    EmuEvent *x = live_event(a, "cudaEventElapsedTime"), *y = live_event(b, "cudaEventElapsedTime");
    if ((x->flags | y->flags) & cudaEventDisableTiming)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime on an event created with cudaEventDisableTiming");
    if (!x->recorded || !y->recorded) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime on an event never recorded");
    if (!resolve(x, false) || !resolve(y, false)) return cudaErrorNotReady;
    *ms = (float)((y->t - x->t) * 1e3);
    return cudaSuccess;
}

// ---- kernels ----
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
    ensure_init();
    memset(attr, 0, sizeof *attr);
    attr->maxThreadsPerBlock = g_prop.maxThreadsPerBlock;
    auto it = g_maxdyn.find(func);
    attr->maxDynamicSharedSizeBytes = it == g_maxdyn.end() ? (int)g_prop.sharedMemPerBlock : it->second;
    attr->numRegs = 32;
    attr->ptxVersion = attr->binaryVersion = g_prop.major * 10 + g_prop.minor;
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    ensure_init();
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > g_prop.sharedMemPerBlockOptin)
            return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %d): at most %zu on this device",
                        value, g_prop.sharedMemPerBlockOptin);
        g_maxdyn[func] = value;
        return cudaSuccess;
    }
    return cudaSuccess;
}

}   // extern "C"
