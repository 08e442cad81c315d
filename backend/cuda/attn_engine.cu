// attn_engine.cu — the block engines of the CUDA backend: attention.h's attn_block_forward / attn_block_backward run
// each block on cuDNN's fused attention (cudnn_sdpa.cu) where the run verified it at start-up, else on the own kernels
// (attn_cuda.cu), which stay the reference and the fallback. See docs/attention_engine.md.
//
// A block goes to cuDNN in pieces planned on the host from the host copies of its positions (attn_host_mirror):
// queries and keys are cut into runs of consecutive positions; each (query run, key run) pair is skipped (no key
// visible), unmasked (every key at or before every query), or causal — then trimmed to the queries that see a key
// and the keys some query sees, which is exactly cuDNN's bottom-right aligned causal mask (key j visible to query i
// iff j <= i + Skv - Sq), plus an unmasked piece for queries after the last key. Document ids: a block whose
// queries and keys are one and the same document is planned as above; one whose keys are all in other documents
// is skipped; any other (documents that cut runs) goes to the own kernels whole.
//
// Per piece: q, k, v (and dout) are bf16 copies of the fp32 rows (layout kept, [rows, heads * hd]); the forward
// writes the piece's O (bf16) and statistics (fp32 natural-log LSE), merged into the fp32 running (out, lse) by the
// same LSE merge as the own kernels; the backward passes the FINAL lse as the statistics and, for O, a carrier whose
// rowsum(dout * O) is the given D (cuDNN uses O only for that sum: O' = D dout / |dout|^2 per row and head, in bf16),
// and adds the piece's bf16 dq, dk, dv into the fp32 accumulators (partials are summed in fp32, never in bf16).
//
// Selection (attn_engine_select): per class of block the run uses (unmasked, causal), with the run's heads, head
// dim and document ids, seeded inputs at a small size run through both engines — forward, then backward from the
// own engine's out and lse — and cuDNN's out, lse, dq, dk, dv must match the own kernels' within the tolerances of
// tests/gpu/test_cuda.c. A class that fails (or cuDNN missing, too old, unable to make a handle, to plan, or to
// run) stays on the own kernels with one line saying why; attn_engine = cudnn makes that an error.
// The check costs a few plans (NVRTC compiles: ~0.5 s of CPU each). RINGLM_ATTN_CHECK_CACHE=FILE keeps its verdicts:
// one line per (cuDNN version, device, head dim, query heads per KV head, documents, class), appended when a check
// ran, and a later process with the same key takes the verdict from there instead of checking again (its line says
// so). For a series of runs on one machine (tools/gpu_check.sh); the verdict is the same check's, not a guess.
#include "backend/cuda/cu_common.h"
#include "backend/cuda/cudnn_sdpa.h"
#include "tests/gpu/compare.h"
#include <cuda_bf16.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vector>
extern "C" {
#include "common/util.h"
}
typedef __nv_bfloat16 bf16;

// tolerances of the self-check (cuDNN against the own kernels, both on bf16-rounded inputs): those of
// tests/gpu/test_cuda.c for the bf16 kernels against the CPU, with its floors for rows of dq and dk that cancel
// (compare.h's cmp_attn_floors, kappa 0.05: cuDNN takes D from bf16 values, the own kernels from fp32, which shows
// where dP - D cancels, e.g. a query that sees one key); lse between the two GPU engines 1e-4 absolute
#define CHECK_TOL_OUT 1.5e-2
#define CHECK_TOL_LSE 1e-4
#define CHECK_TOL_GRAD 2e-2
#define CHECK_KAPPA 0.05
#define MAX_PLANS 64
#define MAX_PIECES 64   // a block that cuts into more pieces (scattered positions) runs whole on the own kernels

