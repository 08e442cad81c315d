// cuda_bf16.h (host emulation) — bf16 storage types and the round-to-nearest-even conversions the kernels use.
#pragma once
#include <stdint.h>
#include <string.h>
#ifdef __cplusplus
struct __nv_bfloat16 { uint16_t bits; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
inline uint16_t emu_f2bf(float f) {   // round to nearest even; NaN stays NaN
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
inline float emu_bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline __nv_bfloat16 __float2bfloat16(float a) { return __nv_bfloat16{ emu_f2bf(a) }; }
inline __nv_bfloat16 __float2bfloat16_rn(float a) { return __nv_bfloat16{ emu_f2bf(a) }; }
inline float __bfloat162float(__nv_bfloat16 a) { return emu_bf2f(a.bits); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{ { emu_f2bf(a) }, { emu_f2bf(b) } }; }
#endif
