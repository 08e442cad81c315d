// mpi_ring.c — ring attention (attention/ring.h) over the MPI world, against single-process references.
//
// Run: OMP_NUM_THREADS=1 mpirun --oversubscribe -np P build/tests/mpi_ring   (any P >= 1; tests/test_ring_attention.sh
// runs P = 2, 3, 4, 8). Every rank generates the same full-sequence q, k, v, dout from a seed and the same two
// references on the whole sequence with positions 0..T-1:
//   kernel: attn_forward_begin + attn_block_forward(CAUSAL), attn_backward_begin + attn_block_backward (fp32);
//   naive:  full softmax per row over keys j <= i with analytic gradients in double (the rows are shared out
//           over the ranks and summed over the ranks, so its cost is split P ways);
// the kernel reference is itself checked against the naive one. Then each rank takes its rows (ring_positions)
// and runs ring forward / backward for both layouts, B = 1 and B = 2 (sequence 1 has other random data, and its
// rows are those of the other layout with positions shifted by T, which catches mixed-up sequence indexing), and
// compares out, lse, dq, dk, dv with both references: max |diff| / max |ref| <= 1e-5 over all ranks (lse:
// |diff| <= 1e-5 * max(1, |ref|)). Also: the layouts' positions, forward/backward determinism, ring statistics
// (kernel calls, transfer count, timers) and work skipping (kernel calls per call and rank from the zigzag /
// contiguous rule).
// With --docs: document masking instead — every sequence is packed with documents (ids and, in one variant,
// positions restarted at each document), both references mask keys of other documents, and the sequences put a
// document across ranks, a rank's tokens all into one document's tail (zigzag: rank P-1's two chunks; contiguous:
// the last chunk) and document boundaries exactly at chunk boundaries; on top of the checks above, the ring's
// decision per (query segment, key segment) pair — skipped / unmasked / masked — is counted on every rank and
// equals a brute-force count over the elements of each pair (tests/test_docmask.sh runs P = 1, 2, 4).
// Every check is collective (values reduced over the ranks); only rank 0 prints. Every rank exits non-zero
// when any check failed.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backend/attention.h"
#include "attention/ring.h"
#include "comm/comm.h"
#include "comm/grid.h"
#include "backend/backend.h"
#include "common/util.h"
#include "tests/testutil.h"

#define TOL 1e-5

static const Group* W;
static int P, RK;   // world size, this rank

// a check whose condition is already reduced over the ranks (identical everywhere); only rank 0 prints
#define RCHECK(cond, ...) do { int c_ = (cond); if (RK == 0) CHECK(c_, __VA_ARGS__); } while (0)
static int all_ok(int ok) { return ctl_max(W, ok ? 0.0 : 1.0) == 0.0; }   // collective AND

// ---------------------------------------------------------------------------------------------------------
// deterministic data (identical on every rank)

static uint64_t rng;
static float frand(void) {   // splitmix64 -> uniform in [-1, 1)
    uint64_t z = mix64(rng);
    rng += 0x9E3779B97F4A7C15ULL;
    return (float)((double)(z >> 40) / 8388608.0 - 1.0);
}
static float* rand_floats(size_t n, float amp) {
    float* x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = amp * frand();
    return x;
}
static void* dev_from(const void* host, size_t bytes) { void* d = be_alloc(bytes); be_upload(d, host, bytes); return d; }

typedef struct { const char* name; int nh, nkv, hd, c; } Case;   // T = 2 P c

typedef struct {   // one full sequence: inputs and both references (host)
    int T, nh, nkv, hd;
    float scale;
    int *pos, *doc;                          // [T] attention positions (0..T-1, or restarted per document) and
                                             // document ids (NULL: no document masking), in sequence order
    float *q, *k, *v, *dout;                 // [T, nh*hd] / [T, nkv*hd]
    float *out, *lse, *dq, *dk, *dv;         // kernel reference
    double *nout, *nlse, *ndq, *ndk, *ndv;   // naive double reference
} Seq;