namespace {

struct Mirror { const int* dev; const int* host; size_t n; };
// p NULL: cuDNN could not plan this shape; retired: an execution of it failed after start-up. Either way the shape
// runs on the own kernels from then on (said once, when it happened)
struct Plan { SdpaShape s; SdpaPlan* p; bool retired; };
struct Piece { int q0, nq, k0, nk, causal; };

struct Engine {
    CudnnApi api;
    int loaded;
    char load_err[400];
    cudnnHandle_t h;
    unsigned fast;          // classes (1 << ATTN_MASK_*) routed to cuDNN (attn_engine_use)
    unsigned force;         // the self-check: this class to cuDNN, failures recorded, no fallback
    int strict;             // attn_engine = cudnn: any failure is an error
    int failed;             // the self-check saw a failure (check_err)
    char check_err[700];
    std::vector<Plan> plans, check_plans;
    std::vector<Mirror> mirrors;
    long long counts[2];
    int check_mirrors;      // RINGLM_ATTN_CHECK_MIRRORS=1: every planned block compares its host copies with the device
};
Engine E;

const char* CLASS_NAME[2] = { "unmasked", "causal" };

// ---- host mirrors ----
const int* host_of(const int* dev, int n) {
    if (!dev) return NULL;
    for (const Mirror& m : E.mirrors)
        if (dev >= m.dev && dev + n <= m.dev + m.n) return m.host + (dev - m.dev);
    return NULL;
}
void check_mirror(const int* dev, const int* host, int n) {
    std::vector<int> d((size_t)n);
    be_download(d.data(), dev, (size_t)n * sizeof(int));
    for (int i = 0; i < n; i++)
        if (d[(size_t)i] != host[i])
            cu_die("attention", "a host mirror (attn_host_mirror) differs from device memory at element %d: %d on the host, %d "
                   "on the device (RINGLM_ATTN_CHECK_MIRRORS)", i, host[i], d[(size_t)i]);
}

// runs of consecutive positions: starts [nrun + 1]
void runs_of(const int* p, int n, std::vector<int>& st) {
    st.clear();
    for (int i = 0; i < n; i++)
        if (i == 0 || p[i] != p[i - 1] + 1) st.push_back(i);
    st.push_back(n);
}

// The pieces of a block, or 0 when it must run whole on the own kernels (why: a short reason).
int plan_pieces(std::vector<Piece>& out, const int* qpos, const int* qdoc, int Tq, const int* kpos, const int* kdoc, int Tk,
                int mask, const char** why) {
    out.clear();
    const int *qp = host_of(qpos, Tq), *kp = host_of(kpos, Tk);
    if (!qp || !kp) { *why = "no host copy of the positions"; return 0; }
    if (qdoc && kdoc) {
        const int *qd = host_of(qdoc, Tq), *kd = host_of(kdoc, Tk);
        if (!qd || !kd) { *why = "no host copy of the document ids"; return 0; }
        int qlo = qd[0], qhi = qd[0], klo = kd[0], khi = kd[0];
        for (int i = 1; i < Tq; i++) { qlo = qd[i] < qlo ? qd[i] : qlo; qhi = qd[i] > qhi ? qd[i] : qhi; }
        for (int j = 1; j < Tk; j++) { klo = kd[j] < klo ? kd[j] : klo; khi = kd[j] > khi ? kd[j] : khi; }
        if (qhi < klo || khi < qlo) return 1;   // no query shares a document with a key: nothing to compute
        if (!(qlo == qhi && klo == khi && qlo == klo)) { *why = "documents inside the block"; return 0; }
        if (E.check_mirrors) { check_mirror(qdoc, qd, Tq); check_mirror(kdoc, kd, Tk); }
    }
    if (E.check_mirrors) { check_mirror(qpos, qp, Tq); check_mirror(kpos, kp, Tk); }
    std::vector<int> qr, kr;
    runs_of(qp, Tq, qr);
    runs_of(kp, Tk, kr);
    for (size_t a = 0; a + 1 < qr.size(); a++)
        for (size_t b = 0; b + 1 < kr.size(); b++) {
            int q0 = qr[a], nq = qr[a + 1] - q0, k0 = kr[b], nk = kr[b + 1] - k0;
            int qp0 = qp[q0], qp1 = qp0 + nq - 1, kp0 = kp[k0], kp1 = kp0 + nk - 1;
            if (out.size() + 2 > MAX_PIECES) { *why = "positions scattered into too many pieces"; out.clear(); return 0; }
            if (mask == ATTN_MASK_NONE || qp0 >= kp1) { out.push_back(Piece{ q0, nq, k0, nk, 0 }); continue; }
            if (qp1 < kp0) continue;                   // every key after every query
            int qa = q0 + (kp0 > qp0 ? kp0 - qp0 : 0);   // queries before the first key see none of these keys
            int qb = q0 + nq - (qp1 > kp1 ? qp1 - kp1 : 0);   // queries after the last key see all of them
            int last = qp[qb - 1];                     // keys after the causal part's last query are seen by none of it
            out.push_back(Piece{ qa, qb - qa, k0, last - kp0 + 1, 1 });
            if (qb < q0 + nq) out.push_back(Piece{ qb, q0 + nq - qb, k0, nk, 0 });
        }
    return 1;
}

// ---- kernels ----
__global__ void fa_to_bf16_k(bf16* dst, const float* src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}
__global__ void fa_add_k(float* acc, const bf16* x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc[i] += __bfloat162float(x[i]);
}
// st [nh][nq] = lse [nq][nh]
__global__ void fa_stats_k(float* st, const float* lse, int nq, int nh) {
    long r = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (r >= (long)nq * nh) return;
    int i = (int)(r / nh), h = (int)(r % nh);
    st[(size_t)h * nq + i] = lse[r];
}
// the piece's (o, st) merged into the running (out, lse) of its rows: one thread per (row, head)
__global__ void fa_merge_k(float* out, float* lse, const bf16* o, const float* st, int nq, int nh, int hd) {
    long r = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (r >= (long)nq * nh) return;
    int i = (int)(r / nh), h = (int)(r % nh);
    float b = st[(size_t)h * nq + i], a = lse[r];
    if (b == -INFINITY) return;
    float* x = out + r * hd;
    const bf16* y = o + r * hd;
    if (a == -INFINITY) {
        for (int d = 0; d < hd; d++) x[d] = __bfloat162float(y[d]);
        lse[r] = b;
        return;
    }
    float mx = fmaxf(a, b), l = mx + log1pf(expf(-fabsf(a - b)));
    float w1 = expf(a - l), w2 = expf(b - l);
    for (int d = 0; d < hd; d++) x[d] = x[d] * w1 + __bfloat162float(y[d]) * w2;
    lse[r] = l;
}
// the carrier of D: oc = D dOb / |dOb|^2 per (row, head), dOb = bf16(dout) (scaled by its largest element first, so
// that no square underflows); rowsum(dOb * oc) = D up to oc's bf16 rounding
__global__ void fa_carrier_k(bf16* oc, const float* dout, const float* D, long nrows, int hd) {
    long r = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (r >= nrows) return;
    const float* g = dout + r * hd;
    float s = 0;
    for (int d = 0; d < hd; d++) s = fmaxf(s, fabsf(__bfloat162float(__float2bfloat16_rn(g[d]))));
    float n2 = 0;
    if (s > 0)
        for (int d = 0; d < hd; d++) { float u = __bfloat162float(__float2bfloat16_rn(g[d])) / s; n2 += u * u; }
    float c = s > 0 ? D[r] / s / n2 : 0.0f;
    for (int d = 0; d < hd; d++) {
        float u = s > 0 ? __bfloat162float(__float2bfloat16_rn(g[d])) / s : 0.0f;
        oc[r * hd + d] = __float2bfloat16_rn(c * u);
    }
}

unsigned blocks_for(size_t n) {
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}
const bf16* to_bf16(int slot, const float* src, size_t n) {
    bf16* dst = (bf16*)cu_workspace(slot, n * sizeof(bf16));
    LAUNCH(fa_to_bf16_k, blocks_for(n), 256, 0, dst, src, n);
    CU_LAUNCHED("attention (bf16 copy for cuDNN)");
    return dst;
}

// ---- cuDNN ----
void fail_note(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void fail_note(const char* fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (E.force) {   // the self-check: recorded, the verdict reports it
        if (!E.failed) snprintf(E.check_err, sizeof E.check_err, "%s", msg);
        E.failed = 1;
        return;
    }
    if (E.strict) cu_die("attention (attn_engine = cudnn)", "%s", msg);
    fprintf(stderr, "attention: %s: the own kernels compute such blocks\n", msg);
}

bool same_shape(const SdpaShape& a, const SdpaShape& s) {
    return a.dir == s.dir && a.causal == s.causal && a.Sq == s.Sq && a.Skv == s.Skv && a.H == s.H && a.Hk == s.Hk &&
           a.D == s.D && a.ldq == s.ldq && a.ldk == s.ldk && a.scale == s.scale;
}

const SdpaPlan* plan_for(const SdpaShape& s) {
    std::vector<Plan>& plans = E.force ? E.check_plans : E.plans;   // the self-check plans afresh, and not for the run
    for (const Plan& p : plans)
        if (same_shape(p.s, s)) return p.retired ? NULL : p.p;
    if (plans.size() >= MAX_PLANS) return NULL;   // (shapes beyond the cache: own kernels)
    char err[900];
    int unsupported = 0;
    SdpaPlan* p = sdpa_build(&E.api, E.h, NULL, &s, &unsupported, err, sizeof err);
    if (!p) fail_note("cuDNN cannot plan the %s %s block Sq %d Skv %d: %s", CLASS_NAME[s.causal], s.dir ? "backward" : "forward",
                      s.Sq, s.Skv, err);
    plans.push_back(Plan{ s, p, false });
    return p;
}

// an execution of shape s failed: one line (fail_note), and the shape runs on the own kernels from then on. The plan
// is kept (earlier executions of it may still be in flight on the stream) and freed with the others at the end.
void plan_failed(const SdpaShape& s, const char* what, const char* err) {
    fail_note("cuDNN failed on %s %s blocks (Sq %d, Skv %d): %s", CLASS_NAME[s.causal], what, s.Sq, s.Skv, err);
    for (Plan& p : E.force ? E.check_plans : E.plans)
        if (same_shape(p.s, s)) p.retired = true;
}

// the fast engine for a call: some class on it, the bf16 family of kernels (not matmul_precision fp32), head dim 64, 128
bool engine_takes(int hd) { return (E.fast | E.force) && (hd == 64 || hd == 128) && cu_precision() != CU_FP32; }

bool fast_for(int causal) { return ((E.fast | E.force) >> (causal ? ATTN_MASK_CAUSAL : ATTN_MASK_NONE)) & 1; }

// 1 when any piece is to run on cuDNN
int any_fast(const std::vector<Piece>& pcs) {
    for (const Piece& p : pcs) if (fast_for(p.causal)) return 1;
    return 0;
}

SdpaShape shape_of(int dir, const Piece& pc, int nh, int nkv, int hd, float scale) {
    SdpaShape s = { dir, pc.causal, pc.nq, pc.nk, nh, nkv, hd, nh * hd, nkv * hd, scale };
    return s;
}

}   // namespace

// =========================================================================================================
// attention.h

void attn_host_mirror(const int* dev, const int* host, size_t n) {
    for (size_t i = 0; i < E.mirrors.size(); i++)
        if (E.mirrors[i].dev == dev) {
            if (!host || !n) E.mirrors.erase(E.mirrors.begin() + i);
            else { E.mirrors[i].host = host; E.mirrors[i].n = n; }
            return;
        }
    if (host && n) E.mirrors.push_back(Mirror{ dev, host, n });
}

void attn_engine_counts(long long counts[2]) { counts[0] = E.counts[0]; counts[1] = E.counts[1]; }
void attn_engine_use(unsigned fast) { E.fast = fast; }

void attn_block_forward(float* out, float* lse, const float* q, const int* qpos, const int* qdoc, int Tq, const float* k,
                        const float* v, const int* kpos, const int* kdoc, int Tk, int nh, int nkv, int hd, float scale, int mask) {
    PROF(PROF_ATTN_FWD);
    if (Tq <= 0 || Tk <= 0) return;
    std::vector<Piece> pcs;
    const char* why = "";
    int planned = engine_takes(hd) && plan_pieces(pcs, qpos, qdoc, Tq, kpos, kdoc, Tk, mask, &why);
    if (planned && pcs.empty()) return;   // no key of the block is visible to any query
    if (!planned || !any_fast(pcs)) {   // planned: nothing visible
        own_block_forward(out, lse, q, qpos, qdoc, Tq, k, v, kpos, kdoc, Tk, nh, nkv, hd, scale, mask);
        E.counts[ATTN_ENGINE_OWN]++;
        return;
    }
    int ldq = nh * hd, ldk = nkv * hd;
    const bf16 *qb = to_bf16(WS_FA_Q, q, (size_t)Tq * ldq), *kb = to_bf16(WS_FA_K, k, (size_t)Tk * ldk),
               *vb = to_bf16(WS_FA_V, v, (size_t)Tk * ldk);
    for (const Piece& pc : pcs) {
        const SdpaShape sh = shape_of(SDPA_FWD, pc, nh, nkv, hd, scale);
        const SdpaPlan* p = fast_for(pc.causal) ? plan_for(sh) : NULL;
        char err[900];
        if (p) {
            bf16* o = (bf16*)cu_workspace(WS_FA_O, (size_t)pc.nq * ldq * sizeof(bf16));
            float* st = (float*)cu_workspace(WS_FA_ST, (size_t)pc.nq * nh * sizeof(float));
            void* ws = cu_workspace(WS_FA_WS, sdpa_workspace(p));
            if (!sdpa_forward(&E.api, E.h, p, qb + (size_t)pc.q0 * ldq, kb + (size_t)pc.k0 * ldk, vb + (size_t)pc.k0 * ldk, o,
                              st, ws, err, sizeof err)) {
                LAUNCH(fa_merge_k, blocks_for((size_t)pc.nq * nh), 256, 0, out + (size_t)pc.q0 * ldq, lse + (size_t)pc.q0 * nh,
                       (const bf16*)o, (const float*)st, pc.nq, nh, hd);
                CU_LAUNCHED("attn_block_forward (merging a cuDNN piece)");
                E.counts[ATTN_ENGINE_FAST]++;
                continue;
            }
            plan_failed(sh, "forward", err);
        }
        if (E.force) continue;   // the self-check reports the failure; no fallback there
        own_block_forward(out + (size_t)pc.q0 * ldq, lse + (size_t)pc.q0 * nh, q + (size_t)pc.q0 * ldq, qpos + pc.q0, NULL, pc.nq,
                          k + (size_t)pc.k0 * ldk, v + (size_t)pc.k0 * ldk, kpos + pc.k0, NULL, pc.nk, nh, nkv, hd, scale,
                          pc.causal ? ATTN_MASK_CAUSAL : ATTN_MASK_NONE);
        E.counts[ATTN_ENGINE_OWN]++;
    }
}

void attn_block_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* lse, const float* D,
                         const int* qpos, const int* qdoc, int Tq, const float* k, const float* v, const int* kpos,
                         const int* kdoc, int Tk, int nh, int nkv, int hd, float scale, int mask) {
    PROF(PROF_ATTN_BWD);
    if (Tq <= 0 || Tk <= 0) return;
    std::vector<Piece> pcs;
    const char* why = "";
    int planned = engine_takes(hd) && plan_pieces(pcs, qpos, qdoc, Tq, kpos, kdoc, Tk, mask, &why);
    if (planned && pcs.empty()) return;   // no key of the block is visible to any query
    if (!planned || !any_fast(pcs)) {
        own_block_backward(dq, dk, dv, dout, q, lse, D, qpos, qdoc, Tq, k, v, kpos, kdoc, Tk, nh, nkv, hd, scale, mask);
        E.counts[ATTN_ENGINE_OWN]++;
        return;
    }
    int ldq = nh * hd, ldk = nkv * hd;
    const bf16 *qb = to_bf16(WS_FA_Q, q, (size_t)Tq * ldq), *kb = to_bf16(WS_FA_K, k, (size_t)Tk * ldk),
               *vb = to_bf16(WS_FA_V, v, (size_t)Tk * ldk), *gb = to_bf16(WS_FA_DO, dout, (size_t)Tq * ldq);
    bf16* oc = (bf16*)cu_workspace(WS_FA_OC, (size_t)Tq * ldq * sizeof(bf16));
    LAUNCH(fa_carrier_k, blocks_for((size_t)Tq * nh), 256, 0, oc, dout, D, (long)Tq * nh, hd);
    CU_LAUNCHED("attn_block_backward (the carrier of D for cuDNN)");
    for (const Piece& pc : pcs) {
        const SdpaShape sh = shape_of(SDPA_BWD, pc, nh, nkv, hd, scale);
        const SdpaPlan* p = fast_for(pc.causal) ? plan_for(sh) : NULL;
        char err[900];
        if (p) {
            float* st = (float*)cu_workspace(WS_FA_ST, (size_t)pc.nq * nh * sizeof(float));
            LAUNCH(fa_stats_k, blocks_for((size_t)pc.nq * nh), 256, 0, st, lse + (size_t)pc.q0 * nh, pc.nq, nh);
            CU_LAUNCHED("attn_block_backward (statistics for cuDNN)");
            bf16* gq = (bf16*)cu_workspace(WS_FA_O, (size_t)pc.nq * ldq * sizeof(bf16));
            bf16* gk = (bf16*)cu_workspace(WS_FA_DK, (size_t)pc.nk * ldk * sizeof(bf16));
            bf16* gv = (bf16*)cu_workspace(WS_FA_DV, (size_t)pc.nk * ldk * sizeof(bf16));
            void* ws = cu_workspace(WS_FA_WS, sdpa_workspace(p));
            if (!sdpa_backward(&E.api, E.h, p, qb + (size_t)pc.q0 * ldq, kb + (size_t)pc.k0 * ldk, vb + (size_t)pc.k0 * ldk,
                               oc + (size_t)pc.q0 * ldq, gb + (size_t)pc.q0 * ldq, st, gq, gk, gv, ws, err, sizeof err)) {
                size_t nqe = (size_t)pc.nq * ldq, nke = (size_t)pc.nk * ldk;
                LAUNCH(fa_add_k, blocks_for(nqe), 256, 0, dq + (size_t)pc.q0 * ldq, (const bf16*)gq, nqe);
                LAUNCH(fa_add_k, blocks_for(nke), 256, 0, dk + (size_t)pc.k0 * ldk, (const bf16*)gk, nke);
                LAUNCH(fa_add_k, blocks_for(nke), 256, 0, dv + (size_t)pc.k0 * ldk, (const bf16*)gv, nke);
                CU_LAUNCHED("attn_block_backward (adding a cuDNN piece)");
                E.counts[ATTN_ENGINE_FAST]++;
                continue;
            }
            plan_failed(sh, "backward", err);
        }
        if (E.force) continue;
        own_block_backward(dq + (size_t)pc.q0 * ldq, dk + (size_t)pc.k0 * ldk, dv + (size_t)pc.k0 * ldk,
                           dout + (size_t)pc.q0 * ldq, q + (size_t)pc.q0 * ldq, lse + (size_t)pc.q0 * nh, D + (size_t)pc.q0 * nh,
                           qpos + pc.q0, NULL, pc.nq, k + (size_t)pc.k0 * ldk, v + (size_t)pc.k0 * ldk, kpos + pc.k0, NULL,
                           pc.nk, nh, nkv, hd, scale, pc.causal ? ATTN_MASK_CAUSAL : ATTN_MASK_NONE);
        E.counts[ATTN_ENGINE_OWN]++;
    }
}

