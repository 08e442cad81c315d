// test_attention.c — blockwise attention (attention.h, CPU backend) against a naive double-precision reference.
// Covers: forward out/lse and backward dq/dk/dv, causal and not, ragged sizes, GQA, odd head dims, splitting
// the keys into blocks (any order, and via attn_merge), non-contiguous / shuffled positions, query rows that
// see no key, determinism; document masking (document ids: boundaries inside and at tile edges, restarted
// positions, unmasked-within-documents, ids that are not sorted, rows whose document has no key: no NaN).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include "backend/backend.h"
#include "tests/testutil.h"

#define TOL 1e-5

// ---------------------------------------------------------------------------------------------------------
// helpers

static unsigned long long rng_state = 88172645463325252ULL;
static float frand(void) {   // uniform in [-1, 1)
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0) - 1.0);
}
static float* rand_floats(long n, float amp) {
    float* x = (float*)malloc((size_t)n * sizeof(float));
    for (long i = 0; i < n; i++) x[i] = amp * frand();
    return x;
}
static float* zeros_f(long n) { return (float*)calloc((size_t)n, sizeof(float)); }
static double* zeros_d(long n) { return (double*)calloc((size_t)n, sizeof(double)); }
static int* range_pos(int n, int start) {
    int* p = (int*)malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) p[i] = start + i;
    return p;
}

// like tu_rel_err but for lse: -inf entries must match exactly and are left out of the error
static double lse_err(const float* a, const double* ref, long n) {
    double md = 0, mr = 0;
    for (long i = 0; i < n; i++) {
        int ai = isinf(a[i]) && a[i] < 0, ri = isinf(ref[i]) && ref[i] < 0;
        if (ai != ri) return INFINITY;
        if (ri) continue;
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= md)) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    return md / (mr + 1e-30);
}

// tu_rel_err, but absolute where the reference is (analytically) all zero, e.g. dq, dk with a single key
static double grad_err(const float* a, const double* ref, long n) {
    double mr = 0, md = 0;
    for (long i = 0; i < n; i++) if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    if (mr > 1e-9) return tu_rel_err(a, ref, n);
    for (long i = 0; i < n; i++) { double d = fabs(a[i] - ref[i]); if (!(d <= md)) md = d; }
    return md;
}

static int has_nan(const float* x, long n) {
    for (long i = 0; i < n; i++) if (isnan(x[i])) return 1;
    return 0;
}

// ---------------------------------------------------------------------------------------------------------
// naive double reference: full softmax over the visible keys of each row; gradients by the analytic formula

typedef struct {
    double *out, *lse, *dq, *dk, *dv;
} Ref;

static int visible(int mask, int qp, int kp) { return mask != ATTN_MASK_CAUSAL || kp <= qp; }

