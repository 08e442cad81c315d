// a2a.h — the all-to-all of context parallelism (DeepSpeed-Ulysses): the U ranks of an all-to-all group each hold
// T tokens of a sequence for all heads; one all-to-all gives each the U * T tokens of the group for 1/U of the
// heads (attention then runs on them: locally, or around a ring of such groups), and one brings the result back.
//
// Rows of the attention side are the members' tokens in member order: rows [u T, (u + 1) T) are member u's
// tokens (so their positions and document ids are the members' gathered the same way). Columns: the exchanged
// tensor is nb blocks of w columns; member j takes block j * nb / U — every block to exactly one member when
// nb = U (query heads, KV heads when there are at least U of them), or one KV head to U / nb consecutive members
// when there are fewer KV heads than members (GQA: the KV head of their query heads). The way back adds the
// contributions of members sharing a block (dK, dV), in member order.
#pragma once
#include <stddef.h>
#include "comm/comm.h"

typedef struct {
    const Group* g;
    int U, r;          // members, this rank's index
    int T;             // tokens per member per sequence
    float* buf;        // packing scratch: [U, T, widest] floats of backend memory
    size_t cap;        // its floats
} A2A;

// Scratch for exchanges of rows up to `widest` floats on the attention side (collective: none).
void a2a_init(A2A* x, const Group* g, int T, int widest);
void a2a_free(A2A* x);
size_t a2a_buffer_bytes_for(int U, int T, int widest);   // the scratch a2a_init allocates (the planner)

// src [T, ld] (this rank's tokens: nb blocks of w columns) -> dst [U T, w] (every member's tokens, this rank's
// block). Collective over the group.
void a2a_to_heads(A2A* x, float* dst, const float* src, int ld, int w, int nb);
// src [U T, w] (every member's tokens, this rank's block) -> dst [T, ld]: member u's part of the own tokens lands
// in block u * nb / U, overwriting it (accumulate = 0; needs nb = U) or added to it (accumulate = 1; members
// sharing a block summed in member order). Collective over the group.
void a2a_to_tokens(A2A* x, float* dst, const float* src, int ld, int w, int nb, int accumulate);
