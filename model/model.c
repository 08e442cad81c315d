// model.c — forward and backward orchestration over backend kernels (no tensor memory is touched here).
#include "model/model.h"
#include "backend/backend.h"
#include "model/rope.h"
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------------------
// building

// where the tensor at arena offset off lives: in `arena`, or (arena = NULL: sharded by ZeRO) in its unit's buffer —
// layer l's in lay[l % 2], the embedding's and the rest's in io
static float* place(const Model* m, size_t off, float* arena, float* const lay[2], float* io) {
    if (arena) return arena + off;
    int u = zero_unit_of(&m->zu, off);
    size_t rel = off - m->zu.off[u];
    if (u == 0) return io + rel;
    if (u == m->zu.n - 1) return io + m->io_rest + rel;
    return lay[(u - 1) % 2] + rel;
}
static void bind_weights(Model* m, Weights* w, float* arena, float* const lay[2], float* io) {
    const ParamTable* t = &m->pt;
    int i = 0;
#define AT() place(m, t->p[i++].offset, arena, lay, io)
    w->wte = AT();
    w->layer = calloc(m->L, sizeof(LayerW));
    for (int l = 0; l < m->L; l++) {
        LayerW* lw = &w->layer[l];
        float** slots[9] = { &lw->ln1, &lw->wq, &lw->wk, &lw->wv, &lw->wo, &lw->ln2, &lw->wg, &lw->wu, &lw->wd };
        for (int s = 0; s < 9; s++) *slots[s] = AT();
    }
    w->lnf = AT();
    w->head = m->cfg.tie_embeddings ? w->wte : AT();
#undef AT
}

// The activation plan: `n` floats at a time carved off a cursor (64-byte aligned pieces). With base = NULL
// only the size is planned (the pointers stay NULL).
typedef struct { float* base; size_t used; } Carver;
static float* carve(Carver* c, size_t n) {
    float* p = c->base ? c->base + c->used : NULL;
    c->used += (n + 15) / 16 * 16;
    return p;
}

// Which tensors a layer keeps depends on the recompute mode: the residual always; q, k, v (and norm1) unless
// qkv or full; the attention output, LSE and mid residual unless full; norm2 and the SwiGLU tensors only
// with none (and the SwiGLU tensors never with a tiled MLP: one tile's exist at a time). What is not kept lives
// in one shared working set (one layer's worth), written by the forward and rewritten by the recomputation in the
// backward. Memory: layers x kept + one working set + scratch.
enum { G_RES, G_QKV, G_ATT, G_MLP, G_TILE };
static int kept(int group, int rc, int tiled) {
    return group == G_RES || (group == G_QKV && rc < RECOMPUTE_QKV) || (group == G_ATT && rc < RECOMPUTE_FULL) ||
           (group == G_MLP && rc == RECOMPUTE_NONE) || (group == G_TILE && rc == RECOMPUTE_NONE && !tiled);
}
static void plan_layers(Model* m, Carver* c) {
    size_t N = m->N, Ns = m->Ns, C = m->C, Hq = (size_t)m->nh * m->hd, F = m->F, R = m->mlp_rows;
    size_t Na = (size_t)m->B * m->T_at, Hqa = (size_t)m->nh_at * m->hd, Hka = (size_t)m->nkv_at * m->hd;   // attention's side
    struct { size_t off, n; int group; } t[] = {
        { offsetof(LayerActs, res), Ns * C, G_RES }, { offsetof(LayerActs, ln1), Ns * C, G_QKV },
        { offsetof(LayerActs, rstd1), Ns, G_QKV },   { offsetof(LayerActs, q), Na * Hqa, G_QKV },
        { offsetof(LayerActs, k), Na * Hka, G_QKV }, { offsetof(LayerActs, v), Na * Hka, G_QKV },
        { offsetof(LayerActs, att), N * Hq, G_ATT }, { offsetof(LayerActs, lse), Na * m->nh_at, G_ATT },
        { offsetof(LayerActs, mid), Ns * C, G_ATT }, { offsetof(LayerActs, ln2), Ns * C, G_MLP },
        { offsetof(LayerActs, rstd2), Ns, G_MLP },   { offsetof(LayerActs, g), R * F, G_TILE },
        { offsetof(LayerActs, u), R * F, G_TILE },   { offsetof(LayerActs, h), R * F, G_TILE },
    };
    int nt = sizeof t / sizeof *t, rc = m->recompute, tl = m->mlp_tiled;
    size_t start = c->used;
    float* work[sizeof t / sizeof *t];
    for (int i = 0; i < nt; i++) work[i] = kept(t[i].group, rc, tl) ? NULL : carve(c, t[i].n);
    m->act_work = (c->used - start) * sizeof(float);
    start = c->used;
    // a layer's kept tensors are contiguous (its slot); with offload two slots serve all layers (layer l: slot l % 2)
    int slots = m->offload && m->L > 2 ? 2 : m->L;
    for (int l = 0; l < m->L; l++)
        for (int i = 0; i < nt; i++) {
            float** at = (float**)((char*)&m->acts[l] + t[i].off);
            if (!kept(t[i].group, rc, tl)) *at = work[i];
            else *at = l < slots ? carve(c, t[i].n) : *(float**)((char*)&m->acts[l % 2] + t[i].off);
        }
    m->act_kept = (c->used - start) * sizeof(float);
    m->kept_floats = (c->used - start) / slots;
}

