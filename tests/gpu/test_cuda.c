// test_cuda.c — every kernel of the CUDA backend against the CPU backend (the reference) on random inputs of
// odd sizes, in each matmul precision. The CUDA backend is called directly (be_*, attn_*), the CPU backend
// through its table (tests/gpu/be_table.h). Without a GPU it prints one line "no CUDA device: ..." and exits
// 77, which tests/run_all.sh counts as skipped.
// Tolerances (max |cuda - cpu| / max |cpu| per output; lse: per element |diff| / max(1, |lse|), -inf exact):
//   fp32 kernels (everything but matmul and attention, and those in fp32 mode): 1e-5;
//   matmul tf32: 2e-3 (10-bit mantissa inputs); bf16: 1e-2 (8-bit mantissa inputs, k <= 71);
//   attention bf16: out, lse 1e-2, dq/dk/dv 2e-2 (q, k, v, dO, P, dS rounded to bf16, fp32 accumulation).
#include "backend/attention.h"
#include "backend/backend.h"
#include "tests/gpu/be_table.h"
#include "tests/gpu/compare.h"
#include "tests/testutil.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
static void* up(const void* h, size_t bytes) { void* d = be_alloc(bytes); be_upload(d, h, bytes); return d; }
static float* down(const void* d, size_t n) { float* h = malloc((n ? n : 1) * sizeof(float)); be_download(h, d, n * sizeof(float)); return h; }

// the CUDA result in device memory d against the CPU result h
static double cmp(const void* d, const float* h, size_t n) { float* g = down(d, n); double e = cmp_rel(g, h, n); free(g); return e; }

static void test_matmul(const char* prec, double tol) {
    int m = 37, n = 53, k = 71;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *A = rnd((size_t)m * k, 1), *B = rnd((size_t)k * n, 1), *C = rnd((size_t)m * n, 1);
            float *dA = up(A, (size_t)m * k * 4), *dB = up(B, (size_t)k * n * 4), *dC = up(C, (size_t)m * n * 4);
            cpu->be_matmul(C, A, B, m, n, k, ta, tb, 0.75f, 0.5f);
            be_matmul(dC, dA, dB, m, n, k, ta, tb, 0.75f, 0.5f);
            double e = cmp(dC, C, (size_t)m * n);
            CHECK(e <= tol, "matmul %s m %d n %d k %d transA %d transB %d alpha .75 beta .5: rel err %.2e (tol %.0e)",
                  prec, m, n, k, ta, tb, e, tol);
            free(A); free(B); free(C); be_free(dA); be_free(dB); be_free(dC);
        }
}

