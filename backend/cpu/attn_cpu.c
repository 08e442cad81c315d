// attn_cpu.c — CPU backend of attention.h: FlashAttention-2 style blockwise attention (OpenMP + OpenBLAS).
//
// Work unit ("stack"): the hs query heads h that share one kv head g (GQA), for one tile of bq query rows,
// copied into a contiguous [rows = hs*bq, hd] matrix (head-major: row r = head r / bq, query r % bq), so
// that one sgemm covers every head of the group and each K/V tile is packed once per group, not per head.
// bq = ATTN_ROWS / hs; the key tile is ATTN_BK rows.
//
// Forward, per (kv head, head stack, query tile), one OpenMP work item:
//   for each key tile (skipped when fully masked):
//     S = mask + scale * Qs K^T                 [rows, bk]   sgemm onto a buffer pre-filled with 0 / -inf
//     m' = max(m, rowmax S);  P = exp(S - m');  l = l*exp(m-m') + rowsum P;  O = O*exp(m-m') + P V   sgemm
//   block result o = O / l, lse_b = m + log l, merged into the running (out, lse) in place.
// Backward (FA-2 with the saved final lse), per (kv head g, query tile i, key tile j), all heads of group g:
//   P = exp(scale Qs K^T - lse);  dV += P^T dOs;  dS = P * (dOs V^T - D);  dQ += scale dS K;  dK += scale dS^T Qs
//   (-lse / -D come in as the pre-filled C of the sgemms, beta = 1). Race-free and deterministic without
//   atomics: the (i, j) tile pairs are processed in "colour" steps c = (i + j) mod max(nqt, nkt) (j counted
//   from the first key tile any query can see). Within a step no two items share a query tile or a key
//   tile, so each item owns its dQ rows and its dK/dV rows; steps are separated by a barrier. Every dQ / dK / dV tile receives its contributions in the same fixed
//   order whatever the thread count or the dynamic schedule, so results are bit-identical run to run (and
//   across thread counts). The colouring also spreads a causal triangle evenly over the steps.
// All tile matmuls are cblas_sgemm calls; K, V, dK, dV are addressed inside the [T, nkv*hd] row layout through
// lda/ldb/ldc (no copies). sgemm is never called with beta = 0 (OpenBLAS' beta = 0 pass is slow): C buffers
// are filled by our own loops. The OpenMP build of OpenBLAS runs the sgemms single-threaded inside our
// parallel regions, which is what we want: the parallelism is over tiles.
// Scratch: per-thread buffers planned by attn_init(); kernels never allocate, except that a kernel called
// before attn_init() (or with a larger hd / more threads than planned) calls attn_init() once itself, from
// serial code. The kernels must be called from serial code, not from inside an OpenMP parallel region.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <cblas.h>
#include "backend/attention.h"

#ifndef ATTN_ROWS
#define ATTN_ROWS 256    // stacked query rows per work item (hs heads x bq queries)
#endif
#ifndef ATTN_BK
#define ATTN_BK 128      // key rows per tile (also the leading dimension of the score buffers)
#endif
#define ATTN_MIN_BQ 16   // fewest query rows per tile; more heads than ATTN_ROWS / ATTN_MIN_BQ are split

// ---------------------------------------------------------------------------------------------------------
// scratch

typedef struct {
    float* s;     // [ROWS, BK] scores (forward, kept zero between key tiles) / P (backward)
    float* dp;    // [ROWS, BK] P (forward) / dP, dS (backward)
    float* q;     // [ROWS, max_hd] stacked query rows
    float* o;     // [ROWS, max_hd] output accumulator (forward) / stacked dout (backward)
    float* dq;    // [ROWS, max_hd] stacked dq contribution (backward)
    float* m;     // [ROWS] running max (forward) / -lse (backward)
    float* l;     // [ROWS] running sum (forward) / -D (backward)
} Scratch;

static Scratch* g_scratch = NULL;
static int g_nthreads = 0;
static int g_max_hd = 0;
static long long g_blocks = 0;   // block calls so far (attn_engine_counts)

static float* alloc_floats(size_t n) {
    void* p = NULL;
    if (posix_memalign(&p, 64, n * sizeof(float) + 64) != 0) {
        fprintf(stderr, "attn_init: out of memory\n");
        exit(1);
    }
    return (float*)p;
}

