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
    o->gscale = be_alloc(sizeof(float));
    o->seg = calloc(model->pt.n, sizeof(BeSegment));
    o->useg = calloc(model->pt.n, sizeof(BeSegment));
    o->run = calloc(model->pt.n, sizeof(AdamWRun));
    for (int i = 0; i < model->pt.n; i++) {
        const ParamSpec* p = &model->pt.p[i];
        size_t a, b;
        if (!adamw_owned(o, p, &a, &b)) continue;
        // k: in the moments (packed); the parameters at a (arena) or k (ZeRO-3's pshard), the gradient at a or k (gshard)
        long long k = (long long)adamw_index(o, a), dp = (o->stage == 3 ? k : (long long)a) - k;
        long long dg = (o->stage >= 2 ? k : (long long)a) - k;
        o->seg[o->nseg++] = (BeSegment){ o->stage >= 2 ? (size_t)k : a, b - a, p->split == SPLIT_REPLICATED };
        AdamWRun* r = o->nrun ? &o->run[o->nrun - 1] : NULL;
        if (!r || r->dp != dp || r->dg != dg) { r = &o->run[o->nrun++]; *r = (AdamWRun){ dp, dg, o->nuseg, 0 }; }
        o->useg[o->nuseg++] = (BeSegment){ (size_t)k, b - a, p->decay };
        r->n++;
    }
}

void adamw_free(AdamW* o) {
    be_free(o->m); be_free(o->v); be_free(o->gscale);
    free(o->seg); free(o->useg); free(o->run);
    memset(o, 0, sizeof *o);
}

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

void adamw_clip(AdamW* o, Model* model, float grad_clip) {
    double* s = model->scal + 1;   // [0] TP-sharded tensors, [1] replicated tensors
    be_sumsq_segments(s, 2, o->stage >= 2 ? model->gshard : model->grads, o->seg, o->nseg);
    if (o->zg) comm_allreduce_sum_f64(o->zg, s, 2);
    if (model->tp > 1) comm_allreduce_sum_f64(model->tp_g, s, 1);
    be_clip_scale(o->gscale, s, 2, grad_clip);
}

double adamw_norm_of(const double* scal) { return sqrt(scal[1] + scal[2]); }

void adamw_step(AdamW* o, Model* model, const AdamWHyper* h) {
    o->t++;
    float bc1 = 1.0f - powf(h->beta1, (float)o->t), bc2 = 1.0f - powf(h->beta2, (float)o->t);
    // every tensor's owned part (its own decay), one call per run: the parameters and the gradient rebased so that
    // the segments' moment offsets address them
    float* prm = o->stage == 3 ? model->pshard : model->params;
    const float* g = o->stage >= 2 ? model->gshard : model->grads;
    for (int i = 0; i < o->nrun; i++) {
        const AdamWRun* r = &o->run[i];
        be_adamw(prm + r->dp, g + r->dg, o->m, o->v, o->useg + r->s0, r->n, h->lr, h->beta1, h->beta2, h->eps,
                 h->weight_decay, bc1, bc2, o->gscale);
    }
    if (o->stage < 3 && o->zg) zero_allgather_arena(model, model->params);
    model_params_changed(model);   // bf16 weights: their copy, once per step (ZeRO-3: the gathered buffers stale)
}
