// verify.h — the built-in check of ring attention against one-process attention (--verify_attention N).
#pragma once
#include "model/model.h"

typedef struct { int checked; double max_abs, max_rel; } VerifyResult;

// Collective over `world` (every rank of the job; the model must have a ring). Takes layer 0's q, k, v of
// the first sequence of the last micro-batch for the first KV head and (up to 4 of) its query heads, runs
// ring attention forward and backward on them with a seeded random upstream gradient, gathers everything
// to the ring's first rank, recomputes out, dq, dk, dv there with the one-process kernel on the whole
// sequence, and reports the largest differences (identical on every rank: the worst over all rings).
// World rank 0 logs one line, and a warning line when the relative difference exceeds 1e-4.
VerifyResult model_verify_attention(Model* m, const Group* world, int step);
