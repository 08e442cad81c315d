// backend_cuda.cu — the CUDA backend (backend.h) for one NVIDIA GPU per process: device memory, cuBLAS
// matmuls (bf16 / tf32 tensor cores or fp32, fp32 accumulation), own kernels for everything else.
//
// All work is queued in order on one compute stream (cu_stream()); be_download / be_upload / be_sync wait.
// Determinism: every reduction has a fixed partition and a fixed order that do not depend on scheduling (the
// attention backward's dQ adds are atomics serialised in key-tile order by flags), so a run repeats bit for bit on
// the same GPU and toolkit.
// Errors: a failed CUDA / cuBLAS call ends the process with one line "cuda backend: <operation>: <error>";
// be_init returns one line instead (no device, a driver too old, a GPU older than Ampere, sm_80).
#include "backend/cuda/cu_common.h"
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------------------
// state, errors

static int g_started = 0;
static int g_device = -1;
static cudaDeviceProp g_prop;
static cudaStream_t g_stream;
static cublasHandle_t g_blas;
static void* g_blas_ws = NULL;
static const size_t BLAS_WS_BYTES = (size_t)32 << 20;
static int g_prec = CU_BF16;
static size_t g_alloc_now = 0, g_alloc_peak = 0;   // bytes held through be_alloc (sizes kept in a small table)
static size_t g_host_bytes = 0, g_host_peak = 0;    // pinned host memory held through be_host_alloc

cudaStream_t cu_stream(void) { return g_stream; }
int cu_precision(void) { return g_prec; }

void cu_die(const char* op, const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda backend: %s: %s\n", op, buf);
    fflush(stderr);
    exit(1);
}

void cu_check_(cudaError_t e, const char* op) {
    if (e != cudaSuccess) cu_die(op, "%s", cudaGetErrorString(e));
}

static void blas_check(cublasStatus_t s, const char* op) {
    if (s != CUBLAS_STATUS_SUCCESS) cu_die(op, "%s", cublasGetStatusString(s));
}

static void need_started(const char* op) {
    if (!g_started) cu_die(op, "called before be_init");
}

// ---- memory peaks: what the backend holds (be_alloc + scratch; sampled when either grows) and what the device
// has in use (cudaMemGetInfo, sampled at every synchronisation: be_sync, be_upload, be_download) ----
static size_t g_ws_total = 0, g_held_peak = 0, g_held_ws_at_peak = 0, g_dev_used_peak = 0, g_dev_total = 0;
static size_t g_period_peak = 0;   // the same since the last be_memory_peak(1)
static void note_held(void) {
    if (g_alloc_now + g_ws_total > g_held_peak) { g_held_peak = g_alloc_now + g_ws_total; g_held_ws_at_peak = g_ws_total; }
    if (g_alloc_now + g_ws_total > g_period_peak) g_period_peak = g_alloc_now + g_ws_total;
}
static void note_device_use(void) {
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) { cudaGetLastError(); return; }
    g_dev_total = tot;
    if (tot - fr > g_dev_used_peak) g_dev_used_peak = tot - fr;
}

// ---- a tiny table of allocation sizes (for the memory report; the backend frees by pointer) ----
typedef struct { void* p; size_t n; } AllocRec;
static AllocRec* g_recs = NULL;
static size_t g_nrec = 0, g_caprec = 0;
static void rec_add(void* p, size_t n) {
    if (g_nrec == g_caprec) {
        g_caprec = g_caprec ? 2 * g_caprec : 256;
        g_recs = (AllocRec*)realloc(g_recs, g_caprec * sizeof(AllocRec));
        if (!g_recs) cu_die("be_alloc", "out of host memory for the allocation table");
    }
    g_recs[g_nrec++] = AllocRec{ p, n };
    g_alloc_now += n;
    if (g_alloc_now > g_alloc_peak) g_alloc_peak = g_alloc_now;
    note_held();
}
static void rec_del(void* p) {
    for (size_t i = g_nrec; i-- > 0;)
        if (g_recs[i].p == p) { g_alloc_now -= g_recs[i].n; g_recs[i] = g_recs[--g_nrec]; return; }
}

// ---- scratch ----
// Stream-ordered (cudaMallocAsync from the device's pool: uninitialised, reused) where the device supports memory
// pools (probed at start-up: the attribute and a small allocation), else cudaMalloc / cudaFree (which synchronise the
// device; scratch only grows, rarely). Either way its contents are undefined: a user writes before it reads.
static int g_pools = 0;
static void* g_ws[WS_COUNT];
static size_t g_ws_size[WS_COUNT];
void* cu_workspace(int slot, size_t bytes) {
    if (bytes <= g_ws_size[slot]) return g_ws[slot];
    size_t n = bytes + bytes / 4 + 4096;   // grow with headroom: a slightly larger call does not re-allocate
    if (g_ws[slot]) {
        if (g_pools) CU_CHECK(cudaFreeAsync(g_ws[slot], g_stream), "workspace (cudaFreeAsync)");
        else CU_CHECK(cudaFree(g_ws[slot]), "workspace (cudaFree)");
    }
    g_ws_total -= g_ws_size[slot];
    g_ws[slot] = NULL; g_ws_size[slot] = 0;
    cudaError_t e = g_pools ? cudaMallocAsync(&g_ws[slot], n, g_stream) : cudaMalloc(&g_ws[slot], n);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        cu_die("workspace", "out of device memory allocating %.1f MiB of scratch (%s: %s; %.2f of %.2f GiB free)",
               n / 1048576.0, g_pools ? "cudaMallocAsync" : "cudaMalloc", cudaGetErrorString(e), fr / 1073741824.0,
               tot / 1073741824.0);
    }
    g_ws_size[slot] = n;
    g_ws_total += n;
    note_held();
    return g_ws[slot];
}

size_t cu_memory_peak_held(void) { return g_held_peak + BLAS_WS_BYTES; }
double be_memory_peak(int reset) {
    double peak = (double)(g_period_peak + BLAS_WS_BYTES);
    if (reset) g_period_peak = g_alloc_now + g_ws_total;
    if (reset == 2) { g_held_peak = g_period_peak; g_held_ws_at_peak = g_ws_total; g_alloc_peak = g_alloc_now; g_dev_used_peak = 0; }
    return peak;
}
const char* cu_device_name(void) { return g_prop.name; }

// RINGLM_CUDA_MEMORY: one line at exit with the peaks (not what is left after the arenas are freed)
static void memory_report(void) {
    if (!g_started || !getenv("RINGLM_CUDA_MEMORY")) return;
    note_device_use();
    printf("cuda backend: device %d memory: peak held %.1f MiB (be_alloc: params, grads, moments, activations, ring "
           "buffers %.1f MiB at most; scratch %.1f MiB at that peak), cuBLAS workspace %.0f MiB; device in use at most "
           "%.2f of %.2f GiB (sampled at synchronisations); pinned host memory at most %zu bytes\n", g_device,
           g_held_peak / 1048576.0, g_alloc_peak / 1048576.0, g_held_ws_at_peak / 1048576.0, BLAS_WS_BYTES / 1048576.0,
           g_dev_used_peak / 1073741824.0, g_dev_total / 1073741824.0, g_host_peak);
    fflush(stdout);
}

// ---------------------------------------------------------------------------------------------------------
// the profile by kernel class (RINGLM_CUDA_PROFILE=<file>): every backend call (and the transport's calls) is
// bracketed by two events on the compute stream; only the outermost bracket counts (be_embedding_backward's own
// be_download is part of "embedding"). At exit the file gets a markdown table: per class the calls, the summed
// milliseconds on the GPU's clock and the share; "idle" is the span from the first to the last event not covered
// by any class (the GPU waiting for the host). Rank r > 0 writes <file>.rank<r>.

static const char* PROF_NAMES[PROF_NCLASS] = { "matmul", "attention forward", "attention backward",
                                               "norms and pointwise", "embedding", "cross-entropy", "optimizer",
                                               "copies", "communication waits" };
static const char* g_prof_path = NULL;
static int g_cls_depth = 0, g_cls_cur = -1;   // the outermost class bracket open now (profile and anatomy)
static double g_prof_ms[PROF_NCLASS];
static long g_prof_calls[PROF_NCLASS];
typedef struct { cudaEvent_t a, b; int cls; } ProfPair;
static ProfPair* g_prof_pend = NULL;
static int g_prof_n = 0, g_prof_cap = 0;
static cudaEvent_t* g_prof_pool = NULL;
static int g_prof_npool = 0, g_prof_cappool = 0;
static cudaEvent_t g_prof_first = NULL, g_prof_last = NULL, g_prof_open = NULL;
static int g_prof_open_cls = -1;

