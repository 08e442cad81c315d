// test_attn_emu.cc — the CUDA attention kernels (backend/cuda/attn_cuda.cu, compiled for the host with
// -DATTN_EMU: backend/cuda/cu_emu.h emulates threads, barriers, shuffles, ldmatrix, mma.sync and cp.async)
// against the CPU backend's attention (the reference), on random inputs, without a GPU.
//
// What this shows: the kernels' indexing, fragment bookkeeping, tiling, tile skipping, masking from explicit
// positions, GQA, padding of odd head dims, the online softmax, the in-place merge, accumulation into dq/dk/dv,
// the double-buffered loads and their waits — the same source that runs on the GPU. What it cannot show:
// anything about timing, or behaviour of the real hardware that the emulation (cu_emu.h) gets wrong.
//
// Cases: head dims 64 and 128 (the fast paths), 24 and 100 (padded), MHA / GQA / MQA, causal and unmasked,
// positions in order, as two ring chunks, and shuffled with rows that see no key at all; forward as two key
// blocks merged in either order; backward into non-zero dq/dk/dv. Document masking (document ids): boundaries
// inside tiles and exactly at tile edges (16, 32, 64), positions restarted at each document, documents without the
// causal rule, and query rows whose document has no key (lse stays -inf, no NaN). Both precisions: bf16 kernels
// and fp32 kernels.
// Tolerances (max |gpu - cpu| / max |cpu| per tensor; lse: max |diff| / max(1, |lse|), -inf exactly):
//   fp32 kernels: 1e-5 everything.
//   bf16 kernels (q, k, v, dout, P and dS rounded to bf16, fp32 accumulation): out 1e-2, lse 1e-2, dq/dk/dv 2e-2.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "backend/attention.h"
#include "tests/gpu/be_table.h"
#include "tests/gpu/compare.h"
#include "tests/testutil.h"
void attn_emu_set_precision(int p);
}

