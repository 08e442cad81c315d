// adamw.h — AdamW with decoupled weight decay, global-norm clipping, the LR schedule, and the reduction of
// gradients over the replicas (plain all-reduce, or ZeRO, model/zero.h: reduce-scatter + all-gather).
#pragma once
#include "model/model.h"

typedef struct {            // the hyperparameters of one step
    float lr, beta1, beta2, eps, weight_decay;
    float grad_clip;        // clip the global gradient norm to this (<= 0: no clipping)
} AdamWHyper;

// A run of update segments whose parameters and gradients lie at a constant distance from their moments' offsets
// (the packed shards' order: without ZeRO one run; ZeRO-1 and 2 one per unit, the parameters in the arena; ZeRO-3
// one): be_adamw over useg[s0 .. s0 + n) with the parameters at p + dp and the gradient at g + dg (element offsets from
// the arena or the packed shard)
typedef struct { long long dp, dg; int s0, n; } AdamWRun;

typedef struct {
    float *m, *v;           // moments of the owned slices (backend memory, a packed shard of `shard` elements; without
                            // ZeRO the whole arena: every rank owns all)
    long long t;            // optimizer steps taken
    const Group* rg;        // the replicas: ranks holding the same parameter shard (dp x cp), gradients summed over it
    const Group* zg;        // ZeRO: the model's shard group (= rg), else NULL (every rank owns all)
    int stage;              // the model's ZeRO stage (0 without zg)
    const ZeroUnits* zu;    // the model's units: which slices this rank owns
    size_t shard;           // elements of m and v
    BeSegment* seg;         // grad-norm segments: every tensor's owned part in the gradient the step reads (the arena,
    int nseg;               // or under ZeRO-2/3 the model's gshard); class 0 TP-sharded, 1 replicated
    float* gscale;          // backend [1]: the clipping factor of the step (adamw_clip)
    BeSegment* useg;        // the update's segments: each tensor's owned part at its offset in the moments (packed
    int nuseg;              // shards), cls 1 = decayed
    AdamWRun* run;          // the update's runs: one be_adamw call each
    int nrun;
} AdamW;

// The owned part [a, b) (arena offsets) of tensor p; 0 when this rank owns none of it.
int adamw_owned(const AdamW* o, const ParamSpec* p, size_t* a, size_t* b);
// Where owned arena element e lies in the moments (and the other packed shards).
size_t adamw_index(const AdamW* o, size_t e);

// replicas: the dp x cp group; zero: the model's ZeRO stage (model_build with the shard group = replicas; stage 0 or
// one replica: nothing sharded).
void adamw_init(AdamW* o, const Model* model, const Group* replicas, int zero);
void adamw_free(AdamW* o);

// Learning rate of (0-based) step: linear warmup to lr over warmup_steps, then lr_schedule: cosine or linear to
// min_lr at lr_horizon (0: max_steps; min_lr after it), wsd (lr, then linear to min_lr over the last lr_cooldown
// steps; 0: max_steps / 5) or constant.
float lr_at(const Config* c, long long step);
// The step's hyperparameters from a config and the step's learning rate.
AdamWHyper adamw_hyper(const Config* c, float lr);

// Sum the gradients over the replicas: all-reduce; with ZeRO-1 a reduce-scatter per unit (each rank receives the
// sum of its own slices only — half the traffic); ZeRO-2/3 reduced them in the backward (nothing to do).
void adamw_reduce_grads(AdamW* o, Model* model);
// The global L2 norm of the (reduced) gradient and the clipping factor, on the backend without a read-back: the sums
// of squares of every tensor of the table once (TP shards summed over the TP group, replicated tensors counted once,
// ZeRO shards over the replicas; under ZeRO-2/3 of the packed gshard) into model->scal[1] (TP-sharded) and [2]
// (replicated), and o->gscale = min(1, grad_clip / (norm + 1e-6)) (torch's clip_grad_norm_ rule; 1 when grad_clip <= 0).
void adamw_clip(AdamW* o, Model* model, float grad_clip);
// The norm from the step's scalars (model->scal as downloaded: sqrt([1] + [2])).
double adamw_norm_of(const double* scal);
// One AdamW step over the owned part of every tensor, its gradient scaled by o->gscale (adamw_clip first); decay
// only where the table says so; one be_adamw call per run. With ZeRO-1 and 2 the parameters are all-gathered
// afterwards (unit by unit); ZeRO-3 updates its slices only.
void adamw_step(AdamW* o, Model* model, const AdamWHyper* h);
