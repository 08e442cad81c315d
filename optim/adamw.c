// adamw.c — AdamW over the parameter table (see adamw.h).
#include "optim/adamw.h"
#include "backend/backend.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void zero_shard(size_t total, size_t arena, int size, int rank, size_t* shard, size_t* lo, size_t* hi) {
    *shard = arena / size;
    size_t a = *shard * rank, b = a + *shard;
    *lo = a < total ? a : total;
    *hi = b < total ? b : total;
}

int adamw_owned(const AdamW* o, const ParamSpec* p, size_t* a, size_t* b) {
    *a = p->offset > o->lo ? p->offset : o->lo;
    *b = p->offset + p->numel < o->hi ? p->offset + p->numel : o->hi;
    return *a < *b;
}

void adamw_init(AdamW* o, const Model* model, const Group* replicas, int zero) {
    memset(o, 0, sizeof *o);
    size_t total = model->pt.total;
    o->rg = replicas;
    o->zg = zero && replicas && group_size(replicas) > 1 ? replicas : NULL;
    o->lo = 0; o->hi = total; o->shard = total;
    if (o->zg) {
        if (model->arena % group_size(o->zg)) {
            fprintf(stderr, "adamw: the model's arena (%zu) is not padded to a multiple of the ZeRO group (%d)\n",
                    model->arena, group_size(o->zg));
            exit(1);
        }
        zero_shard(total, model->arena, group_size(o->zg), group_rank(o->zg), &o->shard, &o->lo, &o->hi);
    }
    o->m = be_alloc(o->shard * sizeof(float));
    o->v = be_alloc(o->shard * sizeof(float));
    o->gscale = be_alloc(sizeof(float));
    o->seg = calloc(model->pt.n, sizeof(BeSegment));
    o->useg = calloc(model->pt.n, sizeof(BeSegment));
    for (int i = 0; i < model->pt.n; i++) {
        const ParamSpec* p = &model->pt.p[i];
        size_t a, b;
        if (!adamw_owned(o, p, &a, &b)) continue;
        o->seg[o->nseg++] = (BeSegment){ a, b - a, p->split == SPLIT_REPLICATED };
        o->useg[o->nuseg++] = (BeSegment){ a - o->lo, b - a, p->decay };
    }
}

void adamw_free(AdamW* o) {
    be_free(o->m); be_free(o->v); be_free(o->gscale);
    free(o->seg); free(o->useg);
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
    if (!o->rg || group_size(o->rg) == 1) return;
    if (o->zg) comm_reduce_scatter_sum(o->zg, model->grads, o->shard);
    else comm_allreduce_sum(o->rg, model->grads, model->pt.total);
}

void adamw_clip(AdamW* o, Model* model, float grad_clip) {
    double* s = model->scal + 1;   // [0] TP-sharded tensors, [1] replicated tensors
    be_sumsq_segments(s, 2, model->grads, o->seg, o->nseg);
    if (o->zg) comm_allreduce_sum_f64(o->zg, s, 2);
    if (model->tp > 1) comm_allreduce_sum_f64(model->tp_g, s, 1);
    be_clip_scale(o->gscale, s, 2, grad_clip);
}

double adamw_norm_of(const double* scal) { return sqrt(scal[1] + scal[2]); }

void adamw_step(AdamW* o, Model* model, const AdamWHyper* h) {
    o->t++;
    float bc1 = 1.0f - powf(h->beta1, (float)o->t), bc2 = 1.0f - powf(h->beta2, (float)o->t);
    // every tensor's owned part in one call (its own decay)
    be_adamw(model->params + o->lo, model->grads + o->lo, o->m, o->v, o->useg, o->nuseg, h->lr, h->beta1, h->beta2, h->eps,
             h->weight_decay, bc1, bc2, o->gscale);
    if (o->zg) comm_allgather(o->zg, model->params, o->shard);
    model_params_changed(model);   // bf16 activations: the weights' bf16 copy, once per step
}
