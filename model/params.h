// params.h — the parameter table: the single source of truth for every model tensor.
//
// Each entry: HF Llama name, logical shape, how tensor parallelism splits it, whether AdamW decays it,
// how it is initialised, and where this rank's shard sits in the parameter arena. Allocation, init,
// the optimizer, gradient reduction, sharding and checkpoints all iterate over this table.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "model/config.h"

typedef enum {
    SPLIT_REPLICATED = 0, // every TP rank holds the whole tensor (norm weights)
    SPLIT_ROWS,           // split along dim 0 = output features (column-parallel linear: q/k/v/gate/up)
    SPLIT_COLS,           // split along dim 1 = input features (row-parallel linear: o_proj, down_proj)
    SPLIT_VOCAB,          // split along dim 0 = vocabulary rows, padded to a multiple of tp (embed, lm_head)
} Split;

typedef enum { INIT_NORMAL = 0, INIT_ONES } Init;

typedef struct {
    char name[96];        // HF name, e.g. model.layers.3.self_attn.q_proj.weight
    int ndim;             // 1 or 2
    long shape[2];        // logical (full) shape; shape[1] = 1 for 1-D
    Split split;
    int decay;            // 1: AdamW weight decay applies (2-D weights)
    Init init;
    float std;            // INIT_NORMAL standard deviation
    long lshape[2];       // this rank's shard shape
    long row0, col0;      // where the shard starts in the logical tensor
    size_t offset;        // element offset of the shard in the arena
    size_t numel;         // lshape[0] * lshape[1]
} ParamSpec;

typedef struct {
    ParamSpec* p;
    int n;
    size_t total;         // elements of this rank's arena
    int tp, tp_rank;
    long vocab_padded;    // vocab rows after padding to a multiple of tp
} ParamTable;

// Build the table for a config and this rank's TP position (tp = 1, tp_rank = 0 for one process).
// Order: embed, per layer (input_layernorm, q, k, v, o, post_attention_layernorm, gate, up, down), norm, lm_head.
void params_build(ParamTable* t, const Config* c, int tp, int tp_rank);
void params_free(ParamTable* t);
const ParamSpec* params_find(const ParamTable* t, const char* name);

// Fill host[t->total] with this rank's shard of the initial weights. Every element is a pure function of
// (seed, tensor name, logical element index): identical for any layout. Padded vocab rows are 0.
void params_init(const ParamTable* t, uint64_t seed, float* host);

// The counter-based generator behind params_init: a standard normal from (seed, name, index).
double params_normal(uint64_t seed, const char* name, uint64_t index);