// qdoc, kdoc: document ids (a key of another document is invisible), or NULL
static Ref reference(const float* q, const int* qpos, const int* qdoc, int Tq, const float* k, const float* v,
                     const int* kpos, const int* kdoc, int Tk, const float* dout, int nh, int nkv, int hd, float scale,
                     int mask) {
    Ref r;
    int C = nh * hd, Ck = nkv * hd, group = nh / nkv;
    r.out = zeros_d((long)Tq * C); r.lse = zeros_d((long)Tq * nh);
    r.dq = zeros_d((long)Tq * C); r.dk = zeros_d((long)Tk * Ck); r.dv = zeros_d((long)Tk * Ck);
    double* s = zeros_d(Tk);
    double* dp = zeros_d(Tk);
    for (int i = 0; i < Tq; i++) {
        for (int h = 0; h < nh; h++) {
            int g = h / group;
            const float* qi = q + (long)i * C + h * hd;
            const float* doi = dout + (long)i * C + h * hd;
            double mx = -INFINITY;
            for (int j = 0; j < Tk; j++) {
                if (!visible(mask, qpos[i], kpos[j]) || (qdoc && qdoc[i] != kdoc[j])) { s[j] = -INFINITY; continue; }
                const float* kj = k + (long)j * Ck + g * hd;
                double acc = 0;
                for (int d = 0; d < hd; d++) acc += (double)qi[d] * kj[d];
                s[j] = scale * acc;
                if (s[j] > mx) mx = s[j];
            }
            double* o = r.out + (long)i * C + h * hd;
            if (mx == -INFINITY) { r.lse[(long)i * nh + h] = -INFINITY; continue; }
            double z = 0;
            for (int j = 0; j < Tk; j++) if (s[j] != -INFINITY) z += exp(s[j] - mx);
            double lse = mx + log(z);
            r.lse[(long)i * nh + h] = lse;
            for (int j = 0; j < Tk; j++) {
                if (s[j] == -INFINITY) continue;
                double p = exp(s[j] - lse);
                const float* vj = v + (long)j * Ck + g * hd;
                for (int d = 0; d < hd; d++) o[d] += p * vj[d];
            }
            // backward of this row: D = dout . out; dS = P (dP - D)
            double D = 0;
            for (int d = 0; d < hd; d++) D += (double)doi[d] * o[d];
            for (int j = 0; j < Tk; j++) {
                if (s[j] == -INFINITY) { dp[j] = 0; continue; }
                const float* vj = v + (long)j * Ck + g * hd;
                double acc = 0;
                for (int d = 0; d < hd; d++) acc += (double)doi[d] * vj[d];
                double p = exp(s[j] - lse);
                double ds = p * (acc - D);
                const float* kj = k + (long)j * Ck + g * hd;
                double* dqi = r.dq + (long)i * C + h * hd;
                double* dkj = r.dk + (long)j * Ck + g * hd;
                double* dvj = r.dv + (long)j * Ck + g * hd;
                for (int d = 0; d < hd; d++) {
                    dqi[d] += scale * ds * kj[d];
                    dkj[d] += scale * ds * qi[d];
                    dvj[d] += p * doi[d];
                }
            }
        }
    }
    free(s); free(dp);
    return r;
}
static void free_ref(Ref* r) { free(r->out); free(r->lse); free(r->dq); free(r->dk); free(r->dv); }

// ---------------------------------------------------------------------------------------------------------
// one problem: inputs plus the kernel's results

typedef struct {
    int Tq, Tk, nh, nkv, hd, mask;
    float scale;
    float *q, *k, *v, *dout;
    int *qpos, *kpos;
    int *qdoc, *kdoc;   // document ids (NULL: none); not owned
    float *out, *lse, *D, *dq, *dk, *dv;
} Prob;

static Prob make_prob(int Tq, int Tk, int nh, int nkv, int hd, int mask, const int* qpos, const int* kpos) {
    Prob p;
    p.Tq = Tq; p.Tk = Tk; p.nh = nh; p.nkv = nkv; p.hd = hd; p.mask = mask;
    p.scale = 1.0f / sqrtf((float)hd);
    p.qdoc = p.kdoc = NULL;
    p.q = rand_floats((long)Tq * nh * hd, 2.0f);
    p.k = rand_floats((long)Tk * nkv * hd, 2.0f);
    p.v = rand_floats((long)Tk * nkv * hd, 1.0f);
    p.dout = rand_floats((long)Tq * nh * hd, 1.0f);
    p.qpos = (int*)malloc((size_t)Tq * sizeof(int)); memcpy(p.qpos, qpos, (size_t)Tq * sizeof(int));
    p.kpos = (int*)malloc((size_t)Tk * sizeof(int)); memcpy(p.kpos, kpos, (size_t)Tk * sizeof(int));
    p.out = zeros_f((long)Tq * nh * hd); p.lse = zeros_f((long)Tq * nh); p.D = zeros_f((long)Tq * nh);
    p.dq = zeros_f((long)Tq * nh * hd); p.dk = zeros_f((long)Tk * nkv * hd); p.dv = zeros_f((long)Tk * nkv * hd);
    return p;
}
static void free_prob(Prob* p) {
    free(p->q); free(p->k); free(p->v); free(p->dout); free(p->qpos); free(p->kpos);
    free(p->out); free(p->lse); free(p->D); free(p->dq); free(p->dk); free(p->dv);
}

