//===- Rules.h - The argument rule of each entry point ----------*- C++ -*-===//
//
// Part of the Loom project.
//
// Internal to runtime/. The ABI front (runtime/common/Front.cpp, generated
// from loomrt.h by runtime/abi/loomrt_abi.py) defines every entry point as
//   1. the checks its parameter types imply: every loomrt_dtype a valid
//      dtype, every loomrt_comm a live communicator;
//   2. rules::check(args::<Entry>{...}): the entry point's own rule;
//   3. the implementation: loomrt::backend::<entry> (each backend's) or
//      loomrt::common::<entry> (runtime/common's, for every backend).
//
// An entry point has a rule when this header declares a rules::check
// overload for its argument struct (args::<Entry>: one field per parameter,
// named as in loomrt.h, and kName, the entry point's name); the template
// below matches every other entry point and does nothing. Rules.cpp defines
// the overloads with qualified names, so a rule not declared here does not
// compile, and one declared but not defined does not link.
//
// A rule checks what the arguments say (sizes, NULLs, divisibility, enums);
// it never reads tensor memory (device memory on cuda). A backend adds only
// its own limits (grid dimensions, cuBLAS's int) in its implementation, and
// the communicator registry (Comm.cpp) checks what depends on a
// communicator (group sizes, open batches, peers, roots).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_COMMON_RULES_H
#define LOOM_RUNTIME_COMMON_RULES_H

#include "runtime/abi/Args.h.inc"

namespace loomrt::rules {

/// No rule beyond the parameter types' checks.
template <typename Args> inline void check(const Args &) {}

// Process, memory.
void check(const args::Alloc &);
void check(const args::Copy &);
void check(const args::Zero &);
void check(const args::Copy2d &);

// Casts, elementwise helpers, checks.
void check(const args::Cast &);
void check(const args::HasNonfinite &);
void check(const args::Scale &);
void check(const args::Axpy &);
void check(const args::Add &);
void check(const args::AddBias &);
void check(const args::SafeDivide &);
void check(const args::SumSquares &);
void check(const args::SumSquaresAdd &);

// GEMM and linear layers.
void check(const args::Gemm &);
void check(const args::LinearForward &);
void check(const args::LinearBackwardData &);
void check(const args::LinearBackwardWeight &);
void check(const args::MultiLinearForward &);
void check(const args::MultiLinearBackwardData &);
void check(const args::MultiLinearBackwardWeight &);
void check(const args::LinearGeluForward &);
void check(const args::LinearBackwardDataGelu &);

// Normalization.
void check(const args::LayerNormForward &);
void check(const args::LayerNormBackward &);
void check(const args::RmsNormForward &);
void check(const args::AddLayerNormForward &);
void check(const args::AddRmsNormForward &);
void check(const args::RmsNormBackward &);

// Rotary embedding, position and document ids.
void check(const args::RopeForward &);
void check(const args::RopeBackward &);
void check(const args::DocumentIds &);
void check(const args::PositionIds &);
void check(const args::GatherPositions &);
void check(const args::SequencePositions &);

// Attention.
void check(const args::AttentionForward &);
void check(const args::AttentionMerge &);
void check(const args::AttentionBackward &);
void check(const args::AttentionSectionForward &);
void check(const args::AttentionSectionBackward &);
void check(const args::AttentionChunkedForward &);
void check(const args::AttentionChunkedBackward &);

// Activations, dropout.
void check(const args::GeluForward &);
void check(const args::GeluBackward &);
void check(const args::SiluForward &);
void check(const args::SiluBackward &);
void check(const args::SwigluForward &);
void check(const args::SwigluBackward &);
void check(const args::DropoutForward &);
void check(const args::DropoutBackward &);

// Embedding, cross-entropy, optimizer.
void check(const args::EmbeddingForward &);
void check(const args::EmbeddingBackward &);
void check(const args::CrossEntropyForward &);
void check(const args::CrossEntropyBackward &);
void check(const args::CeLocalMax &);
void check(const args::CeLocalSumExp &);
void check(const args::CeLocalTarget &);
void check(const args::CeLossFromParts &);
void check(const args::MaskSum &);
void check(const args::CeVocabParallelBackward &);
void check(const args::Adamw &);
void check(const args::AdamwMulti &);

// Mixture of experts.
void check(const args::MoeRouteForward &);
void check(const args::MoeRouteBackward &);
void check(const args::MoeRouteCounts &);
void check(const args::MoeRouterLossForward &);
void check(const args::MoeRouterLossBackward &);
void check(const args::MoeDrop &);
void check(const args::MoePermute &);
void check(const args::MoePermuteBackward &);
void check(const args::MoeUnpermute &);
void check(const args::MoeUnpermuteBackward &);
void check(const args::MoeTakeExpertRows &);
void check(const args::MoePutExpertRows &);
void check(const args::GroupedLinearForward &);
void check(const args::GroupedLinearBackwardData &);
void check(const args::GroupedLinearBackwardWeight &);
void check(const args::SigmoidGateForward &);
void check(const args::SigmoidGateBackward &);

// Profiling.
void check(const args::ProfileEndStep &);

} // namespace loomrt::rules

#endif // LOOM_RUNTIME_COMMON_RULES_H
