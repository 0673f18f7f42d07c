/*===- CAbiTest.c - loomrt.h is a plain C ABI -----------------------------===*\
|*                                                                            *|
|* Compiled as C99 with -pedantic and linked against libloomrt_cpu alone      *|
|* (no MPI, BLAS or C++ runtime flags), the way compiled per-rank programs    *|
|* link: checks that the header is valid C and that a few entry points work   *|
|* across the boundary.                                                       *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#include "loomrt/loomrt.h"

#include <math.h>
#include <stdio.h>

static int failures = 0;

static void expect(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAIL: %s\n", what);
    ++failures;
  }
}

int main(void) {
  /* y = x W^T + b with x [2,3], W [2,3]. */
  float *x = (float *)loomrt_alloc(6 * sizeof(float));
  float W[6] = {1, 0, 0, 0, 1, 1};
  float b[2] = {0.5f, -1.0f};
  float y[4];
  int i;
  for (i = 0; i < 6; ++i)
    x[i] = (float)(i + 1);
  loomrt_linear_forward(LOOMRT_F32, 2, 2, 3, x, W, b, y);
  expect(y[0] == 1.5f && y[1] == 4.0f && y[2] == 4.5f && y[3] == 10.0f,
         "linear forward");

  /* bf16 round trip of a value that needs rounding: 1 + 2^-9 -> 1. */
  {
    float v = 1.001953125f, back = 0;
    uint16_t h = 0;
    loomrt_cast(LOOMRT_F32, &v, LOOMRT_BF16, &h, 1);
    loomrt_cast(LOOMRT_BF16, &h, LOOMRT_F32, &back, 1);
    expect(h == 0x3f80 && back == 1.0f, "bf16 cast rounds to even");
  }

  /* One query, two keys, causal off: softmax weights are equal. */
  {
    float q[2] = {0, 0}, k[4] = {1, 2, 3, 4}, v[4] = {1, 0, 0, 1};
    float o[2], lse;
    loomrt_attention_forward(LOOMRT_F32, 1, 1, 2, 1, 1, 2, 1.0f, 0, NULL, NULL,
                             NULL, NULL, q, k, v, o, &lse);
    expect(fabsf(o[0] - 0.5f) < 1e-6f && fabsf(o[1] - 0.5f) < 1e-6f,
           "attention output");
    expect(fabsf(lse - logf(2.0f)) < 1e-6f, "attention lse");
  }

  expect(loomrt_dtype_size(LOOMRT_F16) == 2, "dtype size");
  expect(loomrt_world_size() == 1 && loomrt_world_rank() == 0,
         "world before init");
  expect(loomrt_wtime() > 0.0, "clock");
  loomrt_free(x);
  if (failures == 0)
    printf("C ABI checks passed\n");
  return failures == 0 ? 0 : 1;
}