static cudaEvent_t prof_event(void) {
    if (g_prof_npool) return g_prof_pool[--g_prof_npool];
    cudaEvent_t e;
    CU_CHECK(cudaEventCreate(&e), "profile (cudaEventCreate)");
    return e;
}
static void prof_recycle(cudaEvent_t e) {
    if (e == g_prof_first || e == g_prof_last) return;
    if (g_prof_npool == g_prof_cappool) {
        g_prof_cappool = g_prof_cappool ? 2 * g_prof_cappool : 1024;
        g_prof_pool = (cudaEvent_t*)realloc(g_prof_pool, g_prof_cappool * sizeof(cudaEvent_t));
        if (!g_prof_pool) cu_die("profile", "out of host memory");
    }
    g_prof_pool[g_prof_npool++] = e;
}
static void prof_harvest(void) {
    if (!g_prof_n) return;
    if (cudaEventQuery(g_prof_pend[g_prof_n - 1].b) == cudaErrorNotReady) {
        cu_anat_sync("the profile's events (profiling on)");
        cudaGetLastError();
    }
    CU_CHECK(cudaEventSynchronize(g_prof_pend[g_prof_n - 1].b), "profile (a queued kernel failed)");
    for (int i = 0; i < g_prof_n; i++) {
        float ms = 0;
        CU_CHECK(cudaEventElapsedTime(&ms, g_prof_pend[i].a, g_prof_pend[i].b), "profile (cudaEventElapsedTime)");
        g_prof_ms[g_prof_pend[i].cls] += ms;
        g_prof_calls[g_prof_pend[i].cls]++;
        prof_recycle(g_prof_pend[i].a);
        prof_recycle(g_prof_pend[i].b);
    }
    g_prof_n = 0;
}
int cu_class_now(void) { return g_cls_cur; }
const char* cu_class_name(int cls) { return cls >= 0 && cls < PROF_NCLASS ? PROF_NAMES[cls] : "other"; }
void cu_prof_begin(int cls) {
    if (g_cls_depth++ > 0) return;
    g_cls_cur = cls;
    if (!g_prof_path || !g_started) return;
    g_prof_open = prof_event();
    g_prof_open_cls = cls;
    CU_CHECK(cudaEventRecord(g_prof_open, g_stream), "profile (cudaEventRecord)");
    if (!g_prof_first) g_prof_first = g_prof_open;
}
void cu_prof_end(void) {
    if (--g_cls_depth > 0) return;
    g_cls_cur = -1;
    if (!g_prof_path || !g_started || !g_prof_open) return;
    cudaEvent_t b = prof_event();
    CU_CHECK(cudaEventRecord(b, g_stream), "profile (cudaEventRecord)");
    if (g_prof_n == g_prof_cap) {
        if (g_prof_n >= 4096) prof_harvest();
        else {
            g_prof_cap = g_prof_cap ? 2 * g_prof_cap : 256;
            g_prof_pend = (ProfPair*)realloc(g_prof_pend, g_prof_cap * sizeof(ProfPair));
            if (!g_prof_pend) cu_die("profile", "out of host memory");
        }
    }
    if (g_prof_last && g_prof_last != g_prof_first) {   // the previous last event is an ordinary one again
        cudaEvent_t keep = g_prof_last;
        g_prof_last = NULL;
        int used = 0;
        for (int i = 0; i < g_prof_n && !used; i++) used = g_prof_pend[i].a == keep || g_prof_pend[i].b == keep;
        if (!used) prof_recycle(keep);
    }
    g_prof_pend[g_prof_n++] = ProfPair{ g_prof_open, b, g_prof_open_cls };
    g_prof_last = b;
    g_prof_open = NULL;
}
// the profile's totals so far (the step anatomy's measured column); 0 when profiling is off
int cu_prof_totals(double ms[PROF_NCLASS]) {
    if (!g_prof_path || !g_started) return 0;
    prof_harvest();
    for (int c = 0; c < PROF_NCLASS; c++) ms[c] = g_prof_ms[c];
    return 1;
}
extern "C" void cuda_backend_prof_comm(int begin) {
    if (begin) cu_prof_begin(PROF_COMM);
    else cu_prof_end();
}
static void prof_report(void) {
    if (!g_prof_path || !g_started || !g_prof_first) return;
    prof_harvest();
    float span = 0;
    CU_CHECK(cudaEventSynchronize(g_prof_last), "profile (a queued kernel failed)");
    CU_CHECK(cudaEventElapsedTime(&span, g_prof_first, g_prof_last), "profile (cudaEventElapsedTime)");
    const char* r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r) r = getenv("PMI_RANK");
    if (!r) r = getenv("SLURM_PROCID");
    char path[4096];
    if (r && atoi(r) > 0) snprintf(path, sizeof path, "%s.rank%d", g_prof_path, atoi(r));
    else snprintf(path, sizeof path, "%s", g_prof_path);
    FILE* f = fopen(path, "w");
    if (!f) { fprintf(stderr, "cuda backend: cannot write the profile to %s\n", path); return; }
    double sum = 0;
    for (int c = 0; c < PROF_NCLASS; c++) sum += g_prof_ms[c];
    double idle = span > sum ? span - sum : 0, all = sum + idle;
    fprintf(f, "| class | calls | ms | share |\n|---|---:|---:|---:|\n");
    for (int c = 0; c < PROF_NCLASS; c++)
        fprintf(f, "| %s | %ld | %.2f | %.1f %% |\n", PROF_NAMES[c], g_prof_calls[c], g_prof_ms[c],
                all > 0 ? 100 * g_prof_ms[c] / all : 0.0);
    fprintf(f, "| idle (the GPU waiting for the host) | | %.2f | %.1f %% |\n", idle, all > 0 ? 100 * idle / all : 0.0);
    fprintf(f, "| total (first to last event) | | %.2f | 100 %% |\n", all);
    long long ec[2];
    attn_engine_counts(ec);
    fprintf(f, "\nattention blocks (pieces of block calls): %lld on the own kernels, %lld on cuDNN\n", ec[ATTN_ENGINE_OWN],
            ec[ATTN_ENGINE_FAST]);
    fclose(f);
}

// ---------------------------------------------------------------------------------------------------------
// life cycle

__global__ void probe_kernel(int* x) { if (x) *x = 1; }

extern "C" int cuda_backend_started(void) { return g_started; }
extern "C" void* cuda_backend_stream(void) { return (void*)g_stream; }
int cu_sm_count(void) { return g_prop.multiProcessorCount > 0 ? g_prop.multiProcessorCount : 1; }
size_t cu_smem_optin(void) { return g_prop.sharedMemPerBlockOptin; }
size_t cu_smem_per_sm(void) { return g_prop.sharedMemPerMultiprocessor; }
int cu_cc(void) { return g_prop.major * 10 + g_prop.minor; }
extern "C" void cuda_backend_device_uuid(unsigned char uuid[16]) { memcpy(uuid, g_prop.uuid.bytes, 16); }

extern "C" int cuda_backend_start(int local_rank, char* err, size_t errlen) {
    if (g_started) return 0;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cuda backend: no CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
        return 1;
    }
    if (n <= 0) { snprintf(err, errlen, "cuda backend: no CUDA device (cudaGetDeviceCount found none)"); return 1; }
    int dev = (local_rank < 0 ? 0 : local_rank) % n;
    if ((e = cudaSetDevice(dev)) != cudaSuccess || (e = cudaGetDeviceProperties(&g_prop, dev)) != cudaSuccess) {
        snprintf(err, errlen, "cuda backend: cannot use device %d (local rank %d of %d devices): %s", dev, local_rank, n,
                 cudaGetErrorString(e));
        return 1;
    }
    if (g_prop.major < 8) {   // the attention kernels' mma.sync (bf16), ldmatrix and cp.async need sm_80
        snprintf(err, errlen, "cuda backend: device %d (%s) has compute capability %d.%d; ringlm needs 8.0 or newer "
                 "(Ampere: A100, A40, A10; Ada: L40S, L4; Hopper: H100, H200)", dev, g_prop.name, g_prop.major, g_prop.minor);
        return 1;
    }
    cudaFuncAttributes fa;
    if ((e = cudaFuncGetAttributes(&fa, probe_kernel)) != cudaSuccess) {
        snprintf(err, errlen, "cuda backend: device %d (%s): the kernels of this build cannot load: %s", dev, g_prop.name,
                 cudaGetErrorString(e));
        return 1;
    }
    if ((e = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking)) != cudaSuccess) {
        snprintf(err, errlen, "cuda backend: device %d: cudaStreamCreate: %s", dev, cudaGetErrorString(e));
        return 1;
    }
    cublasStatus_t s = cublasCreate(&g_blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cuda backend: device %d: cublasCreate: %s", dev, cublasGetStatusString(s));
        return 1;
    }
    if ((e = cudaMalloc(&g_blas_ws, BLAS_WS_BYTES)) != cudaSuccess) {
        snprintf(err, errlen, "cuda backend: device %d: out of device memory for the 32 MiB cuBLAS workspace: %s", dev,
                 cudaGetErrorString(e));
        return 1;
    }
    blas_check(cublasSetStream(g_blas, g_stream), "cublasSetStream");
    blas_check(cublasSetWorkspace(g_blas, g_blas_ws, BLAS_WS_BYTES), "cublasSetWorkspace");
    // stream-ordered memory pools for the scratch: the attribute, then a small allocation (some virtualised runtimes
    // report pools they cannot give); without them cudaMalloc, with one line (never "out of memory" for "unsupported")
    int pools = 0;
    char why[300] = "";
    if ((e = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev)) != cudaSuccess) {
        snprintf(why, sizeof why, "cudaDeviceGetAttribute: %s", cudaGetErrorString(e));
        cudaGetLastError();
        pools = 0;
    } else if (!pools) snprintf(why, sizeof why, "cudaDevAttrMemoryPoolsSupported is 0");
    else {
        void* t = NULL;
        if ((e = cudaMallocAsync(&t, 256, g_stream)) == cudaSuccess && (e = cudaFreeAsync(t, g_stream)) == cudaSuccess)
            e = cudaStreamSynchronize(g_stream);
        if (e != cudaSuccess) {
            snprintf(why, sizeof why, "a 256-byte cudaMallocAsync: %s", cudaGetErrorString(e));
            cudaGetLastError();
            pools = 0;
        }
    }
    g_pools = pools;
    if (!pools) {
        fprintf(stderr, "cuda backend: device %d (%s): no stream-ordered memory pools (%s): scratch through cudaMalloc\n",
                dev, g_prop.name, why);
        fflush(stderr);
    }
    const char* p = getenv("RINGLM_CUDA_PRECISION");   // the default before be_set_matmul_precision (tests)
    if (p && be_set_matmul_precision(p)) {
        snprintf(err, errlen, "cuda backend: RINGLM_CUDA_PRECISION = '%s' must be bf16, tf32 or fp32", p);
        return 1;
    }
    g_device = dev;
    g_started = 1;
    note_device_use();
    atexit(memory_report);
    const char* prof = getenv("RINGLM_CUDA_PROFILE");
    if (prof && *prof) { g_prof_path = prof; atexit(prof_report); }
    return 0;
}

int be_init(int local_rank, char* err, size_t errlen) {
    if (cuda_backend_start(local_rank, err, errlen)) return 1;
    attn_init(128);
    return 0;
}

const char* be_name(void) { return "cuda"; }

double be_memory_available(int node_ranks) {
    need_started("be_memory_available");
    size_t fr = 0, tot = 0;
    CU_CHECK(cudaMemGetInfo(&fr, &tot), "be_memory_available (cudaMemGetInfo)");
    int n = 1;
    cudaGetDeviceCount(&n);
    int share = node_ranks > n && n > 0 ? (node_ranks + n - 1) / n : 1;   // ranks per device
    return (double)fr / share;
}

void be_sync(void) {
    need_started("be_sync");
    cu_anat_sync("be_sync");
    CU_CHECK(cudaStreamSynchronize(g_stream), "be_sync (a queued kernel or copy failed)");
    note_device_use();
}

