// test_cuda.c — every kernel of the CUDA backend against the CPU backend (the reference), strict enough to fail
// for a wrong kernel. The CUDA backend is called directly (be_*, attn_*), the CPU backend through its table
// (tests/gpu/be_table.h). Runs on a GPU (build/cuda/tests/test_cuda) and under the host emulation of CUDA
// (build/emu/tests/test_cuda, in `make test`). Without a GPU it prints one line "no CUDA device: ..." and exits
// 77, which tests/run_all.sh counts as skipped.
//
// How outputs are compared (tests/gpu/compare.h). Per row, or per (row, head) slice of an attention tensor:
//   err = max over rows of  max |cuda - cpu| in the row / max(max |cpu| in the row, FLOOR_REL * max |cpu| anywhere)
// with FLOOR_REL = 1e-6 (it only keeps rows that are exactly 0, masked or empty, from dividing by zero). Every test
// scales some rows / heads of its inputs by SMALL = 1e-3 so that some output rows are 1e-3 of the others: a kernel
// that gets such a row wrong passes a global max-normalised check and fails this one (test_comparator shows it).
// "+=" kernels accumulate into per-row random initial values of the size of their contribution, and (result -
// initial) is compared with the CPU's contribution computed from zero. lse: |diff| (the relative error of the
// softmax weights it yields), -inf exactly. NaN or inf anywhere fails. Each message prints the errors, tolerances
// and, for matmul and attention, the mode that ran.
//
// Tolerances and why. "Measured" = worst over 6 seeds (RINGLM_TEST_SEED) under the emulation, which runs the
// kernels' own arithmetic in their own order and sums its GEMMs in another order than the CPU's; a correct GPU
// differs from it only by its libm (expf, exp2f, log1pf within 2 ulp), nvcc's FMA contraction and cuBLAS's own
// accumulation order, all ~1e-7 relative.
//   exact (bit-identical): add (one IEEE add), copy, zero, embedding forward (a row copy) and backward (the CPU's
//     token order, sorted on the device), target logit, row max, argmax hit, matmul with k = 0 (C = beta C), the
//     norms' weight-gradient reduction (the same sums in the same order), the fp32 -> bf16 cast (to nearest even).
//   bf16 activations (act_dtype): the layer kernels run in fp32 and bf16; a bf16 output is compared with the CPU's
//     fp32 output from the same (bf16) inputs within TOL_BF16 = 4e-3 per row (its rounding: 2^-8 of each element) and
//     must exceed the fp32 tolerance (the bf16 path ran); see the section above test_rmsnorm_shape.
//   1e-6: adamw, rope (a few flops per element; measured 0, a GPU differs by an ulp or two of FMA contraction).
//   1e-5: swiglu, exp_sub, xent backward (expf: 2 ulp on a GPU, measured 0).
//   2e-5: rmsnorm out, rstd, dx, dw (measured <= 4.6e-6: dw sums 17000 rows in 254 groups, the CPU in another
//     order). |diff| 4e-6 for log values: xent lse and loss, log_add, attn_merge lse (4 ulp at 11; measured 0);
//     attn_merge out 2e-6 (measured 0).
//   1e-12 relative per class: be_sumsq_segments against a long double host sum (double accumulation; ~1e-15).
//   matmul 2e-5 per row, against the CPU GEMM (OpenBLAS) of the inputs rounded as the mode rounds them: bf16 to
//     nearest even (or toward zero), tf32 to nearest with ties away (as the emulation and cvt.rna.tf32; or toward
//     zero), fp32 as they are. The emulated cuBLAS sums the (exact) products of the rounded inputs in fp32 in an
//     order of its own, not OpenBLAS's (k slices of 16): measured <= 4.3e-7 per row (it matched exactly before
//     2026-12-05, which would have hidden a tolerance resting on the CPU's order); real cuBLAS sums in yet another
//     order (tiles, split-K; Hopper's tensor cores too): ~1e-7 .. 1e-6 relative for the k <= 513 here, 2e-5 is 40x
//     the largest. The other modes' references differ by >= 2e-4 (tf32 rounds each input by up to 2^-11
//     relative, bf16 by 2^-8), so each check also proves which mode ran and prints it: a tf32 result fails the
//     fp32 check, and so on.
//   attention, fp32 kernels (FB = 32 tiles, no tensor cores): out 1e-5 and lse 1e-5 absolute (measured <= 3.0e-6,
//     2.4e-6), dq, dk, dv 2e-5 (measured <= 4.4e-6).
//   attention, bf16 kernels, given q, k, v, dout already rounded to bf16 (so both sides multiply the same values
//     and the only differences are the kernels' own roundings and fp32 sums): lse 1e-5 absolute (S comes from exact
//     bf16 products in fp32: measured 1 ulp, 9.5e-7); out 1.5e-2 = 4 u_bf16, dq, dk, dv 2e-2 = 5 u_bf16
//     (u_bf16 = 2^-8 = 3.9e-3): the kernels round P (for O and dV) and dS (for dQ and dK) to bf16, up to u_bf16
//     relative per element, which leaves each row ~u_bf16 of its terms (measured out <= 4.3e-3, dq <= 5.4e-3,
//     dk <= 4.7e-3, dv <= 5.8e-3, fixed by the rounding points, not by chance: a GPU gives the same). Tighter
//     would need a reference that rounds P and dS where the kernels do (tile by tile, against the running max).
//     The out error must also exceed the fp32 tolerance: the evidence that the bf16 kernels ran.
//   attn_backward_begin's D: 1e-5 of sum |dout * out| of its row (a dot product's own scale; measured 2.6e-7).
//   dq, dk conditioning: dS = P (dP - D) cancels where D is close to dP (a query that sees a single key has dS = 0
//     exactly), and there every implementation, the reference included, is only accurate to ulps of the terms dP
//     and D are summed from. Such rows are normalised by at least KAPPA = 0.05 of sqrt(sum_j (P_ij (sum |dO_i v_j|
//     + sum |dO_i O_i|) k_jd)^2) (attn_floors), a fraction far above the fp32 rounding (6e-8) of those terms;
//     rows without cancellation are larger than that and keep their own size (a few % of the rows are floored,
//     mostly in short documents; each message counts them).
//
// Coverage beyond the kernels' contracts: grid-stride loops run several passes (grid_for caps the grid at 132 x 16
// blocks of 256 = 540672 threads: add and swiglu at 3.01 passes, qkv_rope 3.94, embedding forward 2.16, matmul
// k = 0 2.40; the fill of attn_forward_begin and the bf16 conversion of attention inputs at more than the 65536
// blocks of 256 of grid_n); be_sumsq_segments with 313 chunks (> the 256 threads of its final pass), segments of
// up to 5 chunks + 17, a 1e-6 class and empty classes; rmsnorm dw over 17000 rows (254 row groups); xent rows of
// 1000 columns. Attention: hd 24, 64, 100, 128; MHA, GQA 4/2 8/2 16/4 28/4, MQA; causal, unmasked (the ring's
// off-diagonal blocks, hd 128 and 64, Tq = Tk spanning several tiles both ways), shuffled positions; lengths that
// are tile multiples (128, 192, 256) and not (100, 300, ...); grids of more blocks than the 132 SMs of an H200 in
// the forward, dK/dV and dQ kernels (T 1100 with 8 heads, hd 64 and 128: 144 blocks each; the unmasked hd-128
// 28/4-head block: 140 forward and dQ blocks; Tk 32800: 8208 dK/dV blocks); document ids (starts inside tiles and on
// tile edges, restarted positions, queries whose document has no key: lse -inf, out 0, no NaN anywhere); two key
// blocks merged in place, or one. Determinism: the bf16 and fp32 attention forward and backward (on the cuDNN engine
// but its dq, which cuDNN adds with fp32 atomics in no fixed order, as the emulated cuDNN does too), D, sums of
// squares, rmsnorm dw, xent lse, embedding backward and a long-k matmul repeat bit for bit; the tf32 setting runs
// the same attention kernels as bf16 (bit-identical).
// Run time under the emulation: ~30 s of CPU with OMP_NUM_THREADS=1 (bf16 attention dominates: mma.sync is
// emulated lane by lane).
#include "backend/attention.h"
#include "common/util.h"
#include "backend/backend.h"
#include "tests/gpu/be_table.h"
#include "tests/gpu/compare.h"
#include "tests/testutil.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ---- tolerances (see the header comment for where each comes from) ----
#define FLOOR_REL 1e-6          // cmp_rows: a row's denominator is at least 1e-6 of the array's largest |ref|
#define SMALL 1e-3f             // the factor of the deliberately small rows / heads
#define TOL_EW 1e-6             // fp32 elementwise kernels without transcendentals (adamw, rope)
#define TOL_EW_EXP 1e-5         // fp32 elementwise kernels with expf / logf (swiglu, xent backward, exp_sub)
#define TOL_ROW 2e-5            // fp32 row reductions (rmsnorm)
#define TOL_LSE_ABS 4e-6        // |diff| of log values: xent lse and loss, log_add, attn_merge lse
#define TOL_MERGE 2e-6          // attn_merge out
#define TOL_SUMSQ 1e-12         // sums of squares (double accumulation) against a long double host sum
#define TOL_MM 2e-5             // matmul against the CPU GEMM on inputs rounded as the mode rounds them
#define TOL_A32 1e-5            // fp32 attention kernels: out, and lse (absolute)
#define TOL_A32_GRAD 2e-5       //   dq, dk, dv
#define TOL_ABF_OUT 1.5e-2      // bf16 attention kernels on bf16-rounded inputs: out (4 u_bf16)
#define TOL_ABF_LSE 1e-5        //   lse (absolute)
#define TOL_ABF_GRAD 2e-2       //   dq, dk, dv (5 u_bf16)
#define TOL_D 1e-5              // attn_backward_begin's D, relative to sum |dout * out| of its row

