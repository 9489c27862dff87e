// Int8-weight matrix products for few rows; see include/CHalfGEMM.h.
//
// The weights are int8 with a Float32 scale per weight row; each input row is quantised to int16 with a scale of its
// own, and the products are summed exactly in integers. Integer sums do not depend on their order, and the few
// floating-point operations around them (the quantisation, the final scaling) are written once and shared, so the
// AVX-512 VNNI code, the AVX2 code and the portable code give the same bits.
#include "CHalfGEMM.h"
#include "dispatch.h"

#include <math.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EARMARK_X86 1
#endif

// Products summed in int32 lanes for at most this many inputs before they are widened to int64: a lane adds
// chunk/8 products of magnitude at most 32767·127, so 2048 inputs stay below 2^31 with a margin of 8.
enum { int8_chunk = 2048 };


// MARK: Shared scalar steps (the same code for both paths)

#ifdef EARMARK_X86
// quantise_row_scalar's steps 8 values at a time: the maximum is exact in any order, the product is the same single rounding,
// and vcvtps2dq rounds to nearest even as lrintf does in the default rounding mode, so the bits are the same.
static __attribute__((target("avx2"))) float quantise_row_avx2(const float *x, long k, int16_t *q) {
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 largest = _mm256_set1_ps(3.4028234663852886e38f);
    __m256 top8 = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    long full = k & ~7L;
    for (long p = 0; p < full; p += 8) {
        __m256 m = _mm256_and_ps(_mm256_loadu_ps(x + p), magnitude);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(m, largest, _CMP_NLE_UQ));   // NaN or infinity
        top8 = _mm256_max_ps(top8, m);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, top8);
    float top = 0;
    int finite = _mm256_movemask_ps(bad) == 0;
    for (int i = 0; i < 8; i++) top = lanes[i] > top ? lanes[i] : top;
    for (long p = full; p < k; p++) {
        float m = fabsf(x[p]);
        if (!(m <= 3.4028234663852886e38f)) finite = 0;
        top = m > top ? m : top;
    }
    if (!finite || top == 0) {
        for (long p = 0; p < k; p++) q[p] = 0;
        return finite ? 0 : NAN;
    }
    float inverse = 32767.0f / top;
    const __m256 scale = _mm256_set1_ps(inverse);
    const __m256i high = _mm256_set1_epi32(32767), low = _mm256_set1_epi32(-32767);
    for (long p = 0; p < full; p += 8) {
        __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + p), scale));
        r = _mm256_max_epi32(_mm256_min_epi32(r, high), low);
        _mm_storeu_si128((__m128i *)(q + p), _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
    }
    for (long p = full; p < k; p++) {
        long r = lrintf(x[p] * inverse);
        q[p] = (int16_t)(r > 32767 ? 32767 : (r < -32767 ? -32767 : r));
    }
    return top / 32767.0f;
}
#endif

// q[p] = round-to-nearest-even(x[p] · 32767 / max|x|); returns the row's scale max|x| / 32767 (0 for a row of
// zeros, NaN when the row holds a NaN or an infinity: its outputs are then NaN, as a Float32 product would be).
static float quantise_row_scalar(const float *x, long k, int16_t *q) {
    float top = 0;
    int finite = 1;
    for (long p = 0; p < k; p++) {
        float m = fabsf(x[p]);
        if (!(m <= 3.4028234663852886e38f)) finite = 0;   // NaN or infinity
        top = m > top ? m : top;
    }
    if (!finite) {
        for (long p = 0; p < k; p++) q[p] = 0;
        return NAN;
    }
    if (top == 0) {
        for (long p = 0; p < k; p++) q[p] = 0;
        return 0;
    }
    float inverse = 32767.0f / top;
    for (long p = 0; p < k; p++) {
        float v = x[p] * inverse;
        long r = lrintf(v);
        q[p] = (int16_t)(r > 32767 ? 32767 : (r < -32767 ? -32767 : r));
    }
    return top / 32767.0f;
}

// quantise_row_scalar with vector code where the CPU has it (the portable GEMM keeps the scalar code, so the tests
// that compare it with the vector paths compare the two quantisations too).
static float quantise_row(const float *x, long k, int16_t *q) {
#ifdef EARMARK_X86
    if (earmark_has_avx2_fma_f16c()) return quantise_row_avx2(x, k, q);
#endif
    return quantise_row_scalar(x, k, q);
}

