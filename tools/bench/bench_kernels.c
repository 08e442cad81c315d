// bench_kernels.c — the backend's matmul peak and its attention block kernels alone, timed on the backend's own
// clock (be_timer: CUDA events on a GPU). Backend-neutral: built for every backend (build/bench_kernels,
// build/cuda/bench_kernels).
//   bench_kernels [--precision bf16|tf32|fp32] [--gemm N] [--T 8192,16384] [--hd 64,128] [--heads NH] [--kv NKV]
//                 [--reps R] [--engine own|cudnn|auto]
// Prints one line "matmul N^3 <precision>: X TFLOP/s" (median of R), then a markdown table: per head_dim and T,
// causal attention of one sequence as one block call, forward and backward TFLOP/s (median of R), on the block
// engine asked for (attention.h: attn_engine_select; its lines are printed before the table; own by default), and
// beside them the CUDA backend's model of its own kernels (the step anatomy's: predicted ms, own engine only).
// FLOPs counted causally: forward 4 * T^2/2 * hd * nh, backward 2.5 x forward (FlashAttention's convention).
#include "backend/attention.h"
#include "backend/backend.h"
#include "common/util.h"
#include "train/mfu.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void* rand_dev(size_t n, float amp, unsigned seed) {
    float* h = malloc(n * sizeof(float));
    if (!h) { fprintf(stderr, "bench_kernels: out of host memory\n"); exit(1); }
    for (size_t i = 0; i < n; i++) { seed = seed * 1664525u + 1013904223u; h[i] = amp * ((float)(seed >> 8) / 8388608.0f - 1.0f); }
    void* d = be_alloc(n * sizeof(float));
    be_upload(d, h, n * sizeof(float));
    free(h);
    return d;
}
static int parse_list(const char* s, int* out, int max) {
    int n = 0;
    while (*s && n < max) {
        char* e;
        long v = strtol(s, &e, 10);
        if (e == s || v <= 0) return -1;
        out[n++] = (int)v;
        s = *e == ',' ? e + 1 : e;
        if (*e && *e != ',') return -1;
    }
    return n;
}
// The CUDA backend's model of its own bf16 attention kernels (backend/cuda/anatomy.cu: tiles x the per-tile cost counted
// from their SASS); absent in other backends (weak: NULL), whose table then shows "—"
double cuda_attn_model_s(int backward, int hd_pad, int tile, int Tq, int Tk, int nh, int causal) __attribute__((weak));
void cuda_attn_config(int* fwd_bn64, int* fwd_bn128) __attribute__((weak));
static void model_ms(int T, int nh, int hd, double* f, double* b) {
    *f = *b = 0;
    if (!cuda_attn_model_s || !cuda_attn_config || hd > 128) return;
    int bn64, bn128, hp = hd <= 64 ? 64 : 128;
    cuda_attn_config(&bn64, &bn128);
    *f = 1e3 * cuda_attn_model_s(0, hp, hp == 64 ? bn64 : bn128, T, T, nh, 1);
    *b = 1e3 * cuda_attn_model_s(1, hp, hp == 64 ? 128 : 64, T, T, nh, 1);
}
// seconds of one region on the backend's clock
static double timed_region(BeTimer* t) { BeTimes r = be_timer_read(t); return r.wall_s; }

