// mfu.c — the backend's matmul rate (mfu.h)
#include "train/mfu.h"
#include "common/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <malloc.h>
#include <string.h>

// n*n elements of type dt in backend memory, uniform in [-1, 1) (a 1 Mi-element host pattern uploaded piece by piece)
static void* rand_matrix(size_t n, BeDtype dt, unsigned seed) {
    size_t total = n * n, chunk = total < ((size_t)1 << 20) ? total : (size_t)1 << 20;
    float* h = malloc(chunk * sizeof(float));
    if (!h) return NULL;
    for (size_t i = 0; i < chunk; i++) { seed = seed * 1664525u + 1013904223u; h[i] = (float)(seed >> 8) / 8388608.0f - 1.0f; }
    float* d = be_alloc(total * sizeof(float));
    for (size_t at = 0; at < total; at += chunk) be_upload(d + at, h, (total - at < chunk ? total - at : chunk) * sizeof(float));
    free(h);
    if (dt == BE_F32) return d;
    void* b = be_alloc(total * be_dtype_size(dt));
    be_cast(b, dt, d, total);
    be_free(d);
    return b;
}

static void one_matmul(void* C, const void* A, const void* B, int n, BeDtype dt) {
    if (dt == BE_F32) be_matmul(C, A, B, n, n, n, 0, 0, 1, 0);
    else be_matmul_ex(C, BE_F32, 0, A, dt, 0, B, dt, 0, n, n, n, 0, 0, 1, 0);
}

// seconds of each of `reps` matmuls, after one untimed warm-up when `warmup`
static void time_matmuls(int n, int reps, BeDtype dt, double* secs, int warmup) {
    void *A = rand_matrix((size_t)n, dt, 1), *B = rand_matrix((size_t)n, dt, 2);
    float* C = be_alloc((size_t)n * n * sizeof(float));
    if (!A || !B) { fprintf(stderr, "matmul_rates: out of host memory\n"); exit(1); }
    for (int r = warmup ? -1 : 0; r < reps; r++) {
        BeTimer* t = be_timer_create(1e30);
        be_timer_begin(t);
        one_matmul(C, A, B, n, dt);
        be_timer_end(t);
        double s = be_timer_read(t).wall_s;
        be_timer_free(t);
        if (r >= 0) secs[r] = s;
    }
    be_free(A); be_free(B); be_free(C);
    malloc_trim(0);   // the host memory back to the system: the process's resident set does not keep it
}

double matmul_rates(int n, int reps, BeDtype dt, double* rates) {
    double* s = malloc((size_t)reps * sizeof(double));
    time_matmuls(n, reps, dt, s, 1);
    double flops = 2.0 * n * (double)n * n;
    for (int r = 0; r < reps; r++) s[r] = flops / s[r];
    double med = median(s, reps);   // (sorted ascending)
    if (rates) memcpy(rates, s, (size_t)reps * sizeof(double));
    free(s);
    return med;
}

int matmul_probe(double min_s, int node_ranks, BeDtype dt) {
    double room = be_memory_available(node_ranks) / 4;   // A, B and C (and A's fp32 copy while it is cast)
    int n_max = 256;
    while (n_max < 8192 && 3.0 * (2.0 * n_max) * (2.0 * n_max) * sizeof(float) <= room) n_max *= 2;
    int n = n_max < 1024 ? n_max : 1024;
    for (;; n *= 2) {   // one timed matmul per size until one takes min_s (be_init warmed the backend up)
        double t;
        time_matmuls(n, 1, dt, &t, 0);
        if (t >= min_s || n >= n_max) return n;
    }
}

double matmul_window(int n, BeDtype dt, double window_s) {
    void *A = rand_matrix((size_t)n, dt, 1), *B = rand_matrix((size_t)n, dt, 2);
    float* C = be_alloc((size_t)n * n * sizeof(float));
    if (!A || !B) { fprintf(stderr, "matmul_window: out of host memory\n"); exit(1); }
    be_sync();
    double t0 = now_s(), t;
    int k = 0;
    do {
        one_matmul(C, A, B, n, dt);
        be_sync();
        k++;
        t = now_s() - t0;
    } while (k < 2 || t < window_s);
    be_free(A); be_free(B); be_free(C);
    malloc_trim(0);
    return k * 2.0 * n * (double)n * n / t;
}
