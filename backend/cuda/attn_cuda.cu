// attn_cuda.cu — the attention block kernels of attention.h on the GPU (FlashAttention-2 style).
//
// Two families, chosen by the matmul precision (be_set_matmul_precision):
//   bf16 / tf32: tensor-core kernels (mma.sync m16n8k16, bf16 operands, fp32 accumulation). Each call first
//     converts q, k, v (and dout) to bf16 copies in scratch, laid out [head][row][HDP] with the head dim
//     zero-padded to HDP = 64 (hd <= 64) or 128 (hd <= 128): the padding adds zeros to every dot product and
//     the padded output columns are never written, so any head dim up to 128 is exact in that sense; 64 and
//     128 waste nothing. Softmax statistics, (out, lse), dq, dk, dv stay fp32.
//   fp32: plain fp32 kernels (no tensor cores), any head dim up to 128: the reference-precision path that
//     tracks the CPU backend to ~1e-6.
// Semantics are those of backend/cpu/attn_cpu.c: masks from explicit positions (key j visible to query i iff
// kpos[j] <= qpos[i] under ATTN_MASK_CAUSAL) and, when qdoc/kdoc are given, document ids (and kdoc[j] ==
// qdoc[i]), GQA (query head h uses kv head h / (nh / nkv)), the running (out, lse) merged in place, rows that
// see no key keep lse = -inf and out unchanged, dq/dk/dv accumulated.
//
// Forward: one block per (query tile, head); warps own 16 query rows each; key tiles stream through shared
//   memory double-buffered (cp.async), tiles no query of the block can see are skipped (per-tile position and
//   document-id minima and maxima computed by a small kernel first: causally later keys, or keys whose document
//   ids all lie outside the queries' range), the per-element mask is applied only to tiles that straddle the
//   causal boundary, a document boundary or the end of the keys. Online softmax in base 2 on fp32 registers.
// Backward, deterministic: every output element gets its sums in a fixed order.
//   bf16: one pass (dkdv_bf16_k): one block per (key tile, KV head, split), looping over the visible (query head,
//          query tile) items: P^T = exp(S^T - lse), dP^T = V dO^T, dS^T = P^T (dP^T - D), dV += P^T dO, dK += dS^T Q
//          in registers, dQ = dS K added into dq with fp32 atomics that flags serialise in key-tile order; each block
//          takes its tile from a ticket, so that it waits only for blocks already running (see the kernel).
//   fp32: two kernels that each own their outputs: dK/dV per (key tile, kv head), dQ per (query tile, head) (S and dP
//          computed twice: 7 tile matmuls instead of 5).
#include "backend/cuda/cu_common.h"
#include <cuda_bf16.h>
typedef __nv_bfloat16 bf16;
#include <limits.h>
#include <string.h>
#include <math.h>

#define LOG2E_F 1.4426950408889634f
#define LN2_F 0.6931471805599453f

struct AttnArgs {
    float *out, *lse;                  // forward: the running result (fp32, row layout)
    float *dq, *dk, *dv;               // backward: accumulated (fp32, row layout)
    const float *lse_in, *D;           // backward: [Tq, nh]
    const void *q, *k, *v, *dout;      // bf16 kernels: [head][row][HDP] copies; fp32 kernels: the row layout
    const int *qpos, *kpos;
    const int *qdoc, *kdoc;            // document ids (docs = 1), else NULL
    const int4 *qmm, *kmm;             // per query / key tile (the kernel's tile sizes): position min, max (x, y),
                                       // document id min, max (z, w; 0 without documents)
    int Tq, Tk, nh, nkv, hd, grp;      // grp = nh / nkv
    float scale, scale_log2;
    int causal, docs, nqt, nkt;
    int hsplit;                        // dK/dV: blocks per KV head, each over grp / hsplit query heads (> 1: partials)
    float *part_k, *part_v;            // dK/dV with hsplit > 1: [hsplit][Tk][nkv * hd] per block group's sums
    int* stats;                        // NULL, or per block: tiles computed, visibility steps (cuda_attn_stats)
    int* flags;                        // backward: [nh][query tiles] the last key tile whose dQ was added, + 1 (zeroed)
    int* ticket;                       // backward: the next block's ticket (zeroed with the flags: the word after them)
};

// The next visible tile: the first j in [from, n) with visible(j), else n. 32 candidates per step, one per lane of a
// warp, decided by one ballot (every warp computes the same, so the answer is uniform over the block); steps counts
// the steps (per-block statistics).
template <class F>
__device__ __forceinline__ int next_visible(F visible, int from, int n, int& steps) {
    const int lane = threadIdx.x & 31;
    for (int base = from; base < n; base += 32) {
        steps++;
        int j = base + lane;
        unsigned m = __ballot_sync(0xffffffffu, j < n && visible(j));
        if (m) return base + __ffs(m) - 1;
    }
    return n;
}
// The previous visible tile: the last j in [0, before) with visible(j), else -1 (a warp's ballot, as next_visible).
template <class F>
__device__ __forceinline__ int prev_visible(F visible, int before) {
    const int lane = threadIdx.x & 31;
    for (int top = before - 1; top >= 0; top -= 32) {
        int j = top - lane;
        unsigned m = __ballot_sync(0xffffffffu, j >= 0 && visible(j));
        if (m) return top - (__ffs(m) - 1);
    }
    return -1;
}
__device__ __forceinline__ void put_stats(const AttnArgs& a, size_t b, int tiles, int steps) {   // b: the block's tile
    if (a.stats && threadIdx.x == 0) {
        a.stats[2 * b] = tiles;
        a.stats[2 * b + 1] = steps;
    }
}

// From the per-tile ranges: whether some key of tile k can be visible to some query of tile q, and whether
// every key is visible to every query (then no element needs the mask).
__device__ __forceinline__ bool tiles_meet(const AttnArgs& a, int4 q, int4 k) {
    return (!a.causal || k.x <= q.y) && (!a.docs || (k.z <= q.w && q.z <= k.w));
}
__device__ __forceinline__ bool tiles_full(const AttnArgs& a, int4 q, int4 k) {
    return (!a.causal || k.y <= q.x) && (!a.docs || (q.z == q.w && k.z == k.w && q.z == k.z));
}

// ---------------------------------------------------------------------------------------------------------
// PTX helpers

#ifndef CUDA_EMU   // the host emulation has its own (backend/cuda/emu/emu_device.h)
typedef uint32_t saddr_t;            // a shared-memory address
__device__ __forceinline__ saddr_t smem_u32(const void* p) { return (saddr_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void cp_async16(saddr_t dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], saddr_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], saddr_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// 2^x for x <= 0 (the softmax's exponents): one MUFU.EX2, no range reduction (exp2f adds three instructions per call
// to scale subnormal results); a result below 2^-126 is zero
__device__ __forceinline__ float ex2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
// the ordered dQ accumulation: a block's ticket (the counter's old value: blocks take them in the order they start), a
// global fp32 add whose result is not read (RED), a flag read with acquire until it holds `want` (a block that waited
// 2^31 reads traps: an error instead of a hang), a flag written with release
__device__ __forceinline__ int ticket_take(int* p) { return atomicAdd(p, 1); }
__device__ __forceinline__ void red_add_f32(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void flag_wait(const int* p, int want) {
    for (long n = 0;; n++) {
        int v;
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
        if (v == want) return;
        if (n > (1L << 31)) asm volatile("trap;\n");
    }
}
__device__ __forceinline__ void flag_set(int* p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" :: "l"(p), "r"(v) : "memory");
}
// d += a b: a 16x16 (row), b 16x8 (col), bf16 in, fp32 accumulate
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#else
#include "backend/cuda/emu/emu_attn.h"   // ex2_ftz, ticket_take, red_add_f32, flag_wait, flag_set on the host
#endif
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);   // .x (low half) = lo: the lower column index
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}

__device__ __forceinline__ void unpack_bf16(uint32_t u, float& lo, float& hi) {   // (exact: bf16 is fp32's top half)
    uint32_t a = u << 16, b = u & 0xffff0000u;
    memcpy(&lo, &a, 4);
    memcpy(&hi, &b, 4);
}

