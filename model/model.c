// model.c — forward and backward orchestration over backend kernels (no tensor memory is touched here).
#include "model/model.h"
#include "backend/backend.h"
#include "model/rope.h"
#include "attention/shard.h"
#include "comm/grid.h"
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

// The activation plan: `bytes` at a time carved off a cursor (64-byte aligned pieces). With base = NULL only the size
// is planned (the pointers stay NULL).
typedef struct { char* base; size_t used; } Carver;
static void* carve(Carver* c, size_t bytes) {
    void* p = c->base ? c->base + c->used : NULL;
    c->used += (bytes + 63) / 64 * 64;
    return p;
}
static float* carve_f(Carver* c, size_t n) { return carve(c, n * sizeof(float)); }

// Which tensors a layer keeps depends on the recompute mode: the residual always; q, k, v (and norm1) unless
// qkv or full; the attention output, LSE and mid residual unless full; norm2 and gate|up only with none, and gate|up
// never with a tiled MLP (one tile's [mlp_rows, 2F] exists at a time; SwiGLU's output h is never kept: the backward
// recomputes it with SwiGLU's gradient). What is not kept lives in one shared working set (one layer's worth), written
// by the forward and rewritten by the recomputation in the backward. Memory: layers x kept + one working set +
// scratch. Tensors typed void* are in the activation dtype (adt).
enum { G_RES, G_QKV, G_ATT, G_MLP, G_TILE };
static int kept(int group, int rc, int tiled) {
    return group == G_RES || (group == G_QKV && rc < RECOMPUTE_QKV) || (group == G_ATT && rc < RECOMPUTE_FULL) ||
           (group == G_MLP && rc == RECOMPUTE_NONE) || (group == G_TILE && rc == RECOMPUTE_NONE && !tiled);
}
static void plan_layers(Model* m, Carver* c) {
    size_t N = m->N, Ns = m->Ns, C = m->C, Hq = (size_t)m->nh * m->hd, F = m->F, a = be_dtype_size(m->adt), f = 4;
    size_t R = m->mlp_rows;
    size_t Na = (size_t)m->B * m->T_at, Hqa = (size_t)m->nh_at * m->hd, Hka = (size_t)m->nkv_at * m->hd;   // attention's side
    struct { size_t off, bytes; int group; } t[] = {
        { offsetof(LayerActs, res), f * Ns * C, G_RES }, { offsetof(LayerActs, ln1), a * Ns * C, G_QKV },
        { offsetof(LayerActs, rstd1), f * Ns, G_QKV },   { offsetof(LayerActs, q), f * Na * Hqa, G_QKV },
        { offsetof(LayerActs, k), f * Na * Hka, G_QKV }, { offsetof(LayerActs, v), f * Na * Hka, G_QKV },
        { offsetof(LayerActs, att), a * N * Hq, G_ATT }, { offsetof(LayerActs, lse), f * Na * m->nh_at, G_ATT },
        { offsetof(LayerActs, mid), f * Ns * C, G_ATT }, { offsetof(LayerActs, ln2), a * Ns * C, G_MLP },
        { offsetof(LayerActs, rstd2), f * Ns, G_MLP },   { offsetof(LayerActs, gu), a * R * 2 * F, G_TILE },
    };
    int nt = sizeof t / sizeof *t, rc = m->recompute, tl = m->mlp_tiled;
    size_t start = c->used;
    void* work[sizeof t / sizeof *t];
    for (int i = 0; i < nt; i++) work[i] = kept(t[i].group, rc, tl) ? NULL : carve(c, t[i].bytes);
    m->act_work = c->used - start;
    start = c->used;
    // a layer's kept tensors are contiguous (its slot); with offload two slots serve all layers (layer l: slot l % 2)
    int slots = m->offload && m->L > 2 ? 2 : m->L;
    for (int l = 0; l < m->L; l++)
        for (int i = 0; i < nt; i++) {
            void** at = (void**)((char*)&m->acts[l] + t[i].off);
            if (!kept(t[i].group, rc, tl)) *at = work[i];
            else *at = l < slots ? carve(c, t[i].bytes) : *(void**)((char*)&m->acts[l % 2] + t[i].off);
        }
    m->act_kept = c->used - start;
    m->kept_bytes = m->act_kept / slots;
}

