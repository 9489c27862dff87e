#ifndef EARMARK_CHALFGEMM_DISPATCH_H
#define EARMARK_CHALFGEMM_DISPATCH_H
// Whether the CPU and OS run AVX2, FMA and F16C code (the library's fast paths).
int earmark_has_avx2_fma_f16c(void);
#endif
