// sgemm_peak.c — measures the machine's fp32 matmul peak through OpenBLAS (median of repeats), the
// reference the training benchmark reports its achieved GFLOP/s against.
//   build/sgemm_peak [N=2048] [repeats=7]
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include "common/util.h"

int main(int argc, char** argv) {
    stdout_lines();   // each line appears when printed, also into a file or pipe
    int n = argc > 1 ? atoi(argv[1]) : 2048, reps = argc > 2 ? atoi(argv[2]) : 7;
    if (n <= 0 || reps <= 0 || reps > 100) { fprintf(stderr, "usage: sgemm_peak [N>0] [repeats 1..100]\n"); return 1; }
    float *a = malloc((size_t)n * n * 4), *b = malloc((size_t)n * n * 4), *c = malloc((size_t)n * n * 4);
    for (size_t i = 0; i < (size_t)n * n; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; c[i] = 0; }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);  // warm-up
    double g[100];
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        g[r] = 2.0 * n * n * (double)n / (now_s() - t0) / 1e9;
    }
    qsort(g, reps, sizeof(double), cmp_double);
    printf("sgemm %d^3: median %.1f GFLOP/s (min %.1f, max %.1f over %d runs)\n", n, g[reps / 2], g[0], g[reps - 1], reps);
    free(a); free(b); free(c);
    return 0;
}