static size_t plan_activations(Model* m, void* base) {
    Carver cv = { base, 0 }, *c = &cv;
    size_t N = m->N, C = m->C, Hq = (size_t)m->nh * m->hd, Hk = (size_t)m->nkv * m->hd, F = m->F, a = be_dtype_size(m->adt);
    size_t L2 = 2 * (size_t)m->L + 1;
    plan_layers(m, c);
    size_t Ns = m->Ns;
    m->res_final = carve_f(c, Ns * C); m->lnf = carve(c, a * Ns * C); m->rstdf = carve_f(c, Ns);
    m->dres = carve_f(c, Ns * C); m->proj = carve_f(c, N * C);
    m->dres16 = m->adt == BE_BF16 ? carve(c, a * Ns * C) : m->dres;
    if (m->sp) { m->full = carve_f(c, N * C); m->sp_dw = carve_f(c, L2 * C); }
    m->dq = carve_f(c, N * (Hq + 2 * Hk));   // dq, dk, dv in one piece: zeroed at once
    m->dk = m->dq ? m->dq + N * Hq : NULL; m->dv = m->dk ? m->dk + N * Hk : NULL;
    m->datt = carve_f(c, N * Hq); m->D = carve_f(c, N * m->nh);
    m->qkv = carve(c, a * N * (Hq + 2 * Hk));   // the q/k/v matmul's output, and in the backward its gradient
    m->att32 = m->adt == BE_BF16 ? carve_f(c, N * Hq) : NULL;
    size_t R = m->mlp_rows;   // one MLP tile's rows (N untiled)
    m->h = carve(c, a * R * F); m->dh = carve(c, a * R * F); m->dgu = carve(c, a * R * 2 * F);
    m->dwpart = carve_f(c, L2 * m->norm_g * C);
    m->dw_off = carve(c, L2 * sizeof(long long)); m->dw_off_sp = carve(c, L2 * sizeof(long long));
    m->logits = carve_f(c, (size_t)m->lm_chunk * m->Vl);
    m->xlse = carve_f(c, m->lm_chunk); m->xtl = carve_f(c, m->lm_chunk); m->xm = carve_f(c, m->lm_chunk);
    m->losses = carve_f(c, N); m->hits = carve_f(c, N);
    m->rope = carve_f(c, (size_t)m->rope_npos * m->hd);
    m->tok = carve(c, N * sizeof(int)); m->tgt = carve(c, N * sizeof(int)); m->pos = carve(c, N * sizeof(int));
    if (m->U > 1) {   // attention's side of the all-to-all
        size_t Na = (size_t)m->B * m->T_at, Hka = (size_t)m->nkv_at * m->hd;
        m->xq = carve_f(c, N * Hq + 2 * Na * Hka);   // xq, xk, xv in one piece
        m->xk = m->xq ? m->xq + N * Hq : NULL; m->xv = m->xk ? m->xk + Na * Hka : NULL;
        m->xatt = carve_f(c, N * Hq); m->xD = carve_f(c, N * m->nh);
        m->pos_at = carve(c, Na * sizeof(int)); m->doc_at = carve(c, Na * sizeof(int));
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
int model_act_bf16(const Config* cfg, int has_bf16) {
    return has_bf16 && !strcmp(cfg->act_dtype, "bf16") && !strcmp(cfg->matmul_precision, "bf16");
}

void model_shape(Model* m, const Config* cfg, int B, int seq_len, int tp, int tp_rank, int cp, size_t shard, int act_bf16) {
    memset(m, 0, sizeof *m);
    m->adt = act_bf16 ? BE_BF16 : BE_F32;
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
    const ParamSpec* v = params_find(&m->pt, "model.layers.0.self_attn.v_proj.weight");
    const ParamSpec* up = params_find(&m->pt, "model.layers.0.mlp.up_proj.weight");
    // one matmul for q, k, v and one for gate and up: each rank's shards lie next to each other in the arena
    if (k->offset != q->offset + q->numel || v->offset != k->offset + k->numel || up->offset != gate->offset + gate->numel) {
        fprintf(stderr, "model: the parameter table does not place q, k, v (and gate, up) side by side\n");
        exit(1);
    }
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
    m->norm_g = be_norm_groups(m->Ns);
    if (m->sp && m->adt == BE_BF16 && (m->Ns * m->C) % 2) {   // tp_input gathers bf16 rows as whole floats
        fprintf(stderr, "model: act_dtype = bf16 with tp_sp needs an even d_model x tokens per TP rank (%ld x %d); "
                "use act_dtype = fp32 or an even d_model\n", m->Ns, m->C);
        exit(1);
    }
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
    m->act_bytes = plan_activations(m, NULL);
}

void model_shape_free(Model* m) { free(m->acts); params_free(&m->pt); zero_units_free(&m->zu); }

// ZeRO-2/3's unit buffers, one allocation each: the layer buffers (2 for parameters, 1 for gradients) rounded up to
// 64 floats (aligned bf16 copies), then the embedding's and the rest's
// a layer unit's buffer (ZeRO-3), rounded up to 64 floats; 0 when the arena is one unit (no sharding: no layer units)
static size_t unit_round(const Model* m) { return m->zu.n > 1 ? (m->zu.len[1] + 63) / 64 * 64 : 0; }
static size_t pbuf_floats(const Model* m) { return 2 * unit_round(m) + m->io_len; }
static size_t gbuf_floats(const Model* m) { return unit_round(m) + m->io_len; }
// the parameter and gradient memory of a ZeRO stage (floats): the arena, or the shard and the unit buffers
static size_t param_floats(const Model* m) { return m->zero == 3 ? m->zu.shard + pbuf_floats(m) : m->arena; }
static size_t grad_floats(const Model* m) { return m->zero >= 2 ? m->zu.shard + gbuf_floats(m) : m->arena; }
size_t offload_host_bytes(const Model* m) { return m->offload && m->L > 2 ? (size_t)(m->L - 2) * m->kept_bytes : 0; }

// attention's block engines (attention.h): chosen and verified on every rank; a class runs on the fast engine only where
// every rank of the job verified it (one numerics per job). The host copies of the positions and document ids the
// block calls pass are registered, so that the backend plans blocks without reading them back.
static void attention_engines(Model* m, int collective) {
    AttnRunShape rs = { m->nh_at, m->nkv_at, m->hd, m->cfg.doc_mask };
    unsigned fast = 0;
    char err[600];
    int fail = attn_engine_select(m->cfg.attn_engine, &rs, &fast, m->attn_report, sizeof m->attn_report, err, sizeof err);
    if (collective) grid_check(group_world(), fail, err);
    else if (fail) { fprintf(stderr, "model: %s\n", err); exit(1); }
    unsigned all = fast;
    for (int c = 0; c < 2 && collective; c++) {
        int here = (fast >> c) & 1, everywhere = -ctl_max(group_world(), -(double)here) > 0.5;
        if (here && !everywhere) {
            all &= ~(1u << c);
            size_t l = strlen(m->attn_report);
            snprintf(m->attn_report + l, sizeof m->attn_report - l, "\nattention engine: %s blocks: own kernels on every rank "
                     "(the fast engine failed its check on another rank)", c == ATTN_MASK_CAUSAL ? "causal" : "unmasked");
        }
    }
    attn_engine_use(all);
    size_t N = (size_t)m->N;
    if (m->apos) { attn_host_mirror(m->apos, m->hpos, N); attn_host_mirror(m->pos, m->hrpos, N); }
    else attn_host_mirror(m->pos, m->hpos, N);
    if (m->doc) attn_host_mirror(m->doc, m->hdoc, N);
    if (m->U > 1) {
        attn_host_mirror(m->pos_at, m->hpos_at, (size_t)m->B * m->T_at);
        if (m->doc) attn_host_mirror(m->doc_at, m->hdoc_at, (size_t)m->B * m->T_at);
    }
}

void model_build(Model* m, const Config* cfg, int B, int seq_len, const ModelGroups* g) {
    const Group *tp_g = g ? g->tp : NULL, *cp_g = g ? g->cp : NULL, *a2a_g = g ? g->a2a : NULL;
    const Group* ring_g = g ? (g->ring ? g->ring : g->a2a ? NULL : g->cp) : NULL;
    int tp = tp_g ? group_size(tp_g) : 1, tp_rank = tp_g ? group_rank(tp_g) : 0;
    int cp = cp_g ? group_size(cp_g) : 1, cp_rank = cp_g ? group_rank(cp_g) : 0;
    model_shape(m, cfg, B, seq_len, tp, tp_rank, cp, g && g->shard ? (size_t)group_size(g->shard) : 1,
                model_act_bf16(cfg, be_has_bf16()));
    int ua = a2a_g ? group_size(a2a_g) : 1;
    if (ua != m->U) {
        fprintf(stderr, "model: an all-to-all group of %d ranks for the all-to-all degree %d of the config\n", ua, m->U);
        exit(1);
    }
    m->tp_g = tp_g;
    m->cp_g = cp > 1 ? cp_g : NULL;
    be_set_matmul_precision(cfg->matmul_precision);   // validated with the config
    int layout = ring_layout_parse(cfg->cp_layout);
    m->cp = cp; m->cp_rank = cp_rank;
    m->lpos = host_alloc(m->T, sizeof(int));
    ring_positions(layout, cp, cp_rank, seq_len, m->lpos);
    int by_doc = cp > 1 && shard_mode_parse(cfg->cp_shard) == SHARD_DOCUMENT;   // (validated with the config)
    if (by_doc) {   // each window's tokens are dealt by document (model_set_windows)
        shard_init(&m->shard, SHARD_DOCUMENT, layout, cp, seq_len, config_shard_min(cfg), config_eod(cfg));
        m->shard_pos = host_alloc((size_t)seq_len, sizeof(int));
    }
    if (ring_g && group_size(ring_g) > 1) {   // a ring rank holds the tokens of its all-to-all group: U runs of chunks
        ring_init(&m->ring, ring_g, layout, seq_len, B, m->nkv_at * m->hd, (layout == CP_ZIGZAG ? 2 : 1) * m->U);
        ring_configure(&m->ring, by_doc, cfg->cp_prune);
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
    size_t ur = unit_round(m);
    if (m->zero == 3) {   // this rank's slices; the layers' and io's buffers filled by gathers
        m->pshard = be_alloc(m->zu.shard * sizeof(float));
        for (int u = 0; u < m->zu.n; u++) {
            size_t s = zero_slice(&m->zu, u);
            be_upload(m->pshard + m->zu.own[u], host + m->zu.off[u] + s * m->zu.rank, s * sizeof(float));
        }
        m->pbuf = be_alloc(pbuf_floats(m) * sizeof(float));
        m->punit[0] = m->pbuf; m->punit[1] = m->pbuf + ur; m->pio = m->pbuf + 2 * ur;
        m->zreq = comm_req_create();
        m->wbase = m->pbuf; m->wfloats = pbuf_floats(m);
    } else {
        m->params = be_alloc(m->arena * sizeof(float));
        be_upload(m->params, host, m->pt.total * sizeof(float));
        m->wbase = m->params; m->wfloats = m->arena;
    }
    free(host);
    for (int i = 0; i < 4; i++) m->holds[i] = -1;
    m->pending = -1;
    if (m->zero >= 2) {
        m->gshard = be_alloc(m->zu.shard * sizeof(float));
        m->gbuf = be_alloc(gbuf_floats(m) * sizeof(float));
        be_zero(m->gbuf, gbuf_floats(m) * sizeof(float));
        m->gunit = m->gbuf; m->gio = m->gbuf + ur;
        m->gbase = m->gbuf;
    } else m->gbase = m->grads = be_alloc(m->arena * sizeof(float));
    float* glay[2] = { m->gunit, m->gunit };
    bind_weights(m, &m->w, m->params, m->punit, m->pio);
    bind_weights(m, &m->dw, m->grads, glay, m->gio);
    if (m->adt == BE_BF16) m->wbf = be_alloc(m->wfloats * sizeof(uint16_t));
    model_params_changed(m);

    m->act_arena = be_alloc(m->act_bytes);
    plan_activations(m, m->act_arena);
    m->slot_layer[0] = m->slot_layer[1] = -1;
    if (m->offload && m->L > 2) {
        m->host_acts = be_host_alloc(offload_host_bytes(m));
        for (int s = 0; s < 2; s++) { m->out_done[s] = be_event_create(); m->in_done[s] = be_event_create(); }
    }
    // where each norm's weight gradient goes: its place from gbase (the gradient arena, or under ZeRO-2/3 the unit
    // buffers); with sequence parallelism first a row of sp_dw (summed over TP); i = 2 l (ln1), 2 l + 1 (ln2), 2 L (final)
    size_t L2 = 2 * (size_t)m->L + 1;
    long long* off = host_alloc(2 * L2, sizeof(long long));
    for (int l = 0; l < m->L; l++) {
        off[2 * l] = m->dw.layer[l].ln1 - m->gbase;
        off[2 * l + 1] = m->dw.layer[l].ln2 - m->gbase;
    }
    off[2 * m->L] = m->dw.lnf - m->gbase;
    for (size_t i = 0; i < L2; i++) off[L2 + i] = (long long)(i * m->C);
    be_upload(m->dw_off, off, L2 * sizeof(long long));
    be_upload(m->dw_off_sp, off + L2, L2 * sizeof(long long));
    free(off);

    float* rope = host_alloc((size_t)m->rope_npos * m->hd, sizeof(float));
    rope_table(cfg, m->hd, m->rope_npos, rope);
    be_upload(m->rope, rope, (size_t)m->rope_npos * m->hd * sizeof(float));
    free(rope);
    m->host_losses = host_alloc(m->N, sizeof(float));
    m->scal = be_alloc(4 * sizeof(double));
    m->host_hits = host_alloc(m->N, sizeof(float));
    m->htok = host_alloc(m->N, sizeof(int)); m->htgt = host_alloc(m->N, sizeof(int)); m->hpos = host_alloc(m->N, sizeof(int));
    if (cfg->doc_mask) { m->doc = be_alloc(m->N * sizeof(int)); m->hdoc = host_alloc(m->N, sizeof(int)); }
    if (cfg->doc_mask && cfg->doc_positions) { m->apos = be_alloc(m->N * sizeof(int)); m->hrpos = host_alloc(m->N, sizeof(int)); }
    attn_init(m->hd);
    attention_engines(m, g != NULL);
}

void model_free(Model* m) {
    int* mirrored[] = { m->pos, m->apos, m->doc, m->pos_at, m->doc_at };
    for (int i = 0; i < 5; i++) if (mirrored[i]) attn_host_mirror(mirrored[i], NULL, 0);   // (their memory goes)
    void* bufs[] = { m->params, m->grads, m->act_arena, m->scal, m->wbf, m->gshard, m->pshard, m->gbuf, m->pbuf };
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
    if (m->shard_pos) { shard_free(&m->shard); free(m->shard_pos); }
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
        const int* lpos = m->lpos;   // this rank's positions: the layout's, or dealt by document (every rank alike)
        if (m->shard_pos) { shard_window(&m->shard, w, m->shard_pos, NULL); lpos = m->shard_pos + (size_t)m->cp_rank * m->T; }
        for (int t = 0; t < m->T; t++) {
            int p = lpos[t];
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

ModelMemory model_memory(const Model* m) {   // (params: with the bf16 copy of the weights)
    size_t wbf = m->adt == BE_BF16 ? (m->zero == 3 ? pbuf_floats(m) : m->arena) * sizeof(uint16_t) : 0;
    ModelMemory mm = { param_floats(m) * sizeof(float) + wbf, grad_floats(m) * sizeof(float), m->act_bytes,
                       (m->have_ring ? ring_buffer_bytes(&m->ring) : 0) + (m->U > 1 ? m->a2a.cap * sizeof(float) : 0) };
    return mm;
}

void model_zero_grad(Model* m) {
    if (m->zero >= 2) be_zero(m->gshard, m->zu.shard * sizeof(float));   // (the unit buffers are zero between uses)
    else be_zero(m->grads, m->arena * sizeof(float));
}
void model_params_changed(Model* m) {
    if (m->zero == 3) zero_invalidate(m);   // each unit cast after its next gather (zero_gather)
    else if (m->wbf) be_cast(m->wbf, BE_BF16, m->params, m->arena);
}
void model_loss_reset(Model* m) { be_zero(m->scal, sizeof(double)); }
double model_loss_sum(Model* m) {
    double s;
    be_download(&s, m->scal, sizeof s);
    return s;
}
static void host_results(Model* m) {
    if (m->host_fresh) return;
    be_download(m->host_losses, m->losses, m->N * sizeof(float));
    if (m->want_hits) be_download(m->host_hits, m->hits, m->N * sizeof(float));
    m->host_fresh = 1;
}
const float* model_token_losses(Model* m) { host_results(m); return m->host_losses; }
const float* model_token_hits(Model* m) { host_results(m); return m->host_hits; }

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

// out [N, nh*hd] fp32: this rank's tokens' attention output
static void attention_forward(Model* m, LayerActs* a, float* out) {
    int Hq = m->nh * m->hd, Hqa = m->nh_at * m->hd;
    for (int b = 0; b < m->B; b++) {
        size_t r = (size_t)b * m->T, ra = (size_t)b * m->T_at;
        if (m->U == 1) { attend_forward(m, a, b, out + r * Hq, a->lse + r * m->nh); continue; }
        float* o = m->xatt + ra * Hqa;
        attend_forward(m, a, b, o, a->lse + ra * m->nh_at);
        a2a_to_tokens(&m->a2a, out + r * Hq, o, Hq, Hqa, m->U, 0);
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
    size_t Na = (size_t)m->B * m->T_at, esz = be_dtype_size(m->adt);
    float *dq = U > 1 ? m->xq : m->dq, *dk = U > 1 ? m->xk : m->dk, *dv = U > 1 ? m->xv : m->dv;
    if (!m->have_ring) be_zero(dq, Na * (Hqa + 2 * (size_t)Hka) * sizeof(float));   // the block kernel accumulates
    int acc = U > 1 && m->kv_nb < U;   // KV heads shared by several members: their dK, dV contributions are summed
    if (acc) be_zero(m->dk, 2 * m->N * Hk * sizeof(float));
    for (int b = 0; b < m->B; b++) {
        size_t r = (size_t)b * m->T, ra = (size_t)b * m->T_at;
        float* D = m->D + r * m->nh;
        be_attn_rowdot(D, m->datt + r * Hq, (const char*)a->att + r * Hq * esz, m->adt, m->T, m->nh, m->hd);
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

// Tensor parallelism. A row-parallel layer's output (and a column-parallel layer's input gradient) y [N, C] fp32 holds
// partial sums over the TP group: all-reduced (every row, returned as y), or with sequence parallelism
// reduce-scattered (returns this rank's Ns rows, inside y). A column-parallel layer's input x [.., C] of element type
// dt: as it is, or with sequence parallelism this rank's rows x [Ns, C] all-gathered into m->full [N, C].
static float* own_rows(Model* m, float* y) { return y + (size_t)m->tp_rank * m->Ns * m->C; }
static float* tp_reduce(Model* m, float* y) {
    if (m->tp == 1) return y;
    if (!m->sp) { comm_allreduce_sum(m->tp_g, y, (size_t)m->N * m->C); return y; }
    comm_reduce_scatter_sum(m->tp_g, y, (size_t)m->Ns * m->C);
    return own_rows(m, y);
}
static const void* tp_input_to(Model* m, const void* x, BeDtype dt, void* full) {   // full [N, C] (dt): where to gather
    if (!m->sp) return x;
    size_t rows = (size_t)m->Ns * m->C * be_dtype_size(dt);   // bytes of this rank's rows (a bf16 pair per float)
    be_copy((char*)full + (size_t)m->tp_rank * rows, x, rows);
    comm_allgather(m->tp_g, full, rows / sizeof(float));
    return full;
}
static const void* tp_input(Model* m, const void* x, BeDtype dt) { return tp_input_to(m, x, dt, m->full); }

// The matmuls. A weight enters as its fp32 master or, with bf16 activations, as its bf16 copy (the same offset in
// m->wbf): every operand of a matmul has the activations' type, every weight gradient is accumulated in fp32.
static const void* wop(const Model* m, const float* w) {
    return m->wbf ? (const void*)(m->wbf + (w - m->wbase)) : (const void*)w;
}
// y[N, out] (ydt) = x[N, in] W^T with W [out, in]
static void linear_forward(Model* m, void* y, BeDtype ydt, const void* x, const float* W, long N, int in, int out) {
    be_matmul_ex(y, ydt, 0, x, m->adt, 0, wop(m, W), m->adt, 0, (int)N, out, in, 0, 1, 1.0f, 0.0f);
}
// dW[out, in] += dy^T x (fp32);  dx[N, in] (dxdt; = or +=) dy W (dx NULL: none). dy [N, out] with leading dimension ldy
static void linear_backward(Model* m, void* dx, BeDtype dxdt, float* dW, const void* dy, int ldy, const void* x,
                            const float* W, long N, int in, int out, float beta_dx) {
    if (dW) be_matmul_ex(dW, BE_F32, 0, dy, m->adt, ldy, x, m->adt, 0, out, in, (int)N, 1, 0, 1.0f, 1.0f);
    if (dx) be_matmul_ex(dx, dxdt, 0, dy, m->adt, ldy, wop(m, W), m->adt, 0, (int)N, in, out, 0, 0, 1.0f, beta_dx);
}
// element offsets of activations in adt
static const void* at_rows(const Model* m, const void* x, size_t elems) { return (const char*)x + elems * be_dtype_size(m->adt); }

// The layer in three parts, so that the backward can recompute what its mode did not keep (the same calls in the same
// order: recomputed values are bit-identical to the forward's). In the forward a layer's norm1 comes with the previous
// layer's last residual add (be_residual_rmsnorm) and norm2 with its attention's residual add: `norm` = 1 when a part
// must compute its norm itself (recomputation; the first layer's norm1 is model_forward's).
static void qkv_forward(Model* m, int l, int norm) {   // ln1, then q, k, v (RoPE applied; on attention's side)
    LayerW* w = &m->w.layer[l];
    LayerActs* a = &m->acts[l];
    long N = m->N;
    int C = m->C, Hq = m->nh * m->hd, Hk = m->nkv * m->hd, U = m->U;
    // with an all-to-all, this rank's tokens go through the (then idle) gradient scratch first
    float *q = U > 1 ? m->dq : a->q, *k = U > 1 ? m->dk : a->k, *v = U > 1 ? m->dv : a->v;
    if (norm) be_rmsnorm_forward(a->ln1, m->adt, a->rstd1, a->res, w->ln1, m->Ns, C, m->cfg.norm_eps);
    const void* x = tp_input(m, a->ln1, m->adt);
    linear_forward(m, m->qkv, m->adt, x, w->wq, N, C, Hq + 2 * Hk);   // [q; k; v] lie side by side: one matmul
    be_qkv_rope(q, k, v, m->qkv, m->adt, m->pos, m->rope, (int)N, m->nh, m->nkv, m->hd);
    if (U == 1) return;
    int Hqa = m->nh_at * m->hd, Hka = m->nkv_at * m->hd;
    for (int b = 0; b < m->B; b++) {
        size_t r = (size_t)b * m->T, ra = (size_t)b * m->T_at;
        a2a_to_heads(&m->a2a, a->q + ra * Hqa, q + r * Hq, Hq, Hqa, U);
        a2a_to_heads(&m->a2a, a->k + ra * Hka, k + r * Hk, Hk, m->kv_w, m->kv_nb);
        a2a_to_heads(&m->a2a, a->v + ra * Hka, v + r * Hk, Hk, m->kv_w, m->kv_nb);
    }
}
static void att_forward(Model* m, int l) {            // att, lse; mid = res + att Wo^T with norm2 (ln2)
    LayerW* w = &m->w.layer[l];
    LayerActs* a = &m->acts[l];
    long N = m->N;
    int C = m->C, Hq = m->nh * m->hd;
    // attention's fp32 output, stored in the activations' type (with bf16: one cast, the output's store)
    float* out = m->adt == BE_F32 ? (float*)a->att : m->att32;
    attention_forward(m, a, out);
    if (m->adt != BE_F32) be_cast(a->att, m->adt, out, (size_t)N * Hq);
    linear_forward(m, m->proj, BE_F32, a->att, w->wo, N, Hq, C);       // o = att Wo^T (row-parallel under TP)
    const float* o = tp_reduce(m, m->proj);
    be_residual_rmsnorm(a->mid, a->ln2, m->adt, a->rstd2, a->res, o, w->ln2, (int)m->Ns, C, m->cfg.norm_eps);
}
// The MLP over row tiles of mlp_rows (one tile of all N rows when untiled): gate | up [n, 2F] (adt) of rows [r0, r0 + n)
// of its input x [N, C] (ln2, gathered over TP under sequence parallelism), into a->gu
static void mlp_tile_forward(Model* m, int l, const void* x, long r0, long n) {
    linear_forward(m, m->acts[l].gu, m->adt, at_rows(m, x, (size_t)r0 * m->C), m->w.layer[l].wg, n, m->C, 2 * m->F);
}
static long tile_rows(const Model* m, long r0) { return m->N - r0 < m->mlp_rows ? m->N - r0 : m->mlp_rows; }
static void mlp_inputs_forward(Model* m, int l, int norm) {   // (ln2), gate | up of all rows (untiled)
    LayerW* w = &m->w.layer[l];
    LayerActs* a = &m->acts[l];
    if (norm) be_rmsnorm_forward(a->ln2, m->adt, a->rstd2, a->mid, w->ln2, (int)m->Ns, m->C, m->cfg.norm_eps);
    if (!m->mlp_tiled) mlp_tile_forward(m, l, tp_input(m, a->ln2, m->adt), 0, m->N);   // [gate; up] side by side: one matmul
}

// ---- offload = ckpt (model.h): the copy queue moves layer l's slot (l % 2) to host memory and back ----
static void* slot_of_layer(Model* m, int l) { return m->acts[l].res; }   // (res: the slot's first tensor)
static void* host_of_layer(Model* m, int l) { return (char*)m->host_acts + (size_t)l * m->kept_bytes; }
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
    be_copy_to_host_async(host_of_layer(m, l), slot_of_layer(m, l), m->kept_bytes, m->out_done[l % 2]);
}
// start bringing layer l back into its slot (after everything queued so far: the slot's previous layer is done)
static void slot_prefetch(Model* m, int l) {
    int s = l % 2;
    if (!m->host_acts || l < 0 || m->slot_layer[s] == l) return;
    be_copy_from_host_async(slot_of_layer(m, l), host_of_layer(m, l), m->kept_bytes, m->in_done[s]);
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

// out = mid + h Wd^T, and the next norm on it: the next layer's norm1 (ln, rstd, w; in unit `next` under ZeRO-3) or the
// final norm. The MLP tile by tile: gate | up, SwiGLU and the down projection of each tile's rows.
static void layer_forward(Model* m, int l, float* out, void* ln, float* rstd, const float* wn, int next) {
    LayerActs* a = &m->acts[l];
    int C = m->C, F = m->F;
    if (m->recompute == RECOMPUTE_FULL) slot_out(m, l);   // full keeps the layer's input only: complete now
    qkv_forward(m, l, 0);
    att_forward(m, l);
    if (m->recompute == RECOMPUTE_QKV) slot_out(m, l);    // qkv also the attention output, LSE and mid residual
    if (l + 1 < m->L) zero_prefetch(m, l + 2);   // ZeRO-3: the next layer's parameters, while this MLP runs
    const void* x = tp_input(m, a->ln2, m->adt);
    for (long r0 = 0; r0 < m->N; r0 += m->mlp_rows) {
        long n = tile_rows(m, r0);
        mlp_tile_forward(m, l, x, r0, n);
        be_swiglu_forward(m->h, a->gu, m->adt, (int)n, F);
        linear_forward(m, m->proj + r0 * C, BE_F32, m->h, m->w.layer[l].wd, n, F, C);   // down (row-parallel under TP)
    }
    const float* o = tp_reduce(m, m->proj);
    zero_gather(m, next);                     // ZeRO-3: the next norm's weight
    if (l + 1 < m->L) slot_take(m, l + 1);   // out: the next layer's input, in its slot
    be_residual_rmsnorm(out, ln, m->adt, rstd, a->mid, o, wn, (int)m->Ns, C, m->cfg.norm_eps);
}

// before layer l's backward: recompute the activations its mode did not keep (a tiled MLP's gate|up: tile by tile in
// the backward)
static void layer_recompute(Model* m, int l) {
    int rc = m->recompute;
    if (rc >= RECOMPUTE_QKV) qkv_forward(m, l, 1);
    if (rc >= RECOMPUTE_FULL) att_forward(m, l);
    if (rc >= RECOMPUTE_MLP) mlp_inputs_forward(m, l, rc < RECOMPUTE_FULL);
}

void model_attention_inputs(Model* m, int l) {
    zero_gather(m, 1 + l);
    slot_ready(m, l);
    if (m->recompute >= RECOMPUTE_QKV) qkv_forward(m, l, 1);
}

// LM head + cross-entropy over row chunks (the [N, V] logits never exist at once; under TP each rank holds a
// vocabulary slice and the row LSE and target logit are combined over the TP group; without TP one kernel does the
// softmax, the loss and the gradient in one pass over each row). With grad_scale != 0 the head's backward runs right
// away: dW_head += dlogits^T lnf, proj = d(lnf).
static void head_forward(Model* m, float grad_scale, float* logits_out) {
    int C = m->C, V = m->Vl;
    const void* lnf = tp_input(m, m->lnf, m->adt);   // every token's row (sequence parallelism: gathered over TP)
    int ldd = m->adt == BE_BF16 ? 2 * V : V;          // the gradient's row stride, written over each logits row
    for (long r0 = 0; r0 < m->N; r0 += m->lm_chunk) {
        int n = (int)(m->N - r0 < m->lm_chunk ? m->N - r0 : m->lm_chunk);
        const void* x = at_rows(m, lnf, (size_t)r0 * C);
        const int* tgt = m->tgt + r0;
        linear_forward(m, m->logits, BE_F32, x, m->w.head, n, C, V);
        if (logits_out) {   // only the real vocabulary columns
            float* tmp = malloc((size_t)n * V * sizeof(float));
            be_download(tmp, m->logits, (size_t)n * V * sizeof(float));
            for (int i = 0; i < n; i++)
                memcpy(logits_out + (r0 + i) * (size_t)m->V + m->v0, tmp + (size_t)i * V, m->nv * sizeof(float));
            free(tmp);
        }
        if (m->tp == 1 && !m->want_hits)
            be_xent_fused(m->losses + r0, m->xlse, m->logits, m->adt, tgt, n, V, m->nv, m->v0, grad_scale);
        else {
            be_xent_stats(m->xlse, m->xtl, m->logits, tgt, n, V, m->nv, m->v0);
            if (m->tp > 1) {   // lse = M + log sum_r exp(lse_r - M), M = max_r lse_r; the target logit lives on one rank
                be_copy(m->xm, m->xlse, n * sizeof(float));
                comm_allreduce_max(m->tp_g, m->xm, n);
                be_exp_sub(m->xlse, m->xm, n);
                comm_allreduce_sum(m->tp_g, m->xlse, n);
                be_log_add(m->xlse, m->xlse, m->xm, n);
                comm_allreduce_sum(m->tp_g, m->xtl, n);
            }
            if (m->want_hits) {   // greedy correctness: the target logit above every other logit of the vocabulary
                be_row_max(m->xm, m->logits, tgt, n, V, m->nv, m->v0);
                if (m->tp > 1) comm_allreduce_max(m->tp_g, m->xm, n);
                be_argmax_hit(m->hits + r0, m->xm, m->xtl, tgt, n);
            }
            be_xent_finish(m->losses + r0, m->logits, m->adt, m->xlse, m->xtl, tgt, n, V, m->nv, m->v0, grad_scale);
        }
        if (grad_scale != 0.0f)
            linear_backward(m, m->proj + r0 * C, BE_F32, m->dw.head, m->logits, ldd, x, m->w.head, n, C, V, 0.0f);
    }
    if (grad_scale != 0.0f) m->dlnf = tp_reduce(m, m->proj);
    be_sum(m->scal, m->losses, (size_t)m->N);   // the step's loss, on the backend
    m->host_fresh = 0;
}

void model_forward(Model* m, float grad_scale, float* logits_out) {
    long N = m->N;
    int C = m->C;
    // vocab-parallel: each token's row lives on one rank (summed over TP; sequence parallelism: this rank's rows)
    LayerActs* a0 = &m->acts[0];
    zero_gather(m, 0);   // ZeRO-3: the embedding (units: 0 embedding, 1 + l layer l, zu.n - 1 the rest)
    m->offloading = m->offload && grad_scale != 0.0f;   // offload: only what a backward will read
    slot_take(m, 0);
    if (!m->sp) {
        be_embedding_forward(a0->res, m->tok, m->w.wte, N, C, m->v0, m->Vl);
        tp_reduce(m, a0->res);
    } else {
        be_embedding_forward(m->proj, m->tok, m->w.wte, N, C, m->v0, m->Vl);
        be_copy(a0->res, tp_reduce(m, m->proj), (size_t)m->Ns * C * sizeof(float));
    }
    zero_gather(m, 1);   // ZeRO-3: layer 0 (its norm1 here)
    be_rmsnorm_forward(a0->ln1, m->adt, a0->rstd1, a0->res, m->w.layer[0].ln1, (int)m->Ns, C, m->cfg.norm_eps);
    for (int l = 0; l < m->L; l++) {
        zero_gather(m, 1 + l);
        if (l + 1 < m->L) {
            LayerActs* n = &m->acts[l + 1];
            layer_forward(m, l, n->res, n->ln1, n->rstd1, m->w.layer[l + 1].ln1, 2 + l);
        } else   // the final norm and the head (tied: the embedding's buffer still holds it)
            layer_forward(m, l, m->res_final, m->lnf, m->rstdf, m->w.lnf, m->zu.n - 1);
        if (m->layer_done) m->layer_done(m->layer_done_ctx, l + 1, m->L);
    }
    head_forward(m, grad_scale, logits_out);
}

// ---------------------------------------------------------------------------------------------------
// backward: dres holds d(loss)/d(residual stream) flowing down the layers (fp32), dres16 the same in the activations'
// type (the matmuls' operand: each norm's backward writes both)

// a norm's backward: dres += ..., its weight gradient's partial sums into row i of m->dwpart (norm_grads adds them up)
static void norm_backward(Model* m, int i, const float* dout, const float* x, const float* w, const float* rstd) {
    be_rmsnorm_backward(m->dres, m->adt == BE_F32 ? NULL : m->dres16, m->adt, m->dwpart + (size_t)i * m->norm_g * m->C,
                        dout, x, w, rstd, (int)m->Ns, m->C);
}

static void layer_backward(Model* m, int l) {
    layer_recompute(m, l);
    if (l > 0) zero_prefetch(m, l);   // ZeRO-3: layer l - 1's parameters, while this layer's backward runs
    LayerW* w = &m->w.layer[l];
    LayerW* dw = &m->dw.layer[l];
    LayerActs* a = &m->acts[l];
    long N = m->N;
    int C = m->C, Hq = m->nh * m->hd, Hk = m->nkv * m->hd, F = m->F;
    // MLP: out = mid + h Wd^T, tile by tile (a tiled MLP recomputes each tile's gate|up from ln2); SwiGLU's backward
    // recomputes h (not kept) for Wd's gradient. dy: d(out) of every row in adt — under sequence parallelism gathered
    // into proj's last N C adt-sized elements: a tile writes its fp32 d(ln2) rows [r0, r0 + n) (bytes [4 r0 C, 4 (r0 + n)
    // C)) only after reading its own dy rows, below where any later tile's dy rows lie (from (4 - a) N C + a (r0 + n) C)
    size_t esz = be_dtype_size(m->adt);
    const void* dy = tp_input_to(m, m->dres16, m->adt, (char*)m->proj + (4 - esz) * (size_t)N * C);
    const void* x2 = tp_input(m, a->ln2, m->adt);
    for (long r0 = 0; r0 < N; r0 += m->mlp_rows) {
        long n = tile_rows(m, r0);
        const void *dyt = at_rows(m, dy, (size_t)r0 * C), *xt = at_rows(m, x2, (size_t)r0 * C);
        if (m->mlp_tiled) mlp_tile_forward(m, l, x2, r0, n);
        linear_backward(m, m->dh, m->adt, NULL, dyt, 0, NULL, w->wd, n, F, C, 0.0f);
        be_swiglu_backward(m->dgu, m->h, m->dh, a->gu, m->adt, (int)n, F);
        linear_backward(m, NULL, m->adt, dw->wd, dyt, 0, m->h, w->wd, n, F, C, 0.0f);
        linear_backward(m, m->proj + r0 * C, BE_F32, dw->wg, m->dgu, 0, xt, w->wg, n, C, 2 * F, 0.0f);   // gate | up at once
    }
    norm_backward(m, 2 * l + 1, tp_reduce(m, m->proj), a->mid, w->ln2, a->rstd2);
    // attention: mid = res + att Wo^T
    dy = tp_input(m, m->dres16, m->adt);
    linear_backward(m, m->datt, BE_F32, dw->wo, dy, 0, a->att, w->wo, N, Hq, C, 0.0f);
    attention_backward(m, a);
    be_qkv_rope_backward(m->qkv, m->adt, m->dq, m->dk, m->dv, m->pos, m->rope, (int)N, m->nh, m->nkv, m->hd);
    const void* x1 = tp_input(m, a->ln1, m->adt);
    linear_backward(m, m->proj, BE_F32, dw->wq, m->qkv, 0, x1, w->wq, N, C, Hq + 2 * Hk, 0.0f);   // q, k, v at once
    norm_backward(m, 2 * l, tp_reduce(m, m->proj), a->res, w->ln1, a->rstd1);
}

// the weight gradients of norms i0 .. i0 + n - 1 (i = 2 l: layer l's ln1, 2 l + 1 its ln2, 2 L the final norm's) from
// their partials, added to their place from gbase (sequence parallelism: every TP rank's rows, summed first)
static void norm_grads(Model* m, int i0, int n) {
    int C = m->C, G = m->norm_g;
    const float* part = m->dwpart + (size_t)i0 * G * C;
    if (!m->sp) { be_rmsnorm_dw(m->gbase, m->dw_off + i0, part, n, G, C, 1); return; }
    float* rows = m->sp_dw + (size_t)i0 * C;
    be_rmsnorm_dw(m->sp_dw, m->dw_off_sp + i0, part, n, G, C, 0);
    comm_allreduce_sum(m->tp_g, rows, (size_t)n * C);
    be_rmsnorm_dw(m->gbase, m->dw_off + i0, rows, n, 1, C, 1);
}

void model_backward(Model* m) {
    long N = m->N;
    int C = m->C, L = m->L, each = m->zero >= 2;   // each: a unit's gradient is complete after its own backward
    // dlnf: d(lnf) from the fused head backward
    be_zero(m->dres, m->Ns * C * sizeof(float));
    zero_gather(m, m->zu.n - 1);
    norm_backward(m, 2 * L, m->dlnf, m->res_final, m->w.lnf, m->rstdf);
    if (each) { norm_grads(m, 2 * L, 1); zero_reduce(m, m->zu.n - 1); }   // the rest: final norm and head
    for (int l = m->L - 1; l >= 0; l--) {
        zero_gather(m, 1 + l);
        slot_ready(m, l);         // offload: this layer's kept tensors back (prefetched)
        slot_prefetch(m, l - 1);  // and the next one's on their way while this layer's backward runs
        layer_backward(m, l);
        if (each) { norm_grads(m, 2 * l, 2); zero_reduce(m, 1 + l); }   // the layer's unit complete with its norms
    }
    be_embedding_backward(m->dw.wte, tp_input(m, m->dres, BE_F32), m->tok, N, C, m->v0, m->Vl);
    if (each) zero_reduce(m, 0);
    else norm_grads(m, 0, 2 * L + 1);   // every norm's at once, once per micro-batch
}

double model_flops_per_token(const Config* c, int seq_len) {
    double C = c->d_model, hd = (double)c->d_model / c->n_head, F = c->d_ff;
    double per_layer = C * c->n_head * hd * 2 + C * c->n_kv_head * hd * 2 + 3 * C * F;
    double matmul_params = c->n_layer * per_layer + (double)c->vocab_size * C;   // + LM head
    return 6.0 * matmul_params + 6.0 * c->n_layer * (double)seq_len * C;
}
