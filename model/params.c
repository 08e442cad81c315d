// params.c — building the parameter table and the layout-independent initialisation.
#include "common/util.h"
#include "model/params.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add(ParamTable* t, const char* name, long rows, long cols, int ndim, Split split, int decay,
                Init init, float std) {
    ParamSpec* s = &t->p[t->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = ndim; s->shape[0] = rows; s->shape[1] = cols;
    s->split = split; s->decay = decay; s->init = init; s->std = std;
    s->lshape[0] = rows; s->lshape[1] = cols;
    switch (split) {
    case SPLIT_REPLICATED: break;
    case SPLIT_ROWS: s->lshape[0] = rows / t->tp; s->row0 = s->lshape[0] * t->tp_rank; break;
    case SPLIT_COLS: s->lshape[1] = cols / t->tp; s->col0 = s->lshape[1] * t->tp_rank; break;
    case SPLIT_VOCAB: s->lshape[0] = t->vocab_padded / t->tp; s->row0 = s->lshape[0] * t->tp_rank; break;
    }
    s->numel = (size_t)s->lshape[0] * s->lshape[1];
    s->offset = t->total;
    t->total += s->numel;
}

void params_build(ParamTable* t, const Config* c, int tp, int tp_rank) {
    memset(t, 0, sizeof *t);
    t->tp = tp; t->tp_rank = tp_rank;
    t->vocab_padded = (c->vocab_size + tp - 1) / tp * tp;
    t->p = calloc(3 + 9 * (size_t)c->n_layer, sizeof(ParamSpec));
    if (!t->p) { fprintf(stderr, "params: out of memory\n"); exit(1); }
    long C = c->d_model, hd = c->d_model / c->n_head, F = c->d_ff, V = c->vocab_size;
    long Hq = c->n_head * hd, Hk = c->n_kv_head * hd;
    float std = c->init_std, std_out = c->init_std / sqrtf(2.0f * c->n_layer);
    char nm[96];
    add(t, "model.embed_tokens.weight", V, C, 2, SPLIT_VOCAB, 1, INIT_NORMAL, std);
    for (int l = 0; l < c->n_layer; l++) {
#define L(suffix) (snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix), nm)
        add(t, L("input_layernorm.weight"), C, 1, 1, SPLIT_REPLICATED, 0, INIT_ONES, 0);
        add(t, L("self_attn.q_proj.weight"), Hq, C, 2, SPLIT_ROWS, 1, INIT_NORMAL, std);
        add(t, L("self_attn.k_proj.weight"), Hk, C, 2, SPLIT_ROWS, 1, INIT_NORMAL, std);
        add(t, L("self_attn.v_proj.weight"), Hk, C, 2, SPLIT_ROWS, 1, INIT_NORMAL, std);
        add(t, L("self_attn.o_proj.weight"), C, Hq, 2, SPLIT_COLS, 1, INIT_NORMAL, std_out);
        add(t, L("post_attention_layernorm.weight"), C, 1, 1, SPLIT_REPLICATED, 0, INIT_ONES, 0);
        add(t, L("mlp.gate_proj.weight"), F, C, 2, SPLIT_ROWS, 1, INIT_NORMAL, std);
        add(t, L("mlp.up_proj.weight"), F, C, 2, SPLIT_ROWS, 1, INIT_NORMAL, std);
        add(t, L("mlp.down_proj.weight"), C, F, 2, SPLIT_COLS, 1, INIT_NORMAL, std_out);
#undef L
    }
    add(t, "model.norm.weight", C, 1, 1, SPLIT_REPLICATED, 0, INIT_ONES, 0);
    if (!c->tie_embeddings) add(t, "lm_head.weight", V, C, 2, SPLIT_VOCAB, 1, INIT_NORMAL, std);
}

void params_free(ParamTable* t) { free(t->p); memset(t, 0, sizeof *t); }

const ParamSpec* params_find(const ParamTable* t, const char* name) {
    for (int i = 0; i < t->n; i++) if (strcmp(t->p[i].name, name) == 0) return &t->p[i];
    return NULL;
}

static uint64_t name_key(uint64_t seed, const char* name) { return mix64(seed ^ mix64(fnv1a64(name))); }

// uniform in (0, 1) from the top 53 bits
static double uniform(uint64_t key, uint64_t counter) {
    return ((double)(mix64(key ^ mix64(counter)) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double normal_from_key(uint64_t key, uint64_t index) {
    double u1 = uniform(key, 2 * index), u2 = uniform(key, 2 * index + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);   // Box-Muller
}

double params_normal(uint64_t seed, const char* name, uint64_t index) {
    return normal_from_key(name_key(seed, name), index);
}

void params_init(const ParamTable* t, uint64_t seed, float* host) {
    for (int i = 0; i < t->n; i++) {
        const ParamSpec* s = &t->p[i];
        float* out = host + s->offset;
        uint64_t key = name_key(seed, s->name);
        #pragma omp parallel for schedule(static)
        for (long r = 0; r < s->lshape[0]; r++) {
            long gr = s->row0 + r;
            for (long cidx = 0; cidx < s->lshape[1]; cidx++) {
                long gc = s->col0 + cidx;
                float val;
                if (gr >= s->shape[0]) val = 0.0f;                       // padded vocab row
                else if (s->init == INIT_ONES) val = 1.0f;
                else val = (float)(s->std * normal_from_key(key, (uint64_t)(gr * s->shape[1] + gc)));
                out[r * s->lshape[1] + cidx] = val;
            }
        }
    }
}