// kernel reference: attn_* on the whole sequence, its positions and documents, in one process (the caller picks which)
static void kernel_reference(Seq* s) {
    int T = s->T, Cq = s->nh * s->hd, Ck = s->nkv * s->hd;
    size_t nq = (size_t)T * Cq, nk = (size_t)T * Ck, nl = (size_t)T * s->nh;
    int* d_pos = dev_from(s->pos, T * sizeof(int));
    int* d_doc = s->doc ? dev_from(s->doc, T * sizeof(int)) : NULL;
    float *q = dev_from(s->q, nq * 4), *k = dev_from(s->k, nk * 4), *v = dev_from(s->v, nk * 4);
    float *dout = dev_from(s->dout, nq * 4);
    float *out = be_alloc(nq * 4), *lse = be_alloc(nl * 4), *D = be_alloc(nl * 4);
    float *dq = be_alloc(nq * 4), *dk = be_alloc(nk * 4), *dv = be_alloc(nk * 4);
    attn_forward_begin(out, lse, T, s->nh, s->hd);
    attn_block_forward(out, lse, q, d_pos, d_doc, T, k, v, d_pos, d_doc, T, s->nh, s->nkv, s->hd, s->scale, ATTN_MASK_CAUSAL);
    attn_backward_begin(D, dout, out, T, s->nh, s->hd);
    be_zero(dq, nq * 4); be_zero(dk, nk * 4); be_zero(dv, nk * 4);
    attn_block_backward(dq, dk, dv, dout, q, lse, D, d_pos, d_doc, T, k, v, d_pos, d_doc, T, s->nh, s->nkv, s->hd,
                        s->scale, ATTN_MASK_CAUSAL);
    be_download(s->out, out, nq * 4); be_download(s->lse, lse, nl * 4); be_download(s->dq, dq, nq * 4);
    be_download(s->dk, dk, nk * 4); be_download(s->dv, dv, nk * 4);
    be_free(d_pos); be_free(q); be_free(k); be_free(v); be_free(dout); be_free(out); be_free(lse); be_free(D);
    be_free(dq); be_free(dk); be_free(dv);
    if (d_doc) be_free(d_doc);
}
static void kernel_reference_bcast(Seq* s, int owner) {
    size_t nq = (size_t)s->T * s->nh * s->hd, nk = (size_t)s->T * s->nkv * s->hd, nl = (size_t)s->T * s->nh;
    ctl_bcast(W, s->out, nq * 4, owner); ctl_bcast(W, s->lse, nl * 4, owner);
    ctl_bcast(W, s->dq, nq * 4, owner); ctl_bcast(W, s->dk, nk * 4, owner);
    ctl_bcast(W, s->dv, nk * 4, owner);
}

// naive reference: rank RK does the query rows i = RK mod P; the partial results are summed over the ranks
static void naive_reference(Seq* s) {
    int T = s->T, nh = s->nh, hd = s->hd, Cq = nh * hd, Ck = s->nkv * hd, grp = nh / s->nkv;
    size_t nq = (size_t)T * Cq, nk = (size_t)T * Ck, nl = (size_t)T * nh;
    double* all = calloc(2 * nq + nl + 2 * nk, sizeof(double));
    s->nout = all; s->ndq = all + nq; s->nlse = all + 2 * nq; s->ndk = all + 2 * nq + nl; s->ndv = s->ndk + nk;
    double *kd = malloc(nk * sizeof(double)), *vd = malloc(nk * sizeof(double));   // exact double copies
    for (size_t i = 0; i < nk; i++) { kd[i] = s->k[i]; vd[i] = s->v[i]; }
    double *sc = malloc(T * sizeof(double)), *o = malloc(hd * sizeof(double));
    double *qi = malloc(hd * sizeof(double)), *doi = malloc(hd * sizeof(double));
    for (int i = RK; i < T; i += P)
        for (int h = 0; h < nh; h++) {
            int g = h / grp;
            for (int d = 0; d < hd; d++) { qi[d] = s->q[(size_t)i * Cq + h * hd + d]; doi[d] = s->dout[(size_t)i * Cq + h * hd + d]; }
            double mx = -INFINITY;
            for (int j = 0; j <= i; j++) {   // logits of the visible keys j <= i (of the same document)
                if (s->doc && s->doc[j] != s->doc[i]) continue;
                const double* kj = kd + (size_t)j * Ck + g * hd;
                double a = 0;
                #pragma omp simd reduction(+:a)
                for (int d = 0; d < hd; d++) a += qi[d] * kj[d];
                sc[j] = s->scale * a;
                if (sc[j] > mx) mx = sc[j];
            }
            double z = 0;
            for (int j = 0; j <= i; j++) if (!s->doc || s->doc[j] == s->doc[i]) z += exp(sc[j] - mx);
            double lse = mx + log(z);
            s->nlse[(size_t)i * nh + h] = lse;
            for (int d = 0; d < hd; d++) o[d] = 0;
            for (int j = 0; j <= i; j++) {
                if (s->doc && s->doc[j] != s->doc[i]) continue;
                double p = sc[j] = exp(sc[j] - lse);   // now the probability P_ij
                const double* vj = vd + (size_t)j * Ck + g * hd;
                #pragma omp simd
                for (int d = 0; d < hd; d++) o[d] += p * vj[d];
            }
            double D = 0;   // D_i = dout_i . out_i;  dS_ij = P_ij (dout_i . v_j - D_i)
            for (int d = 0; d < hd; d++) { s->nout[(size_t)i * Cq + h * hd + d] = o[d]; D += doi[d] * o[d]; }
            double* dqi = s->ndq + (size_t)i * Cq + h * hd;
            for (int j = 0; j <= i; j++) {
                if (s->doc && s->doc[j] != s->doc[i]) continue;
                const double *vj = vd + (size_t)j * Ck + g * hd, *kj = kd + (size_t)j * Ck + g * hd;
                double dp = 0;
                #pragma omp simd reduction(+:dp)
                for (int d = 0; d < hd; d++) dp += doi[d] * vj[d];
                double ds = s->scale * sc[j] * (dp - D), p = sc[j];
                double *dkj = s->ndk + (size_t)j * Ck + g * hd, *dvj = s->ndv + (size_t)j * Ck + g * hd;
                #pragma omp simd
                for (int d = 0; d < hd; d++) { dqi[d] += ds * kj[d]; dkj[d] += ds * qi[d]; dvj[d] += p * doi[d]; }
            }
        }
    ctl_sum_f64(W, all, 2 * nq + nl + 2 * nk);
    free(kd); free(vd); free(sc); free(o); free(qi); free(doi);
}