static void free_scratch(void) {
    for (int t = 0; t < g_nthreads; t++) {
        Scratch* sc = &g_scratch[t];
        free(sc->s); free(sc->dp); free(sc->q); free(sc->o); free(sc->dq); free(sc->m); free(sc->l);
    }
    free(g_scratch);
    g_scratch = NULL;
    g_nthreads = 0;
}

void attn_init(int max_hd) {
    int nthreads = omp_get_max_threads();
    if (max_hd < g_max_hd) max_hd = g_max_hd;
    if (nthreads < g_nthreads) nthreads = g_nthreads;
    if (g_scratch && max_hd == g_max_hd && nthreads == g_nthreads) return;
    free_scratch();
    g_scratch = (Scratch*)calloc((size_t)nthreads, sizeof(Scratch));
    if (!g_scratch) { fprintf(stderr, "attn_init: out of memory\n"); exit(1); }
    for (int t = 0; t < nthreads; t++) {
        Scratch* sc = &g_scratch[t];
        sc->s  = alloc_floats((size_t)ATTN_ROWS * ATTN_BK);
        sc->dp = alloc_floats((size_t)ATTN_ROWS * ATTN_BK);
        sc->q  = alloc_floats((size_t)ATTN_ROWS * max_hd);
        sc->o  = alloc_floats((size_t)ATTN_ROWS * max_hd);
        sc->dq = alloc_floats((size_t)ATTN_ROWS * max_hd);
        sc->m  = alloc_floats(ATTN_ROWS);
        sc->l  = alloc_floats(ATTN_ROWS);
    }
    g_nthreads = nthreads;
    g_max_hd = max_hd;
}

// lazily (re)plan when the caller skipped attn_init or asks for more than was planned; serial code only
static void ensure_scratch(int hd) {
    if (!g_scratch || hd > g_max_hd || omp_get_max_threads() > g_nthreads) attn_init(hd);
}

// ---------------------------------------------------------------------------------------------------------
// element-wise helpers (plain loops that gcc -O3 -march=native vectorises)

// exp(x) = 2^n exp(r), n = round(x log2 e), r = x - n ln2 (Cody-Waite, two parts), exp(r) - 1 by the Cephes
// degree-5 minimax polynomial: relative error < 1e-7 on [-87, 88]. x < -87.3 (also -inf) -> 0; x is
// clamped to <= 88 (callers only pass x <= ~0). The clamps are done on the bit patterns with integer min/max
// (no float compares, which gcc will not if-convert without -fno-trapping-math), so loops calling this
// vectorise: signed order of the bits is the float order for x >= 0, unsigned order is it reversed for x < 0.
static inline float fast_expf(float x) {
    union { float f; int32_t i; uint32_t u; } c = { x };
    c.i = c.i < 0x42B00000 ? c.i : 0x42B00000;          // min(x, 88)   (+inf -> 88)
    c.u = c.u < 0xC2C80000u ? c.u : 0xC2C80000u;        // max(x, -100) (-inf -> -100)
    float xc = c.f;
    union { float f; int32_t i; } t = { fmaf(xc, 1.44269504088896341f, 12582912.0f) };  // 1.5*2^23 + n
    float n = t.f - 12582912.0f;
    float r = fmaf(n, -0.693359375f, xc);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float em1 = fmaf(p, r * r, r);                       // exp(r) - 1
    int32_t e = t.i - (0x4B400000 - 127);                // biased exponent n + 127, read off the bits of t
    e = e > 0 ? e : 0;                                   // underflow -> 2^n = 0
    union { int32_t i; float f; } two_n = { e << 23 };
    return fmaf(em1, two_n.f, two_n.f);
}

// float <-> int key with the same order (for a max reduction that vectorises without fast-math)
static inline int32_t float_key(float x) {
    union { float f; int32_t i; } c = { x };
    return c.i ^ ((c.i >> 31) & 0x7FFFFFFF);
}
static inline float key_float(int32_t k) {
    union { int32_t i; float f; } c = { k ^ ((k >> 31) & 0x7FFFFFFF) };
    return c.f;
}

// max(init, x[0..n)) (no NaNs expected; -inf allowed)
static inline float row_max(const float* x, int n, float init) {
    int32_t m = float_key(init);
    for (int j = 0; j < n; j++) {
        int32_t kx = float_key(x[j]);
        m = kx > m ? kx : m;
    }
    return key_float(m);
}

