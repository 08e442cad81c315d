// bench_attention.c — speed of the blockwise attention kernels against the machine's sgemm peak.
// One causal sequence, T = 4096, nh 8, nkv 2, hd 32 (override: bench_attention T nh nkv hd reps chunk);
// timed as one call, and again in calls of `chunk` (256) query rows against all keys, as ring.c makes them.
// FLOPs counted causally: forward 2 matmuls = 4 * T*T/2 * hd * nh; backward 2.5x forward.
// Build: make build/bench_attention
// Run:   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=2 build/bench_attention
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <time.h>
#include <omp.h>
#include <cblas.h>
#include "backend/backend.h"
#include "common/util.h"

static float* rand_floats(long n, float amp) {
    float* x = (float*)malloc((size_t)n * sizeof(float));
    unsigned s = 12345u;
    for (long i = 0; i < n; i++) { s = s * 1664525u + 1013904223u; x[i] = amp * ((float)(s >> 8) / 8388608.0f - 1.0f); }
    return x;
}

// GFLOP/s of one n^3 sgemm (all threads)
static double sgemm_gflops(const float* a, const float* b, float* c, int n) {
    double t = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    return 2.0 * n * n * (double)n / (now_s() - t) / 1e9;
}

typedef struct {
    int T, nh, nkv, hd;
    float scale;
    float *q, *k, *v, *dout, *out, *lse, *D, *dq, *dk, *dv;
    int* pos;
} Bench;

// forward (then backward) over all queries, in calls of `chunk` query rows (0: one call) against all keys
static void run_forward(Bench* b, int chunk) {
    int C = b->nh * b->hd;
    if (chunk <= 0) chunk = b->T;
    attn_forward_begin(b->out, b->lse, b->T, b->nh, b->hd);
    for (int i0 = 0; i0 < b->T; i0 += chunk) {
        int n = b->T - i0 < chunk ? b->T - i0 : chunk;
        attn_block_forward(b->out + (size_t)i0 * C, b->lse + (size_t)i0 * b->nh, b->q + (size_t)i0 * C,
                           b->pos + i0, NULL, n, b->k, b->v, b->pos, NULL, b->T, b->nh, b->nkv, b->hd, b->scale,
                           ATTN_MASK_CAUSAL);
    }
}
static void run_backward(Bench* b, int chunk) {
    int C = b->nh * b->hd;
    if (chunk <= 0) chunk = b->T;
    attn_backward_begin(b->D, b->dout, b->out, b->T, b->nh, b->hd);
    for (int i0 = 0; i0 < b->T; i0 += chunk) {
        int n = b->T - i0 < chunk ? b->T - i0 : chunk;
        attn_block_backward(b->dq + (size_t)i0 * C, b->dk, b->dv, b->dout + (size_t)i0 * C,
                            b->q + (size_t)i0 * C, b->lse + (size_t)i0 * b->nh, b->D + (size_t)i0 * b->nh,
                            b->pos + i0, NULL, n, b->k, b->v, b->pos, NULL, b->T, b->nh, b->nkv, b->hd, b->scale,
                            ATTN_MASK_CAUSAL);
    }
}