// the two sequences of a case (identical on every rank) and their references. The kernel reference of sequence
// b is computed by rank b mod P alone (the two run concurrently) and broadcast, rather than redundantly on
// every rank of an oversubscribed machine.
static double t_kref, t_nref;   // time in the kernel / naive references

// document structures (--docs): the starts of the documents of a sequence of T = 2 P c tokens
enum { DOCS_NONE, DOCS_TAIL, DOCS_CHUNKS, DOCS_TAIL_RESTART };
static const char* docs_name[] = { "", " docs(tail)", " docs(chunk edges)", " docs(tail, restarted positions)" };
static int doc_starts(int docs, int layout, int c, int* st) {
    int T = 2 * P * c, n = 0;
    st[n++] = 0;
    if (docs == DOCS_CHUNKS) {   // a start exactly at every odd chunk boundary of the zigzag cut, one inside chunk 0
        if (c > 2) st[n++] = c / 2;
        for (int k = 1; k < 2 * P; k += 2) st[n++] = k * c;
        return n;
    }
    // DOCS_TAIL: the tokens [L, E) of rank P-1 all lie in a document that starts before L (on another rank) and
    // ends at E (a chunk boundary); two more documents follow (and one more for P = 1, at the chunk edge c)
    int L = layout == CP_ZIGZAG ? (P - 1) * c : 2 * (P - 1) * c, E = layout == CP_ZIGZAG ? (P + 1) * c : T;
    st[n++] = 3;
    if (L - 4 > 3) st[n++] = L - 4;
    if (P == 1) st[n++] = c;
    if (E < T) st[n++] = E;
    if (E + 5 < T) st[n++] = E + 5;
    return n;
}

static void make_seqs(Seq* seq, const Case* c, int T, uint64_t seed, int docs, int layout) {
    size_t nq = (size_t)T * c->nh * c->hd, nk = (size_t)T * c->nkv * c->hd, nl = (size_t)T * c->nh;
    int st[64], ns = docs ? doc_starts(docs, layout, c->c, st) : 0;
    for (int b = 0; b < 2; b++) {
        Seq s = { .T = T, .nh = c->nh, .nkv = c->nkv, .hd = c->hd, .scale = 1.0f / sqrtf((float)c->hd) };
        s.pos = malloc(T * sizeof(int));
        s.doc = docs ? malloc(T * sizeof(int)) : NULL;
        for (int i = 0, d = -1; i < T; i++) {
            while (d + 1 < ns && st[d + 1] <= i) d++;
            s.pos[i] = docs == DOCS_TAIL_RESTART ? i - st[d] : i;
            if (docs) s.doc[i] = d;
        }
        rng = seed + 7919 * b;
        s.q = rand_floats(nq, 2.0f);
        s.k = rand_floats(nk, 2.0f);
        s.v = rand_floats(nk, 1.0f);
        s.dout = rand_floats(nq, 1.0f);
        s.out = malloc(nq * 4); s.lse = malloc(nl * 4); s.dq = malloc(nq * 4); s.dk = malloc(nk * 4); s.dv = malloc(nk * 4);
        seq[b] = s;
    }
    double t0 = now_s();
    for (int b = 0; b < 2; b++) if (RK == b % P) kernel_reference(&seq[b]);
    for (int b = 0; b < 2; b++) kernel_reference_bcast(&seq[b], b % P);
    double t1 = now_s();
    for (int b = 0; b < 2; b++) naive_reference(&seq[b]);
    t_kref += t1 - t0; t_nref += now_s() - t1;
}
static void free_seq(Seq* s) {
    free(s->pos); free(s->doc);
    free(s->q); free(s->k); free(s->v); free(s->dout);
    free(s->out); free(s->lse); free(s->dq); free(s->dk); free(s->dv); free(s->nout);
}

