#ifndef EARMARK_CHALFGEMM_H
#define EARMARK_CHALFGEMM_H

#include <stdint.h>

// Matrix products with float16 weights and Float32 inputs, sums and outputs, for few input rows (Whisper's decoder
// steps: 1 to a few dozen rows against weight matrices of hundreds of kB to 53 MB, read once per call), and the
// softmax of Whisper's attention.
//
// For r < rows and j < n:
//     out[r·ldo + j] = (accumulate ? out[r·ldo + j] : 0) + (bias ? bias[j] : 0) + Σ_p a[r·lda + p] · w[j·ldw + p]
// with w[j·ldw + p] an IEEE binary16 bit pattern (row-major n × k, row j being output j's weights).
// The sum runs in Float32 in an order of its own (not a reference order): results agree with a plain loop up to
// rounding. Chooses at run time AVX2 + FMA + F16C code when the CPU (and OS) has them, portable C otherwise.
void earmark_half_gemm(long rows, long n, long k, const float *a, long lda, const uint16_t *w, long ldw,
                       const float *bias, float *out, long ldo, int accumulate);

// The same product with the portable C code only (for tests: both paths against one reference on any CPU).
void earmark_half_gemm_portable(long rows, long n, long k, const float *a, long lda, const uint16_t *w, long ldw,
                                const float *bias, float *out, long ldo, int accumulate);

// dst[i] = the binary16 value src[i] as a Float32 (exact: every binary16 value is a Float32 value).
void earmark_half_to_float(const uint16_t *src, float *dst, long count);

// dst[i] = src[i] rounded to the nearest binary16 value (ties to even), as its bit pattern; magnitudes of 65504 and
// more (infinities too) give ±65504, the largest finite one, and a NaN gives a NaN. The same bits on every path.
void earmark_float_to_half(const float *src, uint16_t *dst, long count);
void earmark_float_to_half_portable(const float *src, uint16_t *dst, long count);

// The code earmark_half_gemm (and earmark_softmax) runs on this CPU: "avx2-fma-f16c" or "portable".
const char *earmark_half_gemm_path(void);

// In place: x[i] = exp(x[i] − max) / Σ exp(x[j] − max) over count > 0 values (the softmax of Whisper's attention).
// With AVX2 + FMA, 8 values at a time with an exp of its own (within 2 units in the last place of expf; inputs more
// than 87.3 below the maximum give 0); otherwise libm's expf, one value at a time.
void earmark_softmax(float *x, long count);

// earmark_softmax with the portable code only (for tests).
void earmark_softmax_portable(float *x, long count);

// In place: x[i] = x[i]/2 · (1 + erf(x[i]/√2)) (GELU with the error function, as Whisper's). With AVX2 + FMA, 8 values at
// a time with erfc from Abramowitz and Stegun 7.1.26 (absolute error below 1.5 × 10⁻⁷, so each result is within
// about 3 × 10⁻⁷ · |x| of the exact one) and the softmax's exp; otherwise libm's erff, one value at a time.
void earmark_gelu(float *x, long count);

// earmark_gelu with the portable code only (for tests).
void earmark_gelu_portable(float *x, long count);

// log Σ exp(x[i]) over count values (the normaliser of a row of logits; values may be −∞): −∞ when all are (or count
// ≤ 0). With AVX2 + FMA, the softmax's exp 8 values at a time, blocks of 1,024 summed in float and the blocks in
// double; otherwise libm's exp, summed in double. The two agree to about 10⁻⁶ of the sum.
double earmark_log_sum_exp(const float *x, long count);

// earmark_log_sum_exp with the portable code only (for tests).
double earmark_log_sum_exp_portable(const float *x, long count);

// Matrix products with int8 weights and a Float32 scale per weight row (per output), for few input rows: the weight of
// output j for input p is scales[j] · w[j·ldw + p]. Each input row r is quantised to int16 with a scale of its own,
// s_r = max_p |a[r·lda + p]| / 32767 (q = a / s_r rounded to nearest even), the products q · w are summed exactly in
// integers, and
//     out[r·ldo + j] = (accumulate ? out[r·ldo + j] : 0) + (bias ? bias[j] : 0) + (float)Σ_p q[r][p] · w[j·ldw + p] · (s_r · scales[j])
// (a row holding a NaN or an infinity gives NaN). The sums are exact and the rest is the same code on every path, so
// the AVX-512 code (AVX-512 BW + VNNI, `vpdpwssd`), the AVX2 code (chosen at run time, the first the CPU runs, as for
// earmark_half_gemm) and the portable code give the same bits on every CPU.
// `scratch` holds earmark_int8_gemm_scratch_count(rows, k) int16 values (the quantised rows and their scales).
void earmark_int8_gemm(long rows, long n, long k, const float *a, long lda, const int8_t *w, long ldw, const float *scales,
                       const float *bias, float *out, long ldo, int accumulate, int16_t *scratch);