// p[j] = exp(s[j] - sub) and s[j] = 0 (the score buffer is kept zero for the next sgemm with beta = 1);
// returns sum p (8 fixed lanes so that it vectorises and stays deterministic)
static inline float row_exp_sum_clear(float* restrict p, float* restrict s, int n, float sub) {
    float acc[8] = {0};
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int u = 0; u < 8; u++) {
            float e = fast_expf(s[j + u] - sub);
            p[j + u] = e;
            s[j + u] = 0.0f;
            acc[u] += e;
        }
    for (; j < n; j++) {
        float e = fast_expf(s[j] - sub);
        p[j] = e;
        s[j] = 0.0f;
        acc[0] += e;
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

static inline void int_min_max(const int* x, int n, int* mn, int* mx) {
    int a = x[0], b = x[0];
    for (int i = 1; i < n; i++) { a = x[i] < a ? x[i] : a; b = x[i] > b ? x[i] : b; }
    *mn = a; *mx = b;
}

// The mask of a call: causal from positions, and documents when qdoc/kdoc are given (attention.h)
typedef struct { const int *qpos, *qdoc, *kpos, *kdoc; int causal; } Mask;

// ranges of a run of rows: positions [pmin, pmax], document ids [dmin, dmax] (0, 0 without documents)
typedef struct { int pmin, pmax, dmin, dmax; } Range;
static inline Range rows_range(const int* pos, const int* doc, int n) {
    Range r = { 0, 0, 0, 0 };
    int_min_max(pos, n, &r.pmin, &r.pmax);
    if (doc) int_min_max(doc, n, &r.dmin, &r.dmax);
    return r;
}

// visibility of a (query rows, key rows) tile from the ranges: 0 = nothing visible (skip), 1 = partially
// (mask elementwise), 2 = all. Documents: disjoint id ranges see nothing, one and the same id everywhere
// hides nothing.
static inline int range_visibility(Range q, Range k, int causal, int docs) {
    if (causal && q.pmax < k.pmin) return 0;
    if (docs && (q.dmax < k.dmin || k.dmax < q.dmin)) return 0;
    int all = (!causal || q.pmin >= k.pmax) && (!docs || (q.dmin == q.dmax && k.dmin == k.dmax && q.dmin == k.dmin));
    return all ? 2 : 1;
}

// whether some key of key tile kt (ATTN_BK rows of Tk) can be visible to some query of the range qr
static inline int key_tile_reachable(const Mask* mk, Range qr, int Tk, int kt) {
    int j0 = kt * ATTN_BK, bk = Tk - j0 < ATTN_BK ? Tk - j0 : ATTN_BK;
    Range kr = rows_range(mk->kpos + j0, mk->kdoc ? mk->kdoc + j0 : NULL, bk);
    return range_visibility(qr, kr, mk->causal, mk->qdoc != NULL) != 0;
}

// tile visibility of query rows i0..i0+bq against key rows j0..j0+bk
static inline int tile_visibility(const Mask* mk, int i0, int bq, int j0, int bk) {
    if (!mk->causal && !mk->qdoc) return 2;
    return range_visibility(rows_range(mk->qpos + i0, mk->qdoc ? mk->qdoc + i0 : NULL, bq),
                            rows_range(mk->kpos + j0, mk->kdoc ? mk->kdoc + j0 : NULL, bk), mk->causal, mk->qdoc != NULL);
}

// merge one row of one head: (o1, *l1) <- merge((o1, *l1), (o2, l2)); -inf on a side takes the other side
static inline void merge_row(float* o1, float* l1, const float* o2, float l2, int hd) {
    if (l2 == -INFINITY) return;
    float a = *l1;
    if (a == -INFINITY) {
        for (int d = 0; d < hd; d++) o1[d] = o2[d];
        *l1 = l2;
        return;
    }
    float mx = a > l2 ? a : l2;
    float lse = mx + log1pf(expf(-fabsf(a - l2)));
    float w1 = expf(a - lse), w2 = expf(l2 - lse);
    for (int d = 0; d < hd; d++) o1[d] = o1[d] * w1 + o2[d] * w2;
    *l1 = lse;
}

// ---------------------------------------------------------------------------------------------------------
// tiling of one call

typedef struct {
    int Tq, Tk, nh, nkv, hd, group;   // group: query heads per kv head
    int ldq, ldk;                     // row strides: nh*hd, nkv*hd
    int hs, nsub;                     // heads per stack, stacks per group
    int bq, nqt, nkt;                 // query rows per tile, query tiles, key tiles
} Plan;

static Plan make_plan(int Tq, int Tk, int nh, int nkv, int hd) {
    Plan p;
    p.Tq = Tq; p.Tk = Tk; p.nh = nh; p.nkv = nkv; p.hd = hd; p.group = nh / nkv;
    p.ldq = nh * hd; p.ldk = nkv * hd;
    int max_hs = ATTN_ROWS / ATTN_MIN_BQ;
    p.nsub = (p.group + max_hs - 1) / max_hs;
    p.hs = (p.group + p.nsub - 1) / p.nsub;
    p.bq = ATTN_ROWS / p.hs;
    p.nqt = (Tq + p.bq - 1) / p.bq;
    p.nkt = (Tk + ATTN_BK - 1) / ATTN_BK;
    return p;
}

// first head of stack `sub` of kv head g, and its number of heads
static inline int stack_h0(const Plan* p, int g, int sub) { return g * p->group + sub * p->hs; }
static inline int stack_nh(const Plan* p, int sub) {
    int left = p->group - sub * p->hs;
    return left < p->hs ? left : p->hs;
}

// dst[r, 0..hd) = src rows of heads h0.. for query rows i0..i0+bq (row r = head r / bq, query r % bq);
// loops query-major so that the source is read in contiguous runs of nhs*hd floats
static void gather_rows(float* dst, const float* src, const Plan* p, int h0, int nhs, int i0, int bq) {
    int hd = p->hd;
    for (int i = 0; i < bq; i++) {
        const float* s = src + (size_t)(i0 + i) * p->ldq + (size_t)h0 * hd;
        for (int hh = 0; hh < nhs; hh++) {
            float* d = dst + ((size_t)hh * bq + i) * hd;
            for (int c = 0; c < hd; c++) d[c] = s[hh * hd + c];
        }
    }
}

// dst rows += src[r, 0..hd), the inverse layout of gather_rows
static void scatter_add_rows(float* dst, const float* src, const Plan* p, int h0, int nhs, int i0, int bq) {
    int hd = p->hd;
    for (int i = 0; i < bq; i++) {
        float* d = dst + (size_t)(i0 + i) * p->ldq + (size_t)h0 * hd;
        for (int hh = 0; hh < nhs; hh++) {
            const float* s = src + ((size_t)hh * bq + i) * hd;
            for (int c = 0; c < hd; c++) d[hh * hd + c] += s[c];
        }
    }
}

// fill score rows before an sgemm with beta = 1: s[r, j] = -inf where masked, else val[r] (0 if val is NULL)
//   vis 2: no mask; vis 1: key j0 + j visible to query i0 + r % bq under the call's mask (attention.h)
static void fill_rows(float* s, int rows, int bq, int bk, const float* val, const Mask* mk, int i0, int j0, int vis) {
    const int *kp = mk->kpos + j0, *kd = mk->kdoc ? mk->kdoc + j0 : NULL;
    for (int r = 0; r < rows; r++) {
        float* sr = s + (size_t)r * ATTN_BK;
        float x = val ? val[r] : 0.0f;
        if (vis == 2) {
            for (int j = 0; j < bk; j++) sr[j] = x;
        } else {
            int qp = mk->causal ? mk->qpos[i0 + r % bq] : INT_MAX;
            if (!kd) { for (int j = 0; j < bk; j++) sr[j] = kp[j] > qp ? -INFINITY : x; continue; }
            int qd = mk->qdoc[i0 + r % bq];
            for (int j = 0; j < bk; j++) sr[j] = kp[j] > qp || kd[j] != qd ? -INFINITY : x;
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// forward

void attn_forward_begin(float* out, float* lse, int Tq, int nh, int hd) {
    memset(out, 0, (size_t)Tq * nh * hd * sizeof(float));
    for (long i = 0; i < (long)Tq * nh; i++) lse[i] = -INFINITY;
}

// one stack (heads h0..h0+nhs of kv head g, query rows i0..i0+bq) against all key tiles of the block
static void forward_stack(Scratch* sc, const Plan* p, float* out, float* lse,
                          const float* q, const float* k, const float* v, const Mask* mk,
                          int g, int h0, int nhs, int i0, int bq, float scale) {
    int hd = p->hd, rows = nhs * bq;
    float* S = sc->s;      // [rows, BK] scores; all zero between key tiles (sgemm accumulates onto it)
    float* P = sc->dp;     // [rows, BK] probabilities
    float* Qs = sc->q;     // [rows, hd]
    float* O = sc->o;      // [rows, hd]
    float* m = sc->m;      // [rows]
    float* l = sc->l;      // [rows]
    int any = 0;
    for (int j0 = 0; j0 < p->Tk; j0 += ATTN_BK) {
        int bk = p->Tk - j0 < ATTN_BK ? p->Tk - j0 : ATTN_BK;
        int vis = tile_visibility(mk, i0, bq, j0, bk);
        if (vis == 0) continue;
        if (!any) {   // first visible tile: set up the stack
            any = 1;
            gather_rows(Qs, q, p, h0, nhs, i0, bq);
            memset(O, 0, (size_t)rows * hd * sizeof(float));
            memset(S, 0, (size_t)rows * ATTN_BK * sizeof(float));
            for (int r = 0; r < rows; r++) { m[r] = -INFINITY; l[r] = 0.0f; }
        }
        // S[rows, bk] = mask + scale * Qs[rows, hd] K[bk, hd]^T   (mask: 0 or -inf)
        if (vis == 1) fill_rows(S, rows, bq, bk, NULL, mk, i0, j0, vis);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, bk, hd, scale,
                    Qs, hd, k + (size_t)j0 * p->ldk + (size_t)g * hd, p->ldk, 1.0f, S, ATTN_BK);
        for (int r = 0; r < rows; r++) {
            float* s = S + (size_t)r * ATTN_BK;
            float* pr = P + (size_t)r * ATTN_BK;
            float m_new = row_max(s, bk, m[r]);
            if (m_new == -INFINITY) {          // nothing visible to this row so far: P row = 0
                memset(pr, 0, (size_t)bk * sizeof(float));
                memset(s, 0, (size_t)bk * sizeof(float));
                continue;
            }
            float corr = fast_expf(m[r] - m_new);   // m[r] = -inf -> 0
            l[r] = l[r] * corr + row_exp_sum_clear(pr, s, bk, m_new);
            m[r] = m_new;
            if (corr != 1.0f) {
                float* o = O + (size_t)r * hd;
                for (int d = 0; d < hd; d++) o[d] *= corr;
            }
        }
        // O[rows, hd] += P[rows, bk] V[bk, hd]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, bk, 1.0f,
                    P, ATTN_BK, v + (size_t)j0 * p->ldk + (size_t)g * hd, p->ldk, 1.0f, O, hd);
    }
    if (!any) return;
    // o = O / l, lse_b = m + log l, merged into out / lse (query-major: contiguous runs of out)
    for (int i = 0; i < bq; i++) {
        float* out_i = out + (size_t)(i0 + i) * p->ldq;
        float* lse_i = lse + (size_t)(i0 + i) * p->nh;
        for (int hh = 0; hh < nhs; hh++) {
            int r = hh * bq + i, h = h0 + hh;
            if (m[r] == -INFINITY) continue;       // row saw no key in this block: unchanged
            float* o = O + (size_t)r * hd;
            float inv = 1.0f / l[r];
            for (int d = 0; d < hd; d++) o[d] *= inv;
            merge_row(out_i + (size_t)h * hd, lse_i + h, o, m[r] + logf(l[r]), hd);
        }
    }
}

void attn_block_forward(float* out, float* lse,
                        const float* q, const int* qpos, const int* qdoc, int Tq,
                        const float* k, const float* v, const int* kpos, const int* kdoc, int Tk,
                        int nh, int nkv, int hd, float scale, int mask) {
    if (Tq <= 0 || Tk <= 0) return;
    g_blocks++;
    ensure_scratch(hd);
    Plan p = make_plan(Tq, Tk, nh, nkv, hd);
    Mask mk = { qpos, qdoc && kdoc ? qdoc : NULL, kpos, qdoc && kdoc ? kdoc : NULL, mask == ATTN_MASK_CAUSAL };
    int per_tile = nkv * p.nsub;
    int nitems = p.nqt * per_tile;
    // items ordered last query tile first: with ascending positions those carry the most causal work
    #pragma omp parallel for schedule(dynamic, 1)
    for (int it = 0; it < nitems; it++) {
        int qt = p.nqt - 1 - it / per_tile, g = (it % per_tile) / p.nsub, sub = it % p.nsub;
        int i0 = qt * p.bq;
        int bq = Tq - i0 < p.bq ? Tq - i0 : p.bq;
        forward_stack(&g_scratch[omp_get_thread_num()], &p, out, lse, q, k, v, &mk,
                      g, stack_h0(&p, g, sub), stack_nh(&p, sub), i0, bq, scale);
    }
}

// ---- engines: the CPU backend has one (its kernels); positions are host memory already ----
int attn_engine_select(const char* engine, const AttnRunShape* s, unsigned* fast, char* report, size_t reportlen,
                       char* err, size_t errlen) {
    (void)s;
    *fast = 0;
    if (strcmp(engine, "auto") && strcmp(engine, "own")) {
        snprintf(err, errlen, "attn_engine = %s: the cpu backend has only its own attention kernels (attn_engine = auto "
                 "or own; cudnn needs the CUDA backend)", engine);
        return 1;
    }
    snprintf(report, reportlen, "attention engine: own kernels for every block (the cpu backend has one engine)");
    return 0;
}
void attn_engine_use(unsigned fast) { (void)fast; }
void attn_host_mirror(const int* dev, const int* host, size_t n) { (void)dev; (void)host; (void)n; }
void attn_engine_counts(long long counts[2]) { counts[ATTN_ENGINE_OWN] = g_blocks; counts[ATTN_ENGINE_FAST] = 0; }

void attn_merge(float* o1, float* lse1, const float* o2, const float* lse2, int Tq, int nh, int hd) {
    long n = (long)Tq * nh;
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < n; r++)
        merge_row(o1 + r * hd, lse1 + r, o2 + r * hd, lse2[r], hd);
}

// ---------------------------------------------------------------------------------------------------------
// backward

void attn_backward_begin(float* D, const float* dout, const float* out, int Tq, int nh, int hd) {
    long n = (long)Tq * nh;
    #pragma omp parallel for schedule(static)
    for (long r = 0; r < n; r++) {
        const float* a = dout + r * hd;
        const float* b = out + r * hd;
        float acc = 0.0f;
        for (int d = 0; d < hd; d++) acc += a[d] * b[d];
        D[r] = acc;
    }
}

// one stack (heads h0..h0+nhs of kv head g, query rows i0..i0+bq) against key rows j0..j0+bk:
// dq (those rows and heads) += ..., dk, dv (those key rows, kv head g) += ...
static void backward_stack(Scratch* sc, const Plan* p, float* dq, float* dk, float* dv,
                           const float* dout, const float* q, const float* lse, const float* D,
                           const float* k, const float* v, const Mask* mk,
                           int g, int h0, int nhs, int i0, int bq, int j0, int bk, float scale, int vis) {
    int hd = p->hd, rows = nhs * bq, ldk = p->ldk;
    float* P = sc->s;        // [rows, BK]
    float* dS = sc->dp;      // [rows, BK]
    float* Qs = sc->q;       // [rows, hd]
    float* dOs = sc->o;      // [rows, hd]
    float* dQs = sc->dq;     // [rows, hd]
    float* neg_lse = sc->m;  // [rows]  -lse, or -inf for a row that saw no key anywhere (then P = 0)
    float* neg_D = sc->l;    // [rows]
    const float* kt = k + (size_t)j0 * ldk + (size_t)g * hd;
    const float* vt = v + (size_t)j0 * ldk + (size_t)g * hd;
    float* dkt = dk + (size_t)j0 * ldk + (size_t)g * hd;
    float* dvt = dv + (size_t)j0 * ldk + (size_t)g * hd;
    gather_rows(Qs, q, p, h0, nhs, i0, bq);
    gather_rows(dOs, dout, p, h0, nhs, i0, bq);
    for (int r = 0; r < rows; r++) {
        size_t ri = (size_t)(i0 + r % bq) * p->nh + (size_t)(h0 + r / bq);
        neg_lse[r] = lse[ri] == -INFINITY ? -INFINITY : -lse[ri];
        neg_D[r] = -D[ri];
    }
    // P = exp(mask - lse + scale * Qs K^T)     [rows, bk]
    fill_rows(P, rows, bq, bk, neg_lse, mk, i0, j0, vis);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, bk, hd, scale, Qs, hd, kt, ldk, 1.0f, P, ATTN_BK);
    for (int r = 0; r < rows; r++) {
        float* pr = P + (size_t)r * ATTN_BK;
        for (int j = 0; j < bk; j++) pr[j] = fast_expf(pr[j]);
    }
    // dV[bk, hd] += P^T[bk, rows] dOs[rows, hd]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, hd, rows, 1.0f, P, ATTN_BK, dOs, hd, 1.0f, dvt, ldk);
    // dS = P * (dOs V^T - D)     [rows, bk]
    fill_rows(dS, rows, bq, bk, neg_D, mk, i0, j0, 2);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, bk, hd, 1.0f, dOs, hd, vt, ldk, 1.0f, dS, ATTN_BK);
    for (int r = 0; r < rows; r++) {
        const float* pr = P + (size_t)r * ATTN_BK;
        float* dsr = dS + (size_t)r * ATTN_BK;
        for (int j = 0; j < bk; j++) dsr[j] *= pr[j];
    }
    // dQs[rows, hd] = scale * dS[rows, bk] K[bk, hd], added into dq
    memset(dQs, 0, (size_t)rows * hd * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, bk, scale, dS, ATTN_BK, kt, ldk, 1.0f, dQs, hd);
    scatter_add_rows(dq, dQs, p, h0, nhs, i0, bq);
    // dK[bk, hd] += scale * dS^T[bk, rows] Qs[rows, hd]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bk, hd, rows, scale, dS, ATTN_BK, Qs, hd, 1.0f, dkt, ldk);
}

