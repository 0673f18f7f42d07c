//===- CudnnGraphTest.cpp - cuDNN accepts every attention graph -*- C++ -*-===//
//
// usage: loomrt-cudnn-graph-test
//
// Builds the operation graph of every kind of fused attention the cuda
// backend sends to cuDNN (runtime/cuda/CudnnGraph.h): forward and backward,
// causal or not, with and without GQA, f16 and bf16, several head dims and
// unequal query and key lengths (ring sections). No GPU is needed: without
// a handle cuDNN still finalizes every tensor, every operation and the
// operation graph, checking each op's operand shapes, strides and types, so
// a malformed graph fails here (the library aborts naming the descriptor)
// on any machine. Whether an engine runs a graph, and how well, only a GPU
// can say (runtime-cuda.kernels.cudnn).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudnnGraph.h"

#include <cstdio>

int main() {
  using loomrt::cudnn::AttentionShape;
  const size_t version = cudnnGetVersion();
  int checked = 0, failed = 0;
  for (loomrt_dtype dtype : {LOOMRT_BF16, LOOMRT_F16})
    for (bool causal : {false, true})
      for (int64_t Nkv : {8, 2})
        for (int64_t D : {64, 128})
          for (auto [Sq, Skv] : {std::pair<int64_t, int64_t>{256, 256},
                                 {256, 128}, {128, 384}}) {
            if (causal && Sq != Skv)
              continue; // causal tiles are square (the ring's diagonal)
            const AttentionShape s{dtype, 2, Sq, Skv, 8, Nkv, D, causal,
                                   0.125f};
            for (bool backward : {false, true}) {
              loomrt::cudnn::Plan p =
                  loomrt::cudnn::buildPlan(backward, s, version, nullptr);
              ++checked;
              if (!p.graphFinalized) {
                ++failed;
                std::printf("FAIL %s %s causal=%d Nkv=%lld D=%lld Sq=%lld "
                            "Skv=%lld: %s\n",
                            backward ? "backward" : "forward",
                            dtype == LOOMRT_BF16 ? "bf16" : "f16", int(causal),
                            (long long)Nkv, (long long)D, (long long)Sq,
                            (long long)Skv, p.refusal.c_str());
              }
            }
          }
  std::printf("cuDNN %zu accepts %d of %d attention graphs\n", version,
              checked - failed, checked);
  return failed ? 1 : 0;
}