// ---------------------------------------------------------------------------------------------------------
// error accumulation: tensors out, lse, dq, dk, dv against the kernel (0) and naive (1) reference

enum { E_OUT, E_LSE, E_DQ, E_DK, E_DV, NT };
static const char* tname[NT] = { "out", "lse", "dq", "dk", "dv" };
typedef struct { double md[NT][2], mr[NT][2]; } Err;   // max |diff| and max |ref| (lse: max scaled diff)

static void upd(double* md, double* mr, double a, double ref, int is_lse) {
    double d = fabs(a - ref);
    if (is_lse) d /= fmax(1.0, fabs(ref));
    if (!(d <= *md)) *md = isnan(d) ? INFINITY : d;   // NaN counts as failure
    if (fabs(ref) > *mr) *mr = fabs(ref);
}
// rows[n] of a (row-major, width w) against rows idx[n] of the references
static void acc_rows(Err* e, int t, const float* a, const int* idx, int n, int w, const float* kref, const double* nref) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < w; j++) {
            size_t ra = (size_t)i * w + j, rr = (size_t)idx[i] * w + j;
            upd(&e->md[t][0], &e->mr[t][0], a[ra], kref[rr], t == E_LSE);
            upd(&e->md[t][1], &e->mr[t][1], a[ra], nref[rr], t == E_LSE);
        }
}
static double err_of(const Err* e, int t, int r) {   // collective
    double md = ctl_max(W, e->md[t][r]), mr = ctl_max(W, e->mr[t][r]);
    return t == E_LSE ? md : md / (mr + 1e-30);
}
static void check_err(const Err* e, const char* what) {
    for (int t = 0; t < NT; t++) {
        double k = err_of(e, t, 0), n = err_of(e, t, 1);
        RCHECK(k <= TOL && n <= TOL, "%s %-3s: err vs kernel ref %.1e, vs naive ref %.1e", what, tname[t], k, n);
    }
}

// ---------------------------------------------------------------------------------------------------------
// positions

static void check_positions(int T) {
    int Tl = T / P, c = T / (2 * P);
    int* pos = malloc(Tl * sizeof(int));
    int* all = malloc((size_t)T * sizeof(int));
    for (int layout = 0; layout < 2; layout++) {
        ring_positions(layout, P, RK, T, pos);
        int ok = 1;   // rank r holds chunks r and 2P-1-r of 2P (zigzag), chunk r of P (contiguous), each in order
        for (int i = 0; i < Tl; i++) {
            int want = layout == CP_ZIGZAG ? (i < c ? RK * c + i : (2 * P - 1 - RK) * c + (i - c)) : RK * Tl + i;
            if (pos[i] != want) ok = 0;
        }
        ctl_allgather(W, pos, all, Tl * sizeof(int));
        char* seen = calloc(T, 1);
        int perm = 1;
        for (int i = 0; i < T; i++) {
            if (all[i] < 0 || all[i] >= T || seen[all[i]]) { perm = 0; break; }
            seen[all[i]] = 1;
        }
        free(seen);
        ok = all_ok(ok);
        RCHECK(ok && perm, "positions %-10s T=%d: a permutation of 0..T-1, rank r holds %s", layout ? "contiguous" : "zigzag",
               T, layout ? "chunk r of P" : "chunks r and 2P-1-r of 2P");
    }
    free(pos); free(all);
}

// ---------------------------------------------------------------------------------------------------------
// one ring run: a case, a layout, B sequences

static long long expected_blocks(int layout, int c) {   // kernel calls of one forward (or backward) on this rank
    int seg = layout == CP_ZIGZAG ? c : 2 * c;
    long long pairs = layout == CP_ZIGZAG ? 3 + 2LL * (P - 1) : 1 + RK;
    int qrows = be_tuning()->ring_query_rows;
    return pairs * ((seg + qrows - 1) / qrows);
}

