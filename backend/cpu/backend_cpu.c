// backend_cpu.c — the CPU backend (backend.h): host memory, OpenBLAS sgemm, OpenMP kernels.
// Reductions use a fixed partition (never depending on the thread count) so results are bit-identical.
#include "backend/backend.h"
#include "common/util.h"
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

const char* be_name(void) { return "cpu"; }

static const BeTuning TUNING = { .ring_query_rows = 256, .head_rows = 1024, .norm_groups = 1 };
const BeTuning* be_tuning(void) { return &TUNING; }

// The CPU backend is the fp32 reference: no bf16 storage (act_dtype = bf16 runs in fp32, as the model decides)
int be_has_bf16(void) { return 0; }
static void need_f32(BeDtype dt, const char* op) {
    if (dt != BE_F32) { fprintf(stderr, "cpu backend: %s: bf16 tensors are not supported here (fp32 only)\n", op); exit(1); }
}

int be_init(int local_rank, char* err, size_t errlen) {
    (void)local_rank; (void)err; (void)errlen;
    float a[64] = {0}, b[64] = {0}, c[64];
    // OpenBLAS allocates its per-thread work buffers on the first gemm; under an address-space limit a
    // failed allocation there spins instead of failing, so take them while memory is still free
    #pragma omp parallel
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 8, 8, 8, 1.0f, a, 8, b, 8, 0.0f, c, 8);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 8, 8, 8, 1.0f, a, 8, b, 8, 0.0f, c, 8);
    return 0;
}

void be_sync(void) {}   // every kernel has finished when it returns

void be_step_begin(long long step, double model_flops, const char* about) { (void)step; (void)model_flops; (void)about; }
void be_step_end(void) {}

double be_memory_available(int node_ranks) {
    double avail = meminfo_bytes("MemAvailable");
    if (avail <= 0) return 1e30;   // unknown: no limit
    return avail / (node_ranks > 0 ? node_ranks : 1);
}

double be_memory_peak(int reset) {
    double kb = -1;
    char line[256];
    FILE* f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = atof(line + 6);
    if (f) fclose(f);
    if (kb < 0) {   // no /proc: the peak since the start
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = (double)ru.ru_maxrss;
    }
    if (reset) {   // "5": the high-water mark (also getrusage's) starts again at the resident set now (Linux >= 4.0)
        FILE* c = fopen("/proc/self/clear_refs", "w");
        if (c) { fputs("5", c); fclose(c); }
    }
    return kb * 1024.0;
}

// ---- timers: wall clock and the CPU time of all threads ----
struct BeTimer { double clamp, t0, c0; BeTimes acc; };
BeTimer* be_timer_create(double clamp_s) {
    BeTimer* t = calloc(1, sizeof *t);
    if (!t) { fprintf(stderr, "cpu backend: out of memory for a timer\n"); exit(1); }
    t->clamp = clamp_s;
    return t;
}
void be_timer_free(BeTimer* t) { free(t); }
void be_timer_begin(BeTimer* t) { t->t0 = now_s(); t->c0 = cpu_s(); }
void be_timer_end(BeTimer* t) {
    double dt = now_s() - t->t0;
    t->acc.wall_s += dt;
    t->acc.work_s += cpu_s() - t->c0;
    t->acc.clamped_s += dt < t->clamp ? dt : t->clamp;
    t->acc.regions++;
}
BeTimes be_timer_read(BeTimer* t) { return t->acc; }