// The sgemm peak (2048^3) is measured right before every repetition, and the fraction of peak is taken
// per repetition, so that a machine shared with other jobs still gives a meaningful median.
static void bench(Bench* b, int chunk, int reps, const float* ga, const float* gb, float* gc) {
    int n = 2048;
    double fwd_flops = 4.0 * b->T * (double)b->T / 2.0 * b->hd * b->nh, bwd_flops = 2.5 * fwd_flops;
    double pk[64], tf[64], tb[64], tfb[64], rf[64], rb[64], rfb[64];
    for (int r = -1; r < reps; r++) {   // r = -1: warm-up
        double peak = sgemm_gflops(ga, gb, gc, n);
        double t0 = now_s();
        run_forward(b, chunk);
        double t1 = now_s();
        run_backward(b, chunk);
        double t2 = now_s();
        if (r < 0) continue;
        pk[r] = peak; tf[r] = t1 - t0; tb[r] = t2 - t1; tfb[r] = t2 - t0;
        rf[r] = fwd_flops / tf[r] / 1e9 / peak;
        rb[r] = bwd_flops / tb[r] / 1e9 / peak;
        rfb[r] = (fwd_flops + bwd_flops) / tfb[r] / 1e9 / peak;
    }
    double f = median(tf, reps), bw = median(tb, reps), fb = median(tfb, reps);
    if (chunk > 0) printf("-- in calls of %d query rows against all keys (as ring.c does)\n", chunk);
    else printf("-- one call for the whole sequence\n");
    printf("sgemm peak (2048^3):  %8.1f GFLOP/s\n", median(pk, reps));
    printf("forward:          %8.2f ms %7.1f GFLOP/s  %5.1f%% of peak\n", 1e3 * f, fwd_flops / f / 1e9,
           100.0 * median(rf, reps));
    printf("backward:         %8.2f ms %7.1f GFLOP/s  %5.1f%% of peak\n", 1e3 * bw, bwd_flops / bw / 1e9,
           100.0 * median(rb, reps));
    printf("forward+backward: %8.2f ms %7.1f GFLOP/s  %5.1f%% of peak\n", 1e3 * fb,
           (fwd_flops + bwd_flops) / fb / 1e9, 100.0 * median(rfb, reps));
}

int main(int argc, char** argv) {
    stdout_lines();   // each line appears when printed, also into a file or pipe
    Bench b;
    b.T = argc > 1 ? atoi(argv[1]) : 4096;
    b.nh = argc > 2 ? atoi(argv[2]) : 8;
    b.nkv = argc > 3 ? atoi(argv[3]) : 2;
    b.hd = argc > 4 ? atoi(argv[4]) : 32;
    int reps = argc > 5 ? atoi(argv[5]) : 5;
    int chunk = argc > 6 ? atoi(argv[6]) : 256;
    if (reps > 64) reps = 64;
    if (reps < 1) reps = 1;
    b.scale = 1.0f / sqrtf((float)b.hd);
    long nq = (long)b.T * b.nh * b.hd, nk = (long)b.T * b.nkv * b.hd;
    b.q = rand_floats(nq, 2.0f);
    b.k = rand_floats(nk, 2.0f);
    b.v = rand_floats(nk, 1.0f);
    b.dout = rand_floats(nq, 1.0f);
    b.out = rand_floats(nq, 0.0f);
    b.lse = rand_floats((long)b.T * b.nh, 0.0f);
    b.D = rand_floats((long)b.T * b.nh, 0.0f);
    b.dq = rand_floats(nq, 0.0f);
    b.dk = rand_floats(nk, 0.0f);
    b.dv = rand_floats(nk, 0.0f);
    b.pos = (int*)malloc((size_t)b.T * sizeof(int));
    for (int i = 0; i < b.T; i++) b.pos[i] = i;
    char err[256];
    if (be_init(0, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    attn_init(b.hd);
    int n = 2048;
    float* ga = rand_floats((long)n * n, 1.0f);
    float* gb = rand_floats((long)n * n, 1.0f);
    float* gc = rand_floats((long)n * n, 1.0f);
    printf("attention T=%d nh=%d nkv=%d hd=%d causal, %d threads, median of %d\n",
           b.T, b.nh, b.nkv, b.hd, omp_get_max_threads(), reps);
    bench(&b, 0, reps, ga, gb, gc);
    if (chunk > 0 && chunk < b.T) bench(&b, chunk, reps, ga, gb, gc);
    free(ga); free(gb); free(gc);
    free(b.q); free(b.k); free(b.v); free(b.dout); free(b.out); free(b.lse); free(b.D);
    free(b.dq); free(b.dk); free(b.dv); free(b.pos);
    return 0;
}