// forward over key rows [j0, j1) as one block (merged into the running out/lse)
static void fwd_block(Prob* p, int j0, int j1) {
    long o = (long)j0 * p->nkv * p->hd;
    attn_block_forward(p->out, p->lse, p->q, p->qpos, p->qdoc, p->Tq, p->k + o, p->v + o, p->kpos + j0,
                       p->kdoc ? p->kdoc + j0 : NULL, j1 - j0, p->nh, p->nkv, p->hd, p->scale, p->mask);
}
static void bwd_block(Prob* p, int j0, int j1) {
    long o = (long)j0 * p->nkv * p->hd;
    attn_block_backward(p->dq, p->dk + o, p->dv + o, p->dout, p->q, p->lse, p->D, p->qpos, p->qdoc, p->Tq,
                        p->k + o, p->v + o, p->kpos + j0, p->kdoc ? p->kdoc + j0 : NULL, j1 - j0, p->nh, p->nkv,
                        p->hd, p->scale, p->mask);
}
static void bwd_reset(Prob* p) {
    memset(p->dq, 0, (size_t)p->Tq * p->nh * p->hd * sizeof(float));
    memset(p->dk, 0, (size_t)p->Tk * p->nkv * p->hd * sizeof(float));
    memset(p->dv, 0, (size_t)p->Tk * p->nkv * p->hd * sizeof(float));
    attn_backward_begin(p->D, p->dout, p->out, p->Tq, p->nh, p->hd);
}

// run forward + backward with the keys split at the given points (blocks processed in `order`)
static void run_split(Prob* p, const int* cuts, int nblocks, const int* order) {
    attn_forward_begin(p->out, p->lse, p->Tq, p->nh, p->hd);
    for (int b = 0; b < nblocks; b++) fwd_block(p, cuts[order[b]], cuts[order[b] + 1]);
    bwd_reset(p);
    for (int b = 0; b < nblocks; b++) bwd_block(p, cuts[order[b]], cuts[order[b] + 1]);
}

static void compare(const char* name, const Prob* p, const Ref* r) {
    long nq = (long)p->Tq * p->nh * p->hd, nk = (long)p->Tk * p->nkv * p->hd;
    double e_out = tu_rel_err(p->out, r->out, nq), e_lse = lse_err(p->lse, r->lse, (long)p->Tq * p->nh);
    double e_dq = grad_err(p->dq, r->dq, nq), e_dk = grad_err(p->dk, r->dk, nk);
    double e_dv = grad_err(p->dv, r->dv, nk);
    double worst = e_out;
    if (e_lse > worst || e_lse != e_lse) worst = e_lse;
    if (e_dq > worst) worst = e_dq;
    if (e_dk > worst) worst = e_dk;
    if (e_dv > worst) worst = e_dv;
    CHECK(worst < TOL, "%s Tq=%d Tk=%d nh=%d nkv=%d hd=%d %s: out %.1e lse %.1e dq %.1e dk %.1e dv %.1e",
          name, p->Tq, p->Tk, p->nh, p->nkv, p->hd, p->mask ? "causal" : "full", e_out, e_lse, e_dq, e_dk, e_dv);
}

static Ref ref_of(const Prob* p) {
    return reference(p->q, p->qpos, p->qdoc, p->Tq, p->k, p->v, p->kpos, p->kdoc, p->Tk, p->dout, p->nh, p->nkv,
                     p->hd, p->scale, p->mask);
}

// ---------------------------------------------------------------------------------------------------------
// tests

// whole problem as one block, contiguous positions (queries are the last Tq positions of the keys' range)
static void test_whole(int Tq, int Tk, int nh, int nkv, int hd, int mask) {
    int* kpos = range_pos(Tk, 0);
    int* qpos = range_pos(Tq, Tk - Tq > 0 ? Tk - Tq : 0);
    Prob p = make_prob(Tq, Tk, nh, nkv, hd, mask, qpos, kpos);
    Ref r = ref_of(&p);
    int cuts[2] = {0, Tk}, order[1] = {0};
    run_split(&p, cuts, 1, order);
    compare("whole", &p, &r);
    free_ref(&r); free_prob(&p); free(kpos); free(qpos);
}

