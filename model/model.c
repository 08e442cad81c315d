// model.c — forward and backward orchestration over backend kernels (no tensor memory is touched here).
#include "model/model.h"
#include "model/backend.h"
#include "model/rope.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------------
// building

static void bind_weights(Model* m, Weights* w, float* arena) {
    const ParamTable* t = &m->pt;
    int i = 0;
    w->wte = arena + t->p[i++].offset;
    w->layer = calloc(m->L, sizeof(LayerW));
    for (int l = 0; l < m->L; l++) {
        LayerW* lw = &w->layer[l];
        float** slots[9] = { &lw->ln1, &lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->ln2, &lw->wg, &lw->wu, &lw->wd };
        for (int s = 0; s < 9; s++) *slots[s] = arena + t->p[i++].offset;
    }
    w->lnf = arena + t->p[i++].offset;
    w->head = m->cfg.tie_embeddings ? w->wte : arena + t->p[i++].offset;
}

// carve `n` floats off the arena cursor (64-byte aligned pieces)
static float* carve(float** cur, size_t n) { float* p = *cur; *cur += (n + 15) / 16 * 16; return p; }

static size_t plan_activations(Model* m, float* base) {
    float* cur = base;
    size_t N = m->N, C = m->C, Hq = (size_t)m->nh * m->hd, Hk = (size_t)m->nkv * m->hd, F = m->F;
    for (int l = 0; l < m->L; l++) {
        LayerActs* a = &m->acts[l];
        a->res = carve(&cur, N * C);  a->ln1 = carve(&cur, N * C); a->rstd1 = carve(&cur, N);
        a->q = carve(&cur, N * Hq);   a->k = carve(&cur, N * Hk);  a->v = carve(&cur, N * Hk);
        a->att = carve(&cur, N * Hq); a->lse = carve(&cur, N * m->nh);
        a->mid = carve(&cur, N * C);  a->ln2 = carve(&cur, N * C); a->rstd2 = carve(&cur, N);
        a->g = carve(&cur, N * F);    a->u = carve(&cur, N * F);   a->h = carve(&cur, N * F);
    }
    m->res_final = carve(&cur, N * C); m->lnf = carve(&cur, N * C); m->rstdf = carve(&cur, N);
    m->dres = carve(&cur, N * C); m->dtmp = carve(&cur, N * C);
    m->dq = carve(&cur, N * Hq); m->dk = carve(&cur, N * Hk); m->dv = carve(&cur, N * Hk);
    m->datt = carve(&cur, N * Hq); m->D = carve(&cur, N * m->nh);
    m->dg = carve(&cur, N * F); m->du = carve(&cur, N * F); m->dh = carve(&cur, N * F);
    m->logits = carve(&cur, (size_t)m->lm_chunk * m->Vl);
    m->xlse = carve(&cur, m->lm_chunk); m->xtl = carve(&cur, m->lm_chunk); m->xm = carve(&cur, m->lm_chunk);
    m->losses = carve(&cur, N); m->hits = carve(&cur, N);
    m->rope = carve(&cur, (size_t)m->rope_npos * m->hd);
    m->tok = (int*)carve(&cur, N); m->tgt = (int*)carve(&cur, N); m->pos = (int*)carve(&cur, N);
    return (size_t)(cur - base);
}