// Rows per attention call while a ring transfer is in flight: the GPU needs no host polling (NCCL progresses
// by itself; the host-staged transport progresses in comm_wait while queued kernels run), so whole segments.
// LM-head chunks of 4096 rows: [4096, vocab] fp32 logits (0.5 GB at a 32K vocabulary).
static const BeTuning TUNING = { 1 << 20, 4096, 256 };   // ring_query_rows, head_rows, norm_groups
const BeTuning* be_tuning(void) { return &TUNING; }

// ---------------------------------------------------------------------------------------------------------
// timers: CUDA events on the compute stream

typedef struct { cudaEvent_t a, b; } EvPair;
struct BeTimer {
    double clamp;
    BeTimes acc;
    EvPair* pend;             // regions ended, not yet read (FIFO from head)
    int head, n, cap;
    cudaEvent_t* pool;        // free events
    int npool, cappool;
    cudaEvent_t open;         // the begin event of the open region
};

static cudaEvent_t ev_get(BeTimer* t) {
    if (t->npool) return t->pool[--t->npool];
    cudaEvent_t e;
    CU_CHECK(cudaEventCreate(&e), "be_timer (cudaEventCreate)");
    return e;
}
static void ev_put(BeTimer* t, cudaEvent_t e) {
    if (t->npool == t->cappool) {
        t->cappool = t->cappool ? 2 * t->cappool : 64;
        t->pool = (cudaEvent_t*)realloc(t->pool, t->cappool * sizeof(cudaEvent_t));
        if (!t->pool) cu_die("be_timer", "out of host memory");
    }
    t->pool[t->npool++] = e;
}
// fold the finished regions at the head into the totals; wait = 1: every region
static void timer_harvest(BeTimer* t, int wait) {
    while (t->n) {
        EvPair* p = &t->pend[t->head];
        if (wait) {
            if (cudaEventQuery(p->b) == cudaErrorNotReady) {
                cu_anat_sync("be_timer_read (a timed region not finished)");
                cudaGetLastError();
            }
            CU_CHECK(cudaEventSynchronize(p->b), "be_timer_read (a queued kernel failed)");
        } else {
            cudaError_t e = cudaEventQuery(p->b);
            if (e == cudaErrorNotReady) return;
            CU_CHECK(e, "be_timer (a queued kernel failed)");
        }
        float ms = 0;
        CU_CHECK(cudaEventElapsedTime(&ms, p->a, p->b), "be_timer (cudaEventElapsedTime)");
        double dt = ms * 1e-3;
        t->acc.wall_s += dt;
        t->acc.work_s += dt;
        t->acc.clamped_s += dt < t->clamp ? dt : t->clamp;
        t->acc.regions++;
        ev_put(t, p->a); ev_put(t, p->b);
        t->head = (t->head + 1) % t->cap;
        t->n--;
    }
}

BeTimer* be_timer_create(double clamp_s) {
    need_started("be_timer_create");
    BeTimer* t = (BeTimer*)calloc(1, sizeof *t);
    if (!t) cu_die("be_timer_create", "out of host memory");
    t->clamp = clamp_s;
    return t;
}
void be_timer_free(BeTimer* t) {
    if (!t) return;
    timer_harvest(t, 1);
    if (t->open) cudaEventDestroy(t->open);
    for (int i = 0; i < t->npool; i++) cudaEventDestroy(t->pool[i]);
    free(t->pool); free(t->pend); free(t);
}
void be_timer_begin(BeTimer* t) {
    if (!t->open) t->open = ev_get(t);
    CU_CHECK(cudaEventRecord(t->open, g_stream), "be_timer_begin (cudaEventRecord)");
}
void be_timer_end(BeTimer* t) {
    if (!t->open) cu_die("be_timer_end", "no region was begun");
    if (t->n >= 256) timer_harvest(t, 0);
    if (t->n == t->cap) {   // grow the ring buffer, unrolling it
        int cap = t->cap ? 2 * t->cap : 64;
        EvPair* np = (EvPair*)malloc(cap * sizeof(EvPair));
        if (!np) cu_die("be_timer_end", "out of host memory");
        for (int i = 0; i < t->n; i++) np[i] = t->pend[(t->head + i) % t->cap];
        free(t->pend);
        t->pend = np; t->head = 0; t->cap = cap;
    }
    cudaEvent_t b = ev_get(t);
    CU_CHECK(cudaEventRecord(b, g_stream), "be_timer_end (cudaEventRecord)");
    t->pend[(t->head + t->n) % t->cap] = EvPair{ t->open, b };
    t->n++;
    t->open = NULL;
}
BeTimes be_timer_read(BeTimer* t) {
    timer_harvest(t, 1);
    return t->acc;
}

// ---------------------------------------------------------------------------------------------------------
// memory

void* be_alloc(size_t bytes) {
    need_started("be_alloc");
    if (bytes == 0) bytes = 256;
    void* p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaGetLastError();
        cudaMemGetInfo(&fr, &tot);
        fprintf(stderr, "cuda backend: out of device memory allocating %.1f MiB (cudaMalloc: %s; %.2f of %.2f GiB free "
                "on device %d)\n", bytes / 1048576.0, cudaGetErrorString(e), fr / 1073741824.0, tot / 1073741824.0,
                g_device);
        fflush(stderr);
        exit(1);
    }
    CU_CHECK(cudaMemsetAsync(p, 0, bytes, g_stream), "be_alloc (cudaMemsetAsync)");
    rec_add(p, bytes);
    return p;
}
void be_free(void* p) {
    if (!p) return;
    rec_del(p);
    CU_CHECK(cudaFree(p), "be_free (cudaFree)");
}
// ---- uploads: staged through a ring of pinned host memory and queued, so that the host does not wait ----
// be_upload copies the host data into the ring and queues its copy to the device: the caller's buffer is free at once.
// A region of the ring is written again only after the copy that read it has completed (an event per upload; waiting
// for one is a host synchronisation, which the step anatomy counts: with 64 MiB it happens only when the host runs
// that far ahead of the device). An upload larger than a quarter of the ring (start-up: parameters, tables) is copied
// directly and waited for.
static const size_t UP_RING = (size_t)64 << 20;
static char* g_up = NULL;
static size_t g_up_head = 0;
typedef struct { size_t off, len; cudaEvent_t ev; } UpRec;
enum { UP_MAX = 256 };
static UpRec g_uprec[UP_MAX];
static int g_nup = 0;
static cudaEvent_t g_up_pool[UP_MAX];
static int g_nup_pool = 0;

// retire the completed uploads; wait for those overlapping [lo, hi) (all of them: hi = 0 with lo = ~0)
static void up_retire(size_t lo, size_t hi, int all) {
    int j = 0;
    for (int i = 0; i < g_nup; i++) {
        UpRec r = g_uprec[i];
        int overlap = all || (r.off < hi && lo < r.off + r.len);
        cudaError_t q = cudaEventQuery(r.ev);
        if (q == cudaErrorNotReady) {
            cudaGetLastError();
            if (!overlap) { g_uprec[j++] = r; continue; }
            cu_anat_sync("be_upload (its staging region still being copied)");
            CU_CHECK(cudaEventSynchronize(r.ev), "be_upload (a queued copy failed)");
        } else CU_CHECK(q, "be_upload (a queued copy failed)");
        g_up_pool[g_nup_pool++] = r.ev;
    }
    g_nup = j;
}
static void upload_async(void* dst, const void* src, size_t bytes, const char* op) {
    cu_anat_xfer(1, (double)bytes);
    if (bytes > UP_RING / 4) {
        CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g_stream), op);
        cu_anat_sync("be_upload (larger than the staging ring: waits)");
        CU_CHECK(cudaStreamSynchronize(g_stream), op);
        return;
    }
    if (!g_up) CU_CHECK(cudaMallocHost((void**)&g_up, UP_RING), "be_upload (cudaMallocHost of the staging ring)");
    size_t len = (bytes + 255) / 256 * 256;
    if (g_up_head + len > UP_RING) g_up_head = 0;
    if (g_nup == UP_MAX) up_retire(0, 0, 1);
    up_retire(g_up_head, g_up_head + len, 0);
    memcpy(g_up + g_up_head, src, bytes);
    CU_CHECK(cudaMemcpyAsync(dst, g_up + g_up_head, bytes, cudaMemcpyHostToDevice, g_stream), op);
    cudaEvent_t ev;
    if (g_nup_pool) ev = g_up_pool[--g_nup_pool];
    else CU_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "be_upload (cudaEventCreate)");
    CU_CHECK(cudaEventRecord(ev, g_stream), "be_upload (cudaEventRecord)");
    g_uprec[g_nup++] = UpRec{ g_up_head, len, ev };
    g_up_head += len;
}
void be_upload(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    PROF(PROF_COPY);
    upload_async(dst, src, bytes, "be_upload (cudaMemcpyAsync)");
}
void be_download(void* dst, const void* src, size_t bytes) {
    if (!bytes) return;
    PROF(PROF_COPY);
    cu_anat_xfer(0, (double)bytes);
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_stream), "be_download (cudaMemcpyAsync)");
    cu_anat_sync("be_download");
    CU_CHECK(cudaStreamSynchronize(g_stream), "be_download (a queued kernel or copy failed)");
    note_device_use();
}
// pinned host memory (its size kept in front of it) and the copy stream (made at the first asynchronous copy)
static cudaStream_t g_copy_stream;
static cudaEvent_t g_copy_ready;   // recorded on the compute stream before each asynchronous copy
void* be_host_alloc(size_t bytes) {
    need_started("be_host_alloc");
    char* p = NULL;
    cudaError_t e = cudaMallocHost((void**)&p, bytes + 64);
    if (e != cudaSuccess) {
        cudaGetLastError();
        fprintf(stderr, "cuda backend: cannot pin %.1f MiB of host memory (cudaMallocHost: %s; %.1f MiB pinned already)\n",
                bytes / 1048576.0, cudaGetErrorString(e), g_host_bytes / 1048576.0);
        fflush(stderr);
        exit(1);
    }
    *(size_t*)p = bytes;   // (not zero-filled: pinning is the cost, touching every page would double it)
    g_host_bytes += bytes;
    if (g_host_bytes > g_host_peak) g_host_peak = g_host_bytes;
    return p + 64;
}
void be_host_free(void* p) {
    if (!p) return;
    char* h = (char*)p - 64;
    g_host_bytes -= *(size_t*)h;
    CU_CHECK(cudaFreeHost(h), "be_host_free (cudaFreeHost)");
}
size_t be_host_bytes(void) { return g_host_bytes; }
struct BeEvent { cudaEvent_t e; };
BeEvent* be_event_create(void) {
    need_started("be_event_create");
    BeEvent* e = (BeEvent*)calloc(1, sizeof(BeEvent));
    if (!e) cu_die("be_event_create", "out of host memory");
    CU_CHECK(cudaEventCreateWithFlags(&e->e, cudaEventDisableTiming), "be_event_create (cudaEventCreate)");
    return e;
}
void be_event_free(BeEvent* e) {
    if (!e) return;
    cudaEventDestroy(e->e);
    free(e);
}
static void copy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, BeEvent* done, const char* op) {
    if (!g_copy_stream) {
        CU_CHECK(cudaStreamCreateWithFlags(&g_copy_stream, cudaStreamNonBlocking), "cudaStreamCreate (copy stream)");
        CU_CHECK(cudaEventCreateWithFlags(&g_copy_ready, cudaEventDisableTiming), "cudaEventCreate (copy stream)");
    }
    PROF(PROF_COPY);
    cu_anat_xfer_async(kind == cudaMemcpyHostToDevice, (double)bytes);   // (on the copy stream: no time predicted)
    CU_CHECK(cudaEventRecord(g_copy_ready, g_stream), op);            // after what the compute stream holds now
    CU_CHECK(cudaStreamWaitEvent(g_copy_stream, g_copy_ready, 0), op);
    if (bytes) CU_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, g_copy_stream), op);
    CU_CHECK(cudaEventRecord(done->e, g_copy_stream), op);
}
void be_copy_to_host_async(void* host, const void* src, size_t bytes, BeEvent* done) {
    copy_async(host, src, bytes, cudaMemcpyDeviceToHost, done, "be_copy_to_host_async");
}
void be_copy_from_host_async(void* dst, const void* host, size_t bytes, BeEvent* done) {
    copy_async(dst, host, bytes, cudaMemcpyHostToDevice, done, "be_copy_from_host_async");
}
void be_wait_event(BeEvent* e) { CU_CHECK(cudaStreamWaitEvent(g_stream, e->e, 0), "be_wait_event (cudaStreamWaitEvent)"); }