// out = base + sum · (rowScale · weightScale), in separate statements so that no compiler fuses them differently in
// the two paths (contraction into an FMA happens only within one expression).
static inline void store_result(float *o, long j, int64_t sum, float rowScale, const float *scales, const float *bias,
                                int accumulate) {
    float base = accumulate ? *o : 0;
    if (bias) base += bias[j];
    float scale = rowScale * scales[j];
    float product = (float)sum * scale;
    *o = base + product;
}

long earmark_int8_gemm_scratch_count(long rows, long k) { return rows > 0 && k > 0 ? rows * k + rows * 2 : 0; }

// MARK: Portable code

void earmark_int8_gemm_portable(long rows, long n, long k, const float *a, long lda, const int8_t *w, long ldw,
                                const float *scales, const float *bias, float *out, long ldo, int accumulate,
                                int16_t *scratch) {
    if (rows <= 0 || n <= 0) return;
    int16_t *q = scratch;
    unsigned char *rowScales = (unsigned char *)(scratch + rows * k);   // 2 int16 per row hold its float scale
    for (long r = 0; r < rows; r++) {
        float s = quantise_row_scalar(a + r * lda, k, q + r * k);
        __builtin_memcpy(rowScales + r * sizeof s, &s, sizeof s);
    }
    for (long j = 0; j < n; j++) {
        const int8_t *wj = w + j * ldw;
        for (long r = 0; r < rows; r++) {
            const int16_t *x = q + r * k;
            int64_t sum = 0;
            for (long p = 0; p < k; p++) sum += (int32_t)x[p] * (int32_t)wj[p];
            float rs;
            __builtin_memcpy(&rs, rowScales + r * sizeof rs, sizeof rs);
            store_result(out + r * ldo + j, j, sum, rs, scales, bias, accumulate);
        }
    }
}

// MARK: AVX2

#ifdef EARMARK_X86
#define EARMARK_AVX2 __attribute__((target("avx2,fma,f16c")))
#define EARMARK_INLINE static inline __attribute__((always_inline))

EARMARK_INLINE EARMARK_AVX2 int64_t lanes_sum(__m256i v) {
    // Each lane may be near 2^31, so the lanes are added in 64 bits.
    __m256i lo = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(v));
    __m256i hi = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(v, 1));
    __m256i s = _mm256_add_epi64(lo, hi);
    __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    return _mm_cvtsi128_si64(t) + _mm_extract_epi64(t, 1);
}

// sums[r·NR + c] = Σ_p q[r·k + p] · w[c·ldw + p] over p in [p0, end) for MR input rows and NR weight rows: each
// 16 weights sign-extended to int16 once, then vpmaddwd with every row's 16 inputs (pairs summed into int32 lanes).
EARMARK_INLINE EARMARK_AVX2 void int8_block_avx2(const int MR, const int NR, long p0, long end, long k, const int16_t *q,
                                                 const int8_t *w, long ldw, int64_t *sums) {
    __m256i acc[6][4];
    for (int r = 0; r < MR; r++)
        for (int c = 0; c < NR; c++) acc[r][c] = _mm256_setzero_si256();
    long p = p0;
    for (; p + 16 <= end; p += 16) {
        __m256i wv[4];
        for (int c = 0; c < NR; c++) {
            // The same inputs of the next block's weight rows, as the AVX-512 code does. 512 bytes ahead along the row
            // fell in the block being read when rows are 512 bytes (the decoder's k = 512: the vocabulary projection's
            // 26 MB of weights), so they came from memory unannounced.
            _mm_prefetch((const char *)((uintptr_t)(w + c * ldw + p) + (uintptr_t)(NR * ldw)), _MM_HINT_T0);
            wv[c] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + c * ldw + p)));
        }
        for (int r = 0; r < MR; r++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(q + r * k + p));
            for (int c = 0; c < NR; c++) acc[r][c] = _mm256_add_epi32(acc[r][c], _mm256_madd_epi16(x, wv[c]));
        }
    }
    for (int r = 0; r < MR; r++) {
        for (int c = 0; c < NR; c++) {
            int64_t s = lanes_sum(acc[r][c]);
            for (long t = p; t < end; t++) s += (int32_t)q[r * k + t] * (int32_t)w[c * ldw + t];
            sums[r * NR + c] += s;
        }
    }
}

