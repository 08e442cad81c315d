// model.h — the Llama-style model graph, written once for every backend.
//
// tokens -> embed -> n_layer x [RMSNorm -> attention(GQA, RoPE) -> +res; RMSNorm -> SwiGLU MLP -> +res]
//        -> RMSNorm -> LM head -> cross-entropy.
// All tensors live in backend memory; model.c only orchestrates backend kernels. The model owns its
// ring (context parallelism) and reads its sharding (tensor parallelism) from the parameter table.
#pragma once
#include <stdint.h>
#include "model/config.h"
#include "model/params.h"
#include "model/zero.h"
#include "backend/backend.h"
#include "attention/a2a.h"
#include "attention/ring.h"
#include "attention/shard.h"
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

typedef struct {   // per-layer activations saved for backward, N = B*T rows (attention's side: B*T_at rows;
                   // the residual stream and the norms under sequence parallelism: Ns rows). fp32, or in the
                   // activation dtype m->adt where the type is void* (bf16 with act_dtype = bf16 on a GPU)
    float *res;    // [Ns, C] input of the layer (residual stream)
    void *ln1;     // [Ns, C] (adt)
    float *rstd1;  // [Ns]
    float *q;      // attention's side [B*T_at, nh_at*hd] after RoPE (= [N, nh*hd] without all-to-all)
    float *k, *v;  // attention's side [B*T_at, nkv_at*hd] (k after RoPE)
    void *att;     // [N, nh*hd] attention output (this rank's tokens; adt)
    float *lse;    // attention's side [B*T_at, nh_at]
    float *mid;    // [Ns, C] residual after attention
    void *ln2;     // [Ns, C] (adt)
    float *rstd2;  // [Ns]
    void *gu;      // [N, 2F] (adt): gate | up, one matmul's output (h = silu(g) u is recomputed in the backward);
                   // with a tiled MLP [mlp_rows, 2F]: one tile's, never kept
} LayerActs;

