//===- RunBuckets.cpp - The gradient buckets' collectives -----------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// What moves the f32 training state between the ranks of each gradient
// bucket's group (GradBuckets.h): the reduction of the main gradients after
// a step, or of a pipelined step's chunks as they complete (all-reduce, or
// the distributed optimizer's reduce-scatter into the rank's slice), the
// grad norm's sum of squares over the owned slices, and the distributed
// optimizer's all-gathers of parameters and state.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Run.h"

#include <algorithm>

namespace loom::rank {

void Run::addGradSumSquares(float *acc) {
  // Every element once: each distinct box of a parameter is counted by its
  // first holder only (data-parallel and tensor-parallel replicas hold equal
  // gradients after the all-reduce) or, with the distributed optimizer, by
  // the slices of that holder's group of the bucket; the world's sum (the
  // step's one all-reduce of scalars) adds the parts. Adjacent counted
  // pieces form one run of a bucket, one reduction each.
  for (const TrainBucket &b : buckets) {
    std::vector<FlatRun> runs;
    for (const FlatPiece &pc : b.owned)
      if (trained[pc.param].countsInNorm)
        runs.push_back({pc.flatOffset, pc.flatOffset + pc.n});
    for (const FlatRun &r : mergeRuns(std::move(runs)))
      loomrt_sum_squares_add(LOOMRT_F32,
                             ownGrads + b.stateBase + (r.begin - b.ownBegin()),
                             r.end - r.begin, acc);
  }
}

void Run::onGradsReady(void *run, int64_t chunk) {
  static_cast<Run *>(run)->gradsReady(chunk);
}

void Run::gradsReady(int64_t chunk) {
  // Called from the compiled step: errors end the rank (an exception must
  // not unwind through compiled frames).
  if (!chunkRuns.count(chunk) || !signalledChunks.insert(chunk).second) {
    std::string what = "the compiled train step signalled model chunk " +
                       std::to_string(chunk) + ", which " +
                       (chunkRuns.count(chunk) ? "it signalled before"
                                               : "holds none of its gradients");
    loomrt_abort(what.c_str());
  }
  for (const GradRun &r : gradRuns)
    if (r.chunk == chunk)
      loomrt_axpy(r.n, 1.0f, r.dtype, r.base, LOOMRT_F32,
                  mainGrads + r.offset);
  for (const FlatRun &r : chunkRuns.at(chunk))
    startReduction(r);
}

void Run::startReduction(const FlatRun &run) {
  // A run may span buckets (a chunk's dense and expert parameters): each
  // part goes over its own group; a group of one rank has nothing to add.
  for (const TrainBucket &b : buckets) {
    FlatRun part{std::max(run.begin, b.base), std::min(run.end, b.end())};
    if (part.begin >= part.end || !b.comm)
      continue;
    if (!b.sharded()) {
      inFlight.push_back(loomrt_all_reduce_start(b.comm, mainGrads + part.begin,
                                                 part.end - part.begin));
      continue;
    }
    // This rank's part of the run lands at its place in the slice.
    FlatRun rel{part.begin - b.base, part.end - b.base};
    std::vector<int64_t> counts = scatterCounts(rel, b.partition);
    int64_t slice = b.groupRank * b.partition.shardSize();
    float *recv = gradShard + b.stateBase +
                  (counts[size_t(b.groupRank)] == 0
                       ? 0
                       : std::max<int64_t>(0, rel.begin - slice));
    inFlight.push_back(loomrt_reduce_scatter_start(
        b.comm, mainGrads + part.begin, recv, counts.data()));
  }
}

void Run::reduceGradients() {
  // The data-parallel mean, of each bucket whole or (distributed optimizer)
  // of this rank's slice of it, each over its group: the dense parameters'
  // over dp, the experts' over expert:dp (their tokens came from the other
  // dp ranks of their ep group already). Both sum the same values per
  // element, so for a group of 2 the slice is bitwise the all-reduce's.
  // With context parallelism the group is dp x cp (Megatron's
  // data-parallel group with cp): each cp rank's gradient is its tokens'
  // part, so the sum over cp is the micro-batch's gradient. The mean is
  // over dp for every bucket, as Megatron scales expert gradients.
  if (!chunkRuns.empty()) {
    // A pipelined step: the chunks' runs are in flight already.
    for (const FlatRun &r : lateRuns)
      startReduction(r);
    for (loomrt_request q : inFlight)
      loomrt_wait(q);
    inFlight.clear();
  } else {
    for (const TrainBucket &b : buckets) {
      if (!b.comm)
        continue;
      if (b.sharded()) {
        int64_t shape[1] = {b.partition.padded()};
        loomrt_reduce_scatter(b.comm, LOOMRT_F32, 1, shape, 0,
                              mainGrads + b.base, gradShard + b.stateBase);
      } else {
        loomrt_all_reduce(b.comm, LOOMRT_F32, LOOMRT_SUM, mainGrads + b.base,
                          mainGrads + b.base, b.partition.elements);
      }
    }
  }
  // With the distributed optimizer a bucket its group does not slice (an
  // expert group of one rank) joins the state's layout whole.
  if (distributed)
    for (const TrainBucket &b : buckets)
      if (!b.sharded())
        loomrt_copy(gradShard + b.stateBase, mainGrads + b.base,
                    b.partition.elements * int64_t(sizeof(float)));
  if (gradSize > 1)
    for (const TrainBucket &b : buckets)
      loomrt_scale(LOOMRT_F32, ownGrads + b.stateBase, b.ownElements(),
                   float(1.0 / dpSize));
}

float *Run::mainOf(const TrainBucket &b, const FlatPiece &pc) const {
  const TrainParam &t = trained[pc.param];
  if (t.spec->dtype == LOOMRT_F32)
    return static_cast<float *>(t.model) + pc.paramOffset;
  return mainParams + stateOffset(b, pc);
}

void Run::gatherBucket(const TrainBucket &b, loomrt_dtype dtype,
                       const void *send, void *recv) {
  int64_t shape[1] = {b.partition.shardSize()};
  if (b.sharded())
    loomrt_all_gather(b.comm, dtype, 1, shape, 0, send, recv);
  else
    loomrt_copy(recv, send, shape[0] * dtypeBytes(dtype));
}

void Run::allGatherFlat(const float *slice, float *full) {
  for (const TrainBucket &b : buckets)
    gatherBucket(b, LOOMRT_F32, slice + b.stateBase, full + b.base);
}

void Run::allGatherParams() {
  // Through the buffers that are free until the next step: the slices go
  // out of gradShard (in the gather dtype, the owner's rounding of its main
  // params, as the plain optimizer's cast does) and the groups' slices come
  // back into mainGrads. A bucket its group does not slice was cast in
  // place by the step, as without the distributed optimizer.
  int64_t w = dtypeBytes(gatherDtype);
  char *send = reinterpret_cast<char *>(gradShard);
  char *recv = reinterpret_cast<char *>(mainGrads);
  for (const TrainBucket &b : buckets) {
    if (!b.sharded())
      continue;
    // The slice's main params lie in mainParams as its pieces do in the
    // send buffer (state layout) unless some are f32 (their own model
    // buffers): then one cast covers the slice (the padding past its
    // pieces holds zeros), else one per piece.
    bool inMainParams =
        mixedPrecision && !b.owned.empty() &&
        std::all_of(b.owned.begin(), b.owned.end(), [&](const FlatPiece &pc) {
          return trained[pc.param].spec->dtype != LOOMRT_F32;
        });
    if (inMainParams)
      loomrt_cast(LOOMRT_F32, mainParams + b.stateBase, gatherDtype,
                  send + b.stateBase * w, b.ownElements());
    else
      for (const FlatPiece &pc : b.owned)
        loomrt_cast(LOOMRT_F32, mainOf(b, pc), gatherDtype,
                    send + stateOffset(b, pc) * w, pc.n);
    gatherBucket(b, gatherDtype, send + b.stateBase * w, recv + b.base * w);
  }
  for (const TrainParam &t : trained)
    if (buckets[t.bucket].sharded())
      loomrt_cast(gatherDtype, recv + t.offset * w, t.spec->dtype, t.model,
                  t.n);
}

} // namespace loom::rank