static EARMARK_AVX2 void int8_block_dispatch(int mr, int nr, long p0, long end, long k, const int16_t *q, const int8_t *w,
                                             long ldw, int64_t *sums) {
#define EARMARK_CASE(M, N) \
    case (M) * 8 + (N): int8_block_avx2(M, N, p0, end, k, q, w, ldw, sums); break;
    switch (mr * 8 + nr) {
        EARMARK_CASE(1, 4) EARMARK_CASE(2, 4)
        EARMARK_CASE(1, 2) EARMARK_CASE(2, 2) EARMARK_CASE(3, 2) EARMARK_CASE(4, 2) EARMARK_CASE(5, 2) EARMARK_CASE(6, 2)
        EARMARK_CASE(1, 1) EARMARK_CASE(2, 1) EARMARK_CASE(3, 1) EARMARK_CASE(4, 1) EARMARK_CASE(5, 1) EARMARK_CASE(6, 1)
        default: __builtin_unreachable();
    }
#undef EARMARK_CASE
}

static EARMARK_AVX2 void int8_gemm_avx2(long rows, long n, long k, const float *a, long lda, const int8_t *w, long ldw,
                                        const float *scales, const float *bias, float *out, long ldo, int accumulate,
                                        int16_t *scratch) {
    int16_t *q = scratch;
    unsigned char *rowScales = (unsigned char *)(scratch + rows * k);
    for (long r = 0; r < rows; r++) {
        float s = quantise_row(a + r * lda, k, q + r * k);
        __builtin_memcpy(rowScales + r * sizeof s, &s, sizeof s);
    }
    // As the float16 kernel: weight rows outermost, each block of weight rows read from memory once for every input
    // row (up to 6 at a time); one or two rows take 4 weight rows at a time.
    const int wide = rows <= 2 ? 4 : 2, maxRows = rows <= 2 ? 2 : 6;
    int64_t sums[6 * 4];
    for (long j = 0; j < n;) {
        int nr = n - j >= wide ? wide : 1;
        for (long r0 = 0; r0 < rows; r0 += maxRows) {
            int mr = rows - r0 < maxRows ? (int)(rows - r0) : maxRows;
            for (int i = 0; i < mr * nr; i++) sums[i] = 0;
            for (long p0 = 0; p0 < k; p0 += int8_chunk) {
                long end = k - p0 < int8_chunk ? k : p0 + int8_chunk;
                int8_block_dispatch(mr, nr, p0, end, k, q + r0 * k, w + j * ldw, ldw, sums);
            }
            for (int r = 0; r < mr; r++) {
                float rs;
                __builtin_memcpy(&rs, rowScales + (r0 + r) * sizeof rs, sizeof rs);
                for (int c = 0; c < nr; c++)
                    store_result(out + (r0 + r) * ldo + j + c, j + c, sums[r * nr + c], rs, scales, bias, accumulate);
            }
        }
        j += nr;
    }
}

// MARK: AVX-512 (BW + VNNI)

// The same integer sums with 32 inputs a step: `vpdpwssd` multiplies pairs of int16 and adds both products to an int32
// lane in one instruction (no saturation), and 32 registers hold 4 weight rows × up to 6 input rows of accumulators.
// A lane adds at most chunk/16 pairs' products (2 per pair), 2048/16 · 2 · 32767 · 127 < 2^31, so the sums are exact
// and equal to the AVX2 and portable ones bit for bit.
#define EARMARK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

EARMARK_INLINE EARMARK_AVX512 int64_t lanes_sum512(__m512i v) {
    __m512i lo = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v));
    __m512i hi = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1));
    return _mm512_reduce_add_epi64(_mm512_add_epi64(lo, hi));
}

