// libopus and libogg, for decoding Ogg Opus files without libsndfile (see OggOpusSource).
#include <ogg/ogg.h>
#include <opus.h>

// OPUS_SET_GAIN and OPUS_RESET_STATE are variadic macros, which Swift cannot call.
static inline int earmark_opus_set_gain(OpusDecoder *d, int q8) { return opus_decoder_ctl(d, OPUS_SET_GAIN(q8)); }