void be_zero(void* p, size_t bytes) {
    PROF(PROF_COPY);
    if (!bytes) return;
    cu_anat_op("cudaMemsetAsync (be_zero)", 0, (double)bytes);
    CU_CHECK(cudaMemsetAsync(p, 0, bytes, g_stream), "be_zero (cudaMemsetAsync)");
}
void be_copy(void* dst, const void* src, size_t bytes) {   // memmove semantics
    if (!bytes || dst == src) return;
    PROF(PROF_COPY);
    const char *d = (const char*)dst, *s = (const char*)src;
    if (d < s + bytes && s < d + bytes) {   // overlapping: through scratch
        void* tmp = cu_workspace(WS_COPY, bytes);
        cu_anat_op("cudaMemcpyAsync (be_copy)", (double)bytes, (double)bytes);
        CU_CHECK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, g_stream), "be_copy (cudaMemcpyAsync)");
        src = tmp;
    }
    cu_anat_op("cudaMemcpyAsync (be_copy)", (double)bytes, (double)bytes);
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_stream), "be_copy (cudaMemcpyAsync)");
}

// ---------------------------------------------------------------------------------------------------------
// reductions inside a block (fixed order: warp tree, then warp 0 over the warps' results)

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// every thread of the block gets the result; blockDim.x a multiple of 32, at most 1024
__device__ double block_sum_d(double v) {
    SHARED(double, sh, [32]);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0;
    v = warp_sum_d(v);
    return v;
}
__device__ float block_max(float v) {
    SHARED(float, sh, [32]);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(v);
}

// ---------------------------------------------------------------------------------------------------------
// dense

int be_set_matmul_precision(const char* name) {
    if (!strcmp(name, "bf16")) g_prec = CU_BF16;
    else if (!strcmp(name, "tf32")) g_prec = CU_TF32;
    else if (!strcmp(name, "fp32")) g_prec = CU_FP32;
    else return 1;
    return 0;
}

__global__ void scale_k(float* x, size_t n, float beta) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = beta == 0.0f ? 0.0f : x[i] * beta;
}

