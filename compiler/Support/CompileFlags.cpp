//===- CompileFlags.cpp - The compiler's flags, declared once ---*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Support/CompileFlags.h"

#include <cmath>
#include <tuple>

using namespace llvm;
using namespace loom;

static Error fail(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

CompileFlags::CompileFlags(cl::OptionCategory &category, StringRef tool,
                           bool trainFlag)
    : plan(category, tool, /*defaultDp=*/1),
      globalBatchSize(
          "global-batch-size",
          cl::desc("Sequences per step over all data-parallel ranks "
                   "(Megatron's flag): micro-batches = global / (micro-batch "
                   "size x dp)"),
          cl::cat(category)),
      eodMaskLoss(
          "eod-mask-loss",
          cl::desc("Leave end-of-document tokens out of the loss (Megatron's "
                   "--eod-mask-loss; the id given to loom-import "
                   "--eod-token-id)"),
          cl::cat(category)),
      recomputeActivations(
          "recompute-activations",
          cl::desc("Megatron's flag: the same as --recompute-granularity "
                   "selective"),
          cl::cat(category)),
      recomputeGranularity(
          "recompute-granularity",
          cl::desc("Recompute in backward instead of keeping activations: "
                   "full (whole layers, see --recompute-method) or selective "
                   "(the core attention of every layer)"),
          cl::value_desc("full|selective"), cl::cat(category)),
      recomputeMethod(
          "recompute-method",
          cl::desc("With full: uniform (every layer, the default) or block "
                   "(the first --recompute-num-layers layers)"),
          cl::value_desc("uniform|block"), cl::cat(category)),
      recomputeNumLayers(
          "recompute-num-layers",
          cl::desc("With full: layers recomputed by block (uniform: 1)"),
          cl::cat(category)),
      moeAuxLossCoeff(
          "moe-aux-loss-coeff",
          cl::desc("Load-balancing loss coefficient of every MoE router "
                   "(Megatron's flag; default: the config's "
                   "router_aux_loss_coef, else 0)"),
          cl::cat(category)),
      moeZLossCoeff("moe-z-loss-coeff",
                    cl::desc("Router z-loss coefficient (Megatron's flag; "
                             "default 0)"),
                    cl::cat(category)),
      moeExpertCapacityFactor(
          "moe-expert-capacity-factor",
          cl::desc("Each expert keeps at most this multiple of its even share "
                   "of a micro-batch's (token, expert) pairs and drops the "
                   "rest (Megatron's flag; default: dropless)"),
          cl::cat(category)),
      moeTokenDropPolicy(
          "moe-token-drop-policy", cl::init("probs"),
          cl::desc("With a capacity, the pairs an expert keeps: probs (the "
                   "largest router probabilities) or position (the first "
                   "tokens)"),
          cl::value_desc("probs|position"), cl::cat(category)),
      moePadExpertInputToCapacity(
          "moe-pad-expert-input-to-capacity",
          cl::desc("Pad every expert's rows to its capacity (needs "
                   "--moe-expert-capacity-factor)"),
          cl::cat(category)),
      moeTokenDispatcherType(
          "moe-token-dispatcher-type", cl::init("alltoall"),
          cl::desc("How expert parallelism moves tokens to the experts' "
                   "ranks: alltoall (a counts exchange, then each expert's "
                   "rows to its rank and back; Megatron's default) or "
                   "allgather (every rank's rows all-gathered, each rank "
                   "takes its experts', a reduce-scatter brings them back)"),
          cl::value_desc("alltoall|allgather"), cl::cat(category)),
      moeRouterLoadBalancingType(
          "moe-router-load-balancing-type", cl::init("aux_loss"),
          cl::desc("The routers' load balancing: aux_loss (Megatron's "
                   "load-balancing loss per layer and micro-batch, the "
                   "default) or none (no load-balancing loss)"),
          cl::value_desc("aux_loss|none"), cl::cat(category)),
      backend("backend", cl::init("cpu"),
              cl::desc("Runtime the rank executables link: cpu (OpenBLAS + "
                       "MPI) or cuda (CUDA kernels, cuBLAS, NCCL; one GPU per "
                       "rank)"),
              cl::value_desc("cpu|cuda"), cl::cat(category)),
      noFuse("no-fuse",
             cl::desc("Skip the fuse stage (gradient sums folded into the "
                      "ops computing them, residual adds with their norms, "
                      "q and k rotated together, the linears of one input "
                      "as one op, GELU and SwiGLU with their GEMMs): one "
                      "runtime call per op"),
             cl::cat(category)) {
  if (trainFlag)
    train = std::make_unique<cl::opt<bool>>(
        "train",
        cl::desc("Also compile @train_step: forward, backward and every "
                 "parameter gradient (tfm-differentiate)"),
        cl::cat(category));
}

Expected<driver::CompileOptions> CompileFlags::options() const {
  driver::CompileOptions options;
  options.backend = backend;
  auto p = plan.plan();
  if (!p)
    return fail(p.error());
  options.plan = p.take();
  options.eodMaskLoss = eodMaskLoss;
  options.microbatchesGiven = plan.numMicrobatches.getNumOccurrences() > 0;
  if (globalBatchSize.getNumOccurrences())
    options.globalBatchSize = globalBatchSize;
  options.train = !train || *train;
  options.recomputeGranularity = recomputeGranularity;
  if (recomputeActivations) {
    if (!options.recomputeGranularity.empty() &&
        options.recomputeGranularity != "selective")
      return fail("--recompute-activations (selective) conflicts with "
                  "--recompute-granularity " +
                  options.recomputeGranularity);
    options.recomputeGranularity = "selective";
  }
  for (auto [flag, name, slot] :
       {std::tuple{&moeAuxLossCoeff, "--moe-aux-loss-coeff",
                   &options.moeAuxLossCoeff},
        {&moeZLossCoeff, "--moe-z-loss-coeff", &options.moeZLossCoeff}}) {
    if (!flag->getNumOccurrences())
      continue;
    double v = *flag;
    if (!(v >= 0.0) || !std::isfinite(v))
      return fail(Twine(name) + " " + std::to_string(v) +
                  " must be a finite number >= 0");
    *slot = v;
  }
  if (moeExpertCapacityFactor.getNumOccurrences()) {
    double v = moeExpertCapacityFactor;
    if (!(v > 0.0) || !std::isfinite(v))
      return fail("--moe-expert-capacity-factor " + std::to_string(v) +
                  " must be a finite number > 0");
    options.moeExpertCapacityFactor = v;
  }
  if (moeTokenDropPolicy != "probs" && moeTokenDropPolicy != "position")
    return fail("--moe-token-drop-policy '" + moeTokenDropPolicy +
                "' is not probs or position");
  if (moeTokenDropPolicy.getNumOccurrences() &&
      !options.moeExpertCapacityFactor)
    return fail("--moe-token-drop-policy needs --moe-expert-capacity-factor");
  options.moeTokenDropPolicy = moeTokenDropPolicy;
  if (moePadExpertInputToCapacity && !options.moeExpertCapacityFactor)
    return fail("--moe-pad-expert-input-to-capacity needs "
                "--moe-expert-capacity-factor");
  options.moePadExpertInputToCapacity = moePadExpertInputToCapacity;
  // Megatron's load-balancing types: capacity works with aux_loss and none
  // only (as Megatron checks), and none is aux_loss with no loss.
  const std::string &balancing = moeRouterLoadBalancingType;
  bool knownBalancing = balancing == "aux_loss" || balancing == "none" ||
                        balancing == "seq_aux_loss" ||
                        balancing == "global_aux_loss" ||
                        balancing == "sinkhorn";
  if (!knownBalancing)
    return fail("--moe-router-load-balancing-type '" + balancing +
                "' is not aux_loss, seq_aux_loss, global_aux_loss, sinkhorn "
                "or none");
  if (options.moeExpertCapacityFactor && balancing != "aux_loss" &&
      balancing != "none")
    return fail("--moe-expert-capacity-factor needs "
                "--moe-router-load-balancing-type aux_loss or none, not " +
                balancing);
  if (balancing != "aux_loss" && balancing != "none")
    return fail("--moe-router-load-balancing-type " + balancing +
                " is not implemented yet (aux_loss or none)");
  if (balancing == "none") {
    if (options.moeAuxLossCoeff && *options.moeAuxLossCoeff != 0.0)
      return fail("--moe-aux-loss-coeff " +
                  std::to_string(*options.moeAuxLossCoeff) +
                  " conflicts with --moe-router-load-balancing-type none "
                  "(no load-balancing loss)");
    options.moeAuxLossCoeff = 0.0;
  }
  if (moeTokenDispatcherType == "flex")
    return fail("--moe-token-dispatcher-type flex is not implemented (it "
                "needs DeepEP); use alltoall or allgather");
  options.moeAllgatherDispatcher = moeTokenDispatcherType == "allgather";
  options.fuse = !noFuse;
  if (moeTokenDispatcherType != "alltoall" && !options.moeAllgatherDispatcher)
    return fail("--moe-token-dispatcher-type '" + moeTokenDispatcherType +
                "' is not alltoall, allgather or flex");
  options.recomputeMethod = recomputeMethod;
  if (recomputeNumLayers.getNumOccurrences()) {
    if (recomputeNumLayers < 1)
      return fail("--recompute-num-layers " +
                  std::to_string(recomputeNumLayers) + " must be at least 1");
    options.recomputeNumLayers = recomputeNumLayers;
  }
  return options;
}
