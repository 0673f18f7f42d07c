//===- ContractViolation.cpp - The device-contract check catches misuse ---===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Run with LOOMRT_CHECK_DEVICE_CONTRACT=1 (check-contract.sh); each mode
// breaks the contract once and must be stopped with a message naming it:
//   host-read    the host reads loomrt_alloc memory
//   host-write   the host writes it
//   host-tensor  a host buffer passed to a kernel as a tensor
//   host-comm    a host buffer passed to a collective
//   host-table   a host buffer listed as a tensor in loomrt_adamw_multi's
//                table (the table itself is host memory, as it must be)
//   bad-free     loomrt_free of a host pointer
//   allowed      only legal uses (copies both ways, scalar outputs on the
//                host, kernels on device memory, a host table of device
//                tensors): must succeed
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <cstdio>
#include <cstring>

// Out of line, so that the stack the check prints names it.
__attribute__((noinline)) static float readOnHost(const float *p) {
  return *const_cast<volatile const float *>(p);
}

int main(int argc, char **argv) {
  loomrt_init(&argc, &argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s MODE\n", argv[0]);
    return 2;
  }
  const char *mode = argv[1];
  const int64_t n = 16;
  auto *dev = static_cast<float *>(loomrt_alloc(n * 4));
  loomrt_zero(dev, n * 4);
  float host[n];
  for (int64_t i = 0; i < n; ++i)
    host[i] = float(i);

  if (!std::strcmp(mode, "allowed")) {
    loomrt_copy(dev, host, n * 4);
    loomrt_scale(LOOMRT_F32, dev, n, 2.0f);
    auto *sum = static_cast<float *>(loomrt_alloc(4));
    loomrt_all_reduce(loomrt_comm_world(), LOOMRT_F32, LOOMRT_SUM, dev, dev, n);
    loomrt_mask_sum(n, dev, sum);
    float maskedSum = 0, maskSum = 0; // host scalar outputs are allowed
    loomrt_ce_loss_from_parts(n, dev, dev, dev, nullptr, nullptr, &maskedSum,
                              &maskSum);
    // A table of device tensors on the host; the state is separate, so
    // the printed results stay the same.
    auto *state = static_cast<float *>(loomrt_alloc(4 * n * 4));
    loomrt_zero(state, 4 * n * 4);
    loomrt_adamw_tensor table[1] = {
        {n, state, state + n, state + 2 * n, state + 3 * n, nullptr, 0.1f}};
    loomrt_adamw_multi(1, table, LOOMRT_BF16, 1e-3f, 0.9f, 0.95f, 1e-8f, 1, sum,
                       1.0f);
    loomrt_free(state);
    float back[n], total = 0;
    loomrt_copy(back, dev, n * 4);
    loomrt_copy(&total, sum, 4);
    loomrt_free(sum);
    std::printf("back[3] = %g, sum = %g, mask_sum = %g\n", back[3], total,
                maskSum);
  } else if (!std::strcmp(mode, "host-read")) {
    std::printf("%g\n", readOnHost(dev));
  } else if (!std::strcmp(mode, "host-write")) {
    dev[1] = 1.0f;
  } else if (!std::strcmp(mode, "host-tensor")) {
    loomrt_axpy(n, 1.0f, LOOMRT_F32, host, LOOMRT_F32, dev);
  } else if (!std::strcmp(mode, "host-comm")) {
    loomrt_all_reduce(loomrt_comm_world(), LOOMRT_F32, LOOMRT_SUM, host, host,
                      n);
  } else if (!std::strcmp(mode, "host-table")) {
    loomrt_adamw_tensor table[2] = {{n, dev, dev, dev, dev, nullptr, 0.0f},
                                    {n, dev, host, dev, dev, nullptr, 0.0f}};
    loomrt_adamw_multi(2, table, LOOMRT_F32, 1e-3f, 0.9f, 0.95f, 1e-8f, 1,
                       nullptr, 0.0f);
  } else if (!std::strcmp(mode, "bad-free")) {
    loomrt_free(host);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  loomrt_free(dev);
  loomrt_finalize();
  return 0;
}
