// A hint that memory at `p` will be read soon (the compiler's builtin; never faults, even on a bad address).
static inline void earmark_prefetch(const void *p) { __builtin_prefetch(p, 0, 3); }