// keys split into blocks at ragged points, blocks in the given order; also partials merged with attn_merge
static void test_split(int T, int nh, int nkv, int hd, int mask, const int* cuts, int nblocks, const int* order) {
    int* pos = range_pos(T, 0);
    Prob p = make_prob(T, T, nh, nkv, hd, mask, pos, pos);
    Ref r = ref_of(&p);
    run_split(&p, cuts, nblocks, order);
    char name[64];
    snprintf(name, sizeof name, "split%d(order %d..)", nblocks, order[0]);
    compare(name, &p, &r);

    // partials computed apart, then merged in the given order with attn_merge; backward as before
    long nq = (long)T * nh * hd;
    float* po = zeros_f(nq * nblocks);
    float* pl = zeros_f((long)T * nh * nblocks);
    for (int b = 0; b < nblocks; b++) {
        float* ob = po + nq * b; float* lb = pl + (long)T * nh * b;
        attn_forward_begin(ob, lb, T, nh, hd);
        long o = (long)cuts[b] * nkv * hd;
        attn_block_forward(ob, lb, p.q, p.qpos, NULL, T, p.k + o, p.v + o, p.kpos + cuts[b], NULL, cuts[b + 1] - cuts[b],
                           nh, nkv, hd, p.scale, mask);
    }
    attn_forward_begin(p.out, p.lse, T, nh, hd);
    for (int b = 0; b < nblocks; b++)
        attn_merge(p.out, p.lse, po + nq * order[b], pl + (long)T * nh * order[b], T, nh, hd);
    bwd_reset(&p);
    for (int b = 0; b < nblocks; b++) bwd_block(&p, cuts[order[b]], cuts[order[b] + 1]);
    snprintf(name, sizeof name, "merge%d(order %d..)", nblocks, order[0]);
    compare(name, &p, &r);
    free(po); free(pl);
    free_ref(&r); free_prob(&p); free(pos);
}

// queries in chunks (pointer offsets into q/out/lse/dq/dout/D, as ring.c does) x keys in two blocks
static void test_query_chunks(int T, int nh, int nkv, int hd, int chunk, int kcut) {
    int* pos = range_pos(T, 0);
    Prob p = make_prob(T, T, nh, nkv, hd, ATTN_MASK_CAUSAL, pos, pos);
    Ref r = ref_of(&p);
    int C = nh * hd, Ck = nkv * hd, cuts[3] = {0, kcut, T};
    attn_forward_begin(p.out, p.lse, T, nh, hd);
    for (int b = 1; b >= 0; b--)
        for (int i0 = 0; i0 < T; i0 += chunk) {
            int n = T - i0 < chunk ? T - i0 : chunk;
            attn_block_forward(p.out + (long)i0 * C, p.lse + (long)i0 * nh, p.q + (long)i0 * C, p.qpos + i0, NULL, n,
                               p.k + (long)cuts[b] * Ck, p.v + (long)cuts[b] * Ck, p.kpos + cuts[b], NULL,
                               cuts[b + 1] - cuts[b], nh, nkv, hd, p.scale, ATTN_MASK_CAUSAL);
        }
    bwd_reset(&p);
    for (int b = 0; b < 2; b++)
        for (int i0 = 0; i0 < T; i0 += chunk) {
            int n = T - i0 < chunk ? T - i0 : chunk;
            attn_block_backward(p.dq + (long)i0 * C, p.dk + (long)cuts[b] * Ck, p.dv + (long)cuts[b] * Ck,
                                p.dout + (long)i0 * C, p.q + (long)i0 * C, p.lse + (long)i0 * nh,
                                p.D + (long)i0 * nh, p.qpos + i0, NULL, n,
                                p.k + (long)cuts[b] * Ck, p.v + (long)cuts[b] * Ck, p.kpos + cuts[b], NULL,
                                cuts[b + 1] - cuts[b], nh, nkv, hd, p.scale, ATTN_MASK_CAUSAL);
        }
    compare("query chunks", &p, &r);
    free_ref(&r); free_prob(&p); free(pos);
}

