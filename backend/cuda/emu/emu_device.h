// emu_device.h — the device side of the host emulation of CUDA (C++ only; included by the emulated
// cuda_runtime.h): what a kernel's own source uses — thread and block indices, __syncthreads / __syncwarp,
// warp shuffles, the PTX instructions the attention kernels wrap (ldmatrix, mma.sync m16n8k16 bf16, cp.async
// with commit/wait groups), shared memory (SHARED, DYN_SMEM) and the launch (emu_launch, through the LAUNCH
// macros of backend/cuda/cu_common.h).
//
// Execution (backend/cuda/emu/emu_runtime.cc): every CUDA thread of a block is a fiber with its own stack on one
// OS thread; blocks run one after another; a fiber runs until it reaches a barrier (or ends), then the next
// one runs. Warp collectives are barriers of the warp's lanes that are still running; __syncthreads waits for
// every thread of the block that has not exited. Even-numbered blocks run their threads in ascending order,
// odd ones in descending order, so a missing barrier shows up as stale shared memory in one order or the other.
// Strict where the hardware is: launch limits (threads per block, grid size, dynamic shared memory beyond 48 KiB
// without the opt-in attribute, static + dynamic beyond the device's opt-in maximum), shared-memory bounds (a
// guard page after each shared region; accesses through ldmatrix / cp.async are also checked for bounds and
// 16-byte alignment), shared memory that starts each block as NaN bytes, lanes that meet at different warp
// collectives, a shuffle that reads a lane which has exited, mma.sync without all 32 lanes, a deadlock of the
// block's barriers. Each violation ends the process with one line naming the kernel, block and thread.
// The fragment layouts of ldmatrix and mma follow the PTX ISA (see the comments of the functions below).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

using std::max;
using std::min;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// a static __shared__ variable cannot be emulated: kernels declare them with SHARED(type, name, dims)
#define __shared__ __shared___is_not_emulated__declare_shared_memory_with_SHARED

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint3 { unsigned x, y, z; };
struct int2 { int x, y; };
inline int2 make_int2(int a, int b) { return int2{ a, b }; }
struct alignas(16) int4 { int x, y, z, w; };
inline int4 make_int4(int a, int b, int c, int d) { return int4{ a, b, c, d }; }
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return float4{ a, b, c, d }; }

// the running thread's indices (set by the scheduler before it resumes a fiber)
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

namespace emu {
enum { K_SYNCWARP = 1, K_SHFL, K_LDMATRIX, K_MMA, K_LDMATRIX_T, K_BALLOT };
int lane(void);
void block_barrier(void);
// the calling lane arrives at a collective of `kind` over the lanes in mask; returns once every lane of mask
// that is still running has arrived. Returns the mask of the lanes that took part.
unsigned warp_barrier(unsigned mask, int kind);
uint64_t shfl(unsigned mask, uint64_t v, int src_lane);
unsigned ballot(unsigned mask, int pred);   // the lanes of mask (still running) whose pred is non-zero
void ldmatrix(uint32_t (&r)[4], uintptr_t addr, bool trans);
void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
unsigned char* dyn_smem(void);
void* static_smem(const void* key, size_t bytes, size_t align);
void check_smem(const void* p, size_t n, const char* what);
void cp_async16(uintptr_t dst, const void* src, int src_bytes);
void cp_commit(void);
void cp_wait(int n);

// ---- launches ----
// what the runtime is told of each kernel argument: its bytes, and whether it is a pointer (to const or not)
struct Arg { const void* p; size_t bytes; int ptr; };   // ptr: 0 not a pointer, 1 pointer to const, 2 pointer
typedef void (*Runner)(const void* fn, void* args);
void launch(const char* name, const void* fn, dim3 grid, dim3 block, size_t smem, void* stream, const Arg* args, int nargs,
            Runner run, void* tuple);

template <class F, class Tup, size_t... I> inline void apply_(F f, Tup& t, std::index_sequence<I...>) { f(std::get<I>(t)...); }
template <class Tup, size_t... I> inline void describe_(Arg* out, Tup& t, std::index_sequence<I...>) {
    ((out[I] = Arg{ &std::get<I>(t), sizeof(std::get<I>(t)),
                    std::is_pointer_v<std::tuple_element_t<I, Tup>>
                        ? (std::is_const_v<std::remove_pointer_t<std::tuple_element_t<I, Tup>>> ? 1 : 2) : 0 }), ...);
}
}   // namespace emu

// kernel<<<grid, block, smem, stream>>>(args...): the arguments converted to the kernel's parameter types (as the
// CUDA compiler does), each thread calls the kernel with its own copy of them
template <class... P, class... A>
void emu_launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, void* stream, A&&... a) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    typedef std::tuple<std::decay_t<P>...> Tup;
    Tup args(static_cast<std::decay_t<P>>(std::forward<A>(a))...);
    emu::Arg info[sizeof...(P) + 1];
    emu::describe_(info, args, std::index_sequence_for<P...>{});
    emu::Runner run = [](const void* fn, void* t) {
        Tup copy = *static_cast<Tup*>(t);   // each thread's own parameters
        emu::apply_(reinterpret_cast<void (*)(P...)>(const_cast<void*>(fn)), copy, std::index_sequence_for<P...>{});
    };
    emu::launch(name, reinterpret_cast<const void*>(kernel), grid, block, smem, stream, info, (int)sizeof...(P), run, &args);
}

// ---- shared memory ----
// SHARED(float, sh, [8][33]) declares a block's static shared array (nvcc: __shared__ float sh[8][33])
#define SHARED(type, name, dims)                                                                    \
    typedef type name##_emu_t dims;                                                                 \
    static const char name##_emu_key = 0;                                                           \
    name##_emu_t& name = *reinterpret_cast<name##_emu_t*>(                                          \
        emu::static_smem(&name##_emu_key, sizeof(name##_emu_t), alignof(name##_emu_t)))
#define DYN_SMEM(type, name) type* name = reinterpret_cast<type*>(emu::dyn_smem())

// ---- synchronisation and warp collectives ----
inline void __syncthreads(void) { emu::block_barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_barrier(mask, emu::K_SYNCWARP); }
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
    static_assert(sizeof(T) <= 8, "a shuffle of at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    u = emu::shfl(mask, u, emu::lane() ^ (lane_mask & 31));
    T out;
    memcpy(&out, &u, sizeof(T));
    return out;
}
inline unsigned __ballot_sync(unsigned mask, int pred) { return emu::ballot(mask, pred); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
template <class T> inline T __shfl_sync(unsigned mask, T v, int src) {
    static_assert(sizeof(T) <= 8, "a shuffle of at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    u = emu::shfl(mask, u, src & 31);
    T out;
    memcpy(&out, &u, sizeof(T));
    return out;
}

// ---- the PTX wrappers of attn_cuda.cu ----
typedef uintptr_t saddr_t;   // a shared-memory address (here: the host address)
inline saddr_t smem_u32(const void* p) { return (saddr_t)p; }
inline void cp_async16(saddr_t dst, const void* src, int src_bytes) { emu::cp_async16(dst, src, src_bytes); }
inline void cp_commit(void) { emu::cp_commit(); }
template <int N> inline void cp_wait(void) { emu::cp_wait(N); }
inline void ldsm_x4(uint32_t (&r)[4], saddr_t addr) { emu::ldmatrix(r, addr, false); }
inline void ldsm_x4_t(uint32_t (&r)[4], saddr_t addr) { emu::ldmatrix(r, addr, true); }
inline void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { emu::mma16816(d, a, b0, b1); }