static unsigned grid_for(size_t n) {   // grid-stride kernels: at most 8 blocks of 256 per SM worth of work
    size_t b = (n + 255) / 256, cap = (size_t)(g_prop.multiProcessorCount > 0 ? g_prop.multiProcessorCount : 132) * 16;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

int be_has_bf16(void) { return 1; }

static cudaDataType_t cuda_type(BeDtype t) { return t == BE_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

// Row-major C = alpha op(A) op(B) + beta C is column-major C^T = alpha op(B)^T op(A)^T + beta C^T: one gemm
// with the operands swapped and the same transposition flags and leading dimensions. fp32 operands: the compute type
// of the matmul precision (bf16 / tf32 tensor cores convert them inside cuBLAS); bf16 operands: fp32 accumulation of
// exact bf16 products; C fp32 or bf16.
void be_matmul_ex(void* C, BeDtype ct, int ldc, const void* A, BeDtype at, int lda, const void* B, BeDtype bt, int ldb,
                  int m, int n, int k, int transA, int transB, float alpha, float beta) {
    PROF(PROF_MATMUL);
    if (m <= 0 || n <= 0) return;
    if (!lda) lda = transA ? m : k;
    if (!ldb) ldb = transB ? k : n;
    if (!ldc) ldc = n;
    if (at != bt || (ct == BE_BF16 && at != BE_BF16) || (at == BE_BF16 && g_prec != CU_BF16))
        cu_die("be_matmul_ex", "operands %s x %s -> %s under the %s matmul precision: bf16 operands go with bf16 on both "
               "sides and matmul_precision bf16", at == BE_BF16 ? "bf16" : "fp32", bt == BE_BF16 ? "bf16" : "fp32",
               ct == BE_BF16 ? "bf16" : "fp32", g_prec == CU_BF16 ? "bf16" : g_prec == CU_TF32 ? "tf32" : "fp32");
    if (k <= 0) {
        if (ct != BE_F32) cu_die("be_matmul_ex", "k = 0 with a bf16 result");
        TRAFFIC(beta != 0.0f ? (double)m * n * 4 : 0, (double)m * n * 4);
        LAUNCH(scale_k, grid_for((size_t)m * n), 256, 0, (float*)C, (size_t)m * n, beta);
        CU_LAUNCHED("be_matmul (k = 0)");
        return;
    }
    cublasComputeType_t cmp = at == BE_BF16 ? CUBLAS_COMPUTE_32F
                            : g_prec == CU_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                            : g_prec == CU_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cu_anat_gemm(m, n, k, transA, transB, at == BE_BF16 ? CU_DT_BF16 : CU_DT_F32, bt == BE_BF16 ? CU_DT_BF16 : CU_DT_F32,
                 ct == BE_BF16 ? CU_DT_BF16 : CU_DT_F32, at == BE_BF16 ? CU_BF16 : g_prec, beta != 0.0f);
    cublasStatus_t s = cublasGemmEx(g_blas, transB ? CUBLAS_OP_T : CUBLAS_OP_N, transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    n, m, k, &alpha, B, cuda_type(bt), ldb, A, cuda_type(at), lda, &beta, C, cuda_type(ct), ldc,
                                    cmp, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        cu_die("be_matmul", "cublasGemmEx (m %d, n %d, k %d, transA %d, transB %d, %s): %s", m, n, k, transA, transB,
               at == BE_BF16 ? "bf16" : "fp32", cublasGetStatusString(s));
}
void be_matmul(float* C, const float* A, const float* B, int m, int n, int k,
               int transA, int transB, float alpha, float beta) {
    be_matmul_ex(C, BE_F32, 0, A, BE_F32, 0, B, BE_F32, 0, m, n, k, transA, transB, alpha, beta);
}

// ---- element access of activations: fp32 or bf16 in memory, fp32 in registers ----
typedef __nv_bfloat16 bf16;
__device__ __forceinline__ float ldv(const float* p, size_t i) { return p[i]; }
__device__ __forceinline__ float ldv(const bf16* p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void stv(float* p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void stv(bf16* p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

template <class T> __global__ void cast_k(T* dst, const float* src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        stv(dst, i, src[i]);
}
void be_cast(void* dst, BeDtype dt, const float* src, size_t n) {
    PROF(PROF_POINTWISE);
    if (!n) return;
    if (dt == BE_F32) { be_copy(dst, src, n * sizeof(float)); return; }
    TRAFFIC(4.0 * n, 2.0 * n);
    LAUNCH(cast_k<bf16>, grid_for(n), 256, 0, (bf16*)dst, src, n);
    CU_LAUNCHED("be_cast");
}

__global__ void add_k(float* y, const float* x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}
void be_add(float* y, const float* x, size_t n) {
    PROF(PROF_POINTWISE);
    if (!n) return;
    TRAFFIC(8.0 * n, 4.0 * n);
    LAUNCH(add_k, grid_for(n), 256, 0, y, x, n);
    CU_LAUNCHED("be_add");
}

// ---- column blocks <-> row blocks (be_split_cols / be_merge_cols): one thread per element of the packed side
// (split) or of the unpacked side (merge: it sums the j that share its block, in j order) ----
__global__ void split_cols_k(float* dst, const float* src, int R, int ld, int w, int P, int nb) {
    size_t n = (size_t)P * R * w;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(i % w);
        size_t jr = i / w;
        int r = (int)(jr % R), j = (int)(jr / R);
        dst[i] = src[(size_t)r * ld + (size_t)(j * nb / P) * w + c];
    }
}
__global__ void merge_cols_k(float* dst, const float* src, int R, int ld, int w, int P, int nb, int accumulate) {
    size_t n = (size_t)R * nb * w;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int c = (int)(i % w);
        size_t rb = i / w;
        int b = (int)(rb % nb), r = (int)(rb / nb);
        float* d = dst + (size_t)r * ld + (size_t)b * w + c;
        float acc = accumulate ? *d : 0.0f;
        int j0 = (b * P + nb - 1) / nb, j1 = ((b + 1) * P + nb - 1) / nb;   // the j with j * nb / P == b
        for (int j = j0; j < j1; j++) acc += src[((size_t)j * R + r) * w + c];
        *d = acc;
    }
}
void be_split_cols(float* dst, const float* src, int R, int ld, int w, int P, int nb) {
    PROF(PROF_COPY);
    if (R <= 0 || w <= 0 || P <= 0) return;
    if (nb <= 0 || nb > P) cu_die("be_split_cols", "%d blocks for %d parts", nb, P);
    TRAFFIC_BOUNDS(4.0 * R * nb * w, 4.0 * P * R * w, 4.0 * R * nb * w, 4.0 * R * ld, 4.0 * P * R * w, 4.0 * P * R * w);
    LAUNCH(split_cols_k, grid_for((size_t)P * R * w), 256, 0, dst, src, R, ld, w, P, nb);
    CU_LAUNCHED("be_split_cols");
}
void be_merge_cols(float* dst, const float* src, int R, int ld, int w, int P, int nb, int accumulate) {
    PROF(PROF_COPY);
    if (R <= 0 || w <= 0 || P <= 0) return;
    if (nb <= 0 || nb > P || (!accumulate && nb != P)) cu_die("be_merge_cols", "%d blocks for %d parts (accumulate %d)", nb, P, accumulate);
    double mrd = 4.0 * P * R * w + (accumulate ? 4.0 * R * nb * w : 0), mwr = 4.0 * R * nb * w;
    TRAFFIC_BOUNDS(mrd, mwr, mrd, 4.0 * P * R * w + (accumulate ? 4.0 * R * ld : 0), mwr, 4.0 * R * ld);
    LAUNCH(merge_cols_k, grid_for((size_t)R * nb * w), 256, 0, dst, src, R, ld, w, P, nb, accumulate);
    CU_LAUNCHED("be_merge_cols");
}

// ---- sums of squares: chunks of at most CHUNK elements, each summed by one block (double), then the
// chunks of each class summed in a fixed partition; one read-back of nclass doubles ----
#define SUMSQ_CHUNK 65536
typedef struct { size_t off; int n, cls; } SqChunk;

__global__ void sumsq_chunks_k(double* part, const float* x, const SqChunk* ch) {
    SqChunk c = ch[blockIdx.x];
    const float* p = x + c.off;
    double s = 0;
    for (int i = threadIdx.x; i < c.n; i += blockDim.x) { double v = p[i]; s += v * v; }
    s = block_sum_d(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
__global__ void sumsq_final_k(double* out, const double* part, const SqChunk* ch, int nchunk, int nclass) {
    for (int c = 0; c < nclass; c++) {
        double s = 0;
        for (int i = threadIdx.x; i < nchunk; i += blockDim.x)
            if (ch[i].cls == c) s += part[i];
        s = block_sum_d(s);
        if (threadIdx.x == 0) out[c] = s;
    }
}

// Segments cut into chunks of at most SUMSQ_CHUNK elements, as a table in device memory: built on the host and uploaded
// (queued) only when it differs from the one the slot holds (the gradient norm's and AdamW's tables do not change
// between steps). *n: the chunks.
typedef struct { SqChunk* host; int n, cap, uploaded; SqChunk* dev; } ChunkTable;
static const SqChunk* chunk_table(ChunkTable* t, int slot, const BeSegment* seg, int nseg, int* n_out, const char* op) {
    int n = 0;
    for (int i = 0; i < nseg; i++) n += (int)((seg[i].n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK);
    *n_out = n;
    if (n == 0) return NULL;
    SqChunk* tab = (SqChunk*)malloc((size_t)n * sizeof(SqChunk));
    if (!tab) cu_die(op, "out of host memory");
    int k = 0;
    for (int i = 0; i < nseg; i++)
        for (size_t o = 0; o < seg[i].n; o += SUMSQ_CHUNK) {
            size_t m = seg[i].n - o < SUMSQ_CHUNK ? seg[i].n - o : SUMSQ_CHUNK;
            tab[k++] = SqChunk{ seg[i].offset + o, (int)m, seg[i].cls };
        }
    size_t bytes = (size_t)n * sizeof(SqChunk);
    SqChunk* dtab = (SqChunk*)cu_workspace(slot, bytes);
    if (!t->uploaded || dtab != t->dev || n != t->n || memcmp(tab, t->host, bytes)) {
        upload_async(dtab, tab, bytes, op);
        if (n > t->cap) {
            free(t->host);
            t->host = (SqChunk*)malloc(bytes);
            if (!t->host) cu_die(op, "out of host memory");
            t->cap = n;
        }
        memcpy(t->host, tab, bytes);
        t->n = n; t->dev = dtab; t->uploaded = 1;
    }
    free(tab);
    return dtab;
}

static ChunkTable g_sq_tab;

void be_sumsq_segments(double* out, int nclass, const float* x, const BeSegment* seg, int nseg) {
    PROF(PROF_OPTIM);
    need_started("be_sumsq_segments");
    if (nclass <= 0) return;
    if (nclass > 64) cu_die("be_sumsq_segments", "%d classes (at most 64)", nclass);
    for (int i = 0; i < nseg; i++)
        if (seg[i].cls < 0 || seg[i].cls >= nclass) cu_die("be_sumsq_segments", "segment %d has class %d of %d", i, seg[i].cls, nclass);
    int n;
    const SqChunk* dtab = chunk_table(&g_sq_tab, WS_SUMSQ_TAB, seg, nseg, &n, "be_sumsq_segments (upload)");
    if (n == 0) { be_zero(out, (size_t)nclass * sizeof(double)); return; }
    size_t tab_bytes = (size_t)n * sizeof(SqChunk);
    double* part = (double*)cu_workspace(WS_SUMSQ, (size_t)n * sizeof(double));
    size_t nel = 0;
    for (int i = 0; i < nseg; i++) nel += seg[i].n;
    TRAFFIC(4.0 * nel + (double)tab_bytes, 8.0 * n);
    LAUNCH(sumsq_chunks_k, n, 256, 0, part, x, dtab);
    CU_LAUNCHED("be_sumsq_segments");
    TRAFFIC(8.0 * n + (double)tab_bytes, 8.0 * nclass);
    LAUNCH(sumsq_final_k, 1, 256, 0, out, part, dtab, n, nclass);
    CU_LAUNCHED("be_sumsq_segments");
}

// acc[0] += sum of x: one block, a fixed partition (thread i sums x[i], x[i + 1024], ...) and a fixed tree
__global__ void sum_k(double* acc, const float* x, size_t n) {
    double s = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    s = block_sum_d(s);
    if (threadIdx.x == 0) acc[0] += s;
}
void be_sum(double* acc, const float* x, size_t n) {
    PROF(PROF_XENT);
    TRAFFIC(4.0 * n + 8, 8);
    LAUNCH(sum_k, 1, 1024, 0, acc, x, n);
    CU_LAUNCHED("be_sum");
}

__global__ void clip_scale_k(float* scale, const double* sumsq, int n, float clip) {
    double s = 0;
    for (int i = 0; i < n; i++) s += sumsq[i];
    double coef = clip > 0 ? clip / (sqrt(s) + 1e-6) : 1.0;
    scale[0] = coef < 1.0 ? (float)coef : 1.0f;
}
void be_clip_scale(float* scale, const double* sumsq, int n, float clip) {
    PROF(PROF_OPTIM);
    TRAFFIC(8.0 * n, 4);
    LAUNCH(clip_scale_k, 1, 1, 0, scale, sumsq, n, clip);
    CU_LAUNCHED("be_clip_scale");
}

// ---------------------------------------------------------------------------------------------------------
// embedding

__global__ void embedding_fwd_k(float* out, const int* tok, const float* wte, int N, int C, int v0, int nv) {
    size_t n = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int row = (int)(i / C), c = (int)(i % C);
        int r = tok[row] - v0;
        out[i] = (r >= 0 && r < nv) ? wte[(size_t)r * C + c] : 0.0f;
    }
}
void be_embedding_forward(float* out, const int* tok, const float* wte, int N, int C, int v0, int nv) {
    PROF(PROF_EMBED);
    if (N <= 0 || C <= 0) return;
    TRAFFIC_BOUNDS(4.0 * N + 4.0 * N * C, 4.0 * N * C, 4.0 * N, 4.0 * N + cu_gather_hi(N, 4.0 * C), 4.0 * N * C, 4.0 * N * C);
    LAUNCH(embedding_fwd_k, grid_for((size_t)N * C), 256, 0, out, tok, wte, N, C, v0, nv);
    CU_LAUNCHED("be_embedding_forward");
}

// Deterministic without atomics, in the CPU's order, on the device and without the host: one block sorts the token
// indices by vocabulary row with a stable radix sort (4-bit digits: per pass a histogram per thread of its contiguous
// range of indices in shared memory, an exclusive scan in (digit, thread) order, a scatter in index order, so equal rows
// keep ascending indices; tokens of other slices get the key nv and sort last) and lists the runs of equal rows; then
// one block per (run, column range) adds the rows of dout in that order into the row of dwte.
#define EMB_T 512      // threads of the sorting block
#define EMB_BINS 16    // 4-bit digits
// ws: keys[N], vals[N], keys2[N], vals2[N], runs[N + 2] = U, U run starts, then M (the tokens in this slice)
__global__ void emb_sort_k(int* ws, const int* tok, int N, int v0, int nv, int passes) {
    SHARED(int, hist, [EMB_BINS * EMB_T]);
    SHARED(int, part, [EMB_T + 1]);
    int t = threadIdx.x, per = (N + EMB_T - 1) / EMB_T, i0 = t * per < N ? t * per : N, i1 = i0 + per < N ? i0 + per : N;
    int *key = ws, *val = ws + N, *key2 = ws + 2 * N, *val2 = ws + 3 * N, *runs = ws + 4 * N;
    for (int i = i0; i < i1; i++) {
        int r = tok[i] - v0;
        key[i] = r >= 0 && r < nv ? r : nv;
        val[i] = i;
    }
    for (int p = 0; p < passes; p++) {
        int sh = 4 * p;
        for (int d = 0; d < EMB_BINS; d++) hist[d * EMB_T + t] = 0;
        for (int i = i0; i < i1; i++) hist[((key[i] >> sh) & (EMB_BINS - 1)) * EMB_T + t]++;
        __syncthreads();
        int s = 0;   // thread t scans the EMB_BINS consecutive entries [t EMB_BINS, (t + 1) EMB_BINS) of (digit, thread) order
        for (int j = 0; j < EMB_BINS; j++) s += hist[t * EMB_BINS + j];
        part[t] = s;
        __syncthreads();
        if (t == 0) {
            int run = 0;
            for (int j = 0; j < EMB_T; j++) { int x = part[j]; part[j] = run; run += x; }
        }
        __syncthreads();
        s = part[t];
        for (int j = 0; j < EMB_BINS; j++) { int x = hist[t * EMB_BINS + j]; hist[t * EMB_BINS + j] = s; s += x; }
        __syncthreads();
        for (int i = i0; i < i1; i++) {
            int at = hist[((key[i] >> sh) & (EMB_BINS - 1)) * EMB_T + t]++;
            key2[at] = key[i];
            val2[at] = val[i];
        }
        __syncthreads();
        int* x = key; key = key2; key2 = x;
        x = val; val = val2; val2 = x;
    }
    // runs: a run starts where the key changes (keys of this slice only); thread t's starts after those of threads < t
    int n = 0, m = 0;
    for (int i = i0; i < i1; i++) {
        m += key[i] < nv;
        n += key[i] < nv && (i == 0 || key[i] != key[i - 1]);
    }
    part[t] = n;
    hist[t] = m;
    __syncthreads();
    if (t == 0) {
        int run = 0, tot = 0;
        for (int j = 0; j < EMB_T; j++) { int x = part[j]; part[j] = run; run += x; tot += hist[j]; }
        part[EMB_T] = run;
        runs[0] = run;
        runs[1 + run] = tot;
    }
    __syncthreads();
    int at = part[t];
    for (int i = i0; i < i1; i++)
        if (key[i] < nv && (i == 0 || key[i] != key[i - 1])) runs[1 + at++] = i;
}
__global__ void emb_acc_k(float* dwte, const float* dout, const int* key, const int* order, const int* runs, int C) {
    int c = blockIdx.y * blockDim.x + threadIdx.x, U = runs[0];
    if (c >= C) return;
    for (int r = blockIdx.x; r < U; r += gridDim.x) {
        int s = runs[1 + r], e = runs[2 + r];
        float* d = dwte + (size_t)key[s] * C + c;
        float acc = *d;
        for (int k = s; k < e; k++) acc += dout[(size_t)order[k] * C + c];
        *d = acc;
    }
}
void be_embedding_backward(float* dwte, const float* dout, const int* tok, int N, int C, int v0, int nv) {
    PROF(PROF_EMBED);
    if (N <= 0 || C <= 0 || nv <= 0) return;
    int bits = 0;
    while (bits < 31 && (1 << bits) <= nv) bits++;   // keys 0 .. nv (nv: another slice's token)
    int passes = (bits + 3) / 4;
    int* ws = (int*)cu_workspace(WS_EMB, ((size_t)5 * N + 2) * sizeof(int));
    double n4 = 4.0 * N;
    // reads tok and the buffers of the passes, writes them and the runs (4 N + 8 at most)
    TRAFFIC_BOUNDS(n4 + 2 * n4 * (passes > 1 ? 2 : 1), 4 * n4 + n4 + 8, n4 + 2 * n4, n4 + 4 * n4, 4 * n4, 4 * n4 + n4 + 8);
    LAUNCH(emb_sort_k, 1, EMB_T, 0, ws, tok, N, v0, nv, passes);
    CU_LAUNCHED("be_embedding_backward (sort)");
    const int* key = ws + (passes % 2 ? 2 * N : 0);
    const int* order = ws + (passes % 2 ? 3 * N : N);
    dim3 grid(N < 2048 ? N : 2048, (C + 127) / 128);
    // the sorted keys, the order and the runs; at most N rows of dout and of dwte (a gather; rows repeat)
    TRAFFIC_BOUNDS(3 * n4 + 8 + 4.0 * N * C + 4.0 * N * C, 4.0 * N * C, 0, 3 * n4 + 8 + cu_gather_hi(2.0 * N, 4.0 * C), 0,
                   cu_gather_hi(N, 4.0 * C));
    LAUNCH(emb_acc_k, grid, 128, 0, dwte, dout, key, order, ws + 4 * N, C);
    CU_LAUNCHED("be_embedding_backward");
}

// ---------------------------------------------------------------------------------------------------------
// RMSNorm: one warp per row in the forward; the backward's dx and dw partials in one kernel per group of rows

// one row, by one warp: rstd = (mean(x^2) + eps)^-1/2, o = x rstd w in T. Every forward norm runs exactly this code
// (not inlined: the fused residual add's norm gives the bits a recomputation gives)
template <class T>
__device__ __noinline__ void norm_row(T* o, float* rstd, const float* x, const float* w, int C, float eps, int lane) {
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
    ss = warp_sum(ss);
    float r = 1.0f / sqrtf(ss / C + eps);
    if (lane == 0) *rstd = r;
    for (int c = lane; c < C; c += 32) stv(o, c, x[c] * r * w[c]);
}
template <class T>
__global__ void rmsnorm_fwd_k(T* out, float* rstd, const float* x, const float* w, int N, int C, float eps) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    norm_row(out + (size_t)row * C, rstd + row, x + (size_t)row * C, w, C, eps, lane);
}
// y = x + r, then the norm of y (read back: each lane reads the columns it wrote). round_y: the measurement of a
// residual stream stored in bf16 (RINGLM_EXP_RESIDUAL_BF16, an experiment: y rounded to bf16 values, kept in fp32)
template <class T>
__global__ void residual_rmsnorm_k(float* y, T* out, float* rstd, const float* x, const float* r, const float* w, int N,
                                   int C, float eps, int round_y) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    size_t o = (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float v = x[o + c] + r[o + c];
        y[o + c] = round_y ? __bfloat162float(__float2bfloat16_rn(v)) : v;
    }
    __syncwarp();
    norm_row(out + o, rstd + row, y + o, w, C, eps, lane);
}
void be_rmsnorm_forward(void* out, BeDtype dt, float* rstd, const float* x, const float* w, int N, int C, float eps) {
    PROF(PROF_POINTWISE);
    if (N <= 0 || C <= 0) return;
    TRAFFIC(4.0 * N * C + 4.0 * C, (double)be_dtype_size(dt) * N * C + 4.0 * N);
    if (dt == BE_BF16) LAUNCH(rmsnorm_fwd_k<bf16>, (N + 7) / 8, 256, 0, (bf16*)out, rstd, x, w, N, C, eps);
    else LAUNCH(rmsnorm_fwd_k<float>, (N + 7) / 8, 256, 0, (float*)out, rstd, x, w, N, C, eps);
    CU_LAUNCHED("be_rmsnorm_forward");
}
void be_residual_rmsnorm(float* y, void* out, BeDtype dt, float* rstd, const float* x, const float* r, const float* w,
                         int N, int C, float eps) {
    PROF(PROF_POINTWISE);
    if (N <= 0 || C <= 0) return;
    static int round_y = -1;   // the experiment's switch, read once
    if (round_y < 0) round_y = getenv("RINGLM_EXP_RESIDUAL_BF16") && atoi(getenv("RINGLM_EXP_RESIDUAL_BF16")) == 1;
    TRAFFIC(8.0 * N * C + 4.0 * C, 4.0 * N * C + (double)be_dtype_size(dt) * N * C + 4.0 * N);
    if (dt == BE_BF16) LAUNCH(residual_rmsnorm_k<bf16>, (N + 7) / 8, 256, 0, y, (bf16*)out, rstd, x, r, w, N, C, eps, round_y);
    else LAUNCH(residual_rmsnorm_k<float>, (N + 7) / 8, 256, 0, y, (float*)out, rstd, x, r, w, N, C, eps, round_y);
    CU_LAUNCHED("be_residual_rmsnorm");
}

// Backward of rows [g per, (g + 1) per), one block: first each warp computes its rows' k = r^3/C sum_c(w dy x) (shared
// memory), then each thread walks its columns down the rows: dx += dy w r - x k (and its copy in T), and the column's
// dw partial sum_rows dy x r, in row order.
template <class T>
__global__ void rmsnorm_bwd_k(float* dx, T* dxt, float* part, const float* dout, const float* x, const float* w,
                              const float* rstd, int N, int C, int per) {
    DYN_SMEM(float, kr);   // [per]
    int g = blockIdx.x, r0 = g * per, r1 = r0 + per < N ? r0 + per : N;
    int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int i = r0 + wp; i < r1; i += nw) {
        const float *xi = x + (size_t)i * C, *gi = dout + (size_t)i * C;
        float dot = 0.0f;
        for (int c = lane; c < C; c += 32) dot += gi[c] * w[c] * xi[c];
        dot = warp_sum(dot);
        float r = rstd[i];
        if (lane == 0) kr[i - r0] = dot * r * r * r / C;
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0.0f, wc = w[c];
        for (int i = r0; i < r1; i++) {
            size_t at = (size_t)i * C + c;
            float gi = dout[at], xi = x[at], r = rstd[i];
            float d = dx[at] + (gi * wc * r - xi * kr[i - r0]);
            dx[at] = d;
            if (dxt) stv(dxt, at, d);
            acc += gi * xi * r;
        }
        part[(size_t)g * C + c] = acc;
    }
}
void be_rmsnorm_backward(float* dx, void* dx_dt, BeDtype dt, float* dw_part, const float* dout, const float* x,
                         const float* w, const float* rstd, int N, int C) {
    PROF(PROF_POINTWISE);
    if (N <= 0 || C <= 0) return;
    int G = be_norm_groups(N), per = (N + G - 1) / G;
    size_t smem = (size_t)per * sizeof(float);
    if (smem > 48 * 1024) cu_die("be_rmsnorm_backward", "%d rows in %d groups: %d rows a group exceed the kernel's 12288", N, G, per);
    double a = dx_dt ? (double)be_dtype_size(dt) * N * C : 0;
    TRAFFIC(12.0 * N * C + 4.0 * C + 4.0 * N, 4.0 * N * C + a + 4.0 * G * C);
    if (dt == BE_BF16) LAUNCH(rmsnorm_bwd_k<bf16>, G, 256, smem, dx, (bf16*)dx_dt, dw_part, dout, x, w, rstd, N, C, per);
    else LAUNCH(rmsnorm_bwd_k<float>, G, 256, smem, dx, (float*)dx_dt, dw_part, dout, x, w, rstd, N, C, per);
    CU_LAUNCHED("be_rmsnorm_backward");
}
__global__ void rmsnorm_dw_k(float* base, const long long* off, const float* part, int G, int C, int accumulate) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (c >= C) return;
    float s = 0.0f;
    for (int g = 0; g < G; g++) s += part[((size_t)i * G + g) * C + c];
    float* d = base + off[i] + c;
    *d = accumulate ? *d + s : s;
}
void be_rmsnorm_dw(float* base, const long long* off, const float* part, int n, int G, int C, int accumulate) {
    PROF(PROF_POINTWISE);
    if (n <= 0 || C <= 0) return;
    double rows = 4.0 * n * C;
    TRAFFIC_BOUNDS(rows * G + 8.0 * n + (accumulate ? rows : 0), rows, rows * G + 8.0 * n,
                   rows * G + 8.0 * n + (accumulate ? cu_gather_hi(n, 4.0 * C) : 0), rows, cu_gather_hi(n, 4.0 * C));
    LAUNCH(rmsnorm_dw_k, dim3((C + 255) / 256, n), 256, 0, base, off, part, G, C, accumulate);
    CU_LAUNCHED("be_rmsnorm_dw");
}

// ---------------------------------------------------------------------------------------------------------
// q, k, v from one matmul's output, RoPE (rotate_half: pair (x_i, x_{i+h}), h = hd/2, rotated by the angle of position
// pos[t]) applied as they are written; the backward packs RoPE^T dq, RoPE^T dk, dv into one matmul operand.
// One thread per pair of a q or k head (an odd head_dim's last element goes along unrotated) and per element of v.

__device__ __forceinline__ void rope_pair(float& a, float& b, float c, float s) {
    float x = a, y = b;
    a = x * c - y * s;
    b = y * c + x * s;
}
template <class T>
__global__ void qkv_rope_k(float* q, float* k, float* v, const T* qkv, const int* pos, const float* cs, int N, int nh,
                           int nkv, int hd) {
    int h = hd / 2, W = (nh + 2 * nkv) * hd;
    size_t nq = (size_t)N * nh * h, nk = (size_t)N * nkv * h, nv = (size_t)N * nkv * hd, n = nq + nk + nv;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        if (idx >= nq + nk) {   // v: a copy
            size_t e = idx - nq - nk;
            size_t t = e / ((size_t)nkv * hd), j = e % ((size_t)nkv * hd);
            v[e] = ldv(qkv, t * W + (size_t)(nh + nkv) * hd + j);
            continue;
        }
        int isk = idx >= nq, nhx = isk ? nkv : nh;
        size_t e = isk ? idx - nq : idx;
        int i = (int)(e % h);
        size_t th = e / h;              // t * nhx + head
        size_t t = th / nhx;
        int head = (int)(th % nhx) + (isk ? nh : 0);
        const float* c = cs + (size_t)pos[t] * hd;
        const size_t src = t * W + (size_t)head * hd;
        float a = ldv(qkv, src + i), b = ldv(qkv, src + i + h);
        rope_pair(a, b, c[i], c[h + i]);
        float* dst = (isk ? k : q) + th * hd;
        dst[i] = a;
        dst[i + h] = b;
        if ((hd & 1) && i == 0) dst[hd - 1] = ldv(qkv, src + hd - 1);
    }
}
template <class T>
__global__ void qkv_rope_bwd_k(T* dqkv, const float* dq, const float* dk, const float* dv, const int* pos, const float* cs,
                               int N, int nh, int nkv, int hd) {
    int h = hd / 2, W = (nh + 2 * nkv) * hd;
    size_t nq = (size_t)N * nh * h, nk = (size_t)N * nkv * h, nv = (size_t)N * nkv * hd, n = nq + nk + nv;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        if (idx >= nq + nk) {
            size_t e = idx - nq - nk;
            size_t t = e / ((size_t)nkv * hd), j = e % ((size_t)nkv * hd);
            stv(dqkv, t * W + (size_t)(nh + nkv) * hd + j, dv[e]);
            continue;
        }
        int isk = idx >= nq, nhx = isk ? nkv : nh;
        size_t e = isk ? idx - nq : idx;
        int i = (int)(e % h);
        size_t th = e / h;
        size_t t = th / nhx;
        int head = (int)(th % nhx) + (isk ? nh : 0);
        const float* c = cs + (size_t)pos[t] * hd;
        const float* src = (isk ? dk : dq) + th * hd;
        float a = src[i], b = src[i + h];
        rope_pair(a, b, c[i], -c[h + i]);   // the transpose: the same map with the sine negated
        size_t dst = t * W + (size_t)head * hd;
        stv(dqkv, dst + i, a);
        stv(dqkv, dst + i + h, b);
        if ((hd & 1) && i == 0) stv(dqkv, dst + hd - 1, src[hd - 1]);
    }
}
// the traffic of both: the packed side (a bytes per element) once, q, k, v once, positions, the cos|sin rows gathered
static void qkv_rope_traffic(int N, int nh, int nkv, int hd, double a, int backward) {
    double W = (double)(nh + 2 * nkv) * hd, packed = a * N * W, split = 4.0 * N * W, p = 4.0 * N;
    double in = backward ? split : packed, out = backward ? packed : split;
    TRAFFIC_BOUNDS(in + p + 4.0 * N * hd, out, in + p, in + p + cu_gather_hi(N, 4.0 * hd), out, out);
}
void be_qkv_rope(float* q, float* k, float* v, const void* qkv, BeDtype dt, const int* pos, const float* cs, int N,
                 int nh, int nkv, int hd) {
    PROF(PROF_POINTWISE);
    if (N <= 0 || hd <= 0) return;
    size_t n = (size_t)N * (nh + nkv) * (hd / 2) + (size_t)N * nkv * hd;
    qkv_rope_traffic(N, nh, nkv, hd, (double)be_dtype_size(dt), 0);
    if (dt == BE_BF16) LAUNCH(qkv_rope_k<bf16>, grid_for(n), 256, 0, q, k, v, (const bf16*)qkv, pos, cs, N, nh, nkv, hd);
    else LAUNCH(qkv_rope_k<float>, grid_for(n), 256, 0, q, k, v, (const float*)qkv, pos, cs, N, nh, nkv, hd);
    CU_LAUNCHED("be_qkv_rope");
}
void be_qkv_rope_backward(void* dqkv, BeDtype dt, const float* dq, const float* dk, const float* dv, const int* pos,
                          const float* cs, int N, int nh, int nkv, int hd) {
    PROF(PROF_POINTWISE);
    if (N <= 0 || hd <= 0) return;
    size_t n = (size_t)N * (nh + nkv) * (hd / 2) + (size_t)N * nkv * hd;
    qkv_rope_traffic(N, nh, nkv, hd, (double)be_dtype_size(dt), 1);
    if (dt == BE_BF16) LAUNCH(qkv_rope_bwd_k<bf16>, grid_for(n), 256, 0, (bf16*)dqkv, dq, dk, dv, pos, cs, N, nh, nkv, hd);
    else LAUNCH(qkv_rope_bwd_k<float>, grid_for(n), 256, 0, (float*)dqkv, dq, dk, dv, pos, cs, N, nh, nkv, hd);
    CU_LAUNCHED("be_qkv_rope_backward");
}

