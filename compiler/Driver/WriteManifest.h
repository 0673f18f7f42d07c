//===- WriteManifest.h - manifest.json and the launcher ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The compiled program's manifest (runtime/manifest, docs/MANIFEST.md),
// filled from what the stages decided (Program.h) and the plan's process
// groups, and the launcher that picks each rank's executable.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_DRIVER_WRITEMANIFEST_H
#define LOOM_COMPILER_DRIVER_WRITEMANIFEST_H

#include "compiler/Driver/Program.h"
#include "rankgen/ParallelLayout.h"
#include "rankgen/Plan.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace loom::driver {

/// The executable of rank `r` ("rank-00003").
std::string rankBinary(int64_t r);

/// Adds each prepared entry point (describeEntry), keyed by what the rank
/// program does with it (train_step takes the loss scale, forward does
/// not), per pp rank when pipelined.
llvm::Error addEntries(manifest::Manifest &mf,
                       llvm::ArrayRef<mlir::func::FuncOp> entries, int64_t pp);

/// After tfm-plan-buffers: each entry's workspace size (its tfm.workspace),
/// for the rank program to allocate once.
void addWorkspaces(manifest::Manifest &mf,
                   llvm::ArrayRef<mlir::func::FuncOp> entries);

/// What the manifest says besides the entries.
/// The routers' losses of the model: how many layers compute each.
struct RouterLossCounts {
  int64_t loadBalancing = 0, zLoss = 0;
};

struct ProgramFacts {
  const rankgen::Plan &plan;
  const rankgen::ParallelLayout &layout;
  const ModelInfo &model;
  llvm::ArrayRef<ParamInfo> params;
  std::string backend;
  std::optional<int64_t> eodTokenId;
  GradientGroups gradientGroups;
  /// The prepared entry points (their communicators name groups the
  /// manifest must list).
  llvm::ArrayRef<mlir::func::FuncOp> entries;
  RouterLossCounts routerLosses;
};

/// Fills the plan, groups, ranks, parameters, batch and model.
llvm::Error describeProgram(manifest::Manifest &mf, const ProgramFacts &facts);

/// Writes manifest.json and the launcher into `dir`, each atomically.
llvm::Error writeManifestAndLauncher(llvm::StringRef dir,
                                     const manifest::Manifest &mf);

} // namespace loom::driver

#endif // LOOM_COMPILER_DRIVER_WRITEMANIFEST_H