// =========================================================================================================
// selection and the self-check

namespace {

uint64_t g_rng;
float urand_pm1(void) {
    g_rng = mix64(g_rng);
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2 - 1);
}

struct Result { std::vector<float> out, lse, dq, dk, dv; };

// one block forward (from empty) and backward (from the own engine's out, lse: both engines get the same D) on the
// current routing
void run_block(Result& r, const Result* ref, float* dev[], const int* qp, const int* kp, const int* qd, const int* kd, int Tq,
               int Tk, int nh, int nkv, int hd, int mask) {
    size_t nq = (size_t)Tq * nh * hd, nk = (size_t)Tk * nkv * hd, nl = (size_t)Tq * nh;
    float *q = dev[0], *k = dev[1], *v = dev[2], *dout = dev[3], *out = dev[4], *lse = dev[5], *D = dev[6], *dq = dev[7],
          *dk = dev[8], *dv = dev[9];
    float scale = 1.0f / sqrtf((float)hd);
    attn_forward_begin(out, lse, Tq, nh, hd);
    attn_block_forward(out, lse, q, qp, qd, Tq, k, v, kp, kd, Tk, nh, nkv, hd, scale, mask);
    r.out.resize(nq); r.lse.resize(nl);
    be_download(r.out.data(), out, nq * 4);
    be_download(r.lse.data(), lse, nl * 4);
    if (ref) { be_upload(out, ref->out.data(), nq * 4); be_upload(lse, ref->lse.data(), nl * 4); }
    attn_backward_begin(D, dout, out, Tq, nh, hd);
    be_zero(dq, nq * 4); be_zero(dk, nk * 4); be_zero(dv, nk * 4);
    attn_block_backward(dq, dk, dv, dout, q, lse, D, qp, qd, Tq, k, v, kp, kd, Tk, nh, nkv, hd, scale, mask);
    r.dq.resize(nq); r.dk.resize(nk); r.dv.resize(nk);
    be_download(r.dq.data(), dq, nq * 4);
    be_download(r.dk.data(), dk, nk * 4);
    be_download(r.dv.data(), dv, nk * 4);
}