EARMARK_INLINE EARMARK_AVX512 void int8_block_avx512(const int MR, const int NR, long p0, long end, long k, const int16_t *q,
                                                     const int8_t *w, long ldw, int64_t *sums) {
    __m512i acc[6][4];
    for (int r = 0; r < MR; r++)
        for (int c = 0; c < NR; c++) acc[r][c] = _mm512_setzero_si512();
    for (long p = p0; p < end; p += 32) {
        __m512i wv[4];
        if (end - p >= 32) {
            for (int c = 0; c < NR; c++) {
                // The same inputs of the next block's 4 weight rows (a prefetch never faults). The AVX2 code's 512
                // bytes ahead fall inside the 4 rows being read when they are 512 bytes long (the decoder's k = 512).
                _mm_prefetch((const char *)((uintptr_t)(w + c * ldw + p) + (uintptr_t)(NR * ldw)), _MM_HINT_T0);
                wv[c] = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(w + c * ldw + p)));
            }
            for (int r = 0; r < MR; r++) {
                __m512i x = _mm512_loadu_si512((const void *)(q + r * k + p));
                for (int c = 0; c < NR; c++) acc[r][c] = _mm512_dpwssd_epi32(acc[r][c], x, wv[c]);
            }
        } else {
            // The last inputs: masked loads read nothing past the row and give zeros, whose products add nothing.
            __mmask32 m = (__mmask32)((1ull << (end - p)) - 1);
            for (int c = 0; c < NR; c++) wv[c] = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, w + c * ldw + p));
            for (int r = 0; r < MR; r++) {
                __m512i x = _mm512_maskz_loadu_epi16(m, q + r * k + p);
                for (int c = 0; c < NR; c++) acc[r][c] = _mm512_dpwssd_epi32(acc[r][c], x, wv[c]);
            }
        }
    }
    for (int r = 0; r < MR; r++)
        for (int c = 0; c < NR; c++) sums[r * NR + c] += lanes_sum512(acc[r][c]);
}

static EARMARK_AVX512 void int8_block_dispatch512(int mr, int nr, long p0, long end, long k, const int16_t *q, const int8_t *w,
                                                  long ldw, int64_t *sums) {
#define EARMARK_CASE(M, N) \
    case (M) * 8 + (N): int8_block_avx512(M, N, p0, end, k, q, w, ldw, sums); break;
    switch (mr * 8 + nr) {
        EARMARK_CASE(1, 4) EARMARK_CASE(2, 4) EARMARK_CASE(3, 4) EARMARK_CASE(4, 4) EARMARK_CASE(5, 4) EARMARK_CASE(6, 4)
        EARMARK_CASE(1, 1) EARMARK_CASE(2, 1) EARMARK_CASE(3, 1) EARMARK_CASE(4, 1) EARMARK_CASE(5, 1) EARMARK_CASE(6, 1)
        default: __builtin_unreachable();
    }
#undef EARMARK_CASE
}

static EARMARK_AVX512 void int8_gemm_avx512(long rows, long n, long k, const float *a, long lda, const int8_t *w, long ldw,
                                            const float *scales, const float *bias, float *out, long ldo, int accumulate,
                                            int16_t *scratch) {
    int16_t *q = scratch;
    unsigned char *rowScales = (unsigned char *)(scratch + rows * k);
    for (long r = 0; r < rows; r++) {
        float s = quantise_row(a + r * lda, k, q + r * k);
        __builtin_memcpy(rowScales + r * sizeof s, &s, sizeof s);
    }
    int64_t sums[6 * 4];
    for (long j = 0; j < n;) {
        int nr = n - j >= 4 ? 4 : 1;
        for (long r0 = 0; r0 < rows; r0 += 6) {
            int mr = rows - r0 < 6 ? (int)(rows - r0) : 6;
            for (int i = 0; i < mr * nr; i++) sums[i] = 0;
            for (long p0 = 0; p0 < k; p0 += int8_chunk) {
                long end = k - p0 < int8_chunk ? k : p0 + int8_chunk;
                int8_block_dispatch512(mr, nr, p0, end, k, q + r0 * k, w + j * ldw, ldw, sums);
            }
            for (int r = 0; r < mr; r++) {
                float rs;
                __builtin_memcpy(&rs, rowScales + (r0 + r) * sizeof rs, sizeof rs);
                for (int c = 0; c < nr; c++)
                    store_result(out + (r0 + r) * ldo + j + c, j + c, sums[r * nr + c], rs, scales, bias, accumulate);
            }
        }
        j += nr;
    }
}

static int has_avx512_vnni(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512vnni") && earmark_has_avx2_fma_f16c();
}
#else
static int has_avx512_vnni(void) { return 0; }
#endif

// MARK: Dispatch

void earmark_int8_gemm(long rows, long n, long k, const float *a, long lda, const int8_t *w, long ldw, const float *scales,
                       const float *bias, float *out, long ldo, int accumulate, int16_t *scratch) {
    if (rows <= 0 || n <= 0) return;
#ifdef EARMARK_X86
    if (has_avx512_vnni()) {
        int8_gemm_avx512(rows, n, k, a, lda, w, ldw, scales, bias, out, ldo, accumulate, scratch);
        return;
    }
    if (earmark_has_avx2_fma_f16c()) {
        int8_gemm_avx2(rows, n, k, a, lda, w, ldw, scales, bias, out, ldo, accumulate, scratch);
        return;
    }
#endif
    earmark_int8_gemm_portable(rows, n, k, a, lda, w, ldw, scales, bias, out, ldo, accumulate, scratch);
}

