// cu_emu.h — a host emulation of the CUDA features attn_cuda.cu uses, so that its kernels (the same source,
// compiled with g++ -DATTN_EMU) run without a GPU in tests/gpu/test_attn_emu.cc.
//
// A launch runs every thread of a block as an OS thread (blocks one after another); __syncthreads and
// __syncwarp are barriers of the block and of the warp. The warp-collective instructions follow the PTX ISA:
//   shfl.xor; ldmatrix.m8n8.x4(.trans).b16 (lanes 8i..8i+7 give the row addresses of matrix i; register i of
//   lane l holds matrix i's row l/4, columns 2(l%4), 2(l%4)+1 — transposed: rows 2(l%4), 2(l%4)+1 of column
//   l/4); mma.m16n8k16.row.col.f32.bf16.bf16.f32 (fragments: A reg r of lane l = row l/4 + 8(r&1), columns
//   2(l%4) + 8(r>>1) + {0,1}; B reg r = rows 2(l%4) + 8r + {0,1} of column l/4; C/D element e = row
//   l/4 + 8(e>>1), column 2(l%4) + (e&1)); cp.async.cg 16 bytes with src-size (zero fill) is deferred until
//   the cp.async.wait_group that covers its commit group, so a missing wait reads stale shared memory.
// Checked: every shared-memory access through these instructions lies inside the block's dynamic shared
// memory, aligned to 16 bytes; shared memory starts each block filled with 0xFF bytes (NaN).
// What it cannot show: timing, bank conflicts, real register limits, races that real hardware orders
// differently than the OS scheduler, and the hardware's accumulation order inside mma (here: fp32, k order).
#pragma once
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <math.h>

extern "C" {
#include "backend/attention.h"
}

using std::max;
using std::min;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define DYN_SMEM(type, name) type* name = reinterpret_cast<type*>(emu_smem())
#define LAUNCH(kernel, grid, block, smem, ...) emu_launch(kernel, dim3(grid), dim3(block), (smem), __VA_ARGS__)
#define CU_LAUNCHED(op) ((void)0)

struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct uint3 { unsigned x, y, z; };
struct int2 { int x, y; };
inline int2 make_int2(int a, int b) { return int2{ a, b }; }
struct alignas(16) int4 { int x, y, z, w; };
inline int4 make_int4(int a, int b, int c, int d) { return int4{ a, b, c, d }; }

inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

// ---- bf16 (round to nearest even) ----
struct bf16 { uint16_t bits; };
struct __nv_bfloat162 { bf16 x, y; };
inline uint16_t emu_f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);   // NaN stays NaN
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
inline float emu_bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{ { emu_f2bf(a) }, { emu_f2bf(b) } }; }

// ---- the backend pieces attn_cuda.cu calls ----
enum { CU_BF16 = 0, CU_TF32 = 1, CU_FP32 = 2 };
enum { WS_ATT_Q, WS_ATT_K, WS_ATT_V, WS_ATT_DO, WS_ATT_MM, WS_COUNT };
static int g_emu_prec = CU_BF16;
static inline int cu_precision(void) { return g_emu_prec; }
extern "C" void attn_emu_set_precision(int p) { g_emu_prec = p; }
static inline int cuda_backend_started(void) { return 1; }
[[noreturn]] static void cu_die(const char* op, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cuda backend (emulated): %s: ", op);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}
static void* g_emu_ws[WS_COUNT];
static size_t g_emu_ws_size[WS_COUNT];
static inline void* cu_workspace(int slot, size_t bytes) {
    if (bytes > g_emu_ws_size[slot]) {
        free(g_emu_ws[slot]);
        g_emu_ws[slot] = aligned_alloc(256, (bytes + 255) / 256 * 256);
        if (!g_emu_ws[slot]) cu_die("workspace", "out of memory");
        memset(g_emu_ws[slot], 0xFF, (bytes + 255) / 256 * 256);   // garbage, as on a GPU
        g_emu_ws_size[slot] = bytes;
    }
    return g_emu_ws[slot];
}

// ---- one launch ----
struct EmuWarp {
    uint64_t v[32];
    const unsigned char* addr[32];
    uint32_t a[32][4], b[32][2];
    float c[32][4];
};
struct EmuLaunch {
    unsigned char* smem;
    size_t smem_bytes;
    std::barrier<>* block;
    std::vector<std::barrier<>*> warp;
    std::vector<EmuWarp> wx;
};
static EmuLaunch* g_emu = nullptr;
inline thread_local int emu_lane, emu_warp;
struct EmuCopy { unsigned char* dst; const unsigned char* src; int bytes; };
inline thread_local std::vector<EmuCopy> emu_open;
inline thread_local std::vector<std::vector<EmuCopy>> emu_groups;

static inline unsigned char* emu_smem(void) { return g_emu->smem; }
static inline void emu_check_smem(const void* p, size_t n, const char* what) {
    const unsigned char* q = (const unsigned char*)p;
    if (q < g_emu->smem || q + n > g_emu->smem + g_emu->smem_bytes || ((uintptr_t)q & 15))
        cu_die(what, "shared-memory access at offset %td (%zu bytes) outside [0, %zu) or not 16-byte aligned",
               q - g_emu->smem, n, g_emu->smem_bytes);
}

static inline void __syncthreads(void) { g_emu->block->arrive_and_wait(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)mask; g_emu->warp[emu_warp]->arrive_and_wait(); }
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int o) {
    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    (void)mask;
    EmuWarp& x = g_emu->wx[emu_warp];
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    x.v[emu_lane] = u;
    __syncwarp();
    uint64_t r = x.v[emu_lane ^ o];
    __syncwarp();
    T out;
    memcpy(&out, &r, sizeof(T));
    return out;
}