// worst errors of cuDNN (a) against the own kernels (b); rows normalised by at least their floor (or 1e-6 of the
// array's largest value)
struct Errs { double out, lse, dq, dk, dv; };
double grad_err(const std::vector<float>& a, const std::vector<float>& b, size_t rows, int hd, const double* floor) {
    CmpRes e = cmp_rows_ex(a.data(), b.data(), rows, hd, 1e-6, floor);
    return e.nan ? INFINITY : e.err;
}

}   // namespace

// One class: the blocks that exercise it (causal: top-left Sq = Skv, and bottom-right with a query run that starts
// 8 positions after the keys, so that early queries see a few keys and a misaligned diagonal shows; unmasked: all
// keys before all queries), each through both engines, with the run's head dim and query heads per KV head (two KV
// heads: the strides between heads are exercised). 0 = cuDNN matches; else 1 and a reason.
static int check_class(int cls, const AttnRunShape* s, Errs* worst, char* why, size_t whylen) {
    static const int CASES[2][2][3] = { { { 48, 80, 100 }, { 0, 0, 0 } },     // Tq, Tk, first query position
                                        { { 48, 48, 0 }, { 48, 56, 8 } } };
    int nkv = s->nkv < 2 ? s->nkv : 2, nh = s->nh / s->nkv * nkv, hd = s->hd;   // the run's ratio, at most 2 KV heads
    memset(worst, 0, sizeof *worst);
    for (int c = 0; c < 2; c++) {
        int Tq = CASES[cls][c][0], Tk = CASES[cls][c][1], qstart = CASES[cls][c][2];
        if (!Tq) continue;
        size_t nq = (size_t)Tq * nh * hd, nk = (size_t)Tk * nkv * hd, nl = (size_t)Tq * nh;
        g_rng = 0x5eed0000u + 16 * cls + c;
        std::vector<float> hq(nq), hk(nk), hv(nk), hg(nq);
        for (float* a : { hq.data(), hg.data() }) for (size_t i = 0; i < nq; i++) a[i] = round_bf16(urand_pm1());
        for (float* a : { hk.data(), hv.data() }) for (size_t i = 0; i < nk; i++) a[i] = round_bf16(urand_pm1());
        std::vector<int> qp(Tq), kp(Tk), qd(Tq, 3), kd(Tk, 3);
        for (int i = 0; i < Tq; i++) qp[i] = qstart + i;
        for (int j = 0; j < Tk; j++) kp[j] = j;
        float* dev[10];
        size_t sizes[10] = { nq, nk, nk, nq, nq, nl, nl, nq, nk, nk };
        for (int i = 0; i < 10; i++) dev[i] = (float*)be_alloc(sizes[i] * 4);
        be_upload(dev[0], hq.data(), nq * 4); be_upload(dev[1], hk.data(), nk * 4);
        be_upload(dev[2], hv.data(), nk * 4); be_upload(dev[3], hg.data(), nq * 4);
        int *dqp = (int*)be_alloc(Tq * 4), *dkp = (int*)be_alloc(Tk * 4), *dqd = (int*)be_alloc(Tq * 4), *dkd = (int*)be_alloc(Tk * 4);
        be_upload(dqp, qp.data(), Tq * 4); be_upload(dkp, kp.data(), Tk * 4);
        be_upload(dqd, qd.data(), Tq * 4); be_upload(dkd, kd.data(), Tk * 4);
        size_t nmir = E.mirrors.size();
        attn_host_mirror(dqp, qp.data(), Tq); attn_host_mirror(dkp, kp.data(), Tk);
        attn_host_mirror(dqd, qd.data(), Tq); attn_host_mirror(dkd, kd.data(), Tk);
        const int *qdp = s->docs ? dqd : NULL, *kdp = s->docs ? dkd : NULL;
        int mask = cls ? ATTN_MASK_CAUSAL : ATTN_MASK_NONE;
        unsigned keep = E.fast;
        Result own, fast;
        E.fast = 0; E.force = 0;
        run_block(own, NULL, dev, dqp, dkp, qdp, kdp, Tq, Tk, nh, nkv, hd, mask);
        E.force = 1u << mask; E.failed = 0;
        long long before = E.counts[ATTN_ENGINE_FAST];
        run_block(fast, &own, dev, dqp, dkp, qdp, kdp, Tq, Tk, nh, nkv, hd, mask);
        int ran = E.counts[ATTN_ENGINE_FAST] - before >= 2;
        E.force = 0; E.fast = keep;
        E.mirrors.resize(nmir);
        for (Plan& p : E.check_plans) sdpa_free(&E.api, p.p);
        E.check_plans.clear();
        for (int i = 0; i < 10; i++) be_free(dev[i]);
        be_free(dqp); be_free(dkp); be_free(dqd); be_free(dkd);
        if (E.failed) { snprintf(why, whylen, "%s", E.check_err); return 1; }
        if (!ran) { snprintf(why, whylen, "the check's blocks did not reach cuDNN"); return 1; }
        CmpRes eo = cmp_rows(fast.out.data(), own.out.data(), nl, hd, 1e-6), el = cmp_lse_abs(fast.lse.data(), own.lse.data(), nl);
        // the visible keys of each query (every key, or causal by position) and the floors of dq, dk
        std::vector<size_t> voff((size_t)Tq + 1);
        std::vector<int> vlist;
        for (int i = 0; i < Tq; i++) {
            voff[(size_t)i] = vlist.size();
            for (int j = 0; j < Tk; j++) if (mask == ATTN_MASK_NONE || kp[j] <= qp[i]) vlist.push_back(j);
        }
        voff[(size_t)Tq] = vlist.size();
        std::vector<double> fq(nl), fk((size_t)Tk * nkv);
        cmp_attn_floors(fq.data(), fk.data(), Tq, Tk, nh, nkv, hd, hq.data(), hk.data(), hv.data(), hg.data(), own.out.data(),
                        own.lse.data(), voff.data(), vlist.data(), 1.0f / sqrtf((float)hd), CHECK_KAPPA);
        Errs e = { eo.nan ? INFINITY : eo.err, el.nan ? INFINITY : el.err, grad_err(fast.dq, own.dq, nl, hd, fq.data()),
                   grad_err(fast.dk, own.dk, (size_t)Tk * nkv, hd, fk.data()), grad_err(fast.dv, own.dv, (size_t)Tk * nkv, hd, NULL) };
        worst->out = fmax(worst->out, e.out); worst->lse = fmax(worst->lse, e.lse); worst->dq = fmax(worst->dq, e.dq);
        worst->dk = fmax(worst->dk, e.dk); worst->dv = fmax(worst->dv, e.dv);
        // (fmax drops a NaN: NaN errors are inf above)
    }
    const char* bad = worst->out > CHECK_TOL_OUT ? "out" : worst->lse > CHECK_TOL_LSE ? "lse" : worst->dq > CHECK_TOL_GRAD ? "dq"
                    : worst->dk > CHECK_TOL_GRAD ? "dk" : worst->dv > CHECK_TOL_GRAD ? "dv" : NULL;
    if (bad) {
        double v = !strcmp(bad, "out") ? worst->out : !strcmp(bad, "lse") ? worst->lse : !strcmp(bad, "dq") ? worst->dq
                 : !strcmp(bad, "dk") ? worst->dk : worst->dv;
        double tol = !strcmp(bad, "out") ? CHECK_TOL_OUT : !strcmp(bad, "lse") ? CHECK_TOL_LSE : CHECK_TOL_GRAD;
        snprintf(why, whylen, "cuDNN's %s differs from the own kernels' by %.2e (tolerance %.1e)", bad, v, tol);
        return 1;
    }
    return 0;
}