// ---------------------------------------------------------------------------------------------------------
// SwiGLU on [g | u] rows of one matmul's output

template <class T> __global__ void swiglu_fwd_k(T* h, const T* gu, int N, int F) {
    size_t n = (size_t)N * F;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / F, j = i % F, at = t * 2 * F + j;
        float g = ldv(gu, at), u = ldv(gu, at + F);
        float sg = 1.0f / (1.0f + expf(-g));
        stv(h, i, g * sg * u);
    }
}
template <class T> __global__ void swiglu_bwd_k(T* dgu, T* h, const T* dh, const T* gu, int N, int F) {
    size_t n = (size_t)N * F;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / F, j = i % F, at = t * 2 * F + j;
        float g = ldv(gu, at), u = ldv(gu, at + F), d = ldv(dh, i);
        float s = 1.0f / (1.0f + expf(-g)), silu = g * s;
        if (h) stv(h, i, silu * u);
        stv(dgu, at, d * u * s * (1.0f + g * (1.0f - s)));
        stv(dgu, at + F, d * silu);
    }
}
void be_swiglu_forward(void* h, const void* gu, BeDtype dt, int N, int F) {
    PROF(PROF_POINTWISE);
    size_t n = (size_t)N * F;
    if (!n) return;
    double a = (double)be_dtype_size(dt);
    TRAFFIC(2 * a * n, a * n);
    if (dt == BE_BF16) LAUNCH(swiglu_fwd_k<bf16>, grid_for(n), 256, 0, (bf16*)h, (const bf16*)gu, N, F);
    else LAUNCH(swiglu_fwd_k<float>, grid_for(n), 256, 0, (float*)h, (const float*)gu, N, F);
    CU_LAUNCHED("be_swiglu_forward");
}
void be_swiglu_backward(void* dgu, void* h, const void* dh, const void* gu, BeDtype dt, int N, int F) {
    PROF(PROF_POINTWISE);
    size_t n = (size_t)N * F;
    if (!n) return;
    double a = (double)be_dtype_size(dt);
    TRAFFIC(3 * a * n, 2 * a * n + (h ? a * n : 0));
    if (dt == BE_BF16) LAUNCH(swiglu_bwd_k<bf16>, grid_for(n), 256, 0, (bf16*)dgu, (bf16*)h, (const bf16*)dh, (const bf16*)gu, N, F);
    else LAUNCH(swiglu_bwd_k<float>, grid_for(n), 256, 0, (float*)dgu, (float*)h, (const float*)dh, (const float*)gu, N, F);
    CU_LAUNCHED("be_swiglu_backward");
}

