// libsoxr resampler. This shim has no stable API of its own.
#include <soxr.h>