static void test_elementwise(void) {
    size_t n = 1001;
    float *y = rnd(n, 1), *x = rnd(n, 1), *dy = up(y, n * 4), *dx = up(x, n * 4);
    cpu->be_add(y, x, n); be_add(dy, dx, n);
    CHECK(cmp(dy, y, n) <= 1e-6, "add n %zu", n);
    float *g = rnd(n, 4), *u = rnd(n, 2), *dh = rnd(n, 1), h[1001], dg[1001], du[1001];
    float *Dg = up(g, n * 4), *Du = up(u, n * 4), *Ddh = up(dh, n * 4), *Dh = be_alloc(n * 4), *Ddg = be_alloc(n * 4), *Ddu = be_alloc(n * 4);
    cpu->be_swiglu_forward(h, g, u, n); be_swiglu_forward(Dh, Dg, Du, n);
    cpu->be_swiglu_backward(dg, du, dh, g, u, n); be_swiglu_backward(Ddg, Ddu, Ddh, Dg, Du, n);
    double e1 = cmp(Dh, h, n), e2 = cmp(Ddg, dg, n), e3 = cmp(Ddu, du, n);
    CHECK(e1 <= 1e-5 && e2 <= 1e-5 && e3 <= 1e-5, "swiglu n %zu: h %.2e, dg %.2e, du %.2e", n, e1, e2, e3);
    // AdamW with clipping scale and weight decay
    float *p = rnd(n, 1), *gr = rnd(n, 1), *mo = rnd(n, 0.1f), *v = rnd(n, 0.1f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float *Dp = up(p, n * 4), *Dgr = up(gr, n * 4), *Dm = up(mo, n * 4), *Dv = up(v, n * 4);
    cpu->be_adamw(p, gr, mo, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.0975f, 0.6f);
    be_adamw(Dp, Dgr, Dm, Dv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.271f, 0.0975f, 0.6f);
    e1 = cmp(Dp, p, n); e2 = cmp(Dm, mo, n); e3 = cmp(Dv, v, n);
    CHECK(e1 <= 1e-6 && e2 <= 1e-6 && e3 <= 1e-6, "adamw n %zu: p %.2e, m %.2e, v %.2e", n, e1, e2, e3);
    // copy with overlap (memmove) and zero
    be_copy(Dp + 3, Dp, 500 * 4);
    memmove(p + 3, p, 500 * 4);
    be_zero(Dp + 700, 100 * 4);
    memset(p + 700, 0, 100 * 4);
    CHECK(cmp(Dp, p, n) == 0, "copy (overlapping) and zero are exact");
    free(y); free(x); free(g); free(u); free(dh); free(p); free(gr); free(mo); free(v);
    void* all[] = { dy, dx, Dg, Du, Ddh, Dh, Ddg, Ddu, Dp, Dgr, Dm, Dv };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be_free(all[i]);
}

static void test_sumsq(void) {
    size_t n = 5003;
    float* x = rnd(n, 3);
    BeSegment seg[] = { { 0, 1, 0 }, { 1, 999, 1 }, { 1000, 2001, 0 }, { 3001, 7, 2 }, { 3008, 1995, 1 } };
    double a[3], b[3], b2[3];
    float* dx = up(x, n * 4);
    cpu->be_sumsq_segments(a, 3, x, seg, 5);
    be_sumsq_segments(b, 3, dx, seg, 5);
    be_sumsq_segments(b2, 3, dx, seg, 5);
    double e = 0;
    for (int c = 0; c < 3; c++) e = fmax(e, fabs(a[c] - b[c]) / a[c]);
    CHECK(e <= 1e-6, "sumsq_segments (5 segments, 3 classes, odd sizes): rel err %.2e", e);
    CHECK(!memcmp(b, b2, sizeof b), "sumsq_segments repeats bit for bit");
    free(x); be_free(dx);
}

static void test_embedding(void) {
    int N = 37, C = 45, v0 = 10, nv = 50;
    int tok[37];
    for (int i = 0; i < N; i++) tok[i] = (int)(urand() * 70);   // some outside [v0, v0 + nv)
    tok[3] = tok[4] = tok[20] = 15;                              // repeats: accumulated
    float *w = rnd((size_t)nv * C, 1), *out = rnd((size_t)N * C, 1), *dout = rnd((size_t)N * C, 1), *dw = rnd((size_t)nv * C, 1);
    int* dtok = up(tok, sizeof tok);
    float *Dw = up(w, (size_t)nv * C * 4), *Dout = be_alloc((size_t)N * C * 4), *Ddout = up(dout, (size_t)N * C * 4), *Ddw = up(dw, (size_t)nv * C * 4);
    cpu->be_embedding_forward(out, tok, w, N, C, v0, nv); be_embedding_forward(Dout, dtok, Dw, N, C, v0, nv);
    cpu->be_embedding_backward(dw, dout, tok, N, C, v0, nv); be_embedding_backward(Ddw, Ddout, dtok, N, C, v0, nv);
    double e1 = cmp(Dout, out, (size_t)N * C), e2 = cmp(Ddw, dw, (size_t)nv * C);
    CHECK(e1 == 0 && e2 <= 1e-6, "embedding N %d C %d slice [%d, %d): forward %.2e (exact), backward += %.2e", N, C, v0, v0 + nv, e1, e2);
    free(w); free(out); free(dout); free(dw);
    be_free(dtok); be_free(Dw); be_free(Dout); be_free(Ddout); be_free(Ddw);
}

static void test_rmsnorm(void) {
    int N = 37, C = 93;
    size_t n = (size_t)N * C;
    float *x = rnd(n, 2), *w = rnd(C, 1), *dout = rnd(n, 1), *out = malloc(n * 4), rstd[37];
    float *dx = rnd(n, 0.5f), *dw = rnd(C, 0.5f);
    float *Dx = up(x, n * 4), *Dw = up(w, C * 4), *Ddout = up(dout, n * 4), *Dout = be_alloc(n * 4), *Drstd = be_alloc(N * 4);
    float *Ddx = up(dx, n * 4), *Ddw = up(dw, C * 4);
    cpu->be_rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f); be_rmsnorm_forward(Dout, Drstd, Dx, Dw, N, C, 1e-5f);
    cpu->be_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C); be_rmsnorm_backward(Ddx, Ddw, Ddout, Dx, Dw, Drstd, N, C);
    double e1 = cmp(Dout, out, n), e2 = cmp(Drstd, rstd, N), e3 = cmp(Ddx, dx, n), e4 = cmp(Ddw, dw, C);
    CHECK(e1 <= 1e-5 && e2 <= 1e-5 && e3 <= 1e-5 && e4 <= 1e-5, "rmsnorm N %d C %d: out %.2e rstd %.2e dx += %.2e dw += %.2e",
          N, C, e1, e2, e3, e4);
    free(x); free(w); free(dout); free(out); free(dx); free(dw);
    void* all[] = { Dx, Dw, Ddout, Dout, Drstd, Ddx, Ddw };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be_free(all[i]);
}

