// model.h — the Llama-style model graph, written once for every backend.
//
// tokens -> embed -> n_layer x [RMSNorm -> attention(GQA, RoPE) -> +res; RMSNorm -> SwiGLU MLP -> +res]
//        -> RMSNorm -> LM head -> cross-entropy.
// All tensors live in backend memory; this file only orchestrates backend kernels.
#pragma once
#include <stdint.h>
#include "model/config.h"
#include "model/params.h"
#include "attention/ring.h"
#include "comm/comm.h"

typedef struct {   // pointers into the parameter (or gradient) arena for one layer
    float *ln1, *wq, *wk, *wv, *wo, *ln2, *wg, *wu, *wd;
} LayerW;

typedef struct {   // the weights (or their gradients) as named pointers
    float* wte;    // [Vl, C]
    LayerW* layer; // [n_layer]
    float* lnf;    // [C]
    float* head;   // [Vl, C] (== wte when tied)
} Weights;

typedef struct {   // per-layer activations saved for backward, N = B*T rows
    float *res;    // [N, C] input of the layer (residual stream)
    float *ln1;    // [N, C]
    float *rstd1;  // [N]
    float *q;      // [N, nh*hd] after RoPE
    float *k, *v;  // [N, nkv*hd] (k after RoPE)
    float *att;    // [N, nh*hd] attention output
    float *lse;    // [N, nh]
    float *mid;    // [N, C] residual after attention
    float *ln2;    // [N, C]
    float *rstd2;  // [N]
    float *g, *u, *h; // [N, F]
} LayerActs;

typedef struct {
    Config cfg;
    // dimensions (local to this rank's TP shard: nh, nkv, F, Vl are per-rank)
    int C, L, nh, nkv, hd, F, V, Vl, v0;
    int B, T;                  // sequences per micro-batch, tokens per sequence on this rank
    Ring* ring;                // context parallelism: the ring this rank's sequences are split over (or NULL)
    const Group* tp_g;         // tensor parallelism: the ranks that split every layer (NULL: none)
    int tp, tp_rank;
    int nv;                    // real (unpadded) vocabulary columns of this rank's slice
    long N;                    // B*T
    int lm_chunk;              // rows per LM-head chunk (bounds logits memory)
    ParamTable pt;
    float *params, *grads;     // arenas of pt.total floats
    Weights w, dw;
    // activations: one allocation carved into named tensors
    float* act_arena;
    size_t act_bytes;          // planned activation + scratch memory of this rank
    LayerActs* acts;           // [n_layer]
    float *res_final, *lnf, *rstdf;      // [N, C], [N, C], [N]
    // scratch for backward (shared by all layers)
    float *dres, *dtmp, *dq, *dk, *dv, *datt, *D, *dg, *du, *dh;
    float *logits, *xlse, *xtl, *xm, *losses; // [chunk, Vl], [chunk] x 3, [N]
    float* rope;               // [rope_npos, hd] cos|sin table
    int rope_npos;
    int *tok, *tgt, *pos;      // [N] backend copies of the batch
    float* host_losses;        // [N] host
    int want_hits;             // evaluation: also record whether each target is the greedy prediction
    float *hits, *host_hits;   // [N] backend / host: 1 = the target is the argmax of the logits
} Model;

// Build tables, arenas, the RoPE table and activations for micro-batches of B sequences of T tokens on
// this rank (with a ring, T = seq_len / cp: this rank's share). Parameters are initialised from cfg->seed
// (layout independent). tp_g = NULL without tensor parallelism; ring = NULL without context parallelism.
// Under TP (Megatron): q/k/v and gate/up are column-parallel (this rank's heads / F slice), o_proj and
// down_proj row-parallel followed by an all-reduce over tp_g; embedding and LM head are vocab-parallel
// with a vocab-parallel cross-entropy (the [tokens x vocab] logits never exist on one rank).
void model_build(Model* m, const Config* cfg, int B, int T, const Group* tp_g, Ring* ring);
void model_free(Model* m);

// Set the batch: tokens, targets (-1 = ignored) and positions, each [B*T] host int32 (this rank's tokens).
// With a ring this is collective over the ring (positions are exchanged).
void model_set_batch(Model* m, const int* tokens, const int* targets, const int* positions);

// Forward. Returns the SUM of the token losses of this micro-batch (host double).
// grad_scale != 0: also runs the fused LM-head backward with dloss_i = grad_scale (so model_backward can
// follow); grad_scale = 1 / (valid targets of the whole step) gives the gradient of the mean loss.
// logits_out (host, [N, V], may be NULL; one TP rank only): receives the logits.
double model_forward(Model* m, float grad_scale, float* logits_out);
// Backward after model_forward(grad_scale != 0): accumulates (+=) into the gradient arena.
void model_backward(Model* m);
// Zero the gradient arena.
void model_zero_grad(Model* m);
// The per-token losses of the last forward, host [N] (0 for ignored targets).
const float* model_token_losses(const Model* m);
// With m->want_hits set before model_forward: per token 1 when the target is the argmax (greedy) prediction.
const float* model_token_hits(const Model* m);
// Matmul FLOPs per token for throughput (6 * matmul params + 6 * n_layer * T * C, see README)
double model_flops_per_token(const Config* c, int seq_len);