// ---------------------------------------------------------------------------------------------------------
// the attention output's row dots (out in T): one warp per (row, head)

template <class T> __global__ void rowdot_k(float* D, const float* dout, const T* out, long n, int hd) {
    long r = blockIdx.x * (long)(blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= n) return;
    float acc = 0.0f;
    for (int d = lane; d < hd; d += 32) acc += dout[r * hd + d] * ldv(out, (size_t)r * hd + d);
    acc = warp_sum(acc);
    if (lane == 0) D[r] = acc;
}
void be_attn_rowdot(float* D, const float* dout, const void* out, BeDtype dt, int N, int nh, int hd) {
    PROF(PROF_ATTN_BWD);
    long n = (long)N * nh;
    if (n <= 0) return;
    TRAFFIC((4.0 + be_dtype_size(dt)) * n * hd, 4.0 * n);
    if (dt == BE_BF16) LAUNCH(rowdot_k<bf16>, (unsigned)((n + 7) / 8), 256, 0, D, dout, (const bf16*)out, n, hd);
    else LAUNCH(rowdot_k<float>, (unsigned)((n + 7) / 8), 256, 0, D, dout, (const float*)out, n, hd);
    CU_LAUNCHED("be_attn_rowdot");
}

// ---------------------------------------------------------------------------------------------------------
// cross-entropy over a vocabulary slice: one block per row. The statistics in one read of the row: each thread keeps a
// running max and a sum of expf(x - max) in double (rescaled when its max grows), then the block combines them in a
// fixed tree. The gradient pass reads the row again (from cache) and writes scale (softmax - onehot) in T over the row:
// in fp32 in place; in bf16 over the row's first half, a chunk of the block's width at a time, each chunk read before
// a barrier and written after it (a chunk's bf16 values land in fp32 elements of chunks already read).