// Fragment addressing (PTX ISA, mma.m16n8k16 and ldmatrix), lane = 4 * gq + tq:
//   A 16x16 row-major tile at smem rows r0.., cols c0..:  ldsm_x4(rows r0 + (lane & 15), col c0 + (lane >> 4) * 8)
//   B 16(k)x16(n) pair of n-tiles from smem stored [n][k] (rows = n): ldsm_x4(rows n0 + (lane & 7) + ((lane >> 4) << 3),
//       col k0 + ((lane >> 3) & 1) * 8) -> {r0, r1} = n-tile n0, {r2, r3} = n-tile n0 + 8
//   B from smem stored [k][n] (rows = k): ldsm_x4_t(rows k0 + (lane & 7) + ((lane >> 3) & 1) * 8, col n0 + (lane >> 4) * 8)
//       -> {r0, r1} = n-tile n0, {r2, r3} = n-tile n0 + 8
//   C/D 16x8: d[0], d[1] at (row gq, cols 2 tq, 2 tq + 1); d[2], d[3] at (row gq + 8, same cols)
//   A from two C tiles (cols 0-7 and 8-15 of a 16-wide k step): {pack(c0[0], c0[1]), pack(c0[2], c0[3]),
//       pack(c1[0], c1[1]), pack(c1[2], c1[3])}
__device__ __forceinline__ saddr_t a_addr(const bf16* base, int r0, int c0, int lds, int lane) {
    return smem_u32(base + (size_t)(r0 + (lane & 15)) * lds + c0 + (lane >> 4) * 8);
}
__device__ __forceinline__ saddr_t bn_addr(const bf16* base, int n0, int k0, int lds, int lane) {
    return smem_u32(base + (size_t)(n0 + (lane & 7) + ((lane >> 4) << 3)) * lds + k0 + ((lane >> 3) & 1) * 8);
}
//   A 16(m)x16(k) tile from smem stored [k][m] (rows = k): ldsm_x4_t(rows k0 + (lane & 7) + ((lane >> 4) << 3),
//       col m0 + ((lane >> 3) & 1) * 8)
__device__ __forceinline__ saddr_t at_addr(const bf16* base, int k0, int m0, int lds, int lane) {
    return smem_u32(base + (size_t)(k0 + (lane & 7) + ((lane >> 4) << 3)) * lds + m0 + ((lane >> 3) & 1) * 8);
}
__device__ __forceinline__ saddr_t bk_addr(const bf16* base, int k0, int n0, int lds, int lane) {
    return smem_u32(base + (size_t)(k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * lds + n0 + (lane >> 4) * 8);
}

// R rows of a [T][HD] bf16 matrix from row r0 into smem [R][HD + 8]; rows >= T are zero-filled
template <int HD, int NT, int R>
__device__ __forceinline__ void load_rows(bf16* dst, const bf16* src, int r0, int T) {
    constexpr int CPR = HD / 8;   // 16-byte chunks per row
#pragma unroll
    for (int c0 = 0; c0 < R * CPR; c0 += NT) {
        int c = c0 + threadIdx.x;
        if (R * CPR % NT == 0 || c < R * CPR) {
            int r = c / CPR, col = (c % CPR) * 8, row = r0 + r;
            bool ok = row < T;
            cp_async16(smem_u32(dst + r * (HD + 8) + col), ok ? src + (size_t)row * HD + col : src, ok ? 16 : 0);
        }
    }
}
// the same as a rolled loop (the forward's key tiles: unrolled, the chunks' addresses would be hoisted into registers
// that S and O need; the loop costs a few instructions per 16 bytes)
template <int HD, int NT, int R>
__device__ __forceinline__ void load_rows_rolled(bf16* dst, const bf16* src, int r0, int T) {
    constexpr int CPR = HD / 8;
    static_assert(R * CPR % NT == 0, "whole rounds of chunks");
#pragma unroll 1
    for (int c = threadIdx.x; c < R * CPR; c += NT) {
        int r = c / CPR, col = (c % CPR) * 8, row = r0 + r;
        bool ok = row < T;
        cp_async16(smem_u32(dst + r * (HD + 8) + col), ok ? src + (size_t)row * HD + col : src, ok ? 16 : 0);
    }
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The weights that merge a block result (o, lse_b) into the running (out, lse) of one row (the CPU's
// merge_row): out = take ? o : out * w1 + o * w2. All four lanes of a quad hold the same row; lane tq == 0
// writes the new lse after every lane has read the old one. ok: this lane's row exists and saw a key in this
// block. Must be called by the whole warp.
__device__ __forceinline__ void merge_weights(float* lp, bool ok, float lse_b, int tq, float& w1, float& w2, bool& take) {
    float a = ok ? *lp : 0.0f, nl = 0.0f;
    take = false; w1 = 0.0f; w2 = 1.0f;
    if (ok) {
        if (a == -INFINITY) { take = true; nl = lse_b; }
        else {
            float mx = fmaxf(a, lse_b);
            nl = mx + log1pf(expf(-fabsf(a - lse_b)));
            w1 = expf(a - nl); w2 = expf(lse_b - nl);
        }
    }
    __syncwarp();
    if (ok && tq == 0) *lp = nl;
}

// ---------------------------------------------------------------------------------------------------------
// small kernels

// per tile: (min, max) of the positions and (min, max) of the document ids (0, 0 when doc is NULL)
__global__ void minmax_k(int4* out, const int* pos, const int* doc, int T, int tile, int ntiles) {
    int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= ntiles) return;
    int mn = INT_MAX, mx = INT_MIN, dmn = INT_MAX, dmx = INT_MIN, e = (t + 1) * tile < T ? (t + 1) * tile : T;
    for (int i = t * tile + lane; i < e; i += 32) {
        int p = pos[i], d = doc ? doc[i] : 0;
        mn = min(mn, p); mx = max(mx, p); dmn = min(dmn, d); dmx = max(dmx, d);
    }
    for (int o = 16; o; o >>= 1) {
        mn = min(mn, __shfl_xor_sync(0xffffffffu, mn, o));
        mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        dmn = min(dmn, __shfl_xor_sync(0xffffffffu, dmn, o));
        dmx = max(dmx, __shfl_xor_sync(0xffffffffu, dmx, o));
    }
    if (lane == 0) out[t] = make_int4(mn, mx, dmn, dmx);
}

// src [T][H * hd] fp32 -> dst [H][T][HDP] bf16, columns hd..HDP-1 zero
__global__ void to_bf16_k(__nv_bfloat162* dst, const float* src, int T, int H, int hd, int HDP) {
    size_t half = HDP / 2, n = (size_t)H * T * half;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        int d = (int)(idx % half) * 2;
        size_t th = idx / half;
        int t = (int)(th % T), hh = (int)(th / T);
        const float* s = src + (size_t)t * H * hd + (size_t)hh * hd;
        float x0 = d < hd ? s[d] : 0.0f, x1 = d + 1 < hd ? s[d + 1] : 0.0f;
        dst[idx] = __floats2bfloat162_rn(x0, x1);
    }
}

__global__ void fill_k(float* x, size_t n, float v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) x[i] = v;
}

// D[r] = sum_d dout[r, d] out[r, d]: one warp per (row, head)
__global__ void bwd_begin_k(float* D, const float* dout, const float* out, long n, int hd) {
    long r = blockIdx.x * (long)(blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= n) return;
    const float *a = dout + r * hd, *b = out + r * hd;
    float acc = 0.0f;
    for (int d = lane; d < hd; d += 32) acc += a[d] * b[d];
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) D[r] = acc;
}

__global__ void merge_k(float* o1, float* lse1, const float* o2, const float* lse2, long n, int hd) {
    long r = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (r >= n) return;
    float b = lse2[r];
    if (b == -INFINITY) return;
    float* x = o1 + r * hd;
    const float* y = o2 + r * hd;
    float a = lse1[r];
    if (a == -INFINITY) {
        for (int d = 0; d < hd; d++) x[d] = y[d];
        lse1[r] = b;
        return;
    }
    float mx = fmaxf(a, b), l = mx + log1pf(expf(-fabsf(a - b)));
    float w1 = expf(a - l), w2 = expf(b - l);
    for (int d = 0; d < hd; d++) x[d] = x[d] * w1 + y[d] * w2;
    lse1[r] = l;
}

// ---------------------------------------------------------------------------------------------------------
// tile configurations of the bf16 kernels: 4 warps; the forward's warps own 32 query rows each (two m16 blocks that
// share every K and V fragment read from shared memory), 128 query rows per block; its key tile FBN is chosen per
// device at start-up (fwd_bn: the largest whose shared memory lets 2 blocks share an SM, else the largest that fits
// one). The backward's warps own KR key rows (32 at head_dim 64; 16 at 128, where 32 rows of dK and dV would take
// 256 registers) and step through query tiles of BQ = 32 rows.

constexpr int NWARP = 4, FBM = 32 * NWARP, BQ = 32;
template <int HD> struct BwdCfg;
template <> struct BwdCfg<64>  { enum { KR = 32 }; };
template <> struct BwdCfg<128> { enum { KR = 16 }; };

template <int HD, int BN> constexpr size_t fwd_smem() {
    return (size_t)(FBM + 4 * BN) * (HD + 8) * 2 + 2 * 2 * BN * 4 + 2 * FBM * 4;
}
template <int HD> constexpr size_t bwd_smem() {
    constexpr int BNK = NWARP * BwdCfg<HD>::KR;
    return (size_t)(2 * BNK + 4 * BQ) * (HD + 8) * 2 + (size_t)BNK * (BQ + 8) * 2 + 4 * 2 * BQ * 4 + 2 * BNK * 4 + 16;
}

// ---------------------------------------------------------------------------------------------------------
// bf16 forward
//
// Per key tile and warp (32 query rows, BN keys): S = Q K^T (HD/16 x BN/16 K fragments, each used by both m16 blocks),
// the softmax in base 2 with the scale folded into one FFMA per score (p = 2^(s c - m c), c = scale log2 e, m the row's
// running maximum of the raw scores) and ex2.approx.ftz (arguments <= 0: no range reduction, a subnormal result is a
// zero weight), then O += P V.

