// optim.c — AdamW over the parameter table.
#include "train/optim.h"
#include "model/backend.h"
#include <math.h>

void adamw_init(AdamW* o, const Model* model) {
    o->m = be_alloc(model->pt.total * sizeof(float));
    o->v = be_alloc(model->pt.total * sizeof(float));
    o->t = 0;
}

void adamw_free(AdamW* o) { be_free(o->m); be_free(o->v); }

float lr_at(const Config* c, long long step) {
    if (step < c->warmup_steps) return c->lr * (float)(step + 1) / (float)c->warmup_steps;
    long long decay = c->max_steps - c->warmup_steps;
    if (decay <= 0) return c->lr;
    double frac = (double)(step - c->warmup_steps) / (double)decay;
    if (frac > 1) frac = 1;
    return (float)(c->min_lr + 0.5 * (1.0 + cos(M_PI * frac)) * (c->lr - c->min_lr));
}

double grad_global_norm(const Model* model) {
    double s = 0;
    for (int i = 0; i < model->pt.n; i++) {
        const ParamSpec* p = &model->pt.p[i];
        s += be_sumsq(model->grads + p->offset, p->numel);
    }
    return sqrt(s);
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
    for (int i = 0; i < model->pt.n; i++) {
        const ParamSpec* p = &model->pt.p[i];
        size_t off = p->offset;
        be_adamw(model->params + off, model->grads + off, o->m + off, o->v + off, p->numel, lr,
                 c->beta1, c->beta2, c->adam_eps, p->decay ? c->weight_decay : 0.0f, bc1, bc2, gscale);
    }
}