static const BeTable* cpu;
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static double urand(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static float* rnd(size_t n, float amp) {
    float* x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(amp * (2 * urand() - 1));
    return x;
}
static float* dup(const float* x, size_t n) { float* y = malloc((n ? n : 1) * sizeof(float)); memcpy(y, x, n * sizeof(float)); return y; }
static float* zeros(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static void* up(const void* h, size_t bytes) { void* d = be_alloc(bytes); be_upload(d, h, bytes); return d; }
static float* down(const void* d, size_t n) { float* h = malloc((n ? n : 1) * sizeof(float)); be_download(h, d, n * sizeof(float)); return h; }

// rows i of a [nrows, len] matrix with i % every == phase multiplied by f
static void scale_rows(float* x, size_t nrows, size_t len, size_t every, size_t phase, float f) {
    for (size_t i = phase; i < nrows; i += every)
        for (size_t j = 0; j < len; j++) x[i * len + j] *= f;
}
static void round_all(float* x, size_t n, float (*f)(float)) { for (size_t i = 0; i < n; i++) x[i] = f(x[i]); }
// an accumulator's initial value for a "+=" kernel whose contribution is c: per row random in +-0.5 of the row's
// largest |c|, so that (result - init) keeps the contribution's relative precision even in small rows
static float* acc_init(const float* c, size_t nrows, size_t len) {
    float* x = malloc((nrows * len > 0 ? nrows * len : 1) * sizeof(float));
    for (size_t i = 0; i < nrows; i++) {
        double m = cmp_absmax(c + i * len, len);
        if (m == 0) m = 1;   // a row without contribution: non-zero values (+0.0 added to -0.0 would change its bits)
        for (size_t j = 0; j < len; j++) x[i * len + j] = (float)(m * (0.25 + 0.25 * urand()) * (urand() < 0.5 ? -1 : 1));
    }
    return x;
}
static void sub(float* a, const float* b, size_t n) { for (size_t i = 0; i < n; i++) a[i] -= b[i]; }

// the CUDA result in device memory d against the CPU result h, per row
static CmpRes cmpd(const void* d, const float* h, size_t nrows, size_t len, double floor_rel) {
    float* g = down(d, nrows * len);
    CmpRes e = cmp_rows(g, h, nrows, len, floor_rel);
    free(g);
    return e;
}
static int same_dev(const void* d, const float* h, size_t n) {
    float* g = down(d, n);
    int s = cmp_same_bits(g, h, n * sizeof(float));
    free(g);
    return s;
}

// ---------------------------------------------------------------------------------------------------------
// the comparison itself: a wrong small row fails cmp_rows and passes the old global check

static void test_comparator(void) {
    size_t R = 8, L = 16;
    float* r = rnd(R * L, 1);
    scale_rows(r, R, L, 8, 3, SMALL);
    float* a = dup(r, R * L);
    a[3 * L + 5] += 0.01f * (float)cmp_absmax(r + 3 * L, L);   // row 3 wrong by 1 % of its own size
    double eg = cmp_rel(a, r, R * L);
    CmpRes er = cmp_rows(a, r, R, L, FLOOR_REL);
    a[3 * L + 5] = NAN;
    CmpRes en = cmp_rows(a, r, R, L, FLOOR_REL);
    float l1[3] = { -INFINITY, 1.0f, 2.0f }, l2[3] = { -30.0f, 1.0f, 2.0f };
    CmpRes el = cmp_lse_abs(l2, l1, 3);
    CHECK(eg < 1e-4 && er.err > 9e-3 && er.row == 3 && en.nan && isinf(en.err) && isinf(el.err),
          "comparator: a 1e-3 row wrong by 1 %%: global error %.1e (would pass), per-row %.1e in row %ld (fails); "
          "NaN -> %g; lse -inf vs finite -> %g", eg, er.err, er.row, en.err, el.err);
    free(r); free(a);
}

// ---------------------------------------------------------------------------------------------------------
// elementwise kernels, sized beyond one pass of the grid-stride loops: grid_for() caps the grid at 132 SMs x 16
// blocks x 256 threads = 540672 threads, so n > 3 * 540672 makes every thread loop three or four times

#define GRID_PASS 540672
static void test_elementwise(void) {
    const size_t L = 1024, R = 1589, n = R * L;   // 1627136 elements = 3.01 passes
    float *y = rnd(n, 1), *x = rnd(n, 1);
    scale_rows(x, R, L, 7, 3, SMALL); scale_rows(y, R, L, 7, 3, SMALL);
    float *dy = up(y, n * 4), *dx = up(x, n * 4);
    cpu->be_add(y, x, n); be_add(dy, dx, n);
    CHECK(same_dev(dy, y, n), "add n %zu (%.2f grid passes): bit-identical to the CPU (one IEEE add)", n, (double)n / GRID_PASS);

    // AdamW with clipping scale and weight decay
    float *p = rnd(n, 1), *gr = rnd(n, 1), *mo = rnd(n, 0.1f), *v = rnd(n, 0.1f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    scale_rows(gr, R, L, 7, 3, SMALL); scale_rows(mo, R, L, 7, 3, SMALL); scale_rows(v, R, L, 7, 3, SMALL * SMALL);
    scale_rows(p, R, L, 5, 2, SMALL);
    float *Dp = up(p, n * 4), *Dgr = up(gr, n * 4), *Dm = up(mo, n * 4), *Dv = up(v, n * 4), gs = 0.6f;
    float* Dgs = up(&gs, 4);   // the clipping factor lives on the device
    // segments: decayed and not, a gap left alone, chunks (65536) cut inside segments
    BeSegment seg[4] = { { 0, 300000, 1 }, { 300000, 1001, 0 }, { 301001, 900000, 1 }, { 1201101, n - 1201101, 0 } };
    float* p_gap = dup(p + 1201001, 100);   // [1201001, 1201101): in no segment
    cpu->be_adamw(p, gr, mo, v, seg, 4, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.0975f, &gs);
    be_adamw(Dp, Dgr, Dm, Dv, seg, 4, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.0975f, Dgs);
    int gap_ok = !memcmp(p_gap, p + 1201001, 100 * 4);
    free(p_gap);
    CmpRes e1 = cmpd(Dp, p, R, L, FLOOR_REL), e2 = cmpd(Dm, mo, R, L, FLOOR_REL), e3 = cmpd(Dv, v, R, L, FLOOR_REL);
    CHECK(e1.err <= TOL_EW && e2.err <= TOL_EW && e3.err <= TOL_EW && gap_ok,
          "adamw n %zu in 4 segments (decayed or not, a gap left alone), per row of %zu: p %.2e, m %.2e, v %.2e (tol %g)",
          n, L, e1.err, e2.err, e3.err, TOL_EW);

    // copy with overlap both ways (memmove) and zero
    be_copy(Dp + 3, Dp, 500 * 4);          memmove(p + 3, p, 500 * 4);
    be_copy(Dp + 1000, Dp + 1007, 900 * 4); memmove(p + 1000, p + 1007, 900 * 4);
    be_copy(Dp + 600000, Dp, 700000 * 4);  memmove(p + 600000, p, 700000 * 4);
    be_zero(Dp + 700, 100 * 4);            memset(p + 700, 0, 100 * 4);
    CHECK(same_dev(Dp, p, n), "copy (overlapping forward and backward, 2.8 MB) and zero are exact");
    free(y); free(x); free(p); free(gr); free(mo); free(v);
    void* all[] = { dy, dx, Dp, Dgr, Dm, Dv, Dgs };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be_free(all[i]);
}

// the step's scalars on the device: the loss sum (be_sum accumulates; a fixed order: repeats bit for bit) and the
// clipping factor (be_clip_scale: torch's rule in double, then float; 1 without clipping or under the limit)
static void test_scalars(void) {
    size_t n = 70001;
    float* x = rnd(n, 3);
    float* dx = up(x, n * 4);
    double acc0 = 0.25, h = 0.25, *dacc = up(&acc0, 8), g1, g2;
    long double ref = 0.25;
    for (size_t i = 0; i < n; i++) ref += x[i];
    be_sum(dacc, dx, n);
    cpu->be_sum(&h, x, n);
    be_download(&g1, dacc, 8);
    be_upload(dacc, &acc0, 8);
    be_sum(dacc, dx, n);
    be_download(&g2, dacc, 8);
    double e = fabs((double)(g1 - ref)) / fabsl(ref), ec = fabs((double)(h - ref)) / fabsl(ref);
    CHECK(e <= TOL_SUMSQ && ec <= TOL_SUMSQ && g1 == g2, "sum n %zu into 0.25 (double): rel err vs long double %.2e "
          "(CPU %.2e, tol %g), repeats bit for bit: %s", n, e, ec, TOL_SUMSQ, g1 == g2 ? "yes" : "NO");
    double ss[3][2] = { { 2.5, 1.5 }, { 0.3, 0.2 }, { 7.0, 9.0 } };   // norm 2 (clip 1: 0.5), 0.707 (1: none), 4 (clip 0)
    float clip[3] = { 1.0f, 1.0f, 0.0f };
    int ok_all = 1;
    double* dss = be_alloc(2 * sizeof(double));
    float* dsc = be_alloc(sizeof(float));
    for (int i = 0; i < 3; i++) {
        float a, b;
        be_upload(dss, ss[i], sizeof ss[i]);
        be_clip_scale(dsc, dss, 2, clip[i]);
        be_download(&a, dsc, 4);
        cpu->be_clip_scale(&b, ss[i], 2, clip[i]);
        double want = clip[i] > 0 ? fmin(1.0, clip[i] / (sqrt(ss[i][0] + ss[i][1]) + 1e-6)) : 1.0;
        ok_all &= a == b && a == (float)want;
    }
    CHECK(ok_all, "clip_scale: norms 2, 0.707 and 4 with clip 1, 1, off give 0.5, 1, 1 as torch's rule, on both backends");
    free(x); be_free(dx); be_free(dacc); be_free(dss); be_free(dsc);
}

// ---------------------------------------------------------------------------------------------------------
// the copy queue (activation offload): a kernel's output to pinned host memory and back on the copy stream, ordered
// by events against the compute stream (the emulation's race checker sees both streams), odd sizes; be_host_bytes

static void test_host_copies(void) {
    const size_t n = 300007, k = 12345;   // odd; a copy of a part at an odd offset
    size_t before = be_host_bytes();
    float *a = rnd(n, 1), *b = rnd(n, 1);
    float *Da = up(a, n * 4), *Db = up(b, n * 4);
    float* h = be_host_alloc(n * 4);   // (its contents undefined: the copy out writes all of it first)
    size_t held = be_host_bytes() - before;
    BeEvent *out = be_event_create(), *in = be_event_create();
    be_add(Da, Db, n);                                   // a + b on the compute stream, then to the host
    cpu->be_add(a, b, n);
    be_copy_to_host_async(h, Da, n * 4, out);
    be_wait_event(out);
    be_zero(Da, n * 4);                                  // (after the copy out: the wait orders it)
    be_sync();
    int out_ok = !memcmp(h, a, n * 4);
    for (size_t i = k; i < n; i++) h[i] *= 2.0f;         // the host changes part of it, which comes back
    be_copy_from_host_async(Da + k, h + k, (n - k) * 4, in);
    be_wait_event(in);
    be_add(Db, Da, n);                                   // reads what came back
    for (size_t i = 0; i < k; i++) a[i] = 0.0f;
    for (size_t i = k; i < n; i++) a[i] *= 2.0f;
    cpu->be_add(b, a, n);
    CHECK(held == n * 4 && out_ok && same_dev(Db, b, n),
          "copy queue: %zu floats to pinned host memory and %zu back at offset %zu, event-ordered against kernels: "
          "exact; %zu bytes counted", n, n - k, k, held);
    be_event_free(out); be_event_free(in);
    be_host_free(h);
    CHECK(be_host_bytes() == before, "be_host_free returns the count to %zu bytes", before);
    free(a); free(b); be_free(Da); be_free(Db);
}

// ---------------------------------------------------------------------------------------------------------
// sums of squares: chunks of 65536 elements, one block each, then a final pass over the chunks with 256 threads

#define SUMSQ_CHUNK 65536
// column blocks <-> row blocks (the context-parallel all-to-all's packing), against an independent host loop:
// Q-like (P = nb), KV replicated to more parts than heads (P > nb, merge accumulates the shared blocks in j
// order), sized beyond one grid pass; exact (copies and, for merge, the same additions in the same order)
static void test_split_merge_shape(int R, int ld, int w, int P, int nb) {
    size_t npk = (size_t)P * R * w, nun = (size_t)R * ld;
    float *src = rnd(nun, 1), *pk = rnd(npk, 1), *want = malloc(npk * 4), *acc0 = rnd(nun, 1);
    for (int j = 0; j < P; j++)
        for (int r = 0; r < R; r++)
            for (int c = 0; c < w; c++) want[((size_t)j * R + r) * w + c] = src[(size_t)r * ld + (size_t)(j * nb / P) * w + c];
    float *Dsrc = up(src, nun * 4), *Dpk = be_alloc(npk * 4);
    be_split_cols(Dpk, Dsrc, R, ld, w, P, nb);
    int s1 = same_dev(Dpk, want, npk);
    cpu->be_split_cols(pk, src, R, ld, w, P, nb);
    int s1c = cmp_same_bits(pk, want, npk * 4);
    // merge back onto random accumulators (accumulate) and, where every block has one part, onto garbage (overwrite)
    float* acc = dup(acc0, nun);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < P; j++)
            for (int c = 0; c < w; c++) acc[(size_t)r * ld + (size_t)(j * nb / P) * w + c] += want[((size_t)j * R + r) * w + c];
    float* Dacc = up(acc0, nun * 4);
    be_merge_cols(Dacc, Dpk, R, ld, w, P, nb, 1);
    int s2 = same_dev(Dacc, acc, nun);
    float* cacc = dup(acc0, nun);
    cpu->be_merge_cols(cacc, want, R, ld, w, P, nb, 1);
    int s2c = cmp_same_bits(cacc, acc, nun * 4);
    int s3 = 1;
    if (P == nb) {   // overwrite: the columns of the blocks come back as they were; the others keep their values
        be_upload(Dacc, acc0, nun * 4);
        be_merge_cols(Dacc, Dpk, R, ld, w, P, nb, 0);
        float* back = dup(acc0, nun);
        for (int r = 0; r < R; r++) memcpy(back + (size_t)r * ld, src + (size_t)r * ld, (size_t)nb * w * 4);
        s3 = same_dev(Dacc, back, nun);
        free(back);
    }
    CHECK(s1 && s1c && s2 && s2c && s3, "split/merge cols R %d ld %d: %d blocks of %d for %d parts (%.2f grid passes): split %s "
          "(CPU %s), merge += %s (CPU %s), merge = %s", R, ld, nb, w, P, (double)npk / GRID_PASS, s1 ? "exact" : "WRONG",
          s1c ? "exact" : "WRONG", s2 ? "exact" : "WRONG", s2c ? "exact" : "WRONG", P == nb ? (s3 ? "exact" : "WRONG") : "n/a");
    free(src); free(pk); free(want); free(acc0); free(acc); free(cacc);
    be_free(Dsrc); be_free(Dpk); be_free(Dacc);
}

static void test_sumsq(void) {
    enum { NSMALL = 300, NCLASS = 7 };
    BeSegment seg[NSMALL + 8];
    int ns = 0;
    size_t off = 0;
    const size_t big[] = { 5 * SUMSQ_CHUNK + 17, SUMSQ_CHUNK, SUMSQ_CHUNK + 1, SUMSQ_CHUNK - 1, 3 * SUMSQ_CHUNK, 0 };
    for (int i = 0; i < 6; i++) { seg[ns] = (BeSegment){ off + 3, big[i], i % 4 }; off += big[i] + 5; ns++; }
    for (int i = 0; i < NSMALL; i++) {   // many small segments: > 256 chunks in all
        size_t m = 1 + (size_t)(i * 37) % 997;
        seg[ns] = (BeSegment){ off, m, i % 5 }; off += m + (i % 3); ns++;
    }
    size_t n = off + 11;
    float* x = rnd(n, 3);
    for (int i = 0; i < ns; i++)   // class 4 is 1e-6 of the others: its relative error counts on its own
        if (seg[i].cls == 4) for (size_t j = 0; j < seg[i].n; j++) x[seg[i].offset + j] *= SMALL * SMALL;
    int nchunk = 0;
    for (int i = 0; i < ns; i++) nchunk += (int)((seg[i].n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK);
    long double ref[NCLASS] = { 0 };
    for (int i = 0; i < ns; i++)
        for (size_t j = 0; j < seg[i].n; j++) ref[seg[i].cls] += (long double)x[seg[i].offset + j] * x[seg[i].offset + j];
    double a[NCLASS], b[NCLASS], b2[NCLASS], b3[NCLASS], c2[NCLASS];
    float* dx = up(x, n * 4);
    double* dout = be_alloc(NCLASS * sizeof(double));   // the sums stay on the device
    cpu->be_sumsq_segments(a, NCLASS, x, seg, ns);
    be_sumsq_segments(dout, NCLASS, dx, seg, ns);
    be_download(b, dout, sizeof b);
    double e = 0, ec = 0;
    for (int c = 0; c < 5; c++) {
        e = fmax(e, fabs((double)(b[c] - ref[c])) / (double)ref[c]);
        ec = fmax(ec, fabs((double)(a[c] - ref[c])) / (double)ref[c]);
    }
    int empty_ok = b[5] == 0 && b[6] == 0;
    CHECK(e <= TOL_SUMSQ && ec <= TOL_SUMSQ && empty_ok && !isnan(e),
          "sumsq_segments %d segments (%d chunks of <= %d: > 256, segments up to 5 chunks + 17), %d classes, one 1e-6 "
          "class, two empty: rel err per class vs long double host %.2e (CPU backend %.2e, tol %g), empty classes 0: %s",
          ns, nchunk, SUMSQ_CHUNK, NCLASS, e, ec, TOL_SUMSQ, empty_ok ? "yes" : "NO");
    // bit for bit: again, then a different segment table (re-uploaded), then the first again
    be_sumsq_segments(dout, NCLASS, dx, seg, ns); be_download(b2, dout, sizeof b2);
    be_sumsq_segments(dout, NCLASS, dx, seg + 6, ns - 6); be_download(c2, dout, sizeof c2);
    be_sumsq_segments(dout, NCLASS, dx, seg, ns); be_download(b3, dout, sizeof b3);
    double es = 0;
    for (int c = 0; c < 5; c++) {
        long double r = 0;
        for (int i = 6; i < ns; i++) if (seg[i].cls == c) for (size_t j = 0; j < seg[i].n; j++) r += (long double)x[seg[i].offset + j] * x[seg[i].offset + j];
        if (r > 0) es = fmax(es, fabs((double)(c2[c] - r)) / (double)r);
    }
    CHECK(!memcmp(b, b2, sizeof b) && !memcmp(b, b3, sizeof b) && es <= TOL_SUMSQ,
          "sumsq_segments repeats bit for bit (also after another segment table, which gives rel err %.2e)", es);
    free(x); be_free(dx); be_free(dout);
}

// ---------------------------------------------------------------------------------------------------------
// embedding: forward beyond two grid passes (a row copy: exact), backward with many repeated tokens (the CPU's
// token order: exact)

// backward on the device: a stable radix sort of 4-bit digits (nv 3000: 3 passes; 70000: 5, the result in the other
// buffer), repeated tokens, tokens of other slices, more tokens than the sorting block's 512 threads
static void test_embedding(int N, int C, int v0, int nv) {
    int* tok = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++)   // half from 20 ids (about 37 repeats each), half anywhere, some outside the slice
        tok[i] = urand() < 0.5 ? v0 + 5 + 7 * (int)(urand() * 20) : (int)(urand() * (v0 + nv + 200));
    size_t no = (size_t)N * C, nw = (size_t)nv * C;
    float *w = rnd(nw, 1), *out = malloc(no * 4), *dout = rnd(no, 1), *dw = rnd(nw, 1);
    scale_rows(dout, N, C, 7, 3, SMALL);
    int* dtok = up(tok, N * sizeof(int));
    float *Dw = up(w, nw * 4), *Dout = be_alloc(no * 4), *Ddout = up(dout, no * 4), *Ddw = up(dw, nw * 4);
    cpu->be_embedding_forward(out, tok, w, N, C, v0, nv); be_embedding_forward(Dout, dtok, Dw, N, C, v0, nv);
    cpu->be_embedding_backward(dw, dout, tok, N, C, v0, nv); be_embedding_backward(Ddw, Ddout, dtok, N, C, v0, nv);
    int f = same_dev(Dout, out, no), b = same_dev(Ddw, dw, nw);
    CHECK(f && b, "embedding N %d C %d (%.2f grid passes) slice [%d, %d): forward exact %s, backward += (repeats, token "
          "order; sorted on the device) exact %s", N, C, (double)no / GRID_PASS, v0, v0 + nv, f ? "yes" : "NO", b ? "yes" : "NO");
    be_embedding_backward(Ddw, Ddout, dtok, N, C, v0, nv);
    be_embedding_backward(Ddw, Ddout, dtok, N, C, v0, nv);
    cpu->be_embedding_backward(dw, dout, tok, N, C, v0, nv);
    cpu->be_embedding_backward(dw, dout, tok, N, C, v0, nv);
    CHECK(same_dev(Ddw, dw, nw), "embedding backward accumulates bit for bit as the CPU over 3 calls");
    free(tok); free(w); free(out); free(dout); free(dw);
    be_free(dtok); be_free(Dw); be_free(Dout); be_free(Ddout); be_free(Ddw);
}

// ---------------------------------------------------------------------------------------------------------
// Activations in fp32 or bf16 (act_dtype). With bf16 both sides start from the same values: the inputs are rounded to
// bf16 on the host (the CPU, which computes fp32 only, gets them exactly), the CUDA kernel reads them as bf16, and its
// bf16 outputs are compared with the CPU's fp32 result: a correct kernel differs by its output's rounding, at most half
// a bf16 ulp of each element — 2^-8 of the element (bf16 keeps 8 significant bits) —, so per row at most 2^-8 of the
// row's largest |value|, plus the fp32 arithmetic's ~1e-6: TOL_BF16 = 4e-3. Each bf16 check also requires an error
// above the fp32 tolerance: the bf16 path ran.

#define TOL_BF16 4e-3   // 2^-8 = 3.906e-3 and fp32's rounding
static const char* DTN[2] = { "fp32", "bf16" };
static uint16_t bf_bits(float x) { uint32_t u; memcpy(&u, &x, 4); return (uint16_t)(u >> 16); }   // x already bf16
static float bf_val(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
// device copy of x[n] in dt (bf16: x must hold bf16 values — round_all(x, n, round_bf16) first)
static void* up_dt(const float* x, size_t n, BeDtype dt) {
    if (dt == BE_F32) return up(x, n * 4);
    uint16_t* h = malloc((n ? n : 1) * 2);
    for (size_t i = 0; i < n; i++) h[i] = bf_bits(x[i]);
    void* d = up(h, n * 2);
    free(h);
    return d;
}
// host fp32 copy of a device array of n elements in dt, rows of len elements at a stride of ld elements
static float* down_dt(const void* d, size_t rows, size_t len, size_t ld, BeDtype dt) {
    size_t esz = be_dtype_size(dt), n = rows ? (rows - 1) * ld + len : 0;
    unsigned char* raw = malloc((n ? n : 1) * esz);
    be_download(raw, d, n * esz);
    float* out = malloc((rows * len > 0 ? rows * len : 1) * 4);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < len; j++) {
            size_t at = r * ld + j;
            out[r * len + j] = dt == BE_F32 ? ((float*)raw)[at] : bf_val(((uint16_t*)raw)[at]);
        }
    free(raw);
    return out;
}
static void* down_bytes(const void* d, size_t bytes) { void* h = malloc(bytes ? bytes : 1); be_download(h, d, bytes); return h; }
static CmpRes cmpd_dt(const void* d, const float* h, size_t rows, size_t len, BeDtype dt) {
    float* g = down_dt(d, rows, len, len, dt);
    CmpRes e = cmp_rows(g, h, rows, len, FLOOR_REL);
    free(g);
    return e;
}
// a bf16 result must be within TOL_BF16 and beyond the fp32 tolerance `tf`; an fp32 one within tf
static int ok_dt(double e, BeDtype dt, double tf) { return dt == BE_F32 ? e <= tf : e <= TOL_BF16 && e > tf; }

// RMSNorm: per row; the residual add + norm gives the bits of a norm of its sum; the backward's dx (and its copy in dt)
// and weight-gradient partials over row groups, summed by be_rmsnorm_dw

static void test_rmsnorm_shape(int N, int C, BeDtype dt) {
    size_t n = (size_t)N * C;
    float *x = rnd(n, 2), *r = rnd(n, 1), *w = rnd(C, 1), *dout = rnd(n, 1), *out = malloc(n * 4), *rstd = malloc(N * 4);
    scale_rows(x, N, C, 7, 3, SMALL);      // rstd 1e3 larger
    scale_rows(r, N, C, 7, 3, SMALL);
    scale_rows(dout, N, C, 5, 1, SMALL);   // dx rows 1e-3 smaller
    float *y = malloc(n * 4), *out2 = malloc(n * 4), *rstd2 = malloc(N * 4);
    cpu->be_rmsnorm_forward(out, BE_F32, rstd, x, w, N, C, 1e-5f);
    cpu->be_residual_rmsnorm(y, out2, BE_F32, rstd2, x, r, w, N, C, 1e-5f);
    float *Dx = up(x, n * 4), *Dr = up(r, n * 4), *Dw = up(w, C * 4), *Dout = be_alloc(n * 4), *Drstd = be_alloc(N * 4);
    float *Dy = be_alloc(n * 4), *Dout2 = be_alloc(n * 4), *Drstd2 = be_alloc(N * 4), *Dout3 = be_alloc(n * 4), *Drstd3 = be_alloc(N * 4);
    be_rmsnorm_forward(Dout, dt, Drstd, Dx, Dw, N, C, 1e-5f);
    be_residual_rmsnorm(Dy, Dout2, dt, Drstd2, Dx, Dr, Dw, N, C, 1e-5f);
    be_rmsnorm_forward(Dout3, dt, Drstd3, Dy, Dw, N, C, 1e-5f);   // a recomputation of the second norm from y
    CmpRes e1 = cmpd_dt(Dout, out, N, C, dt), e2 = cmpd(Drstd, rstd, N, 1, FLOOR_REL);
    CmpRes e3 = cmpd(Dy, y, N, C, FLOOR_REL), e4 = cmpd_dt(Dout2, out2, N, C, dt), e5 = cmpd(Drstd2, rstd2, N, 1, FLOOR_REL);
    void *g2 = down_bytes(Dout2, n * be_dtype_size(dt)), *g3 = down_bytes(Dout3, n * be_dtype_size(dt));
    float* r2 = down(Drstd2, N);
    int same = !memcmp(g2, g3, n * be_dtype_size(dt)) && same_dev(Drstd3, r2, N);
    free(r2);
    CHECK(ok_dt(e1.err, dt, TOL_ROW) && e2.err <= TOL_ROW && e3.err <= TOL_EW && ok_dt(e4.err, dt, TOL_ROW) && e5.err <= TOL_ROW && same,
          "rmsnorm N %d C %d out %s, per row: out %.2e rstd %.2e; residual + norm: y %.2e out %.2e rstd %.2e; its norm "
          "repeated from y bit-identical: %s (tol %s %g, rstd %g)", N, C, DTN[dt], e1.err, e2.err, e3.err, e4.err, e5.err,
          same ? "yes" : "NO", DTN[dt], dt == BE_F32 ? TOL_ROW : TOL_BF16, TOL_ROW);
    free(g2); free(g3);
    // backward: dx += (from per-row random values), dx in dt, dw from the partials (+= into random values)
    float *dxc = zeros(n), *dwc = zeros(C);
    cpu->be_rmsnorm_backward(dxc, NULL, BE_F32, dwc, dout, x, w, rstd, N, C);   // the CPU: one group, from zero
    float *dx0 = acc_init(dxc, N, C), *dw0 = acc_init(dwc, 1, C);
    int G = be_norm_groups(N);
    float *Ddout = up(dout, n * 4), *Ddx = up(dx0, n * 4), *Dpart = be_alloc((size_t)G * C * 4), *Ddw = up(dw0, C * 4);
    void* Ddxt = be_alloc(n * be_dtype_size(dt));
    long long off0 = 0, *Doff = up(&off0, sizeof off0);
    be_upload(Drstd, rstd, N * 4);   // the backward from the CPU's rstd
    be_rmsnorm_backward(Ddx, Ddxt, dt, Dpart, Ddout, Dx, Dw, Drstd, N, C);
    be_rmsnorm_dw(Ddw, Doff, Dpart, 1, G, C, 1);
    float *gdx = down(Ddx, n), *gdw = down(Ddw, C);
    CmpRes e7 = cmp_rows(gdx, dx0, N, C, FLOOR_REL);   // (the new dx in dt: against dx as it is now)
    float* dxt = down_dt(Ddxt, N, C, C, dt);
    CmpRes e8 = cmp_rows(dxt, gdx, N, C, FLOOR_REL);
    sub(gdx, dx0, n); sub(gdw, dw0, C);
    CmpRes e6 = cmp_rows(gdx, dxc, N, C, FLOOR_REL), e9 = cmp_rows(gdw, dwc, 1, C, FLOOR_REL);
    CHECK(e6.err <= TOL_ROW && e9.err <= TOL_ROW && (dt == BE_F32 ? e8.err == 0 : e8.err <= TOL_BF16) && e7.err > 0,
          "rmsnorm backward N %d C %d, per row: dx += %.2e, dw += %.2e over %d row groups (tol %g); dx in %s vs dx %.2e",
          N, C, e6.err, e9.err, G, TOL_ROW, DTN[dt], e8.err);
    // the dw partials repeat bit for bit
    be_upload(Ddw, dw0, C * 4);
    be_rmsnorm_backward(Ddx, Ddxt, dt, Dpart, Ddout, Dx, Dw, Drstd, N, C);
    be_rmsnorm_dw(Ddw, Doff, Dpart, 1, G, C, 1);
    float* gdw2 = down(Ddw, C);
    sub(gdw2, dw0, C);
    CHECK(cmp_same_bits(gdw, gdw2, C * 4), "rmsnorm N %d C %d: dw (%d row groups) repeats bit for bit", N, C, G);
    free(x); free(r); free(w); free(dout); free(out); free(rstd); free(y); free(out2); free(rstd2); free(dxc); free(dwc);
    free(dx0); free(dw0); free(gdx); free(gdw); free(gdw2); free(dxt);
    void* all[] = { Dx, Dr, Dw, Dout, Drstd, Dy, Dout2, Drstd2, Dout3, Drstd3, Ddout, Ddx, Dpart, Ddw, Ddxt, Doff };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be_free(all[i]);
}

// the norms' weight gradients: several norms at scattered offsets, = and +=
static void test_rmsnorm_dw(void) {
    int n = 5, G = 7, C = 333;
    float *part = rnd((size_t)n * G * C, 1), *base = rnd(4000, 1), *cbase = dup(base, 4000);
    long long off[5] = { 3, 700, 1200, 2000, 3600 };
    float *Dpart = up(part, (size_t)n * G * C * 4), *Dbase = up(base, 4000 * 4);
    long long* Doff = up(off, sizeof off);
    cpu->be_rmsnorm_dw(cbase, off, part, n, G, C, 1); be_rmsnorm_dw(Dbase, Doff, Dpart, n, G, C, 1);
    int a = same_dev(Dbase, cbase, 4000);
    cpu->be_rmsnorm_dw(cbase, off, part, n, G, C, 0); be_rmsnorm_dw(Dbase, Doff, Dpart, n, G, C, 0);
    int b = same_dev(Dbase, cbase, 4000);
    CHECK(a && b, "rmsnorm_dw: 5 norms' partials over 7 groups into scattered rows, += and =, bit-identical to the CPU "
          "(g in order): %s %s", a ? "yes" : "NO", b ? "yes" : "NO");
    free(part); free(base); free(cbase); be_free(Dpart); be_free(Dbase); be_free(Doff);
}

// ---------------------------------------------------------------------------------------------------------
// q, k, v from one matmul's output with RoPE, and the backward's packing: per (row, head)

static float* rope_table_host(int maxpos, int hd) {
    float* cs = malloc((size_t)maxpos * hd * 4);
    for (int p = 0; p < maxpos; p++)
        for (int i = 0; i < hd / 2; i++) {
            double th = p * pow(10000.0, -2.0 * i / hd);
            cs[(size_t)p * hd + i] = (float)(1.1 * cos(th));
            cs[(size_t)p * hd + hd / 2 + i] = (float)(1.1 * sin(th));
        }
    return cs;
}
static void test_qkv_rope_shape(int N, int nh, int nkv, int hd, BeDtype dt) {
    int maxpos = 8192, W = (nh + 2 * nkv) * hd;
    size_t n = (size_t)N * W, nq = (size_t)N * nh * hd, nk = (size_t)N * nkv * hd;
    float *qkv = rnd(n, 1), *cs = rope_table_host(maxpos, hd), *dq = rnd(nq, 1), *dk = rnd(nk, 1), *dv = rnd(nk, 1);
    scale_rows(qkv, (size_t)N * (nh + 2 * nkv), hd, 7, 3, SMALL);
    scale_rows(dq, (size_t)N * nh, hd, 5, 1, SMALL); scale_rows(dk, (size_t)N * nkv, hd, 5, 2, SMALL);
    if (dt == BE_BF16) round_all(qkv, n, round_bf16);
    int* pos = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) pos[i] = (int)(urand() * maxpos);
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *dqkv = malloc(n * 4);
    cpu->be_qkv_rope(q, k, v, qkv, BE_F32, pos, cs, N, nh, nkv, hd);
    cpu->be_qkv_rope_backward(dqkv, BE_F32, dq, dk, dv, pos, cs, N, nh, nkv, hd);
    void* Dqkv = up_dt(qkv, n, dt);
    float *Dcs = up(cs, (size_t)maxpos * hd * 4), *Dq = be_alloc(nq * 4), *Dk = be_alloc(nk * 4), *Dv = be_alloc(nk * 4);
    float *Ddq = up(dq, nq * 4), *Ddk = up(dk, nk * 4), *Ddv = up(dv, nk * 4);
    int* Dpos = up(pos, N * sizeof(int));
    void* Ddqkv = be_alloc(n * be_dtype_size(dt));
    be_qkv_rope(Dq, Dk, Dv, Dqkv, dt, Dpos, Dcs, N, nh, nkv, hd);
    be_qkv_rope_backward(Ddqkv, dt, Ddq, Ddk, Ddv, Dpos, Dcs, N, nh, nkv, hd);
    CmpRes e1 = cmpd(Dq, q, (size_t)N * nh, hd, FLOOR_REL), e2 = cmpd(Dk, k, (size_t)N * nkv, hd, FLOOR_REL);
    int vs = same_dev(Dv, v, nk);
    CmpRes e3 = cmpd_dt(Ddqkv, dqkv, (size_t)N * (nh + 2 * nkv), hd, dt);
    CHECK(e1.err <= TOL_EW && e2.err <= TOL_EW && vs && ok_dt(e3.err, dt, TOL_EW),
          "qkv_rope N %d nh %d nkv %d hd %d from %s (random positions), per (row, head): q %.2e k %.2e (tol %g), v exact %s; "
          "backward packed into %s %.2e (tol %g)", N, nh, nkv, hd, DTN[dt], e1.err, e2.err, TOL_EW, vs ? "yes" : "NO",
          DTN[dt], e3.err, dt == BE_F32 ? TOL_EW : TOL_BF16);
    free(qkv); free(cs); free(dq); free(dk); free(dv); free(pos); free(q); free(k); free(v); free(dqkv);
    void* all[] = { Dqkv, Dcs, Dq, Dk, Dv, Ddq, Ddk, Ddv, Dpos, Ddqkv };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be_free(all[i]);
}

// ---------------------------------------------------------------------------------------------------------
// SwiGLU on [g | u] rows: forward; backward with h recomputed; sized beyond three passes of the grid-stride loops

static void test_swiglu_shape(int N, int F, BeDtype dt) {
    size_t n = (size_t)N * F;
    float *gu = rnd(2 * n, 4), *dh = rnd(n, 1);
    for (int t = 0; t < N; t++) if (t % 7 == 3) for (int j = F; j < 2 * F; j++) gu[(size_t)t * 2 * F + j] *= SMALL;   // small u rows
    scale_rows(dh, N, F, 5, 1, SMALL);
    if (dt == BE_BF16) { round_all(gu, 2 * n, round_bf16); round_all(dh, n, round_bf16); }
    float *h = malloc(n * 4), *dgu = malloc(2 * n * 4), *h2 = malloc(n * 4);
    cpu->be_swiglu_forward(h, gu, BE_F32, N, F);
    cpu->be_swiglu_backward(dgu, h2, dh, gu, BE_F32, N, F);
    void *Dgu = up_dt(gu, 2 * n, dt), *Ddh = up_dt(dh, n, dt), *Dh = be_alloc(n * be_dtype_size(dt));
    void *Ddgu = be_alloc(2 * n * be_dtype_size(dt)), *Dh2 = be_alloc(n * be_dtype_size(dt));
    be_swiglu_forward(Dh, Dgu, dt, N, F);
    be_swiglu_backward(Ddgu, Dh2, Ddh, Dgu, dt, N, F);
    CmpRes e1 = cmpd_dt(Dh, h, N, F, dt), e2 = cmpd_dt(Ddgu, dgu, N, 2 * F, dt), e3 = cmpd_dt(Dh2, h2, N, F, dt);
    void *a = down_bytes(Dh, n * be_dtype_size(dt)), *b = down_bytes(Dh2, n * be_dtype_size(dt));
    int same = !memcmp(a, b, n * be_dtype_size(dt));
    CHECK(ok_dt(e1.err, dt, TOL_EW_EXP) && ok_dt(e2.err, dt, TOL_EW_EXP) && ok_dt(e3.err, dt, TOL_EW_EXP) && same,
          "swiglu N %d F %d in %s (%.2f grid passes), per row: h %.2e, dg|du %.2e, h again in the backward %.2e, "
          "bit-identical to the forward's %s (tol %g)", N, F, DTN[dt], (double)n / GRID_PASS, e1.err, e2.err, e3.err,
          same ? "yes" : "NO", dt == BE_F32 ? TOL_EW_EXP : TOL_BF16);
    free(gu); free(dh); free(h); free(dgu); free(h2); free(a); free(b);
    be_free(Dgu); be_free(Ddh); be_free(Dh); be_free(Ddgu); be_free(Dh2);
}

// attention's row dots from an output stored in dt
static void test_rowdot(int N, int nh, int hd, BeDtype dt) {
    size_t n = (size_t)N * nh * hd;
    float *dout = rnd(n, 1), *out = rnd(n, 1), *D = malloc((size_t)N * nh * 4);
    scale_rows(out, (size_t)N * nh, hd, 7, 3, SMALL);
    if (dt == BE_BF16) round_all(out, n, round_bf16);
    cpu->be_attn_rowdot(D, dout, out, BE_F32, N, nh, hd);
    float *Ddout = up(dout, n * 4), *DD = be_alloc((size_t)N * nh * 4);
    void* Dout = up_dt(out, n, dt);
    be_attn_rowdot(DD, Ddout, Dout, dt, N, nh, hd);
    float* g = down(DD, (size_t)N * nh);
    double e = 0;   // relative to the row's sum |dout * out| (a dot product's own scale)
    for (size_t r = 0; r < (size_t)N * nh; r++) {
        double sc = 0;
        for (int d = 0; d < hd; d++) sc += fabs((double)dout[r * hd + d] * out[r * hd + d]);
        if (sc > 0) e = fmax(e, fabs((double)g[r] - D[r]) / sc);
    }
    CHECK(e <= TOL_D, "attn_rowdot N %d nh %d hd %d, out in %s: %.2e of sum |dout out| (tol %g)", N, nh, hd, DTN[dt], e, TOL_D);
    free(dout); free(out); free(D); free(g); be_free(Ddout); be_free(DD); be_free(Dout);
}

// fp32 -> bf16, to nearest even (ties, NaN, inf, subnormals among the values)
static void test_cast(void) {
    size_t n = 70001;
    float* x = rnd(n, 100);
    uint32_t special[] = { 0x3f808000u, 0x3f818000u, 0x7f800000u, 0xff800000u, 0x00000001u, 0x80000000u, 0x7fc00001u, 0x7f7fffffu };
    for (int i = 0; i < 8; i++) memcpy(&x[i * 1000], &special[i], 4);
    float* Dx = up(x, n * 4);
    void* Db = be_alloc(n * 2);
    be_cast(Db, BE_BF16, Dx, n);
    float* g = down_dt(Db, 1, n, n, BE_BF16);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        float w = round_bf16(x[i]);
        if (!(isnan(w) ? isnan(g[i]) : cmp_same_bits(&w, &g[i], 4))) bad++;
    }
    CHECK(bad == 0, "cast fp32 -> bf16 n %zu (ties to even, inf, NaN, subnormal, the largest float): %zu differ from "
          "round-to-nearest-even", n, bad);
    free(x); free(g); be_free(Dx); be_free(Db);
}