template <int HD, int BN>
__global__ void __launch_bounds__(NWARP * 32, 1) fwd_bf16_k(AttnArgs a) {
    constexpr int BM = FBM, LDS = HD + 8, NT = NWARP * 32;
    DYN_SMEM(unsigned char, smem);
    bf16* Qs = reinterpret_cast<bf16*>(smem);       // [BM][LDS]
    bf16* Ks = Qs + BM * LDS;                        // [2][BN][LDS]
    bf16* Vs = Ks + 2 * BN * LDS;                    // [2][BN][LDS]
    int* kps = reinterpret_cast<int*>(Vs + 2 * BN * LDS);   // [2][BN]
    int* kds = kps + 2 * BN;                                 // [2][BN]
    int* qps = kds + 2 * BN;                                 // [BM] query positions, document ids (the mask reads
    int* qds = qps + BM;                                     // [BM]  them from here: registers go to S and O)
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, gq = lane >> 2, tq = lane & 3;
    const int qt = a.nqt - 1 - blockIdx.x, h = blockIdx.y, g = h / a.grp, q0 = qt * BM;
    const bf16* qg = reinterpret_cast<const bf16*>(a.q) + (size_t)h * a.Tq * HD;
    const bf16* kg = reinterpret_cast<const bf16*>(a.k) + (size_t)g * a.Tk * HD;
    const bf16* vg = reinterpret_cast<const bf16*>(a.v) + (size_t)g * a.Tk * HD;
    const float c = a.scale_log2;

    load_rows<HD, NT, BM>(Qs, qg, q0, a.Tq);
    cp_commit();
    const int4 qm = a.qmm[qt];
    for (int i = tid; i < BM; i += NT) {
        int row = q0 + i;
        qps[i] = row < a.Tq ? a.qpos[row] : INT_MAX;
        qds[i] = row < a.Tq && a.docs ? a.qdoc[row] : 0;
    }

    float o[2][HD / 8][4];
#pragma unroll
    for (int mb = 0; mb < 2; mb++)
#pragma unroll
        for (int i = 0; i < HD / 8; i++) o[mb][i][0] = o[mb][i][1] = o[mb][i][2] = o[mb][i][3] = 0.0f;
    float m[2][2], l[2][2];   // raw running maxima (unscaled scores), per-lane partial sums
#pragma unroll
    for (int mb = 0; mb < 2; mb++) { m[mb][0] = m[mb][1] = -INFINITY; l[mb][0] = l[mb][1] = 0.0f; }

    auto visible = [&](int j) { return tiles_meet(a, qm, a.kmm[j]); };
    auto load_kv = [&](int j, int b) {
        load_rows_rolled<HD, NT, BN>(Ks + b * BN * LDS, kg, j * BN, a.Tk);
        load_rows_rolled<HD, NT, BN>(Vs + b * BN * LDS, vg, j * BN, a.Tk);
        for (int i = tid; i < BN; i += NT) {
            int key = j * BN + i;
            kps[b * BN + i] = key < a.Tk ? a.kpos[key] : INT_MAX;
            kds[b * BN + i] = key < a.Tk && a.docs ? a.kdoc[key] : 0;
        }
    };
    int steps = 0, tiles = 0;
    int j = next_visible(visible, 0, a.nkt, steps);
    if (j < a.nkt) load_kv(j, 0);
    cp_commit();
    int buf = 0;
    while (j < a.nkt) {
        tiles++;
        int nj = next_visible(visible, j + 1, a.nkt, steps);
        if (nj < a.nkt) load_kv(nj, buf ^ 1);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const bf16* Kb = Ks + buf * BN * LDS;
        const bf16* Vb = Vs + buf * BN * LDS;
        const int* kp = kps + buf * BN;
        const int* kd = kds + buf * BN;

        // S = Q K^T (32 x BN per warp); Q fragments are re-read from shared memory per k step (registers go to S, O)
        float s[2][BN / 8][4];
#pragma unroll
        for (int mb = 0; mb < 2; mb++)
#pragma unroll
            for (int i = 0; i < BN / 8; i++) s[mb][i][0] = s[mb][i][1] = s[mb][i][2] = s[mb][i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            uint32_t qf[2][4];
            ldsm_x4(qf[0], a_addr(Qs, 32 * w, kk * 16, LDS, lane));
            ldsm_x4(qf[1], a_addr(Qs, 32 * w + 16, kk * 16, LDS, lane));
#pragma unroll
            for (int np = 0; np < BN / 16; np++) {
                uint32_t b[4];
                ldsm_x4(b, bn_addr(Kb, np * 16, kk * 16, LDS, lane));
#pragma unroll
                for (int mb = 0; mb < 2; mb++) {
                    mma16816(s[mb][2 * np], qf[mb], b[0], b[1]);
                    mma16816(s[mb][2 * np + 1], qf[mb], b[2], b[3]);
                }
            }
        }
        // the mask, where the tile straddles the causal boundary, a document boundary or the end of the keys
        if ((j + 1) * BN > a.Tk || !tiles_full(a, qm, a.kmm[j])) {
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int col = nt * 8 + 2 * tq + e, key = j * BN + col, p = kp[col], d = kd[col];
#pragma unroll
                    for (int mb = 0; mb < 2; mb++)
#pragma unroll
                        for (int hr = 0; hr < 2; hr++) {
                            int r = 32 * w + 16 * mb + gq + 8 * hr;
                            if (key >= a.Tk || (a.causal && p > qps[r]) || (a.docs && d != qds[r]))
                                s[mb][nt][2 * hr + e] = -INFINITY;
                        }
                }
        }
        // online softmax: rows gq (hr 0) and gq + 8 (hr 1) of each m16 block, spread over the 4 lanes of a quad
        uint32_t pk[2][BN / 8][2];
#pragma unroll
        for (int mb = 0; mb < 2; mb++)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                float mx = m[mb][hr];
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++) mx = fmaxf(mx, fmaxf(s[mb][nt][2 * hr], s[mb][nt][2 * hr + 1]));
                mx = quad_max(mx);
                // (a row that has seen no key yet: mc = 0, so every p = 2^-inf = 0 and nothing is rescaled)
                const float mc = mx == -INFINITY ? 0.0f : mx * c;
                const float corr = ex2_ftz(fmaf(m[mb][hr], c, -mc));
                float sum = 0.0f;
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++) {
                    float p0 = ex2_ftz(fmaf(s[mb][nt][2 * hr], c, -mc)), p1 = ex2_ftz(fmaf(s[mb][nt][2 * hr + 1], c, -mc));
                    pk[mb][nt][hr] = pack_bf16(p0, p1);   // P as the A fragments of O += P V (the fp32 scores die here)
                    sum += p0 + p1;
                }
                l[mb][hr] = fmaf(l[mb][hr], corr, sum);   // per-lane partial; the quad's lanes are summed at the end
                m[mb][hr] = mx;
#pragma unroll
                for (int dt = 0; dt < HD / 8; dt++) { o[mb][dt][2 * hr] *= corr; o[mb][dt][2 * hr + 1] *= corr; }
            }
        // O += P V (each V fragment used by both m16 blocks)
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t pa[2][4];
#pragma unroll
            for (int mb = 0; mb < 2; mb++) {
                pa[mb][0] = pk[mb][2 * kk][0];
                pa[mb][1] = pk[mb][2 * kk][1];
                pa[mb][2] = pk[mb][2 * kk + 1][0];
                pa[mb][3] = pk[mb][2 * kk + 1][1];
            }
#pragma unroll
            for (int dp = 0; dp < HD / 16; dp++) {
                uint32_t b[4];
                ldsm_x4_t(b, bk_addr(Vb, kk * 16, dp * 16, LDS, lane));
#pragma unroll
                for (int mb = 0; mb < 2; mb++) {
                    mma16816(o[mb][2 * dp], pa[mb], b[0], b[1]);
                    mma16816(o[mb][2 * dp + 1], pa[mb], b[2], b[3]);
                }
            }
        }
        __syncthreads();   // every warp is done with buffer `buf` before the next prefetch overwrites it
        j = nj;
        buf ^= 1;
    }
    cp_wait<0>();
    put_stats(a, (size_t)blockIdx.y * gridDim.x + blockIdx.x, tiles, steps);

    // block result o / l, lse_b = ln 2 (m c + log2 l) (m c rounded as the exponents used it), merged into (out, lse)
#pragma unroll
    for (int mb = 0; mb < 2; mb++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float lsum = quad_sum(l[mb][hr]);
            int row = q0 + 32 * w + 16 * mb + gq + 8 * hr;
            bool ok = row < a.Tq && m[mb][hr] != -INFINITY;
            float lse_b = ok ? (m[mb][hr] * c + log2f(lsum)) * LN2_F : 0.0f, inv = ok ? 1.0f / lsum : 0.0f;
            float* orow = a.out + (size_t)(ok ? row : 0) * a.nh * a.hd + (size_t)h * a.hd;
            float* lp = a.lse + (size_t)(ok ? row : 0) * a.nh + h;
            float w1, w2;
            bool take;
            merge_weights(lp, ok, lse_b, tq, w1, w2, take);
            if (ok) {
#pragma unroll
                for (int dt = 0; dt < HD / 8; dt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        int col = dt * 8 + 2 * tq + e;
                        if (col < a.hd) {
                            float ov = o[mb][dt][2 * hr + e] * inv;
                            orow[col] = take ? ov : orow[col] * w1 + ov * w2;
                        }
                    }
            }
        }
}

// ---------------------------------------------------------------------------------------------------------
// bf16 backward: dK, dV and dQ in one pass
//
// One block per (key tile of BNK keys, KV head g, split sp), looping over the visible (query head, query tile) items
// of its heads, query tiles in descending order: P^T = 2^(S^T c - lse log2 e), dP^T = V dO^T, dS^T = P^T (dP^T - D),
// dV += P^T dO, dK += dS^T Q in registers (the warp's KR key rows), and the tile's dQ = dS K (dS through shared
// memory: the sum runs over the keys of all four warps) added into dq in fp32 in a fixed order: for each (query head,
// query tile) the key tiles that see it add in ascending order, each waiting for a flag that the previous visible key
// tile's block sets after its adds (flags[head][query tile] = key tile + 1; zeroed before the launch).
// A block takes its (key tile, KV head, split) from a ticket, not from blockIdx: thread 0's atomicAdd on a counter
// zeroed with the flags, broadcast through shared memory; ticket t is key tile t % nkt of grid row t / nkt (KV head,
// split), so every block a block waits for (a lower key tile of its row) holds a lower ticket, handed to a block that
// was already running. CUDA promises no order of blocks (a block of high index may be resident and spin while the
// lower one it waits for finds no free SM: a deadlock); waits for lower tickets cannot deadlock in any order (by
// induction: ticket 0 waits for nothing, and a block whose waits end finishes). The order of the adds into each dq
// element is that of the key tiles (the flags'), not of the tickets: the same sums in the same order on every run
// (deterministic, without the separate dQ pass that recomputed S and dP: 5 tile matmuls instead of 7). The descending
// query order lets the blocks of one head group run in step: each adds a query tile right after its predecessor did.

