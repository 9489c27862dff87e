#ifndef EARMARK_CHALFGEMM_DISPATCH_H
#define EARMARK_CHALFGEMM_DISPATCH_H
// Whether the CPU and OS run AVX2, FMA and F16C code (the library's fast paths).
int earmark_has_avx2_fma_f16c(void);
#if defined(__x86_64__) || defined(__i386__)
// earmark_softmax's AVX2 code (for a caller that has checked earmark_has_avx2_fma_f16c(); the encoder's
// self-attention runs it from its AVX2 and its AVX-512 code, so that the two give the same bits).
void earmark_softmax_avx2(float *x, long count);
// The same bits with AVX-512 F (for a caller that has checked the CPU has it).
void earmark_softmax_avx512(float *x, long count);
#endif
#endif
