// decode.c — one token at a time with a KV cache (see decode.h). The layer is the model's (model.c's forward, for
// one row, in fp32): RMSNorm, q/k/v (one matmul) with RoPE, attention over the cache, o_proj, RMSNorm, gate/up (one
// matmul), SwiGLU, down_proj, residuals.
#include "model/decode.h"
#include "backend/backend.h"
#include "common/util.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* host_or_die(size_t n, size_t size) {
    void* p = calloc(n ? n : 1, size);
    if (!p) { fprintf(stderr, "decode: out of host memory\n"); exit(1); }
    return p;
}

void decoder_init(Decoder* d, Model* m, int cap) {
    memset(d, 0, sizeof *d);
    if (m->U > 1) { fprintf(stderr, "decode: the all-to-all layouts are not supported (use cp_comm = ring)\n"); exit(1); }
    d->m = m;
    d->cp = m->cp_g ? group_size(m->cp_g) : 1;
    d->cp_rank = m->cp_g ? group_rank(m->cp_g) : 0;
    d->cap = cap > 0 ? cap : 1;
    size_t C = m->C, Hq = (size_t)m->nh * m->hd, Hk = (size_t)m->nkv * m->hd, F = m->F;
    d->kc = host_or_die(m->L, sizeof(float*));
    d->vc = host_or_die(m->L, sizeof(float*));
    for (int l = 0; l < m->L; l++) {
        d->kc[l] = be_alloc((size_t)d->cap * Hk * sizeof(float));
        d->vc[l] = be_alloc((size_t)d->cap * Hk * sizeof(float));
    }
    d->pos_dev = be_alloc((size_t)d->cap * sizeof(int));
    float** one[] = { &d->x, &d->xn, &d->proj };
    for (int i = 0; i < 3; i++) *one[i] = be_alloc(C * sizeof(float));
    d->rstd = be_alloc(sizeof(float));
    d->q = be_alloc(Hq * sizeof(float)); d->att = be_alloc(Hq * sizeof(float));
    d->k = be_alloc(Hk * sizeof(float)); d->v = be_alloc(Hk * sizeof(float));
    d->lse = be_alloc((size_t)m->nh * sizeof(float));
    d->qkv = be_alloc((Hq + 2 * Hk) * sizeof(float));
    d->gu = be_alloc(2 * F * sizeof(float)); d->h = be_alloc(F * sizeof(float));
    d->logits = be_alloc((size_t)m->Vl * sizeof(float));
    d->part = be_alloc((size_t)d->cp * (Hq + m->nh) * sizeof(float));
    d->acc = be_alloc((Hq + m->nh) * sizeof(float));
    d->tok1 = be_alloc(sizeof(int)); d->pos1 = be_alloc(sizeof(int));
    d->host_logits = host_or_die(m->V, sizeof(float));
    d->host_slices = host_or_die((size_t)m->tp * m->Vl, sizeof(float));
}

void decoder_free(Decoder* d) {
    Model* m = d->m;
    if (!m) return;
    for (int l = 0; l < m->L; l++) { be_free(d->kc[l]); be_free(d->vc[l]); }
    free(d->kc); free(d->vc);
    void* dev[] = { d->pos_dev, d->x, d->xn, d->proj, d->rstd, d->q, d->att, d->k, d->v, d->lse, d->qkv, d->gu, d->h,
                    d->logits, d->part, d->acc, d->tok1, d->pos1 };
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) be_free(dev[i]);
    free(d->host_logits); free(d->host_slices);
    memset(d, 0, sizeof *d);
}