template <int HD>
__global__ void __launch_bounds__(NWARP * 32, 1) dkdv_bf16_k(AttnArgs a) {
    constexpr int KR = BwdCfg<HD>::KR, MB = KR / 16, BNK = NWARP * KR, LDS = HD + 8, LDD = BQ + 8, NT = NWARP * 32;
    constexpr int DQN = HD / 2 / 8;   // dQ: each warp computes 16 query rows x HD / 2 columns (DQN n8 tiles)
    DYN_SMEM(unsigned char, smem);
    bf16* Ks = reinterpret_cast<bf16*>(smem);        // [BNK][LDS]
    bf16* Vs = Ks + BNK * LDS;                        // [BNK][LDS]
    bf16* Qs = Vs + BNK * LDS;                        // [2][BQ][LDS]
    bf16* Os = Qs + 2 * BQ * LDS;                     // [2][BQ][LDS]  dout
    bf16* dSs = Os + 2 * BQ * LDS;                    // [BNK][LDD]    dS^T of the current item (bf16, as dK uses it)
    float* ls = reinterpret_cast<float*>(dSs + BNK * LDD);   // [2][BQ]  lse * log2(e); +inf: P = 0
    float* Dsh = ls + 2 * BQ;                         // [2][BQ]
    int* qps = reinterpret_cast<int*>(Dsh + 2 * BQ);  // [2][BQ]
    int* qds = qps + 2 * BQ;                          // [2][BQ]
    int* kps = qds + 2 * BQ;                          // [BNK] key positions, document ids (read by the mask)
    int* kds = kps + BNK;                             // [BNK]
    int* cnt = kds + BNK;                             // [4] tiles computed, visibility steps (put_stats), the block's key
                                                      //     tile and first query head (here, not in registers: the
                                                      //     loop has none to spare; read through `tile`)
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, gq = lane >> 2, tq = lane & 3, hs = a.grp / a.hsplit;
    // the ticket's block: key tile ticket % nkt, grid row ticket / nkt = (KV head g, split sp), whose query heads are
    // h0 = g * grp + sp * hs .. + hs - 1 (hs = grp / hsplit)
    if (tid == 0) {
        const int t = ticket_take(a.ticket), row = t / a.nkt;
        cnt[2] = t % a.nkt;
        cnt[3] = row / a.hsplit * a.grp + row % a.hsplit * hs;
    }
    __syncthreads();
    const volatile int* tile = cnt + 2;               // [0] the key tile, [1] h0: loaded where used
    // the block's ticket (its statistics' index): key tile + nkt (g hsplit + sp)
    auto block_of = [&]() { return (size_t)tile[0] + (size_t)a.nkt * (tile[1] / a.grp * a.hsplit + tile[1] % a.grp / hs); };
    const int k0 = tile[0] * BNK;
    const bf16* kg = reinterpret_cast<const bf16*>(a.k) + (size_t)(tile[1] / a.grp) * a.Tk * HD;
    const bf16* vg = reinterpret_cast<const bf16*>(a.v) + (size_t)(tile[1] / a.grp) * a.Tk * HD;
    const float c = a.scale_log2;
    const int4 km = a.kmm[tile[0]];
    const int total = hs * a.nqt;
    auto qt_of = [&](int it2) { return a.nqt - 1 - it2 % a.nqt; };   // descending query tiles within each head
    auto visible = [&](int it2) { return tiles_meet(a, a.qmm[qt_of(it2)], km); };
    int steps = 0;
    int it = next_visible(visible, 0, total, steps);
    if (it >= total) { put_stats(a, block_of(), 0, steps); return; }   // no query sees these keys: nothing to add, no flag to set
    if (tid == 0) { cnt[0] = 0; cnt[1] = steps; }

    load_rows<HD, NT, BNK>(Ks, kg, k0, a.Tk);
    load_rows<HD, NT, BNK>(Vs, vg, k0, a.Tk);
    cp_commit();
    for (int i = tid; i < BNK; i += NT) {
        int key = k0 + i;
        kps[i] = key < a.Tk ? a.kpos[key] : INT_MAX;
        kds[i] = key < a.Tk && a.docs ? a.kdoc[key] : 0;
    }
    auto load_q = [&](int it2, int b) {
        int qt = qt_of(it2), h = tile[1] + it2 / a.nqt, q0 = qt * BQ;
        load_rows<HD, NT, BQ>(Qs + b * BQ * LDS, reinterpret_cast<const bf16*>(a.q) + (size_t)h * a.Tq * HD, q0, a.Tq);
        load_rows<HD, NT, BQ>(Os + b * BQ * LDS, reinterpret_cast<const bf16*>(a.dout) + (size_t)h * a.Tq * HD, q0, a.Tq);
        for (int i = tid; i < BQ; i += NT) {
            int row = q0 + i;
            float L = INFINITY, Dv = 0.0f;
            int p = INT_MIN, d = 0;
            if (row < a.Tq) {
                float x = a.lse_in[(size_t)row * a.nh + h];
                L = x == -INFINITY ? INFINITY : x * LOG2E_F;
                Dv = a.D[(size_t)row * a.nh + h];
                p = a.qpos[row];
                if (a.docs) d = a.qdoc[row];
            }
            ls[b * BQ + i] = L; Dsh[b * BQ + i] = Dv; qps[b * BQ + i] = p; qds[b * BQ + i] = d;
        }
    };
    load_q(it, 0);
    cp_commit();

    float dk[MB][HD / 8][4], dv[MB][HD / 8][4];
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int i = 0; i < HD / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) dk[mb][i][e] = dv[mb][i][e] = 0.0f;
    const int ldq = a.nh * a.hd, dqm = w & 1, dqc = (w >> 1) * (HD / 2);   // this warp's dQ rows (m16 block), columns
    int buf = 0;
    while (it < total) {
        int st = 0;
        int nit = next_visible(visible, it + 1, total, st);
        if (tid == 0) { cnt[0]++; cnt[1] += st; }
        if (nit < total) load_q(nit, buf ^ 1);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const bf16* Qb = Qs + buf * BQ * LDS;
        const bf16* Ob = Os + buf * BQ * LDS;
        const float* Lb = ls + buf * BQ;
        const float* Db = Dsh + buf * BQ;
        const int* Pb = qps + buf * BQ;
        const int* Qd = qds + buf * BQ;
        // S^T = K Q^T (KR keys x BQ queries per warp; each Q fragment used by every m16 block), then P^T packed to
        // bf16 at once (as dV and dS use it), so that dP^T = V dO^T finds the registers of S free
        const int qt = qt_of(it), h = tile[1] + it / a.nqt, q0 = qt * BQ;
        const bool msk = !tiles_full(a, a.qmm[qt], km);
        uint32_t pk[MB][BQ / 8][2], dk2[MB][BQ / 8][2];   // P^T, dS^T as bf16 pairs: [m16 block][n8 tile][row gq, gq + 8]
        {
            float sc[MB][BQ / 8][4];
#pragma unroll
            for (int mb = 0; mb < MB; mb++)
#pragma unroll
                for (int i = 0; i < BQ / 8; i++) sc[mb][i][0] = sc[mb][i][1] = sc[mb][i][2] = sc[mb][i][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                uint32_t ka[MB][4];
#pragma unroll
                for (int mb = 0; mb < MB; mb++) ldsm_x4(ka[mb], a_addr(Ks, KR * w + 16 * mb, kk * 16, LDS, lane));
#pragma unroll
                for (int np = 0; np < BQ / 16; np++) {
                    uint32_t b[4];
                    ldsm_x4(b, bn_addr(Qb, np * 16, kk * 16, LDS, lane));
#pragma unroll
                    for (int mb = 0; mb < MB; mb++) {
                        mma16816(sc[mb][2 * np], ka[mb], b[0], b[1]);
                        mma16816(sc[mb][2 * np + 1], ka[mb], b[2], b[3]);
                    }
                }
            }
#pragma unroll
            for (int nt = 0; nt < BQ / 8; nt++) {
                const int col = nt * 8 + 2 * tq;
#pragma unroll
                for (int mb = 0; mb < MB; mb++)
#pragma unroll
                    for (int hr = 0; hr < 2; hr++) {
                        const int r = KR * w + 16 * mb + gq + 8 * hr;
                        float p2[2];
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            // (masked before the exponent: every argument stays <= 0)
                            float x = fmaf(sc[mb][nt][2 * hr + e], c, -Lb[col + e]);
                            if (msk && ((a.causal && kps[r] > Pb[col + e]) || (a.docs && kds[r] != Qd[col + e]))) x = -INFINITY;
                            p2[e] = ex2_ftz(x);
                        }
                        pk[mb][nt][hr] = pack_bf16(p2[0], p2[1]);
                    }
            }
        }
        {
            float dp[MB][BQ / 8][4];
#pragma unroll
            for (int mb = 0; mb < MB; mb++)
#pragma unroll
                for (int i = 0; i < BQ / 8; i++) dp[mb][i][0] = dp[mb][i][1] = dp[mb][i][2] = dp[mb][i][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                uint32_t va[MB][4];
#pragma unroll
                for (int mb = 0; mb < MB; mb++) ldsm_x4(va[mb], a_addr(Vs, KR * w + 16 * mb, kk * 16, LDS, lane));
#pragma unroll
                for (int np = 0; np < BQ / 16; np++) {
                    uint32_t b[4];
                    ldsm_x4(b, bn_addr(Ob, np * 16, kk * 16, LDS, lane));
#pragma unroll
                    for (int mb = 0; mb < MB; mb++) {
                        mma16816(dp[mb][2 * np], va[mb], b[0], b[1]);
                        mma16816(dp[mb][2 * np + 1], va[mb], b[2], b[3]);
                    }
                }
            }
            // dS^T = P^T (dP^T - D), from the bf16 P^T that dV uses; to shared memory for dQ (C fragment layout: key row
            // gq (+ 8), query columns 2 tq, 2 tq + 1 of each n8 tile)
#pragma unroll
            for (int nt = 0; nt < BQ / 8; nt++) {
                const int col = nt * 8 + 2 * tq;
                const float D0 = Db[col], D1 = Db[col + 1];
#pragma unroll
                for (int mb = 0; mb < MB; mb++)
#pragma unroll
                    for (int hr = 0; hr < 2; hr++) {
                        float p0, p1;
                        unpack_bf16(pk[mb][nt][hr], p0, p1);
                        dk2[mb][nt][hr] = pack_bf16(p0 * (dp[mb][nt][2 * hr] - D0), p1 * (dp[mb][nt][2 * hr + 1] - D1));
                        *reinterpret_cast<uint32_t*>(dSs + (size_t)(KR * w + 16 * mb + gq + 8 * hr) * LDD + col) = dk2[mb][nt][hr];
                    }
            }
        }
        // dV += P^T dO,  dK += dS^T Q   (k = the BQ queries)