void earmark_int8_gemm_avx2(long rows, long n, long k, const float *a, long lda, const int8_t *w, long ldw,
                            const float *scales, const float *bias, float *out, long ldo, int accumulate, int16_t *scratch) {
    if (rows <= 0 || n <= 0) return;
#ifdef EARMARK_X86
    if (earmark_has_avx2_fma_f16c()) {
        int8_gemm_avx2(rows, n, k, a, lda, w, ldw, scales, bias, out, ldo, accumulate, scratch);
        return;
    }
#endif
    earmark_int8_gemm_portable(rows, n, k, a, lda, w, ldw, scales, bias, out, ldo, accumulate, scratch);
}

void earmark_int8_gemm_avx512(long rows, long n, long k, const float *a, long lda, const int8_t *w, long ldw,
                              const float *scales, const float *bias, float *out, long ldo, int accumulate, int16_t *scratch) {
    if (rows <= 0 || n <= 0) return;
#ifdef EARMARK_X86
    if (has_avx512_vnni()) {
        int8_gemm_avx512(rows, n, k, a, lda, w, ldw, scales, bias, out, ldo, accumulate, scratch);
        return;
    }
#endif
    earmark_int8_gemm_avx2(rows, n, k, a, lda, w, ldw, scales, bias, out, ldo, accumulate, scratch);
}

const char *earmark_int8_gemm_path(void) {
    return has_avx512_vnni() ? "avx512-vnni" : (earmark_has_avx2_fma_f16c() ? "avx2" : "portable");
}

void earmark_quantise_half_rows(const uint16_t *src, long n, long k, int8_t *dst, float *scales) {
    float widened[256];
    for (long j = 0; j < n; j++) {
        const uint16_t *row = src + j * k;
        float top = 0;
        for (long p0 = 0; p0 < k; p0 += 256) {
            long len = k - p0 < 256 ? k - p0 : 256;
            earmark_half_to_float(row + p0, widened, len);
            for (long p = 0; p < len; p++) {
                float m = fabsf(widened[p]);
                top = m > top ? m : top;
            }
        }
        float inverse = top > 0 ? 127.0f / top : 0;
        scales[j] = top / 127.0f;
        for (long p0 = 0; p0 < k; p0 += 256) {
            long len = k - p0 < 256 ? k - p0 : 256;
            earmark_half_to_float(row + p0, widened, len);
            for (long p = 0; p < len; p++) {
                long r = lrintf(widened[p] * inverse);
                dst[j * k + p0 + p] = (int8_t)(r > 127 ? 127 : (r < -127 ? -127 : r));
            }
        }
    }
}

// MARK: Many rows (the encoder): weights packed once, outputs in vector lanes

// The kernel above sums each (input row, output) pair across the lanes of a register and reduces it at the end, which
// suits a few rows against a large matrix; for the encoder's 1,500 rows the reductions and the weights' widening per
// row block cost more than the products. Here a register holds 16 (AVX-512) or 8 (AVX2) outputs' sums for one input
// row, the weights are widened to int16 once when packed, and each pair of inputs is broadcast as one int32. A lane
// adds at most packed_chunk/2 pair products (each below 2 · 32767 · 127) before it is widened to int64, so every
// sum is exact and equal to the kernel above's, and all three paths give the same bits.
enum { packed_cols = 32, packed_chunk = 256, packed_tile = 48 };

static long packed_pairs(long k) { return (k + 1) / 2; }

long earmark_int8_pack_count(long n, long k) {
    return n > 0 && k > 0 ? (n + packed_cols - 1) / packed_cols * packed_cols * packed_pairs(k) * 2 : 0;
}

void earmark_int8_pack(const int8_t *w, long ldw, long n, long k, int16_t *packed) {
    long pairs = packed_pairs(k), panels = (n + packed_cols - 1) / packed_cols;
    for (long c0 = 0; c0 < panels; c0++) {
        int16_t *panel = packed + c0 * pairs * packed_cols * 2;
        for (long t = 0; t < pairs; t++)
            for (long c = 0; c < packed_cols; c++)
                for (long e = 0; e < 2; e++) {
                    long j = c0 * packed_cols + c, p = 2 * t + e;
                    panel[(t * packed_cols + c) * 2 + e] = j < n && p < k ? w[j * ldw + p] : 0;
                }
    }
}