static void test_rope(void) {
    int N = 29, nh = 3, hd = 18, maxpos = 64;
    size_t n = (size_t)N * nh * hd;
    float *x = rnd(n, 1), *dx = rnd(n, 1), *cs = rnd((size_t)maxpos * hd, 1);
    int pos[29];
    for (int i = 0; i < N; i++) pos[i] = (int)(urand() * maxpos);
    float *Dx = up(x, n * 4), *Ddx = up(dx, n * 4), *Dcs = up(cs, (size_t)maxpos * hd * 4);
    int* Dpos = up(pos, sizeof pos);
    cpu->be_rope_forward(x, pos, cs, N, nh, hd); be_rope_forward(Dx, Dpos, Dcs, N, nh, hd);
    cpu->be_rope_backward(dx, pos, cs, N, nh, hd); be_rope_backward(Ddx, Dpos, Dcs, N, nh, hd);
    double e1 = cmp(Dx, x, n), e2 = cmp(Ddx, dx, n);
    CHECK(e1 <= 1e-6 && e2 <= 1e-6, "rope N %d nh %d hd %d (random positions): forward %.2e backward %.2e", N, nh, hd, e1, e2);
    free(x); free(dx); free(cs); be_free(Dx); be_free(Ddx); be_free(Dcs); be_free(Dpos);
}

static void test_xent(void) {
    int N = 33, ld = 53, nv = 50, v0 = 7;
    size_t n = (size_t)N * ld;
    float* lg = rnd(n, 4);
    int tg[33];
    for (int i = 0; i < N; i++) tg[i] = (int)(urand() * 70);   // some outside the slice
    tg[2] = -1; tg[9] = -1;
    float *Dlg = up(lg, n * 4);
    int* Dtg = up(tg, sizeof tg);
    float lse[33], tl[33], loss[33], mx[33], hit[33];
    float *Dlse = be_alloc(N * 4), *Dtl = be_alloc(N * 4), *Dloss = be_alloc(N * 4), *Dmx = be_alloc(N * 4), *Dhit = be_alloc(N * 4);
    cpu->be_xent_lse(lse, lg, N, ld, nv); be_xent_lse(Dlse, Dlg, N, ld, nv);
    cpu->be_xent_target_logit(tl, lg, tg, N, ld, nv, v0); be_xent_target_logit(Dtl, Dlg, Dtg, N, ld, nv, v0);
    cpu->be_xent_loss(loss, lse, tl, tg, N); be_xent_loss(Dloss, Dlse, Dtl, Dtg, N);
    cpu->be_row_max(mx, lg, N, ld, nv); be_row_max(Dmx, Dlg, N, ld, nv);
    cpu->be_argmax_hit(hit, mx, tl, tg, N); be_argmax_hit(Dhit, Dmx, Dtl, Dtg, N);
    double e1 = cmp(Dlse, lse, N), e2 = cmp(Dtl, tl, N), e3 = cmp(Dloss, loss, N), e4 = cmp(Dmx, mx, N), e5 = cmp(Dhit, hit, N);
    CHECK(e1 <= 1e-6 && e2 == 0 && e3 <= 1e-5 && e4 == 0 && e5 == 0,
          "xent N %d ld %d nv %d v0 %d: lse %.2e target logit %.2e loss %.2e row max %.2e hit %.2e", N, ld, nv, v0, e1, e2, e3, e4, e5);
    // combining slices: exp_sub / log_add with -inf
    float *s = rnd(N, 2), *m = rnd(N, 2);
    s[0] = -INFINITY;
    float *Ds = up(s, N * 4), *Dm = up(m, N * 4);
    cpu->be_exp_sub(s, m, N); be_exp_sub(Ds, Dm, N);
    e1 = cmp(Ds, s, N);
    for (int i = 0; i < N; i++) s[i] = fabsf(s[i]) + 0.5f;
    be_upload(Ds, s, N * 4);
    float* l2 = dup(lse, N);
    float* Dl2 = up(l2, N * 4);
    cpu->be_log_add(l2, s, m, N); be_log_add(Dl2, Ds, Dm, N);
    e2 = cmp(Dl2, l2, N);
    CHECK(e1 <= 1e-6 && e2 <= 1e-6, "exp_sub (with -inf) %.2e, log_add %.2e", e1, e2);
    cpu->be_xent_backward(lg, lse, tg, N, ld, nv, v0, 0.37f); be_xent_backward(Dlg, Dlse, Dtg, N, ld, nv, v0, 0.37f);
    e1 = cmp(Dlg, lg, n);
    CHECK(e1 <= 1e-5, "xent backward (padding columns, ignored rows) %.2e", e1);
    free(lg); free(s); free(m); free(l2);
    void* all[] = { Dlg, Dtg, Dlse, Dtl, Dloss, Dmx, Dhit, Ds, Dm, Dl2 };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be_free(all[i]);
}

