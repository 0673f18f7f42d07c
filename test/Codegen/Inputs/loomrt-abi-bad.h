/* A header loomrt_abi.py must refuse rather than skip a function of. */
#include <stdint.h>
void loomrt_fine(int64_t n, const void *x);
/* Unnamed parameter. */
void loomrt_unnamed(int64_t n, const void *);