void model_build(Model* m, const Config* cfg, int B, int T, const Group* tp_g, Ring* ring) {
    memset(m, 0, sizeof *m);
    be_init();
    m->cfg = *cfg;
    m->ring = ring;
    m->tp_g = tp_g;
    int tp = tp_g ? tp_g->size : 1, tp_rank = tp_g ? tp_g->rank : 0;
    m->tp = tp; m->tp_rank = tp_rank;
    m->C = cfg->d_model; m->L = cfg->n_layer; m->hd = cfg->d_model / cfg->n_head;
    m->V = cfg->vocab_size;
    m->B = B; m->T = T; m->N = (long)B * T;
    params_build(&m->pt, cfg, tp, tp_rank);
    // this rank's widths come from its shards in the parameter table (the only place sharding is decided)
    const ParamSpec* q = params_find(&m->pt, "model.layers.0.self_attn.q_proj.weight");
    const ParamSpec* k = params_find(&m->pt, "model.layers.0.self_attn.k_proj.weight");
    const ParamSpec* gate = params_find(&m->pt, "model.layers.0.mlp.gate_proj.weight");
    const ParamSpec* emb = params_find(&m->pt, "model.embed_tokens.weight");
    m->nh = (int)(q->lshape[0] / m->hd); m->nkv = (int)(k->lshape[0] / m->hd); m->F = (int)gate->lshape[0];
    m->Vl = (int)emb->lshape[0];
    m->v0 = (int)emb->row0;
    m->nv = m->V - m->v0 < m->Vl ? m->V - m->v0 : m->Vl;
    if (m->nv < 0) m->nv = 0;
    m->lm_chunk = m->N < 1024 ? (int)m->N : 1024;
    m->rope_npos = cfg->max_seq_len;

    m->params = be_alloc(m->pt.total * sizeof(float));
    m->grads = be_alloc(m->pt.total * sizeof(float));
    float* host = malloc(m->pt.total * sizeof(float));
    if (!host) { fprintf(stderr, "model: out of host memory for initial weights\n"); exit(1); }
    params_init(&m->pt, (uint64_t)cfg->seed, host);
    be_upload(m->params, host, m->pt.total * sizeof(float));
    free(host);
    bind_weights(m, &m->w, m->params);
    bind_weights(m, &m->dw, m->grads);

    m->acts = calloc(m->L, sizeof(LayerActs));
    size_t n = plan_activations(m, NULL);
    m->act_bytes = n * sizeof(float);
    m->act_arena = be_alloc(m->act_bytes);
    plan_activations(m, m->act_arena);

    float* rope = malloc((size_t)m->rope_npos * m->hd * sizeof(float));
    rope_table(cfg, m->hd, m->rope_npos, rope);
    be_upload(m->rope, rope, (size_t)m->rope_npos * m->hd * sizeof(float));
    free(rope);
    m->host_losses = calloc(m->N, sizeof(float));
    m->host_hits = calloc(m->N, sizeof(float));
    attn_init(m->hd);
}

void model_free(Model* m) {
    be_free(m->params); be_free(m->grads); be_free(m->act_arena);
    free(m->w.layer); free(m->dw.layer); free(m->acts); free(m->host_losses); free(m->host_hits);
    params_free(&m->pt);
    memset(m, 0, sizeof *m);
}

void model_set_batch(Model* m, const int* tokens, const int* targets, const int* positions) {
    be_upload(m->tok, tokens, m->N * sizeof(int));
    be_upload(m->tgt, targets, m->N * sizeof(int));
    be_upload(m->pos, positions, m->N * sizeof(int));
    if (m->ring) ring_set_positions(m->ring, positions);
}

void model_zero_grad(Model* m) { be_zero(m->grads, m->pt.total * sizeof(float)); }
const float* model_token_losses(const Model* m) { return m->host_losses; }
const float* model_token_hits(const Model* m) { return m->host_hits; }

// ---------------------------------------------------------------------------------------------------
// attention: every sequence of the micro-batch attends to itself, causally — locally, or around the ring
// when the sequence is split over ranks

static void attention_forward(Model* m, LayerActs* a) {
    int Hq = m->nh * m->hd, Hk = m->nkv * m->hd;
    float scale = 1.0f / sqrtf((float)m->hd);
    for (int b = 0; b < m->B; b++) {
        size_t r = (size_t)b * m->T;
        float *out = a->att + r * Hq, *lse = a->lse + r * m->nh;
        const float *q = a->q + r * Hq, *k = a->k + r * Hk, *v = a->v + r * Hk;
        if (m->ring) { ring_attention_forward(m->ring, b, out, lse, q, k, v, m->nh, m->nkv, m->hd, scale); continue; }
        attn_forward_begin(out, lse, m->T, m->nh, m->hd);
        attn_block_forward(out, lse, q, m->pos + r, m->T, k, v, m->pos + r, m->T,
                           m->nh, m->nkv, m->hd, scale, ATTN_MASK_CAUSAL);
    }
}