// attention: forward as two key blocks merged in place, backward into non-zero accumulators
enum { POS_SAME, POS_CHUNKS, POS_SHUFFLED };
// docs: 0 none; 1 document ids from positions (starts inside tiles and at tile edges); 2 also positions restarted
// at each document; 3 also query rows of a document that has no key (lse stays -inf)
typedef struct { const char* name; int Tq, Tk, nh, nkv, hd, mask, pos, docs; } Case;
static int doc_of(int p, int* start) {
    static const int st[] = { 0, 7, 16, 32, 33, 64, 100, 128, 129, 150 };
    int d = 0;
    for (int i = 1; i < (int)(sizeof st / sizeof st[0]); i++) if (st[i] <= p) d = i;
    *start = st[d];
    return d;
}
static void test_attention(const Case* c, const char* prec, int fp32) {
    double to = fp32 ? 1e-5 : 1e-2, tg = fp32 ? 1e-5 : 2e-2;
    int Tq = c->Tq, Tk = c->Tk, nh = c->nh, nkv = c->nkv, hd = c->hd;
    size_t nq = (size_t)Tq * nh * hd, nk = (size_t)Tk * nkv * hd, nl = (size_t)Tq * nh;
    float sc = 1.0f / sqrtf((float)hd);
    float *q = rnd(nq, 2), *k = rnd(nk, 2), *v = rnd(nk, 1), *dout = rnd(nq, 1);
    int *qp = malloc(Tq * sizeof(int)), *kp = malloc(Tk * sizeof(int));
    for (int i = 0; i < Tq; i++) qp[i] = c->pos == POS_CHUNKS ? Tk / 2 + i : i;
    for (int j = 0; j < Tk; j++) kp[j] = j;
    if (c->pos == POS_SHUFFLED) {
        for (int j = 0; j < Tk; j++) kp[j] = 10 + (int)(urand() * 2 * Tk);
        for (int i = 0; i < Tq; i++) qp[i] = (int)(urand() * 2 * Tk);
        qp[0] = 0;
    }
    int *qd = malloc(Tq * sizeof(int)), *kd = malloc(Tk * sizeof(int)), st;
    for (int i = 0; i < Tq; i++) {
        qd[i] = doc_of(qp[i], &st);
        if (c->docs == 3 && i % 9 == 4) qd[i] = 1000;
        if (c->docs == 2) qp[i] -= st;
    }
    for (int j = 0; j < Tk; j++) { kd[j] = doc_of(kp[j], &st); if (c->docs == 2) kp[j] -= st; }
    float *Dq = up(q, nq * 4), *Dk = up(k, nk * 4), *Dv = up(v, nk * 4), *Ddout = up(dout, nq * 4);
    int *Dqp = up(qp, Tq * sizeof(int)), *Dkp = up(kp, Tk * sizeof(int));
    int *Dqd = up(qd, Tq * sizeof(int)), *Dkd = up(kd, Tk * sizeof(int));
    const int *hqd = c->docs ? qd : NULL, *Dqd_ = c->docs ? Dqd : NULL;   // query document ids (host, device) or none
    float *o = malloc(nq * 4), *l = malloc(nl * 4), *Do = be_alloc(nq * 4), *Dl = be_alloc(nl * 4);
    cpu->attn_forward_begin(o, l, Tq, nh, hd); attn_forward_begin(Do, Dl, Tq, nh, hd);
    int h1 = Tk / 2, j0s[2] = { h1, 0 }, ns[2] = { Tk - h1, h1 };
    for (int b = 0; b < 2; b++) {
        if (!ns[b]) continue;
        size_t ko = (size_t)j0s[b] * nkv * hd;
        cpu->attn_block_forward(o, l, q, qp, hqd, Tq, k + ko, v + ko, kp + j0s[b], c->docs ? kd + j0s[b] : NULL, ns[b],
                                nh, nkv, hd, sc, c->mask);
        attn_block_forward(Do, Dl, Dq, Dqp, Dqd_, Tq, Dk + ko, Dv + ko, Dkp + j0s[b], c->docs ? Dkd + j0s[b] : NULL, ns[b],
                           nh, nkv, hd, sc, c->mask);
    }
    float* gl = down(Dl, nl);
    double eo = cmp(Do, o, nq), el = cmp_lse(gl, l, nl);
    CHECK(eo <= to && el <= to, "attention %s %s forward: out %.2e lse %.2e (tol %.0e)", prec, c->name, eo, el, to);
    // backward from the CPU's (out, lse), both sides
    be_upload(Do, o, nq * 4); be_upload(Dl, l, nl * 4);
    float *D = malloc(nl * 4), *DD = be_alloc(nl * 4);
    cpu->attn_backward_begin(D, dout, o, Tq, nh, hd); attn_backward_begin(DD, Ddout, Do, Tq, nh, hd);
    double eD = cmp(DD, D, nl);
    float *dq0 = rnd(nq, 0.5f), *dk0 = rnd(nk, 0.5f), *dv0 = rnd(nk, 0.5f);
    float *dq = dup(dq0, nq), *dk = dup(dk0, nk), *dv = dup(dv0, nk);
    float *Ddq = up(dq0, nq * 4), *Ddk = up(dk0, nk * 4), *Ddv = up(dv0, nk * 4);
    for (int b = 0; b < 2; b++) {
        if (!ns[b]) continue;
        size_t ko = (size_t)j0s[b] * nkv * hd;
        cpu->attn_block_backward(dq, dk + ko, dv + ko, dout, q, l, D, qp, hqd, Tq, k + ko, v + ko, kp + j0s[b],
                                 c->docs ? kd + j0s[b] : NULL, ns[b], nh, nkv, hd, sc, c->mask);
        attn_block_backward(Ddq, Ddk + ko, Ddv + ko, Ddout, Dq, Dl, DD, Dqp, Dqd_, Tq, Dk + ko, Dv + ko, Dkp + j0s[b],
                            c->docs ? Dkd + j0s[b] : NULL, ns[b], nh, nkv, hd, sc, c->mask);
    }
    float *gq = down(Ddq, nq), *gk = down(Ddk, nk), *gv = down(Ddv, nk);
    for (size_t i = 0; i < nq; i++) { gq[i] -= dq0[i]; dq[i] -= dq0[i]; }   // compare the contributions
    for (size_t i = 0; i < nk; i++) { gk[i] -= dk0[i]; dk[i] -= dk0[i]; gv[i] -= dv0[i]; dv[i] -= dv0[i]; }
    double eq = cmp_rel(gq, dq, nq), ek = cmp_rel(gk, dk, nk), ev = cmp_rel(gv, dv, nk);
    CHECK(eD <= 1e-5 && eq <= tg && ek <= tg && ev <= tg, "attention %s %s backward: D %.2e dq %.2e dk %.2e dv %.2e (tol %.0e)",
          prec, c->name, eD, eq, ek, ev, tg);
    free(q); free(k); free(v); free(dout); free(qp); free(kp); free(qd); free(kd); free(o); free(l); free(gl); free(D);
    free(dq0); free(dk0); free(dv0); free(dq); free(dk); free(dv); free(gq); free(gk); free(gv);
    void* all[] = { Dq, Dk, Dv, Ddout, Dqp, Dkp, Dqd, Dkd, Do, Dl, DD, Ddq, Ddk, Ddv };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be_free(all[i]);
}

