#include <stdint.h>
void loomrt_fine(int64_t n, const void *x);
static inline void loomrt_inline(int64_t n) { (void)n; }
