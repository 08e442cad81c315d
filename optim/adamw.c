// adamw.c — AdamW over the parameter table (see adamw.h).
#include "optim/adamw.h"
#include "backend/backend.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int adamw_owned(const AdamW* o, const ParamSpec* p, size_t* a, size_t* b) { return zero_owned(o->zu, p, a, b); }
size_t adamw_index(const AdamW* o, size_t e) { return zero_index(o->zu, e); }

void adamw_init(AdamW* o, const Model* model, const Group* replicas, int zero) {
    memset(o, 0, sizeof *o);
    o->rg = replicas;
    o->zg = model->zg;
    o->stage = model->zero;
    o->zu = &model->zu;
    if (zero && replicas && group_size(replicas) > 1 && (!o->zg || group_size(o->zg) != group_size(replicas))) {
        fprintf(stderr, "adamw: ZeRO over %d replicas needs the model built with that shard group\n", group_size(replicas));
        exit(1);
    }
    o->shard = o->zu->shard;
    o->m = be_alloc(o->shard * sizeof(float));
    o->v = be_alloc(o->shard * sizeof(float));
    o->seg = calloc(model->pt.n, sizeof(BeSegment));
    for (int i = 0; i < model->pt.n; i++) {
        const ParamSpec* p = &model->pt.p[i];
        size_t a, b;
        if (adamw_owned(o, p, &a, &b))
            o->seg[o->nseg++] = (BeSegment){ o->stage >= 2 ? adamw_index(o, a) : a, b - a, p->split == SPLIT_REPLICATED };
    }
}

void adamw_free(AdamW* o) { be_free(o->m); be_free(o->v); free(o->seg); memset(o, 0, sizeof *o); }

float lr_at(const Config* c, long long step) {
    if (step < c->warmup_steps) return c->lr * (float)(step + 1) / (float)c->warmup_steps;
    if (!strcmp(c->lr_schedule, "constant")) return c->lr;
    if (!strcmp(c->lr_schedule, "wsd")) {   // stable at lr, then linear to min_lr over the last `cool` steps
        long long cool = c->lr_cooldown > 0 ? c->lr_cooldown : c->max_steps / 5, start = c->max_steps - cool;
        if (start < c->warmup_steps) start = c->warmup_steps;
        if (step < start || c->max_steps <= start) return c->lr;
        double frac = (double)(step - start + 1) / (double)(c->max_steps - start);
        if (frac > 1) frac = 1;
        return (float)(c->lr + frac * (c->min_lr - c->lr));
    }
    long long end = c->lr_horizon > 0 ? c->lr_horizon : c->max_steps, decay = end - c->warmup_steps;
    if (decay <= 0) return c->lr;
    double frac = (double)(step - c->warmup_steps) / (double)decay;
    if (frac > 1) frac = 1;
    if (!strcmp(c->lr_schedule, "linear")) return (float)(c->lr + frac * (c->min_lr - c->lr));
    return (float)(c->min_lr + 0.5 * (1.0 + cos(M_PI * frac)) * (c->lr - c->min_lr));
}

AdamWHyper adamw_hyper(const Config* c, float lr) {
    return (AdamWHyper){ .lr = lr, .beta1 = c->beta1, .beta2 = c->beta2, .eps = c->adam_eps,
                         .weight_decay = c->weight_decay, .grad_clip = c->grad_clip };
}

void adamw_reduce_grads(AdamW* o, Model* model) {
    if (!o->rg || group_size(o->rg) == 1 || o->stage >= 2) return;
    if (o->zg) zero_reduce_arena(model, model->grads);
    else comm_allreduce_sum(o->rg, model->grads, model->pt.total);
}

double adamw_grad_norm(const AdamW* o, const Model* model) {
    double s[2];   // [0] TP-sharded tensors, [1] replicated tensors
    be_sumsq_segments(s, 2, o->stage >= 2 ? model->gshard : model->grads, o->seg, o->nseg);
    if (o->zg) ctl_sum_f64(o->zg, s, 2);
    if (model->tp > 1) s[0] = ctl_sum(model->tp_g, s[0]);
    return sqrt(s[0] + s[1]);
}

void adamw_step(AdamW* o, Model* model, const AdamWHyper* h, double gnorm) {
    o->t++;
    float bc1 = 1.0f - powf(h->beta1, (float)o->t), bc2 = 1.0f - powf(h->beta2, (float)o->t);
    float gscale = 1.0f;
    if (h->grad_clip > 0) {
        double coef = h->grad_clip / (gnorm + 1e-6);
        if (coef < 1.0) gscale = (float)coef;
    }
    for (int i = 0; i < model->pt.n; i++) {   // each tensor's owned part
        const ParamSpec* p = &model->pt.p[i];
        size_t a, b;
        if (!adamw_owned(o, p, &a, &b)) continue;
        size_t k = adamw_index(o, a);   // in the packed shards
        float* prm = o->stage == 3 ? model->pshard + k : model->params + a;
        const float* g = o->stage >= 2 ? model->gshard + k : model->grads + a;
        be_adamw(prm, g, o->m + k, o->v + k, b - a, h->lr, h->beta1, h->beta2, h->eps, p->decay ? h->weight_decay : 0.0f,
                 bc1, bc2, gscale);
    }
    if (o->stage == 3) zero_invalidate(model);
    else if (o->zg) zero_allgather_arena(model, model->params);
}
