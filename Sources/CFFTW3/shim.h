// FFTW3 single-precision API. This shim has no stable API of its own.
#include <fftw3.h>
