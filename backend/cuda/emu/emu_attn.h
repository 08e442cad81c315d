// emu_attn.h — the host emulation of the few PTX instructions the attention kernels (backend/cuda/attn_cuda.cu)
// wrap beyond those of emu_device.h: the fast base-2 exponential of the softmax and the ordered fp32 accumulation of
// dQ (a global add, a flag read with acquire and written with release). Included by attn_cuda.cu in the emulated
// build only; kept apart from emu_device.h so that the kernels' own instructions stay with the kernels' owner.
//
// ex2.approx.ftz.f32 (PTX ISA): an approximation of 2^x, subnormal inputs and results flushed to zero (sign kept),
//   2^-inf = +0, 2^+inf = +inf, NaN in, NaN out. The emulation computes exp2f, flushes as the hardware does and
//   clears the two lowest mantissa bits (a relative error below 2^-21, the order of the hardware's documented bound),
//   so that no test can rely on the approximation being exact. The kernels' contract is stronger than the
//   instruction's: every argument is <= 0 up to the rounding of the scale folded into one FMA (a score minus its
//   row's running maximum or its LSE); an argument above 0.25 or a NaN means a wrong maximum or LSE, and ends the
//   process with one line naming the kernel, block and thread.
// red.global.add.f32: one thread of the emulation runs at a time, so the add is a plain read-modify-write.
// ld.acquire.gpu / st.release.gpu on a flag: blocks run one after another in launch order (ascending linear block
//   index), so a block that waits for a flag must find it already set by a block that ran before it. A flag not yet
//   set would mean that the block waits for a block launched after it, which on a GPU may never be resident while
//   the waiter spins (a deadlock): the emulation ends the process with one line instead of spinning.
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
inline void red_add_f32(float* p, float v) { *p += v; }
inline void flag_wait(const int* p, int want) {
    if (*p != want) {
        char msg[200];
        snprintf(msg, sizeof msg, "waits for flag %p = %d, which holds %d: the block it waits for runs later (on a GPU "
                 "a block may wait only for blocks launched before it)", (const void*)p, want, *p);
        emu::attn_fault(msg);
    }
}
inline void flag_set(int* p, int v) { *p = v; }
inline void __threadfence(void) {}