// zigzag-like ring layout: 2 ranks, 4 chunks of 16; rank 0 holds chunks 0 and 3 (positions 0..15, 48..63),
// rank 1 chunks 1 and 2 (16..47). Rank 0's queries against its own keys and rank 1's keys (two blocks).
// The block (rank 0 queries, rank 1 keys) leaves rows 0..15 unchanged: they see no key there.
static void test_zigzag(int nh, int nkv, int hd) {
    int qpos[32], kpos[64];
    for (int i = 0; i < 16; i++) { qpos[i] = i; qpos[16 + i] = 48 + i; }
    for (int i = 0; i < 32; i++) { kpos[i] = qpos[i]; kpos[32 + i] = 16 + i; }   // own keys, then rank 1's
    Prob p = make_prob(32, 64, nh, nkv, hd, ATTN_MASK_CAUSAL, qpos, kpos);
    Ref r = ref_of(&p);
    int cuts[3] = {0, 32, 64};
    int order_a[2] = {0, 1}, order_b[2] = {1, 0};
    run_split(&p, cuts, 2, order_a);
    compare("zigzag own-first", &p, &r);
    run_split(&p, cuts, 2, order_b);
    compare("zigzag other-first", &p, &r);

    // the other rank's block alone: rows 0..15 see nothing -> lse -inf, out 0 and dq 0, no NaN anywhere
    attn_forward_begin(p.out, p.lse, 32, nh, hd);
    fwd_block(&p, 32, 64);
    int ok = 1;
    for (int i = 0; i < 16; i++)
        for (int h = 0; h < nh; h++) {
            if (!(isinf(p.lse[i * nh + h]) && p.lse[i * nh + h] < 0)) ok = 0;
            for (int d = 0; d < hd; d++) if (p.out[(i * nh + h) * hd + d] != 0.0f) ok = 0;
        }
    for (int i = 16; i < 32; i++) for (int h = 0; h < nh; h++) if (!isfinite(p.lse[i * nh + h])) ok = 0;
    bwd_reset(&p);
    bwd_block(&p, 32, 64);
    for (long i = 0; i < 16L * nh * hd; i++) if (p.dq[i] != 0.0f) ok = 0;
    long nq = 32L * nh * hd, nk = 64L * nkv * hd;
    ok = ok && !has_nan(p.out, nq) && !has_nan(p.dq, nq) && !has_nan(p.dk, nk) && !has_nan(p.dv, nk);
    CHECK(ok, "zigzag: rows with no visible key keep lse=-inf, out=0, dq=0, no NaN (nh=%d nkv=%d hd=%d)",
          nh, nkv, hd);

    // a fully masked block leaves the running result bit-identical
    run_split(&p, cuts, 2, order_a);
    float* out0 = zeros_f(nq); float* lse0 = zeros_f(32L * nh);
    memcpy(out0, p.out, (size_t)nq * sizeof(float)); memcpy(lse0, p.lse, 32L * nh * sizeof(float));
    Prob late = p;   // queries 0..15 only against keys 16..47: nothing visible at all
    late.Tq = 16;
    fwd_block(&late, 32, 64);
    CHECK(!memcmp(out0, p.out, (size_t)nq * sizeof(float)) && !memcmp(lse0, p.lse, 32L * nh * sizeof(float)),
          "zigzag: fully masked block leaves (out, lse) unchanged");
    free(out0); free(lse0);
    free_ref(&r); free_prob(&p);
}

// shuffled (unsorted, non-contiguous) positions on both sides, causal; keys split in two blocks
static void test_shuffled(int T, int nh, int nkv, int hd) {
    int* qpos = range_pos(T, 0);
    int* kpos = range_pos(T, 0);
    for (int i = T - 1; i > 0; i--) {
        int a = (int)((frand() + 1.0f) * 0.5f * (i + 1)); if (a > i) a = i;
        int b = (int)((frand() + 1.0f) * 0.5f * (i + 1)); if (b > i) b = i;
        int t = qpos[i]; qpos[i] = qpos[a]; qpos[a] = t;
        t = kpos[i]; kpos[i] = kpos[b]; kpos[b] = t;
    }
    for (int i = 0; i < T; i++) qpos[i] = 3 * qpos[i] + 1;   // gaps; some keys (3j > 3i+1) never visible
    for (int i = 0; i < T; i++) kpos[i] = 3 * kpos[i];
    Prob p = make_prob(T, T, nh, nkv, hd, ATTN_MASK_CAUSAL, qpos, kpos);
    Ref r = ref_of(&p);
    int cuts[3] = {0, T / 3, T}, order[2] = {1, 0};
    run_split(&p, cuts, 2, order);
    compare("shuffled positions", &p, &r);
    free_ref(&r); free_prob(&p); free(qpos); free(kpos);
}