#pragma unroll
        for (int kq = 0; kq < BQ / 16; kq++) {
            uint32_t pa[MB][4], da[MB][4];
#pragma unroll
            for (int mb = 0; mb < MB; mb++) {
                pa[mb][0] = pk[mb][2 * kq][0]; pa[mb][1] = pk[mb][2 * kq][1];
                pa[mb][2] = pk[mb][2 * kq + 1][0]; pa[mb][3] = pk[mb][2 * kq + 1][1];
                da[mb][0] = dk2[mb][2 * kq][0]; da[mb][1] = dk2[mb][2 * kq][1];
                da[mb][2] = dk2[mb][2 * kq + 1][0]; da[mb][3] = dk2[mb][2 * kq + 1][1];
            }
#pragma unroll
            for (int d2 = 0; d2 < HD / 16; d2++) {
                uint32_t b[4];
                ldsm_x4_t(b, bk_addr(Ob, kq * 16, d2 * 16, LDS, lane));
#pragma unroll
                for (int mb = 0; mb < MB; mb++) {
                    mma16816(dv[mb][2 * d2], pa[mb], b[0], b[1]);
                    mma16816(dv[mb][2 * d2 + 1], pa[mb], b[2], b[3]);
                }
                ldsm_x4_t(b, bk_addr(Qb, kq * 16, d2 * 16, LDS, lane));
#pragma unroll
                for (int mb = 0; mb < MB; mb++) {
                    mma16816(dk[mb][2 * d2], da[mb], b[0], b[1]);
                    mma16816(dk[mb][2 * d2 + 1], da[mb], b[2], b[3]);
                }
            }
        }
        __syncthreads();   // dS^T of every warp is in shared memory
        // dQ (16 query rows dqm x HD / 2 columns from dqc per warp) = dS K over the block's BNK keys, in parts of 32
        // columns (at head_dim 128 two: 16 accumulators each beside dK and dV), each added into dq in the fixed order:
        // wait (before the first part's adds) for the previous visible key tile's block, add, then let the next one in
        int* flag = a.flags + (size_t)h * a.nqt + qt;
#pragma unroll
        for (int part = 0; part < DQN / 4; part++) {
            float dqp[4][4];
#pragma unroll
            for (int i = 0; i < 4; i++) dqp[i][0] = dqp[i][1] = dqp[i][2] = dqp[i][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < BNK / 16; kk++) {
                uint32_t af[4];
                ldsm_x4_t(af, at_addr(dSs, kk * 16, 16 * dqm, LDD, lane));
#pragma unroll
                for (int d2 = 0; d2 < 2; d2++) {
                    uint32_t b[4];
                    ldsm_x4_t(b, bk_addr(Ks, kk * 16, dqc + part * 32 + d2 * 16, LDS, lane));
                    mma16816(dqp[2 * d2], af, b[0], b[1]);
                    mma16816(dqp[2 * d2 + 1], af, b[2], b[3]);
                }
            }
            if (part == 0) {
                if (w == 0) {
                    const int4 qmq = a.qmm[qt];
                    int prev = prev_visible([&](int j2) { return tiles_meet(a, qmq, a.kmm[j2]); }, tile[0]);
                    if (lane == 0) flag_wait(flag, prev + 1);
                }
                __syncthreads();
            }
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                int row = q0 + 16 * dqm + gq + 8 * hr;
                if (row >= a.Tq) continue;
                float* dqr = a.dq + (size_t)row * ldq + (size_t)h * a.hd;
#pragma unroll
                for (int dt = 0; dt < 4; dt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        int col = dqc + part * 32 + dt * 8 + 2 * tq + e;
                        if (col < a.hd) red_add_f32(dqr + col, a.scale * dqp[dt][2 * hr + e]);
                    }
            }
        }
        __threadfence();
        __syncthreads();   // (also: every warp is done with buffer `buf` and with dS^T before they are overwritten)
        if (tid == 0) flag_set(flag, tile[0] + 1);
        it = nit;
        buf ^= 1;
    }
    cp_wait<0>();
    put_stats(a, block_of(), cnt[0], cnt[1]);   // (thread 0's own writes)
    const int ldk = a.nkv * a.hd, k1 = tile[0] * BNK, g = tile[1] / a.grp, sp = tile[1] % a.grp / hs;
    const bool part = a.hsplit > 1;   // this split's sums to its partial rows (added in split order by dkdv_sum_k)
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            int key = k1 + KR * w + 16 * mb + gq + 8 * hr;
            if (key >= a.Tk) continue;
            size_t off = (size_t)key * ldk + (size_t)g * a.hd, poff = (size_t)sp * a.Tk * ldk + off;
            float* dkr = part ? a.part_k + poff : a.dk + off;
            float* dvr = part ? a.part_v + poff : a.dv + off;
#pragma unroll
            for (int dt = 0; dt < HD / 8; dt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    int col = dt * 8 + 2 * tq + e;
                    if (col < a.hd) {
                        if (part) { dkr[col] = a.scale * dk[mb][dt][2 * hr + e]; dvr[col] = dv[mb][dt][2 * hr + e]; }
                        else { dkr[col] += a.scale * dk[mb][dt][2 * hr + e]; dvr[col] += dv[mb][dt][2 * hr + e]; }
                    }
                }
        }
}

// dk += sum over the splits of the partials, in split order (the dK/dV kernel with hsplit > 1); dv alike
__global__ void dkdv_sum_k(float* dk, float* dv, const float* pk, const float* pv, size_t n, int splits) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float sk = 0.0f, sv = 0.0f;
        for (int s2 = 0; s2 < splits; s2++) { sk += pk[(size_t)s2 * n + i]; sv += pv[(size_t)s2 * n + i]; }
        dk[i] += sk;
        dv[i] += sv;
    }
}

// ---------------------------------------------------------------------------------------------------------
// fp32 kernels: tiles of 32 rows, 256 threads; thread = (row r = tid / 8 of its side, lane group jj = tid % 8);
// the 8 threads of a row are 8 consecutive lanes of one warp. Shared rows have hd + 1 floats (no bank
// conflicts across rows). Accumulators: columns d = jj + 8 c, c < 16 (hd <= 128).

#define FB 32
static inline size_t f32_fwd_smem(int hd) { return ((size_t)3 * FB * (hd + 1) + FB * (FB + 1) + 2 * FB) * 4; }
static inline size_t f32_dkdv_smem(int hd) { return ((size_t)4 * FB * (hd + 1) + 2 * FB * (FB + 1) + 4 * FB) * 4; }
static inline size_t f32_dq_smem(int hd) { return ((size_t)4 * FB * (hd + 1) + FB * (FB + 1) + 2 * FB) * 4; }

__device__ __forceinline__ float grp8_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
}
__device__ __forceinline__ float grp8_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v + __shfl_xor_sync(0xffffffffu, v, 4);
}
// FB rows of head `head` of a [T][ld] fp32 matrix from row r0 into smem [FB][hd + 1]; rows >= T zero
__device__ __forceinline__ void f32_rows(float* dst, const float* src, int r0, int T, int ld, int head, int hd) {
    for (int e = threadIdx.x; e < FB * hd; e += blockDim.x) {
        int r = e / hd, d = e % hd, row = r0 + r;
        dst[r * (hd + 1) + d] = row < T ? src[(size_t)row * ld + (size_t)head * hd + d] : 0.0f;
    }
}

