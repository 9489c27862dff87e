// Cross-attention of few query rows against one head's keys and values packed once per window; see
// include/CHalfGEMM.h.
//
// Every output value is one chain of fused multiply-adds in a fixed order (over the head's dimensions for a score,
// over the positions for a weighted value), started from 0. The AVX2 code runs 8 or 16 such chains side by side in
// vector lanes and the portable code one at a time with fmaf; a fused multiply-add rounds once in both, so the two
// paths give the same bits. Keys and values held as binary16 are widened exactly (F16C, or half_value) as they are
// read: the same chains on the same numbers as Float32 keys and values of those values.
#include "CHalfGEMM.h"
#include "dispatch.h"

#include <math.h>
#include <stdint.h>

enum { block = 16 };   // positions per key block, values per value column block

long earmark_attention_padded(long count) { return count <= 0 ? 0 : (count + block - 1) / block * block; }

long earmark_attention_packed_count(long count, long headSize) {
    return earmark_attention_padded(count) * earmark_attention_padded(headSize);
}

// The packings, with `half` a constant at every call: 4-byte Float32 values, or 2-byte binary16 bit patterns.
static inline __attribute__((always_inline)) void store_value(void *packed, long i, const void *source, long j, const int half) {
    if (half) ((uint16_t *)packed)[i] = source ? ((const uint16_t *)source)[j] : 0;
    else ((float *)packed)[i] = source ? ((const float *)source)[j] : 0;
}

static inline __attribute__((always_inline)) void pack_keys(const void *keys, long ldk, long count, long headSize, void *packed,
                                                            const int half) {
    long padded = earmark_attention_padded(count);
    for (long t0 = 0; t0 < padded; t0 += block)
        for (long p = 0; p < headSize; p++)
            for (long i = 0; i < block; i++)
                store_value(packed, t0 * headSize + p * block + i, t0 + i < count ? keys : 0, (t0 + i) * ldk + p, half);
}

static inline __attribute__((always_inline)) void pack_values(const void *values, long ldv, long count, long headSize,
                                                              void *packed, const int half) {
    long padded = earmark_attention_padded(count);
    for (long c0 = 0; c0 < headSize; c0 += block)
        for (long t = 0; t < padded; t++)
            for (long i = 0; i < block; i++)
                store_value(packed, c0 * padded + t * block + i, t < count && c0 + i < headSize ? values : 0, t * ldv + c0 + i,
                            half);
}

void earmark_attention_pack_keys(const float *keys, long ldk, long count, long headSize, float *packed) {
    pack_keys(keys, ldk, count, headSize, packed, 0);
}

void earmark_attention_pack_values(const float *values, long ldv, long count, long headSize, float *packed) {
    pack_values(values, ldv, count, headSize, packed, 0);
}

void earmark_attention_pack_keys_half(const uint16_t *keys, long ldk, long count, long headSize, void *packed) {
    pack_keys(keys, ldk, count, headSize, packed, 1);
}

void earmark_attention_pack_values_half(const uint16_t *values, long ldv, long count, long headSize, void *packed) {
    pack_values(values, ldv, count, headSize, packed, 1);
}

// MARK: Portable code

static inline __attribute__((always_inline)) float packed_value(const void *packed, long i, const int half) {
    return half ? half_value(((const uint16_t *)packed)[i]) : ((const float *)packed)[i];
}

static inline __attribute__((always_inline)) void scores_portable(long rows, long count, long headSize, const float *q, long ldq,
                                                                  const void *packedKeys, float scale, float *scores, long lds,
                                                                  const int half) {
    for (long r = 0; r < rows; r++) {
        for (long t = 0; t < count; t++) {
            long k = (t / block) * block * headSize + t % block;
            float acc = 0;
            for (long p = 0; p < headSize; p++) acc = fmaf(q[r * ldq + p], packed_value(packedKeys, k + p * block, half), acc);
            scores[r * lds + t] = acc * scale;
        }
    }
}

