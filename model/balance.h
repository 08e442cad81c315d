// balance.h — the context-parallel attention work and ring traffic of a run's windows (build/plan --balance).
//
// For the first windows the run would train on (the training loader with the config's seq_len, pack, shuffle and
// seed, from data cursor 0), every cp rank's tokens are dealt as the model deals them (attention/shard.h, cp_shard)
// and the ring decides on them with the ring's own code (attention/ring.h's RingMap: segments, skip / unmasked /
// masked, the pruned schedule). Per cp rank: the attention work (visible query-key pairs with doc_mask, causal pairs
// without; with an all-to-all each member computes 1/U of its group's heads: its group's work / U) and the ring bytes
// it sends per layer (K/V forward and backward, dK/dV; a second forward with recompute = full), with the full schedule
// too, and the bytes among them that carry no key any receiver at or beyond the hop can see.
#pragma once
#include <stddef.h>
#include "model/config.h"

typedef struct {
    int windows, P, U, R;        // windows measured; cp ranks, all-to-all degree, ring ranks (P / U)
    double *work;                // [P] visible query-key pairs, summed over the windows
    double sum_max, sum_mean;    // over the windows: the largest rank's work, the mean rank's
    double worst;                // the largest max / mean of one window
    double *sent, *full, *dead;  // [P] ring bytes per layer sent (pruned as configured), with the full schedule, and
                                 // dead ones (rows no rank at or beyond the hop can see), summed over the windows
    double kv_hops, kv_blind;    // forward K/V hops of the full schedule, and those whose block no rank at or beyond
                                 // the receiver can see (what the pruned schedule leaves out)
    double split, units;         // documents split over the ranks, units of work (cp_shard = document), summed
    int steps;                   // whole steps among the windows
    double* step_rank0;          // [steps] ring bytes world rank 0 sends in the step (every layer; its replica's windows)
    char data_note[1200];        // what was read
} Balance;

// dp: the data-parallel degree (which windows world rank 0's replica runs). 0, or 1 with one line in err.
int balance_run(Balance* b, const Config* c, int dp, int windows, char* err, size_t errlen);
void balance_free(Balance* b);