__global__ void __launch_bounds__(256) fwd_f32_k(AttnArgs a) {
    DYN_SMEM(float, fsm);
    const int hd = a.hd, ld = hd + 1;
    float* Qs = fsm;
    float* Ks = Qs + FB * ld;
    float* Vs = Ks + FB * ld;
    float* Ps = Vs + FB * ld;                          // [FB][FB + 1]
    int* kps = reinterpret_cast<int*>(Ps + FB * (FB + 1));
    int* kds = kps + FB;
    const int tid = threadIdx.x, i = tid >> 3, jj = tid & 7;
    const int qt = a.nqt - 1 - blockIdx.x, h = blockIdx.y, g = h / a.grp, q0 = qt * FB;
    const int ldq = a.nh * hd, ldk = a.nkv * hd;
    const float* q = reinterpret_cast<const float*>(a.q);
    const float* k = reinterpret_cast<const float*>(a.k);
    const float* v = reinterpret_cast<const float*>(a.v);
    f32_rows(Qs, q, q0, a.Tq, ldq, h, hd);
    const int row = q0 + i;
    const int qp = row < a.Tq ? a.qpos[row] : INT_MAX;
    const int qd = row < a.Tq && a.docs ? a.qdoc[row] : 0;
    const int4 qm = a.qmm[qt];
    float o[16];
#pragma unroll
    for (int c = 0; c < 16; c++) o[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j < a.nkt; j++) {
        if (!tiles_meet(a, qm, a.kmm[j])) continue;   // block-uniform
        __syncthreads();
        f32_rows(Ks, k, j * FB, a.Tk, ldk, g, hd);
        f32_rows(Vs, v, j * FB, a.Tk, ldk, g, hd);
        if (tid < FB) {
            kps[tid] = j * FB + tid < a.Tk ? a.kpos[j * FB + tid] : INT_MAX;
            kds[tid] = j * FB + tid < a.Tk && a.docs ? a.kdoc[j * FB + tid] : 0;
        }
        __syncthreads();
        float sv[4], mx = -INFINITY;
#pragma unroll
        for (int r4 = 0; r4 < 4; r4++) {
            int jk = jj + 8 * r4;
            const float *qr = Qs + i * ld, *kr = Ks + jk * ld;
            float dot = 0.0f;
            for (int d = 0; d < hd; d++) dot += qr[d] * kr[d];
            float s = dot * a.scale;
            if (j * FB + jk >= a.Tk || (a.causal && kps[jk] > qp) || (a.docs && kds[jk] != qd)) s = -INFINITY;
            sv[r4] = s;
            mx = fmaxf(mx, s);
        }
        mx = grp8_max(mx);
        float mn = fmaxf(m, mx);
        float corr = mn == -INFINITY ? 1.0f : expf(m - mn), sum = 0.0f;
#pragma unroll
        for (int r4 = 0; r4 < 4; r4++) {
            float p = mn == -INFINITY ? 0.0f : expf(sv[r4] - mn);
            Ps[i * (FB + 1) + jj + 8 * r4] = p;
            sum += p;
        }
        sum = grp8_sum(sum);
        l = l * corr + sum;
        m = mn;
        __syncwarp();
#pragma unroll
        for (int c = 0; c < 16; c++) {
            int d = jj + 8 * c;
            if (d < hd) {
                float acc = o[c] * corr;
                for (int jk = 0; jk < FB; jk++) acc += Ps[i * (FB + 1) + jk] * Vs[jk * ld + d];
                o[c] = acc;
            }
        }
    }
    bool ok = row < a.Tq && m != -INFINITY;
    float lse_b = ok ? m + logf(l) : 0.0f, inv = ok ? 1.0f / l : 0.0f;
    float* orow = a.out + (size_t)(ok ? row : 0) * ldq + (size_t)h * hd;
    float* lp = a.lse + (size_t)(ok ? row : 0) * a.nh + h;
    float la = ok ? *lp : 0.0f, nl = 0.0f, w1 = 0.0f, w2 = 1.0f;
    if (ok) {
        if (la == -INFINITY) nl = lse_b;
        else {
            float mx = fmaxf(la, lse_b);
            nl = mx + log1pf(expf(-fabsf(la - lse_b)));
            w1 = expf(la - nl); w2 = expf(lse_b - nl);
        }
    }
    __syncwarp();
    if (ok) {
        if (jj == 0) *lp = nl;
#pragma unroll
        for (int c = 0; c < 16; c++) {
            int d = jj + 8 * c;
            if (d < hd) {
                float ov = o[c] * inv;
                orow[d] = la == -INFINITY ? ov : orow[d] * w1 + ov * w2;
            }
        }
    }
}

__global__ void __launch_bounds__(256) dkdv_f32_k(AttnArgs a) {
    DYN_SMEM(float, fsm);
    const int hd = a.hd, ld = hd + 1;
    float* Ks = fsm;
    float* Vs = Ks + FB * ld;
    float* Qs = Vs + FB * ld;
    float* Os = Qs + FB * ld;
    float* Ps = Os + FB * ld;              // [key][query]
    float* Ss = Ps + FB * (FB + 1);        // dS^T [key][query]
    float* ls = Ss + FB * (FB + 1);
    float* Dsh = ls + FB;
    int* qps = reinterpret_cast<int*>(Dsh + FB);
    int* qds = qps + FB;
    const int tid = threadIdx.x, jr = tid >> 3, ii = tid & 7;
    const int kt = blockIdx.x, g = blockIdx.y, k0 = kt * FB;
    const int ldq = a.nh * hd, ldk = a.nkv * hd;
    const float* q = reinterpret_cast<const float*>(a.q);
    const float* dout = reinterpret_cast<const float*>(a.dout);
    f32_rows(Ks, reinterpret_cast<const float*>(a.k), k0, a.Tk, ldk, g, hd);
    f32_rows(Vs, reinterpret_cast<const float*>(a.v), k0, a.Tk, ldk, g, hd);
    const int key = k0 + jr;
    const int kp = key < a.Tk ? a.kpos[key] : INT_MAX;
    const int kd = key < a.Tk && a.docs ? a.kdoc[key] : 0;
    const int4 km = a.kmm[kt];
    float dk[16], dv[16];
#pragma unroll
    for (int c = 0; c < 16; c++) dk[c] = dv[c] = 0.0f;
    bool any = false;
    for (int hh = 0; hh < a.grp; hh++) {
        int h = g * a.grp + hh;
        for (int qt = 0; qt < a.nqt; qt++) {
            if (!tiles_meet(a, a.qmm[qt], km)) continue;   // block-uniform
            any = true;
            int q0 = qt * FB;
            __syncthreads();
            f32_rows(Qs, q, q0, a.Tq, ldq, h, hd);
            f32_rows(Os, dout, q0, a.Tq, ldq, h, hd);
            if (tid < FB) {
                int row = q0 + tid;
                float L = INFINITY, Dv = 0.0f;
                int p = INT_MIN, d = 0;
                if (row < a.Tq) {
                    float x = a.lse_in[(size_t)row * a.nh + h];
                    L = x == -INFINITY ? INFINITY : x;
                    Dv = a.D[(size_t)row * a.nh + h];
                    p = a.qpos[row];
                    if (a.docs) d = a.qdoc[row];
                }
                ls[tid] = L; Dsh[tid] = Dv; qps[tid] = p; qds[tid] = d;
            }
            __syncthreads();
#pragma unroll
            for (int r4 = 0; r4 < 4; r4++) {
                int qi = ii + 8 * r4;
                const float *kr = Ks + jr * ld, *vr = Vs + jr * ld, *qr = Qs + qi * ld, *orr = Os + qi * ld;
                float sdot = 0.0f, pdot = 0.0f;
                for (int d = 0; d < hd; d++) { sdot += kr[d] * qr[d]; pdot += vr[d] * orr[d]; }
                float p = expf(sdot * a.scale - ls[qi]);
                if ((a.causal && kp > qps[qi]) || (a.docs && kd != qds[qi])) p = 0.0f;
                Ps[jr * (FB + 1) + qi] = p;
                Ss[jr * (FB + 1) + qi] = p * (pdot - Dsh[qi]);
            }
            __syncwarp();
#pragma unroll
            for (int c = 0; c < 16; c++) {
                int d = ii + 8 * c;
                if (d < hd) {
                    float av = dv[c], ak = dk[c];
                    for (int qi = 0; qi < FB; qi++) {
                        av += Ps[jr * (FB + 1) + qi] * Os[qi * ld + d];
                        ak += Ss[jr * (FB + 1) + qi] * Qs[qi * ld + d];
                    }
                    dv[c] = av; dk[c] = ak;
                }
            }
        }
    }
    if (!any || key >= a.Tk) return;
    float* dkr = a.dk + (size_t)key * ldk + (size_t)g * hd;
    float* dvr = a.dv + (size_t)key * ldk + (size_t)g * hd;
#pragma unroll
    for (int c = 0; c < 16; c++) {
        int d = ii + 8 * c;
        if (d < hd) { dkr[d] += a.scale * dk[c]; dvr[d] += dv[c]; }
    }
}

__global__ void __launch_bounds__(256) dq_f32_k(AttnArgs a) {
    DYN_SMEM(float, fsm);
    const int hd = a.hd, ld = hd + 1;
    float* Qs = fsm;
    float* Os = Qs + FB * ld;
    float* Ks = Os + FB * ld;
    float* Vs = Ks + FB * ld;
    float* Ss = Vs + FB * ld;              // dS [query][key]
    int* kps = reinterpret_cast<int*>(Ss + FB * (FB + 1));
    int* kds = kps + FB;
    const int tid = threadIdx.x, i = tid >> 3, jj = tid & 7;
    const int qt = a.nqt - 1 - blockIdx.x, h = blockIdx.y, g = h / a.grp, q0 = qt * FB;
    const int ldq = a.nh * hd, ldk = a.nkv * hd;
    f32_rows(Qs, reinterpret_cast<const float*>(a.q), q0, a.Tq, ldq, h, hd);
    f32_rows(Os, reinterpret_cast<const float*>(a.dout), q0, a.Tq, ldq, h, hd);
    const int row = q0 + i;
    float L = INFINITY, Dr = 0.0f;
    int qp = INT_MIN, qd = 0;
    if (row < a.Tq) {
        float x = a.lse_in[(size_t)row * a.nh + h];
        L = x == -INFINITY ? INFINITY : x;
        Dr = a.D[(size_t)row * a.nh + h];
        qp = a.qpos[row];
        if (a.docs) qd = a.qdoc[row];
    }
    const int4 qm = a.qmm[qt];
    float dq[16];
#pragma unroll
    for (int c = 0; c < 16; c++) dq[c] = 0.0f;
    bool any = false;
    for (int j = 0; j < a.nkt; j++) {
        if (!tiles_meet(a, qm, a.kmm[j])) continue;   // block-uniform
        any = true;
        __syncthreads();
        f32_rows(Ks, reinterpret_cast<const float*>(a.k), j * FB, a.Tk, ldk, g, hd);
        f32_rows(Vs, reinterpret_cast<const float*>(a.v), j * FB, a.Tk, ldk, g, hd);
        if (tid < FB) {
            kps[tid] = j * FB + tid < a.Tk ? a.kpos[j * FB + tid] : INT_MAX;
            kds[tid] = j * FB + tid < a.Tk && a.docs ? a.kdoc[j * FB + tid] : 0;
        }
        __syncthreads();
#pragma unroll
        for (int r4 = 0; r4 < 4; r4++) {
            int jk = jj + 8 * r4;
            const float *qr = Qs + i * ld, *orr = Os + i * ld, *kr = Ks + jk * ld, *vr = Vs + jk * ld;
            float sdot = 0.0f, pdot = 0.0f;
            for (int d = 0; d < hd; d++) { sdot += qr[d] * kr[d]; pdot += orr[d] * vr[d]; }
            float p = expf(sdot * a.scale - L);
            if (j * FB + jk >= a.Tk || (a.causal && kps[jk] > qp) || (a.docs && kds[jk] != qd)) p = 0.0f;
            Ss[i * (FB + 1) + jk] = p * (pdot - Dr);
        }
        __syncwarp();
#pragma unroll
        for (int c = 0; c < 16; c++) {
            int d = jj + 8 * c;
            if (d < hd) {
                float acc = dq[c];
                for (int jk = 0; jk < FB; jk++) acc += Ss[i * (FB + 1) + jk] * Ks[jk * ld + d];
                dq[c] = acc;
            }
        }
    }
    if (!any || row >= a.Tq) return;
    float* dqr = a.dq + (size_t)row * ldq + (size_t)h * hd;
#pragma unroll
    for (int c = 0; c < 16; c++) {
        int d = jj + 8 * c;
        if (d < hd) dqr[d] += a.scale * dq[c];
    }
}

