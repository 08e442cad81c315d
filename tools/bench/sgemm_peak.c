// sgemm_peak.c — measures the machine's fp32 matmul peak through the CPU backend (OpenBLAS sgemm; median of
// repeats; train/mfu.c's measurement, which build/train's MFU uses too), the reference the training benchmark
// reports its achieved GFLOP/s against.
//   build/sgemm_peak [N=2048] [repeats=7]
#include <stdio.h>
#include <stdlib.h>
#include "backend/backend.h"
#include "common/util.h"
#include "train/mfu.h"

int main(int argc, char** argv) {
    stdout_lines();   // each line appears when printed, also into a file or pipe
    int n = argc > 1 ? atoi(argv[1]) : 2048, reps = argc > 2 ? atoi(argv[2]) : 7;
    if (n <= 0 || reps <= 0 || reps > 100) { fprintf(stderr, "usage: sgemm_peak [N>0] [repeats 1..100]\n"); return 1; }
    char err[512];
    if (be_init(0, err, sizeof err)) { fprintf(stderr, "sgemm_peak: %s\n", err); return 1; }
    double g[100];
    double med = matmul_rates(n, reps, BE_F32, g) / 1e9;
    printf("sgemm %d^3: median %.1f GFLOP/s (min %.1f, max %.1f over %d runs)\n", n, med, g[0] / 1e9, g[reps - 1] / 1e9, reps);
    return 0;
}