// ---------------------------------------------------------------------------------------------------------
// cross-entropy: statistics, loss and gradient per row; the fused kernel against the two-kernel path; gradients in dt

static void test_xent_shape(int N, int ld, int nv, int v0, BeDtype dt) {
    size_t n = (size_t)N * ld;
    float* lg = rnd(n, 4);
    int* tg = malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) tg[i] = (int)(urand() * (v0 + nv + 20));   // some outside the slice
    tg[2] = -1; tg[N - 1] = -1;
    for (int j = 0; j < ld; j++) lg[(size_t)ld + j] = 0.5f;   // row 1: every logit tied, the target among them
    if (nv > 0) tg[1] = v0 + nv / 2;
    float *Dlg = up(lg, n * 4), *Dlg2 = up(lg, n * 4);
    int* Dtg = up(tg, N * sizeof(int));
    float *lse = malloc(N * 4), *tl = malloc(N * 4), *loss = malloc(N * 4), *mx = malloc(N * 4), *hit = malloc(N * 4);
    float *Dlse = be_alloc(N * 4), *Dtl = be_alloc(N * 4), *Dloss = be_alloc(N * 4), *Dmx = be_alloc(N * 4), *Dhit = be_alloc(N * 4);
    float *Dlse2 = be_alloc(N * 4), *Dloss2 = be_alloc(N * 4);
    cpu->be_xent_stats(lse, tl, lg, tg, N, ld, nv, v0); be_xent_stats(Dlse, Dtl, Dlg, Dtg, N, ld, nv, v0);
    cpu->be_row_max(mx, lg, tg, N, ld, nv, v0); be_row_max(Dmx, Dlg, Dtg, N, ld, nv, v0);
    cpu->be_argmax_hit(hit, mx, tl, tg, N); be_argmax_hit(Dhit, Dmx, Dtl, Dtg, N);
    float* glse = down(Dlse, N);
    CmpRes e1 = cmp_lse_abs(glse, lse, N);
    int tl_ok = same_dev(Dtl, tl, N), mx_ok = same_dev(Dmx, mx, N), hit_ok = same_dev(Dhit, hit, N) && hit[1] == 0.0f;
    be_xent_stats(Dlse, Dtl, Dlg, Dtg, N, ld, nv, v0);
    int rep = same_dev(Dlse, glse, N);
    CHECK(e1.err <= TOL_LSE_ABS && tl_ok && mx_ok && hit_ok && rep,
          "xent stats N %d ld %d nv %d v0 %d: lse |diff| %.2e (tol %g); target logit, row max, hit (a tied row is no hit) "
          "exact: %s %s %s; repeats bit for bit: %s", N, ld, nv, v0, e1.err, TOL_LSE_ABS, tl_ok ? "yes" : "NO",
          mx_ok ? "yes" : "NO", hit_ok ? "yes" : "NO", rep ? "yes" : "NO");
    // finish from the CPU's lse and tl; the fused kernel from scratch
    be_upload(Dlse, lse, N * 4); be_upload(Dtl, tl, N * 4);
    float* ref = dup(lg, n);
    cpu->be_xent_finish(loss, ref, BE_F32, lse, tl, tg, N, ld, nv, v0, 0.37f);
    be_xent_finish(Dloss, Dlg, dt, Dlse, Dtl, Dtg, N, ld, nv, v0, 0.37f);
    be_xent_fused(Dloss2, Dlse2, Dlg2, dt, Dtg, N, ld, nv, v0, 0.37f);
    size_t ldg = dt == BE_BF16 ? 2 * (size_t)ld : (size_t)ld;   // a bf16 gradient row over the fp32 row's first half
    float *g1 = down_dt(Dlg, N, ld, ldg, dt), *g2 = down_dt(Dlg2, N, ld, ldg, dt), *gl = down(Dloss, N), *gl2 = down(Dloss2, N);
    CmpRes e2 = cmp_rows(g1, ref, N, ld, FLOOR_REL), e3 = cmp_rows(g2, ref, N, ld, FLOOR_REL);
    CmpRes e4 = cmp_lse_abs(gl, loss, N), e5 = cmp_lse_abs(gl2, loss, N), e6 = cmpd(Dlse2, lse, N, 1, FLOOR_REL);
    CHECK(ok_dt(e2.err, dt, TOL_EW_EXP) && ok_dt(e3.err, dt, TOL_EW_EXP) && e4.err <= TOL_LSE_ABS && e5.err <= TOL_LSE_ABS &&
          e6.err <= TOL_LSE_ABS,
          "xent finish / fused N %d ld %d nv %d (padding columns, ignored rows), gradient in %s per row: %.2e / %.2e "
          "(tol %g); loss |diff| %.2e / %.2e, fused lse %.2e (tol %g)", N, ld, nv, DTN[dt], e2.err, e3.err,
          dt == BE_F32 ? TOL_EW_EXP : TOL_BF16, e4.err, e5.err, e6.err, TOL_LSE_ABS);
    free(lg); free(tg); free(lse); free(tl); free(loss); free(mx); free(hit); free(glse); free(ref); free(g1); free(g2);
    free(gl); free(gl2);
    void* all[] = { Dlg, Dlg2, Dtg, Dlse, Dtl, Dloss, Dmx, Dhit, Dlse2, Dloss2 };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be_free(all[i]);
}

