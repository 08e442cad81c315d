// zero.h — ZeRO over the dp x cp ranks that hold the same parameters (a TP rank's replicas).
//
// The parameter arena is cut into units — the embedding, each layer, the rest (final norm and an untied LM head) —
// each padded to a multiple of the group's size P and split into P equal slices; member r owns slice r of every
// unit. A packed shard buffer holds a rank's slices of every unit one after another (zero_index maps an owned
// arena element into it).
//   stage 1: the AdamW moments are packed shards; gradients are reduce-scattered unit by unit after the step's
//            backward (each rank keeps the sum of its slices), parameters all-gathered after the update;
//   stage 2: also the gradients: each unit is reduce-scattered as soon as a micro-batch's backward has finished it,
//            and only the rank's slices are kept (added up over micro-batches); one unit's full gradient exists
//            at a time (plus the embedding's and the rest's, which the head fills during the forward);
//   stage 3: also the parameters: each unit is all-gathered into a buffer right before it is used (forward, and
//            again in the backward), the next layer's gather started before this layer's MLP, and the buffer
//            reused (two layer buffers, one for the embedding and the rest); nothing is gathered after the update.
// Units, slices and the owned ranges are the same for every stage: checkpoints keep whole logical tensors and a
// run resumes at any stage and layout.
#pragma once
#include <stddef.h>
#include "model/params.h"

typedef struct {
    int P, rank;       // members, this rank's index (P = 1: one unit holding the whole arena; nothing is padded)
    int n;             // units: 0 the embedding, 1 + l layer l, n - 1 the rest (P = 1: n = 1)
    size_t* off;       // [n] the arena offset of unit u
    size_t* len;       // [n] its elements, padded to a multiple of P: a slice is len / P
    size_t* own;       // [n] where this rank's slice of unit u starts in a packed shard buffer
    size_t shard;      // elements of a packed shard buffer: every unit's slice
} ZeroUnits;

// Lay the table out in units for P members (the table's offsets and total change: each unit padded to a multiple
// of P); P = 1 leaves the table as it is, as one unit.
void zero_units(ZeroUnits* z, ParamTable* t, int P, int rank);
void zero_units_free(ZeroUnits* z);
// The unit holding arena offset e.
int zero_unit_of(const ZeroUnits* z, size_t e);
static inline size_t zero_slice(const ZeroUnits* z, int u) { return z->len[u] / (size_t)z->P; }
// The part [a, b) (arena offsets) of tensor p that this rank owns (a tensor lies in one unit: one range); 0 when none.
int zero_owned(const ZeroUnits* z, const ParamSpec* p, size_t* a, size_t* b);
// Where owned arena element e lies in a packed shard buffer.
size_t zero_index(const ZeroUnits* z, size_t e);