static void test_merge(void) {
    int Tq = 37, nh = 3, hd = 20;
    size_t n = (size_t)Tq * nh * hd, nl = (size_t)Tq * nh;
    float *o1 = rnd(n, 1), *o2 = rnd(n, 1), *l1 = rnd(nl, 3), *l2 = rnd(nl, 3);
    for (size_t i = 0; i < nl; i += 5) l1[i] = -INFINITY;
    for (size_t i = 0; i < nl; i += 7) l2[i] = -INFINITY;
    float *D1 = up(o1, n * 4), *D2 = up(o2, n * 4), *E1 = up(l1, nl * 4), *E2 = up(l2, nl * 4);
    cpu->attn_merge(o1, l1, o2, l2, Tq, nh, hd); attn_merge(D1, E1, D2, E2, Tq, nh, hd);
    float* gl = down(E1, nl);
    double e = cmp(D1, o1, n), el = cmp_lse(gl, l1, nl);
    CHECK(e <= 1e-6 && el <= 1e-6, "attn_merge (with -inf on either side): out %.2e lse %.2e", e, el);
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

int main(void) {
    char err[512];
    if (be_init(0, err, sizeof err)) {
        if (strstr(err, "no CUDA device")) { printf("%s\n", err); return 77; }
        printf("FAIL %s\n0 passed, 1 failed\n", err);
        return 1;
    }
    cpu = cpu_backend();
    if (cpu->be_init(0, err, sizeof err)) { printf("FAIL cpu backend: %s\n0 passed, 1 failed\n", err); return 1; }
    cpu->attn_init(128);
    test_elementwise();
    test_sumsq();
    test_embedding();
    test_rmsnorm();
    test_rope();
    test_xent();
    test_merge();
    test_timer();
    static const Case cases[] = {
        { "hd 64 GQA 4/2 causal T 100", 100, 100, 4, 2, 64, ATTN_MASK_CAUSAL, POS_SAME, 0 },
        { "hd 128 MQA 2/1 causal Tq 70 Tk 150 chunks", 70, 150, 2, 1, 128, ATTN_MASK_CAUSAL, POS_CHUNKS, 0 },
        { "hd 64 MHA 2/2 causal shuffled", 45, 90, 2, 2, 64, ATTN_MASK_CAUSAL, POS_SHUFFLED, 0 },
        { "hd 24 MHA 3/3 unmasked Tq 33 Tk 47", 33, 47, 3, 3, 24, ATTN_MASK_NONE, POS_SAME, 0 },
        { "hd 100 GQA 4/2 causal shuffled", 40, 75, 4, 2, 100, ATTN_MASK_CAUSAL, POS_SHUFFLED, 0 },
        { "hd 128 GQA 8/2 causal T 300", 300, 300, 8, 2, 128, ATTN_MASK_CAUSAL, POS_SAME, 0 },
        { "docs hd 64 GQA 4/2 causal T 160", 160, 160, 4, 2, 64, ATTN_MASK_CAUSAL, POS_SAME, 1 },
        { "docs hd 128 MQA 2/1 causal Tq 70 Tk 150 chunks", 70, 150, 2, 1, 128, ATTN_MASK_CAUSAL, POS_CHUNKS, 1 },
        { "docs restarted positions hd 64 MHA 2/2 causal T 140", 140, 140, 2, 2, 64, ATTN_MASK_CAUSAL, POS_SAME, 2 },
        { "docs unmasked hd 24 MHA 3/3 Tq 70 Tk 90", 70, 90, 3, 3, 24, ATTN_MASK_NONE, POS_SAME, 1 },
        { "docs without keys hd 100 GQA 4/2 causal T 130", 130, 130, 4, 2, 100, ATTN_MASK_CAUSAL, POS_SAME, 3 },
    };
    struct { const char* name; double tol; int fp32; } precs[] = { { "fp32", 1e-5, 1 }, { "tf32", 2e-3, 0 }, { "bf16", 1e-2, 0 } };
    for (int p = 0; p < 3; p++) {
        if (be_set_matmul_precision(precs[p].name)) { CHECK(0, "be_set_matmul_precision(%s)", precs[p].name); continue; }
        test_matmul(precs[p].name, precs[p].tol);
        if (p == 1) continue;   // tf32 attention runs the bf16 kernels
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) test_attention(&cases[i], precs[p].name, precs[p].fp32);
    }
    CHECK(be_set_matmul_precision("fp16") != 0, "an unknown precision is refused");
    return tu_finish();
}