static size_t plan_activations(Model* m, float* base) {
    Carver cv = { base, 0 }, *c = &cv;
    size_t N = m->N, C = m->C, Hq = (size_t)m->nh * m->hd, Hk = (size_t)m->nkv * m->hd, F = m->F;
    plan_layers(m, c);
    size_t Ns = m->Ns;
    m->res_final = carve(c, Ns * C); m->lnf = carve(c, Ns * C); m->rstdf = carve(c, Ns);
    m->dres = carve(c, Ns * C); m->proj = carve(c, N * C);
    if (m->sp) { m->full = carve(c, N * C); m->sp_dw = carve(c, (2 * (size_t)m->L + 1) * C); }
    m->dq = carve(c, N * Hq); m->dk = carve(c, N * Hk); m->dv = carve(c, N * Hk);
    m->datt = carve(c, N * Hq); m->D = carve(c, N * m->nh);
    size_t R = m->mlp_rows;
    m->dg = carve(c, R * F); m->du = carve(c, R * F); m->dh = carve(c, R * F);
    m->logits = carve(c, (size_t)m->lm_chunk * m->Vl);
    m->xlse = carve(c, m->lm_chunk); m->xtl = carve(c, m->lm_chunk); m->xm = carve(c, m->lm_chunk);
    m->losses = carve(c, N); m->hits = carve(c, N);
    m->rope = carve(c, (size_t)m->rope_npos * m->hd);
    m->tok = (int*)carve(c, N); m->tgt = (int*)carve(c, N); m->pos = (int*)carve(c, N);
    if (m->U > 1) {   // attention's side of the all-to-all
        size_t Na = (size_t)m->B * m->T_at, Hka = (size_t)m->nkv_at * m->hd;
        m->xq = carve(c, N * Hq); m->xatt = carve(c, N * Hq); m->xD = carve(c, N * m->nh);
        m->xk = carve(c, Na * Hka); m->xv = carve(c, Na * Hka);
        m->pos_at = (int*)carve(c, Na); m->doc_at = (int*)carve(c, Na);
    }
    return cv.used;
}

static void* host_alloc(size_t n, size_t size) {
    void* p = calloc(n ? n : 1, size);
    if (!p) { fprintf(stderr, "model: out of host memory (%zu x %zu bytes)\n", n, size); exit(1); }
    return p;
}

// Dimensions, the parameter table and the activation plan of one rank, without allocating backend memory
// (pointers stay NULL): what model_build allocates, and what the capacity planner (model/plan.c) reports.
void model_shape(Model* m, const Config* cfg, int B, int seq_len, int tp, int tp_rank, int cp, size_t shard) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->tp = tp; m->tp_rank = tp_rank;
    m->C = cfg->d_model; m->L = cfg->n_layer; m->hd = cfg->d_model / cfg->n_head;
    m->V = cfg->vocab_size;
    m->seq_len = seq_len;
    m->B = B; m->T = seq_len / cp; m->N = (long)B * m->T;
    m->sp = cfg->tp_sp && tp > 1 && m->N % tp == 0;   // (validated with the config)
    m->Ns = m->sp ? m->N / tp : m->N;
    params_build(&m->pt, cfg, tp, tp_rank);
    m->zero = shard > 1 ? cfg->zero : 0;
    zero_units(&m->zu, &m->pt, (int)shard, 0);   // (the rank: model_build)
    // this rank's widths come from its shards in the parameter table (the only place sharding is decided)
    const ParamSpec* q = params_find(&m->pt, "model.layers.0.self_attn.q_proj.weight");
    const ParamSpec* k = params_find(&m->pt, "model.layers.0.self_attn.k_proj.weight");
    const ParamSpec* gate = params_find(&m->pt, "model.layers.0.mlp.gate_proj.weight");
    const ParamSpec* emb = params_find(&m->pt, "model.embed_tokens.weight");
    m->nh = (int)(q->lshape[0] / m->hd); m->nkv = (int)(k->lshape[0] / m->hd); m->F = (int)gate->lshape[0];
    m->Vl = (int)emb->lshape[0];
    m->v0 = (int)emb->row0;
    m->U = cp > 1 ? config_a2a(cfg) : 1;   // (plan_step and model_build: cfg->cp = cp)
    if (m->U < 1 || cp % m->U || m->nh % m->U) m->U = 1;
    m->T_at = m->T * m->U;
    m->nh_at = m->nh / m->U;
    if (m->nkv >= m->U) { m->nkv_at = m->nkv / m->U; m->kv_nb = m->U; }
    else { m->nkv_at = 1; m->kv_nb = m->nkv; }   // fewer KV heads than members: each KV head to U / nkv members
    m->kv_w = m->nkv_at * m->hd;
    m->nv = m->V - m->v0 < m->Vl ? m->V - m->v0 : m->Vl;
    if (m->nv < 0) m->nv = 0;
    int head_rows = be_tuning()->head_rows;
    m->lm_chunk = m->N < head_rows ? (int)m->N : head_rows;
    m->rope_npos = cfg->max_seq_len;
    m->arena = m->pt.total;
    if (m->zero >= 2) {   // the embedding's and the rest's unit buffers: shared unless the head is the embedding
        size_t le = m->zu.len[0], lr = m->zu.len[m->zu.n - 1];
        m->io_rest = cfg->tie_embeddings ? le : 0;
        m->io_len = cfg->tie_embeddings ? le + lr : (le > lr ? le : lr);
    }
    m->recompute = recompute_mode(cfg->recompute);   // validated with the config
    m->offload = !strcmp(cfg->offload, "ckpt");       // (with recompute qkv or full: validated)
    m->mlp_rows = cfg->mlp_tile > 0 && cfg->mlp_tile < m->N ? cfg->mlp_tile : m->N;
    m->mlp_tiled = m->mlp_rows < m->N;
    m->acts = host_alloc(m->L, sizeof(LayerActs));
    m->act_bytes = plan_activations(m, NULL) * sizeof(float);
}

void model_shape_free(Model* m) { free(m->acts); params_free(&m->pt); zero_units_free(&m->zu); }

// the parameter and gradient memory of a ZeRO stage (floats): the arena, or the shard and the unit buffers
static size_t param_floats(const Model* m) {
    return m->zero == 3 ? m->zu.shard + 2 * m->zu.len[1] + m->io_len : m->arena;
}
size_t offload_host_bytes(const Model* m) {
    return m->offload && m->L > 2 ? (size_t)(m->L - 2) * m->kept_floats * sizeof(float) : 0;
}
static size_t grad_floats(const Model* m) { return m->zero >= 2 ? m->zu.shard + m->zu.len[1] + m->io_len : m->arena; }