// ---------------------------------------------------------------------------------------------------------
// host side

static int g_attr_done = 0;

template <typename K> static void set_smem(K kern, size_t bytes, const char* what) {
    CU_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), what);
}

static void check_shape(const char* op, int nh, int nkv, int hd) {
    if (hd <= 0 || hd > 128) cu_die(op, "head_dim %d: the CUDA attention kernels support head_dim 1..128", hd);
    if (nkv <= 0 || nh <= 0 || nh % nkv) cu_die(op, "nh = %d is not a multiple of nkv = %d", nh, nkv);
    if (nh > 65535) cu_die(op, "nh = %d heads exceed the grid limit", nh);
}

// The forward's key tile at head_dim 64, chosen for the device at start-up: the largest whose shared memory lets two
// blocks share an SM (H100/H200: 128 keys; A100: 64), else the largest that fits one block (A40, L40S: 128); at
// head_dim 128, 32 keys. (cuda_attn_config: the choice, for tests and reports.)
static int g_fwd_bn[2] = { 128, 32 };
template <int HD, int BN> static int fwd_fits(size_t per_block, size_t per_sm, int blocks) {
    return fwd_smem<HD, BN>() <= per_block && blocks * (fwd_smem<HD, BN>() + 1024) <= per_sm;
}
static void choose_tiles(void) {
    size_t pb = cu_smem_optin(), ps = cu_smem_per_sm();
    g_fwd_bn[0] = fwd_fits<64, 128>(pb, ps, 2) ? 128 : fwd_fits<64, 64>(pb, ps, 2) ? 64 : 128;
    if (!fwd_fits<64, 128>(pb, ps, 1)) g_fwd_bn[0] = 64;
    g_fwd_bn[1] = 32;   // (64 keys at head_dim 128 take 128 + 64 accumulators per thread: ptxas spills 44 bytes)
}
extern "C" void cuda_attn_config(int* fwd_bn64, int* fwd_bn128) { *fwd_bn64 = g_fwd_bn[0]; *fwd_bn128 = g_fwd_bn[1]; }

void attn_init(int max_hd) {
    if (max_hd > 128) cu_die("attn_init", "head_dim %d: the CUDA attention kernels support head_dim up to 128", max_hd);
    if (g_attr_done || !cuda_backend_started()) return;
    choose_tiles();
    if (g_fwd_bn[0] == 128) set_smem(fwd_bf16_k<64, 128>, fwd_smem<64, 128>(), "attn_init (fwd 64)");
    else set_smem(fwd_bf16_k<64, 64>, fwd_smem<64, 64>(), "attn_init (fwd 64)");
    set_smem(fwd_bf16_k<128, 32>, fwd_smem<128, 32>(), "attn_init (fwd 128)");
    set_smem(dkdv_bf16_k<64>, bwd_smem<64>(), "attn_init (bwd 64)");
    set_smem(dkdv_bf16_k<128>, bwd_smem<128>(), "attn_init (bwd 128)");
    set_smem(fwd_f32_k, f32_fwd_smem(128), "attn_init (fwd fp32)");
    set_smem(dkdv_f32_k, f32_dkdv_smem(128), "attn_init (dkdv fp32)");
    set_smem(dq_f32_k, f32_dq_smem(128), "attn_init (dq fp32)");
    g_attr_done = 1;
}

static void ensure_init(void) {
    if (!g_attr_done) attn_init(128);
    if (!g_attr_done) cu_die("attention", "called before be_init");
}

