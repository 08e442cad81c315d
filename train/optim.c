// optim.c — AdamW over the parameter table.
#include "train/optim.h"
#include "model/backend.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void adamw_init(AdamW* o, const Model* model, const Group* zero_group) {
    memset(o, 0, sizeof *o);
    size_t total = model->pt.total;
    o->zg = zero_group && zero_group->size > 1 ? zero_group : NULL;
    o->lo = 0; o->hi = total;
    if (o->zg) {
        int n = o->zg->size;
        o->counts = malloc(n * sizeof(int)); o->displs = malloc(n * sizeof(int));
        for (int i = 0; i < n; i++) {
            size_t a = total * i / n, b = total * (i + 1) / n;
            o->displs[i] = (int)a; o->counts[i] = (int)(b - a);
        }
        o->lo = o->displs[o->zg->rank]; o->hi = o->lo + o->counts[o->zg->rank];
    }
    o->m = be_alloc((o->hi - o->lo) * sizeof(float));
    o->v = be_alloc((o->hi - o->lo) * sizeof(float));
}

void adamw_free(AdamW* o) { be_free(o->m); be_free(o->v); free(o->counts); free(o->displs); }

float lr_at(const Config* c, long long step) {
    if (step < c->warmup_steps) return c->lr * (float)(step + 1) / (float)c->warmup_steps;
    long long decay = c->max_steps - c->warmup_steps;
    if (decay <= 0) return c->lr;
    double frac = (double)(step - c->warmup_steps) / (double)decay;
    if (frac > 1) frac = 1;
    return (float)(c->min_lr + 0.5 * (1.0 + cos(M_PI * frac)) * (c->lr - c->min_lr));
}

double grad_global_norm(const Model* model) {
    double sharded = 0, replicated = 0;
    for (int i = 0; i < model->pt.n; i++) {
        const ParamSpec* p = &model->pt.p[i];
        double s = be_sumsq(model->grads + p->offset, p->numel);
        if (p->split == SPLIT_REPLICATED) replicated += s; else sharded += s;
    }
    if (model->tp > 1) sharded = comm_sum_double(model->tp_g, sharded);
    return sqrt(sharded + replicated);
}

void adamw_step(AdamW* o, Model* model, float lr, double gnorm) {
    const Config* c = &model->cfg;
    o->t++;
    float bc1 = 1.0f - powf(c->beta1, (float)o->t), bc2 = 1.0f - powf(c->beta2, (float)o->t);
    float gscale = 1.0f;
    if (c->grad_clip > 0) {
        double coef = c->grad_clip / (gnorm + 1e-6);
        if (coef < 1.0) gscale = (float)coef;
    }
    for (int i = 0; i < model->pt.n; i++) {   // each tensor's part inside the owned range
        const ParamSpec* p = &model->pt.p[i];
        size_t a = p->offset > o->lo ? p->offset : o->lo, b = p->offset + p->numel < o->hi ? p->offset + p->numel : o->hi;
        if (a >= b) continue;
        be_adamw(model->params + a, model->grads + a, o->m + (a - o->lo), o->v + (a - o->lo), b - a, lr,
                 c->beta1, c->beta2, c->adam_eps, p->decay ? c->weight_decay : 0.0f, bc1, bc2, gscale);
    }
    if (o->zg) comm_allgatherv(o->zg, model->params, o->counts, o->displs);
}