void model_build(Model* m, const Config* cfg, int B, int seq_len, const ModelGroups* g) {
    const Group *tp_g = g ? g->tp : NULL, *cp_g = g ? g->cp : NULL, *a2a_g = g ? g->a2a : NULL;
    const Group* ring_g = g ? (g->ring ? g->ring : g->a2a ? NULL : g->cp) : NULL;
    int tp = tp_g ? group_size(tp_g) : 1, tp_rank = tp_g ? group_rank(tp_g) : 0;
    int cp = cp_g ? group_size(cp_g) : 1, cp_rank = cp_g ? group_rank(cp_g) : 0;
    model_shape(m, cfg, B, seq_len, tp, tp_rank, cp, g && g->shard ? (size_t)group_size(g->shard) : 1);
    int ua = a2a_g ? group_size(a2a_g) : 1;
    if (ua != m->U) {
        fprintf(stderr, "model: an all-to-all group of %d ranks for the all-to-all degree %d of the config\n", ua, m->U);
        exit(1);
    }
    m->tp_g = tp_g;
    m->cp_g = cp > 1 ? cp_g : NULL;
    be_set_matmul_precision(cfg->matmul_precision);   // validated with the config
    int layout = ring_layout_parse(cfg->cp_layout);
    m->lpos = host_alloc(m->T, sizeof(int));
    ring_positions(layout, cp, cp_rank, seq_len, m->lpos);
    if (ring_g && group_size(ring_g) > 1) {   // a ring rank holds the tokens of its all-to-all group: U runs of chunks
        ring_init(&m->ring, ring_g, layout, seq_len, B, m->nkv_at * m->hd, (layout == CP_ZIGZAG ? 2 : 1) * m->U);
        m->have_ring = 1;
    }
    if (m->U > 1) {
        int widest = m->nh_at * m->hd > m->kv_w ? m->nh_at * m->hd : m->kv_w;
        a2a_init(&m->a2a, a2a_g, m->T, widest);
        m->hpos_at = host_alloc((size_t)B * m->T_at, sizeof(int));
        m->hdoc_at = host_alloc((size_t)B * m->T_at, sizeof(int));
    }

    if (m->zero) {
        m->zg = g->shard;
        m->zu.rank = group_rank(m->zg);
    }
    float* host = host_alloc(m->pt.total, sizeof(float));
    params_init(&m->pt, (uint64_t)cfg->seed, host);
    if (m->zero == 3) {   // this rank's slices; the layers' and io's buffers filled by gathers
        m->pshard = be_alloc(m->zu.shard * sizeof(float));
        for (int u = 0; u < m->zu.n; u++) {
            size_t s = zero_slice(&m->zu, u);
            be_upload(m->pshard + m->zu.own[u], host + m->zu.off[u] + s * m->zu.rank, s * sizeof(float));
        }
        m->punit[0] = be_alloc(m->zu.len[1] * sizeof(float));
        m->punit[1] = be_alloc(m->zu.len[1] * sizeof(float));
        m->pio = be_alloc(m->io_len * sizeof(float));
        m->zreq = comm_req_create();
    } else {
        m->params = be_alloc(m->arena * sizeof(float));
        be_upload(m->params, host, m->pt.total * sizeof(float));
    }
    free(host);
    for (int i = 0; i < 4; i++) m->holds[i] = -1;
    m->pending = -1;
    if (m->zero >= 2) {
        m->gshard = be_alloc(m->zu.shard * sizeof(float));
        m->gunit = be_alloc(m->zu.len[1] * sizeof(float));
        m->gio = be_alloc(m->io_len * sizeof(float));
    } else m->grads = be_alloc(m->arena * sizeof(float));
    float* glay[2] = { m->gunit, m->gunit };
    bind_weights(m, &m->w, m->params, m->punit, m->pio);
    bind_weights(m, &m->dw, m->grads, glay, m->gio);

    m->act_arena = be_alloc(m->act_bytes);
    plan_activations(m, m->act_arena);
    m->slot_layer[0] = m->slot_layer[1] = -1;
    if (m->offload && m->L > 2) {
        m->host_acts = be_host_alloc(offload_host_bytes(m));
        for (int s = 0; s < 2; s++) { m->out_done[s] = be_event_create(); m->in_done[s] = be_event_create(); }
    }

    float* rope = host_alloc((size_t)m->rope_npos * m->hd, sizeof(float));
    rope_table(cfg, m->hd, m->rope_npos, rope);
    be_upload(m->rope, rope, (size_t)m->rope_npos * m->hd * sizeof(float));
    free(rope);
    m->host_losses = host_alloc(m->N, sizeof(float));
    m->host_hits = host_alloc(m->N, sizeof(float));
    m->htok = host_alloc(m->N, sizeof(int)); m->htgt = host_alloc(m->N, sizeof(int)); m->hpos = host_alloc(m->N, sizeof(int));
    if (cfg->doc_mask) { m->doc = be_alloc(m->N * sizeof(int)); m->hdoc = host_alloc(m->N, sizeof(int)); }
    if (cfg->doc_mask && cfg->doc_positions) { m->apos = be_alloc(m->N * sizeof(int)); m->hrpos = host_alloc(m->N, sizeof(int)); }
    attn_init(m->hd);
}

void model_free(Model* m) {
    float* bufs[] = { m->params, m->grads, m->act_arena, m->gshard, m->pshard, m->gunit, m->gio, m->punit[0], m->punit[1],
                      m->pio };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) if (bufs[i]) be_free(bufs[i]);
    if (m->zreq) comm_req_free(m->zreq);
    be_host_free(m->host_acts);
    for (int s = 0; s < 2; s++) { be_event_free(m->out_done[s]); be_event_free(m->in_done[s]); }
    zero_units_free(&m->zu);
    free(m->w.layer); free(m->dw.layer); free(m->acts); free(m->host_losses); free(m->host_hits);
    free(m->htok); free(m->htgt); free(m->hpos); free(m->lpos);
    if (m->doc) be_free(m->doc);
    if (m->apos) be_free(m->apos);
    free(m->hdoc); free(m->hrpos);
    if (m->have_ring) ring_free(&m->ring);
    if (m->U > 1) a2a_free(&m->a2a);
    free(m->hpos_at); free(m->hdoc_at);
    params_free(&m->pt);
    memset(m, 0, sizeof *m);
}