// ---------------------------------------------------------------------------------------------------------
// document masking

// document ids of T rows from the sorted document starts (ids 0, 1, ...: the number of starts at or before the
// row, minus one); restart: positions become the distance from the document's start (doc_positions)
static void docs_from_starts(int T, const int* starts, int ns, int* doc, int* pos, int restart) {
    for (int i = 0, d = -1; i < T; i++) {
        while (d + 1 < ns && starts[d + 1] <= i) d++;
        doc[i] = d < 0 ? 0 : d;
        pos[i] = restart && d >= 0 ? i - starts[d] : i;
    }
}

// causal + documents on one sequence, keys split in ragged blocks in either order; boundaries inside a kernel
// tile and exactly at the key tile edge (128) and the query tile edges; restarted positions; and documents
// without the causal rule (ATTN_MASK_NONE: every key of the own document)
static void test_docs(int T, int nh, int nkv, int hd, int restart, int mask) {
    int starts[] = { 0, 5, 64, 128, 129, 200, 255, 256, 299 }, ns = 0;
    while (ns < (int)(sizeof starts / sizeof starts[0]) && starts[ns] < T) ns++;
    int *doc = malloc(T * sizeof(int)), *pos = malloc(T * sizeof(int));
    docs_from_starts(T, starts, ns, doc, pos, restart);
    Prob p = make_prob(T, T, nh, nkv, hd, mask, pos, pos);
    p.qdoc = doc; p.kdoc = doc;
    Ref r = ref_of(&p);
    int cuts[4] = {0, 100, 128, T}, o012[3] = {0, 1, 2}, o201[3] = {2, 0, 1};
    char name[96];
    run_split(&p, cuts, 3, o012);
    snprintf(name, sizeof name, "docs%s%s", restart ? " restarted positions" : "", mask ? "" : " (no causal)");
    compare(name, &p, &r);
    run_split(&p, cuts, 3, o201);
    snprintf(name, sizeof name, "docs%s%s, blocks 2,0,1", restart ? " restarted positions" : "", mask ? "" : " (no causal)");
    compare(name, &p, &r);
    free_ref(&r); free_prob(&p); free(doc); free(pos);
}

// ids only compared for equality: interleaved, unsorted ids on shuffled positions (no tile can be skipped by
// range, every element is masked); keys split in two blocks
static void test_docs_unsorted(int T, int nh, int nkv, int hd) {
    int *qpos = range_pos(T, 0), *kpos = range_pos(T, 0), *qdoc = malloc(T * sizeof(int)), *kdoc = malloc(T * sizeof(int));
    for (int i = 0; i < T; i++) { qdoc[i] = (i * 7) % 3; kdoc[i] = (i * 5 + 1) % 3; }
    for (int i = T - 1; i > 0; i--) {
        int a = (int)((frand() + 1.0f) * 0.5f * (i + 1)); if (a > i) a = i;
        int t = kpos[i]; kpos[i] = kpos[a]; kpos[a] = t;
    }
    Prob p = make_prob(T, T, nh, nkv, hd, ATTN_MASK_CAUSAL, qpos, kpos);
    p.qdoc = qdoc; p.kdoc = kdoc;
    Ref r = ref_of(&p);
    int cuts[3] = {0, T / 3, T}, order[2] = {1, 0};
    run_split(&p, cuts, 2, order);
    compare("docs unsorted ids, shuffled key positions", &p, &r);
    free_ref(&r); free_prob(&p); free(qpos); free(kpos); free(qdoc); free(kdoc);
}