__device__ void row_stats(float* lse_out, float* tl_out, const float* x, int target, int nv, int v0) {
    float m = -INFINITY;
    double s = 0;
    for (int j = threadIdx.x; j < nv; j += blockDim.x) {
        float v = x[j];
        if (v > m) { s = m == -INFINITY ? 0.0 : s * (double)expf(m - v); m = v; }
        s += (double)expf(v - m);
    }
    float M = block_max(m);
    s = m == -INFINITY ? 0.0 : s * (double)expf(m - M);
    s = block_sum_d(s);
    int t = target - v0;
    if (threadIdx.x == 0) {
        *lse_out = nv > 0 ? M + (float)log(s) : -INFINITY;
        *tl_out = (target >= 0 && t >= 0 && t < nv) ? x[t] : 0.0f;
    }
}
template <class T>
__device__ void row_grad(float* x, float lse, int target, int ld, int nv, int v0, float scale) {
    T* y = (T*)x;
    int t = target - v0;
    for (int base = 0; base < ld; base += blockDim.x) {
        int j = base + threadIdx.x;
        float v = 0.0f;
        if (j < ld && target >= 0 && j < nv) {
            v = scale * expf(x[j] - lse);
            if (j == t) v -= scale;
        }
        if (sizeof(T) != sizeof(float)) __syncthreads();   // the chunk read before any of it is overwritten
        if (j < ld) stv(y, j, v);
        if (sizeof(T) != sizeof(float)) __syncthreads();
    }
}
__global__ void xent_stats_k(float* lse, float* tl, const float* logits, const int* targets, int ld, int nv, int v0) {
    int i = blockIdx.x;
    row_stats(lse + i, tl + i, logits + (size_t)i * ld, targets[i], nv, v0);
}
template <class T>
__global__ void xent_finish_k(float* losses, float* logits, const float* lse, const float* tl, const int* targets, int ld,
                              int nv, int v0, float scale) {
    int i = blockIdx.x, tg = targets[i];
    if (threadIdx.x == 0) losses[i] = tg >= 0 ? lse[i] - tl[i] : 0.0f;
    if (scale != 0.0f) row_grad<T>(logits + (size_t)i * ld, lse[i], tg, ld, nv, v0, scale);
}
template <class T>
__global__ void xent_fused_k(float* losses, float* lse, float* logits, const int* targets, int ld, int nv, int v0, float scale) {
    SHARED(float, st, [2]);
    int i = blockIdx.x, tg = targets[i];
    float* x = logits + (size_t)i * ld;
    row_stats(&st[0], &st[1], x, tg, nv, v0);
    __syncthreads();
    float l = st[0];
    if (threadIdx.x == 0) { lse[i] = l; losses[i] = tg >= 0 ? l - st[1] : 0.0f; }
    if (scale != 0.0f) row_grad<T>(x, l, tg, ld, nv, v0, scale);
}
void be_xent_stats(float* lse, float* tl, const float* logits, const int* targets, int N, int ld, int nv, int v0) {
    PROF(PROF_XENT);
    if (N <= 0) return;
    TRAFFIC_BOUNDS(4.0 * N * nv + 4.0 * N, 8.0 * N, 4.0 * N * nv + 4.0 * N, 4.0 * N * ld + 4.0 * N, 8.0 * N, 8.0 * N);
    LAUNCH(xent_stats_k, N, 256, 0, lse, tl, logits, targets, ld, nv, v0);
    CU_LAUNCHED("be_xent_stats");
}
// the gradient's traffic: the rows read (when written) and written in dt (a bf16 row: its first half, whose pages may
// be all of the rows' pages)
static void xent_grad_traffic(int N, int ld, int nv, BeDtype dt, float scale, double rd0, double wr0) {
    double g = scale != 0.0f ? (double)be_dtype_size(dt) * N * ld : 0, rd = scale != 0.0f ? 4.0 * N * nv : 0;
    TRAFFIC_BOUNDS(rd0 + rd, wr0 + g, rd0, rd0 + (scale != 0.0f ? 4.0 * N * ld : 0), wr0, wr0 + (g ? 4.0 * N * ld : 0));
}
void be_xent_finish(float* losses, float* logits, BeDtype dt, const float* lse, const float* tl, const int* targets,
                    int N, int ld, int nv, int v0, float scale) {
    PROF(PROF_XENT);
    if (N <= 0) return;
    xent_grad_traffic(N, ld, nv, dt, scale, 12.0 * N, 4.0 * N);
    if (dt == BE_BF16) LAUNCH(xent_finish_k<bf16>, N, 256, 0, losses, logits, lse, tl, targets, ld, nv, v0, scale);
    else LAUNCH(xent_finish_k<float>, N, 256, 0, losses, logits, lse, tl, targets, ld, nv, v0, scale);
    CU_LAUNCHED("be_xent_finish");
}
void be_xent_fused(float* losses, float* lse, float* logits, BeDtype dt, const int* targets, int N, int ld, int nv,
                   int v0, float scale) {
    PROF(PROF_XENT);
    if (N <= 0) return;
    // the statistics read each row once; the gradient reads it again from cache (not counted twice)
    double g = scale != 0.0f ? (double)be_dtype_size(dt) * N * ld : 0;
    TRAFFIC_BOUNDS(4.0 * N * nv + 4.0 * N, 8.0 * N + g, 4.0 * N * nv + 4.0 * N, 4.0 * N * ld + 4.0 * N, 8.0 * N,
                   8.0 * N + (g ? 4.0 * N * ld : 0));
    if (dt == BE_BF16) LAUNCH(xent_fused_k<bf16>, N, 256, 0, losses, lse, logits, targets, ld, nv, v0, scale);
    else LAUNCH(xent_fused_k<float>, N, 256, 0, losses, lse, logits, targets, ld, nv, v0, scale);
    CU_LAUNCHED("be_xent_fused");
}

__global__ void row_max_k(float* mx, const float* logits, const int* targets, int ld, int nv, int v0) {
    const float* x = logits + (size_t)blockIdx.x * ld;
    float m = -INFINITY;
    int skip = targets[blockIdx.x] - v0;   // the target's own column, when it is in this slice
    for (int j = threadIdx.x; j < nv; j += blockDim.x) if (j != skip) m = fmaxf(m, x[j]);
    m = block_max(m);
    if (threadIdx.x == 0) mx[blockIdx.x] = m;
}
void be_row_max(float* mx, const float* logits, const int* targets, int N, int ld, int nv, int v0) {
    PROF(PROF_XENT);
    if (N <= 0) return;
    TRAFFIC_BOUNDS(4.0 * N * nv + 4.0 * N, 4.0 * N, 4.0 * N * nv + 4.0 * N, 4.0 * N * ld + 4.0 * N, 4.0 * N, 4.0 * N);
    LAUNCH(row_max_k, N, 256, 0, mx, logits, targets, ld, nv, v0);
    CU_LAUNCHED("be_row_max");
}

__global__ void argmax_hit_k(float* hit, const float* mx, const float* tl, const int* targets, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) hit[i] = targets[i] >= 0 && tl[i] > mx[i] ? 1.0f : 0.0f;
}
void be_argmax_hit(float* hit, const float* mx, const float* tl, const int* targets, int N) {
    PROF(PROF_XENT);
    if (N <= 0) return;
    TRAFFIC(12.0 * N, 4.0 * N);
    LAUNCH(argmax_hit_k, cu_blocks(N, 256), 256, 0, hit, mx, tl, targets, N);
    CU_LAUNCHED("be_argmax_hit");
}

__global__ void exp_sub_k(float* x, const float* m, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) x[i] = x[i] == -INFINITY ? 0.0f : expf(x[i] - m[i]);
}
void be_exp_sub(float* x, const float* m, int N) {
    PROF(PROF_XENT);
    if (N <= 0) return;
    TRAFFIC(8.0 * N, 4.0 * N);
    LAUNCH(exp_sub_k, cu_blocks(N, 256), 256, 0, x, m, N);
    CU_LAUNCHED("be_exp_sub");
}

__global__ void log_add_k(float* lse, const float* s, const float* m, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) lse[i] = m[i] + logf(s[i]);
}
void be_log_add(float* lse, const float* s, const float* m, int N) {
    PROF(PROF_XENT);
    if (N <= 0) return;
    TRAFFIC(8.0 * N, 4.0 * N);
    LAUNCH(log_add_k, cu_blocks(N, 256), 256, 0, lse, s, m, N);
    CU_LAUNCHED("be_log_add");
}

// ---------------------------------------------------------------------------------------------------------
// AdamW

// one block per chunk of a segment (the chunk's class: decayed or not)
__global__ void adamw_k(float* p, const float* g, float* m, float* v, const SqChunk* ch, float lr, float b1, float b2,
                        float eps, float wd, float bc1, float bc2, const float* gscale) {
    SqChunk c = ch[blockIdx.x];
    float gs = gscale[0], w = c.cls ? wd : 0.0f;
    for (size_t i = c.off + threadIdx.x; i < c.off + c.n; i += blockDim.x) {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi; v[i] = vi;
        p[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + w * p[i]);
    }
}
static ChunkTable g_adam_tab;
void be_adamw(float* p, const float* g, float* m, float* v, const BeSegment* seg, int nseg, float lr, float b1, float b2,
              float eps, float wd, float bc1, float bc2, const float* gscale) {
    PROF(PROF_OPTIM);
    int n;
    const SqChunk* dtab = chunk_table(&g_adam_tab, WS_ADAM_TAB, seg, nseg, &n, "be_adamw (upload)");
    if (n == 0) return;
    size_t nel = 0;
    for (int i = 0; i < nseg; i++) nel += seg[i].n;
    TRAFFIC(16.0 * nel + 4 + (double)n * sizeof(SqChunk), 12.0 * nel);
    LAUNCH(adamw_k, n, 256, 0, p, g, m, v, dtab, lr, b1, b2, eps, wd, bc1, bc2, gscale);
    CU_LAUNCHED("be_adamw");
}