void* be_alloc(size_t bytes) {
    void* p = NULL;
    if (bytes == 0) bytes = 64;
    if (posix_memalign(&p, 64, (bytes + 63) / 64 * 64)) {
        fprintf(stderr, "cpu backend: out of memory allocating %.1f MiB\n", bytes / 1048576.0);
        exit(1);
    }
    memset(p, 0, bytes);
    return p;
}
void be_free(void* p) { free(p); }
void be_upload(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
void be_download(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
void be_zero(void* p, size_t bytes) { memset(p, 0, bytes); }
void be_copy(void* dst, const void* src, size_t bytes) { memmove(dst, src, bytes); }

// host memory and the copy queue: the CPU's memory is host memory and a copy happens when called (the trainer
// refuses offload on this backend; these exist for the contract)
static size_t g_host_bytes;
void* be_host_alloc(size_t bytes) {
    size_t* p = be_alloc(bytes + 64);   // the size in front, the data 64-byte aligned
    *p = bytes;
    g_host_bytes += bytes;
    return (char*)p + 64;
}
void be_host_free(void* p) {
    if (!p) return;
    size_t* h = (size_t*)((char*)p - 64);
    g_host_bytes -= *h;
    free(h);
}
size_t be_host_bytes(void) { return g_host_bytes; }
struct BeEvent { int unused; };
BeEvent* be_event_create(void) { return calloc(1, sizeof(BeEvent)); }
void be_event_free(BeEvent* e) { free(e); }
void be_copy_to_host_async(void* host, const void* src, size_t bytes, BeEvent* done) { (void)done; memcpy(host, src, bytes); }
void be_copy_from_host_async(void* dst, const void* host, size_t bytes, BeEvent* done) { (void)done; memcpy(dst, host, bytes); }
void be_wait_event(BeEvent* e) { (void)e; }

int be_set_matmul_precision(const char* name) {   // sgemm is fp32 whatever is asked
    return strcmp(name, "bf16") && strcmp(name, "tf32") && strcmp(name, "fp32");
}

void be_matmul(float* C, const float* A, const float* B, int m, int n, int k,
               int transA, int transB, float alpha, float beta) {
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, A, transA ? m : k, B, transB ? k : n, beta, C, n);
}

void be_matmul_ex(void* C, BeDtype ct, int ldc, const void* A, BeDtype at, int lda, const void* B, BeDtype bt, int ldb,
                  int m, int n, int k, int transA, int transB, float alpha, float beta) {
    need_f32(ct, "be_matmul_ex"); need_f32(at, "be_matmul_ex"); need_f32(bt, "be_matmul_ex");
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                A, lda ? lda : (transA ? m : k), B, ldb ? ldb : (transB ? k : n), beta, C, ldc ? ldc : n);
}
void be_cast(void* dst, BeDtype dt, const float* src, size_t n) {
    need_f32(dt, "be_cast");
    memmove(dst, src, n * sizeof(float));
}

void be_add(float* y, const float* x, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void be_split_cols(float* dst, const float* src, int R, int ld, int w, int P, int nb) {
    #pragma omp parallel for collapse(2) schedule(static)
    for (int j = 0; j < P; j++)
        for (int r = 0; r < R; r++)
            memcpy(dst + ((size_t)j * R + r) * w, src + (size_t)r * ld + (size_t)(j * nb / P) * w, (size_t)w * sizeof(float));
}
void be_merge_cols(float* dst, const float* src, int R, int ld, int w, int P, int nb, int accumulate) {
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < R; r++)
        for (int j = 0; j < P; j++) {   // j in order: shared blocks are summed in a fixed order
            float* d = dst + (size_t)r * ld + (size_t)(j * nb / P) * w;
            const float* x = src + ((size_t)j * R + r) * w;
            if (accumulate) for (int c = 0; c < w; c++) d[c] += x[c];
            else memcpy(d, x, (size_t)w * sizeof(float));
        }
}

#define NPART 64   // fixed partition for deterministic reductions
static double sumsq(const float* x, size_t n) {
    double part[NPART];
    #pragma omp parallel for schedule(static)
    for (int p = 0; p < NPART; p++) {
        size_t a = n * p / NPART, b = n * (p + 1) / NPART;
        double s = 0;
        for (size_t i = a; i < b; i++) s += (double)x[i] * x[i];
        part[p] = s;
    }
    double s = 0;
    for (int p = 0; p < NPART; p++) s += part[p];
    return s;
}
void be_sumsq_segments(double* out, int nclass, const float* x, const BeSegment* seg, int nseg) {
    for (int c = 0; c < nclass; c++) out[c] = 0;
    for (int i = 0; i < nseg; i++) out[seg[i].cls] += sumsq(x + seg[i].offset, seg[i].n);
}
void be_sum(double* acc, const float* x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    acc[0] += s;
}
void be_clip_scale(float* scale, const double* sumsq, int n, float clip) {
    double s = 0;
    for (int i = 0; i < n; i++) s += sumsq[i];
    double coef = clip > 0 ? clip / (sqrt(s) + 1e-6) : 1.0;
    scale[0] = coef < 1.0 ? (float)coef : 1.0f;
}