void attn_block_backward(float* dq, float* dk, float* dv,
                         const float* dout, const float* q, const float* lse, const float* D,
                         const int* qpos, const int* qdoc, int Tq,
                         const float* k, const float* v, const int* kpos, const int* kdoc, int Tk,
                         int nh, int nkv, int hd, float scale, int mask) {
    if (Tq <= 0 || Tk <= 0) return;
    g_blocks++;
    ensure_scratch(hd);
    Plan p = make_plan(Tq, Tk, nh, nkv, hd);
    Mask mk = { qpos, qdoc && kdoc ? qdoc : NULL, kpos, qdoc && kdoc ? kdoc : NULL, mask == ATTN_MASK_CAUSAL };
    // key tiles kt_lo..kt_hi can be visible to some query (causal: the rest lie wholly after every query;
    // documents: the rest hold only ids outside the queries' range)
    int kt_lo = 0, kt_hi = p.nkt - 1;
    if (mk.causal || mk.qdoc) {
        Range qr = rows_range(qpos, mk.qdoc, Tq);
        while (kt_lo <= kt_hi && !key_tile_reachable(&mk, qr, Tk, kt_lo)) kt_lo++;
        while (kt_hi >= kt_lo && !key_tile_reachable(&mk, qr, Tk, kt_hi)) kt_hi--;
        if (kt_lo > kt_hi) return;
    }
    int nkt = kt_hi - kt_lo + 1;
    int ncolour = p.nqt > nkt ? p.nqt : nkt;
    int nitems = nkv * p.nqt;   // per colour step: (kv head, query tile); the key tile follows from the colour
    #pragma omp parallel
    {
        Scratch* sc = &g_scratch[omp_get_thread_num()];
        for (int c = 0; c < ncolour; c++) {
            #pragma omp for schedule(dynamic, 1)
            for (int it = 0; it < nitems; it++) {
                int g = it / p.nqt, qt = it % p.nqt;
                int kt = (c - qt + ncolour) % ncolour;   // colour c = (qt + kt - kt_lo) mod ncolour
                if (kt >= nkt) continue;
                kt += kt_lo;
                int i0 = qt * p.bq, j0 = kt * ATTN_BK;
                int bq = Tq - i0 < p.bq ? Tq - i0 : p.bq;
                int bk = Tk - j0 < ATTN_BK ? Tk - j0 : ATTN_BK;
                int vis = tile_visibility(&mk, i0, bq, j0, bk);
                if (vis == 0) continue;
                for (int sub = 0; sub < p.nsub; sub++)
                    backward_stack(sc, &p, dq, dk, dv, dout, q, lse, D, k, v, &mk,
                                   g, stack_h0(&p, g, sub), stack_nh(&p, sub), i0, bq, j0, bk, scale, vis);
            }   // implicit barrier: the next colour may touch the same dq / dk / dv tiles
        }
    }
}
