// Self-attention of the encoder's positions (every position a query against every key and value of one head); see
// include/CHalfGEMM.h.
//
// Per head, the keys are packed once (blocks of 16 positions, the cross-attention's layout) and the values (and each
// block's queries) copied to contiguous rows; then 48 queries at a time: their scores against all positions (into a row block that stays in
// cache, written only, never zero-filled), the softmax of each row, and the weighted sum of the values. A score is
// one chain of fused multiply-adds over the head's dimensions in the order p = 0, 1, … started from 0, then times
// the scale; an output value one chain over the positions t = 0, 1, …. The AVX-512 and AVX2 code run such chains
// side by side in vector lanes and share the AVX2 softmax, so they give the same bits; the portable code runs the
// same chains with fmaf and libm's expf in its softmax (earmark_softmax_portable), so it differs from them by the
// softmax's rounding only.
#include "CHalfGEMM.h"
#include "dispatch.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { sa_block = 16, sa_rows = 48 };   // positions per packed key block; queries per row block

long earmark_self_attention_scratch_count(long count, long headSize) {
    if (count <= 0 || headSize <= 0) return 0;
    return earmark_attention_packed_count(count, headSize) + count * headSize + sa_rows * headSize +
           sa_rows * earmark_attention_padded(count);
}

// MARK: Portable code

static void self_attention_portable_head(long count, long headSize, const float *q, const float *k, const float *v,
                                         long ld, float scale, float *out, long ldo, float *scores) {
    for (long r = 0; r < count; r++) {
        for (long t = 0; t < count; t++) {
            float acc = 0;
            for (long p = 0; p < headSize; p++) acc = fmaf(q[r * ld + p], k[t * ld + p], acc);
            scores[t] = acc * scale;
        }
        earmark_softmax_portable(scores, count);
        for (long c = 0; c < headSize; c++) {
            float acc = 0;
            for (long t = 0; t < count; t++) acc = fmaf(scores[t], v[t * ld + c], acc);
            out[r * ldo + c] = acc;
        }
    }
}

void earmark_self_attention_portable(long count, long heads, long headSize, const float *q, const float *k,
                                     const float *v, long ld, float scale, float *out, long ldo, float *scratch) {
    if (count <= 0 || heads <= 0 || headSize <= 0) return;
    for (long h = 0; h < heads; h++)
        self_attention_portable_head(count, headSize, q + h * headSize, k + h * headSize, v + h * headSize, ld, scale,
                                     out + h * headSize, ldo, scratch);
}

// MARK: Vector code

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EARMARK_X86 1
#define EARMARK_AVX2 __attribute__((target("avx2,fma")))
#define EARMARK_AVX512 __attribute__((target("avx512f,avx2,fma")))
#define EARMARK_INLINE static inline __attribute__((always_inline))

// Scores of MR queries (at most 8) against NB blocks of 16 positions (at most 3): MR × NB accumulators of 16 lanes.
// Stores all 16 · NB values of each row (past `count` they are 0 and never read).
EARMARK_INLINE EARMARK_AVX512 void scores_avx512(const int MR, const int NB, long headSize, const float *q, long ldq,
                                                 const float *keys, float scale, float *scores, long lds) {
    __m512 acc[8][3];
    for (int r = 0; r < MR; r++)
        for (int b = 0; b < NB; b++) acc[r][b] = _mm512_setzero_ps();
    for (long p = 0; p < headSize; p++) {
        __m512 kb[3];
        for (int b = 0; b < NB; b++) kb[b] = _mm512_loadu_ps(keys + b * sa_block * headSize + p * sa_block);
        for (int r = 0; r < MR; r++) {
            __m512 x = _mm512_set1_ps(q[r * ldq + p]);
            for (int b = 0; b < NB; b++) acc[r][b] = _mm512_fmadd_ps(x, kb[b], acc[r][b]);
        }
    }
    __m512 s = _mm512_set1_ps(scale);
    for (int r = 0; r < MR; r++)
        for (int b = 0; b < NB; b++) _mm512_storeu_ps(scores + r * lds + b * sa_block, _mm512_mul_ps(acc[r][b], s));
}