void decoder_take_prefill(Decoder* d, int n_valid) {
    Model* m = d->m;
    size_t Hk = (size_t)m->nkv * m->hd, T = (size_t)m->T;
    if (m->recompute != RECOMPUTE_NONE) { fprintf(stderr, "decode: prefill needs recompute = none\n"); exit(1); }
    float *kh = host_or_die(T * Hk, sizeof(float)), *vh = host_or_die(T * Hk, sizeof(float));
    int* keep = host_or_die(T, sizeof(int));
    int n = 0;
    for (size_t i = 0; i < T; i++) if (m->hpos[i] < n_valid) keep[n++] = (int)i;   // sequence 0: this rank's tokens
    if (n > d->cap) { fprintf(stderr, "decode: %d prefill tokens exceed the cache of %d\n", n, d->cap); exit(1); }
    int* pos = host_or_die(n, sizeof(int));
    for (int j = 0; j < n; j++) pos[j] = m->hpos[keep[j]];
    for (int l = 0; l < m->L; l++) {
        be_download(kh, m->acts[l].k, T * Hk * sizeof(float));
        be_download(vh, m->acts[l].v, T * Hk * sizeof(float));
        for (int j = 0; j < n; j++) {   // compacted in place: row keep[j] >= j
            memmove(kh + (size_t)j * Hk, kh + (size_t)keep[j] * Hk, Hk * sizeof(float));
            memmove(vh + (size_t)j * Hk, vh + (size_t)keep[j] * Hk, Hk * sizeof(float));
        }
        be_upload(d->kc[l], kh, (size_t)n * Hk * sizeof(float));
        be_upload(d->vc[l], vh, (size_t)n * Hk * sizeof(float));
    }
    be_upload(d->pos_dev, pos, (size_t)n * sizeof(int));
    d->n = n;
    d->total = n_valid;
    free(kh); free(vh); free(keep); free(pos);
}

static void tp_sum(Model* m, float* x, size_t n) {
    if (m->tp > 1) comm_allreduce_sum(m->tp_g, x, n);
}
static void linear(float* y, const float* x, const float* W, int in, int out) {   // y[1, out] = x W^T
    be_matmul(y, x, W, 1, out, in, 0, 1, 1.0f, 0.0f);
}

const float* decoder_step(Decoder* d, int token, int pos) {
    Model* m = d->m;
    int C = m->C, nh = m->nh, nkv = m->nkv, hd = m->hd, F = m->F, Hq = nh * hd, Hk = nkv * hd;
    if (pos < 0 || pos >= m->rope_npos) { fprintf(stderr, "decode: position %d is past max_seq_len = %d\n", pos, m->rope_npos); exit(1); }
    int owner = (int)(d->total % d->cp) == d->cp_rank;   // this rank caches the token
    if (owner && d->n >= d->cap) { fprintf(stderr, "decode: the cache of %d tokens is full\n", d->cap); exit(1); }
    be_upload(d->tok1, &token, sizeof(int));
    be_upload(d->pos1, &pos, sizeof(int));
    if (owner) be_upload(d->pos_dev + d->n, &pos, sizeof(int));
    int n_after = d->n + owner;
    float scale = 1.0f / sqrtf((float)hd);
    be_embedding_forward(d->x, d->tok1, m->w.wte, 1, C, m->v0, m->Vl);
    tp_sum(m, d->x, C);
    for (int l = 0; l < m->L; l++) {
        LayerW* w = &m->w.layer[l];
        be_rmsnorm_forward(d->xn, BE_F32, d->rstd, d->x, w->ln1, 1, C, m->cfg.norm_eps);
        linear(d->qkv, d->xn, w->wq, C, Hq + 2 * Hk);   // [q; k; v] side by side in the arena
        be_qkv_rope(d->q, d->k, d->v, d->qkv, BE_F32, d->pos1, m->rope, 1, nh, nkv, hd);
        if (owner) {
            be_copy(d->kc[l] + (size_t)d->n * Hk, d->k, Hk * sizeof(float));
            be_copy(d->vc[l] + (size_t)d->n * Hk, d->v, Hk * sizeof(float));
        }
        // this rank's part of the attention: its cached keys (none: lse = -inf, out 0)
        attn_forward_begin(d->att, d->lse, 1, nh, hd);
        if (n_after > 0)
            attn_block_forward(d->att, d->lse, d->q, d->pos1, NULL, 1, d->kc[l], d->vc[l], d->pos_dev, NULL, n_after,
                               nh, nkv, hd, scale, ATTN_MASK_CAUSAL);
        if (d->cp > 1) {   // every rank's part, merged in rank order
            size_t w1 = (size_t)Hq + nh;
            be_copy(d->part + (size_t)d->cp_rank * w1, d->att, (size_t)Hq * sizeof(float));
            be_copy(d->part + (size_t)d->cp_rank * w1 + Hq, d->lse, (size_t)nh * sizeof(float));
            comm_allgather(m->cp_g, d->part, w1);
            attn_forward_begin(d->acc, d->acc + Hq, 1, nh, hd);
            for (int j = 0; j < d->cp; j++)
                attn_merge(d->acc, d->acc + Hq, d->part + (size_t)j * w1, d->part + (size_t)j * w1 + Hq, 1, nh, hd);
            be_copy(d->att, d->acc, (size_t)Hq * sizeof(float));
        }
        linear(d->proj, d->att, w->wo, Hq, C);
        tp_sum(m, d->proj, C);
        be_add(d->x, d->proj, C);
        be_rmsnorm_forward(d->xn, BE_F32, d->rstd, d->x, w->ln2, 1, C, m->cfg.norm_eps);
        linear(d->gu, d->xn, w->wg, C, 2 * F);          // [gate; up] side by side
        be_swiglu_forward(d->h, d->gu, BE_F32, 1, F);
        linear(d->proj, d->h, w->wd, F, C);
        tp_sum(m, d->proj, C);
        be_add(d->x, d->proj, C);
    }
    be_rmsnorm_forward(d->xn, BE_F32, d->rstd, d->x, m->w.lnf, 1, C, m->cfg.norm_eps);
    linear(d->logits, d->xn, m->w.head, C, m->Vl);
    if (owner) d->n++;
    d->total++;
    // the whole row of logits on every rank: the TP ranks' vocabulary slices side by side
    float* slice = d->host_slices + (size_t)m->tp_rank * m->Vl;
    be_download(slice, d->logits, (size_t)m->Vl * sizeof(float));
    if (m->tp > 1) ctl_allgather(m->tp_g, slice, d->host_slices, (size_t)m->Vl * sizeof(float));
    memcpy(d->host_logits, d->host_slices, (size_t)m->V * sizeof(float));   // slices are contiguous: rank r at r Vl
    return d->host_logits;
}