// ---- embedding ----
void be_embedding_forward(float* out, const int* tok, const float* wte, int N, int C, int v0, int nv) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        int r = tok[i] - v0;
        if (r >= 0 && r < nv) memcpy(out + (size_t)i * C, wte + (size_t)r * C, C * sizeof(float));
        else memset(out + (size_t)i * C, 0, C * sizeof(float));
    }
}

void be_embedding_backward(float* dwte, const float* dout, const int* tok, int N, int C, int v0, int nv) {
    // parallel over column ranges: each thread owns a slice of every row; token order fixed
    int nchunk = (C + 63) / 64;
    #pragma omp parallel for schedule(static)
    for (int ch = 0; ch < nchunk; ch++) {
        int c0 = ch * 64, c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int i = 0; i < N; i++) {
            int r = tok[i] - v0;
            if (r < 0 || r >= nv) continue;
            float* d = dwte + (size_t)r * C;
            const float* g = dout + (size_t)i * C;
            for (int c = c0; c < c1; c++) d[c] += g[c];
        }
    }
}

// ---- RMSNorm ----
// one row: rstd = (mean(x^2) + eps)^-1/2, o = x rstd w (the arithmetic of every forward norm, fused or not)
static inline void norm_row(float* o, float* rstd, const float* x, const float* w, int C, float eps) {
    float ss = 0.0f;
    for (int c = 0; c < C; c++) ss += x[c] * x[c];
    float r = 1.0f / sqrtf(ss / C + eps);
    *rstd = r;
    for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
}
void be_rmsnorm_forward(void* out, BeDtype dt, float* rstd, const float* x, const float* w, int N, int C, float eps) {
    need_f32(dt, "be_rmsnorm_forward");
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) norm_row((float*)out + (size_t)i * C, rstd + i, x + (size_t)i * C, w, C, eps);
}
void be_residual_rmsnorm(float* y, void* out, BeDtype dt, float* rstd, const float* x, const float* r, const float* w,
                         int N, int C, float eps) {
    need_f32(dt, "be_residual_rmsnorm");
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float* yi = y + (size_t)i * C;
        for (int c = 0; c < C; c++) yi[c] = x[(size_t)i * C + c] + r[(size_t)i * C + c];
        norm_row((float*)out + (size_t)i * C, rstd + i, yi, w, C, eps);
    }
}

// y = x r w, r = (mean(x^2)+eps)^-1/2:  dx = r (w dy) - x r^3/C sum_c(w dy x);  dw = sum_i dy x r
void be_rmsnorm_backward(float* dx, void* dx_dt, BeDtype dt, float* dw_part, const float* dout, const float* x,
                         const float* w, const float* rstd, int N, int C) {
    need_f32(dt, "be_rmsnorm_backward");
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float* xi = x + (size_t)i * C;
        const float* gi = dout + (size_t)i * C;
        float* di = dx + (size_t)i * C;
        float r = rstd[i], dot = 0.0f;
        for (int c = 0; c < C; c++) dot += gi[c] * w[c] * xi[c];
        float k = dot * r * r * r / C;
        for (int c = 0; c < C; c++) di[c] += gi[c] * w[c] * r - xi[c] * k;
        if (dx_dt) memcpy((float*)dx_dt + (size_t)i * C, di, C * sizeof(float));
    }
    int nchunk = (C + 63) / 64;   // one row group (norm_groups 1): every row, parallel over column chunks
    #pragma omp parallel for schedule(static)
    for (int ch = 0; ch < nchunk; ch++) {
        int c0 = ch * 64, c1 = c0 + 64 < C ? c0 + 64 : C;
        float acc[64] = {0};
        for (int i = 0; i < N; i++) {
            const float* xi = x + (size_t)i * C;
            const float* gi = dout + (size_t)i * C;
            float r = rstd[i];
            for (int c = c0; c < c1; c++) acc[c - c0] += gi[c] * xi[c] * r;
        }
        for (int c = c0; c < c1; c++) dw_part[c] = acc[c - c0];
    }
}
void be_rmsnorm_dw(float* base, const long long* off, const float* part, int n, int G, int C, int accumulate) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        float* d = base + off[i];
        for (int c = 0; c < C; c++) {
            float s = 0.0f;
            for (int g = 0; g < G; g++) s += part[((size_t)i * G + g) * C + c];
            d[c] = accumulate ? d[c] + s : s;
        }
    }
}