static int cmp_int(const void* a, const void* b) { int x = *(const int*)a, y = *(const int*)b; return (x > y) - (x < y); }

// doc_mask: document ids (and with doc_positions RoPE's positions) of this rank's tokens, from the eod tokens of
// each whole sequence (gathered over the ring: a document may start on another rank). The id of a token is the
// number of eod tokens at or before its position in the sequence, so ids increase along it (work on earlier
// documents is skipped); its RoPE position becomes the distance from its document's eod token.
static void set_docs(Model* m, const int* tokens, const int* positions) {
    int P = m->cp_g ? group_size(m->cp_g) : 1, T = m->T, eod = config_eod(&m->cfg);
    size_t n = m->N;
    const int *tok = tokens, *pos = positions;   // [P, B, T]: every cp rank's tokens of the micro-batch
    int *all = NULL, *starts = host_alloc((size_t)P * T, sizeof(int));
    if (P > 1) {
        all = host_alloc(2 * P * n, sizeof(int));
        ctl_allgather(m->cp_g, tokens, all, n * sizeof(int));
        ctl_allgather(m->cp_g, positions, all + P * n, n * sizeof(int));
        tok = all; pos = all + P * n;
    }
    for (int b = 0; b < m->B; b++) {
        int ns = 0;   // positions of the sequence's eod tokens, ascending
        for (int j = 0; j < P; j++)
            for (int t = 0; t < T; t++) {
                size_t i = ((size_t)j * m->B + b) * T + t;
                if (tok[i] == eod) starts[ns++] = pos[i];
            }
        qsort(starts, ns, sizeof(int), cmp_int);
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)b * T + t;
            int p = positions[i], lo = 0, hi = ns;   // lo: the number of eod tokens at or before p
            while (lo < hi) { int mid = (lo + hi) / 2; if (starts[mid] <= p) lo = mid + 1; else hi = mid; }
            m->hdoc[i] = lo;
            if (m->hrpos) m->hrpos[i] = lo > 0 ? p - starts[lo - 1] : p;
        }
    }
    free(all); free(starts);
}

void model_set_batch(Model* m, const int* tokens, const int* targets, const int* positions) {
    size_t bytes = m->N * sizeof(int);
    if (tokens != m->htok) memcpy(m->htok, tokens, bytes);
    if (targets != m->htgt) memcpy(m->htgt, targets, bytes);
    if (positions != m->hpos) memcpy(m->hpos, positions, bytes);
    if (m->doc) { set_docs(m, tokens, positions); be_upload(m->doc, m->hdoc, bytes); }
    if (m->apos) be_upload(m->apos, positions, bytes);   // doc_positions: attention keeps the positions given
    be_upload(m->tok, tokens, bytes);
    be_upload(m->tgt, targets, bytes);
    be_upload(m->pos, m->apos ? m->hrpos : positions, bytes);
    if (m->U > 1) {   // attention's side: the all-to-all group's tokens of each sequence, member by member
        size_t n = m->N, U = m->U, T = m->T;
        int* all = host_alloc(U * n, sizeof(int));
        for (int f = 0; f < (m->doc ? 2 : 1); f++) {
            ctl_allgather(m->a2a.g, f ? m->hdoc : positions, all, n * sizeof(int));
            int* dst = f ? m->hdoc_at : m->hpos_at;
            for (int b = 0; b < m->B; b++)
                for (size_t u = 0; u < U; u++) memcpy(dst + ((size_t)b * U + u) * T, all + u * n + (size_t)b * T, T * sizeof(int));
        }
        free(all);
        be_upload(m->pos_at, m->hpos_at, U * n * sizeof(int));
        if (m->doc) be_upload(m->doc_at, m->hdoc_at, U * n * sizeof(int));
    }
    if (m->have_ring)
        ring_set_positions(&m->ring, m->U > 1 ? m->hpos_at : positions, m->doc ? (m->U > 1 ? m->hdoc_at : m->hdoc) : NULL);
}

void model_set_windows(Model* m, const int32_t* win, size_t stride, const unsigned char* score) {
    int eod = config_eod(&m->cfg), pad = eod >= 0 ? eod : 0;   // a padding slot's input (data/pack.h: target ignored)
    for (int b = 0; b < m->B; b++) {
        const int32_t* w = win + (size_t)b * stride;
        for (int t = 0; t < m->T; t++) {
            int p = m->lpos[t];
            size_t i = (size_t)b * m->T + t;
            m->htok[i] = w[p] >= 0 ? w[p] : pad; m->htgt[i] = !score || score[p] ? w[p + 1] : -1; m->hpos[i] = p;
        }
    }
    model_set_batch(m, m->htok, m->htgt, m->hpos);
}

const int* model_positions(const Model* m) { return m->hpos; }
const int* model_targets(const Model* m) { return m->htgt; }

int model_ring_stats(const Model* m, RingStats* st) {
    memset(st, 0, sizeof *st);
    if (m->have_ring) *st = ring_stats(&m->ring);
    return m->have_ring;
}

ModelMemory model_memory(const Model* m) {
    ModelMemory mm = { param_floats(m) * sizeof(float), grad_floats(m) * sizeof(float), m->act_bytes,
                       (m->have_ring ? ring_buffer_bytes(&m->ring) : 0) + (m->U > 1 ? m->a2a.cap * sizeof(float) : 0) };
    return mm;
}

void model_zero_grad(Model* m) {
    if (m->zero >= 2) be_zero(m->gshard, m->zu.shard * sizeof(float));   // (the unit buffers are zero between uses)
    else be_zero(m->grads, m->arena * sizeof(float));
}
const float* model_token_losses(const Model* m) { return m->host_losses; }
const float* model_token_hits(const Model* m) { return m->host_hits; }

// ---------------------------------------------------------------------------------------------------
// attention: every sequence of the micro-batch attends to itself, causally — locally, or around the ring
// when the sequence is split over ranks; with an all-to-all group (U > 1) on attention's side: the group's
// U T tokens of 1/U of the heads (a2a.h), exchanged there and back

