#ifndef EARMARK_CHALFGEMM_DISPATCH_H
#define EARMARK_CHALFGEMM_DISPATCH_H
#include <stdint.h>
#include <string.h>

// Whether the CPU and OS run AVX2, FMA and F16C code (the library's fast paths).
int earmark_has_avx2_fma_f16c(void);

// The binary16 bit pattern h as a Float32 (exact).
static inline float half_value(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu, bits;
    float f;
    if (exponent == 0) {
        // Zero or subnormal: mantissa · 2⁻²⁴, exact in Float32.
        f = (float)mantissa * 5.9604644775390625e-8f;
        memcpy(&bits, &f, sizeof bits);
        bits |= sign;
    } else if (exponent == 31) {
        bits = sign | 0x7F800000u | (mantissa << 13);   // infinity or NaN
    } else {
        bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}

// f rounded to the nearest binary16 value (ties to even), magnitudes of 65504 and more (infinities too) to ±65504,
// the largest finite one; a NaN gives a NaN. The same bits as F16C's conversion of f clamped to ±65504.
static inline uint16_t half_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, magnitude = x & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);
    if (magnitude >= 0x477FE000u) return (uint16_t)(sign | 0x7BFFu);   // 65504 and up
    uint32_t exponent = magnitude >> 23, h, rest, tie;
    if (magnitude >= 0x38800000u) {   // 2⁻¹⁴ and up: a normal binary16 value
        h = ((exponent - 112u) << 10) | ((magnitude & 0x7FFFFFu) >> 13);
        rest = magnitude & 0x1FFFu;
        tie = 0x1000u;
    } else {
        if (exponent < 102u) return (uint16_t)sign;   // under 2⁻²⁵: rounds to zero
        // A subnormal in units of 2⁻²⁴: the 24-bit significand shifted right by 14 to 24.
        uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u, shift = 126u - exponent;
        h = significand >> shift;
        rest = significand & ((1u << shift) - 1u);
        tie = 1u << (shift - 1u);
    }
    if (rest > tie || (rest == tie && (h & 1u))) h += 1;   // a carry into the exponent is the right value
    return (uint16_t)(sign | h);
}

#if defined(__x86_64__) || defined(__i386__)
// earmark_softmax's AVX2 code (for a caller that has checked earmark_has_avx2_fma_f16c(); the encoder's
// self-attention runs it from its AVX2 and its AVX-512 code, so that the two give the same bits).
void earmark_softmax_avx2(float *x, long count);
// The same bits with AVX-512 F (for a caller that has checked the CPU has it).
void earmark_softmax_avx512(float *x, long count);
#endif
#endif