long earmark_int8_gemm_packed_scratch_count(long k) {
    return k > 0 ? packed_tile * packed_pairs(k) * 2 + packed_tile * 2 : 0;
}

// Quantises up to packed_tile rows into q (each row padded with a zero to an even length) and their scales.
static void quantise_tile(const float *a, long lda, long rows, long k, int16_t *q, float *rowScales) {
    long kp = packed_pairs(k) * 2;
    for (long r = 0; r < rows; r++) {
        rowScales[r] = quantise_row(a + r * lda, k, q + r * kp);
        if (kp > k) q[r * kp + k] = 0;
    }
}

static void store_tile(long rows, long cols, long j0, const int64_t *sums, const float *rowScales, const float *scales,
                       const float *bias, float *out, long ldo, int accumulate) {
    for (long r = 0; r < rows; r++)
        for (long c = 0; c < cols; c++)
            store_result(out + r * ldo + j0 + c, j0 + c, sums[r * packed_cols + c], rowScales[r], scales, bias, accumulate);
}

typedef void (*packed_block_fn)(long mr, long pairs, const int16_t *q, long kp, const int16_t *panel, int64_t *sums);
typedef void (*packed_store_fn)(long rows, long cols, long j0, const int64_t *sums, const float *rowScales,
                                const float *scales, const float *bias, float *out, long ldo, int accumulate);

static void packed_block_portable(long mr, long pairs, const int16_t *q, long kp, const int16_t *panel, int64_t *sums) {
    for (long r = 0; r < mr; r++)
        for (long c = 0; c < packed_cols; c++) {
            int64_t s = 0;
            for (long t = 0; t < pairs; t++)
                s += (int32_t)q[r * kp + 2 * t] * panel[(t * packed_cols + c) * 2] +
                     (int32_t)q[r * kp + 2 * t + 1] * panel[(t * packed_cols + c) * 2 + 1];
            sums[r * packed_cols + c] = s;
        }
}

static void int8_gemm_packed_driver(packed_block_fn block, packed_store_fn store, long blockRows, long rows, long n, long k, const float *a,
                                    long lda, const int16_t *packed, const float *scales, const float *bias, float *out,
                                    long ldo, int accumulate, int16_t *scratch) {
    if (rows <= 0 || n <= 0) return;
    long pairs = packed_pairs(k), kp = pairs * 2, panels = (n + packed_cols - 1) / packed_cols;
    int16_t *q = scratch;
    float rowScales[packed_tile];
    int64_t sums[12 * packed_cols];
    for (long r0 = 0; r0 < rows; r0 += packed_tile) {
        long tile = rows - r0 < packed_tile ? rows - r0 : packed_tile;
        quantise_tile(a + r0 * lda, lda, tile, k, q, rowScales);
        for (long c0 = 0; c0 < panels; c0++) {
            const int16_t *panel = packed + c0 * pairs * packed_cols * 2;
            long cols = n - c0 * packed_cols < packed_cols ? n - c0 * packed_cols : packed_cols;
            for (long b = 0; b < tile; b += blockRows) {
                long mr = tile - b < blockRows ? tile - b : blockRows;
                block(mr, pairs, q + b * kp, kp, panel, sums);
                store(mr, cols, c0 * packed_cols, sums, rowScales + b, scales, bias, out + (r0 + b) * ldo, ldo, accumulate);
            }
        }
    }
}

void earmark_int8_gemm_packed_portable(long rows, long n, long k, const float *a, long lda, const int16_t *packed,
                                       const float *scales, const float *bias, float *out, long ldo, int accumulate,
                                       int16_t *scratch) {
    int8_gemm_packed_driver(packed_block_portable, store_tile, 12, rows, n, k, a, lda, packed, scales, bias, out, ldo, accumulate,
                            scratch);
}