// query rows whose document has no key in a block, or none at all: lse = -inf, out = 0, dq = 0, no NaN; a key
// block wholly from another document leaves the running result bit-identical
static void test_docs_empty(int nh, int nkv, int hd) {
    int T = 160, *pos = range_pos(T, 0), *qdoc = malloc(T * sizeof(int)), *kdoc = malloc(T * sizeof(int));
    for (int i = 0; i < T; i++) { qdoc[i] = i < 40 ? 7 : i < 100 ? 1 : 2; kdoc[i] = i < 100 ? 1 : 2; }   // doc 7: no key
    Prob p = make_prob(T, T, nh, nkv, hd, ATTN_MASK_CAUSAL, pos, pos);
    p.qdoc = qdoc; p.kdoc = kdoc;
    Ref r = ref_of(&p);
    int cuts[3] = {0, 100, T}, order[2] = {1, 0};
    run_split(&p, cuts, 2, order);
    compare("docs, rows of a document without keys", &p, &r);
    long nq = (long)T * nh * hd, nk = (long)T * nkv * hd;
    int ok = !has_nan(p.out, nq) && !has_nan(p.dq, nq) && !has_nan(p.dk, nk) && !has_nan(p.dv, nk);
    for (int i = 0; i < 40; i++)
        for (int h = 0; h < nh; h++) {
            if (!(isinf(p.lse[i * nh + h]) && p.lse[i * nh + h] < 0)) ok = 0;
            for (int d = 0; d < hd; d++) if (p.out[((long)i * nh + h) * hd + d] != 0.0f || p.dq[((long)i * nh + h) * hd + d] != 0.0f) ok = 0;
        }
    CHECK(ok, "docs: rows whose document has no key keep lse=-inf, out=0, dq=0, no NaN (nh=%d nkv=%d hd=%d)", nh, nkv, hd);
    // queries of document 2 (rows 100..159) against keys of document 1 (0..99): nothing visible, unchanged
    float *out0 = zeros_f(nq), *lse0 = zeros_f((long)T * nh);
    memcpy(out0, p.out, nq * sizeof(float)); memcpy(lse0, p.lse, (long)T * nh * sizeof(float));
    Prob late = p;
    long off = 100L * nh * hd;
    late.Tq = 60; late.q = p.q + off; late.out = p.out + off; late.lse = p.lse + 100L * nh; late.qpos = p.qpos + 100;
    late.qdoc = qdoc + 100;
    fwd_block(&late, 0, 100);
    CHECK(!memcmp(out0, p.out, nq * sizeof(float)) && !memcmp(lse0, p.lse, (long)T * nh * sizeof(float)),
          "docs: a key block wholly from another document leaves (out, lse) unchanged");
    free(out0); free(lse0);
    free_ref(&r); free_prob(&p); free(pos); free(qdoc); free(kdoc);
}

// attn_merge edge cases: -inf on either side takes the other side, never NaN
static void test_merge_edges(void) {
    int nh = 2, hd = 3;
    float o1[6] = {1, 2, 3, 0, 0, 0}, l1[2] = {0.5f, -INFINITY};
    float o2[6] = {0, 0, 0, 4, 5, 6}, l2[2] = {-INFINITY, 1.5f};
    attn_merge(o1, l1, o2, l2, 1, nh, hd);
    int ok = l1[0] == 0.5f && l1[1] == 1.5f && o1[0] == 1 && o1[1] == 2 && o1[2] == 3 &&
             o1[3] == 4 && o1[4] == 5 && o1[5] == 6;
    float o3[3] = {0, 0, 0}, l3[1] = {-INFINITY}, o4[3] = {0, 0, 0}, l4[1] = {-INFINITY};
    attn_merge(o3, l3, o4, l4, 1, 1, 3);
    ok = ok && isinf(l3[0]) && l3[0] < 0 && o3[0] == 0 && o3[1] == 0 && o3[2] == 0;
    // equal lse: weights 1/2 each
    float o5[1] = {2}, l5[1] = {1.0f}, o6[1] = {4}, l6[1] = {1.0f};
    attn_merge(o5, l5, o6, l6, 1, 1, 1);
    ok = ok && fabsf(o5[0] - 3.0f) < 1e-6f && fabsf(l5[0] - (1.0f + logf(2.0f))) < 1e-6f;
    // very different lse: no overflow
    float o7[1] = {1}, l7[1] = {-500.0f}, o8[1] = {2}, l8[1] = {500.0f};
    attn_merge(o7, l7, o8, l8, 1, 1, 1);
    ok = ok && o7[0] == 2.0f && l7[0] == 500.0f;
    CHECK(ok, "attn_merge edge cases (-inf sides, equal lse, far apart lse)");
}

