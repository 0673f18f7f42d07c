#include <stdint.h>
void loomrt_fine(int64_t n, const void *x);
void loomrt_odd(struct thing t);
