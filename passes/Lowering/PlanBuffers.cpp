//===- PlanBuffers.cpp - Compile-time placement of temporaries --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Static shapes and straight-line code make every temporary's size and live
// range known at compile time, so a function needs one workspace instead of
// one allocation per op; upstream has buffer deallocation but no offset
// planner, hence this pass. The workspace is the function's last argument:
// a callee's becomes a temporary of its caller at each call (planned with
// the caller's others), and an entry's is allocated once by the rank program
// and kept from step to step, so a step allocates nothing.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Tfm/TfmAttrs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

#include <algorithm>

namespace loom::lowering {
#define GEN_PASS_DEF_TFMPLANBUFFERS
#include "passes/Lowering/Passes.h.inc"
} // namespace loom::lowering

using namespace mlir;
using namespace loom;

namespace {

constexpr int64_t kAlignment = 64;

struct Interval {
  memref::AllocOp alloc;
  memref::DeallocOp dealloc;
  int64_t begin, end; // op positions in the block
  int64_t bytes;
  int64_t offset = 0;
};

int64_t alignUp(int64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

/// The position of the last op that reads or writes the buffer: its users and
/// the users of pointers derived from it (the runtime calls receive
/// `inttoptr(index_cast(extract_aligned_pointer_as_index %buf))`). The
/// deallocation passes free buffers at the end of the block, not after their
/// last use, so the dealloc's position says nothing about liveness.
int64_t lastUse(memref::AllocOp alloc, memref::DeallocOp dealloc,
                const DenseMap<Operation *, int64_t> &position) {
  int64_t last = position.lookup(alloc);
  SmallVector<Value> worklist = {alloc.getResult()};
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (user == dealloc.getOperation())
        continue;
      last = std::max(last, position.lookup(user));
      if (isa<memref::ExtractAlignedPointerAsIndexOp, arith::IndexCastOp,
              LLVM::IntToPtrOp, memref::ViewOp, memref::SubViewOp,
              memref::CastOp, memref::ReinterpretCastOp>(user))
        worklist.append(user->result_begin(), user->result_end());
    }
  }
  return last;
}

/// Gives every call of a planned callee its workspace: a temporary of the
/// caller, allocated just before the call and freed just after it.
void passWorkspaces(func::FuncOp caller, const SymbolTable &symbols) {
  caller.walk([&](func::CallOp call) {
    auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
    if (!callee)
      return;
    auto bytes = callee->getAttrOfType<IntegerAttr>(tfm::kWorkspaceAttrName);
    if (!bytes)
      return;
    OpBuilder b(call);
    Type type = callee.getArgumentTypes().back();
    Value ws = b.create<memref::AllocOp>(call.getLoc(), cast<MemRefType>(type),
                                         b.getI64IntegerAttr(kAlignment));
    call->insertOperands(call->getNumOperands(), ws);
    b.setInsertionPointAfter(call);
    b.create<memref::DeallocOp>(call.getLoc(), ws);
  });
}

/// Places `func`'s temporaries in one workspace, its new last argument.
/// Returns the workspace's size (0: nothing to place, no argument added).
int64_t planFunction(func::FuncOp func, int64_t &numPlanned,
                     int64_t &unplannedBytes) {
  Block &block = func.getBody().front();

  // Live ranges of the plannable buffers.
  DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(block))
    position[&op] = i;
  std::vector<Interval> intervals;
  for (auto alloc : block.getOps<memref::AllocOp>()) {
    MemRefType type = alloc.getType();
    if (!type.hasStaticShape() || !type.getLayout().isIdentity() ||
        type.getMemorySpace())
      continue;
    memref::DeallocOp dealloc;
    bool escapes = false;
    for (Operation *user : alloc->getUsers()) {
      if (auto d = dyn_cast<memref::DeallocOp>(user)) {
        if (dealloc || d->getBlock() != &block)
          escapes = true;
        dealloc = d;
      } else if (user->getBlock() != &block) {
        escapes = true;
      }
    }
    if (!dealloc || escapes)
      continue;
    int64_t bytes = type.getNumElements() *
                    int64_t(llvm::divideCeil(type.getElementTypeBitWidth(), 8));
    intervals.push_back({alloc, dealloc, position[alloc],
                         lastUse(alloc, dealloc, position),
                         alignUp(std::max<int64_t>(bytes, 1))});
  }
  if (intervals.empty())
    return 0;

  // Largest first, each at the lowest offset free over its live range.
  std::vector<Interval *> order;
  for (Interval &i : intervals)
    order.push_back(&i);
  std::stable_sort(order.begin(), order.end(), [](Interval *a, Interval *b) {
    return a->bytes > b->bytes;
  });
  std::vector<Interval *> placed;
  int64_t arena = 0;
  for (Interval *cur : order) {
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (Interval *other : placed)
      if (other->begin <= cur->end && cur->begin <= other->end)
        busy.push_back({other->offset, other->offset + other->bytes});
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (auto [lo, hi] : busy) {
      if (offset + cur->bytes <= lo)
        break;
      offset = std::max(offset, hi);
    }
    cur->offset = offset;
    arena = std::max(arena, offset + cur->bytes);
    unplannedBytes += cur->bytes;
    placed.push_back(cur);
  }

  auto arenaType = MemRefType::get({arena}, IntegerType::get(func.getContext(), 8));
  func.insertArgument(func.getNumArguments(), arenaType, {}, func.getLoc());
  Value base = block.getArguments().back();
  OpBuilder b(func.getContext());
  for (Interval &i : intervals) {
    b.setInsertionPoint(i.alloc);
    Value offset = b.create<arith::ConstantIndexOp>(i.alloc.getLoc(), i.offset);
    Value view = b.create<memref::ViewOp>(i.alloc.getLoc(), i.alloc.getType(),
                                          base, offset, ValueRange());
    i.alloc.replaceAllUsesWith(view);
    i.alloc.erase();
    i.dealloc.erase();
  }
  func->setAttr(tfm::kWorkspaceAttrName, b.getI64IntegerAttr(arena));
  numPlanned += int64_t(intervals.size());
  return arena;
}

struct PlanBuffersPass : lowering::impl::TfmPlanBuffersBase<PlanBuffersPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable symbols(module);

    // Callees before callers: a caller plans its callees' workspaces with
    // its own temporaries.
    SmallVector<func::FuncOp> order = lowering::calleesFirst(module);

    int64_t planned = 0, workspace = 0, unplanned = 0;
    for (func::FuncOp f : order) {
      if (f.isExternal())
        continue;
      passWorkspaces(f, symbols);
      if (!f.getBody().hasOneBlock()) {
        f.emitError() << "tfm-plan-buffers plans straight-line functions; @"
                      << f.getName() << " has " << f.getBody().getBlocks().size()
                      << " blocks";
        return signalPassFailure();
      }
      workspace += planFunction(f, planned, unplanned);
    }
    numPlanned += planned;
    arenaBytes += workspace;
    unplannedBytes += unplanned;
  }
};

} // namespace