// out[r][c] for MR rows (at most 6) and NC column blocks of 16 (at most 4): weights w (row stride ldw), values in
// contiguous rows of ldv.
EARMARK_INLINE EARMARK_AVX512 void values_avx512(const int MR, const int NC, long count, const float *w, long ldw,
                                                 const float *values, long ldv, float *out, long ldo) {
    __m512 acc[6][4];
    for (int r = 0; r < MR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = _mm512_setzero_ps();
    for (long t = 0; t < count; t++) {
        __m512 vc[4];
        for (int c = 0; c < NC; c++) vc[c] = _mm512_loadu_ps(values + t * ldv + c * sa_block);
        for (int r = 0; r < MR; r++) {
            __m512 x = _mm512_set1_ps(w[r * ldw + t]);
            for (int c = 0; c < NC; c++) acc[r][c] = _mm512_fmadd_ps(x, vc[c], acc[r][c]);
        }
    }
    for (int r = 0; r < MR; r++)
        for (int c = 0; c < NC; c++) _mm512_storeu_ps(out + r * ldo + c * sa_block, acc[r][c]);
}

static EARMARK_AVX512 void scores_rows_avx512(long rows, long count, long headSize, const float *q, long ldq,
                                              const float *packedKeys, float scale, float *scores, long lds) {
    long blocks = earmark_attention_padded(count) / sa_block;
    for (long r0 = 0; r0 < rows; r0 += 8) {
        int mr = rows - r0 < 8 ? (int)(rows - r0) : 8;
        for (long b0 = 0; b0 < blocks; b0 += 3) {
            int nb = blocks - b0 < 3 ? (int)(blocks - b0) : 3;
            const float *qr = q + r0 * ldq, *kb = packedKeys + b0 * sa_block * headSize;
            float *s = scores + r0 * lds + b0 * sa_block;
            switch (mr * 4 + nb) {
#define EARMARK_SCORES(M)                                                                                              \
    case (M) * 4 + 1: scores_avx512(M, 1, headSize, qr, ldq, kb, scale, s, lds); break;                                \
    case (M) * 4 + 2: scores_avx512(M, 2, headSize, qr, ldq, kb, scale, s, lds); break;                                \
    case (M) * 4 + 3: scores_avx512(M, 3, headSize, qr, ldq, kb, scale, s, lds); break;
                EARMARK_SCORES(1) EARMARK_SCORES(2) EARMARK_SCORES(3) EARMARK_SCORES(4)
                EARMARK_SCORES(5) EARMARK_SCORES(6) EARMARK_SCORES(7) EARMARK_SCORES(8)
#undef EARMARK_SCORES
                default: break;
            }
        }
    }
}

static EARMARK_AVX512 void values_rows_avx512(long rows, long count, long headSize, const float *w, long ldw,
                                              const float *values, float *out, long ldo) {
    for (long r0 = 0; r0 < rows; r0 += 6) {
        int mr = rows - r0 < 6 ? (int)(rows - r0) : 6;
        for (long c0 = 0; c0 < headSize; c0 += 4 * sa_block) {
            long left = (headSize - c0) / sa_block;
            int nc = left < 4 ? (int)left : 4;
            const float *wr = w + r0 * ldw, *vc = values + c0;
            float *o = out + r0 * ldo + c0;
            switch (mr * 5 + nc) {
#define EARMARK_VALUES(M)                                                                                              \
    case (M) * 5 + 1: values_avx512(M, 1, count, wr, ldw, vc, headSize, o, ldo); break;                                \
    case (M) * 5 + 2: values_avx512(M, 2, count, wr, ldw, vc, headSize, o, ldo); break;                                \
    case (M) * 5 + 3: values_avx512(M, 3, count, wr, ldw, vc, headSize, o, ldo); break;                                \
    case (M) * 5 + 4: values_avx512(M, 4, count, wr, ldw, vc, headSize, o, ldo); break;
                EARMARK_VALUES(1) EARMARK_VALUES(2) EARMARK_VALUES(3) EARMARK_VALUES(4) EARMARK_VALUES(5) EARMARK_VALUES(6)
#undef EARMARK_VALUES
                default: break;
            }
        }
    }
}

// The AVX2 code: 6 queries × 16 positions (scores) and 6 rows × 16 columns (values), 12 accumulators of 8 lanes.
EARMARK_INLINE EARMARK_AVX2 void scores_avx2(const int MR, long headSize, const float *q, long ldq, const float *keys,
                                             float scale, float *scores, long lds) {
    __m256 acc[6][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (long p = 0; p < headSize; p++) {
        __m256 k0 = _mm256_loadu_ps(keys + p * sa_block), k1 = _mm256_loadu_ps(keys + p * sa_block + 8);
        for (int r = 0; r < MR; r++) {
            __m256 x = _mm256_broadcast_ss(q + r * ldq + p);
            acc[r][0] = _mm256_fmadd_ps(x, k0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, k1, acc[r][1]);
        }
    }
    __m256 s = _mm256_set1_ps(scale);
    for (int r = 0; r < MR; r++) {
        _mm256_storeu_ps(scores + r * lds, _mm256_mul_ps(acc[r][0], s));
        _mm256_storeu_ps(scores + r * lds + 8, _mm256_mul_ps(acc[r][1], s));
    }
}

// Positions [from, to) of the chains: started from 0 when from is 0, else from the sums stored in out (the same chains in
// the same order, so the same bits as one pass over all positions).
EARMARK_INLINE EARMARK_AVX2 void values_avx2(const int MR, long from, long to, const float *w, long ldw, const float *values,
                                             long ldv, float *out, long ldo) {
    __m256 acc[6][2];
    for (int r = 0; r < MR; r++) {
        if (from == 0) {
            acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        } else {
            acc[r][0] = _mm256_loadu_ps(out + r * ldo);
            acc[r][1] = _mm256_loadu_ps(out + r * ldo + 8);
        }
    }
    for (long t = from; t < to; t++) {
        __m256 v0 = _mm256_loadu_ps(values + t * ldv), v1 = _mm256_loadu_ps(values + t * ldv + 8);
        for (int r = 0; r < MR; r++) {
            __m256 x = _mm256_broadcast_ss(w + r * ldw + t);
            acc[r][0] = _mm256_fmadd_ps(x, v0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(x, v1, acc[r][1]);
        }
    }
    for (int r = 0; r < MR; r++) {
        _mm256_storeu_ps(out + r * ldo, acc[r][0]);
        _mm256_storeu_ps(out + r * ldo + 8, acc[r][1]);
    }
}

// The AVX2 code walks the positions in spans of sa_span for all rows (a span's keys or values, 64 kB at head size 64,
// stay in the core's cache while every group of 6 rows reads them; the whole head's, 384 kB, did not).
enum { sa_span = 256 };

static EARMARK_AVX2 void scores_rows_avx2(long rows, long count, long headSize, const float *q, long ldq,
                                          const float *packedKeys, float scale, float *scores, long lds) {
    long padded = earmark_attention_padded(count);
    for (long span = 0; span < padded; span += sa_span) {
        long end = padded - span < sa_span ? padded : span + sa_span;
        for (long r0 = 0; r0 < rows; r0 += 6) {
            int mr = rows - r0 < 6 ? (int)(rows - r0) : 6;
            for (long t0 = span; t0 < end; t0 += sa_block) {
                const float *qr = q + r0 * ldq, *kb = packedKeys + t0 * headSize;
                float *s = scores + r0 * lds + t0;
                switch (mr) {
                    case 1: scores_avx2(1, headSize, qr, ldq, kb, scale, s, lds); break;
                    case 2: scores_avx2(2, headSize, qr, ldq, kb, scale, s, lds); break;
                    case 3: scores_avx2(3, headSize, qr, ldq, kb, scale, s, lds); break;
                    case 4: scores_avx2(4, headSize, qr, ldq, kb, scale, s, lds); break;
                    case 5: scores_avx2(5, headSize, qr, ldq, kb, scale, s, lds); break;
                    default: scores_avx2(6, headSize, qr, ldq, kb, scale, s, lds); break;
                }
            }
        }
    }
}

static EARMARK_AVX2 void values_rows_avx2(long rows, long count, long headSize, const float *w, long ldw,
                                          const float *values, float *out, long ldo) {
    for (long from = 0; from < count; from += sa_span) {
        long to = count - from < sa_span ? count : from + sa_span;
        for (long r0 = 0; r0 < rows; r0 += 6) {
            int mr = rows - r0 < 6 ? (int)(rows - r0) : 6;
            for (long c0 = 0; c0 < headSize; c0 += sa_block) {
                const float *wr = w + r0 * ldw, *vc = values + c0;
                float *o = out + r0 * ldo + c0;
                switch (mr) {
                    case 1: values_avx2(1, from, to, wr, ldw, vc, headSize, o, ldo); break;
                    case 2: values_avx2(2, from, to, wr, ldw, vc, headSize, o, ldo); break;
                    case 3: values_avx2(3, from, to, wr, ldw, vc, headSize, o, ldo); break;
                    case 4: values_avx2(4, from, to, wr, ldw, vc, headSize, o, ldo); break;
                    case 5: values_avx2(5, from, to, wr, ldw, vc, headSize, o, ldo); break;
                    default: values_avx2(6, from, to, wr, ldw, vc, headSize, o, ldo); break;
                }
            }
        }
    }
}

typedef void (*scores_rows_fn)(long, long, long, const float *, long, const float *, float, float *, long);
typedef void (*values_rows_fn)(long, long, long, const float *, long, const float *, float *, long);

// One head with the vector code (headSize a multiple of 16): pack the keys, copy the values to contiguous rows (so
// the values' loop walks one stream, not a row of 6 kB per position), then 48 queries at a time.
static void self_attention_vector_head(scores_rows_fn scoresRows, values_rows_fn valuesRows, void (*softmax)(float *, long),
                                       long count, long headSize,
                                       const float *q, const float *k, const float *v, long ld, float scale, float *out,
                                       long ldo, float *scratch) {
    long padded = earmark_attention_padded(count);
    float *keys = scratch, *values = keys + earmark_attention_packed_count(count, headSize);
    float *queries = values + count * headSize, *scores = queries + sa_rows * headSize;
    earmark_attention_pack_keys(k, ld, count, headSize, keys);
    for (long t = 0; t < count; t++) memcpy(values + t * headSize, v + t * ld, (size_t)headSize * sizeof(float));
    for (long r0 = 0; r0 < count; r0 += sa_rows) {
        long rows = count - r0 < sa_rows ? count - r0 : sa_rows;
        for (long r = 0; r < rows; r++)
            memcpy(queries + r * headSize, q + (r0 + r) * ld, (size_t)headSize * sizeof(float));
        scoresRows(rows, count, headSize, queries, headSize, keys, scale, scores, padded);
        for (long r = 0; r < rows; r++) softmax(scores + r * padded, count);
        valuesRows(rows, count, headSize, scores, padded, values, out + r0 * ldo, ldo);
    }
}

static void self_attention_vector(scores_rows_fn scoresRows, values_rows_fn valuesRows, void (*softmax)(float *, long),
                                  long count, long heads,
                                  long headSize, const float *q, const float *k, const float *v, long ld, float scale,
                                  float *out, long ldo, float *scratch) {
    for (long h = 0; h < heads; h++)
        self_attention_vector_head(scoresRows, valuesRows, softmax, count, headSize, q + h * headSize, k + h * headSize,
                                   v + h * headSize, ld, scale, out + h * headSize, ldo, scratch);
}

static int has_avx512f(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && earmark_has_avx2_fma_f16c();
}
#else
static int has_avx512f(void) { return 0; }
#endif

// MARK: Dispatch

void earmark_self_attention_avx2(long count, long heads, long headSize, const float *q, const float *k, const float *v,
                                 long ld, float scale, float *out, long ldo, float *scratch) {
    if (count <= 0 || heads <= 0 || headSize <= 0) return;
#ifdef EARMARK_X86
    if (headSize % sa_block == 0 && earmark_has_avx2_fma_f16c()) {
        self_attention_vector(scores_rows_avx2, values_rows_avx2, earmark_softmax_avx2, count, heads, headSize, q, k, v, ld, scale, out, ldo,
                              scratch);
        return;
    }
#endif
    earmark_self_attention_portable(count, heads, headSize, q, k, v, ld, scale, out, ldo, scratch);
}

void earmark_self_attention_avx512(long count, long heads, long headSize, const float *q, const float *k,
                                   const float *v, long ld, float scale, float *out, long ldo, float *scratch) {
    if (count <= 0 || heads <= 0 || headSize <= 0) return;
#ifdef EARMARK_X86
    if (headSize % sa_block == 0 && has_avx512f()) {
        self_attention_vector(scores_rows_avx512, values_rows_avx512, earmark_softmax_avx512, count, heads, headSize, q, k, v, ld, scale, out,
                              ldo, scratch);
        return;
    }
#endif
    earmark_self_attention_avx2(count, heads, headSize, q, k, v, ld, scale, out, ldo, scratch);
}

void earmark_self_attention(long count, long heads, long headSize, const float *q, const float *k, const float *v,
                            long ld, float scale, float *out, long ldo, float *scratch) {
    earmark_self_attention_avx512(count, heads, headSize, q, k, v, ld, scale, out, ldo, scratch);
}

const char *earmark_self_attention_path(void) {
    return has_avx512f() ? "avx512" : (earmark_has_avx2_fma_f16c() ? "avx2" : "portable");
}
