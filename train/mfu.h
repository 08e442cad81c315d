// mfu.h — model FLOPs utilisation: the backend's matmul rate, measured by timing square matmuls on the backend's
// own clock (be_timer), backend-neutral (the CPU: OpenBLAS sgemm; a GPU: cuBLAS at the run's matmul precision).
// Used by build/train (the peak of its MFU, measured at start-up), build/sgemm_peak and build/bench_kernels.
//   MFU = model FLOPs of a step / step time / peak, model FLOPs per token = model_flops_per_token (model.h).
#pragma once
#include "backend/backend.h"

// The rates (FLOP/s) of `reps` timed n x n x n matmuls, C = A B of random data, after one untimed warm-up;
// operands of element type dt (BE_BF16 needs be_has_bf16 and the bf16 matmul precision), the precision the backend
// is set to. rates[reps] (may be NULL) gets them sorted ascending. Returns the median.
double matmul_rates(int n, int reps, BeDtype dt, double* rates);

// The peak the trainer's MFU is measured against, in two parts, so that the ranks of a job can agree on the size and
// time the same window together (on shared cores each then measures its share):
// matmul_probe: the smallest n = 1024, 2048, ... whose one timed matmul takes at least min_s, or n_max (the largest
// n whose 3 operands fit a quarter of the backend memory available to this rank, at most 8192). Never below 1024
// (unless memory forbids): smaller matmuls time a multi-threaded BLAS's start more than its arithmetic, most of all
// on a loaded machine;
// matmul_window: the rate (FLOP/s) of n x n x n matmuls run back to back for at least window_s (and at least 2),
// the wall time waited for on the backend.
int    matmul_probe(double min_s, int node_ranks, BeDtype dt);
double matmul_window(int n, BeDtype dt, double window_s);