typedef struct {
    Config cfg;
    // dimensions (local to this rank's TP shard: nh, nkv, F, Vl are per-rank)
    int C, L, nh, nkv, hd, F, V, Vl, v0;
    int B, T;                  // sequences per micro-batch, tokens per sequence on this rank
    int seq_len;               // tokens per whole sequence (T * cp)
    Ring ring;                 // context parallelism: the ring this rank's sequences are split over
    int have_ring;             // a ring of more than one rank
    const Group* cp_g;         // every rank of this rank's sequences (NULL: cp = 1)
    // context parallelism by all-to-all (cp_comm = a2a | a2a+ring; U = 1 without): attention sees T_at = U T tokens
    // of each sequence for nh_at query and nkv_at KV heads; the KV side is kv_nb blocks of kv_w columns, each taken by
    // U / kv_nb members (more members than KV heads: a KV head replicated)
    int U;
    A2A a2a;
    int T_at, nh_at, nkv_at, kv_nb, kv_w;
    int *pos_at, *doc_at;      // [B, T_at] backend: positions and document ids attention sees (U > 1)
    int *hpos_at, *hdoc_at;    // host copies
    float *xq, *xk, *xv, *xatt, *xD;   // attention's side scratch: dq, dk, dv; out (forward) / dout (backward); D
    int* lpos;                 // [T] positions of this rank's tokens within a sequence (the ring layout)
    int cp, cp_rank;           // the ranks of a sequence, this rank's index among them
    CpShard shard;               // cp_shard = document: how each window's tokens are dealt (attention/shard.h)
    int* shard_pos;            // [cp, T] every cp rank's positions of the window being set (NULL: the layout's)
    const Group* tp_g;         // tensor parallelism: the ranks that split every layer (NULL: none)
    int tp, tp_rank;
    int nv;                    // real (unpadded) vocabulary columns of this rank's slice
    long N;                    // B*T
    int sp;                    // sequence parallelism (tp_sp with tp > 1): the residual stream, the norms and
    long Ns;                   // what they keep hold this rank's Ns = N / tp rows [tp_rank Ns, (tp_rank + 1) Ns)
    void* full;                // sp: [N, C] a column-parallel layer's input gathered over TP (fp32 or adt)
    float* sp_dw;              // sp: [(2 n_layer + 1), C] this micro-batch's norm weight gradients before the TP sum
    float* dlnf;               // d(final norm output): this rank's rows of the LM head's input gradient
    BeDtype adt;               // the activations' element type (model_act_bf16)
    uint16_t* wbf;             // adt bf16: the bf16 copy of the fp32 weights every matmul reads (wbase, wfloats: the
                               // parameter arena, refreshed by model_params_changed once per optimizer step; ZeRO-3: the
                               // gathered unit buffers, each cast after its gather); NULL with fp32
    float* wbase;              // the fp32 memory wbf copies: params, or under ZeRO-3 the unit buffers (pbuf)
    size_t wfloats;
    int norm_g;                // row groups of the norms' weight-gradient partials (be_tuning()->norm_groups)
    float* dwpart;             // [(2 n_layer + 1), norm_g, C] this micro-batch's norm weight-gradient partials
    long long *dw_off, *dw_off_sp;   // backend [(2 n_layer + 1)]: each norm's gradient from gbase; in sp_dw
    int lm_chunk;              // rows per LM-head chunk (bounds logits memory; the backend's tuning)
    ParamTable pt;
    size_t arena;              // elements of the parameter and gradient arenas: pt.total (under ZeRO each unit padded)
    float *params, *grads;     // arenas of `arena` floats; NULL when sharded (grads: ZeRO-2, 3; params: ZeRO-3)
    float* gbase;              // where the gradient tensors are bound: grads, or under ZeRO-2/3 the unit buffers (gbuf)
    Weights w, dw;
    // ZeRO over zg (model/zero.h)
    int zero;                  // stage: 0 none, 1 the moments, 2 also the gradients, 3 also the parameters sharded
    const Group* zg;           // the dp x cp ranks the arena is sharded over (NULL: none)
    ZeroUnits zu;
    float *gshard, *pshard;    // stage >= 2: this rank's slices of the reduced gradients [zu.shard]; stage 3: of the
                               // parameters (the optimizer's)
    float *gbuf, *gunit, *gio; // stage >= 2: one allocation (gbuf) of the gradient of the layer in the backward (gunit,
                               // one layer unit) and of the embedding and the rest (gio: io_len; the rest at io_rest) —
                               // each zero again after its reduce-scatter
    float *pbuf, *punit[2], *pio;   // stage 3: one allocation (pbuf) of the gathered parameters of two layers (layer l in
                               // punit[l % 2]) and of the embedding and the rest (pio)
    size_t io_len, io_rest;    // io_rest = 0: untied head, the embedding and the rest take turns in one buffer
    int holds[4];              // stage 3: the unit each parameter buffer holds (-1: none): punit[0], punit[1], the
                               // embedding's, the rest's (= the embedding's buffer when io_rest = 0)
    int pending;               // stage 3: the buffer whose gather is in flight (-1: none), completed by zreq
    CommReq* zreq;
    // activations: one allocation carved into named tensors
    void* act_arena;
    size_t act_bytes;          // planned activation + scratch memory of this rank
    int recompute;             // RECOMPUTE_* (config.h): what the layers keep
    // offload = ckpt: the layers' kept tensors (contiguous per layer, kept_bytes in their dtypes) live in two device
    // slots, layer l's in slot l % 2, and every layer's but the last two (still in their slots when the backward starts)
    // is copied to pinned host memory after the forward writes it and back one layer ahead in the backward (the copy
    // queue)
    int offload;
    size_t kept_bytes;         // one layer's kept tensors in its slot
    void* host_acts;           // [(L - 2) kept_bytes] be_host_alloc
    BeEvent *out_done[2], *in_done[2];   // per slot: its last copy to host / from host
    int slot_layer[2];         // the layer whose kept tensors a slot holds (-1: none)
    int in_flight[2];          // a copy from host into the slot not yet waited for
    int offloading;            // this forward copies out (a backward follows: grad_scale != 0)
    long mlp_rows;             // rows per MLP tile: mlp_tile, or N (untiled)
    int mlp_tiled;             // mlp_rows < N: the MLP runs tile by tile; gate|up and h are recomputed per tile in the backward
    size_t act_kept, act_work; // bytes: the layers' kept activations; the shared working set of one layer
    LayerActs* acts;           // [n_layer]
    float *res_final, *rstdf;            // [Ns, C], [Ns]
    void *lnf;                           // [Ns, C] (adt)
    // scratch shared by all layers. proj: a row-parallel projection's output before the residual add
    // (forward), the gradient arriving at a norm's output (backward); qkv: the q/k/v matmul's output (forward) and
    // its gradient (backward) [N, (nh + 2 nkv) hd] (adt); att32: attention's fp32 output before its store in adt
    // (adt bf16 only); h, dh [mlp_rows, F], dgu [mlp_rows, 2F] (adt): one MLP tile's SwiGLU output and gradients;
    // dres16: the residual gradient in adt (a matmul operand; = dres with fp32); dq, dk, dv contiguous
    float *proj, *dres, *dq, *dk, *dv, *datt, *D, *att32;
    void *qkv, *h, *dres16, *dh, *dgu;
    float *logits, *xlse, *xtl, *xm, *losses; // [chunk, Vl] (the gradient in adt over each row's first bytes), [chunk] x 3, [N]
    float* rope;               // [rope_npos, hd] cos|sin table
    int rope_npos;
    int *tok, *tgt, *pos;      // [N] backend copies of the batch (pos: RoPE's positions)
    int *htok, *htgt, *hpos;   // [N] host: the batch as last set
    int *doc, *hdoc;           // doc_mask: [N] document ids (backend, host); NULL without doc_mask
    int *apos, *hrpos;         // doc_positions: [N] attention's positions (backend: the positions given), RoPE's
                               // positions (host: restarted at each document); NULL otherwise (apos = pos)
    float* host_losses;        // [N] host (downloaded when asked: model_token_losses)
    // progress inside one forward pass (evaluation of a long window): called after each layer with (ctx, layers
    // done, n_layer); NULL: none
    void (*layer_done)(void* ctx, int done, int n_layer);
    void* layer_done_ctx;
    int want_hits;             // evaluation: also record whether each target is the greedy prediction
    float *hits, *host_hits;   // [N] backend / host: 1 = the target is the argmax of the logits
    int host_fresh;            // host_losses (and host_hits) hold the last forward's
    double* scal;              // backend [4]: the step's scalars, read with one download at its end: [0] the sum of
                               // token losses since model_loss_reset, [1] [2] the gradient's sums of squares (adamw_clip)
    char attn_report[2048];    // attention's block engines, one line per class (attn_engine_select; the same on every rank)
} Model;

