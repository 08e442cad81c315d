// verify.c — ring attention versus one-process attention on the same inputs (see verify.h).
#include "model/verify.h"
#include "backend/backend.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The tensors of one attention check, in backend memory: inputs q, k, v, dout; results out, dq, dk, dv;
// the per-row lse and D. T rows; wq = query-head columns, wk = the one KV head's columns.
enum { Q, DOUT, K, V, OUT, DQ, DK, DV, NFIELD };   // the gathered fields, inputs first
typedef struct { float* f[NFIELD]; float *lse, *D; int *pos, *doc; int T, wq, wk, nq; } AttnSet;

static int width(const AttnSet* s, int f) { return f == K || f == V || f == DK || f == DV ? s->wk : s->wq; }

static void set_alloc(AttnSet* s, int T, int nq, int hd) {
    memset(s, 0, sizeof *s);
    s->T = T; s->nq = nq; s->wq = nq * hd; s->wk = hd;
    for (int f = 0; f < NFIELD; f++) s->f[f] = be_alloc((size_t)T * width(s, f) * sizeof(float));
    s->lse = be_alloc((size_t)T * nq * sizeof(float));
    s->D = be_alloc((size_t)T * nq * sizeof(float));
    s->pos = be_alloc((size_t)T * sizeof(int));
    s->doc = be_alloc((size_t)T * sizeof(int));
}
static void set_free(AttnSet* s) {
    for (int f = 0; f < NFIELD; f++) be_free(s->f[f]);
    be_free(s->lse); be_free(s->D); be_free(s->pos); be_free(s->doc);
}

// columns [0, w) of a backend [n, ld] matrix into host [n, w]
static void take_cols(float* dst, const float* src, int n, int ld, int w) {
    float* all = malloc((size_t)n * ld * sizeof(float));
    be_download(all, src, (size_t)n * ld * sizeof(float));
    for (int i = 0; i < n; i++) memcpy(dst + (size_t)i * w, all + (size_t)i * ld, (size_t)w * sizeof(float));
    free(all);
}

// largest |a - ref| and largest |ref| over n elements (NaN counts as the largest difference)
static void diff(const float* a, const float* ref, size_t n, double* max_abs, double* max_ref) {
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= *max_abs)) *max_abs = d;
        if (fabs(ref[i]) > *max_ref) *max_ref = fabs(ref[i]);
    }
}

// on the ring's first rank: the whole sequence in order (host fields [T, width], rows in position order),
// attention recomputed in one process with the positions and document ids (NULL: none) the ring saw, in
// sequence order; returns the worst relative difference of out, dq, dk, dv
static void one_process(float* const* seq, const int* pos, const int* doc, int T, int nq, int hd, float scale,
                        double* max_abs, double* max_rel) {
    AttnSet r;
    set_alloc(&r, T, nq, hd);
    be_upload(r.pos, pos, (size_t)T * sizeof(int));
    if (doc) be_upload(r.doc, doc, (size_t)T * sizeof(int));
    const int* d = doc ? r.doc : NULL;
    for (int f = Q; f <= V; f++) be_upload(r.f[f], seq[f], (size_t)T * width(&r, f) * sizeof(float));
    attn_forward_begin(r.f[OUT], r.lse, T, nq, hd);
    attn_block_forward(r.f[OUT], r.lse, r.f[Q], r.pos, d, T, r.f[K], r.f[V], r.pos, d, T, nq, 1, hd, scale, ATTN_MASK_CAUSAL);
    attn_backward_begin(r.D, r.f[DOUT], r.f[OUT], T, nq, hd);
    attn_block_backward(r.f[DQ], r.f[DK], r.f[DV], r.f[DOUT], r.f[Q], r.lse, r.D, r.pos, d, T, r.f[K], r.f[V], r.pos, d, T,
                        nq, 1, hd, scale, ATTN_MASK_CAUSAL);
    float* ref = malloc((size_t)T * r.wq * sizeof(float));
    *max_abs = 0; *max_rel = 0;
    for (int f = OUT; f <= DV; f++) {
        size_t n = (size_t)T * width(&r, f);
        double ma = 0, mr = 0;
        be_download(ref, r.f[f], n * sizeof(float));
        diff(seq[f], ref, n, &ma, &mr);
        if (ma > *max_abs) *max_abs = ma;
        double rel = ma / (mr + 1e-30);
        if (!(rel <= *max_rel)) *max_rel = rel;
    }
    free(ref);
    set_free(&r);
}