static uint64_t rng_state = 12345;
static double urand() {   // [0, 1)
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static std::vector<float> rnd(size_t n, float amp) {
    std::vector<float> x(n);
    for (auto& v : x) v = (float)(amp * (2 * urand() - 1));
    return x;
}

static double rel_err(const std::vector<float>& a, const std::vector<float>& r) { return cmp_rel(a.data(), r.data(), a.size()); }
static double lse_err(const std::vector<float>& a, const std::vector<float>& r) { return cmp_lse(a.data(), r.data(), a.size()); }

enum { POS_SAME, POS_CHUNKS, POS_SHUFFLED };
enum { DOC_NONE, DOC_IDS, DOC_RESTART, DOC_EMPTY };   // document ids from positions; + restarted positions; + rows without keys
struct Case { const char* name; int Tq, Tk, nh, nkv, hd, mask, pos, docs; };

// the document of position p: the number of document starts at or before p, minus one; its start
static const int DOC_STARTS[] = { 0, 7, 16, 32, 33, 64, 100, 128, 129, 150 };
static int doc_of(int p, int* start) {
    int d = 0;
    for (int i = 1; i < (int)(sizeof DOC_STARTS / sizeof DOC_STARTS[0]); i++) if (DOC_STARTS[i] <= p) d = i;
    if (start) *start = DOC_STARTS[d];
    return d;
}

static void run_case(const Case& c, int prec) {
    const BeTable* cpu = cpu_backend();
    attn_emu_set_precision(prec);
    const double tol_out = prec ? 1e-5 : 1e-2, tol_lse = prec ? 1e-5 : 1e-2, tol_grad = prec ? 1e-5 : 2e-2;
    const char* pname = prec ? "fp32" : "bf16";
    int Tq = c.Tq, Tk = c.Tk, nh = c.nh, nkv = c.nkv, hd = c.hd;
    size_t nq = (size_t)Tq * nh * hd, nk = (size_t)Tk * nkv * hd, nl = (size_t)Tq * nh;
    float scale = 1.0f / sqrtf((float)hd);
    auto q = rnd(nq, 2.0f), k = rnd(nk, 2.0f), v = rnd(nk, 1.0f), dout = rnd(nq, 1.0f);
    std::vector<int> qpos(Tq), kpos(Tk);
    for (int i = 0; i < Tq; i++) qpos[i] = i;
    for (int j = 0; j < Tk; j++) kpos[j] = j;
    if (c.pos == POS_CHUNKS) for (int i = 0; i < Tq; i++) qpos[i] = Tk / 2 + i;   // later chunk: partly all-visible
    if (c.pos == POS_SHUFFLED) {   // random positions; queries below min key position see nothing
        for (int j = 0; j < Tk; j++) kpos[j] = 10 + (int)(urand() * 2 * Tk);
        for (int i = 0; i < Tq; i++) qpos[i] = (int)(urand() * 2 * Tk);
        qpos[0] = 0; if (Tq > 5) qpos[5] = 3;
    }
    std::vector<int> qdoc(Tq), kdoc(Tk);
    if (c.docs) {
        for (int i = 0; i < Tq; i++) {
            int st;
            qdoc[i] = doc_of(qpos[i], &st);
            if (c.docs == DOC_EMPTY && i % 9 == 4) qdoc[i] = 1000;   // a document without keys
            if (c.docs == DOC_RESTART) qpos[i] -= st;
        }
        for (int j = 0; j < Tk; j++) {
            int st;
            kdoc[j] = doc_of(kpos[j], &st);
            if (c.docs == DOC_RESTART) kpos[j] -= st;
        }
    }
    const int* qd = c.docs ? qdoc.data() : nullptr;
    auto kd = [&](int j0) -> const int* { return c.docs ? kdoc.data() + j0 : nullptr; };
    // forward: two key blocks (second half first), merged in place
    int h1 = Tk / 2;
    std::vector<float> o_c(nq), l_c(nl), o_g(nq), l_g(nl);
    cpu->attn_forward_begin(o_c.data(), l_c.data(), Tq, nh, hd);
    attn_forward_begin(o_g.data(), l_g.data(), Tq, nh, hd);
    struct Blk { int j0, n; } blk[2] = { { h1, Tk - h1 }, { 0, h1 } };
    for (auto& b : blk) {
        if (!b.n) continue;
        size_t ko = (size_t)b.j0 * nkv * hd;
        cpu->attn_block_forward(o_c.data(), l_c.data(), q.data(), qpos.data(), qd, Tq, k.data() + ko, v.data() + ko,
                                kpos.data() + b.j0, kd(b.j0), b.n, nh, nkv, hd, scale, c.mask);
        attn_block_forward(o_g.data(), l_g.data(), q.data(), qpos.data(), qd, Tq, k.data() + ko, v.data() + ko,
                           kpos.data() + b.j0, kd(b.j0), b.n, nh, nkv, hd, scale, c.mask);
    }
    double eo = rel_err(o_g, o_c), el = lse_err(l_g, l_c);
    CHECK(eo <= tol_out && el <= tol_lse, "%s %s forward: out rel err %.2e (tol %.0e), lse err %.2e (tol %.0e)",
          pname, c.name, eo, tol_out, el, tol_lse);
    if (c.docs == DOC_EMPTY) {   // rows of the document without keys: lse -inf, out 0 on both sides; no NaN anywhere
        int ok = 1;
        for (int i = 4; i < Tq; i += 9)
            for (int h = 0; h < nh; h++) {
                ok &= std::isinf(l_g[(size_t)i * nh + h]) && l_g[(size_t)i * nh + h] < 0;
                for (int d = 0; d < hd; d++) ok &= o_g[((size_t)i * nh + h) * hd + d] == 0.0f;
            }
        for (float x : o_g) ok &= !std::isnan(x);
        CHECK(ok, "%s %s: rows whose document has no key keep lse = -inf and out = 0, no NaN", pname, c.name);
    }
    // backward from the CPU's final (out, lse), into non-zero accumulators
    std::vector<float> D_c(nl), D_g(nl);
    cpu->attn_backward_begin(D_c.data(), dout.data(), o_c.data(), Tq, nh, hd);
    attn_backward_begin(D_g.data(), dout.data(), o_c.data(), Tq, nh, hd);
    double eD = rel_err(D_g, D_c);
    auto dq0 = rnd(nq, 0.5f), dk0 = rnd(nk, 0.5f), dv0 = rnd(nk, 0.5f);
    std::vector<float> dq_c = dq0, dk_c = dk0, dv_c = dv0, dq_g = dq0, dk_g = dk0, dv_g = dv0;
    for (auto& b : blk) {
        if (!b.n) continue;
        size_t ko = (size_t)b.j0 * nkv * hd;
        cpu->attn_block_backward(dq_c.data(), dk_c.data() + ko, dv_c.data() + ko, dout.data(), q.data(), l_c.data(),
                                 D_c.data(), qpos.data(), qd, Tq, k.data() + ko, v.data() + ko, kpos.data() + b.j0,
                                 kd(b.j0), b.n, nh, nkv, hd, scale, c.mask);
        attn_block_backward(dq_g.data(), dk_g.data() + ko, dv_g.data() + ko, dout.data(), q.data(), l_c.data(),
                            D_c.data(), qpos.data(), qd, Tq, k.data() + ko, v.data() + ko, kpos.data() + b.j0,
                            kd(b.j0), b.n, nh, nkv, hd, scale, c.mask);
    }
    // the accumulators' initial values are large next to some contributions: compare the contributions
    for (size_t i = 0; i < nq; i++) { dq_c[i] -= dq0[i]; dq_g[i] -= dq0[i]; }
    for (size_t i = 0; i < nk; i++) { dk_c[i] -= dk0[i]; dk_g[i] -= dk0[i]; dv_c[i] -= dv0[i]; dv_g[i] -= dv0[i]; }
    double eq = rel_err(dq_g, dq_c), ek = rel_err(dk_g, dk_c), ev = rel_err(dv_g, dv_c);
    for (float x : dq_g) eq = std::isnan(x) ? INFINITY : eq;
    for (float x : dk_g) ek = std::isnan(x) ? INFINITY : ek;
    for (float x : dv_g) ev = std::isnan(x) ? INFINITY : ev;
    CHECK(eD <= 1e-5 && eq <= tol_grad && ek <= tol_grad && ev <= tol_grad,
          "%s %s backward: D %.2e, dq %.2e, dk %.2e, dv %.2e (tol %.0e)", pname, c.name, eD, eq, ek, ev, tol_grad);
}

static void merge_case() {
    const BeTable* cpu = cpu_backend();
    int Tq = 37, nh = 3, hd = 20;
    size_t n = (size_t)Tq * nh * hd, nl = (size_t)Tq * nh;
    auto o1 = rnd(n, 1), o2 = rnd(n, 1), l1 = rnd(nl, 3), l2 = rnd(nl, 3);
    for (size_t i = 0; i < nl; i += 5) l1[i] = -INFINITY;
    for (size_t i = 0; i < nl; i += 7) l2[i] = -INFINITY;
    auto a = o1, la = l1, b = o1, lb = l1;
    cpu->attn_merge(a.data(), la.data(), o2.data(), l2.data(), Tq, nh, hd);
    attn_merge(b.data(), lb.data(), o2.data(), l2.data(), Tq, nh, hd);
    double e = rel_err(b, a), el = lse_err(lb, la);
    CHECK(e <= 1e-6 && el <= 1e-6, "attn_merge: out %.2e, lse %.2e (with -inf on either side)", e, el);
}

int main() {
    const BeTable* cpu = cpu_backend();
    char err[256];
    if (cpu->be_init(0, err, sizeof err)) { printf("FAIL cpu backend: %s\n", err); return 1; }
    cpu->attn_init(128);
    attn_init(128);
    static const Case cases[] = {
        { "hd 64 GQA 4/2 causal T 100", 100, 100, 4, 2, 64, ATTN_MASK_CAUSAL, POS_SAME, DOC_NONE },
        { "hd 128 MQA 2/1 causal Tq 70 Tk 150 chunks", 70, 150, 2, 1, 128, ATTN_MASK_CAUSAL, POS_CHUNKS, DOC_NONE },
        { "hd 64 MHA 2/2 causal shuffled positions", 45, 90, 2, 2, 64, ATTN_MASK_CAUSAL, POS_SHUFFLED, DOC_NONE },
        { "hd 24 MHA 3/3 unmasked Tq 33 Tk 47", 33, 47, 3, 3, 24, ATTN_MASK_NONE, POS_SAME, DOC_NONE },
        { "hd 100 GQA 4/2 causal shuffled", 40, 75, 4, 2, 100, ATTN_MASK_CAUSAL, POS_SHUFFLED, DOC_NONE },
        { "hd 128 GQA 2/1 unmasked T 65", 65, 65, 2, 1, 128, ATTN_MASK_NONE, POS_SAME, DOC_NONE },
        { "docs hd 64 GQA 2/1 causal T 100", 100, 100, 2, 1, 64, ATTN_MASK_CAUSAL, POS_SAME, DOC_IDS },
        { "docs hd 128 MQA 2/1 causal Tq 40 Tk 96 chunks", 40, 96, 2, 1, 128, ATTN_MASK_CAUSAL, POS_CHUNKS, DOC_IDS },
        { "docs restarted positions hd 64 MHA 1/1 causal T 80", 80, 80, 1, 1, 64, ATTN_MASK_CAUSAL, POS_SAME, DOC_RESTART },
        { "docs unmasked hd 24 MHA 2/2 Tq 40 Tk 70", 40, 70, 2, 2, 24, ATTN_MASK_NONE, POS_SAME, DOC_IDS },
        { "docs without keys hd 100 GQA 2/1 causal T 72", 72, 72, 2, 1, 100, ATTN_MASK_CAUSAL, POS_SAME, DOC_EMPTY },
    };
    for (int prec : { 0, 2 })
        for (const Case& c : cases) run_case(c, prec);
    merge_case();
    return tu_finish();
}
