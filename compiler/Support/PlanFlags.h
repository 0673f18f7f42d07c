//===- PlanFlags.h - The plan's command-line flags, declared once -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Megatron-LM's parallel-plan flags, registered once for every tool that
// takes a plan (loom-compile and loom-train through CompileFlags,
// loom-ranks), with Loom's short names and Megatron's long names as
// aliases, and read into one rankgen::Plan: the names of comm types and p2p
// modes are parsed into enums here, and nothing downstream sees them as
// strings again.
//
//   static llvm::cl::OptionCategory category("loom-compile options");
//   static loom::PlanFlags planFlags(category, "loom-compile", /*dp=*/1);
//   ...
//   auto plan = planFlags.plan();   // or the error naming the flag
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_SUPPORT_PLANFLAGS_H
#define LOOM_COMPILER_SUPPORT_PLANFLAGS_H

#include "compiler/Support/ListFlags.h"
#include "rankgen/Plan.h"

#include "llvm/Support/CommandLine.h"

#include <string>
#include <vector>

namespace loom {

/// The value of an integer flag. A type of its own so that cl::parser<IntFlag>
/// (below), not cl's integer parser (which prints its complaint in a format
/// of its own), reads it: a malformed number is reported like every other
/// error of the tool.
struct IntFlag {
  int64_t value = 0;
};

/// The tool name IntFlag's parser prints before its errors ("loom-ranks").
void setIntFlagTool(llvm::StringRef tool);

} // namespace loom

namespace llvm::cl {
template <> class parser<loom::IntFlag> : public basic_parser<loom::IntFlag> {
public:
  parser(Option &option) : basic_parser(option) {}
  bool parse(Option &, StringRef argName, StringRef arg, loom::IntFlag &out);
  StringRef getValueName() const override { return "n"; }
  // Used by --print-options; the value is not worth printing there.
  void printOptionDiff(const Option &option, loom::IntFlag,
                       const OptionValue<loom::IntFlag> &,
                       size_t globalWidth) const {
    printOptionNoValue(option, globalWidth);
  }
};
} // namespace llvm::cl

namespace loom {

class PlanFlags {
public:
  /// Registers the flags in `category`. Errors name the tool `tool`;
  /// `defaultDp` is dp when --dp is not given (0: derived from the world
  /// size, as loom-ranks does).
  PlanFlags(llvm::cl::OptionCategory &category, llvm::StringRef tool,
            int64_t defaultDp);

  /// The plan the flags give, or the error naming the flag that is wrong
  /// (an unknown comm type or p2p mode, a size below 1, ...).
  rankgen::Result<rankgen::Plan> plan() const;

  /// The list flags Megatron writes space-separated (for joinListFlags).
  static std::vector<ListFlag> listFlags();

  // The flags, for checks of a tool's own (whether one was given).
  llvm::cl::opt<IntFlag> tp, cp, pp, dp, vpp, ep, etp;
  llvm::cl::opt<bool> sequenceParallel;
  llvm::cl::list<std::string> cpCommType;
  llvm::cl::list<IntFlag> hierarchicalCp;
  llvm::cl::opt<std::string> order;
  llvm::cl::opt<bool> tpPpDpMapping;
  llvm::cl::opt<IntFlag> numMicrobatches, microbatchGroupSize;
  llvm::cl::opt<std::string> p2pMode;
  llvm::cl::opt<IntFlag> firstStageLayers, lastStageLayers;
  llvm::cl::opt<bool> accountForEmbedding, accountForLoss;
  llvm::cl::opt<std::string> pipelineLayout;
  llvm::cl::opt<IntFlag> makeVocabSizeDivisibleBy;

private:
  int64_t defaultDp;
  std::vector<std::unique_ptr<llvm::cl::alias>> aliases;
};

} // namespace loom


#endif // LOOM_COMPILER_SUPPORT_PLANFLAGS_H