// --docs: the ring's decisions for one forward call on this rank, counted by brute force over the elements of each
// (query segment, key segment) pair: none visible = skipped, all visible = unmasked, else masked
static void brute_pairs(const Seq* s, const int* rows_all, int layout, int T, long long want[3]) {
    int Tl = T / P, nseg = layout == CP_ZIGZAG ? 2 : 1, seg = Tl / nseg;
    want[0] = want[1] = want[2] = 0;
    for (int t = 0; t < P; t++) {
        int src = (RK - t + P) % P;
        for (int a = 0; a < nseg; a++)
            for (int b = 0; b < nseg; b++) {
                long long vis = 0;
                for (int i = 0; i < seg; i++)
                    for (int j = 0; j < seg; j++) {
                        int qi = rows_all[RK * Tl + a * seg + i], kj = rows_all[src * Tl + b * seg + j];
                        vis += kj <= qi && (!s->doc || s->doc[kj] == s->doc[qi]);
                    }
                want[vis == 0 ? 0 : vis == (long long)seg * seg ? 1 : 2]++;
            }
    }
}

static void run_ring(const Case* cs, int T, const Seq* seq, int layout, int B, int docs, double* fwd_s, double* bwd_s) {
    int nh = cs->nh, nkv = cs->nkv, hd = cs->hd, Tl = T / P, Cq = nh * hd, Ck = nkv * hd;
    size_t nq = (size_t)Tl * Cq, nk = (size_t)Tl * Ck, nl = (size_t)Tl * nh;
    const char* lname = layout == CP_ZIGZAG ? "zigzag" : "contiguous";
    char what[200];
    snprintf(what, sizeof what, "%s T=%d %-10s B=%d%s", cs->name, T, lname, B, docs_name[docs]);

    Ring R;
    ring_init(&R, W, layout, T, B, Ck, 0);
    // this rank's rows of each sequence: the layout's for sequence 0; sequence 1 takes the OTHER layout's rows
    // and positions row + T (positions are explicit: the ring must follow them, not assume its layout)
    // (document ids of sequence 1 are shifted by 100, so that mixing up the sequences' ids shows)
    int* rowsb = malloc((size_t)B * Tl * sizeof(int));
    int* lpos = malloc((size_t)B * Tl * sizeof(int));
    int* ldoc = malloc((size_t)B * Tl * sizeof(int));
    for (int b = 0; b < B; b++) {
        ring_positions(b ? 1 - layout : layout, P, RK, T, rowsb + (size_t)b * Tl);
        for (int i = 0; i < Tl; i++) {
            int row = rowsb[b * Tl + i];
            lpos[b * Tl + i] = seq[b].pos[row] + b * T;
            ldoc[b * Tl + i] = docs ? seq[b].doc[row] + 100 * b : 0;
        }
    }
    ring_set_positions(&R, lpos, docs ? ldoc : NULL);

    float *hq = malloc(nq * 4), *hk = malloc(nk * 4), *hv = malloc(nk * 4), *hdo = malloc(nq * 4);
    float *ho = malloc(nq * 4), *hl = malloc(nl * 4), *hdq = malloc(nq * 4), *hdk = malloc(nk * 4), *hdv = malloc(nk * 4);
    float *q = be_alloc(nq * 4), *k = be_alloc(nk * 4), *v = be_alloc(nk * 4), *dout = be_alloc(nq * 4);
    float *out = be_alloc(nq * 4), *lse = be_alloc(nl * 4), *D = be_alloc(nl * 4);
    float *dq = be_alloc(nq * 4), *dk = be_alloc(nk * 4), *dv = be_alloc(nk * 4);
    float *out2 = be_alloc(nq * 4), *lse2 = be_alloc(nl * 4), *dq2 = be_alloc(nq * 4), *dk2 = be_alloc(nk * 4),
          *dv2 = be_alloc(nk * 4);
    Err e;
    memset(&e, 0, sizeof e);
    long long nfwd = 0, nbwd = 0, fwd_blocks = -1, bwd_blocks = -1, fwd_pairs[3] = { 0, 0, 0 }, bwd_pairs[3] = { 0, 0, 0 };
    int det_ok = 1, det_tested = 0;
    for (int b = 0; b < B; b++) {
        const Seq* s = &seq[b];
        const int* rows = rowsb + (size_t)b * Tl;
        for (int i = 0; i < Tl; i++) {
            memcpy(hq + (size_t)i * Cq, s->q + (size_t)rows[i] * Cq, Cq * 4);
            memcpy(hdo + (size_t)i * Cq, s->dout + (size_t)rows[i] * Cq, Cq * 4);
            memcpy(hk + (size_t)i * Ck, s->k + (size_t)rows[i] * Ck, Ck * 4);
            memcpy(hv + (size_t)i * Ck, s->v + (size_t)rows[i] * Ck, Ck * 4);
        }
        be_upload(q, hq, nq * 4); be_upload(k, hk, nk * 4); be_upload(v, hv, nk * 4); be_upload(dout, hdo, nq * 4);

        ctl_barrier(W);
        double t0 = now_s();
        long long b0 = R.blocks, p0[3] = { R.pairs[0], R.pairs[1], R.pairs[2] };
        ring_attention_forward(&R, b, out, lse, q, k, v, nh, nkv, hd, s->scale);
        nfwd++;
        if (b == 0) { fwd_blocks = R.blocks - b0; for (int x = 0; x < 3; x++) fwd_pairs[x] = R.pairs[x] - p0[x]; }
        ctl_barrier(W);
        double t1 = now_s();
        attn_backward_begin(D, dout, out, Tl, nh, hd);
        b0 = R.blocks;
        for (int x = 0; x < 3; x++) p0[x] = R.pairs[x];
        ring_attention_backward(&R, b, dq, dk, dv, dout, q, k, v, lse, D, nh, nkv, hd, seq[b].scale);
        nbwd++;
        if (b == 0) { bwd_blocks = R.blocks - b0; for (int x = 0; x < 3; x++) bwd_pairs[x] = R.pairs[x] - p0[x]; }
        ctl_barrier(W);
        *fwd_s += t1 - t0; *bwd_s += now_s() - t1;

        be_download(ho, out, nq * 4); be_download(hl, lse, nl * 4);
        be_download(hdq, dq, nq * 4); be_download(hdk, dk, nk * 4); be_download(hdv, dv, nk * 4);
        acc_rows(&e, E_OUT, ho, rows, Tl, Cq, s->out, s->nout);
        acc_rows(&e, E_LSE, hl, rows, Tl, nh, s->lse, s->nlse);
        acc_rows(&e, E_DQ, hdq, rows, Tl, Cq, s->dq, s->ndq);
        acc_rows(&e, E_DK, hdk, rows, Tl, Ck, s->dk, s->ndk);
        acc_rows(&e, E_DV, hdv, rows, Tl, Ck, s->dv, s->ndv);

        if (b == B - 1) {   // determinism: the same call again gives bit-identical results
            det_tested = 1;
            ring_attention_forward(&R, b, out2, lse2, q, k, v, nh, nkv, hd, seq[b].scale);
            nfwd++;
            ring_attention_backward(&R, b, dq2, dk2, dv2, dout, q, k, v, lse2, D, nh, nkv, hd, seq[b].scale);
            nbwd++;
            float* h2 = malloc(nq * 4);
            be_download(h2, out2, nq * 4); det_ok &= !memcmp(h2, ho, nq * 4);
            be_download(h2, lse2, nl * 4); det_ok &= !memcmp(h2, hl, nl * 4);
            be_download(h2, dq2, nq * 4); det_ok &= !memcmp(h2, hdq, nq * 4);
            be_download(h2, dk2, nk * 4); det_ok &= !memcmp(h2, hdk, nk * 4);
            be_download(h2, dv2, nk * 4); det_ok &= !memcmp(h2, hdv, nk * 4);
            free(h2);
        }
    }
    check_err(&e, what);
    det_ok = all_ok(det_ok);
    RCHECK(det_tested && det_ok, "%s: forward + backward run twice are bit-identical (out, lse, dq, dk, dv)", what);

    // statistics: kernel calls, timers, and one transfer per ring hop of every call (forward: P-1 K/V hops; backward:
    // P waits, each for the K/V hop and/or the dK/dV hop) — whether or not the hop already completed while
    // computing: train.c takes transfers x xfer_s as the total communication when it reports the hidden fraction
    long long want_xfers = nfwd * (P - 1) + nbwd * (P > 1 ? P : 0);
    long long* xf = malloc(P * sizeof(long long));
    RingStats st = ring_stats(&R);
    ctl_gather(W, &st.transfers, xf, sizeof(long long), 0);
    int st_ok = all_ok(st.blocks == R.blocks && R.blocks > 0 && st.compute_s > 0 && st.work_s > 0 && st.wait_s >= 0 &&
                       st.exposed_s >= 0 && st.exposed_s <= st.wait_s + 1e-12 && (P == 1 || st.xfer_s > 0));
    int xf_ok = all_ok(st.transfers == want_xfers);
    if (RK == 0) {
        char list[512] = "";
        for (int i = 0, n = 0; i < P && n < (int)sizeof list - 24; i++)
            n += snprintf(list + n, sizeof list - n, i ? ",%lld" : "%lld", xf[i]);
        CHECK(st_ok, "%s: stats blocks %lld > 0, compute_s %.2g > 0, work_s %.2g > 0, 0 <= exposed_s <= wait_s, xfer_s %.2g",
              what, st.blocks, st.compute_s, st.work_s, st.xfer_s);
        CHECK(xf_ok, "%s: stats transfers = %lld fwd x (P-1) + %lld bwd x P = %lld on every rank (per rank: %s)", what,
              nfwd, nbwd, want_xfers, list);
    }
    free(xf);

    // --docs, work skipping: the pairs skipped / unmasked / masked by one forward and one backward call on each rank
    // equal the brute-force count (for the restarted positions too: the ring decides from the positions it is
    // given, which only keep the order inside a document, so there it must at least skip what is skipped above)
    if (B == 1 && docs) {
        int* rows_all = malloc((size_t)T * sizeof(int));
        ctl_allgather(W, rowsb, rows_all, Tl * sizeof(int));
        long long want[3];
        brute_pairs(&seq[0], rows_all, layout, T, want);
        free(rows_all);
        int qrows = be_tuning()->ring_query_rows, seg = layout == CP_ZIGZAG ? Tl / 2 : Tl;
        long long calls = (want[1] + want[2]) * ((seg + qrows - 1) / qrows);
        int same = 1;
        for (int x = 0; x < 3; x++) same &= fwd_pairs[x] == want[x] && bwd_pairs[x] == want[x];
        int ok = docs == DOCS_TAIL_RESTART ? fwd_pairs[0] <= want[0] && fwd_pairs[0] + fwd_pairs[1] + fwd_pairs[2] == want[0] + want[1] + want[2]
                                           : same && fwd_blocks == calls && bwd_blocks == calls;
        long long mine[3] = { fwd_pairs[0], fwd_pairs[1], fwd_pairs[2] }, *got = malloc(3 * P * sizeof(long long));
        ctl_gather(W, mine, got, sizeof mine, 0);
        long long skipped = 0;
        for (int i = 0; RK == 0 && i < P; i++) skipped += got[3 * i];
        ok = all_ok(ok);
        if (RK == 0) {
            char list[512] = "";
            for (int i = 0, n = 0; i < P && n < (int)sizeof list - 48; i++)
                n += snprintf(list + n, sizeof list - n, "%s%lld/%lld/%lld", i ? " " : "", got[3 * i], got[3 * i + 1], got[3 * i + 2]);
            CHECK(ok, "%s: segment pairs skipped/unmasked/masked per rank %s (%s brute force over the elements, fwd = bwd; "
                  "%lld skipped in all)", what, list, docs == DOCS_TAIL_RESTART ? "skips at most as many as" : "=", skipped);
        }
        free(got);
    }

    // work skipping: kernel calls of one forward and one backward call on each rank, from the layout's rule
    if (B == 1 && !docs) {
        long long want = expected_blocks(layout, cs->c);
        long long mine[2] = { fwd_blocks, bwd_blocks }, *got = malloc(2 * P * sizeof(long long));
        ctl_gather(W, mine, got, sizeof mine, 0);
        int ok = all_ok(fwd_blocks == want && bwd_blocks == want);
        if (RK == 0) {
            char list[512] = "";
            for (int i = 0, n = 0; i < P && n < (int)sizeof list - 48; i++)
                n += snprintf(list + n, sizeof list - n, "%s%lld/%lld", i ? " " : "", got[2 * i], got[2 * i + 1]);
            CHECK(ok, "%s: kernel calls per fwd/bwd call = %s x ceil(%d/%d) on rank r (per rank: %s)", what,
                  layout == CP_ZIGZAG ? "(3 + 2(P-1)) pairs" : "(1 + r) pairs", layout == CP_ZIGZAG ? cs->c : 2 * cs->c,
                  be_tuning()->ring_query_rows, list);
        }
        free(got);
    }

    ring_free(&R);
    free(rowsb); free(lpos); free(ldoc);
    free(hq); free(hk); free(hv); free(hdo); free(ho); free(hl); free(hdq); free(hdk); free(hdv);
    be_free(q); be_free(k); be_free(v); be_free(dout); be_free(out); be_free(lse); be_free(D);
    be_free(dq); be_free(dk); be_free(dv); be_free(out2); be_free(lse2); be_free(dq2); be_free(dk2); be_free(dv2);
}