int main(int argc, char** argv) {
    stdout_lines();   // each line appears when printed, also into a file or pipe
    const char* prec = "bf16", *engine = "own";
    int gemm = 8192, reps = 5, nh = 16, nkv = 4, Ts[16] = { 8192, 16384, 32768, 65536 }, nT = 4, hds[4] = { 64, 128 }, nhd = 2;
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        if (i + 1 >= argc) { fprintf(stderr, "bench_kernels: option %s needs a value\n", a); return 1; }
        const char* v = argv[++i];
        if (!strcmp(a, "--precision")) prec = v;
        else if (!strcmp(a, "--gemm")) gemm = atoi(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--heads")) nh = atoi(v);
        else if (!strcmp(a, "--kv")) nkv = atoi(v);
        else if (!strcmp(a, "--engine")) engine = v;
        else if (!strcmp(a, "--T")) { if ((nT = parse_list(v, Ts, 16)) <= 0) { fprintf(stderr, "bench_kernels: --T '%s' must be a list of sizes\n", v); return 1; } }
        else if (!strcmp(a, "--hd")) { if ((nhd = parse_list(v, hds, 4)) <= 0) { fprintf(stderr, "bench_kernels: --hd '%s' must be a list of sizes\n", v); return 1; } }
        else { fprintf(stderr, "bench_kernels: unknown option '%s'\n", a); return 1; }
    }
    if (reps < 1 || gemm < 0 || nh < 1 || nkv < 1 || nh % nkv) { fprintf(stderr, "bench_kernels: bad --reps, --gemm, --heads or --kv\n"); return 1; }
    char err[512];
    if (be_init(0, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    if (be_set_matmul_precision(prec)) { fprintf(stderr, "bench_kernels: --precision '%s' must be bf16, tf32 or fp32\n", prec); return 1; }
    attn_init(128);
    printf("backend %s, matmul precision %s%s\n", be_name(), prec, strcmp(be_name(), "cpu") ? "" : " (the CPU computes fp32)");
    double* t = malloc((size_t)reps * sizeof(double));
    if (gemm > 0)   // (fp32 operands at the set precision; train/mfu.c)
        printf("matmul %d^3 %s: %.3g TFLOP/s (median of %d, random data)\n", gemm, prec, matmul_rates(gemm, reps, BE_F32, NULL) / 1e12, reps);
    printf("\n| head_dim | T | heads (kv) | forward ms | forward TFLOP/s | backward ms | backward TFLOP/s | model forward ms | "
           "model backward ms |\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int h = 0; h < nhd; h++)
        for (int ti = 0; ti < nT; ti++) {
            int T = Ts[ti], hd = hds[h];
            size_t nq = (size_t)T * nh * hd, nk = (size_t)T * nkv * hd, nl = (size_t)T * nh;
            float *q = rand_dev(nq, 1, 3), *k = rand_dev(nk, 1, 4), *v = rand_dev(nk, 1, 5), *dout = rand_dev(nq, 1, 6);
            float *out = be_alloc(nq * 4), *lse = be_alloc(nl * 4), *D = be_alloc(nl * 4);
            float *dq = be_alloc(nq * 4), *dk = be_alloc(nk * 4), *dv = be_alloc(nk * 4);
            int* hp = malloc((size_t)T * sizeof(int));
            for (int i = 0; i < T; i++) hp[i] = i;
            int* pos = be_alloc((size_t)T * sizeof(int));
            be_upload(pos, hp, (size_t)T * sizeof(int));
            if (ti == 0) {   // the engine for this head dim (its self-check runs once per head dim)
                AttnRunShape rs = { nh, nkv, hd, 0 };
                unsigned fast = 0;
                char rep[2048];
                if (attn_engine_select(engine, &rs, &fast, rep, sizeof rep, err, sizeof err)) {
                    fprintf(stderr, "bench_kernels: %s\n", err);
                    return 1;
                }
                attn_engine_use(fast);
                fprintf(stderr, "%s\n", rep);
            }
            attn_host_mirror(pos, hp, (size_t)T);
            float sc = 1.0f / sqrtf((float)hd);
            double* tb = malloc((size_t)reps * sizeof(double));
            for (int r = 0; r <= reps; r++) {   // the first round warms up
                BeTimer *f = be_timer_create(1e30), *b = be_timer_create(1e30);
                be_timer_begin(f);
                attn_forward_begin(out, lse, T, nh, hd);
                attn_block_forward(out, lse, q, pos, NULL, T, k, v, pos, NULL, T, nh, nkv, hd, sc, ATTN_MASK_CAUSAL);
                be_timer_end(f);
                be_timer_begin(b);
                attn_backward_begin(D, dout, out, T, nh, hd);
                attn_block_backward(dq, dk, dv, dout, q, lse, D, pos, NULL, T, k, v, pos, NULL, T, nh, nkv, hd, sc, ATTN_MASK_CAUSAL);
                be_timer_end(b);
                if (r) { t[r - 1] = timed_region(f); tb[r - 1] = timed_region(b); }
                be_timer_free(f); be_timer_free(b);
            }
            double fl = 4.0 * T * (double)T / 2 * hd * nh, sf = median(t, reps), sb = median(tb, reps);
            double mf, mb;
            char mfs[32] = "—", mbs[32] = "—";
            model_ms(T, nh, hd, &mf, &mb);
            if (mf > 0 && !strcmp(engine, "own")) { snprintf(mfs, sizeof mfs, "%.2f", mf); snprintf(mbs, sizeof mbs, "%.2f", mb); }
            printf("| %d | %d | %d (%d) | %.2f | %.3g | %.2f | %.3g | %s | %s |\n", hd, T, nh, nkv, sf * 1e3, fl / sf / 1e12,
                   sb * 1e3, 2.5 * fl / sb / 1e12, mfs, mbs);
            fflush(stdout);
            attn_host_mirror(pos, NULL, 0);
            free(hp); free(tb);
            void* all[] = { q, k, v, dout, out, lse, D, dq, dk, dv, pos };
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) be_free(all[i]);
        }
    free(t);
    return 0;
}