typedef uintptr_t saddr_t;
static inline saddr_t smem_u32(const void* p) { return (saddr_t)p; }

static inline void cp_async16(saddr_t dst, const void* src, int src_bytes) {
    emu_check_smem((const void*)dst, 16, "cp.async");
    if (src_bytes != 0 && src_bytes != 16) cu_die("cp.async", "src-size %d", src_bytes);
    emu_open.push_back(EmuCopy{ (unsigned char*)dst, (const unsigned char*)src, src_bytes });
}
static inline void cp_commit(void) { emu_groups.push_back(emu_open); emu_open.clear(); }
template <int N> static inline void cp_wait(void) {
    while ((int)emu_groups.size() > N) {
        for (const EmuCopy& c : emu_groups.front()) {
            if (c.bytes) memcpy(c.dst, c.src, 16);
            else memset(c.dst, 0, 16);
        }
        emu_groups.erase(emu_groups.begin());
    }
}

static inline void emu_ldsm(uint32_t (&r)[4], saddr_t addr, bool trans) {
    EmuWarp& x = g_emu->wx[emu_warp];
    emu_check_smem((const void*)addr, 16, "ldmatrix");
    x.addr[emu_lane] = (const unsigned char*)addr;
    __syncwarp();
    int l = emu_lane;
    for (int i = 0; i < 4; i++) {
        uint16_t lo, hi;
        if (!trans) {
            const uint16_t* row = (const uint16_t*)x.addr[8 * i + l / 4];
            lo = row[2 * (l % 4)]; hi = row[2 * (l % 4) + 1];
        } else {
            const uint16_t* r0 = (const uint16_t*)x.addr[8 * i + 2 * (l % 4)];
            const uint16_t* r1 = (const uint16_t*)x.addr[8 * i + 2 * (l % 4) + 1];
            lo = r0[l / 4]; hi = r1[l / 4];
        }
        r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
    __syncwarp();
}
static inline void ldsm_x4(uint32_t (&r)[4], saddr_t addr) { emu_ldsm(r, addr, false); }
static inline void ldsm_x4_t(uint32_t (&r)[4], saddr_t addr) { emu_ldsm(r, addr, true); }

static inline float emu_half(uint32_t reg, int hi) { return emu_bf2f((uint16_t)(hi ? reg >> 16 : reg & 0xffffu)); }
static inline void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    EmuWarp& x = g_emu->wx[emu_warp];
    int l = emu_lane;
    for (int i = 0; i < 4; i++) { x.a[l][i] = a[i]; x.c[l][i] = d[i]; }
    x.b[l][0] = b0; x.b[l][1] = b1;
    __syncwarp();
    int g = l >> 2, t = l & 3;
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float acc = x.c[l][e];
        for (int k = 0; k < 16; k++) {
            int al = (row % 8) * 4 + (k % 8) / 2, areg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
            int bl = col * 4 + (k % 8) / 2, breg = k >= 8 ? 1 : 0;
            acc += emu_half(x.a[al][areg], k & 1) * emu_half(x.b[bl][breg], k & 1);
        }
        d[e] = acc;
    }
    __syncwarp();
}
static inline uint32_t pack_bf16(float lo, float hi) { return (uint32_t)emu_f2bf(lo) | ((uint32_t)emu_f2bf(hi) << 16); }

template <class K, class... A>
static void emu_launch(K kernel, dim3 grid, dim3 block, size_t smem, A... args) {
    int nt = (int)(block.x * block.y * block.z);
    if (nt % 32 || block.y != 1 || block.z != 1 || grid.z != 1) cu_die("emu_launch", "unsupported launch shape");
    EmuLaunch L;
    L.smem_bytes = smem ? smem : 16;
    L.smem = (unsigned char*)aligned_alloc(128, (L.smem_bytes + 127) / 128 * 128);
    std::barrier<> bb(nt);
    L.block = &bb;
    std::vector<std::barrier<>*> ws;
    for (int w = 0; w < nt / 32; w++) L.warp.push_back(new std::barrier<>(32));
    L.wx.resize(nt / 32);
    EmuLaunch* prev = g_emu;
    g_emu = &L;
    std::vector<std::thread> th;
    for (int t = 0; t < nt; t++)
        th.emplace_back([&, t]() {
            threadIdx = uint3{ (unsigned)t, 0, 0 };
            blockDim = block; gridDim = grid;
            emu_lane = t & 31; emu_warp = t >> 5;
            for (unsigned by = 0; by < grid.y; by++)
                for (unsigned bx = 0; bx < grid.x; bx++) {
                    blockIdx = uint3{ bx, by, 0 };
                    if (t == 0) memset(L.smem, 0xFF, L.smem_bytes);
                    L.block->arrive_and_wait();
                    kernel(args...);
                    emu_open.clear();
                    emu_groups.clear();
                    L.block->arrive_and_wait();
                }
        });
    for (auto& x : th) x.join();
    g_emu = prev;
    for (auto* b : L.warp) delete b;
    free(L.smem);
}