VerifyResult model_verify_attention(Model* m, const Group* world, int step) {
    VerifyResult res = { .checked = 1 };
    Ring* R = &m->ring;
    int Tl = R->Tl, P = R->P, T = Tl * P, hd = m->hd;   // the ring's side: with an all-to-all, its group's tokens
    int group = m->nh_at / m->nkv_at, nq = group < 4 ? group : 4;   // query heads of KV head 0
    float scale = 1.0f / sqrtf((float)hd);
    model_attention_inputs(m, 0);
    LayerActs* a = &m->acts[0];
    AttnSet s;
    set_alloc(&s, Tl, nq, hd);
    float* host[NFIELD];
    for (int f = 0; f < NFIELD; f++) host[f] = malloc((size_t)Tl * width(&s, f) * sizeof(float));
    const int* pos = R->pos_host + (size_t)R->r * R->B * Tl;   // this rank's tokens of the first sequence
    // this rank's inputs: layer 0's q, k, v (first heads) and a seeded upstream gradient
    take_cols(host[Q], a->q, Tl, m->nh_at * hd, s.wq);
    take_cols(host[K], a->k, Tl, m->nkv_at * hd, s.wk);
    take_cols(host[V], a->v, Tl, m->nkv_at * hd, s.wk);
    for (int i = 0; i < Tl; i++)
        for (int j = 0; j < s.wq; j++)
            host[DOUT][(size_t)i * s.wq + j] = (float)params_normal((uint64_t)step, "verify_attention", (uint64_t)pos[i] * s.wq + j);
    for (int f = Q; f <= V; f++) be_upload(s.f[f], host[f], (size_t)Tl * width(&s, f) * sizeof(float));
    ring_attention_forward(R, 0, s.f[OUT], s.lse, s.f[Q], s.f[K], s.f[V], nq, 1, hd, scale);
    attn_backward_begin(s.D, s.f[DOUT], s.f[OUT], Tl, nq, hd);
    ring_attention_backward(R, 0, s.f[DQ], s.f[DK], s.f[DV], s.f[DOUT], s.f[Q], s.f[K], s.f[V], s.lse, s.D, nq, 1, hd, scale);
    for (int f = OUT; f <= DV; f++) be_download(host[f], s.f[f], (size_t)Tl * width(&s, f) * sizeof(float));

    // everything to the ring's first rank, put in sequence order by the gathered positions
    int root = R->r == 0;
    int* allpos = root ? malloc((size_t)T * sizeof(int)) : NULL;
    ctl_gather(R->g, pos, allpos, (size_t)Tl * sizeof(int), 0);
    double stats[2] = { 0, 0 };
    float* seq[NFIELD];
    for (int f = 0; f < NFIELD; f++) {
        size_t w = width(&s, f), row = w * sizeof(float);
        float* all = root ? malloc((size_t)T * row) : NULL;
        ctl_gather(R->g, host[f], all, (size_t)Tl * row, 0);
        seq[f] = root ? malloc((size_t)T * row) : NULL;
        for (int i = 0; root && i < T; i++) memcpy(seq[f] + (size_t)allpos[i] * w, all + (size_t)i * w, row);
        free(all);
    }
    if (root) {   // the positions and document ids the ring used (sequence 0 of each rank), in sequence order
        int *apos = malloc((size_t)T * sizeof(int)), *adoc = R->docs ? malloc((size_t)T * sizeof(int)) : NULL;
        for (int j = 0; j < P; j++)
            for (int i = 0; i < Tl; i++) {
                size_t from = (size_t)j * R->B * Tl + i;   // ring layout [P, B, Tl]
                apos[allpos[j * Tl + i]] = R->pos_host[from];
                if (adoc) adoc[allpos[j * Tl + i]] = R->doc_host[from];
            }
        one_process(seq, apos, adoc, T, nq, hd, scale, &stats[0], &stats[1]);
        free(apos); free(adoc);
    }
    ctl_bcast(R->g, stats, sizeof stats, 0);
    // every ring (each TP index and replica checks its own) reports; the worst is logged
    res.max_abs = ctl_max(world, stats[0]);
    res.max_rel = ctl_max(world, stats[1]);
    int nrings = group_size(world) / P;
    if (group_rank(world) == 0) {
        printf("verify_attention step %d: ring vs one process (layer 0, %d heads, %d tokens, worst of %d ring%s): "
               "max abs diff %.3e, max rel diff %.3e (out, dq, dk, dv)\n", step, nq, T, nrings,
               nrings > 1 ? "s" : "", res.max_abs, res.max_rel);
        if (!(res.max_rel <= 1e-4))
            printf("WARNING: ring attention differs from one-process attention by %.3e relative at step %d; "
                   "stop and investigate before a long run\n", res.max_rel, step);
        fflush(stdout);
    }
    for (int f = 0; f < NFIELD; f++) { free(host[f]); free(seq[f]); }
    free(allpos);
    set_free(&s);
    return res;
}