static void test_exp_log(void) {   // combining slices: exp_sub / log_add with -inf
    int N = 333;
    float *s = rnd(N, 2), *m = rnd(N, 2);
    s[0] = -INFINITY; s[7] = -INFINITY;
    float *Ds = up(s, N * 4), *Dm = up(m, N * 4);
    cpu->be_exp_sub(s, m, N); be_exp_sub(Ds, Dm, N);
    CmpRes e1 = cmpd(Ds, s, N, 1, FLOOR_REL);
    for (int i = 0; i < N; i++) s[i] = fabsf(s[i]) + 0.5f;
    be_upload(Ds, s, N * 4);
    float* l2 = rnd(N, 5);
    float* Dl2 = up(l2, N * 4);
    cpu->be_log_add(l2, s, m, N); be_log_add(Dl2, Ds, Dm, N);
    float* g = down(Dl2, N);
    CmpRes e2 = cmp_lse_abs(g, l2, N);
    CHECK(e1.err <= TOL_EW_EXP && e2.err <= TOL_LSE_ABS, "exp_sub (with -inf), per element %.2e (tol %g); log_add "
          "|diff| %.2e (tol %g)", e1.err, TOL_EW_EXP, e2.err, TOL_LSE_ABS);
    free(s); free(m); free(l2); free(g); be_free(Ds); be_free(Dm); be_free(Dl2);
}