// ---- the verdict cache (RINGLM_ATTN_CHECK_CACHE): lines "KEY\tok\tERRORS" or "KEY\tfail\tREASON" ----
static void cache_key(char* key, size_t n, int cls, const AttnRunShape* s) {
    snprintf(key, n, "cudnn %zu | %s | head_dim %d | heads per kv %d | docs %d | %s", E.api.version, cu_device_name(), s->hd,
             s->nh / (s->nkv > 0 ? s->nkv : 1), s->docs ? 1 : 0, CLASS_NAME[cls]);
    for (char* c = key; *c; c++) if (*c == '\t' || *c == '\n') *c = ' ';
}
// the last line of the cache for key: 1 with ok (1 = verified) and its detail, else 0
static int cache_get(const char* path, const char* key, int* ok, char* detail, size_t dn) {
    FILE* f = fopen(path, "r");
    if (!f) return 0;
    char line[1600];
    int found = 0;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (strncmp(line, key, kl) || line[kl] != '\t') continue;
        const char* v = line + kl + 1;
        int is_ok = !strncmp(v, "ok\t", 3), is_fail = !strncmp(v, "fail\t", 5);
        if (!is_ok && !is_fail) continue;   // a line cut short or of another format: not a verdict
        *ok = is_ok;
        snprintf(detail, dn, "%s", v + (is_ok ? 3 : 5));
        found = 1;
    }
    fclose(f);
    return found;
}
// one line appended with one write (O_APPEND: ranks checking at once do not interleave their lines)
static void cache_put(const char* path, const char* key, int ok, const char* detail) {
    char line[1600];
    int n = snprintf(line, sizeof line, "%s\t%s\t%s\n", key, ok ? "ok" : "fail", detail);
    if (n <= 0 || (size_t)n >= sizeof line) return;
    for (char* c = line + strlen(key) + 1; c < line + n - 1; c++) if (*c == '\n') *c = ' ';
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) return;   // (a cache that cannot be written: the next process checks again)
    ssize_t w = write(fd, line, (size_t)n);
    (void)w;
    close(fd);
}