// two runs give bit-identical results; also with a different thread count
static void test_determinism(void) {
    int T = 333, nh = 6, nkv = 2, hd = 40;
    int* pos = range_pos(T, 0);
    Prob p = make_prob(T, T, nh, nkv, hd, ATTN_MASK_CAUSAL, pos, pos);
    int cuts[3] = {0, 130, T}, order[2] = {1, 0};
    long nq = (long)T * nh * hd, nk = (long)T * nkv * hd;
    float* keep[5]; long sizes[5] = {nq, (long)T * nh, nq, nk, nk};
    run_split(&p, cuts, 2, order);
    float* now[5] = {p.out, p.lse, p.dq, p.dk, p.dv};
    for (int a = 0; a < 5; a++) { keep[a] = zeros_f(sizes[a]); memcpy(keep[a], now[a], sizes[a] * sizeof(float)); }
    int same = 1;
    run_split(&p, cuts, 2, order);
    for (int a = 0; a < 5; a++) same = same && !memcmp(keep[a], now[a], sizes[a] * sizeof(float));
    CHECK(same, "determinism: two runs bit-identical");
    int nt = omp_get_max_threads();
    omp_set_num_threads(nt > 1 ? 1 : 2);
    run_split(&p, cuts, 2, order);
    omp_set_num_threads(nt);
    same = 1;
    for (int a = 0; a < 5; a++) same = same && !memcmp(keep[a], now[a], sizes[a] * sizeof(float));
    CHECK(same, "determinism: bit-identical with a different thread count");
    for (int a = 0; a < 5; a++) free(keep[a]);
    free_prob(&p); free(pos);
}

int main(void) {
    char err[256];
    if (be_init(0, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    attn_init(64);
    // whole-sequence, one block: ragged sizes x GQA x head dims, causal and full
    struct { int Tq, Tk, nh, nkv, hd; } cases[] = {
        {1, 1, 4, 4, 32}, {7, 7, 6, 2, 24}, {65, 65, 8, 1, 40}, {200, 200, 6, 2, 32}, {333, 333, 4, 4, 64},
        {333, 333, 8, 1, 24}, {129, 129, 6, 2, 64}, {256, 256, 4, 4, 32},
        {65, 200, 6, 2, 40}, {333, 100, 4, 4, 32}, {100, 333, 8, 1, 32}, {7, 300, 6, 2, 24},
        {100, 100, 24, 1, 16},   // 24 heads per kv head: more than one head stack per group
        {70, 90, 4, 2, 96},      // hd above what attn_init planned: scratch grows lazily
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int mask = 0; mask < 2; mask++)
            test_whole(cases[c].Tq, cases[c].Tk, cases[c].nh, cases[c].nkv, cases[c].hd, mask);

    // key splits at ragged points, blocks in either order, also via attn_merge
    int cuts2[3] = {0, 150, 333}, o01[2] = {0, 1}, o10[2] = {1, 0};
    int cuts3[4] = {0, 1, 200, 333}, o012[3] = {0, 1, 2}, o201[3] = {2, 0, 1};
    for (int mask = 0; mask < 2; mask++) {
        test_split(333, 6, 2, 40, mask, cuts2, 2, o01);
        test_split(333, 6, 2, 40, mask, cuts2, 2, o10);
        test_split(333, 8, 1, 32, mask, cuts3, 3, o012);
        test_split(333, 4, 4, 24, mask, cuts3, 3, o201);
    }

    test_query_chunks(333, 6, 2, 32, 100, 170);
    test_query_chunks(300, 8, 1, 24, 64, 129);
    test_zigzag(6, 2, 32);
    test_zigzag(4, 4, 24);
    test_shuffled(200, 6, 2, 40);
    test_shuffled(333, 8, 1, 32);
    for (int restart = 0; restart < 2; restart++) {
        test_docs(300, 6, 2, 32, restart, ATTN_MASK_CAUSAL);
        test_docs(333, 8, 1, 24, restart, ATTN_MASK_CAUSAL);
    }
    test_docs(300, 4, 4, 40, 0, ATTN_MASK_NONE);
    test_docs(260, 24, 1, 16, 1, ATTN_MASK_CAUSAL);   // more than one head stack per group
    test_docs_unsorted(200, 6, 2, 32);
    test_docs_empty(6, 2, 32);
    test_docs_empty(4, 4, 24);
    test_merge_edges();
    test_determinism();
    return tu_finish();
}