// datt -> dq, dk, dv (overwritten)
static void attention_backward(Model* m, LayerActs* a) {
    int Hq = m->nh * m->hd, Hk = m->nkv * m->hd;
    float scale = 1.0f / sqrtf((float)m->hd);
    if (!m->ring) {   // the block kernel accumulates; the ring overwrites
        be_zero(m->dq, m->N * Hq * sizeof(float));
        be_zero(m->dk, m->N * Hk * sizeof(float));
        be_zero(m->dv, m->N * Hk * sizeof(float));
    }
    for (int b = 0; b < m->B; b++) {
        size_t r = (size_t)b * m->T;
        float* D = m->D + r * m->nh;
        attn_backward_begin(D, m->datt + r * Hq, a->att + r * Hq, m->T, m->nh, m->hd);
        if (m->ring) {
            ring_attention_backward(m->ring, b, m->dq + r * Hq, m->dk + r * Hk, m->dv + r * Hk, m->datt + r * Hq,
                                    a->q + r * Hq, a->k + r * Hk, a->v + r * Hk, a->lse + r * m->nh, D,
                                    m->nh, m->nkv, m->hd, scale);
            continue;
        }
        attn_block_backward(m->dq + r * Hq, m->dk + r * Hk, m->dv + r * Hk, m->datt + r * Hq,
                            a->q + r * Hq, a->lse + r * m->nh, D, m->pos + r, m->T,
                            a->k + r * Hk, a->v + r * Hk, m->pos + r, m->T,
                            m->nh, m->nkv, m->hd, scale, ATTN_MASK_CAUSAL);
    }
}

// ---------------------------------------------------------------------------------------------------
// forward

// sum partial results over the tensor-parallel group (row-parallel outputs, column-parallel input grads)
static void tp_sum(Model* m, float* x, size_t n) {
    if (m->tp > 1) comm_allreduce_sum(m->tp_g, x, n);
}

// y[N, out] = x[N, in] W^T with W [out, in]
static void linear_forward(float* y, const float* x, const float* W, long N, int in, int out) {
    be_matmul(y, x, W, (int)N, out, in, 0, 1, 1.0f, 0.0f);
}
// dx[N, in] (= or +=) dy[N, out] W;  dW[out, in] += dy^T x
static void linear_backward(float* dx, float* dW, const float* dy, const float* x, const float* W,
                            long N, int in, int out, float beta_dx) {
    be_matmul(dW, dy, x, out, in, (int)N, 1, 0, 1.0f, 1.0f);
    if (dx) be_matmul(dx, dy, W, (int)N, in, out, 0, 0, 1.0f, beta_dx);
}

