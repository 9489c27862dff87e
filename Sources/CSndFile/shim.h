// libsndfile. This shim has no stable API of its own.
#include <sndfile.h>
