// optim.h — AdamW with decoupled weight decay, global-norm clipping and the LR schedule.
#pragma once
#include "model/model.h"

typedef struct {
    float *m, *v;          // moments, backend arenas shaped like the parameter arena
    long long t;           // optimizer steps taken
} AdamW;

void adamw_init(AdamW* o, const Model* model);
void adamw_free(AdamW* o);

// Learning rate of (0-based) step: linear warmup to lr over warmup_steps, then cosine to min_lr at max_steps.
float lr_at(const Config* c, long long step);

// Global L2 norm of the gradient arena (over every tensor of the table).
double grad_global_norm(const Model* model);

// One AdamW step over every tensor of the parameter table with learning rate lr; gradients are first
// clipped to c->grad_clip by global norm `gnorm` (torch's clip_grad_norm_ rule). Decay only where the
// table says so.
void adamw_step(AdamW* o, Model* model, float lr, double gnorm);