static void layer_forward(Model* m, int l, float* out) {
    LayerW* w = &m->w.layer[l];
    LayerActs* a = &m->acts[l];
    long N = m->N;
    int C = m->C, Hq = m->nh * m->hd, Hk = m->nkv * m->hd, F = m->F;
    be_rmsnorm_forward(a->ln1, a->rstd1, a->res, w->ln1, N, C, m->cfg.norm_eps);
    linear_forward(a->q, a->ln1, w->wq, N, C, Hq);
    linear_forward(a->k, a->ln1, w->wk, N, C, Hk);
    linear_forward(a->v, a->ln1, w->wv, N, C, Hk);
    be_rope_forward(a->q, m->pos, m->rope, N, m->nh, m->hd);
    be_rope_forward(a->k, m->pos, m->rope, N, m->nkv, m->hd);
    attention_forward(m, a);
    linear_forward(m->dtmp, a->att, w->wo, N, Hq, C);            // o = att Wo^T (row-parallel under TP)
    tp_sum(m, m->dtmp, (size_t)N * C);
    be_copy(a->mid, a->res, N * C * sizeof(float));
    be_add(a->mid, m->dtmp, N * C);
    be_rmsnorm_forward(a->ln2, a->rstd2, a->mid, w->ln2, N, C, m->cfg.norm_eps);
    linear_forward(a->g, a->ln2, w->wg, N, C, F);
    linear_forward(a->u, a->ln2, w->wu, N, C, F);
    be_swiglu_forward(a->h, a->g, a->u, (size_t)N * F);
    linear_forward(m->dtmp, a->h, w->wd, N, F, C);               // down (row-parallel under TP)
    tp_sum(m, m->dtmp, (size_t)N * C);
    be_copy(out, a->mid, N * C * sizeof(float));
    be_add(out, m->dtmp, N * C);
}

// LM head + cross-entropy over row chunks (the [N, V] logits never exist at once; under TP each rank
// holds a vocabulary slice and the row LSE and target logit are combined over the TP group). With
// grad_scale != 0 the head's backward runs right away: dW_head += dlogits^T lnf, dtmp = d(lnf).
static double head_forward(Model* m, float grad_scale, float* logits_out) {
    int C = m->C, V = m->Vl;
    for (long r0 = 0; r0 < m->N; r0 += m->lm_chunk) {
        int n = (int)(m->N - r0 < m->lm_chunk ? m->N - r0 : m->lm_chunk);
        const float* x = m->lnf + r0 * C;
        const int* tgt = m->tgt + r0;
        linear_forward(m->logits, x, m->w.head, n, C, V);
        if (logits_out) {   // only the real vocabulary columns
            float* tmp = malloc((size_t)n * V * sizeof(float));
            be_download(tmp, m->logits, (size_t)n * V * sizeof(float));
            for (int i = 0; i < n; i++)
                memcpy(logits_out + (r0 + i) * (size_t)m->V, tmp + (size_t)i * V, m->nv * sizeof(float));
            free(tmp);
        }
        be_xent_lse(m->xlse, m->logits, n, V, m->nv);
        be_xent_target_logit(m->xtl, m->logits, tgt, n, V, m->nv, m->v0);
        if (m->tp > 1) {   // lse = M + log sum_r exp(lse_r - M), M = max_r lse_r; the target logit lives on one rank
            be_copy(m->xm, m->xlse, n * sizeof(float));
            comm_allreduce_max(m->tp_g, m->xm, n);
            be_exp_sub(m->xlse, m->xm, n);
            comm_allreduce_sum(m->tp_g, m->xlse, n);
            be_log_add(m->xlse, m->xlse, m->xm, n);
            comm_allreduce_sum(m->tp_g, m->xtl, n);
        }
        be_xent_loss(m->losses + r0, m->xlse, m->xtl, tgt, n);
        if (m->want_hits) {   // greedy correctness: the target logit is the row maximum over the whole vocabulary
            be_row_max(m->xm, m->logits, n, V, m->nv);
            if (m->tp > 1) comm_allreduce_max(m->tp_g, m->xm, n);
            be_argmax_hit(m->hits + r0, m->xm, m->xtl, tgt, n);
        }
        if (grad_scale != 0.0f) {
            be_xent_backward(m->logits, m->xlse, tgt, n, V, m->nv, m->v0, grad_scale);
            linear_backward(m->dtmp + r0 * C, m->dw.head, m->logits, x, m->w.head, n, C, V, 0.0f);
        }
    }
    if (grad_scale != 0.0f) tp_sum(m, m->dtmp, (size_t)m->N * C);
    be_download(m->host_losses, m->losses, m->N * sizeof(float));
    if (m->want_hits) be_download(m->host_hits, m->hits, m->N * sizeof(float));
    double sum = 0;
    for (long i = 0; i < m->N; i++) sum += m->host_losses[i];
    return sum;
}

