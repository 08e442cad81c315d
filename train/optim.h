// optim.h — AdamW with decoupled weight decay, global-norm clipping and the LR schedule.
#pragma once
#include "model/model.h"

typedef struct {
    float *m, *v;          // moments of the owned range [lo, hi) of the parameter arena (backend memory)
    long long t;           // optimizer steps taken
    const Group* zg;       // ZeRO-1: the group the moments are sharded over (NULL: every rank owns all)
    size_t lo, hi;
    int *counts, *displs;  // every member's range, for re-assembling the parameters
} AdamW;

// zero_group: with ZeRO-1 the dp x cp group (ranks holding the same parameter shard): each rank keeps the
// moments of 1/size of the arena, updates that part and the parameters are all-gathered afterwards.
void adamw_init(AdamW* o, const Model* model, const Group* zero_group);
void adamw_free(AdamW* o);

// Learning rate of (0-based) step: linear warmup to lr over warmup_steps, then cosine to min_lr at max_steps.
float lr_at(const Config* c, long long step);

// Global L2 norm of the gradient (every tensor of the table once: TP shards are summed over the TP group,
// replicated tensors counted once).
double grad_global_norm(const Model* model);

// One AdamW step over every tensor of the parameter table with learning rate lr; gradients are first
// clipped to c->grad_clip by global norm `gnorm` (torch's clip_grad_norm_ rule). Decay only where the
// table says so.
void adamw_step(AdamW* o, Model* model, float lr, double gnorm);
