// Softmax and GELU in place for Whisper's networks; see include/CHalfGEMM.h.
#include "CHalfGEMM.h"
#include "dispatch.h"

#include <math.h>

void earmark_softmax_portable(float *x, long count) {
    float top = -INFINITY;
    for (long i = 0; i < count; i++) top = x[i] > top ? x[i] : top;
    float sum = 0;
    for (long i = 0; i < count; i++) {
        x[i] = expf(x[i] - top);
        sum += x[i];
    }
    float inverse = 1 / sum;
    for (long i = 0; i < count; i++) x[i] *= inverse;
}

void earmark_gelu_portable(float *x, long count) {
    const float r = 0.70710678118654752f;
    for (long i = 0; i < count; i++) x[i] = 0.5f * x[i] * (1 + erff(x[i] * r));
}

double earmark_log_sum_exp_portable(const float *x, long count) {
    float top = -INFINITY;
    for (long i = 0; i < count; i++) top = x[i] > top ? x[i] : top;
    if (!(top > -INFINITY)) return -INFINITY;
    double sum = 0;
    for (long i = 0; i < count; i++) sum += exp((double)(x[i] - top));
    return (double)top + log(sum);
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EARMARK_AVX2 __attribute__((target("avx2,fma")))

// exp(v) for v ≤ 0 (v > 0 is not needed: the maximum has been subtracted): v = n·ln 2 + r with |r| ≤ ln 2 / 2,
// exp(r) by its Taylor series to r⁷ (truncation below 10⁻⁸ relative), times 2ⁿ built in the exponent bits.
static inline __attribute__((always_inline)) EARMARK_AVX2 __m256 exp_nonpositive(__m256 v) {
    const __m256 lowest = _mm256_set1_ps(-87.3f);
    __m256 underflow = _mm256_cmp_ps(v, lowest, _CMP_LT_OQ);
    v = _mm256_max_ps(v, lowest);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // ln 2 in two parts, so that n·ln2High is exact for |n| ≤ 127.
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), v);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(scale));
    return _mm256_andnot_ps(underflow, e);
}

// GELU(v) = v/2 · (1 + erf(v/√2)) with erfc(z) ≈ P(t) · exp(−z²), t = 1 / (1 + 0.3275911 z), z = |v|/√2 (Abramowitz and
// Stegun 7.1.26, a fifth-degree P: |error| < 1.5 × 10⁻⁷); for v < 0, 1 + erf(−z) = erfc(z) is used as it is (no
// cancellation), for v ≥ 0, 2 − erfc(z).
static inline __attribute__((always_inline)) EARMARK_AVX2 __m256 gelu8(__m256 v) {
    const __m256 signBit = _mm256_set1_ps(-0.0f);
    __m256 z = _mm256_mul_ps(_mm256_andnot_ps(signBit, v), _mm256_set1_ps(0.70710678118654752f));
    __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(z, _mm256_set1_ps(0.3275911f), _mm256_set1_ps(1.0f)));
    __m256 p = _mm256_set1_ps(1.061405429f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
    p = _mm256_mul_ps(p, t);
    __m256 erfc = _mm256_mul_ps(p, exp_nonpositive(_mm256_mul_ps(_mm256_xor_ps(z, signBit), z)));
    __m256 positive = _mm256_sub_ps(_mm256_set1_ps(2.0f), erfc);
    __m256 onePlusErf = _mm256_blendv_ps(positive, erfc, v);   // v's sign bit chooses erfc
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v), onePlusErf);
}

static EARMARK_AVX2 void gelu_avx2(float *x, long count) {
    long full = count & ~7L, rest = count - full;
    for (long i = 0; i < full; i += 8) _mm256_storeu_ps(x + i, gelu8(_mm256_loadu_ps(x + i)));
    if (rest > 0) {
        __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rest), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(x + full, mask, gelu8(_mm256_maskload_ps(x + full, mask)));
    }
}

// The largest of count values (the first `full`, a multiple of 8, 8 at a time; exact in any order).
static inline __attribute__((always_inline)) EARMARK_AVX2 float largest_avx2(const float *x, long count, long full) {
    __m256 top = _mm256_set1_ps(-INFINITY);
    for (long i = 0; i < full; i += 8) top = _mm256_max_ps(top, _mm256_loadu_ps(x + i));
    float high = -INFINITY;
    for (long i = full; i < count; i++) high = x[i] > high ? x[i] : high;
    __m128 t = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
    t = _mm_max_ps(t, _mm_movehl_ps(t, t));
    t = _mm_max_ss(t, _mm_shuffle_ps(t, t, 1));
    return _mm_cvtss_f32(t) > high ? _mm_cvtss_f32(t) : high;
}

