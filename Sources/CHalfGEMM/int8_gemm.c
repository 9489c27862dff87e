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

// q[p] = round-to-nearest-even(x[p] · 32767 / max|x|); returns the row's scale max|x| / 32767 (0 for a row of
// zeros, NaN when the row holds a NaN or an infinity: its outputs are then NaN, as a Float32 product would be).
static float quantise_row(const float *x, long k, int16_t *q) {
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
        float s = quantise_row(a + r * lda, k, q + r * k);
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
            // 512 bytes ahead along each weight row (as the float16 kernel's 1 kB: the same number of inputs ahead).
            _mm_prefetch((const char *)((uintptr_t)(w + c * ldw + p) + 512), _MM_HINT_T0);
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