static unsigned grid_n(size_t n) {
    size_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

// per-tile (min, max) of positions and of document ids (doc may be NULL) for tiles of `tile` rows
static void minmax(int4* dst, const int* pos, const int* doc, int T, int tile) {
    int nt = (T + tile - 1) / tile;
    TRAFFIC(4.0 * T * (doc ? 2 : 1), 16.0 * nt);
    LAUNCH(minmax_k, (nt + 7) / 8, 256, 0, dst, pos, doc, T, tile, nt);
    CU_LAUNCHED("attention (tile positions)");
}

// bf16 [H][T][HDP] copy of a [T][H * hd] fp32 matrix in scratch slot `slot`
static const bf16* to_bf16(int slot, const float* src, int T, int H, int hd, int HDP) {
    bf16* dst = (bf16*)cu_workspace(slot, (size_t)H * T * HDP * sizeof(bf16));
    TRAFFIC(4.0 * T * H * hd, 2.0 * H * T * HDP);
    LAUNCH(to_bf16_k, grid_n((size_t)H * T * HDP / 2), 256, 0, (__nv_bfloat162*)dst, src, T, H, hd, HDP);
    CU_LAUNCHED("attention (bf16 conversion)");
    return dst;
}

void attn_forward_begin(float* out, float* lse, int Tq, int nh, int hd) {
    PROF(PROF_ATTN_FWD);
    if (Tq <= 0) return;
    TRAFFIC(0, 4.0 * Tq * nh * hd);
    LAUNCH(fill_k, grid_n((size_t)Tq * nh * hd), 256, 0, out, (size_t)Tq * nh * hd, 0.0f);
    TRAFFIC(0, 4.0 * Tq * nh);
    LAUNCH(fill_k, grid_n((size_t)Tq * nh), 256, 0, lse, (size_t)Tq * nh, -INFINITY);
    CU_LAUNCHED("attn_forward_begin");
}

void attn_backward_begin(float* D, const float* dout, const float* out, int Tq, int nh, int hd) {
    PROF(PROF_ATTN_BWD);
    long n = (long)Tq * nh;
    if (n <= 0) return;
    TRAFFIC(8.0 * n * hd, 4.0 * n);
    LAUNCH(bwd_begin_k, (unsigned)((n + 7) / 8), 256, 0, D, dout, out, n, hd);
    CU_LAUNCHED("attn_backward_begin");
}

void attn_merge(float* o1, float* lse1, const float* o2, const float* lse2, int Tq, int nh, int hd) {
    PROF(PROF_ATTN_FWD);
    long n = (long)Tq * nh;
    if (n <= 0) return;
    TRAFFIC(8.0 * n * (hd + 1), 4.0 * n * (hd + 1));
    LAUNCH(merge_k, (unsigned)((n + 255) / 256), 256, 0, o1, lse1, o2, lse2, n, hd);
    CU_LAUNCHED("attn_merge");
}

static AttnArgs base_args(int Tq, int Tk, int nh, int nkv, int hd, float scale, int mask) {
    AttnArgs a;
    memset(&a, 0, sizeof a);
    a.Tq = Tq; a.Tk = Tk; a.nh = nh; a.nkv = nkv; a.hd = hd; a.grp = nh / nkv;
    a.scale = scale; a.scale_log2 = scale * LOG2E_F;
    a.causal = mask == ATTN_MASK_CAUSAL;
    a.hsplit = 1;
    return a;
}

// ---- per-block statistics of the bf16 kernels (cuda_attn_stats; kind 0 forward, 1 backward): the last launch of each ----
static int g_stats_on = 0;
static int g_stats_blocks[2];
static int* stats_for(int kind, unsigned blocks) {
    if (!g_stats_on) return NULL;
    g_stats_blocks[kind] = (int)blocks;
    return (int*)cu_workspace(WS_ATT_ST_FWD + kind, (size_t)blocks * 2 * sizeof(int));
}
extern "C" void cuda_attn_stats_enable(int on) { g_stats_on = on; }
extern "C" int cuda_attn_stats(int kind, int* out, int cap) {
    if (!g_stats_on || kind < 0 || kind > 1) return 0;
    int n = g_stats_blocks[kind] < cap ? g_stats_blocks[kind] : cap;
    if (n > 0) be_download(out, cu_workspace(WS_ATT_ST_FWD + kind, (size_t)g_stats_blocks[kind] * 2 * sizeof(int)), (size_t)n * 2 * sizeof(int));
    return g_stats_blocks[kind];
}

// document ids: used only when both sides have them
static void set_docs(AttnArgs* a, const int* qdoc, const int* kdoc) {
    a->docs = qdoc && kdoc;
    a->qdoc = a->docs ? qdoc : NULL;
    a->kdoc = a->docs ? kdoc : NULL;
}

// The step anatomy's declaration of an attention kernel (cu_common.h): at most every input once (key tiles no query
// sees are skipped) and its outputs read and written; rb = bytes of one row of one head of q, k, v, dout as the
// kernel reads them (bf16 copies padded to HDP, or fp32). which: 0 forward, 1 dK/dV, 2 dQ (fp32), 3 the bf16 backward.
static void attn_traffic(const AttnArgs& a, double rb, int which) {
    double q = rb * a.Tq * a.nh, kv = rb * a.Tk * a.nkv, rows = 4.0 * a.Tq * a.nh;
    double idx = 4.0 * (a.Tq + a.Tk) * (a.docs ? 2 : 1) + 16.0 * (a.nqt + a.nkt);
    double o = rows * a.hd, dkv = 8.0 * a.Tk * a.nkv * a.hd;
    if (which == 0) TRAFFIC_ATTN(q + 2 * kv + o + rows + idx, o + rows);
    else if (which == 1) TRAFFIC_ATTN(2 * q + 2 * kv + 2 * rows + idx + dkv * a.hsplit, dkv * a.hsplit);   // (hsplit > 1: the partials)
    else if (which == 2) TRAFFIC_ATTN(2 * q + 2 * kv + 2 * rows + idx + o, o);
    else {   // the bf16 backward (dK, dV and dQ in one pass): dq read and written by its ordered adds, the flags, the ticket
        double fl = 4.0 * a.nh * a.nqt + 4;
        TRAFFIC_ATTN(2 * q + 2 * kv + 2 * rows + idx + dkv * a.hsplit + o + fl, dkv * a.hsplit + o + fl);
    }
}

template <int HD, int BN>
static void forward_bf16(AttnArgs a, const float* q, const float* k, const float* v) {
    constexpr int BM = FBM;
    a.q = to_bf16(WS_ATT_Q, q, a.Tq, a.nh, a.hd, HD);
    a.k = to_bf16(WS_ATT_K, k, a.Tk, a.nkv, a.hd, HD);
    a.v = to_bf16(WS_ATT_V, v, a.Tk, a.nkv, a.hd, HD);
    a.nqt = (a.Tq + BM - 1) / BM;
    a.nkt = (a.Tk + BN - 1) / BN;
    int4* mm = (int4*)cu_workspace(WS_ATT_MM, (size_t)(a.nqt + a.nkt) * sizeof(int4));
    minmax(mm, a.qpos, a.qdoc, a.Tq, BM);
    minmax(mm + a.nqt, a.kpos, a.kdoc, a.Tk, BN);
    a.qmm = mm; a.kmm = mm + a.nqt;
    a.stats = stats_for(0, (unsigned)a.nqt * a.nh);
    attn_traffic(a, 2.0 * HD, 0);
    cu_anat_attn_kernel(0, HD, BN, a.Tq, a.Tk, a.nh, a.causal);
    LAUNCH((fwd_bf16_k<HD, BN>), dim3(a.nqt, a.nh), NWARP * 32, (fwd_smem<HD, BN>()), a);
    CU_LAUNCHED("attn_block_forward");
}

void own_block_forward(float* out, float* lse,
                        const float* q, const int* qpos, const int* qdoc, int Tq,
                        const float* k, const float* v, const int* kpos, const int* kdoc, int Tk,
                        int nh, int nkv, int hd, float scale, int mask) {
    PROF(PROF_ATTN_FWD);
    if (Tq <= 0 || Tk <= 0) return;
    ensure_init();
    check_shape("attn_block_forward", nh, nkv, hd);
    cu_anat_attention(0, Tq, Tk, nh, hd, mask == ATTN_MASK_CAUSAL, cu_precision() == CU_FP32);
    AttnArgs a = base_args(Tq, Tk, nh, nkv, hd, scale, mask);
    a.out = out; a.lse = lse; a.qpos = qpos; a.kpos = kpos;
    set_docs(&a, qdoc, kdoc);
    if (cu_precision() == CU_FP32) {
        a.q = q; a.k = k; a.v = v;
        a.nqt = (Tq + FB - 1) / FB;
        a.nkt = (Tk + FB - 1) / FB;
        int4* mm = (int4*)cu_workspace(WS_ATT_MM, (size_t)(a.nqt + a.nkt) * sizeof(int4));
        minmax(mm, qpos, a.qdoc, Tq, FB);
        minmax(mm + a.nqt, kpos, a.kdoc, Tk, FB);
        a.qmm = mm; a.kmm = mm + a.nqt;
        attn_traffic(a, 4.0 * hd, 0);
        LAUNCH(fwd_f32_k, dim3(a.nqt, nh), 256, f32_fwd_smem(hd), a);
        CU_LAUNCHED("attn_block_forward (fp32)");
        return;
    }
    if (hd <= 64) { if (g_fwd_bn[0] == 128) forward_bf16<64, 128>(a, q, k, v); else forward_bf16<64, 64>(a, q, k, v); }
    else forward_bf16<128, 32>(a, q, k, v);
}

template <int HD>
static void backward_bf16(AttnArgs a, const float* q, const float* k, const float* v, const float* dout) {
    constexpr int BNK = NWARP * BwdCfg<HD>::KR;
    a.q = to_bf16(WS_ATT_Q, q, a.Tq, a.nh, a.hd, HD);
    a.dout = to_bf16(WS_ATT_DO, dout, a.Tq, a.nh, a.hd, HD);
    a.k = to_bf16(WS_ATT_K, k, a.Tk, a.nkv, a.hd, HD);
    a.v = to_bf16(WS_ATT_V, v, a.Tk, a.nkv, a.hd, HD);
    a.nqt = (a.Tq + BQ - 1) / BQ;
    a.nkt = (a.Tk + BNK - 1) / BNK;
    int4* mm = (int4*)cu_workspace(WS_ATT_MM, (size_t)(a.nqt + a.nkt) * sizeof(int4));
    minmax(mm, a.qpos, a.qdoc, a.Tq, BQ);
    minmax(mm + a.nqt, a.kpos, a.kdoc, a.Tk, BNK);
    a.qmm = mm; a.kmm = mm + a.nqt;
    // Too few (key tile, KV head) blocks to fill the device (short blocks, few KV heads): split each group of query
    // heads over hsplit blocks (a divisor of grp), whose partial sums a second kernel adds in a fixed order. Otherwise
    // one block loops over the whole group and the longest block (the first key tile's, with every query tile of every
    // head of the group visible) is the causal tail.
    int want = 2 * cu_sm_count();
    while ((long)a.nkt * a.nkv * a.hsplit < want && a.hsplit < a.grp) {
        int next = a.hsplit + 1;
        while (a.grp % next) next++;
        a.hsplit = next;
    }
    size_t nkel = (size_t)a.Tk * a.nkv * a.hd, nflags = (size_t)a.nh * a.nqt;
    if (a.hsplit > 1) {
        a.part_k = (float*)cu_workspace(WS_ATT_PART, 2 * (size_t)a.hsplit * nkel * sizeof(float));
        a.part_v = a.part_k + (size_t)a.hsplit * nkel;
        CU_CHECK(cudaMemsetAsync(a.part_k, 0, 2 * (size_t)a.hsplit * nkel * sizeof(float), cu_stream()),
                 "attn_block_backward (dk, dv partials)");
        cu_anat_op("cudaMemsetAsync (dk, dv partials)", 0, 2.0 * a.hsplit * nkel * sizeof(float));
    }
    a.flags = (int*)cu_workspace(WS_ATT_FLAGS, (nflags + 1) * sizeof(int));   // the flags, then the ticket counter
    a.ticket = a.flags + nflags;
    CU_CHECK(cudaMemsetAsync(a.flags, 0, (nflags + 1) * sizeof(int), cu_stream()), "attn_block_backward (dq order flags, ticket)");
    cu_anat_op("cudaMemsetAsync (dq order flags, ticket)", 0, 4.0 * (nflags + 1));
    a.stats = stats_for(1, (unsigned)a.nkt * a.nkv * a.hsplit);
    attn_traffic(a, 2.0 * HD, 3);
    cu_anat_attn_kernel(1, HD, BNK, a.Tq, a.Tk, a.nh, a.causal);
    LAUNCH(dkdv_bf16_k<HD>, dim3(a.nkt, a.nkv * a.hsplit), NWARP * 32, bwd_smem<HD>(), a);
    CU_LAUNCHED("attn_block_backward (dk, dv, dq)");
    if (a.hsplit > 1) {
        TRAFFIC(8.0 * nkel * (a.hsplit + 1), 8.0 * nkel);
        LAUNCH(dkdv_sum_k, grid_n(nkel), 256, 0, a.dk, a.dv, (const float*)a.part_k, (const float*)a.part_v, nkel, a.hsplit);
        CU_LAUNCHED("attn_block_backward (dk, dv partials summed)");
    }
}

void own_block_backward(float* dq, float* dk, float* dv,
                         const float* dout, const float* q, const float* lse, const float* D,
                         const int* qpos, const int* qdoc, int Tq,
                         const float* k, const float* v, const int* kpos, const int* kdoc, int Tk,
                         int nh, int nkv, int hd, float scale, int mask) {
    PROF(PROF_ATTN_BWD);
    if (Tq <= 0 || Tk <= 0) return;
    ensure_init();
    check_shape("attn_block_backward", nh, nkv, hd);
    cu_anat_attention(1, Tq, Tk, nh, hd, mask == ATTN_MASK_CAUSAL, cu_precision() == CU_FP32);
    AttnArgs a = base_args(Tq, Tk, nh, nkv, hd, scale, mask);
    a.dq = dq; a.dk = dk; a.dv = dv; a.lse_in = lse; a.D = D; a.qpos = qpos; a.kpos = kpos;
    set_docs(&a, qdoc, kdoc);
    if (cu_precision() == CU_FP32) {
        a.q = q; a.k = k; a.v = v; a.dout = dout;
        a.nqt = (Tq + FB - 1) / FB;
        a.nkt = (Tk + FB - 1) / FB;
        int4* mm = (int4*)cu_workspace(WS_ATT_MM, (size_t)(a.nqt + a.nkt) * sizeof(int4));
        minmax(mm, qpos, a.qdoc, Tq, FB);
        minmax(mm + a.nqt, kpos, a.kdoc, Tk, FB);
        a.qmm = mm; a.kmm = mm + a.nqt;
        attn_traffic(a, 4.0 * hd, 1);
        LAUNCH(dkdv_f32_k, dim3(a.nkt, nkv), 256, f32_dkdv_smem(hd), a);
        CU_LAUNCHED("attn_block_backward (fp32 dk, dv)");
        attn_traffic(a, 4.0 * hd, 2);
        LAUNCH(dq_f32_k, dim3(a.nqt, nh), 256, f32_dq_smem(hd), a);
        CU_LAUNCHED("attn_block_backward (fp32 dq)");
        return;
    }
    if (hd <= 64) backward_bf16<64>(a, q, k, v, dout);
    else backward_bf16<128>(a, q, k, v, dout);
}