// sequence b on attention's side: out [T_at, nh_at hd], lse [T_at, nh_at] from the layer's q, k, v
static void attend_forward(Model* m, LayerActs* a, int b, float* out, float* lse) {
    int Hq = m->nh_at * m->hd, Hk = m->nkv_at * m->hd, Ta = m->T_at;
    float scale = 1.0f / sqrtf((float)m->hd);
    size_t r = (size_t)b * Ta;
    const float *q = a->q + r * Hq, *k = a->k + r * Hk, *v = a->v + r * Hk;
    if (m->have_ring) { ring_attention_forward(&m->ring, b, out, lse, q, k, v, m->nh_at, m->nkv_at, m->hd, scale); return; }
    const int *doc, *pos;
    if (m->U > 1) { pos = m->pos_at + r; doc = m->doc ? m->doc_at + r : NULL; }
    else {
        doc = m->doc ? m->doc + r : NULL;                 // doc_mask: document ids
        pos = (m->apos ? m->apos : m->pos) + r;           // doc_positions: not RoPE's
    }
    attn_forward_begin(out, lse, Ta, m->nh_at, m->hd);
    attn_block_forward(out, lse, q, pos, doc, Ta, k, v, pos, doc, Ta, m->nh_at, m->nkv_at, m->hd, scale, ATTN_MASK_CAUSAL);
}

static void attention_forward(Model* m, LayerActs* a) {
    int Hq = m->nh * m->hd, Hqa = m->nh_at * m->hd;
    for (int b = 0; b < m->B; b++) {
        size_t r = (size_t)b * m->T, ra = (size_t)b * m->T_at;
        if (m->U == 1) { attend_forward(m, a, b, a->att + r * Hq, a->lse + r * m->nh); continue; }
        float* out = m->xatt + ra * Hqa;
        attend_forward(m, a, b, out, a->lse + ra * m->nh_at);
        a2a_to_tokens(&m->a2a, a->att + r * Hq, out, Hq, Hqa, m->U, 0);
    }
}

// sequence b on attention's side: dq, dk, dv from dout, D and the layer's tensors (the ring overwrites, the block
// kernel accumulates)
static void attend_backward(Model* m, LayerActs* a, int b, float* dq, float* dk, float* dv, const float* dout,
                            const float* D) {
    int Hq = m->nh_at * m->hd, Hk = m->nkv_at * m->hd, Ta = m->T_at;
    float scale = 1.0f / sqrtf((float)m->hd);
    size_t r = (size_t)b * Ta;
    const float *q = a->q + r * Hq, *k = a->k + r * Hk, *v = a->v + r * Hk, *lse = a->lse + r * m->nh_at;
    if (m->have_ring) {
        ring_attention_backward(&m->ring, b, dq, dk, dv, dout, q, k, v, lse, D, m->nh_at, m->nkv_at, m->hd, scale);
        return;
    }
    const int *doc, *pos;
    if (m->U > 1) { pos = m->pos_at + r; doc = m->doc ? m->doc_at + r : NULL; }
    else { doc = m->doc ? m->doc + r : NULL; pos = (m->apos ? m->apos : m->pos) + r; }
    attn_block_backward(dq, dk, dv, dout, q, lse, D, pos, doc, Ta, k, v, pos, doc, Ta, m->nh_at, m->nkv_at, m->hd, scale,
                        ATTN_MASK_CAUSAL);
}

// datt -> dq, dk, dv (overwritten)
static void attention_backward(Model* m, LayerActs* a) {
    int Hq = m->nh * m->hd, Hk = m->nkv * m->hd, Hqa = m->nh_at * m->hd, Hka = m->nkv_at * m->hd, U = m->U;
    size_t Na = (size_t)m->B * m->T_at;
    float *dq = U > 1 ? m->xq : m->dq, *dk = U > 1 ? m->xk : m->dk, *dv = U > 1 ? m->xv : m->dv;
    if (!m->have_ring) {   // the block kernel accumulates; the ring overwrites
        be_zero(dq, Na * Hqa * sizeof(float));
        be_zero(dk, Na * Hka * sizeof(float));
        be_zero(dv, Na * Hka * sizeof(float));
    }
    int acc = U > 1 && m->kv_nb < U;   // KV heads shared by several members: their dK, dV contributions are summed
    if (acc) { be_zero(m->dk, m->N * Hk * sizeof(float)); be_zero(m->dv, m->N * Hk * sizeof(float)); }
    for (int b = 0; b < m->B; b++) {
        size_t r = (size_t)b * m->T, ra = (size_t)b * m->T_at;
        float* D = m->D + r * m->nh;
        attn_backward_begin(D, m->datt + r * Hq, a->att + r * Hq, m->T, m->nh, m->hd);
        if (U == 1) { attend_backward(m, a, b, dq + r * Hq, dk + r * Hk, dv + r * Hk, m->datt + r * Hq, D); continue; }
        float *Da = m->xD + ra * m->nh_at, *douta = m->xatt + ra * Hqa;
        a2a_to_heads(&m->a2a, Da, D, m->nh, m->nh_at, U);
        a2a_to_heads(&m->a2a, douta, m->datt + r * Hq, Hq, Hqa, U);
        attend_backward(m, a, b, dq + ra * Hqa, dk + ra * Hka, dv + ra * Hka, douta, Da);
        a2a_to_tokens(&m->a2a, m->dq + r * Hq, dq + ra * Hqa, Hq, Hqa, U, 0);
        a2a_to_tokens(&m->a2a, m->dk + r * Hk, dk + ra * Hka, Hk, m->kv_w, m->kv_nb, acc);
        a2a_to_tokens(&m->a2a, m->dv + r * Hk, dv + ra * Hka, Hk, m->kv_w, m->kv_nb, acc);
    }
}

// ---------------------------------------------------------------------------------------------------
// forward