static EARMARK_AVX2 void softmax_avx2(float *x, long count) {
    long full = count & ~7L, rest = count - full;
    // Lanes of the last partial vector: lane i is loaded and stored when i < rest.
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rest), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    float high = largest_avx2(x, count, full);
    __m256 shift = _mm256_set1_ps(high), sum = _mm256_setzero_ps();
    for (long i = 0; i < full; i += 8) {
        __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), shift));
        _mm256_storeu_ps(x + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (rest > 0) {
        __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_maskload_ps(x + full, mask), shift));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mask));
        _mm256_maskstore_ps(x + full, mask, e);
        sum = _mm256_add_ps(sum, e);
    }
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    __m256 inverse = _mm256_set1_ps(1 / _mm_cvtss_f32(s));
    for (long i = 0; i < full; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inverse));
    if (rest > 0) _mm256_maskstore_ps(x + full, mask, _mm256_mul_ps(_mm256_maskload_ps(x + full, mask), inverse));
}

void earmark_softmax_avx2(float *x, long count) {
    if (count > 0) softmax_avx2(x, count);
}

static inline __attribute__((always_inline)) EARMARK_AVX2 double lanes_total(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return (double)_mm_cvtss_f32(s);
}

// Blocks of 1,024 values are summed in float lanes (each lane adds 128 values below 1), the blocks in double.
static EARMARK_AVX2 double log_sum_exp_avx2(const float *x, long count) {
    long full = count & ~7L, rest = count - full;
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rest), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    float high = largest_avx2(x, count, full);
    if (!(high > -INFINITY)) return -INFINITY;
    __m256 shift = _mm256_set1_ps(high);
    double total = 0;
    for (long b = 0; b < full; b += 1024) {
        long end = b + 1024 < full ? b + 1024 : full;
        __m256 sum = _mm256_setzero_ps();
        for (long i = b; i < end; i += 8) sum = _mm256_add_ps(sum, exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), shift)));
        total += lanes_total(sum);
    }
    if (rest > 0) {
        __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_maskload_ps(x + full, mask), shift));
        total += lanes_total(_mm256_and_ps(e, _mm256_castsi256_ps(mask)));
    }
    return (double)high + log(total);
}

// The AVX2 softmax's bits 16 values at a time: the same operations in each lane (exp_nonpositive's, lane for lane),
// the same maximum (exact in any order), and the sum added in the AVX2 code's order (8 lanes, each 16 values' lower
// then upper half, then the same partial vector and the same reduction).
#define EARMARK_AVX512 __attribute__((target("avx512f,avx2,fma")))

static inline __attribute__((always_inline)) EARMARK_AVX512 __m512 exp_nonpositive16(__m512 v) {
    const __m512 lowest = _mm512_set1_ps(-87.3f);
    __mmask16 underflow = _mm512_cmp_ps_mask(v, lowest, _CMP_LT_OQ);
    v = _mm512_max_ps(v, lowest);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), v);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i scale = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 e = _mm512_mul_ps(p, _mm512_castsi512_ps(scale));
    return _mm512_maskz_mov_ps((__mmask16)~underflow, e);
}

EARMARK_AVX512 void earmark_softmax_avx512(float *x, long count) {
    if (count <= 0) return;
    long full = count & ~7L, wide = count & ~15L, rest = count - full;
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rest), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m512 top16 = _mm512_set1_ps(-INFINITY);
    for (long i = 0; i < wide; i += 16) top16 = _mm512_max_ps(top16, _mm512_loadu_ps(x + i));
    float high = _mm512_reduce_max_ps(top16);
    for (long i = wide; i < count; i++) high = x[i] > high ? x[i] : high;
    __m512 shift16 = _mm512_set1_ps(high);
    __m256 shift = _mm256_set1_ps(high), sum = _mm256_setzero_ps();
    for (long i = 0; i < wide; i += 16) {
        __m512 e = exp_nonpositive16(_mm512_sub_ps(_mm512_loadu_ps(x + i), shift16));
        _mm512_storeu_ps(x + i, e);
        sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
        sum = _mm256_add_ps(sum, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
    }
    if (full > wide) {
        __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + wide), shift));
        _mm256_storeu_ps(x + wide, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (rest > 0) {
        __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_maskload_ps(x + full, mask), shift));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mask));
        _mm256_maskstore_ps(x + full, mask, e);
        sum = _mm256_add_ps(sum, e);
    }
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    float inverse = 1 / _mm_cvtss_f32(s);
    __m512 inverse16 = _mm512_set1_ps(inverse);
    for (long i = 0; i < wide; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inverse16));
    for (long i = wide; i < count; i++) x[i] *= inverse;
}
#endif

void earmark_softmax(float *x, long count) {
    if (count <= 0) return;
#if defined(__x86_64__) || defined(__i386__)
    if (earmark_has_avx2_fma_f16c()) {
        softmax_avx2(x, count);
        return;
    }
#endif
    earmark_softmax_portable(x, count);
}

double earmark_log_sum_exp(const float *x, long count) {
    if (count <= 0) return -INFINITY;
#if defined(__x86_64__) || defined(__i386__)
    if (earmark_has_avx2_fma_f16c()) return log_sum_exp_avx2(x, count);
#endif
    return earmark_log_sum_exp_portable(x, count);
}

void earmark_gelu(float *x, long count) {
    if (count <= 0) return;
#if defined(__x86_64__) || defined(__i386__)
    if (earmark_has_avx2_fma_f16c()) {
        gelu_avx2(x, count);
        return;
    }
#endif
    earmark_gelu_portable(x, count);
}