// The same product with the portable C code only (for tests).
void earmark_int8_gemm_portable(long rows, long n, long k, const float *a, long lda, const int8_t *w, long ldw,
                                const float *scales, const float *bias, float *out, long ldo, int accumulate,
                                int16_t *scratch);

// The same product with the AVX2 code (the portable code on a CPU without AVX2, FMA and F16C), and with the AVX-512
// VNNI code (the AVX2 or portable code on a CPU without it): for tests, which check that every path gives the same bits.
void earmark_int8_gemm_avx2(long rows, long n, long k, const float *a, long lda, const int8_t *w, long ldw,
                            const float *scales, const float *bias, float *out, long ldo, int accumulate, int16_t *scratch);
void earmark_int8_gemm_avx512(long rows, long n, long k, const float *a, long lda, const int8_t *w, long ldw,
                              const float *scales, const float *bias, float *out, long ldo, int accumulate, int16_t *scratch);

// The code earmark_int8_gemm runs on this CPU: "avx512-vnni", "avx2" or "portable".
const char *earmark_int8_gemm_path(void);

// int16 values of scratch earmark_int8_gemm needs for `rows` input rows of `k` values.
long earmark_int8_gemm_scratch_count(long rows, long k);

// The same product for many input rows (the encoder's 1,500 positions), on weights packed once by earmark_int8_pack:
// the same quantisation of each input row, the same exact integer sums and the same final scaling as earmark_int8_gemm,
// so the results equal earmark_int8_gemm's bit for bit on every path (AVX-512 VNNI, AVX2, portable). The packing holds
// each weight widened to int16, in panels of 32 outputs with pairs of inputs side by side (zeros past n and k):
// earmark_int8_pack_count(n, k) values. `scratch` holds earmark_int8_gemm_packed_scratch_count(k) int16 values.
long earmark_int8_pack_count(long n, long k);
void earmark_int8_pack(const int8_t *w, long ldw, long n, long k, int16_t *packed);
long earmark_int8_gemm_packed_scratch_count(long k);
void earmark_int8_gemm_packed(long rows, long n, long k, const float *a, long lda, const int16_t *packed,
                              const float *scales, const float *bias, float *out, long ldo, int accumulate,
                              int16_t *scratch);
// The packed product with one path forced (a path the CPU lacks falls back to the next), for tests.
void earmark_int8_gemm_packed_portable(long rows, long n, long k, const float *a, long lda, const int16_t *packed,
                                       const float *scales, const float *bias, float *out, long ldo, int accumulate,
                                       int16_t *scratch);
void earmark_int8_gemm_packed_avx2(long rows, long n, long k, const float *a, long lda, const int16_t *packed,
                                   const float *scales, const float *bias, float *out, long ldo, int accumulate,
                                   int16_t *scratch);
void earmark_int8_gemm_packed_avx512(long rows, long n, long k, const float *a, long lda, const int16_t *packed,
                                     const float *scales, const float *bias, float *out, long ldo, int accumulate,
                                     int16_t *scratch);

// Per-row int8 quantisation of an n × k matrix of finite binary16 values (row-major, rows contiguous):
// scales[j] = max_p |w[j][p]| / 127 and dst[j·k + p] = w[j][p] · 127 / max_p |w[j][p]| rounded to nearest even, in
// −127…127 (a row of zeros gives zeros and scale 0). Each value is then within scales[j] / 2 of the original.
void earmark_quantise_half_rows(const uint16_t *src, long n, long k, int8_t *dst, float *scales);

// Cross-attention of few query rows (a decoder step's beams) against one head's keys and values, which are packed once
// per window so that every step reads them in place, in the order the kernels walk them:
// - keys: blocks of 16 positions, each block headSize × 16 values (a dimension's 16 positions side by side),
//   packed[(t / 16)·16·headSize + p·16 + t % 16] = keys[t·ldk + p], zero past `count`;
// - values: column blocks of 16, each padded × 16 values (a position's 16 columns side by side),
//   packed[(c / 16)·16·padded + t·16 + c % 16] = values[t·ldv + c], zero past `count` and past `headSize`;
// with padded = earmark_attention_padded(count), count rounded up to a multiple of 16. Each packing holds
// earmark_attention_packed_count(count, headSize) values (padded × headSize rounded up to a multiple of 16).
long earmark_attention_padded(long count);
long earmark_attention_packed_count(long count, long headSize);
void earmark_attention_pack_keys(const float *keys, long ldk, long count, long headSize, float *packed);
void earmark_attention_pack_values(const float *values, long ldv, long count, long headSize, float *packed);