// ---------------------------------------------------------------------------------------------------------

int main(int argc, char** argv) {
    grid_mpi_init(&argc, &argv);
    W = group_world();
    P = group_size(W); RK = group_rank(W);
    char err[256];
    if (be_init(0, err, sizeof err)) { fprintf(stderr, "%s\n", err); grid_exit(1); }
    int docs_mode = argc > 1 && !strcmp(argv[1], "--docs");
    if (RK == 0) { printf("mpi_ring: P = %d ranks%s\n", P, docs_mode ? ", document masking" : ""); fflush(stdout); }
    attn_init(32);

    static const Case cases[] = {
        { "GQA nh=6 nkv=2 hd=24", 6, 2, 24, 37 },    // odd head dim, chunks not a multiple of any tile
        { "MHA nh=4 nkv=4 hd=32", 4, 4, 32, 64 },
        { "MQA nh=8 nkv=1 hd=16", 8, 1, 16, 5 },     // tiny chunks
        { "GQA nh=4 nkv=2 hd=32", 4, 2, 32, 130 },   // several kernel tiles per chunk; contiguous: 2 query chunks
    };
    double t_ref = 0, t_fwd = 0, t_bwd = 0;
    // --docs: two of the cases (odd chunks; several kernel tiles per chunk) x the document structures x layouts
    int ncase = docs_mode ? 2 : (int)(sizeof cases / sizeof cases[0]), nrun = docs_mode ? 6 : 1;
    for (int run = 0; run < ncase * nrun; run++) {
        int ci = docs_mode ? (run / nrun ? 3 : 0) : run, docs = docs_mode ? 1 + run % nrun / 2 : DOCS_NONE;
        int dlayout = docs_mode ? run % 2 : -1;   // --docs: the layout the document structure is made for
        const Case* cs = &cases[ci];
        int T = 2 * P * cs->c;
        if (!docs_mode) check_positions(T);
        double t0 = now_s();
        Seq seq[2];
        make_seqs(seq, cs, T, 1000 + 17 * ci, docs, dlayout < 0 ? 0 : dlayout);
        t_ref += now_s() - t0;
        // the kernel reference against the naive one (identical on every rank)
        for (int b = 0; b < 2; b++) {
            Err e;
            memset(&e, 0, sizeof e);
            int *id = malloc(T * sizeof(int)), Cq = cs->nh * cs->hd, Ck = cs->nkv * cs->hd;
            for (int i = 0; i < T; i++) id[i] = i;
            acc_rows(&e, E_OUT, seq[b].out, id, T, Cq, seq[b].out, seq[b].nout);
            acc_rows(&e, E_LSE, seq[b].lse, id, T, cs->nh, seq[b].lse, seq[b].nlse);
            acc_rows(&e, E_DQ, seq[b].dq, id, T, Cq, seq[b].dq, seq[b].ndq);
            acc_rows(&e, E_DK, seq[b].dk, id, T, Ck, seq[b].dk, seq[b].ndk);
            acc_rows(&e, E_DV, seq[b].dv, id, T, Ck, seq[b].dv, seq[b].ndv);
            double worst = 0;
            for (int t = 0; t < NT; t++) { double x = err_of(&e, t, 1); if (!(x <= worst)) worst = x; }
            RCHECK(worst <= TOL, "%s T=%d seq %d%s: single-process kernel reference vs naive double: max err %.1e",
                   cs->name, T, b, docs_name[docs], worst);
            free(id);
        }
        for (int layout = 0; layout < 2; layout++)
            for (int B = 1; B <= 2; B++)
                if (dlayout < 0 || layout == dlayout) run_ring(cs, T, seq, layout, B, docs, &t_fwd, &t_bwd);
        for (int b = 0; b < 2; b++) free_seq(&seq[b]);
    }
    if (RK == 0) printf("time (rank 0): references %.2fs (kernel %.2fs, naive %.2fs), ring forward %.2fs, ring backward %.2fs\n",
                       t_ref, t_kref, t_nref, t_fwd, t_bwd);

    int failed = RK == 0 ? tu_failed : 0;
    ctl_bcast(W, &failed, sizeof failed, 0);
    if (RK == 0) { tu_finish(); fflush(stdout); }
    grid_exit(failed ? 1 : 0);
}