// Tensor parallelism. A row-parallel layer's output (and a column-parallel layer's input gradient) y [N, C] holds
// partial sums over the TP group: all-reduced (every row, returned as y), or with sequence parallelism
// reduce-scattered (returns this rank's Ns rows, inside y). A column-parallel layer's input x: as it is, or with
// sequence parallelism this rank's rows x [Ns, C] all-gathered into m->full [N, C].
static float* own_rows(Model* m, float* y) { return y + (size_t)m->tp_rank * m->Ns * m->C; }
static float* tp_reduce(Model* m, float* y) {
    if (m->tp == 1) return y;
    if (!m->sp) { comm_allreduce_sum(m->tp_g, y, (size_t)m->N * m->C); return y; }
    comm_reduce_scatter_sum(m->tp_g, y, (size_t)m->Ns * m->C);
    return own_rows(m, y);
}
static const float* tp_input_to(Model* m, const float* x, float* full) {   // full [N, C]: where to gather
    if (!m->sp) return x;
    be_copy(own_rows(m, full), x, (size_t)m->Ns * m->C * sizeof(float));
    comm_allgather(m->tp_g, full, (size_t)m->Ns * m->C);
    return full;
}
static const float* tp_input(Model* m, const float* x) { return tp_input_to(m, x, m->full); }
// where a norm's weight gradient accumulates: its place in the gradient arena, or with sequence parallelism (each
// rank's rows only) a scratch summed over TP at the end of the backward; i = 2 l (ln1), 2 l + 1 (ln2), 2 L (final)
static float* norm_grad(Model* m, float* dw, int i) { return m->sp ? m->sp_dw + (size_t)i * m->C : dw; }

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

// the layer in three parts, so that the backward can recompute what its mode did not keep (the same calls
// in the same order: recomputed values are bit-identical to the forward's)
static void qkv_forward(Model* m, int l) {            // ln1, q, k, v (RoPE applied; on attention's side)
    LayerW* w = &m->w.layer[l];
    LayerActs* a = &m->acts[l];
    long N = m->N;
    int C = m->C, Hq = m->nh * m->hd, Hk = m->nkv * m->hd, U = m->U;
    // with an all-to-all, this rank's tokens go through the (then idle) gradient scratch first
    float *q = U > 1 ? m->dq : a->q, *k = U > 1 ? m->dk : a->k, *v = U > 1 ? m->dv : a->v;
    be_rmsnorm_forward(a->ln1, a->rstd1, a->res, w->ln1, m->Ns, C, m->cfg.norm_eps);
    const float* x = tp_input(m, a->ln1);
    linear_forward(q, x, w->wq, N, C, Hq);
    linear_forward(k, x, w->wk, N, C, Hk);
    linear_forward(v, x, w->wv, N, C, Hk);
    be_rope_forward(q, m->pos, m->rope, N, m->nh, m->hd);
    be_rope_forward(k, m->pos, m->rope, N, m->nkv, m->hd);
    if (U == 1) return;
    int Hqa = m->nh_at * m->hd, Hka = m->nkv_at * m->hd;
    for (int b = 0; b < m->B; b++) {
        size_t r = (size_t)b * m->T, ra = (size_t)b * m->T_at;
        a2a_to_heads(&m->a2a, a->q + ra * Hqa, q + r * Hq, Hq, Hqa, U);
        a2a_to_heads(&m->a2a, a->k + ra * Hka, k + r * Hk, Hk, m->kv_w, m->kv_nb);
        a2a_to_heads(&m->a2a, a->v + ra * Hka, v + r * Hk, Hk, m->kv_w, m->kv_nb);
    }
}
static void att_forward(Model* m, int l) {            // att, lse; mid = res + att Wo^T
    LayerW* w = &m->w.layer[l];
    LayerActs* a = &m->acts[l];
    long N = m->N;
    int C = m->C, Hq = m->nh * m->hd;
    attention_forward(m, a);
    linear_forward(m->proj, a->att, w->wo, N, Hq, C);            // o = att Wo^T (row-parallel under TP)
    const float* o = tp_reduce(m, m->proj);
    be_copy(a->mid, a->res, m->Ns * C * sizeof(float));
    be_add(a->mid, o, m->Ns * C);
}
static void norm2_forward(Model* m, int l) {          // ln2
    LayerActs* a = &m->acts[l];
    be_rmsnorm_forward(a->ln2, a->rstd2, a->mid, m->w.layer[l].ln2, m->Ns, m->C, m->cfg.norm_eps);
}
// the MLP's rows [r0, r0 + n) of its input x [N, C] (ln2, gathered over TP under sequence parallelism): g, u, h [n, F]
static void mlp_tile_forward(Model* m, int l, const float* x, long r0, long n) {
    LayerW* w = &m->w.layer[l];
    LayerActs* a = &m->acts[l];
    int C = m->C, F = m->F;
    linear_forward(a->g, x + r0 * C, w->wg, n, C, F);
    linear_forward(a->u, x + r0 * C, w->wu, n, C, F);
    be_swiglu_forward(a->h, a->g, a->u, (size_t)n * F);
}
// rows of the tile starting at row r0
static long tile_rows(const Model* m, long r0) { return m->N - r0 < m->mlp_rows ? m->N - r0 : m->mlp_rows; }

// ---- offload = ckpt (model.h): the copy queue moves layer l's slot (l % 2) to host memory and back ----
static float* slot_of_layer(Model* m, int l) { return m->acts[l].res; }   // (res: the slot's first tensor)
static float* host_of_layer(Model* m, int l) { return m->host_acts + (size_t)l * m->kept_floats; }
// before layer l's kept tensors are written: its slot's copy to host (layer l - 2's) must have finished
static void slot_take(Model* m, int l) {
    if (!m->host_acts) return;
    int s = l % 2;
    if (m->slot_layer[s] >= 0 && m->slot_layer[s] < m->L - 2 && m->offloading) be_wait_event(m->out_done[s]);
    m->slot_layer[s] = l;
}
// layer l's kept tensors are complete: to host (the last two layers stay in their slots for the backward)
static void slot_out(Model* m, int l) {
    if (!m->host_acts || !m->offloading || l >= m->L - 2) return;
    be_copy_to_host_async(host_of_layer(m, l), slot_of_layer(m, l), m->kept_floats * sizeof(float), m->out_done[l % 2]);
}
// start bringing layer l back into its slot (after everything queued so far: the slot's previous layer is done)
static void slot_prefetch(Model* m, int l) {
    int s = l % 2;
    if (!m->host_acts || l < 0 || m->slot_layer[s] == l) return;
    be_copy_from_host_async(slot_of_layer(m, l), host_of_layer(m, l), m->kept_floats * sizeof(float), m->in_done[s]);
    m->slot_layer[s] = l;
    m->in_flight[s] = 1;
}
// layer l's kept tensors in its slot before anything queued after this reads them
static void slot_ready(Model* m, int l) {
    int s = l % 2;
    if (!m->host_acts) return;
    slot_prefetch(m, l);
    if (m->in_flight[s]) { be_wait_event(m->in_done[s]); m->in_flight[s] = 0; }
}

