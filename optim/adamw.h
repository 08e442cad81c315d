// adamw.h — AdamW with decoupled weight decay, global-norm clipping, the LR schedule, and the reduction of
// gradients over the replicas (plain all-reduce, or ZeRO-1: reduce-scatter + all-gather).
#pragma once
#include "model/model.h"

typedef struct {            // the hyperparameters of one step
    float lr, beta1, beta2, eps, weight_decay;
    float grad_clip;        // clip the global gradient norm to this (<= 0: no clipping)
} AdamWHyper;

typedef struct {
    float *m, *v;           // moments of the owned shard (backend memory, `shard` elements)
    long long t;            // optimizer steps taken
    const Group* rg;        // the replicas: ranks holding the same parameter shard (dp x cp), gradients summed over it
    const Group* zg;        // ZeRO-1: = rg when the moments are sharded over it, else NULL (every rank owns all)
    size_t shard;           // elements per member (the model's padded arena = shard * members under ZeRO-1)
    size_t lo, hi;          // the owned part of the arena's real elements [lo, hi)
    BeSegment* seg;         // grad-norm segments: every tensor's owned part; class 0 TP-sharded, 1 replicated
    int nseg;
    float* gscale;          // backend [1]: the clipping factor of the step (adamw_clip)
    BeSegment* useg;        // the update's segments: each tensor's owned part, offsets from lo, cls 1 = decayed
    int nuseg;
} AdamW;

// The ZeRO-1 shard arithmetic: an arena of `total` real elements in a padded arena of `arena` elements
// (a multiple of size) split into equal shards; rank's owned real range is [lo, hi).
void zero_shard(size_t total, size_t arena, int size, int rank, size_t* shard, size_t* lo, size_t* hi);
// The owned part [a, b) (arena offsets) of tensor p; 0 when this rank owns none of it.
int adamw_owned(const AdamW* o, const ParamSpec* p, size_t* a, size_t* b);

// replicas: the dp x cp group; zero: shard the moments over it (ZeRO-1; needs the model's arenas padded
// to a multiple of its size — model_build's shard group).
void adamw_init(AdamW* o, const Model* model, const Group* replicas, int zero);
void adamw_free(AdamW* o);

// Learning rate of (0-based) step: linear warmup to lr over warmup_steps, then lr_schedule: cosine or linear to
// min_lr at lr_horizon (0: max_steps; min_lr after it), wsd (lr, then linear to min_lr over the last lr_cooldown
// steps; 0: max_steps / 5) or constant.
float lr_at(const Config* c, long long step);
// The step's hyperparameters from a config and the step's learning rate.
AdamWHyper adamw_hyper(const Config* c, float lr);

// Sum the gradients over the replicas: all-reduce; with ZeRO-1 a reduce-scatter (each rank receives the
// sum of its own shard only — half the traffic).
void adamw_reduce_grads(AdamW* o, Model* model);
// The global L2 norm of the (reduced) gradient and the clipping factor, on the backend without a read-back: the sums
// of squares of every tensor of the table once (TP shards summed over the TP group, replicated tensors counted once,
// ZeRO-1 shards over the replicas) into model->scal[1] (TP-sharded) and [2] (replicated), and o->gscale =
// min(1, grad_clip / (norm + 1e-6)) (torch's clip_grad_norm_ rule; 1 when grad_clip <= 0).
void adamw_clip(AdamW* o, Model* model, float grad_clip);
// The norm from the step's scalars (model->scal as downloaded: sqrt([1] + [2])).
double adamw_norm_of(const double* scal);
// One AdamW step over the owned part of every tensor, its gradient scaled by o->gscale (adamw_clip first); decay
// only where the table says so. With ZeRO-1 the parameters are all-gathered afterwards.
void adamw_step(AdamW* o, Model* model, const AdamWHyper* h);