static inline __attribute__((always_inline)) void values_portable(long rows, long count, long headSize, const float *weights,
                                                                  long ldw, const void *packedValues, float *out, long ldo,
                                                                  const int half) {
    long padded = earmark_attention_padded(count);
    for (long r = 0; r < rows; r++) {
        for (long c = 0; c < headSize; c++) {
            long v = (c / block) * block * padded + c % block;
            float acc = 0;
            for (long t = 0; t < count; t++) acc = fmaf(weights[r * ldw + t], packed_value(packedValues, v + t * block, half), acc);
            out[r * ldo + c] = acc;
        }
    }
}

void earmark_attention_scores_portable(long rows, long count, long headSize, const float *q, long ldq,
                                       const float *packedKeys, float scale, float *scores, long lds) {
    scores_portable(rows, count, headSize, q, ldq, packedKeys, scale, scores, lds, 0);
}

void earmark_attention_values_portable(long rows, long count, long headSize, const float *weights, long ldw,
                                       const float *packedValues, float *out, long ldo) {
    values_portable(rows, count, headSize, weights, ldw, packedValues, out, ldo, 0);
}

void earmark_attention_scores_half_portable(long rows, long count, long headSize, const float *q, long ldq,
                                            const void *packedKeys, float scale, float *scores, long lds) {
    scores_portable(rows, count, headSize, q, ldq, packedKeys, scale, scores, lds, 1);
}

void earmark_attention_values_half_portable(long rows, long count, long headSize, const float *weights, long ldw,
                                            const void *packedValues, float *out, long ldo) {
    values_portable(rows, count, headSize, weights, ldw, packedValues, out, ldo, 1);
}

// MARK: AVX2

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EARMARK_AVX2 __attribute__((target("avx2,fma,f16c")))
#define EARMARK_INLINE static inline __attribute__((always_inline))

// The 16 values at packed[i …] as two vectors, widened from binary16 when `half` (a constant at every call).
EARMARK_INLINE EARMARK_AVX2 void load16(const void *packed, long i, const int half, __m256 *low, __m256 *high) {
    if (half) {
        const uint16_t *h = (const uint16_t *)packed + i;
        *low = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
        *high = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + 8)));
    } else {
        const float *f = (const float *)packed + i;
        *low = _mm256_loadu_ps(f);
        *high = _mm256_loadu_ps(f + 8);
    }
}

// 2 kB ahead of packed[i] (a prefetch never faults, so past the end is harmless): the head's keys and values are one
// stream each that the hardware prefetcher alone kept too short; 20-25 % less time a step on five rows.
EARMARK_INLINE EARMARK_AVX2 void prefetch_ahead(const void *packed, long i, const int half) {
    _mm_prefetch((const char *)packed + i * (half ? 2 : 4) + 2048, _MM_HINT_T0);
}