// scores[r·lds + t] = (Σ_p q[r·ldq + p] · key[t][p]) · scale for r < rows, t < count, the sum a chain of fused
// multiply-adds from 0 in the order p = 0, 1, … (so the AVX2 + FMA code, chosen at run time, and the portable code, with
// fmaf, give the same bits).
void earmark_attention_scores(long rows, long count, long headSize, const float *q, long ldq, const float *packedKeys,
                              float scale, float *scores, long lds);

// out[r·ldo + c] = Σ_t weights[r·ldw + t] · value[t][c] for r < rows, c < headSize, a chain of fused multiply-adds from 0
// in the order t = 0, 1, … (same bits on both paths, as the scores).
void earmark_attention_values(long rows, long count, long headSize, const float *weights, long ldw,
                              const float *packedValues, float *out, long ldo);

// The two products with the portable code only (for tests).
void earmark_attention_scores_portable(long rows, long count, long headSize, const float *q, long ldq,
                                       const float *packedKeys, float scale, float *scores, long lds);
void earmark_attention_values_portable(long rows, long count, long headSize, const float *weights, long ldw,
                                       const float *packedValues, float *out, long ldo);

// The same with keys and values held as binary16 (half the bytes a decoder step reads): the packings take binary16
// bit patterns (earmark_float_to_half's) in the layout above and write that many 2-byte values to `packed`; the
// products widen each value to Float32 exactly as they read it, then sum as above (the same bits on both paths).
void earmark_attention_pack_keys_half(const uint16_t *keys, long ldk, long count, long headSize, void *packed);
void earmark_attention_pack_values_half(const uint16_t *values, long ldv, long count, long headSize, void *packed);
void earmark_attention_scores_half(long rows, long count, long headSize, const float *q, long ldq, const void *packedKeys,
                                   float scale, float *scores, long lds);
void earmark_attention_values_half(long rows, long count, long headSize, const float *weights, long ldw,
                                   const void *packedValues, float *out, long ldo);
void earmark_attention_scores_half_portable(long rows, long count, long headSize, const float *q, long ldq,
                                            const void *packedKeys, float scale, float *scores, long lds);
void earmark_attention_values_half_portable(long rows, long count, long headSize, const float *weights, long ldw,
                                            const void *packedValues, float *out, long ldo);

// Self-attention of `count` positions (the encoder's queries, keys and values, as its projections leave them: row t of
// head h at q + t·ld + h·headSize, k + …, v + …) for `heads` heads of `headSize`:
//     out[t·ldo + h·headSize + c] = Σ_u softmax_u(scale · Σ_p q[t][h][p] · k[u][h][p]) · v[u][h][c].
// A score is a chain of fused multiply-adds from 0 over p = 0, 1, … times `scale`, an output a chain over u = 0, 1, …;
// the softmax is earmark_softmax's. No score matrix is made: per head the keys are packed and the values copied once,
// then 48 queries at a time are scored, normalised and applied while their scores are in cache. Chooses at run time
// AVX-512 F code, else AVX2 + FMA code (both when headSize is a multiple of 16), else portable C; the AVX-512 and AVX2
// code give the same bits (same chains, the same AVX2 softmax), the portable code the same chains with libm's expf in
// the softmax (earmark_softmax_portable), so within the softmax's rounding of them.
// `scratch` holds earmark_self_attention_scratch_count(count, headSize) floats.
long earmark_self_attention_scratch_count(long count, long headSize);
void earmark_self_attention(long count, long heads, long headSize, const float *q, const float *k, const float *v,
                            long ld, float scale, float *out, long ldo, float *scratch);
// One path forced (a path the CPU lacks, or a headSize it does not take, falls back to the next), for tests.
void earmark_self_attention_portable(long count, long heads, long headSize, const float *q, const float *k,
                                     const float *v, long ld, float scale, float *out, long ldo, float *scratch);
void earmark_self_attention_avx2(long count, long heads, long headSize, const float *q, const float *k, const float *v,
                                 long ld, float scale, float *out, long ldo, float *scratch);
void earmark_self_attention_avx512(long count, long heads, long headSize, const float *q, const float *k,
                                   const float *v, long ld, float scale, float *out, long ldo, float *scratch);
// The code earmark_self_attention runs on this CPU: "avx512", "avx2" or "portable".
const char *earmark_self_attention_path(void);

#endif
