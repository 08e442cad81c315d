// bench_attention.c — speed of the blockwise attention kernels against the machine's sgemm peak.
// One causal sequence, T = 4096, nh 8, nkv 2, hd 32 (override: bench_attention T nh nkv hd reps).
// FLOPs counted causally: forward 2 matmuls = 4 * T*T/2 * hd * nh; backward 2.5x forward.
// Build: gcc -std=c11 -D_GNU_SOURCE -O3 -march=native -fopenmp -I. -I/usr/include/x86_64-linux-gnu/openblas-openmp
//        tools/bench_attention.c attention/attn_cpu.c -o /tmp/bench_attention
//        -L/usr/lib/x86_64-linux-gnu/openblas-openmp -Wl,-rpath,/usr/lib/x86_64-linux-gnu/openblas-openmp -lopenblas -lm
// Run:   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 /tmp/bench_attention
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <time.h>
#include <omp.h>
#include <cblas.h>
#include "attention/attention.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static float* rand_floats(long n, float amp) {
    float* x = (float*)malloc((size_t)n * sizeof(float));
    unsigned s = 12345u;
    for (long i = 0; i < n; i++) { s = s * 1664525u + 1013904223u; x[i] = amp * ((float)(s >> 8) / 8388608.0f - 1.0f); }
    return x;
}

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}
static double median(double* x, int n) {
    qsort(x, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

// GFLOP/s of one n^3 sgemm (all threads)
static double sgemm_gflops(const float* a, const float* b, float* c, int n) {
    double t = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    return 2.0 * n * n * (double)n / (now_s() - t) / 1e9;
}

int main(int argc, char** argv) {
    int T = argc > 1 ? atoi(argv[1]) : 4096;
    int nh = argc > 2 ? atoi(argv[2]) : 8;
    int nkv = argc > 3 ? atoi(argv[3]) : 2;
    int hd = argc > 4 ? atoi(argv[4]) : 32;
    int reps = argc > 5 ? atoi(argv[5]) : 5;
    if (reps > 64) reps = 64;
    float scale = 1.0f / sqrtf((float)hd);
    long nq = (long)T * nh * hd, nk = (long)T * nkv * hd;
    float* q = rand_floats(nq, 2.0f);
    float* k = rand_floats(nk, 2.0f);
    float* v = rand_floats(nk, 1.0f);
    float* dout = rand_floats(nq, 1.0f);
    float* out = rand_floats(nq, 0.0f);
    float* lse = rand_floats((long)T * nh, 0.0f);
    float* D = rand_floats((long)T * nh, 0.0f);
    float* dq = rand_floats(nq, 0.0f);
    float* dk = rand_floats(nk, 0.0f);
    float* dv = rand_floats(nk, 0.0f);
    int* pos = (int*)malloc((size_t)T * sizeof(int));
    for (int i = 0; i < T; i++) pos[i] = i;
    attn_init(hd);

    // The sgemm peak (2048^3) is measured right before every repetition, and the fraction of peak is taken
    // per repetition, so that a machine shared with other jobs still gives a meaningful median.
    int n = 2048;
    float* a = rand_floats((long)n * n, 1.0f);
    float* b = rand_floats((long)n * n, 1.0f);
    float* c = rand_floats((long)n * n, 1.0f);
    double fwd_flops = 4.0 * T * (double)T / 2.0 * hd * nh, bwd_flops = 2.5 * fwd_flops;
    double pk[64], tf[64], tb[64], tfb[64], rf[64], rb[64], rfb[64];
    for (int r = -1; r < reps; r++) {   // r = -1: warm-up
        double peak = sgemm_gflops(a, b, c, n);
        double t0 = now_s();
        attn_forward_begin(out, lse, T, nh, hd);
        attn_block_forward(out, lse, q, pos, T, k, v, pos, T, nh, nkv, hd, scale, ATTN_MASK_CAUSAL);
        double t1 = now_s();
        attn_backward_begin(D, dout, out, T, nh, hd);
        attn_block_backward(dq, dk, dv, dout, q, lse, D, pos, T, k, v, pos, T, nh, nkv, hd, scale,
                            ATTN_MASK_CAUSAL);
        double t2 = now_s();
        if (r < 0) continue;
        pk[r] = peak; tf[r] = t1 - t0; tb[r] = t2 - t1; tfb[r] = t2 - t0;
        rf[r] = fwd_flops / tf[r] / 1e9 / peak;
        rb[r] = bwd_flops / tb[r] / 1e9 / peak;
        rfb[r] = (fwd_flops + bwd_flops) / tfb[r] / 1e9 / peak;
    }
    double f = median(tf, reps), bw = median(tb, reps), fb = median(tfb, reps);
    printf("attention T=%d nh=%d nkv=%d hd=%d causal, %d threads, median of %d\n",
           T, nh, nkv, hd, omp_get_max_threads(), reps);
    printf("sgemm peak (2048^3):  %8.1f GFLOP/s\n", median(pk, reps));
    printf("forward:          %8.2f ms %7.1f GFLOP/s  %5.1f%% of peak\n", 1e3 * f, fwd_flops / f / 1e9,
           100.0 * median(rf, reps));
    printf("backward:         %8.2f ms %7.1f GFLOP/s  %5.1f%% of peak\n", 1e3 * bw, bwd_flops / bw / 1e9,
           100.0 * median(rb, reps));
    printf("forward+backward: %8.2f ms %7.1f GFLOP/s  %5.1f%% of peak\n", 1e3 * fb,
           (fwd_flops + bwd_flops) / fb / 1e9, 100.0 * median(rfb, reps));
    free(a); free(b); free(c);
    free(q); free(k); free(v); free(dout); free(out); free(lse); free(D); free(dq); free(dk); free(dv); free(pos);
    return 0;
}