int attn_engine_select(const char* engine, const AttnRunShape* s, unsigned* fast, char* report, size_t reportlen, char* err,
                       size_t errlen) {
    *fast = 0;
    report[0] = 0;
    int own = !strcmp(engine, "own"), strict = !strcmp(engine, "cudnn");
    if (!own && !strict && strcmp(engine, "auto")) {
        snprintf(err, errlen, "attn_engine = %s: must be auto, cudnn or own", engine);
        return 1;
    }
    E.strict = 0;
    long long counts[2] = { E.counts[0], E.counts[1] };   // (the self-check's blocks are not the run's)
    E.check_mirrors = getenv("RINGLM_ATTN_CHECK_MIRRORS") && atoi(getenv("RINGLM_ATTN_CHECK_MIRRORS"));
    size_t len = 0;
    const char* common = NULL;   // a reason that holds for every class
    char buf[700];
    if (own) common = "attn_engine = own";
    else if (!cuda_backend_started()) common = "the backend has not started";
    else if (cu_precision() == CU_FP32) common = "matmul_precision = fp32: cuDNN's fused attention is bf16 only; the fp32 kernels run";
    else if (s->hd != 64 && s->hd != 128) {
        snprintf(buf, sizeof buf, "head_dim %d: the cuDNN engine is used for head_dim 64 and 128", s->hd);
        common = buf;
    } else {
        if (!E.loaded && !E.load_err[0]) {
            if (cudnn_api_load(&E.api, E.load_err, sizeof E.load_err)) E.loaded = 0;
            else {
                cudnnStatus_t st = E.api.Create(&E.h);
                if (st == CUDNN_STATUS_SUCCESS) st = E.api.SetStream(E.h, cu_stream());
                if (st != CUDNN_STATUS_SUCCESS) {
                    char msg[300] = "";
                    if (E.api.GetLastErrorString) E.api.GetLastErrorString(msg, sizeof msg);
                    snprintf(E.load_err, sizeof E.load_err, "cudnnCreate: %s%s%s", E.api.GetErrorString(st), msg[0] ? ": " : "", msg);
                } else E.loaded = 1;
            }
        }
        if (!E.loaded) {
            snprintf(buf, sizeof buf, "cuDNN unavailable: %s", E.load_err);
            common = buf;
        }
    }
    const char* cache = getenv("RINGLM_ATTN_CHECK_CACHE");
    if (cache && !*cache) cache = NULL;
    for (int cls = 0; cls < 2; cls++) {
        char line[1800], why[1200] = "", key[400], detail[800] = "";
        Errs w;
        double t0 = now_s();
        int ok = 0, cached = 0;
        if (!common) {
            cache_key(key, sizeof key, cls, s);
            if (cache && cache_get(cache, key, &ok, detail, sizeof detail)) {
                cached = 1;
                if (!ok) snprintf(why, sizeof why, "%s (the verdict cached in %s)", detail, cache);
            } else {
                ok = !check_class(cls, s, &w, why, sizeof why);
                if (ok) snprintf(detail, sizeof detail, "out %.1e, lse %.1e, dq %.1e, dk %.1e, dv %.1e within %.1e, %.0e, %.0e",
                                 w.out, w.lse, w.dq, w.dk, w.dv, CHECK_TOL_OUT, CHECK_TOL_LSE, CHECK_TOL_GRAD);
                if (cache) cache_put(cache, key, ok, ok ? detail : why);
            }
        }
        double dt = now_s() - t0;
        if (ok) {
            *fast |= 1u << cls;
            char tail[1400];
            if (cached) snprintf(tail, sizeof tail, "self-check verdict cached in %s: %s", cache, detail);
            else snprintf(tail, sizeof tail, "self-check against the own kernels: %s; %.2f s", detail, dt);
            snprintf(line, sizeof line, "attention engine: %s blocks (head_dim %d, %d query heads per KV head%s): cuDNN %zu.%zu.%zu (%s)",
                     CLASS_NAME[cls], s->hd, s->nh / (s->nkv > 0 ? s->nkv : 1), s->docs ? ", one document" : "",
                     E.api.version / 10000, E.api.version / 100 % 100, E.api.version % 100, tail);
        } else {
            snprintf(line, sizeof line, "attention engine: %s blocks (head_dim %d, %d query heads per KV head%s): own kernels (%s)",
                     CLASS_NAME[cls], s->hd, s->nh / (s->nkv > 0 ? s->nkv : 1), s->docs ? ", one document" : "",
                     common ? common : why);
            if (strict) {
                E.counts[0] = counts[0];
                E.counts[1] = counts[1];
                snprintf(err, errlen, "attn_engine = cudnn, but %s blocks cannot run on cuDNN: %s", CLASS_NAME[cls], common ? common : why);
                return 1;
            }
        }
        len += (size_t)snprintf(report + len, len < reportlen ? reportlen - len : 0, "%s%s", len ? "\n" : "", line);
    }
    if (s->docs && len < reportlen)
        len += (size_t)snprintf(report + len, reportlen - len, "\nattention engine: blocks with document boundaries inside them: own "
                                "kernels (cuDNN takes blocks of one document)");
    E.strict = strict;
    E.counts[0] = counts[0];
    E.counts[1] = counts[1];
    return 0;
}
