//===- PlanBuffers.cpp - Compile-time placement of temporaries --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Static shapes and straight-line code (with at most one loop, whose body
// is planned as a circle) make every temporary's size and live range known
// at compile time, so a function needs one workspace instead of one
// allocation per op; upstream has buffer deallocation but no offset
// planner, hence this pass. The workspace is the function's last argument:
// a callee's becomes a temporary of its caller at each call (planned with
// the caller's others), and an entry's is allocated once by the rank program
// and kept from step to step, so a step allocates nothing.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Tfm/TfmAttrs.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
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

int64_t alignUp(int64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

/// A buffer to place: the positions it is live at, as closed ranges of op
/// positions in its block (a loop-carried value's wrap around the body),
/// its size and, once placed, its offset.
struct Interval {
  memref::AllocOp alloc; // null: a loop body's whole workspace
  memref::DeallocOp dealloc;
  SmallVector<std::pair<int64_t, int64_t>, 2> live;
  int64_t bytes;
  int64_t offset = 0;

  bool overlaps(const Interval &o) const {
    for (auto [b0, e0] : live)
      for (auto [b1, e1] : o.live)
        if (b0 <= e1 && b1 <= e0)
          return true;
    return false;
  }
};

/// The op of `block` that is or holds `op`.
Operation *inBlock(Block &block, Operation *op) {
  return block.findAncestorOpInBlock(*op);
}

/// The position of the last op of `block` that reads or writes `value`:
/// its users and the users of pointers derived from it (the runtime calls
/// receive `inttoptr(index_cast(extract_aligned_pointer_as_index %buf))`),
/// a user nested in an op counting as that op. Deallocations are left out:
/// the deallocation passes free buffers at the end of the block, not after
/// their last use, so their position says nothing about liveness. -1: no
/// use.
int64_t lastUse(Value value, Block &block,
                const DenseMap<Operation *, int64_t> &position) {
  int64_t last = -1;
  SmallVector<Value> worklist = {value};
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (isa<memref::DeallocOp>(user))
        continue;
      if (Operation *at = inBlock(block, user))
        last = std::max(last, position.lookup(at));
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

bool plannable(memref::AllocOp alloc) {
  MemRefType type = alloc.getType();
  return type.hasStaticShape() && type.getLayout().isIdentity() &&
         !type.getMemorySpace();
}

int64_t bytesOf(memref::AllocOp alloc) {
  MemRefType type = alloc.getType();
  int64_t bytes = type.getNumElements() *
                  int64_t(llvm::divideCeil(type.getElementTypeBitWidth(), 8));
  return alignUp(std::max<int64_t>(bytes, 1));
}

/// Largest first, each at the lowest offset free wherever it is live,
/// around the `fixed` ones (placed already). Returns the arena's size.
int64_t place(std::vector<Interval> &intervals,
              std::vector<Interval> *fixed = nullptr) {
  std::vector<Interval *> order;
  for (Interval &i : intervals)
    order.push_back(&i);
  // Buffers that wrap around a loop's body (all live at its end, so
  // pairwise apart) first, then the largest first.
  std::stable_sort(order.begin(), order.end(), [](Interval *a, Interval *b) {
    bool wa = a->live.size() > 1, wb = b->live.size() > 1;
    if (wa != wb)
      return wa;
    return a->bytes > b->bytes;
  });
  std::vector<Interval *> placed;
  int64_t arena = 0;
  if (fixed)
    for (Interval &f : *fixed) {
      placed.push_back(&f);
      arena = std::max(arena, f.offset + f.bytes);
    }
  for (Interval *cur : order) {
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (Interval *other : placed)
      if (other->overlaps(*cur))
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
    placed.push_back(cur);
  }
  return arena;
}

/// The live ranges of a loop body's buffers, on the body taken as a
/// circle: a buffer the body yields is read by the next trip through the
/// iteration argument it becomes (and after the last trip through the
/// loop's result), so it is live from its allocation to the body's end and
/// from the body's start to that argument's last use. Every trip then
/// writes it at the same offset, with no copy, as long as it is dead by
/// the time the trip after the next allocates it again.
FailureOr<std::vector<Interval>> bodyIntervals(scf::ForOp loop) {
  Block &body = *loop.getBody();
  DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(body))
    position[&op] = int64_t(i);
  int64_t end = int64_t(body.getOperations().size()) - 1;
  auto yield = cast<scf::YieldOp>(body.getTerminator());
  std::vector<Interval> intervals;
  for (auto alloc : body.getOps<memref::AllocOp>()) {
    if (!plannable(alloc))
      return alloc.emitError()
             << "tfm-plan-buffers places a loop's buffers at fixed offsets; "
                "this one has no static size";
    Interval i{alloc, {}, {}, bytesOf(alloc)};
    int64_t begin = position[alloc];
    int64_t last = std::max(begin, lastUse(alloc, body, position));
    for (Operation *user : alloc->getUsers())
      if (auto d = dyn_cast<memref::DeallocOp>(user))
        i.dealloc = d;
    std::optional<unsigned> carried;
    for (OpOperand &use : yield->getOpOperands())
      if (use.get() == alloc.getResult())
        carried = use.getOperandNumber();
    if (carried && i.dealloc)
      return alloc.emitError() << "a loop-carried buffer is freed in the body";
    if (!carried && !i.dealloc)
      return alloc.emitError()
             << "a loop body's buffer is neither freed in it nor carried";
    if (!carried) {
      i.live.push_back({begin, last});
    } else {
      Value next = loop.getRegionIterArgs()[*carried];
      int64_t read = lastUse(next, body, position);
      if (read >= begin)
        return alloc.emitError()
               << "a loop-carried buffer is still read when the next trip "
                  "writes it again (unroll the loop body further)";
      i.live.push_back({begin, end});
      if (read >= 0)
        i.live.push_back({0, read});
    }
    intervals.push_back(i);
  }
  return intervals;
}

/// Replaces each placed allocation by a view of `base` at its offset
/// (+ `shift`) and erases its deallocation.
void toViews(std::vector<Interval> &intervals, Value base, int64_t shift) {
  OpBuilder b(base.getContext());
  for (Interval &i : intervals) {
    if (!i.alloc)
      continue;
    b.setInsertionPoint(i.alloc);
    Value offset =
        b.create<arith::ConstantIndexOp>(i.alloc.getLoc(), shift + i.offset);
    Value view = b.create<memref::ViewOp>(i.alloc.getLoc(), i.alloc.getType(),
                                          base, offset, ValueRange());
    i.alloc.replaceAllUsesWith(view);
    i.alloc.erase();
    if (i.dealloc)
      i.dealloc.erase();
  }
}

/// Places `func`'s temporaries in one workspace, its new last argument.
/// Returns the workspace's size (0: nothing to place, no argument added).
FailureOr<int64_t> planFunction(func::FuncOp func, int64_t &numPlanned,
                                int64_t &unplannedBytes) {
  Block &block = func.getBody().front();

  // Live ranges of the plannable buffers.
  DenseMap<Operation *, int64_t> position;
  for (auto [i, op] : llvm::enumerate(block))
    position[&op] = int64_t(i);
  std::vector<Interval> intervals;
  for (auto alloc : block.getOps<memref::AllocOp>()) {
    if (!plannable(alloc))
      continue;
    memref::DeallocOp dealloc;
    bool escapes = false;
    for (Operation *user : alloc->getUsers())
      if (auto d = dyn_cast<memref::DeallocOp>(user)) {
        if (dealloc || d->getBlock() != &block)
          escapes = true;
        dealloc = d;
      }
    if (!dealloc || escapes)
      continue;
    int64_t begin = position[alloc];
    intervals.push_back(
        {alloc,
         dealloc,
         {{begin, std::max(begin, lastUse(alloc, block, position))}},
         bytesOf(alloc)});
  }

  // A loop's body: its buffers in a workspace of their own, at the start
  // of the function's while the loop runs. Around it: a buffer made before
  // the loop only to be its first trip's iteration argument (the warmup's
  // activations) takes the place of the body's buffer that later trips
  // read there, and after the loop each result keeps its body buffer's
  // place until its last use (the cooldown's reads); the rest of the
  // body's workspace is free before and after the loop.
  SmallVector<scf::ForOp> loops(block.getOps<scf::ForOp>());
  if (loops.size() > 1)
    return loops[1].emitError()
           << "tfm-plan-buffers places the buffers of one loop per function";
  std::vector<Interval> body, fixed;
  if (!loops.empty()) {
    scf::ForOp loop = loops.front();
    FailureOr<std::vector<Interval>> inner = bodyIntervals(loop);
    if (failed(inner))
      return failure();
    body = std::move(*inner);
    int64_t at = position[loop];
    int64_t bytes = place(body);
    DenseMap<Operation *, const Interval *> slotOf; // body alloc -> place
    for (const Interval &i : body)
      slotOf[i.alloc] = &i;
    // The body's workspace while the loop runs; to the last use of a
    // result whose buffer is not one of the body's own.
    Interval whole{nullptr, nullptr, {{at, at}}, bytes, 0};
    auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
    DenseSet<Operation *> seen;
    for (auto [init, next, result] :
         llvm::zip_equal(loop.getInitArgs(), yield.getOperands(),
                         loop.getResults())) {
      auto bodyAlloc = next.getDefiningOp<memref::AllocOp>();
      const Interval *slot = bodyAlloc ? slotOf.lookup(bodyAlloc) : nullptr;
      int64_t use = lastUse(result, block, position);
      if (!slot) {
        whole.live.front().second = std::max(whole.live.front().second, use);
        continue;
      }
      if (use > at)
        fixed.push_back({nullptr, nullptr, {{at, use}}, slot->bytes,
                         slot->offset});
      auto outerAlloc = init.getDefiningOp<memref::AllocOp>();
      if (!outerAlloc || !seen.insert(outerAlloc).second)
        continue;
      auto it = llvm::find_if(
          intervals, [&](const Interval &i) { return i.alloc == outerAlloc; });
      if (it == intervals.end() || it->live.back().second > at)
        continue;
      Interval moved = *it;
      moved.offset = slot->offset;
      fixed.push_back(moved);
      intervals.erase(it);
    }
    if (bytes > 0)
      fixed.push_back(whole);
  }
  if (intervals.empty() && fixed.empty())
    return 0;

  int64_t arena = place(intervals, &fixed);
  for (const Interval &i : intervals)
    unplannedBytes += i.bytes;

  auto arenaType = MemRefType::get({arena}, IntegerType::get(func.getContext(), 8));
  func.insertArgument(func.getNumArguments(), arenaType, {}, func.getLoc());
  Value base = block.getArguments().back();
  toViews(body, base, 0);
  toViews(fixed, base, 0);
  toViews(intervals, base, 0);
  func->setAttr(tfm::kWorkspaceAttrName,
                IntegerAttr::get(IntegerType::get(func.getContext(), 64), arena));
  for (const Interval &i : intervals)
    numPlanned += i.alloc ? 1 : 0;
  for (const Interval &i : fixed)
    numPlanned += i.alloc ? 1 : 0;
  numPlanned += int64_t(body.size());
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
      FailureOr<int64_t> bytes = planFunction(f, planned, unplanned);
      if (failed(bytes))
        return signalPassFailure();
      workspace += *bytes;
    }
    numPlanned += planned;
    arenaBytes += workspace;
    unplannedBytes += unplanned;
  }
};

} // namespace