// ---------------------------------------------------------------------------------------------------------
// attn_merge: per (row, head)

static void test_merge(void) {
    int Tq = 371, nh = 3, hd = 20;
    size_t n = (size_t)Tq * nh * hd, nl = (size_t)Tq * nh;
    float *o1 = rnd(n, 1), *o2 = rnd(n, 1), *l1 = rnd(nl, 3), *l2 = rnd(nl, 3);
    scale_rows(o1, nl, hd, 7, 3, SMALL); scale_rows(o2, nl, hd, 7, 3, SMALL);
    for (size_t i = 0; i < nl; i += 5) l1[i] = -INFINITY;
    for (size_t i = 0; i < nl; i += 7) l2[i] = -INFINITY;
    float *D1 = up(o1, n * 4), *D2 = up(o2, n * 4), *E1 = up(l1, nl * 4), *E2 = up(l2, nl * 4);
    cpu->attn_merge(o1, l1, o2, l2, Tq, nh, hd); attn_merge(D1, E1, D2, E2, Tq, nh, hd);
    float* gl = down(E1, nl);
    CmpRes e = cmpd(D1, o1, nl, hd, FLOOR_REL), el = cmp_lse_abs(gl, l1, nl);
    CHECK(e.err <= TOL_MERGE && el.err <= TOL_LSE_ABS, "attn_merge (with -inf on either side), per (row, head): out %.2e "
          "(tol %g) lse |diff| %.2e (tol %g)", e.err, TOL_MERGE, el.err, TOL_LSE_ABS);
    free(o1); free(o2); free(l1); free(l2); free(gl); be_free(D1); be_free(D2); be_free(E1); be_free(E2);
}

static void test_timer(void) {
    BeTimer* t = be_timer_create(1e9);
    int m = 512;
    float *A = be_alloc((size_t)m * m * 4), *C = be_alloc((size_t)m * m * 4);
    be_timer_begin(t);
    for (int i = 0; i < 4; i++) be_matmul(C, A, A, m, m, m, 0, 0, 1, 0);
    be_timer_end(t);
    BeTimes r = be_timer_read(t);
    CHECK(r.regions == 1 && r.wall_s > 0 && r.wall_s < 10, "timer on the device clock: 1 region, %.3f ms", r.wall_s * 1e3);
    be_timer_free(t); be_free(A); be_free(C);
}

// ---------------------------------------------------------------------------------------------------------
// matmul: the result against CPU GEMMs of the inputs rounded as each mode rounds them. The mode that ran is the
// one whose reference matches within TOL_MM; the others must be further than TOL_MM away (a tf32 result fails
// the fp32 check and the bf16 one, and so on).

enum { M_FP32, M_TF32, M_BF16, M_N };
static const char* MODE[M_N] = { "fp32", "tf32", "bf16" };
typedef struct { int m, n, k, ta, tb; float alpha, beta; } MmShape;

// C = alpha op(A) op(B) + beta C0 on the CPU, with A and B rounded by f (NULL: as they are)
static float* mm_ref(const MmShape* s, const float* A, const float* B, const float* C0, float (*f)(float)) {
    size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n;
    float *a = dup(A, na), *b = dup(B, nb), *c = dup(C0, (size_t)s->m * s->n);
    if (f) { round_all(a, na, f); round_all(b, nb, f); }
    cpu->be_matmul(c, a, b, s->m, s->n, s->k, s->ta, s->tb, s->alpha, s->beta);
    free(a); free(b);
    return c;
}

static void test_matmul_shape(int mode, const MmShape* s, int repeat) {
    int m = s->m, n = s->n, k = s->k;
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    // op(A) [m, k] with rows 3, 10, 17, ... 1e-3 smaller (and C0's rows with them): small rows of C
    float *opA = rnd(na, 1), *B = rnd(nb, 1), *C0 = rnd(nc, 1);
    scale_rows(opA, m, k, 7, 3, SMALL); scale_rows(C0, m, n, 7, 3, SMALL);
    float* A = malloc(na * 4);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < k; j++) A[s->ta ? (size_t)j * m + i : (size_t)i * k + j] = opA[(size_t)i * k + j];
    float *dA = up(A, na * 4), *dB = up(B, nb * 4), *dC = up(C0, nc * 4);
    be_matmul(dC, dA, dB, m, n, k, s->ta, s->tb, s->alpha, s->beta);
    float* g = down(dC, nc);
    // references: fp32; tf32 to nearest (ties away) and toward zero; bf16 to nearest even and toward zero
    float (*rf[5])(float) = { NULL, round_tf32, round_tf32_rz, round_bf16, round_bf16_rz };
    const char* rname[5] = { "fp32 inputs", "tf32 (rna) inputs", "tf32 (rz) inputs", "bf16 (rne) inputs", "bf16 (rz) inputs" };
    int rmode[5] = { M_FP32, M_TF32, M_TF32, M_BF16, M_BF16 };
    double e[5];
    for (int r = 0; r < 5; r++) {
        float* ref = mm_ref(s, A, B, C0, rf[r]);
        e[r] = cmp_rows(g, ref, m, n, FLOOR_REL).err;
        free(ref);
    }
    // the closest reference of this mode, and the closest of every other mode
    int best = -1;
    double other = INFINITY;
    for (int r = 0; r < 5; r++) {
        if (rmode[r] == mode) { if (best < 0 || e[r] < e[best]) best = r; }
        else if (e[r] < other) other = e[r];
    }
    CHECK(e[best] <= TOL_MM && other > TOL_MM,
          "matmul %s m %d n %d k %d transA %d transB %d alpha %g beta %g, per row: vs CPU on %s %.2e (tol %g); "
          "vs fp32 %.2e, tf32 %.2e/%.2e, bf16 %.2e/%.2e (other modes must exceed %g: %s ran)",
          MODE[mode], m, n, k, s->ta, s->tb, s->alpha, s->beta, rname[best], e[best], TOL_MM, e[0], e[1], e[2], e[3], e[4],
          TOL_MM, other > TOL_MM ? MODE[mode] : "ANOTHER MODE");
    if (repeat) {
        be_upload(dC, C0, nc * 4);
        be_matmul(dC, dA, dB, m, n, k, s->ta, s->tb, s->alpha, s->beta);
        CHECK(same_dev(dC, g, nc), "matmul %s m %d n %d k %d repeats bit for bit", MODE[mode], m, n, k);
    }
    free(opA); free(A); free(B); free(C0); free(g); be_free(dA); be_free(dB); be_free(dC);
}

static void test_matmul(int mode) {
    static const MmShape shapes[] = {
        { 37, 53, 71, 0, 0, 0.75f, 0.5f }, { 37, 53, 71, 0, 1, 0.75f, 0.5f }, { 37, 53, 71, 1, 0, 0.75f, 0.5f },
        { 37, 53, 71, 1, 1, 0.75f, 0.5f },
        { 128, 256, 64, 0, 1, 1.0f, 0.0f },     // tile multiples, x W^T (the forward's form), beta 0
        { 300, 7, 513, 1, 0, 1.0f, 1.0f },      // dW += dY^T X (the weight gradient's form), long k
        { 1, 1000, 300, 0, 0, -1.5f, 0.25f },   // one row
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) test_matmul_shape(mode, &shapes[i], i == 5);
}

// k = 0: C = beta C by the backend's own grid-stride kernel (m n > one grid pass)
// bf16 operands (both), fp32 accumulation, the result in fp32 or bf16, leading dimensions beyond the rows: against
// the CPU GEMM of the same (bf16) values — fp32 result within TOL_MM, bf16 result within TOL_BF16 (its rounding)
static void test_matmul_bf16(void) {
    static const MmShape shapes[] = { { 37, 53, 71, 0, 1, 1.0f, 0.0f }, { 37, 53, 71, 1, 0, 0.75f, 0.5f },
                                      { 64, 96, 128, 0, 0, 1.0f, 1.0f }, { 29, 31, 17, 1, 1, 1.0f, 0.0f } };
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const MmShape* s = &shapes[si];
        int m = s->m, n = s->n, k = s->k, ar = s->ta ? k : m, ac = s->ta ? m : k, br = s->tb ? n : k, bc = s->tb ? k : n;
        int lda = ac + 3, ldb = bc + 5, ldc = n + 2;   // padded rows: the leading dimensions are used
        float *A = rnd((size_t)ar * lda, 1), *B = rnd((size_t)br * ldb, 1), *C0 = rnd((size_t)m * ldc, 1);
        round_all(A, (size_t)ar * lda, round_bf16); round_all(B, (size_t)br * ldb, round_bf16); round_all(C0, (size_t)m * ldc, round_bf16);
        scale_rows(C0, m, ldc, 7, 3, SMALL);
        round_all(C0, (size_t)m * ldc, round_bf16);
        // the CPU reference on packed copies
        float *pa = malloc((size_t)ar * ac * 4), *pb = malloc((size_t)br * bc * 4), *ref = malloc((size_t)m * n * 4);
        for (int r = 0; r < ar; r++) memcpy(pa + (size_t)r * ac, A + (size_t)r * lda, ac * 4);
        for (int r = 0; r < br; r++) memcpy(pb + (size_t)r * bc, B + (size_t)r * ldb, bc * 4);
        for (int r = 0; r < m; r++) memcpy(ref + (size_t)r * n, C0 + (size_t)r * ldc, n * 4);
        cpu->be_matmul(ref, pa, pb, m, n, k, s->ta, s->tb, s->alpha, s->beta);
        void *dA = up_dt(A, (size_t)ar * lda, BE_BF16), *dB = up_dt(B, (size_t)br * ldb, BE_BF16);
        void *dC = up_dt(C0, (size_t)m * ldc, BE_F32), *dC16 = up_dt(C0, (size_t)m * ldc, BE_BF16);
        be_matmul_ex(dC, BE_F32, ldc, dA, BE_BF16, lda, dB, BE_BF16, ldb, m, n, k, s->ta, s->tb, s->alpha, s->beta);
        be_matmul_ex(dC16, BE_BF16, ldc, dA, BE_BF16, lda, dB, BE_BF16, ldb, m, n, k, s->ta, s->tb, s->alpha, s->beta);
        float *g = down_dt(dC, m, n, ldc, BE_F32), *g16 = down_dt(dC16, m, n, ldc, BE_BF16);
        float *gall = down_dt(dC, m, ldc, ldc, BE_F32);
        int pad_ok = 1;   // the padding columns of C are left alone
        for (int r = 0; r < m; r++) for (int j = n; j < ldc; j++) pad_ok &= gall[(size_t)r * ldc + j] == C0[(size_t)r * ldc + j];
        CmpRes e = cmp_rows(g, ref, m, n, FLOOR_REL), e16 = cmp_rows(g16, ref, m, n, FLOOR_REL);
        CHECK(e.err <= TOL_MM && e16.err <= TOL_BF16 && pad_ok,
              "matmul bf16 x bf16 m %d n %d k %d transA %d transB %d alpha %g beta %g, lda/ldb/ldc padded: fp32 result %.2e "
              "(tol %g), bf16 result %.2e (tol %g), padding untouched %s", m, n, k, s->ta, s->tb, s->alpha, s->beta, e.err,
              TOL_MM, e16.err, TOL_BF16, pad_ok ? "yes" : "NO");
        free(A); free(B); free(C0); free(pa); free(pb); free(ref); free(g); free(g16); free(gall);
        be_free(dA); be_free(dB); be_free(dC); be_free(dC16);
    }
}

