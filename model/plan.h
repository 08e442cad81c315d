// plan.h — the capacity planner: the memory, communication and FLOPs of one training step per rank, from
// the same parameter table and activation plan that model_build allocates (model_shape) and the same ZeRO
// arithmetic as the optimizer (model/zero.h). build/plan prints it; build/train checks it before allocating.
#pragma once
#include <stddef.h>
#include "model/config.h"

typedef struct {
    int tp, cp, dp, zero, micro_batch;   // the layout (micro_batch sequences per forward)
    const char* backend;                 // "cpu" | "cuda": the backend's workspace estimate
    double link_gbs;                     // ring link bandwidth per direction, GB/s (also the dp x cp collectives')
    double tflops;                       // attention compute rate, TFLOP/s
    double peak_tflops, mfu;             // the step's time model: matmul FLOPs at mfu x peak (0: no time estimates)
    double pcie_gbs;                     // the host link per direction, GB/s (offload copies)
} PlanLayout;

typedef struct {
    // bytes per rank
    double params, grads, moments;       // the arenas, or under ZeRO the shards and unit buffers
    double acts_kept;                    // every layer's kept activations
    double acts_work;                    // the one-layer working set of recomputed tensors
    double acts_scratch;                 // gradients in flight, LM-head chunk, RoPE table, batch
    double ring;                         // K/V and dK/dV double buffers
    double workspace;                    // the backend's own (CUDA: cuBLAS + bf16 attention copies; CPU ~0)
    double total;                        // device memory
    double host;                         // pinned host memory (offload = ckpt: the layers' saved tensors)
    // at the layout's rates (peak_tflops > 0): one layer's forward and backward (with its recomputation) per
    // micro-batch; the offload copy of one layer's saved tensors over the host link; the copies' time not hidden
    // behind a layer (per step: each offloaded layer's copy out against the next layer's forward, back against a
    // layer's backward); the step: executed FLOPs + dp x cp traffic at link_gbs + exposed offload copies
    double layer_fwd_s, layer_bwd_s, offload_xfer_s, offload_exposed_s, step_s;
    // per step per rank
    double ring_sent;                    // bytes this rank sends around its ring (forward + backward + recompute)
    double ring_msgs;                    // and as messages (hops)
    double a2a_sent, a2a_msgs;           // bytes and messages of its all-to-alls (cp_comm = a2a | a2a+ring)
    double tp_payload;                   // bytes all-reduced over the TP group (traffic ~ 2 (tp-1)/tp x this; with
                                         // tp_sp the same bytes as all-gathers and reduce-scatters)
    double dp_sent, dp_msgs;             // bytes and messages this rank sends over dp x cp: the gradients' all-reduce, or
                                         // ZeRO's reduce-scatters and all-gathers (comm.h's counting; model/zero.h)
    double flops_model, flops_exec;      // model FLOPs (6N + attention) and executed with recomputation
    // one ring hop: its transfer time at link_gbs and the attention work it overlaps at tflops
    double hop_xfer_s, hop_compute_s;
    int accum;                           // micro-batches per step per rank
} Plan;

// seq_len tokens per sequence, c->batch_size sequences per step, c->recompute. 0, or 1 with one line in err
// (a layout that does not divide the config).
int plan_step(Plan* p, const Config* c, const PlanLayout* l, int seq_len, char* err, size_t errlen);
// The longest seq_len (a multiple of the layout's chunking, at most limit) whose plan fits in mem_bytes of device
// memory and host_bytes of pinned host memory (c's recompute, mlp_tile, offload; l's zero); 0 when none fits.
int plan_longest(const Config* c, const PlanLayout* l, double mem_bytes, double host_bytes, int limit);