double model_forward(Model* m, float grad_scale, float* logits_out) {
    long N = m->N;
    int C = m->C;
    be_embedding_forward(m->acts[0].res, m->tok, m->w.wte, N, C, m->v0, m->Vl);
    tp_sum(m, m->acts[0].res, (size_t)N * C);   // vocab-parallel: each token's row lives on one rank
    for (int l = 0; l < m->L; l++)
        layer_forward(m, l, l + 1 < m->L ? m->acts[l + 1].res : m->res_final);
    be_rmsnorm_forward(m->lnf, m->rstdf, m->res_final, m->w.lnf, N, C, m->cfg.norm_eps);
    return head_forward(m, grad_scale, logits_out);
}

// ---------------------------------------------------------------------------------------------------
// backward: dres holds d(loss)/d(residual stream) flowing down the layers

static void layer_backward(Model* m, int l) {
    LayerW* w = &m->w.layer[l];
    LayerW* dw = &m->dw.layer[l];
    LayerActs* a = &m->acts[l];
    long N = m->N;
    int C = m->C, Hq = m->nh * m->hd, Hk = m->nkv * m->hd, F = m->F;
    // MLP: out = mid + h Wd^T
    linear_backward(m->dh, dw->wd, m->dres, a->h, w->wd, N, F, C, 0.0f);
    be_swiglu_backward(m->dg, m->du, m->dh, a->g, a->u, (size_t)N * F);
    linear_backward(m->dtmp, dw->wg, m->dg, a->ln2, w->wg, N, C, F, 0.0f);
    linear_backward(m->dtmp, dw->wu, m->du, a->ln2, w->wu, N, C, F, 1.0f);
    tp_sum(m, m->dtmp, (size_t)N * C);
    be_rmsnorm_backward(m->dres, dw->ln2, m->dtmp, a->mid, w->ln2, a->rstd2, N, C);
    // attention: mid = res + att Wo^T
    linear_backward(m->datt, dw->wo, m->dres, a->att, w->wo, N, Hq, C, 0.0f);
    attention_backward(m, a);
    be_rope_backward(m->dq, m->pos, m->rope, N, m->nh, m->hd);
    be_rope_backward(m->dk, m->pos, m->rope, N, m->nkv, m->hd);
    linear_backward(m->dtmp, dw->wq, m->dq, a->ln1, w->wq, N, C, Hq, 0.0f);
    linear_backward(m->dtmp, dw->wk, m->dk, a->ln1, w->wk, N, C, Hk, 1.0f);
    linear_backward(m->dtmp, dw->wv, m->dv, a->ln1, w->wv, N, C, Hk, 1.0f);
    tp_sum(m, m->dtmp, (size_t)N * C);
    be_rmsnorm_backward(m->dres, dw->ln1, m->dtmp, a->res, w->ln1, a->rstd1, N, C);
}

void model_backward(Model* m) {
    long N = m->N;
    int C = m->C;
    // dtmp holds d(lnf) from the fused head backward
    be_zero(m->dres, N * C * sizeof(float));
    be_rmsnorm_backward(m->dres, m->dw.lnf, m->dtmp, m->res_final, m->w.lnf, m->rstdf, N, C);
    for (int l = m->L - 1; l >= 0; l--) layer_backward(m, l);
    be_embedding_backward(m->dw.wte, m->dres, m->tok, N, C, m->v0, m->Vl);
}

double model_flops_per_token(const Config* c, int seq_len) {
    double C = c->d_model, hd = (double)c->d_model / c->n_head, F = c->d_ff;
    double per_layer = C * c->n_head * hd * 2 + C * c->n_kv_head * hd * 2 + 3 * C * F;
    double matmul_params = c->n_layer * per_layer + (double)c->vocab_size * C;   // + LM head
    return 6.0 * matmul_params + 6.0 * c->n_layer * (double)seq_len * C;
}