static void test_matmul_k0(void) {
    int m = 1000, n = 1300;
    size_t nc = (size_t)m * n;
    float* C = rnd(nc, 1);
    float* dC = up(C, nc * 4);
    be_matmul(dC, dC, dC, m, n, 0, 0, 0, 1.0f, 0.5f);
    for (size_t i = 0; i < nc; i++) C[i] *= 0.5f;
    int s1 = same_dev(dC, C, nc);
    be_matmul(dC, dC, dC, m, n, 0, 0, 0, 1.0f, 0.0f);
    float* z = zeros(nc);
    int s2 = same_dev(dC, z, nc);
    CHECK(s1 && s2, "matmul k 0, m n %zu (%.2f grid passes): C = 0.5 C exact %s, beta 0 gives zeros %s", nc,
          (double)nc / GRID_PASS, s1 ? "yes" : "NO", s2 ? "yes" : "NO");
    free(C); free(z); be_free(dC);
}

// ---------------------------------------------------------------------------------------------------------
// attention: forward as key blocks merged in place, backward into non-zero accumulators, per (row, head)

enum { POS_SAME, POS_CHUNKS, POS_SHUFFLED, POS_LATER };
// docs: 0 none; 1 document ids from positions (starts inside tiles and at tile edges); 2 also positions restarted
// at each document; 3 also query rows of a document that has no key (lse stays -inf); 4 documents of varied
// lengths (1 .. 180) over the whole sequence; 5 every query in document 1, the last 600 keys too, the keys before
// them in document 0
enum { F_REPEAT = 1, F_BF16 = 2, F_ENGINE = 4 };   // flags: run twice, compare bits; bf16 kernels only; also on the cuDNN engine
typedef struct { const char* name; int Tq, Tk, nh, nkv, hd, mask, pos, docs, split, flags; } Case;
static int doc_of(int p, int* start) {
    static const int st[] = { 0, 7, 16, 32, 33, 64, 100, 128, 129, 150 };
    int d = 0;
    for (int i = 1; i < (int)(sizeof st / sizeof st[0]); i++) if (st[i] <= p) d = i;
    *start = st[d];
    return d;
}
static int doc_of_long(int p) {
    static const int len[] = { 37, 91, 1, 64, 128, 13, 180, 64, 50, 2, 77 };
    int d = 0, s = 0;
    while (s + len[d % 11] <= p) s += len[d++ % 11];
    return d;
}

// The conditioning of dq and dk (see the header): compare.h's cmp_attn_floors with KAPPA.
#define KAPPA 0.05
static void attn_floors(double* fq, double* fk, const Case* c, const float* q, const float* k, const float* v,
                        const float* dout, const float* o, const float* l, const size_t* voff, const int* vlist, float sc) {
    cmp_attn_floors(fq, fk, c->Tq, c->Tk, c->nh, c->nkv, c->hd, q, k, v, dout, o, l, voff, vlist, sc, KAPPA);
}
// rows whose floor exceeds their own largest |ref| (the cancelling ones)
static int count_floored(const float* r, const double* fl, size_t nrows, int len) {
    int n = 0;
    for (size_t i = 0; i < nrows; i++) n += fl[i] > cmp_absmax(r + i * len, len);
    return n;
}

typedef struct { double out, lse, D, dq, dk, dv; } AttnErr;
static AttnErr worst[3];   // per kernel family (0 fp32, 1 bf16, 2 cuDNN): the largest errors seen, for the summary line

// The engine pass (g_engine = 1): the bf16 cases again with the fast engine (cuDNN, emulated: its interpreter of
// cudnn_sdpa.cu's graphs) enabled for both classes and the positions mirrored on the host; which engine computed the
// block is checked (cuDNN where the block can go to it: no document boundary inside, positions in few runs).
static int g_engine = 0;
int emu_pointer_kind(const void* p) __attribute__((weak));   // defined by the emulation only

static void test_attention(const Case* c, int bf16) {
    double t0 = now_s();
    const char* fam = g_engine ? "cuDNN engine (bf16)" : bf16 ? "bf16" : "fp32";
    double tol_o = bf16 ? TOL_ABF_OUT : TOL_A32, tol_l = bf16 ? TOL_ABF_LSE : TOL_A32, tol_g = bf16 ? TOL_ABF_GRAD : TOL_A32_GRAD;
    int Tq = c->Tq, Tk = c->Tk, nh = c->nh, nkv = c->nkv, hd = c->hd;
    size_t nq = (size_t)Tq * nh * hd, nk = (size_t)Tk * nkv * hd, nl = (size_t)Tq * nh, nkr = (size_t)Tk * nkv;
    float sc = 1.0f / sqrtf((float)hd);
    // inputs; small: query head nh-1, value head 0 (out, dq, dk of its group), dout rows 3 mod 7 and the last 5
    // (dq rows; in causal order also the dk, dv rows of the last keys)
    float *q = rnd(nq, 2), *k = rnd(nk, 2), *v = rnd(nk, 1), *dout = rnd(nq, 1);
    for (int i = 0; i < Tq; i++) for (int d = 0; d < hd; d++) q[((size_t)i * nh + nh - 1) * hd + d] *= SMALL;
    if (nkv > 1) for (int j = 0; j < Tk; j++) for (int d = 0; d < hd; d++) v[(size_t)j * nkv * hd + d] *= SMALL;
    scale_rows(dout, Tq, (size_t)nh * hd, 7, 3, SMALL);
    scale_rows(dout, Tq, (size_t)nh * hd, 1, Tq > 5 ? Tq - 5 : 0, SMALL);
    if (bf16) { round_all(q, nq, round_bf16); round_all(k, nk, round_bf16); round_all(v, nk, round_bf16); round_all(dout, nq, round_bf16); }
    // positions and documents
    int *qp = malloc(Tq * sizeof(int)), *kp = malloc(Tk * sizeof(int));
    for (int i = 0; i < Tq; i++) qp[i] = c->pos == POS_CHUNKS ? Tk / 2 + i : c->pos == POS_LATER ? Tk + i : i;
    for (int j = 0; j < Tk; j++) kp[j] = j;
    if (c->pos == POS_SHUFFLED) {
        for (int j = 0; j < Tk; j++) kp[j] = 10 + (int)(urand() * 2 * Tk);
        for (int i = 0; i < Tq; i++) qp[i] = (int)(urand() * 2 * Tk);
        qp[0] = 0;
    }
    int *qd = malloc(Tq * sizeof(int)), *kd = malloc(Tk * sizeof(int)), st;
    for (int i = 0; i < Tq; i++) {
        qd[i] = c->docs == 5 ? 1 : c->docs == 4 ? doc_of_long(qp[i]) : doc_of(qp[i], &st);
        if (c->docs == 3 && i % 9 == 4) qd[i] = 1000;
        if (c->docs == 2) qp[i] -= st;
    }
    for (int j = 0; j < Tk; j++) {
        kd[j] = c->docs == 5 ? (j >= Tk - 600) : c->docs == 4 ? doc_of_long(kp[j]) : doc_of(kp[j], &st);
        if (c->docs == 2) kp[j] -= st;
    }
    // visibility on the host: the keys each query sees (CSR voff / vlist)
    size_t* voff = malloc((Tq + 1) * sizeof(size_t));
    size_t nvis = 0, cap = 1024;
    int* vlist = malloc(cap * sizeof(int));
    for (int i = 0; i < Tq; i++) {
        voff[i] = nvis;
        for (int j = 0; j < Tk; j++)
            if ((c->mask == ATTN_MASK_NONE || kp[j] <= qp[i]) && (!c->docs || kd[j] == qd[i])) {
                if (nvis == cap) vlist = realloc(vlist, (cap *= 2) * sizeof(int));
                vlist[nvis++] = j;
            }
    }
    voff[Tq] = nvis;
    unsigned char* kseen = calloc(Tk, 1);
    for (size_t e = 0; e < nvis; e++) kseen[vlist[e]] = 1;
    int nempty = 0, none = 0;
    for (int i = 0; i < Tq; i++) { nempty += voff[i + 1] == voff[i]; none += voff[i + 1] - voff[i] == 1; }

    float *Dq = up(q, nq * 4), *Dk = up(k, nk * 4), *Dv = up(v, nk * 4), *Ddout = up(dout, nq * 4);
    int *Dqp = up(qp, Tq * sizeof(int)), *Dkp = up(kp, Tk * sizeof(int));
    int *Dqd = up(qd, Tq * sizeof(int)), *Dkd = up(kd, Tk * sizeof(int));
    const int *hqd = c->docs ? qd : NULL, *Dqd_ = c->docs ? Dqd : NULL;   // query document ids (host, device) or none
    long long cnt0[2];
    attn_engine_counts(cnt0);
    if (g_engine) {
        attn_host_mirror(Dqp, qp, Tq); attn_host_mirror(Dkp, kp, Tk);
        attn_host_mirror(Dqd, qd, Tq); attn_host_mirror(Dkd, kd, Tk);
    }
    // key blocks: [h1, Tk) first, then [0, h1) (split), or one block
    int h1 = c->split ? Tk / 2 : 0, nb = c->split ? 2 : 1, j0s[2] = { h1, 0 }, ns[2] = { Tk - h1, h1 };
    float *o = malloc(nq * 4), *l = malloc(nl * 4), *Do = be_alloc(nq * 4), *Dl = be_alloc(nl * 4);
    cpu->attn_forward_begin(o, l, Tq, nh, hd);
    for (int b = 0; b < nb; b++) {
        size_t ko = (size_t)j0s[b] * nkv * hd;
        cpu->attn_block_forward(o, l, q, qp, hqd, Tq, k + ko, v + ko, kp + j0s[b], c->docs ? kd + j0s[b] : NULL, ns[b],
                                nh, nkv, hd, sc, c->mask);
    }
    float *go = NULL, *gl = NULL;
    int rep_f = 1;
    for (int rep = 0; rep < ((c->flags & F_REPEAT) ? 2 : 1); rep++) {   // repeat: a second run must give the same bits
        attn_forward_begin(Do, Dl, Tq, nh, hd);
        for (int b = 0; b < nb; b++) {
            size_t ko = (size_t)j0s[b] * nkv * hd;
            attn_block_forward(Do, Dl, Dq, Dqp, Dqd_, Tq, Dk + ko, Dv + ko, Dkp + j0s[b], c->docs ? Dkd + j0s[b] : NULL,
                               ns[b], nh, nkv, hd, sc, c->mask);
        }
        if (!rep) { go = down(Do, nq); gl = down(Dl, nl); }
        else rep_f = same_dev(Do, go, nq) && same_dev(Dl, gl, nl);
    }
    CmpRes eo = cmp_rows(go, o, nl, hd, FLOOR_REL), el = cmp_lse_abs(gl, l, nl);
    // rows that see no key: lse -inf, out 0, exactly
    int bad_empty = 0;
    for (int i = 0; i < Tq; i++)
        if (voff[i + 1] == voff[i])
            for (int h = 0; h < nh; h++) {
                if (gl[(size_t)i * nh + h] != -INFINITY) bad_empty++;
                for (int d = 0; d < hd; d++) if (go[((size_t)i * nh + h) * hd + d] != 0.0f) { bad_empty++; break; }
            }
    int nan_f = cmp_has_nan(go, nq) || cmp_has_nan(gl, nl);
    // bf16: the P rounding must show (the bf16 kernels ran), far above the fp32 kernels' error
    int mode_ok = bf16 ? eo.err > TOL_A32 : 1;
    CHECK(eo.err <= tol_o && el.err <= tol_l && !bad_empty && !nan_f && mode_ok && rep_f,
          "attention %s kernels %s forward, per (row, head): out %.2e (row %ld) lse |diff| %.2e (tol %g, %g)%s; "
          "%d rows see no key (lse -inf, out 0: %s), NaN: %s%s", fam, c->name, eo.err, eo.row / nh, el.err, tol_o, tol_l,
          bf16 ? (mode_ok ? ", above the fp32 tol: bf16 P" : ", NOT above the fp32 tol: did the bf16 kernels run?") : "",
          nempty, bad_empty ? "NO" : "yes", nan_f ? "YES" : "no", (c->flags & F_REPEAT) ? (rep_f ? "; repeat bit-identical" : "; repeat DIFFERS") : "");

    // backward from the CPU's (out, lse), both sides
    be_upload(Do, o, nq * 4); be_upload(Dl, l, nl * 4);
    float *D = malloc(nl * 4), *DD = be_alloc(nl * 4);
    int rep_b0 = 1;
    cpu->attn_backward_begin(D, dout, o, Tq, nh, hd); attn_backward_begin(DD, Ddout, Do, Tq, nh, hd);
    float* gD = down(DD, nl);
    if (c->flags & F_REPEAT) { attn_backward_begin(DD, Ddout, Do, Tq, nh, hd); rep_b0 = same_dev(DD, gD, nl); }
    double eD = 0;
    for (size_t r = 0; r < nl; r++) {   // relative to the dot product's own size
        double s = 0;
        for (int d = 0; d < hd; d++) s += fabs((double)dout[r * hd + d] * o[r * hd + d]);
        double e = fabs((double)gD[r] - D[r]) / (s > 0 ? s : 1e-30);
        if (!(e <= eD)) eD = e;
    }
    // the CPU's contributions from zero; the GPU accumulates into per-row random initial values
    float *dqc = zeros(nq), *dkc = zeros(nk), *dvc = zeros(nk);
    for (int b = 0; b < nb; b++) {
        size_t ko = (size_t)j0s[b] * nkv * hd;
        cpu->attn_block_backward(dqc, dkc + ko, dvc + ko, dout, q, l, D, qp, hqd, Tq, k + ko, v + ko, kp + j0s[b],
                                 c->docs ? kd + j0s[b] : NULL, ns[b], nh, nkv, hd, sc, c->mask);
    }
    float *dq0 = acc_init(dqc, nl, hd), *dk0 = acc_init(dkc, nkr, hd), *dv0 = acc_init(dvc, nkr, hd);
    float *Ddq = up(dq0, nq * 4), *Ddk = up(dk0, nk * 4), *Ddv = up(dv0, nk * 4);
    float *gq = NULL, *gk = NULL, *gv = NULL;
    int rep_b = 1;
    for (int rep = 0; rep < ((c->flags & F_REPEAT) ? 2 : 1); rep++) {
        if (rep) { be_upload(Ddq, dq0, nq * 4); be_upload(Ddk, dk0, nk * 4); be_upload(Ddv, dv0, nk * 4); }
        for (int b = 0; b < nb; b++) {
            size_t ko = (size_t)j0s[b] * nkv * hd;
            attn_block_backward(Ddq, Ddk + ko, Ddv + ko, Ddout, Dq, Dl, DD, Dqp, Dqd_, Tq, Dk + ko, Dv + ko, Dkp + j0s[b],
                                c->docs ? Dkd + j0s[b] : NULL, ns[b], nh, nkv, hd, sc, c->mask);
        }
        if (!rep) { gq = down(Ddq, nq); gk = down(Ddk, nk); gv = down(Ddv, nk); }
        // (cuDNN adds dq with fp32 atomics across key tiles, in no fixed order: its last bits may differ between runs;
        // dk, dv, out and lse must repeat)
        else rep_b = rep_b0 && (g_engine || same_dev(Ddq, gq, nq)) && same_dev(Ddk, gk, nk) && same_dev(Ddv, gv, nk);
    }
    // queries that see no key and keys that no query sees: their accumulators unchanged, exactly
    int bad_untouched = 0;
    for (int i = 0; i < Tq; i++)
        if (voff[i + 1] == voff[i]) bad_untouched += memcmp(gq + (size_t)i * nh * hd, dq0 + (size_t)i * nh * hd, (size_t)nh * hd * 4) != 0;
    for (int j = 0; j < Tk; j++)
        if (!kseen[j])
            bad_untouched += memcmp(gk + (size_t)j * nkv * hd, dk0 + (size_t)j * nkv * hd, (size_t)nkv * hd * 4) != 0 ||
                             memcmp(gv + (size_t)j * nkv * hd, dv0 + (size_t)j * nkv * hd, (size_t)nkv * hd * 4) != 0;
    int nan_b = cmp_has_nan(gq, nq) || cmp_has_nan(gk, nk) || cmp_has_nan(gv, nk) || cmp_has_nan(gD, nl);
    sub(gq, dq0, nq); sub(gk, dk0, nk); sub(gv, dv0, nk);
    double *fq = malloc(nl * sizeof(double)), *fk = malloc(nkr * sizeof(double));
    attn_floors(fq, fk, c, q, k, v, dout, o, l, voff, vlist, sc);
    int nfq = count_floored(dqc, fq, nl, hd), nfk = count_floored(dkc, fk, nkr, hd);
    CmpRes eq = cmp_rows_ex(gq, dqc, nl, hd, FLOOR_REL, fq), ek = cmp_rows_ex(gk, dkc, nkr, hd, FLOOR_REL, fk);
    CmpRes ev = cmp_rows(gv, dvc, nkr, hd, FLOOR_REL);
    CHECK(eD <= TOL_D && eq.err <= tol_g && ek.err <= tol_g && ev.err <= tol_g && !bad_untouched && !nan_b && rep_b,
          "attention %s kernels %s backward, per (row, head): D %.2e (tol %g) dq %.2e (row %ld) dk %.2e (row %ld) "
          "dv %.2e (row %ld) (tol %g); %d single-key rows, %d dq and %d dk rows held to %.2f of their terms; "
          "untouched rows exact: %s, NaN: %s%s (%.1f s)", fam, c->name,
          eD, TOL_D, eq.err, eq.row / nh, ek.err, ek.row / nkv, ev.err, ev.row / nkv, tol_g, none, nfq, nfk, KAPPA,
          bad_untouched ? "NO" : "yes", nan_b ? "YES" : "no",
          (c->flags & F_REPEAT) ? (rep_b ? (g_engine ? "; repeat bit-identical (dk, dv; dq by atomics)" : "; repeat bit-identical")
                                         : "; repeat DIFFERS") : "", now_s() - t0);
    if (g_engine) {   // cuDNN computed the blocks, or (documents inside, scattered positions) the own kernels did
        long long cnt1[2];
        attn_engine_counts(cnt1);
        int want_fast = !c->docs && c->pos != POS_SHUFFLED;
        long long nf = cnt1[ATTN_ENGINE_FAST] - cnt0[ATTN_ENGINE_FAST], no = cnt1[ATTN_ENGINE_OWN] - cnt0[ATTN_ENGINE_OWN];
        CHECK(want_fast ? nf > 0 && no == 0 : nf == 0 && no > 0, "attention %s %s: %lld pieces on cuDNN, %lld blocks on the own "
              "kernels (expected: %s)", fam, c->name, nf, no, want_fast ? "cuDNN only" : "the own kernels only");
        attn_host_mirror(Dqp, NULL, 0); attn_host_mirror(Dkp, NULL, 0);   // (freed below)
        attn_host_mirror(Dqd, NULL, 0); attn_host_mirror(Dkd, NULL, 0);
    }
    AttnErr* w = &worst[g_engine ? 2 : bf16];
    w->out = fmax(w->out, eo.err); w->lse = fmax(w->lse, el.err); w->D = fmax(w->D, eD);
    w->dq = fmax(w->dq, eq.err); w->dk = fmax(w->dk, ek.err); w->dv = fmax(w->dv, ev.err);

    free(q); free(k); free(v); free(dout); free(qp); free(kp); free(qd); free(kd); free(voff); free(vlist); free(kseen);
    free(o); free(l); free(go); free(gl); free(D); free(gD); free(dqc); free(dkc); free(dvc);
    free(dq0); free(dk0); free(dv0); free(gq); free(gk); free(gv); free(fq); free(fk);
    void* all[] = { Dq, Dk, Dv, Ddout, Dqp, Dkp, Dqd, Dkd, Do, Dl, DD, Ddq, Ddk, Ddv };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be_free(all[i]);
}