// ---- q, k, v with RoPE (rotate_half): pair (x_i, x_{i+h}) with h = hd/2 rotates by angle p*inv_freq_i ----
//   x'_i = x_i cos - x_{i+h} sin;   x'_{i+h} = x_{i+h} cos + x_i sin      (cos, sin include the factor a)
// the transpose of [[c, -s], [s, c]] is [[c, s], [-s, c]]: the same map with the sine negated
static inline void rope_head(float* dst, const float* src, const float* c, float sgn, int hd) {
    int h = hd / 2;
    const float* s = c + h;
    for (int i = 0; i < h; i++) {
        float a = src[i], b = src[i + h], sn = sgn * s[i];
        dst[i] = a * c[i] - b * sn;
        dst[i + h] = b * c[i] + a * sn;
    }
    if (hd & 1) dst[hd - 1] = src[hd - 1];
}
void be_qkv_rope(float* q, float* k, float* v, const void* qkv, BeDtype dt, const int* pos, const float* cs, int N,
                 int nh, int nkv, int hd) {
    need_f32(dt, "be_qkv_rope");
    size_t W = (size_t)(nh + 2 * nkv) * hd;
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float* row = (const float*)qkv + t * W;
        const float* c = cs + (size_t)pos[t] * hd;
        for (int h = 0; h < nh; h++) rope_head(q + ((size_t)t * nh + h) * hd, row + (size_t)h * hd, c, 1.0f, hd);
        for (int h = 0; h < nkv; h++) rope_head(k + ((size_t)t * nkv + h) * hd, row + (size_t)(nh + h) * hd, c, 1.0f, hd);
        memcpy(v + (size_t)t * nkv * hd, row + (size_t)(nh + nkv) * hd, (size_t)nkv * hd * sizeof(float));
    }
}
void be_qkv_rope_backward(void* dqkv, BeDtype dt, const float* dq, const float* dk, const float* dv, const int* pos,
                          const float* cs, int N, int nh, int nkv, int hd) {
    need_f32(dt, "be_qkv_rope_backward");
    size_t W = (size_t)(nh + 2 * nkv) * hd;
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        float* row = (float*)dqkv + t * W;
        const float* c = cs + (size_t)pos[t] * hd;
        for (int h = 0; h < nh; h++) rope_head(row + (size_t)h * hd, dq + ((size_t)t * nh + h) * hd, c, -1.0f, hd);
        for (int h = 0; h < nkv; h++) rope_head(row + (size_t)(nh + h) * hd, dk + ((size_t)t * nkv + h) * hd, c, -1.0f, hd);
        memcpy(row + (size_t)(nh + nkv) * hd, dv + (size_t)t * nkv * hd, (size_t)nkv * hd * sizeof(float));
    }
}

// ---- SwiGLU on [g | u] rows ----
void be_swiglu_forward(void* h, const void* gu, BeDtype dt, int N, int F) {
    need_f32(dt, "be_swiglu_forward");
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *g = (const float*)gu + (size_t)t * 2 * F, *u = g + F;
        float* ht = (float*)h + (size_t)t * F;
        for (int i = 0; i < F; i++) {
            float sg = 1.0f / (1.0f + expf(-g[i]));
            ht[i] = g[i] * sg * u[i];
        }
    }
}
// silu'(g) = s (1 + g (1 - s)), s = sigmoid(g)
void be_swiglu_backward(void* dgu, void* h, const void* dh, const void* gu, BeDtype dt, int N, int F) {
    need_f32(dt, "be_swiglu_backward");
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float *g = (const float*)gu + (size_t)t * 2 * F, *u = g + F, *dht = (const float*)dh + (size_t)t * F;
        float *dg = (float*)dgu + (size_t)t * 2 * F, *du = dg + F;
        for (int i = 0; i < F; i++) {
            float s = 1.0f / (1.0f + expf(-g[i]));
            float silu = g[i] * s, d = dht[i];
            if (h) ((float*)h)[(size_t)t * F + i] = silu * u[i];
            dg[i] = d * u[i] * s * (1.0f + g[i] * (1.0f - s));
            du[i] = d * silu;
        }
    }
}

