// emu_attn.h — the host emulation of the few PTX instructions the attention kernels (backend/cuda/attn_cuda.cu)
// wrap beyond those of emu_device.h: the fast base-2 exponential of the softmax and the ordered fp32 accumulation of
// dQ (a block's ticket, a global add, a flag read with acquire and written with release). Included by attn_cuda.cu in the emulated
// build only; kept apart from emu_device.h so that the kernels' own instructions stay with the kernels' owner.
//
// ex2.approx.ftz.f32 (PTX ISA): an approximation of 2^x, subnormal inputs and results flushed to zero (sign kept),
//   2^-inf = +0, 2^+inf = +inf, NaN in, NaN out. The emulation computes exp2f, flushes as the hardware does and
//   clears the two lowest mantissa bits (a relative error below 2^-21, the order of the hardware's documented bound),
//   so that no test can rely on the approximation being exact. The kernels' contract is stronger than the
//   instruction's: every argument is <= 0 up to the rounding of the scale folded into one FMA (a score minus its
//   row's running maximum or its LSE); an argument above 0.25 or a NaN means a wrong maximum or LSE, and ends the
//   process with one line naming the kernel, block and thread.
// atomicAdd(counter, 1) of a ticket, red.global.add.f32: one thread of the emulation runs at a time, so each is a plain
//   read-modify-write, and tickets go out in the order the blocks run. A ticket at or past the grid's block count
//   (a counter not zeroed before the launch) ends the process with one line.
// ld.acquire.gpu / st.release.gpu on a flag: blocks run one after another, in a fixed order that is not their index
//   order (emu_runtime.cc, block_order: CUDA promises none), so a block that waits for a flag must find it already
//   set by a block that ran before it. A flag not yet set means that the block waits for one that has not started,
//   which on a GPU may never become resident while the waiter spins (a deadlock): the emulation ends the process
//   with one line instead of spinning. A block may wait only for blocks known to be running: ones with a lower ticket.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace emu {
[[noreturn]] void attn_fault(const char* what);   // emu_runtime.cc has the kernel/block/thread context
}

inline float ex2_ftz(float x) {
    if (std::isnan(x) || x > 0.25f) {
        char msg[160];
        snprintf(msg, sizeof msg, "ex2.approx.ftz with argument %g: the softmax's scores must lie at or below their "
                 "row's maximum (or its LSE)", (double)x);
        emu::attn_fault(msg);
    }
    if (std::fpclassify(x) == FP_SUBNORMAL) x = 0.0f;
    float r = exp2f(x);
    uint32_t u;
    memcpy(&u, &r, 4);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;          // subnormal result: flushed to zero
    else if ((u & 0x7f800000u) != 0x7f800000u) u &= ~3u;   // finite: two bits of approximation
    memcpy(&r, &u, 4);
    return r;
}
inline int ticket_take(int* p) {
    unsigned long n = (unsigned long)gridDim.x * gridDim.y * gridDim.z;
    if (*p < 0 || (unsigned long)*p >= n) {
        char msg[200];
        snprintf(msg, sizeof msg, "takes ticket %d of a grid of %lu blocks: the ticket counter %p was not zeroed before "
                 "the launch", *p, n, (const void*)p);
        emu::attn_fault(msg);
    }
    return (*p)++;
}
inline void red_add_f32(float* p, float v) { *p += v; }
inline void flag_wait(const int* p, int want) {
    if (*p != want) {
        char msg[240];
        snprintf(msg, sizeof msg, "waits for flag %p = %d, which holds %d: the block it waits for has not started (blocks "
                 "run in any order; a block may wait only for blocks known to be running: a lower ticket)",
                 (const void*)p, want, *p);
        emu::attn_fault(msg);
    }
}
inline void flag_set(int* p, int v) { *p = v; }
inline void __threadfence(void) {}