// attn_forward_begin beyond the fill kernel's grid cap (65536 blocks of 256 threads = 16.8M elements)
static void test_attn_begin_big(void) {
    int Tq = 33000, nh = 8, hd = 128;
    size_t n = (size_t)Tq * nh * hd, nl = (size_t)Tq * nh;
    float* x = malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = 1.0f;
    float *Do = up(x, n * 4), *Dl = up(x, nl * 4);
    attn_forward_begin(Do, Dl, Tq, nh, hd);
    float *go = down(Do, n), *gl = down(Dl, nl);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += go[i] != 0.0f;
    for (size_t i = 0; i < nl; i++) bad += gl[i] != -INFINITY;
    CHECK(!bad, "attn_forward_begin Tq %d nh %d hd %d (%zu elements = %.2f passes of the 65536-block grid): out 0, lse "
          "-inf everywhere (%zu wrong)", Tq, nh, hd, n, n / 16777216.0, bad);
    free(x); free(go); free(gl); be_free(Do); be_free(Dl);
}

// the tf32 setting runs the bf16 attention kernels: bit-identical results
static void test_attention_tf32(void) {
    int T = 90, nh = 4, nkv = 2, hd = 64;
    size_t nq = (size_t)T * nh * hd, nk = (size_t)T * nkv * hd, nl = (size_t)T * nh;
    float *q = rnd(nq, 2), *k = rnd(nk, 2), *v = rnd(nk, 1), *dout = rnd(nq, 1);
    int* pos = malloc(T * sizeof(int));
    for (int i = 0; i < T; i++) pos[i] = i;
    float *Dq = up(q, nq * 4), *Dk = up(k, nk * 4), *Dv = up(v, nk * 4), *Ddout = up(dout, nq * 4);
    int* Dp = up(pos, T * sizeof(int));
    float *Do = be_alloc(nq * 4), *Dl = be_alloc(nl * 4), *DD = be_alloc(nl * 4), *Ddq = be_alloc(nq * 4);
    float *Ddk = be_alloc(nk * 4), *Ddv = be_alloc(nk * 4);
    float* res[2][4];
    const char* pr[2] = { "bf16", "tf32" };
    for (int p = 0; p < 2; p++) {
        be_set_matmul_precision(pr[p]);
        attn_forward_begin(Do, Dl, T, nh, hd);
        attn_block_forward(Do, Dl, Dq, Dp, NULL, T, Dk, Dv, Dp, NULL, T, nh, nkv, hd, 0.125f, ATTN_MASK_CAUSAL);
        attn_backward_begin(DD, Ddout, Do, T, nh, hd);
        be_zero(Ddq, nq * 4); be_zero(Ddk, nk * 4); be_zero(Ddv, nk * 4);
        attn_block_backward(Ddq, Ddk, Ddv, Ddout, Dq, Dl, DD, Dp, NULL, T, Dk, Dv, Dp, NULL, T, nh, nkv, hd, 0.125f,
                            ATTN_MASK_CAUSAL);
        res[p][0] = down(Do, nq); res[p][1] = down(Ddq, nq); res[p][2] = down(Ddk, nk); res[p][3] = down(Ddv, nk);
    }
    int same = cmp_same_bits(res[0][0], res[1][0], nq * 4) && cmp_same_bits(res[0][1], res[1][1], nq * 4) &&
               cmp_same_bits(res[0][2], res[1][2], nk * 4) && cmp_same_bits(res[0][3], res[1][3], nk * 4);
    CHECK(same, "attention under the tf32 setting runs the bf16 kernels: out, dq, dk, dv bit-identical to bf16");
    for (int p = 0; p < 2; p++) for (int i = 0; i < 4; i++) free(res[p][i]);
    free(q); free(k); free(v); free(dout); free(pos);
    void* all[] = { Dq, Dk, Dv, Ddout, Dp, Do, Dl, DD, Ddq, Ddk, Ddv };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be_free(all[i]);
}

// The fast engine (cuDNN; under the emulation its interpreter of the graphs): the self-check passes and enables both
// classes; every bf16 case with head dim 64 or 128 runs again on it against the CPU, with the tolerances of the bf16
// kernels; faults of the emulated library (RINGLM_EMU_CUDNN) end in the own kernels, or (attn_engine = cudnn) an error.
static void test_engine(const Case* cases, size_t n) {
    double t0 = now_s();
    be_set_matmul_precision("bf16");
    AttnRunShape rs = { 4, 2, 64, 0 };
    unsigned fast = 0;
    char rep[4096], err[1024];
    int rc = attn_engine_select("auto", &rs, &fast, rep, sizeof rep, err, sizeof err);
    CHECK(rc == 0 && fast == 3 && strstr(rep, "unmasked blocks") && strstr(rep, "causal blocks") && !strstr(rep, ": own kernels"),
          "attn_engine = auto: the self-check puts both classes on cuDNN (fast %u): %s", fast, rc ? err : rep);
    if (rc || fast != 3) { printf("%s\n", rep); return; }
    printf("%s\n", rep);
    attn_engine_use(fast);
    g_engine = 1;
    for (size_t i = 0; i < n; i++)
        if (cases[i].flags & F_ENGINE) test_attention(&cases[i], 1);
    g_engine = 0;
    attn_engine_use(0);
    // faults: the emulated library reads RINGLM_EMU_CUDNN at each call (on a GPU, with the real cuDNN: not these)
    if (!emu_pointer_kind) { printf("(cuDNN engine: %.1f s; the fault cases need the emulated cuDNN)\n", now_s() - t0); return; }
    static const struct { const char* fault; unsigned want; const char* says; } F[] = {
        { "wrong:bwd", 0, "dq differs" }, { "unsupported:causal", 1, "no engine" },
        { "fail:unmasked", 2, "CUDNN_STATUS_EXECUTION_FAILED" },
    };
    for (size_t i = 0; i < sizeof F / sizeof *F; i++) {
        setenv("RINGLM_EMU_CUDNN", F[i].fault, 1);
        rc = attn_engine_select("auto", &rs, &fast, rep, sizeof rep, err, sizeof err);
        CHECK(rc == 0 && fast == F[i].want && strstr(rep, F[i].says), "RINGLM_EMU_CUDNN=%s, attn_engine = auto: cuDNN for "
              "classes %u (want %u), the report names the reason (%s): %s", F[i].fault, fast, F[i].want, F[i].says, rep);
        if (i) continue;   // (attn_engine = cudnn: once)
        rc = attn_engine_select("cudnn", &rs, &fast, rep, sizeof rep, err, sizeof err);
        CHECK(rc == 1 && strstr(err, F[i].says), "RINGLM_EMU_CUDNN=%s, attn_engine = cudnn: an error naming it: %s", F[i].fault,
              rc ? err : "none");
    }
    unsetenv("RINGLM_EMU_CUDNN");
    rc = attn_engine_select("own", &rs, &fast, rep, sizeof rep, err, sizeof err);
    CHECK(rc == 0 && fast == 0 && strstr(rep, "attn_engine = own"), "attn_engine = own: no class on cuDNN: %s", rep);
    rc = attn_engine_select("fast", &rs, &fast, rep, sizeof rep, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "must be auto, cudnn or own"), "an unknown attn_engine is refused: %s", rc ? err : "accepted");
    printf("(cuDNN engine: %.1f s)\n", now_s() - t0);
}