typedef struct {
    const Group* tp;      // tensor parallelism: the ranks that split every layer (NULL: none)
    const Group* cp;      // context parallelism: the ranks each sequence is split over (NULL: none)
    const Group* shard;   // ZeRO (cfg->zero): the arena is sharded over this group (NULL: not sharded)
    const Group* a2a;     // the all-to-all group inside cp (cp_comm = a2a | a2a+ring), else NULL
    const Group* ring;    // the ring: cp without all-to-all, the ring across all-to-all groups with it (NULL: none)
} ModelGroups;

// Build tables, arenas, the RoPE table and activations for micro-batches of B sequences of seq_len
// tokens. Parameters are initialised from cfg->seed (layout independent). With context parallelism (g->cp of
// more than one rank) each sequence is split over it in cfg->cp_layout and this rank holds T = seq_len / cp
// tokens; attention runs around the ring (g->ring: collective, it calibrates its transfer time), or after an
// all-to-all inside g->a2a (Ulysses) locally or around a ring of such groups (cfg->cp_comm). g = NULL: one
// process.
// Under TP (Megatron): q/k/v and gate/up are column-parallel (this rank's heads / F slice), o_proj and
// down_proj row-parallel followed by an all-reduce over tp_g; embedding and LM head are vocab-parallel
// with a vocab-parallel cross-entropy (the [tokens x vocab] logits never exist on one rank).
// ZeRO (cfg->zero over g->shard, model/zero.h): the arena in units; stage 2 keeps only this rank's slices of the
// reduced gradients (reduce-scattered over g->shard inside model_backward), stage 3 only its slices of the
// parameters (all-gathered unit by unit inside model_forward and model_backward).
void model_build(Model* m, const Config* cfg, int B, int seq_len, const ModelGroups* g);
// The same shapes, table and activation plan for TP rank tp_rank of tp, a ring of cp, ZeRO (cfg->zero) over shard
// ranks, activations in bf16 or fp32 (act_bf16: model_act_bf16 of the backend that will run it) — sizes only, no
// backend memory (free with model_shape_free).
void model_shape(Model* m, const Config* cfg, int B, int seq_len, int tp, int tp_rank, int cp, size_t shard, int act_bf16);
void model_shape_free(Model* m);
// Whether activations are stored in bf16: act_dtype = bf16 with matmul_precision = bf16 on a backend that has bf16
// (has_bf16: be_has_bf16(), or the planned device's); otherwise fp32.
int model_act_bf16(const Config* cfg, int has_bf16);
// The parameters changed (an optimizer step, a checkpoint loaded): refresh their bf16 copy (adt bf16; else nothing);
// ZeRO-3: the gathered unit buffers are stale (gathered and cast again where next used).
void model_params_changed(Model* m);
void model_free(Model* m);