#ifdef EARMARK_X86
// AVX2: the panel's 32 outputs in two halves of 16 (2 registers of 8 lanes), 6 rows at a time: 12 accumulators.
EARMARK_INLINE EARMARK_AVX2 void packed_block_avx2_rows(const int MR, long pairs, const int16_t *q, long kp,
                                                         const int16_t *panel, int64_t *sums) {
    for (int half = 0; half < 2; half++) {
        int64_t total[6][16];
        for (int r = 0; r < MR; r++)
            for (int c = 0; c < 16; c++) total[r][c] = 0;
        for (long t0 = 0; t0 < pairs; t0 += packed_chunk / 2) {
            long t1 = pairs - t0 < packed_chunk / 2 ? pairs : t0 + packed_chunk / 2;
            __m256i acc[6][2];
            for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
            for (long t = t0; t < t1; t++) {
                const int16_t *wp = panel + t * packed_cols * 2 + half * 32;
                __m256i w0 = _mm256_loadu_si256((const __m256i *)wp), w1 = _mm256_loadu_si256((const __m256i *)(wp + 16));
                for (int r = 0; r < MR; r++) {
                    int32_t pair;
                    __builtin_memcpy(&pair, q + r * kp + 2 * t, sizeof pair);
                    __m256i x = _mm256_set1_epi32(pair);
                    acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(x, w0));
                    acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(x, w1));
                }
            }
            for (int r = 0; r < MR; r++) {
                int32_t lanes[16];
                _mm256_storeu_si256((__m256i *)lanes, acc[r][0]);
                _mm256_storeu_si256((__m256i *)(lanes + 8), acc[r][1]);
                for (int c = 0; c < 16; c++) total[r][c] += lanes[c];
            }
        }
        for (int r = 0; r < MR; r++)
            for (int c = 0; c < 16; c++) sums[r * packed_cols + half * 16 + c] = total[r][c];
    }
}

static EARMARK_AVX2 void packed_block_avx2(long mr, long pairs, const int16_t *q, long kp, const int16_t *panel,
                                           int64_t *sums) {
    for (long r = 0; r < mr; r += 6) {
        long m = mr - r < 6 ? mr - r : 6;
        const int16_t *qr = q + r * kp;
        int64_t *s = sums + r * packed_cols;
        switch (m) {
        case 6: packed_block_avx2_rows(6, pairs, qr, kp, panel, s); break;
        case 5: packed_block_avx2_rows(5, pairs, qr, kp, panel, s); break;
        case 4: packed_block_avx2_rows(4, pairs, qr, kp, panel, s); break;
        case 3: packed_block_avx2_rows(3, pairs, qr, kp, panel, s); break;
        case 2: packed_block_avx2_rows(2, pairs, qr, kp, panel, s); break;
        default: packed_block_avx2_rows(1, pairs, qr, kp, panel, s); break;
        }
    }
}

// vpdpwssd in asm: clang otherwise splits most of them into vpmaddwd + vpaddd (twice the instructions), which pays only
// when one accumulator chain is the bottleneck, not with 24 independent ones.
EARMARK_INLINE EARMARK_AVX512 __m512i dpwssd(__m512i acc, __m512i x, __m512i w) {
    __asm__("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
    return acc;
}

// AVX-512: the panel's 32 outputs in 2 registers of 16 lanes, 12 rows at a time: 24 accumulators.
EARMARK_INLINE EARMARK_AVX512 void packed_block_avx512_rows(const int MR, long pairs, const int16_t *q, long kp,
                                                             const int16_t *panel, int64_t *sums) {
    __m512i total[12][4];
    for (int r = 0; r < MR; r++) total[r][0] = total[r][1] = total[r][2] = total[r][3] = _mm512_setzero_si512();
    for (long t0 = 0; t0 < pairs; t0 += packed_chunk / 2) {
        long t1 = pairs - t0 < packed_chunk / 2 ? pairs : t0 + packed_chunk / 2;
        __m512i acc[12][2];
        for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
        for (long t = t0; t < t1; t++) {
            const int16_t *wp = panel + t * packed_cols * 2;
            __m512i w0 = _mm512_loadu_si512((const void *)wp), w1 = _mm512_loadu_si512((const void *)(wp + 32));
            for (int r = 0; r < MR; r++) {
                int32_t pair;
                __builtin_memcpy(&pair, q + r * kp + 2 * t, sizeof pair);
                __m512i x = _mm512_set1_epi32(pair);
                acc[r][0] = dpwssd(acc[r][0], x, w0);
                acc[r][1] = dpwssd(acc[r][1], x, w1);
            }
        }
        for (int r = 0; r < MR; r++)
            for (int h = 0; h < 2; h++) {
                total[r][2 * h] = _mm512_add_epi64(total[r][2 * h], _mm512_cvtepi32_epi64(_mm512_castsi512_si256(acc[r][h])));
                total[r][2 * h + 1] =
                    _mm512_add_epi64(total[r][2 * h + 1], _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(acc[r][h], 1)));
            }
    }
    for (int r = 0; r < MR; r++)
        for (int i = 0; i < 4; i++) _mm512_storeu_si512((void *)(sums + r * packed_cols + 8 * i), total[r][i]);
}