// The work of the bf16 attention kernels, from their per-block statistics (tiles computed, visibility steps):
// - the scan for the next visible tile takes 32 candidates per step (a ballot), so no block spends more steps than
//   tiles computed + 1 + candidates / 32 (a serial scan takes one step per candidate);
// - the backward (dK, dV and dQ in one pass: key tiles of 128 at head_dim 64, query tiles of 32) splits each group of
//   query heads over several blocks when (key tile, KV head) blocks are too few to fill the device, so that no block
//   computes more tiles than the causal minimum (the query tiles one head's first key tile sees); one block per
//   (key tile, KV head) over the whole group takes grp times that;
// - the tiles are the device's (cuda_attn_config): on the emulated H200, 128 keys per forward tile at head_dim 64.
void cuda_attn_stats_enable(int on);
int cuda_attn_stats(int kind, int* out, int cap);
void cuda_attn_config(int* fwd_bn64, int* fwd_bn128);
static void test_attention_work(void) {
    int T = 256, nh = 8, nkv = 2, hd = 64, grp = nh / nkv, fbm = 128, bq = 32, bnk = 128, fbn, fbn128;
    cuda_attn_config(&fbn, &fbn128);
    CHECK(fbn == 128 && fbn128 == 32, "attention forward tiles on the emulated H200: %d keys at head_dim 64, %d at 128 "
          "(want 128, 32)", fbn, fbn128);
    size_t nq = (size_t)T * nh * hd, nk = (size_t)T * nkv * hd, nl = (size_t)T * nh;
    be_set_matmul_precision("bf16");
    float *q = rnd(nq, 1), *k = rnd(nk, 1), *v = rnd(nk, 1), *g = rnd(nq, 1);
    int* pos = malloc(T * sizeof(int));
    for (int i = 0; i < T; i++) pos[i] = i;
    float *Dq = up(q, nq * 4), *Dk = up(k, nk * 4), *Dv = up(v, nk * 4), *Dg = up(g, nq * 4);
    int* Dp = up(pos, T * sizeof(int));
    float *Do = be_alloc(nq * 4), *Dl = be_alloc(nl * 4), *DD = be_alloc(nl * 4), *Ddq = be_alloc(nq * 4), *Ddk = be_alloc(nk * 4),
          *Ddv = be_alloc(nk * 4);
    cuda_attn_stats_enable(1);
    attn_forward_begin(Do, Dl, T, nh, hd);
    attn_block_forward(Do, Dl, Dq, Dp, NULL, T, Dk, Dv, Dp, NULL, T, nh, nkv, hd, 0.125f, ATTN_MASK_CAUSAL);
    attn_backward_begin(DD, Dg, Do, T, nh, hd);
    attn_block_backward(Ddq, Ddk, Ddv, Dg, Dq, Dl, DD, Dp, NULL, T, Dk, Dv, Dp, NULL, T, nh, nkv, hd, 0.125f, ATTN_MASK_CAUSAL);
    static const char* KIND[2] = { "forward", "backward (dK, dV, dQ)" };
    int st[2 * 4096], nqt = T / bq, worst_tiles = 0, nb[2];
    for (int kind = 0; kind < 2; kind++) {
        int n = nb[kind] = cuda_attn_stats(kind, st, 4096), bad = 0, worst = 0;
        // candidates per block: key tiles (forward), or query tiles of the block's heads (backward)
        int cand = kind == 1 ? (n > 0 ? grp * nqt * (T / bnk * nkv) / n : 0) : T / fbn;
        for (int b = 0; b < n; b++) {
            int tiles = st[2 * b], steps = st[2 * b + 1];
            bad += steps > tiles + 1 + (cand + 31) / 32;
            if (steps > worst) worst = steps;
            if (kind == 1 && tiles > worst_tiles) worst_tiles = tiles;
        }
        CHECK(n > 0 && !bad, "attention bf16 %s kernel: %d blocks, each within tiles + 1 + %d / 32 visibility steps (%d blocks "
              "over; the most steps %d)", KIND[kind], n, cand, bad, worst);
    }
    CHECK(nb[0] == T / fbm * nh, "attention bf16 forward, T %d, %d heads: %d blocks (query tiles of %d rows x heads: %d)", T, nh,
          nb[0], fbm, T / fbm * nh);
    CHECK(nb[1] == T / bnk * nkv * grp && worst_tiles == nqt, "attention bf16 backward, causal T %d, GQA %d/%d: %d blocks "
          "(%d key tiles x %d KV heads x %d: the head group split), the longest computes %d tiles (the causal minimum: %d; "
          "a block per key tile over the whole group: %d)", T, nh, nkv, nb[1], T / bnk, nkv, grp, worst_tiles, nqt, grp * nqt);
    cuda_attn_stats_enable(0);
    free(q); free(k); free(v); free(g); free(pos);
    void* all[] = { Dq, Dk, Dv, Dg, Dp, Do, Dl, DD, Ddq, Ddk, Ddv };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be_free(all[i]);
}

int main(void) {
    char err[512];
    if (be_init(0, err, sizeof err)) {
        if (strstr(err, "no CUDA device")) { printf("%s\n", err); return 77; }
        printf("FAIL %s\n0 passed, 1 failed\n", err);
        return 1;
    }
    cpu = cpu_backend();
    if (getenv("RINGLM_TEST_SEED")) rng ^= strtoull(getenv("RINGLM_TEST_SEED"), NULL, 0) * 0x2545f4914f6cdd1dULL;
    if (cpu->be_init(0, err, sizeof err)) { printf("FAIL cpu backend: %s\n0 passed, 1 failed\n", err); return 1; }
    cpu->attn_init(128);
    double t0 = now_s();
    test_comparator();
    test_elementwise();
    test_host_copies();
    test_split_merge_shape(37, 6 * 24 + 5, 24, 3, 3);        // Q-like: 3 parts of 24 columns, ld with spare columns
    test_split_merge_shape(4099, 2 * 64, 64, 4, 2);          // KV: 2 heads for 4 parts (each head to 2 parts)
    test_split_merge_shape(7000, 4 * 50, 50, 8, 4);          // 8 parts, 4 blocks, > 2 grid passes
    test_sumsq();
    test_scalars();
    test_embedding(1500, 777, 100, 3000);
    test_embedding(1300, 40, 5000, 70000);
    for (int d = 0; d < 2; d++) {   // fp32 and bf16 activations
        BeDtype dt = d ? BE_BF16 : BE_F32;
        test_rmsnorm_shape(37, 1000, dt);
        test_rmsnorm_shape(17000, 40, dt);
        test_rmsnorm_shape(5, 7, dt);
        test_qkv_rope_shape(29, 3, 1, 18, dt);
        test_qkv_rope_shape(4099, 5, 1, 130, dt);   // > 2 grid passes
        test_qkv_rope_shape(13, 4, 2, 9, dt);       // an odd head_dim: its last element goes along unrotated
        test_swiglu_shape(1589, 1024, dt);          // > 3 grid passes
        test_swiglu_shape(7, 33, dt);
        test_rowdot(333, 3, 20, dt);
        test_xent_shape(33, 53, 50, 7, dt);
        test_xent_shape(9, 1003, 1000, 3, dt);
        test_xent_shape(5, 701, 700, 0, dt);        // an odd ld: a bf16 gradient row ends mid-float
    }
    test_rmsnorm_dw();
    test_cast();
    test_exp_log();
    test_merge();
    test_attn_begin_big();
    test_timer();
    test_matmul_k0();
    printf("(fp32 kernels: %.1f s)\n", now_s() - t0);
    static const Case cases[] = {
        // name                                                   Tq     Tk   nh nkv  hd  mask              pos           docs split flags
        { "hd 64 GQA 4/2 causal T 100",                           100,   100,  4, 2,  64, ATTN_MASK_CAUSAL, POS_SAME,     0, 1, F_ENGINE },
        { "hd 64 MHA 2/2 causal T 128 (tile multiple)",           128,   128,  2, 2,  64, ATTN_MASK_CAUSAL, POS_SAME,     0, 0, 0 },
        { "hd 128 GQA 4/2 causal T 256 (tile multiple)",          256,   256,  4, 2, 128, ATTN_MASK_CAUSAL, POS_SAME,     0, 1, 0 },
        { "hd 128 MQA 2/1 causal Tq 70 Tk 150 chunks",            70,    150,  2, 1, 128, ATTN_MASK_CAUSAL, POS_CHUNKS,   0, 1, F_ENGINE },
        { "hd 64 MHA 2/2 causal shuffled Tq 45 Tk 90",            45,    90,   2, 2,  64, ATTN_MASK_CAUSAL, POS_SHUFFLED, 0, 1, F_ENGINE },
        // the cuDNN engine's plan cache: a causal 64 x 64 piece, then the same 64 queries against 128 keys (a causal
        // piece Sq 64, Skv 128: a plan for other dimensions must not be reused)
        { "hd 64 GQA 4/2 causal T 64 (one piece)",                64,    64,   4, 2,  64, ATTN_MASK_CAUSAL, POS_SAME,     0, 0, F_ENGINE },
        { "hd 64 GQA 4/2 causal Tq 64 Tk 128 chunks (one piece)", 64,    128,  4, 2,  64, ATTN_MASK_CAUSAL, POS_CHUNKS,   0, 0, F_ENGINE },
        { "hd 24 MHA 3/3 unmasked Tq 33 Tk 47",                   33,    47,   3, 3,  24, ATTN_MASK_NONE,   POS_SAME,     0, 1, 0 },
        { "hd 100 GQA 4/2 causal shuffled Tq 40 Tk 75",           40,    75,   4, 2, 100, ATTN_MASK_CAUSAL, POS_SHUFFLED, 0, 1, 0 },
        { "hd 128 GQA 8/2 causal T 300",                          300,   300,  8, 2, 128, ATTN_MASK_CAUSAL, POS_SAME,     0, 1, 0 },
        { "ring off-diagonal hd 128 GQA 4/2 unmasked T 192 (tile multiple)", 192, 192, 4, 2, 128, ATTN_MASK_NONE, POS_LATER, 0, 0, F_REPEAT | F_ENGINE },
        { "ring off-diagonal hd 128 MQA 4/1 unmasked Tq 200 Tk 136", 200, 136, 4, 1, 128, ATTN_MASK_NONE, POS_LATER,    0, 1, 0 },
        { "ring off-diagonal hd 64 GQA 4/2 unmasked Tq 300 Tk 100", 300, 100,  4, 2,  64, ATTN_MASK_NONE,   POS_LATER,    0, 0, F_ENGINE },
        { "multi-wave hd 64 MHA 8/8 causal docs T 1100",          1100,  1100, 8, 8,  64, ATTN_MASK_CAUSAL, POS_SAME,     4, 0, F_REPEAT },
        { "multi-wave hd 128 MHA 8/8 causal docs T 1100",         1100,  1100, 8, 8, 128, ATTN_MASK_CAUSAL, POS_SAME,     4, 0, 0 },
        { "multi-wave ring off-diagonal hd 128 GQA 28/4 unmasked Tq 320 Tk 80", 320, 80, 28, 4, 128, ATTN_MASK_NONE, POS_LATER, 0, 0, F_REPEAT },
        { "multi-wave hd 64 GQA 16/4 causal docs T 600",          600,   600, 16, 4,  64, ATTN_MASK_CAUSAL, POS_SAME,     4, 1, 0 },
        { "docs hd 64 GQA 4/2 causal T 160",                      160,   160,  4, 2,  64, ATTN_MASK_CAUSAL, POS_SAME,     1, 1, F_ENGINE },
        { "docs hd 128 MQA 2/1 causal Tq 70 Tk 150 chunks",       70,    150,  2, 1, 128, ATTN_MASK_CAUSAL, POS_CHUNKS,   1, 1, 0 },
        { "docs restarted positions hd 64 MHA 2/2 causal T 140",  140,   140,  2, 2,  64, ATTN_MASK_CAUSAL, POS_SAME,     2, 1, 0 },
        { "docs unmasked hd 24 MHA 3/3 Tq 70 Tk 90",              70,    90,   3, 3,  24, ATTN_MASK_NONE,   POS_SAME,     1, 1, 0 },
        { "docs without keys hd 100 GQA 4/2 causal T 130",        130,   130,  4, 2, 100, ATTN_MASK_CAUSAL, POS_SAME,     3, 1, 0 },
        // k, v to bf16: 16 x 32800 x 32 bf16 pairs = 1.001 passes of the conversion's 65536-block grid; the keys of
        // the second pass are among the last 600, the only ones the queries see
        { "grid-stride hd 64 MHA 16/16 causal Tq 100 Tk 32800 (bf16 conversion > 1 grid pass, the last 600 keys visible)",
                                                                   100, 32800, 16, 16,  64, ATTN_MASK_CAUSAL, POS_LATER,    5, 0, F_BF16 },
    };
    for (int mode = 0; mode < M_N; mode++) {
        if (be_set_matmul_precision(MODE[mode])) { CHECK(0, "be_set_matmul_precision(%s)", MODE[mode]); continue; }
        double t1 = now_s();
        test_matmul(mode);
        if (mode == M_BF16) test_matmul_bf16();
        if (mode == M_TF32) { test_attention_tf32(); continue; }   // tf32 attention runs the bf16 kernels
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            if (mode == M_BF16 || !(cases[i].flags & F_BF16)) test_attention(&cases[i], mode == M_BF16);
        printf("(%s: %.1f s)\n", MODE[mode], now_s() - t1);
    }
    test_attention_work();
    test_engine(cases, sizeof cases / sizeof *cases);
    for (int b = 0; b < 3; b++)
        printf("worst attention errors, %s: out %.2e lse %.2e D %.2e dq %.2e dk %.2e dv %.2e\n",
               b == 2 ? "cuDNN engine" : b ? "bf16 kernels" : "fp32 kernels",
               worst[b].out, worst[b].lse, worst[b].D, worst[b].dq, worst[b].dk, worst[b].dv);
    CHECK(be_set_matmul_precision("fp16") != 0, "an unknown precision is refused");
    printf("(total %.1f s)\n", now_s() - t0);
    return tu_finish();
}
