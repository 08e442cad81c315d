// backend_cpu.c — the CPU backend (backend.h): host memory, OpenBLAS sgemm, OpenMP kernels.
// Reductions use a fixed partition (never depending on the thread count) so results are bit-identical.
#include "backend/backend.h"
#include "common/util.h"
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char* be_name(void) { return "cpu"; }

static const BeTuning TUNING = { .ring_query_rows = 256, .head_rows = 1024 };
const BeTuning* be_tuning(void) { return &TUNING; }

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

int be_set_matmul_precision(const char* name) {   // sgemm is fp32 whatever is asked
    return strcmp(name, "bf16") && strcmp(name, "tf32") && strcmp(name, "fp32");
}

void be_matmul(float* C, const float* A, const float* B, int m, int n, int k,
               int transA, int transB, float alpha, float beta) {
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                m, n, k, alpha, A, transA ? m : k, B, transB ? k : n, beta, C, n);
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
void be_rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C, float eps) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float* xi = x + (size_t)i * C;
        float* oi = out + (size_t)i * C;
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += xi[c] * xi[c];
        float r = 1.0f / sqrtf(ss / C + eps);
        rstd[i] = r;
        for (int c = 0; c < C; c++) oi[c] = xi[c] * r * w[c];
    }
}

// y = x r w, r = (mean(x^2)+eps)^-1/2:  dx = r (w dy) - x r^3/C sum_c(w dy x);  dw = sum_i dy x r
void be_rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                         const float* rstd, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float* xi = x + (size_t)i * C;
        const float* gi = dout + (size_t)i * C;
        float* di = dx + (size_t)i * C;
        float r = rstd[i], dot = 0.0f;
        for (int c = 0; c < C; c++) dot += gi[c] * w[c] * xi[c];
        float k = dot * r * r * r / C;
        for (int c = 0; c < C; c++) di[c] += gi[c] * w[c] * r - xi[c] * k;
    }
    int nchunk = (C + 63) / 64;
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
        for (int c = c0; c < c1; c++) dw[c] += acc[c - c0];
    }
}

// ---- RoPE (rotate_half): pair (x_i, x_{i+h}) with h = hd/2 rotates by angle p*inv_freq_i ----
//   x'_i = x_i cos - x_{i+h} sin;   x'_{i+h} = x_{i+h} cos + x_i sin      (cos, sin include the factor a)
static void rope_apply(float* x, const int* pos, const float* cs, int N, int nh, int hd, float sgn) {
    int h = hd / 2;
    #pragma omp parallel for schedule(static)
    for (int t = 0; t < N; t++) {
        const float* c = cs + (size_t)pos[t] * hd;
        const float* s = c + h;
        for (int head = 0; head < nh; head++) {
            float* xh = x + ((size_t)t * nh + head) * hd;
            for (int i = 0; i < h; i++) {
                float a = xh[i], b = xh[i + h], sn = sgn * s[i];
                xh[i] = a * c[i] - b * sn;
                xh[i + h] = b * c[i] + a * sn;
            }
        }
    }
}
void be_rope_forward(float* x, const int* pos, const float* cs, int N, int nh, int hd) {
    rope_apply(x, pos, cs, N, nh, hd, 1.0f);
}
// the transpose of [[c, -s], [s, c]] is [[c, s], [-s, c]]: the same map with the sine negated
void be_rope_backward(float* dx, const int* pos, const float* cs, int N, int nh, int hd) {
    rope_apply(dx, pos, cs, N, nh, hd, -1.0f);
}

// ---- SwiGLU ----
void be_swiglu_forward(float* h, const float* g, const float* u, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float sg = 1.0f / (1.0f + expf(-g[i]));
        h[i] = g[i] * sg * u[i];
    }
}
// silu'(g) = s (1 + g (1 - s)), s = sigmoid(g)
void be_swiglu_backward(float* dg, float* du, const float* dh, const float* g, const float* u, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + expf(-g[i]));
        float silu = g[i] * s;
        dg[i] = dh[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
        du[i] = dh[i] * silu;
    }
}

// ---- cross-entropy ----
void be_xent_lse(float* lse, const float* logits, int N, int ld, int nv) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float* x = logits + (size_t)i * ld;
        float m = -INFINITY;
        for (int j = 0; j < nv; j++) m = x[j] > m ? x[j] : m;
        double s = 0;
        for (int j = 0; j < nv; j++) s += expf(x[j] - m);
        lse[i] = nv ? m + (float)log(s) : -INFINITY;
    }
}

void be_xent_target_logit(float* tl, const float* logits, const int* targets, int N, int ld, int nv, int v0) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        int t = targets[i] - v0;
        tl[i] = (targets[i] >= 0 && t >= 0 && t < nv) ? logits[(size_t)i * ld + t] : 0.0f;
    }
}

void be_xent_loss(float* losses, const float* lse, const float* tl, const int* targets, int N) {
    for (int i = 0; i < N; i++) losses[i] = targets[i] >= 0 ? lse[i] - tl[i] : 0.0f;
}

void be_xent_backward(float* logits, const float* lse, const int* targets, int N, int ld, int nv, int v0, float scale) {
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float* x = logits + (size_t)i * ld;
        if (targets[i] < 0) { memset(x, 0, ld * sizeof(float)); continue; }
        float l = lse[i];
        for (int j = 0; j < nv; j++) x[j] = scale * expf(x[j] - l);
        for (int j = nv; j < ld; j++) x[j] = 0.0f;
        int t = targets[i] - v0;
        if (t >= 0 && t < nv) x[t] -= scale;
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
void be_adamw(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1, float b2,
              float eps, float wd, float bc1, float bc2, const float* gscale) {
    float gs = gscale[0];
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi; v[i] = vi;
        p[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * p[i]);
    }
}