static void layer_forward(Model* m, int l, float* out) {
    LayerActs* a = &m->acts[l];
    int C = m->C;
    if (m->recompute == RECOMPUTE_FULL) slot_out(m, l);   // full keeps the layer's input only: complete now
    qkv_forward(m, l);
    att_forward(m, l);
    if (m->recompute == RECOMPUTE_QKV) slot_out(m, l);    // qkv also the attention output, LSE and mid residual
    if (l + 1 < m->L) zero_prefetch(m, l + 2);   // ZeRO-3: the next layer's parameters, while this MLP runs
    norm2_forward(m, l);
    const float* x = tp_input(m, a->ln2);
    for (long r0 = 0; r0 < m->N; r0 += m->mlp_rows) {   // one tile of all N rows when untiled
        long n = tile_rows(m, r0);
        mlp_tile_forward(m, l, x, r0, n);
        linear_forward(m->proj + r0 * C, a->h, m->w.layer[l].wd, n, m->F, C);   // down (row-parallel under TP)
    }
    const float* o = tp_reduce(m, m->proj);
    if (l + 1 < m->L) slot_take(m, l + 1);   // out: the next layer's input, in its slot
    be_copy(out, a->mid, m->Ns * C * sizeof(float));
    be_add(out, o, m->Ns * C);
}

// before layer l's backward: recompute the activations its mode did not keep (a tiled MLP's g, u, h: tile by tile
// in the backward)
static void layer_recompute(Model* m, int l) {
    int rc = m->recompute;
    if (rc >= RECOMPUTE_QKV) qkv_forward(m, l);
    if (rc >= RECOMPUTE_FULL) att_forward(m, l);
    if (rc >= RECOMPUTE_MLP) norm2_forward(m, l);
    if (rc >= RECOMPUTE_MLP && !m->mlp_tiled) mlp_tile_forward(m, l, tp_input(m, m->acts[l].ln2), 0, m->N);
}

void model_attention_inputs(Model* m, int l) {
    zero_gather(m, 1 + l);
    slot_ready(m, l);
    if (m->recompute >= RECOMPUTE_QKV) qkv_forward(m, l);
}