// Scores of MR rows (at most 6) for one block of 16 positions: 2 × MR accumulators.
EARMARK_INLINE EARMARK_AVX2 void scores_block_avx2(const int MR, long headSize, const float *q, long ldq, const void *keys,
                                                   long k0, float scale, float *scores, long lds, long valid, const int half) {
    __m256 acc[6][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (long p = 0; p < headSize; p++) {
        prefetch_ahead(keys, k0 + p * block, half);
        __m256 low, high;
        load16(keys, k0 + p * block, half, &low, &high);
        for (int r = 0; r < MR; r++) {
            __m256 x = _mm256_broadcast_ss(q + r * ldq + p);
            acc[r][0] = _mm256_fmadd_ps(x, low, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, high, acc[r][1]);
        }
    }
    __m256 s = _mm256_set1_ps(scale);
    for (int r = 0; r < MR; r++) {
        __m256 a0 = _mm256_mul_ps(acc[r][0], s), a1 = _mm256_mul_ps(acc[r][1], s);
        if (valid == block) {
            _mm256_storeu_ps(scores + r * lds, a0);
            _mm256_storeu_ps(scores + r * lds + 8, a1);
        } else {
            float tmp[block];
            _mm256_storeu_ps(tmp, a0);
            _mm256_storeu_ps(tmp + 8, a1);
            for (long i = 0; i < valid; i++) scores[r * lds + i] = tmp[i];
        }
    }
}

// Weighted values of MR rows (at most 6) for one column block of 16 (`valid` of them stored), starting at packed
// value v0: 2 × MR accumulators over all positions.
EARMARK_INLINE EARMARK_AVX2 void values_block_avx2(const int MR, long count, const float *weights, long ldw, const void *values,
                                                   long v0, float *out, long ldo, long valid, const int half) {
    __m256 acc[6][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (long t = 0; t < count; t++) {
        prefetch_ahead(values, v0 + t * block, half);
        __m256 low, high;
        load16(values, v0 + t * block, half, &low, &high);
        for (int r = 0; r < MR; r++) {
            __m256 x = _mm256_broadcast_ss(weights + r * ldw + t);
            acc[r][0] = _mm256_fmadd_ps(x, low, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, high, acc[r][1]);
        }
    }
    for (int r = 0; r < MR; r++) {
        if (valid == block) {
            _mm256_storeu_ps(out + r * ldo, acc[r][0]);
            _mm256_storeu_ps(out + r * ldo + 8, acc[r][1]);
        } else {
            float tmp[block];
            _mm256_storeu_ps(tmp, acc[r][0]);
            _mm256_storeu_ps(tmp + 8, acc[r][1]);
            for (long i = 0; i < valid; i++) out[r * ldo + i] = tmp[i];
        }
    }
}

EARMARK_INLINE EARMARK_AVX2 void scores_avx2(long rows, long count, long headSize, const float *q, long ldq,
                                             const void *packedKeys, float scale, float *scores, long lds, const int half) {
    for (long r0 = 0; r0 < rows; r0 += 6) {
        int mr = rows - r0 < 6 ? (int)(rows - r0) : 6;
        for (long t0 = 0; t0 < count; t0 += block) {
            long k0 = t0 * headSize, valid = count - t0 < block ? count - t0 : block;
            const float *qr = q + r0 * ldq;
            float *s = scores + r0 * lds + t0;
            switch (mr) {
                case 1: scores_block_avx2(1, headSize, qr, ldq, packedKeys, k0, scale, s, lds, valid, half); break;
                case 2: scores_block_avx2(2, headSize, qr, ldq, packedKeys, k0, scale, s, lds, valid, half); break;
                case 3: scores_block_avx2(3, headSize, qr, ldq, packedKeys, k0, scale, s, lds, valid, half); break;
                case 4: scores_block_avx2(4, headSize, qr, ldq, packedKeys, k0, scale, s, lds, valid, half); break;
                case 5: scores_block_avx2(5, headSize, qr, ldq, packedKeys, k0, scale, s, lds, valid, half); break;
                default: scores_block_avx2(6, headSize, qr, ldq, packedKeys, k0, scale, s, lds, valid, half); break;
            }
        }
    }
}

EARMARK_INLINE EARMARK_AVX2 void values_avx2(long rows, long count, long headSize, const float *weights, long ldw,
                                             const void *packedValues, float *out, long ldo, const int half) {
    long padded = earmark_attention_padded(count);
    for (long r0 = 0; r0 < rows; r0 += 6) {
        int mr = rows - r0 < 6 ? (int)(rows - r0) : 6;
        for (long c0 = 0; c0 < headSize; c0 += block) {
            const float *w = weights + r0 * ldw;
            long v0 = c0 * padded, valid = headSize - c0 < block ? headSize - c0 : block;
            float *o = out + r0 * ldo + c0;
            switch (mr) {
                case 1: values_block_avx2(1, count, w, ldw, packedValues, v0, o, ldo, valid, half); break;
                case 2: values_block_avx2(2, count, w, ldw, packedValues, v0, o, ldo, valid, half); break;
                case 3: values_block_avx2(3, count, w, ldw, packedValues, v0, o, ldo, valid, half); break;
                case 4: values_block_avx2(4, count, w, ldw, packedValues, v0, o, ldo, valid, half); break;
                case 5: values_block_avx2(5, count, w, ldw, packedValues, v0, o, ldo, valid, half); break;
                default: values_block_avx2(6, count, w, ldw, packedValues, v0, o, ldo, valid, half); break;
            }
        }
    }
}

// The vector code for either kind of packed values (`half` is tested once, each branch inlines its own kernels).
static EARMARK_AVX2 void scores_vector(long rows, long count, long headSize, const float *q, long ldq, const void *packedKeys,
                                       float scale, float *scores, long lds, int half) {
    if (half) scores_avx2(rows, count, headSize, q, ldq, packedKeys, scale, scores, lds, 1);
    else scores_avx2(rows, count, headSize, q, ldq, packedKeys, scale, scores, lds, 0);
}

static EARMARK_AVX2 void values_vector(long rows, long count, long headSize, const float *weights, long ldw,
                                       const void *packedValues, float *out, long ldo, int half) {
    if (half) values_avx2(rows, count, headSize, weights, ldw, packedValues, out, ldo, 1);
    else values_avx2(rows, count, headSize, weights, ldw, packedValues, out, ldo, 0);
}
#define EARMARK_X86 1
#endif

// MARK: Dispatch

static void scores_dispatch(long rows, long count, long headSize, const float *q, long ldq, const void *packedKeys, float scale,
                            float *scores, long lds, int half) {
    if (rows <= 0 || count <= 0) return;
#ifdef EARMARK_X86
    if (earmark_has_avx2_fma_f16c()) {
        scores_vector(rows, count, headSize, q, ldq, packedKeys, scale, scores, lds, half);
        return;
    }
#endif
    if (half) scores_portable(rows, count, headSize, q, ldq, packedKeys, scale, scores, lds, 1);
    else scores_portable(rows, count, headSize, q, ldq, packedKeys, scale, scores, lds, 0);
}

static void values_dispatch(long rows, long count, long headSize, const float *weights, long ldw, const void *packedValues,
                            float *out, long ldo, int half) {
    if (rows <= 0 || headSize <= 0) return;
#ifdef EARMARK_X86
    if (earmark_has_avx2_fma_f16c()) {
        values_vector(rows, count, headSize, weights, ldw, packedValues, out, ldo, half);
        return;
    }
#endif
    if (half) values_portable(rows, count, headSize, weights, ldw, packedValues, out, ldo, 1);
    else values_portable(rows, count, headSize, weights, ldw, packedValues, out, ldo, 0);
}

void earmark_attention_scores(long rows, long count, long headSize, const float *q, long ldq, const float *packedKeys,
                              float scale, float *scores, long lds) {
    scores_dispatch(rows, count, headSize, q, ldq, packedKeys, scale, scores, lds, 0);
}

void earmark_attention_values(long rows, long count, long headSize, const float *weights, long ldw,
                              const float *packedValues, float *out, long ldo) {
    values_dispatch(rows, count, headSize, weights, ldw, packedValues, out, ldo, 0);
}

void earmark_attention_scores_half(long rows, long count, long headSize, const float *q, long ldq, const void *packedKeys,
                                   float scale, float *scores, long lds) {
    scores_dispatch(rows, count, headSize, q, ldq, packedKeys, scale, scores, lds, 1);
}

void earmark_attention_values_half(long rows, long count, long headSize, const float *weights, long ldw,
                                   const void *packedValues, float *out, long ldo) {
    values_dispatch(rows, count, headSize, weights, ldw, packedValues, out, ldo, 1);
}