static EARMARK_AVX512 void packed_block_avx512(long mr, long pairs, const int16_t *q, long kp, const int16_t *panel,
                                               int64_t *sums) {
#define EARMARK_CASE(M) \
    case M: packed_block_avx512_rows(M, pairs, q, kp, panel, sums); break;
    switch (mr) {
        EARMARK_CASE(12) EARMARK_CASE(11) EARMARK_CASE(10) EARMARK_CASE(9) EARMARK_CASE(8) EARMARK_CASE(7)
        EARMARK_CASE(6) EARMARK_CASE(5) EARMARK_CASE(4) EARMARK_CASE(3) EARMARK_CASE(2) EARMARK_CASE(1)
        default: __builtin_unreachable();
    }
#undef EARMARK_CASE
}
#endif

#ifdef EARMARK_X86
static int has_avx512_dq(void) { return __builtin_cpu_supports("avx512dq"); }

// store_tile's operations, 8 outputs at a time in the same order (no fused multiply-add), so the same bits.
static __attribute__((target("avx512f,avx512dq,avx512vl,avx2"))) void
store_tile_avx512(long rows, long cols, long j0, const int64_t *sums, const float *rowScales, const float *scales,
                  const float *bias, float *out, long ldo, int accumulate) {
    for (long r = 0; r < rows; r++) {
        __m256 rs = _mm256_set1_ps(rowScales[r]);
        for (long c = 0; c < cols; c += 8) {
            __mmask8 m = (__mmask8)(cols - c >= 8 ? 0xFF : (1u << (cols - c)) - 1);
            float *o = out + r * ldo + j0 + c;
            __m256 base = accumulate ? _mm256_maskz_loadu_ps(m, o) : _mm256_setzero_ps();
            if (bias) base = _mm256_add_ps(base, _mm256_maskz_loadu_ps(m, bias + j0 + c));
            __m256 scale = _mm256_mul_ps(rs, _mm256_maskz_loadu_ps(m, scales + j0 + c));
            __m256 product = _mm256_mul_ps(_mm512_cvtepi64_ps(_mm512_loadu_si512((const void *)(sums + r * packed_cols + c))), scale);
            _mm256_mask_storeu_ps(o, m, _mm256_add_ps(base, product));
        }
    }
}
#endif

void earmark_int8_gemm_packed_avx2(long rows, long n, long k, const float *a, long lda, const int16_t *packed,
                                   const float *scales, const float *bias, float *out, long ldo, int accumulate,
                                   int16_t *scratch) {
#ifdef EARMARK_X86
    if (earmark_has_avx2_fma_f16c()) {
        int8_gemm_packed_driver(packed_block_avx2, store_tile, 12, rows, n, k, a, lda, packed, scales, bias, out, ldo, accumulate,
                                scratch);
        return;
    }
#endif
    earmark_int8_gemm_packed_portable(rows, n, k, a, lda, packed, scales, bias, out, ldo, accumulate, scratch);
}

void earmark_int8_gemm_packed_avx512(long rows, long n, long k, const float *a, long lda, const int16_t *packed,
                                     const float *scales, const float *bias, float *out, long ldo, int accumulate,
                                     int16_t *scratch) {
#ifdef EARMARK_X86
    if (has_avx512_vnni()) {
        int8_gemm_packed_driver(packed_block_avx512, has_avx512_dq() ? store_tile_avx512 : store_tile, 12, rows, n, k, a, lda, packed, scales, bias, out, ldo, accumulate,
                                scratch);
        return;
    }
#endif
    earmark_int8_gemm_packed_avx2(rows, n, k, a, lda, packed, scales, bias, out, ldo, accumulate, scratch);
}

void earmark_int8_gemm_packed(long rows, long n, long k, const float *a, long lda, const int16_t *packed,
                              const float *scales, const float *bias, float *out, long ldo, int accumulate,
                              int16_t *scratch) {
    earmark_int8_gemm_packed_avx512(rows, n, k, a, lda, packed, scales, bias, out, ldo, accumulate, scratch);
}