// LM head + cross-entropy over row chunks (the [N, V] logits never exist at once; under TP each rank
// holds a vocabulary slice and the row LSE and target logit are combined over the TP group). With
// grad_scale != 0 the head's backward runs right away: dW_head += dlogits^T lnf, proj = d(lnf).
static double head_forward(Model* m, float grad_scale, float* logits_out) {
    int C = m->C, V = m->Vl;
    const float* lnf = tp_input(m, m->lnf);   // every token's row (sequence parallelism: gathered over TP)
    for (long r0 = 0; r0 < m->N; r0 += m->lm_chunk) {
        int n = (int)(m->N - r0 < m->lm_chunk ? m->N - r0 : m->lm_chunk);
        const float* x = lnf + r0 * C;
        const int* tgt = m->tgt + r0;
        linear_forward(m->logits, x, m->w.head, n, C, V);
        if (logits_out) {   // only the real vocabulary columns
            float* tmp = malloc((size_t)n * V * sizeof(float));
            be_download(tmp, m->logits, (size_t)n * V * sizeof(float));
            for (int i = 0; i < n; i++)
                memcpy(logits_out + (r0 + i) * (size_t)m->V + m->v0, tmp + (size_t)i * V, m->nv * sizeof(float));
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
        if (m->want_hits) {   // greedy correctness: the target logit above every other logit of the vocabulary
            be_row_max(m->xm, m->logits, tgt, n, V, m->nv, m->v0);
            if (m->tp > 1) comm_allreduce_max(m->tp_g, m->xm, n);
            be_argmax_hit(m->hits + r0, m->xm, m->xtl, tgt, n);
        }
        if (grad_scale != 0.0f) {
            be_xent_backward(m->logits, m->xlse, tgt, n, V, m->nv, m->v0, grad_scale);
            linear_backward(m->proj + r0 * C, m->dw.head, m->logits, x, m->w.head, n, C, V, 0.0f);
        }
    }
    if (grad_scale != 0.0f) m->dlnf = tp_reduce(m, m->proj);
    be_download(m->host_losses, m->losses, m->N * sizeof(float));
    if (m->want_hits) be_download(m->host_hits, m->hits, m->N * sizeof(float));
    double sum = 0;
    for (long i = 0; i < m->N; i++) sum += m->host_losses[i];
    return sum;
}

double model_forward(Model* m, float grad_scale, float* logits_out) {
    long N = m->N;
    int C = m->C;
    // vocab-parallel: each token's row lives on one rank (summed over TP; sequence parallelism: this rank's rows)
    zero_gather(m, 0);   // ZeRO-3: the embedding (units: 0 embedding, 1 + l layer l, zu.n - 1 the rest)
    m->offloading = m->offload && grad_scale != 0.0f;   // offload: only what a backward will read
    slot_take(m, 0);
    if (!m->sp) {
        be_embedding_forward(m->acts[0].res, m->tok, m->w.wte, N, C, m->v0, m->Vl);
        tp_reduce(m, m->acts[0].res);
    } else {
        be_embedding_forward(m->proj, m->tok, m->w.wte, N, C, m->v0, m->Vl);
        be_copy(m->acts[0].res, tp_reduce(m, m->proj), (size_t)m->Ns * C * sizeof(float));
    }
    for (int l = 0; l < m->L; l++) {
        zero_gather(m, 1 + l);
        layer_forward(m, l, l + 1 < m->L ? m->acts[l + 1].res : m->res_final);
    }
    zero_gather(m, m->zu.n - 1);   // the final norm and the head (tied: the embedding's buffer still holds it)
    be_rmsnorm_forward(m->lnf, m->rstdf, m->res_final, m->w.lnf, m->Ns, C, m->cfg.norm_eps);
    return head_forward(m, grad_scale, logits_out);
}

// ---------------------------------------------------------------------------------------------------
// backward: dres holds d(loss)/d(residual stream) flowing down the layers

static void layer_backward(Model* m, int l) {
    layer_recompute(m, l);
    if (l > 0) zero_prefetch(m, l);   // ZeRO-3: layer l - 1's parameters, while this MLP's backward runs
    LayerW* w = &m->w.layer[l];
    LayerW* dw = &m->dw.layer[l];
    LayerActs* a = &m->acts[l];
    long N = m->N, Ns = m->Ns;
    int C = m->C, Hq = m->nh * m->hd, Hk = m->nkv * m->hd, F = m->F;
    // MLP: out = mid + h Wd^T, tile by tile (a tiled MLP recomputes each tile's g, u, h from ln2). dy: d(out) of every
    // row — under sequence parallelism gathered into proj, whose rows each tile reads before writing its own d(ln2)
    const float* dy = tp_input_to(m, m->dres, m->proj);
    const float* x2 = tp_input(m, a->ln2);
    for (long r0 = 0; r0 < N; r0 += m->mlp_rows) {
        long n = tile_rows(m, r0);
        if (m->mlp_tiled) mlp_tile_forward(m, l, x2, r0, n);
        linear_backward(m->dh, dw->wd, dy + r0 * C, a->h, w->wd, n, F, C, 0.0f);
        be_swiglu_backward(m->dg, m->du, m->dh, a->g, a->u, (size_t)n * F);
        linear_backward(m->proj + r0 * C, dw->wg, m->dg, x2 + r0 * C, w->wg, n, C, F, 0.0f);
        linear_backward(m->proj + r0 * C, dw->wu, m->du, x2 + r0 * C, w->wu, n, C, F, 1.0f);
    }
    be_rmsnorm_backward(m->dres, norm_grad(m, dw->ln2, 2 * l + 1), tp_reduce(m, m->proj), a->mid, w->ln2, a->rstd2, Ns, C);
    // attention: mid = res + att Wo^T
    linear_backward(m->datt, dw->wo, tp_input(m, m->dres), a->att, w->wo, N, Hq, C, 0.0f);
    attention_backward(m, a);
    be_rope_backward(m->dq, m->pos, m->rope, N, m->nh, m->hd);
    be_rope_backward(m->dk, m->pos, m->rope, N, m->nkv, m->hd);
    const float* x1 = tp_input(m, a->ln1);
    linear_backward(m->proj, dw->wq, m->dq, x1, w->wq, N, C, Hq, 0.0f);
    linear_backward(m->proj, dw->wk, m->dk, x1, w->wk, N, C, Hk, 1.0f);
    linear_backward(m->proj, dw->wv, m->dv, x1, w->wv, N, C, Hk, 1.0f);
    be_rmsnorm_backward(m->dres, norm_grad(m, dw->ln1, 2 * l), tp_reduce(m, m->proj), a->res, w->ln1, a->rstd1, Ns, C);
}

// sequence parallelism: norm weight gradients rows [i0, i0 + n) of sp_dw (row 2 l: layer l's ln1, 2 l + 1 its ln2, 2 L
// the final norm's; each TP rank's rows only) summed over TP and added to the norms' gradients
static void sp_norm_grads(Model* m, int i0, int n) {
    if (!m->sp) return;
    int C = m->C;
    comm_allreduce_sum(m->tp_g, m->sp_dw + (size_t)i0 * C, (size_t)n * C);
    for (int i = i0; i < i0 + n; i++) {
        LayerW* dw = i < 2 * m->L ? &m->dw.layer[i / 2] : NULL;
        be_add(!dw ? m->dw.lnf : i % 2 ? dw->ln2 : dw->ln1, m->sp_dw + (size_t)i * C, C);
    }
}

void model_backward(Model* m) {
    long N = m->N;
    int C = m->C, L = m->L, each = m->zero >= 2;   // each: a unit's gradient is complete after its own backward
    if (m->sp) be_zero(m->sp_dw, (2 * (size_t)L + 1) * C * sizeof(float));
    // dlnf: d(lnf) from the fused head backward
    be_zero(m->dres, m->Ns * C * sizeof(float));
    zero_gather(m, m->zu.n - 1);
    be_rmsnorm_backward(m->dres, norm_grad(m, m->dw.lnf, 2 * L), m->dlnf, m->res_final, m->w.lnf, m->rstdf, m->Ns, C);
    if (each) { sp_norm_grads(m, 2 * L, 1); zero_reduce(m, m->zu.n - 1); }   // the rest: final norm and head
    for (int l = m->L - 1; l >= 0; l--) {
        zero_gather(m, 1 + l);
        slot_ready(m, l);         // offload: this layer's kept tensors back (prefetched)
        slot_prefetch(m, l - 1);  // and the next one's on their way while this layer's backward runs
        layer_backward(m, l);
        if (each) { sp_norm_grads(m, 2 * l, 2); zero_reduce(m, 1 + l); }
    }
    be_embedding_backward(m->dw.wte, tp_input(m, m->dres), m->tok, N, C, m->v0, m->Vl);
    if (each) zero_reduce(m, 0);
    else sp_norm_grads(m, 0, 2 * L + 1);   // every norm's at once
}

double model_flops_per_token(const Config* c, int seq_len) {
    double C = c->d_model, hd = (double)c->d_model / c->n_head, F = c->d_ff;
    double per_layer = C * c->n_head * hd * 2 + C * c->n_kv_head * hd * 2 + 3 * C * F;
    double matmul_params = c->n_layer * per_layer + (double)c->vocab_size * C;   // + LM head
    return 6.0 * matmul_params + 6.0 * c->n_layer * (double)seq_len * C;
}