void be_attn_rowdot(float* D, const float* dout, const void* out, BeDtype dt, int N, int nh, int hd) {
    need_f32(dt, "be_attn_rowdot");
    long n = (long)N * nh;
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < n; r++) {
        const float *a = dout + r * hd, *b = (const float*)out + r * hd;
        float acc = 0.0f;
        for (int d = 0; d < hd; d++) acc += a[d] * b[d];
        D[r] = acc;
    }
}

// ---- cross-entropy ----
static inline void xent_stats_row(float* lse, float* tl, const float* x, int target, int nv, int v0) {
    float m = -INFINITY;
    for (int j = 0; j < nv; j++) m = x[j] > m ? x[j] : m;
    double s = 0;
    for (int j = 0; j < nv; j++) s += expf(x[j] - m);
    *lse = nv ? m + (float)log(s) : -INFINITY;
    int t = target - v0;
    *tl = (target >= 0 && t >= 0 && t < nv) ? x[t] : 0.0f;
}
static inline void xent_finish_row(float* loss, float* x, float lse, float tl, int target, int ld, int nv, int v0,
                                   float scale) {
    *loss = target >= 0 ? lse - tl : 0.0f;
    if (scale == 0.0f) return;
    if (target < 0) { memset(x, 0, ld * sizeof(float)); return; }
    for (int j = 0; j < nv; j++) x[j] = scale * expf(x[j] - lse);
    for (int j = nv; j < ld; j++) x[j] = 0.0f;
    int t = target - v0;
    if (t >= 0 && t < nv) x[t] -= scale;
}
void be_xent_stats(float* lse, float* tl, const float* logits, const int* targets, int N, int ld, int nv, int v0) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) xent_stats_row(lse + i, tl + i, logits + (size_t)i * ld, targets[i], nv, v0);
}
void be_xent_finish(float* losses, float* logits, BeDtype dt, const float* lse, const float* tl, const int* targets,
                    int N, int ld, int nv, int v0, float scale) {
    need_f32(dt, "be_xent_finish");
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++)
        xent_finish_row(losses + i, logits + (size_t)i * ld, lse[i], tl[i], targets[i], ld, nv, v0, scale);
}
void be_xent_fused(float* losses, float* lse, float* logits, BeDtype dt, const int* targets, int N, int ld, int nv,
                   int v0, float scale) {
    need_f32(dt, "be_xent_fused");
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float tl;
        xent_stats_row(lse + i, &tl, logits + (size_t)i * ld, targets[i], nv, v0);
        xent_finish_row(losses + i, logits + (size_t)i * ld, lse[i], tl, targets[i], ld, nv, v0, scale);
    }
}

void be_row_max(float* mx, const float* logits, const int* targets, int N, int ld, int nv, int v0) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float* x = logits + (size_t)i * ld;
        float m = -INFINITY;
        int skip = targets[i] - v0;   // the target's own column, when it is in this slice
        for (int j = 0; j < nv; j++) m = j != skip && x[j] > m ? x[j] : m;
        mx[i] = m;
    }
}

void be_argmax_hit(float* hit, const float* mx, const float* tl, const int* targets, int N) {
    for (int i = 0; i < N; i++) hit[i] = targets[i] >= 0 && tl[i] > mx[i] ? 1.0f : 0.0f;
}

void be_exp_sub(float* x, const float* m, int N) {
    for (int i = 0; i < N; i++) x[i] = x[i] == -INFINITY ? 0.0f : expf(x[i] - m[i]);
}

void be_log_add(float* lse, const float* s, const float* m, int N) {
    for (int i = 0; i < N; i++) lse[i] = m[i] + logf(s[i]);
}

// ---- AdamW ----
void be_adamw(float* p, const float* g, float* m, float* v, const BeSegment* seg, int nseg, float lr, float b1, float b2,
              float eps, float wd, float bc1, float bc2, const float* gscale) {
    float gs = gscale[0];
    for (int s = 0; s < nseg; s++) {
        size_t o = seg[s].offset, n = seg[s].n;
        float w = seg[s].cls ? wd : 0.0f;
        #pragma omp parallel for simd schedule(static)
        for (size_t i = o; i < o + n; i++) {
            float gi = g[i] * gs;
            float mi = b1 * m[i] + (1.0f - b1) * gi;
            float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
            m[i] = mi; v[i] = vi;
            p[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + w * p[i]);
        }
    }
}