// Set the batch: tokens, targets (-1 = ignored) and positions, each [B*T] host int32 (this rank's tokens).
// With a ring this is collective over the ring (positions are exchanged). With doc_mask each token attends only
// to its own document: documents start at the eod token (config_eod), ids from the whole sequence (the tokens
// are exchanged over the ring too); with doc_positions RoPE and attention see positions restarted at each
// document (attention and model_positions keep the positions given).
void model_set_batch(Model* m, const int* tokens, const int* targets, const int* positions);
// Set the batch from B windows of seq_len + 1 tokens (window b at win + b * stride): this rank's tokens
// at its positions p (the layout's, or with cp_shard = document those attention/shard.h deals it), targets p + 1 (or -1 where score is given and score[p] == 0), positions p. A negative
// window entry (PACK_PAD: padding) is ignored as a target and read as the eod token (0 without one) as an input.
void model_set_windows(Model* m, const int32_t* win, size_t stride, const unsigned char* score);
// The batch as last set (host [B*T]): this rank's positions and targets.
const int* model_positions(const Model* m);
const int* model_targets(const Model* m);

// Forward. Adds the sum of the token losses of this micro-batch to the loss accumulator on the backend (m->scal[0]:
// nothing is read back, no host synchronisation; model_loss_sum or the step's scalars read it).
// grad_scale != 0: also runs the fused LM-head backward with dloss_i = grad_scale (so model_backward can
// follow); grad_scale = 1 / (valid targets of the whole step) gives the gradient of the mean loss.
// logits_out (host, [N, V], may be NULL): receives the logits of this rank's vocabulary slice (its columns; the
// others are left as they are).
void model_forward(Model* m, float grad_scale, float* logits_out);
// The loss accumulator: zeroed; read (one download: waits for the device)
void model_loss_reset(Model* m);
double model_loss_sum(Model* m);
// Backward after model_forward(grad_scale != 0): accumulates (+=) into the gradient arena.
void model_backward(Model* m);
// Zero the gradient arena.
void model_zero_grad(Model* m);
// The per-token losses of the last forward, host [N] (0 for ignored targets; downloaded on the first call).
const float* model_token_losses(Model* m);
// With m->want_hits set before model_forward: per token 1 when the target is the argmax (greedy) prediction.
const float* model_token_hits(Model* m);
// Matmul FLOPs per token for throughput (6 * matmul params + 6 * n_layer * T * C, see docs/benchmarks.md)
double model_flops_per_token(const Config* c, int seq_len);

// Make layer l's attention inputs (q, k, v after RoPE) current when the recompute mode does not keep them
// (a forward leaves the last layer's in the shared working set; a backward leaves layer 0's).
void model_attention_inputs(Model* m, int l);

// Ring statistics so far (zero without a ring); 1 when the model has a ring.
int model_ring_stats(const Model* m, RingStats* st);
typedef struct { size_t params, grads, acts, ring; } ModelMemory;   // bytes of this rank's arenas (ring: the ring's and
                                                                     // the all-to-all's buffers)
ModelMemory model_memory(const Model* m);
// offload = ckpt: the pinned host memory of the layers' kept tensors (0 without offload)
size_t offload_host_bytes(const Model* m);

// ---- ZeRO inside the graph (model/zero.c); each is a no-op below its stage ----
// stage 3: unit u's parameters gathered into its buffer (waits for a gather in flight) and, with bf16 weights, cast to
// its bf16 copy; zero_prefetch starts it
void zero_gather(Model* m, int u);
void zero_prefetch(Model* m, int u);
// stage 3: the gathered buffers are stale (the parameter shards changed: an update, a load)
void zero_invalidate(Model* m);
// stage >= 2: unit u's gradient of this micro-batch is complete: reduce-scattered over zg, this rank's slice added to
// gshard, the buffer zeroed
void zero_reduce(Model* m, int u);
// stage >= 1: the gradient arena reduce-scattered unit by unit (each rank's slices hold the sum); the parameter arena
// all-gathered unit by unit
void zero_reduce_arena(Model* m, float* arena);
void zero_allgather_arena(Model* m, float* arena);
// A whole arena on every rank (new backend memory, be_free it) from every rank's slices: src holds this rank's slices
// at their arena offsets (packed = 0) or as a packed shard buffer (packed = 1: moments, gshard, pshard). Without
// sharding a copy of src. For dumps.
float* zero_whole(const Model* m, const float* src, int packed);