// ---- sampling ----
static const float* g_sort_logits;
static int cmp_desc(const void* a, const void* b) {
    int i = *(const int*)a, j = *(const int*)b;
    float x = g_sort_logits[i], y = g_sort_logits[j];
    if (x != y) return x > y ? -1 : 1;
    return (i > j) - (i < j);
}

int sample_logits(const float* logits, int nv, float temperature, int top_k, float top_p, uint64_t* rng) {
    int best = 0;
    for (int i = 1; i < nv; i++) if (logits[i] > logits[best]) best = i;
    if (!(temperature > 0)) return best;
    int* idx = host_or_die(nv, sizeof(int));
    for (int i = 0; i < nv; i++) idx[i] = i;
    g_sort_logits = logits;
    qsort(idx, nv, sizeof(int), cmp_desc);
    int k = top_k > 0 && top_k < nv ? top_k : nv;
    double* p = host_or_die(k, sizeof(double));
    double mx = logits[idx[0]], sum = 0;
    for (int i = 0; i < k; i++) { p[i] = exp(((double)logits[idx[i]] - mx) / temperature); sum += p[i]; }
    int keep = k;
    if (top_p < 1) {   // the smallest prefix whose probability reaches top_p (top_p 0: the most likely token)
        double c = 0;
        for (int i = 0; i < k; i++) { c += p[i] / sum; if (c >= top_p) { keep = i + 1; break; } }
    }
    double tot = 0;
    for (int i = 0; i < keep; i++) tot += p[i];
    *rng = mix64(*rng);
    double r = (double)(*rng >> 11) / 9007199254740992.0 * tot, c = 0;
    int pick = idx[keep - 1];
    for (int i = 0; i < keep; i++) { c += p[i]; if (r < c) { pick = idx[i]; break; } }
    free(idx); free(p);
    return pick;
}
