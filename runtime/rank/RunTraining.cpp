//===- RunTraining.cpp - The rank program's optimizer ---------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// --train: the f32 training state (main grads in their buckets, AdamW
// moments, main params for bf16/f16, the distributed optimizer's slices) and
// its settings from flags, checkpoint and defaults; one optimizer step after
// the micro-batches (loss scaling, clipping, AdamW; the buckets' reduction
// and all-gathers are in RunBuckets.cpp) and the replicas' weight-hash
// check.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Run.h"

#include "runtime/rank/Checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <unistd.h>

namespace loom::rank {

//===----------------------------------------------------------------------===//
// Training state
//===----------------------------------------------------------------------===//

void Run::setUpTraining() {
  collectively([&] {
    const Entry &entry = me->entries.at("train_step");
    if (!entry.hasArg(ArgKind::GradScale))
      throw Error("the train_step entry of rank " + std::to_string(rank) +
                  " has no grad_scale argument");
    if (me->logsLoss && !entry.hasArg(ArgKind::Loss))
      throw Error("rank " + std::to_string(rank) + " logs the loss but its "
                  "train_step entry has no loss argument");
    std::set<std::string> grads;
    std::map<std::string, loomrt_dtype> gradDtypes;
    std::map<std::string, int64_t> gradChunks;
    for (const EntryArg &a : entry.args) {
      if (a.kind == ArgKind::Grad && a.dtype)
        gradDtypes[a.name] = *a.dtype;
      if (a.kind == ArgKind::Grad && a.chunk >= 0 && entry.pipelined())
        gradChunks[a.name] = a.chunk;
    }
    for (const EntryArg &a : entry.args)
      if (a.kind == ArgKind::Grad && !grads.insert(a.name).second)
        throw Error("the train_step entry of rank " + std::to_string(rank) +
                    " returns the gradient of \"" + a.name + "\" twice");

    // The distributed optimizer slices each bucket over its group (the
    // experts' over expert:dp), whose ranks must lay it out alike.
    distributed = opts.useDistributedOptimizer && gradSize > 1;
    std::vector<GradBucket> layout = gradBuckets(m, rank, distributed);
    if (distributed)
      checkBucketGroups(m, rank, layout);
    flatSize = flatElements(layout);
    stateSize = stateElements(layout);
    sharing = findStageSharing(m, rank);
    for (GradBucket &g : layout) {
      TrainBucket b;
      static_cast<GradBucket &>(b) = std::move(g);
      if (auto c = comms.find(b.group); c != comms.end())
        b.comm = c->second;
      std::optional<std::pair<const std::vector<int32_t> *, int32_t>> group =
          m.groupOf(b.group, rank);
      int64_t offset = b.base;
      for (size_t i : b.params) {
        const ParamSpec &p = m.params[i];
        const Shard *s = p.shardOf(rank);
        if (!grads.count(p.name))
          throw Error("the train_step entry of rank " + std::to_string(rank) +
                      " returns no gradient for parameter \"" + p.name + "\"");
        TrainParam t;
        t.index = i;
        t.spec = &p;
        t.n = numElements(s->box.shape);
        t.offset = offset;
        t.bucket = buckets.size();
        t.model = buffers.at(p.name);
        auto gd = gradDtypes.find(p.name);
        t.gradDtype = gd == gradDtypes.end() ? p.dtype : gd->second;
        t.decay = takesWeightDecay(p.name, p.shape);
        if (auto c = gradChunks.find(p.name); c != gradChunks.end())
          t.chunk = c->second;
        // The first holder of this box is counted, through the optimizer
        // slices of its bucket's group (the whole buffer of that one rank
        // without the distributed optimizer).
        int32_t first = p.firstHolder(*s);
        t.countsInNorm =
            b.sharded() ? std::count(group->first->begin(),
                                     group->first->end(), first) > 0
                        : first == rank;
        offset += t.n;
        trainedElements += t.n;
        if (sharing.shares(i))
          sharedElements = offset;
        mixedPrecision |= p.dtype != LOOMRT_F32;
        dynamicScaling |= p.dtype == LOOMRT_F16;
        trained.push_back(t);
      }
      buckets.push_back(std::move(b));
    }

    allocateGradRuns();
    std::vector<int64_t> offsets, sizes;
    for (const TrainParam &t : trained) {
      offsets.push_back(t.offset);
      sizes.push_back(t.n);
    }
    for (TrainBucket &b : buckets)
      b.owned = ownedPieces(offsets, sizes, b.ownBegin(), b.ownEnd());
    for (const TrainParam &t : trained)
      if (t.chunk >= 0)
        chunkRuns[t.chunk].push_back({t.offset, t.offset + t.n});
    std::vector<FlatRun> signalled;
    for (auto &[chunk, runs] : chunkRuns) {
      runs = mergeRuns(runs);
      signalled.insert(signalled.end(), runs.begin(), runs.end());
    }
    if (!chunkRuns.empty())
      lateRuns = complementRuns(signalled, flatSize);
    int64_t bytes = stateSize * int64_t(sizeof(float));
    auto allocFloats = [](int64_t bytes) {
      return static_cast<float *>(loomrt_alloc(bytes));
    };
    // The pads of the gradient buffer stay zero through the reduce-scatter.
    mainGrads = allocFloats(flatSize * int64_t(sizeof(float)));
    expAvg = allocFloats(bytes);
    expAvgSq = allocFloats(bytes);
    loomrt_zero(expAvg, bytes);
    loomrt_zero(expAvgSq, bytes);
    ownGrads = mainGrads;
    if (distributed)
      ownGrads = gradShard = allocFloats(bytes);
    if (mixedPrecision) {
      // Zero where f32 parameters leave it unused (sharded files hold it).
      mainParams = allocFloats(bytes);
      loomrt_zero(mainParams, bytes);
    }
    // f32 parameters are their own main parameters; the others start as
    // their widened values (a --load optimizer state may replace them).
    for (const TrainBucket &b : buckets)
      for (const FlatPiece &pc : b.owned) {
        const TrainParam &t = trained[pc.param];
        if (t.spec->dtype != LOOMRT_F32)
          loomrt_cast(t.spec->dtype,
                      static_cast<char *>(t.model) +
                          pc.paramOffset * dtypeBytes(t.spec->dtype),
                      LOOMRT_F32, mainOf(b, pc), pc.n);
      }
    // Megatron gathers the parameters in their own dtype; f32 when the
    // dtypes are mixed.
    gatherDtype = trained.empty() ? LOOMRT_F32 : trained[0].spec->dtype;
    for (const TrainParam &t : trained)
      if (t.spec->dtype != gatherDtype)
        gatherDtype = LOOMRT_F32;

    if (!opts.load.empty())
      loadOptimizerState();
    else if (!opts.loadSharded.empty())
      loadShardedOptimizer();

    // Settings: flags win, then the checkpoint, then the defaults.
    AdamWConfig &ad = state.adamw;
    if (!resumed)
      ad = AdamWConfig();
    ad.weightDecay = opts.weightDecay.value_or(ad.weightDecay);
    ad.beta1 = opts.adamBeta1.value_or(ad.beta1);
    ad.beta2 = opts.adamBeta2.value_or(ad.beta2);
    ad.eps = opts.adamEps.value_or(ad.eps);
    ad.clipGrad = opts.clipGrad.value_or(ad.clipGrad);
    LrSchedule &lr = state.schedule;
    if (!resumed)
      lr = LrSchedule{kDefaultLr};
    lr.maxLr = opts.lr.value_or(lr.maxLr);
    lr.minLr = opts.minLr.value_or(lr.minLr);
    lr.initLr = opts.lrWarmupInit.value_or(lr.initLr);
    lr.style = opts.lrDecayStyle.value_or(lr.style);
    lr.wsdDecaySteps = opts.lrWsdDecaySteps.value_or(lr.wsdDecaySteps);
    lr.wsdStyle = opts.lrWsdDecayStyle.value_or(lr.wsdStyle);
    state.decayStepsGiven =
        opts.lrDecaySteps || (resumed && state.decayStepsGiven);
    lr.decaySteps = opts.lrDecaySteps            ? *opts.lrDecaySteps
                    : resumed && state.decayStepsGiven ? lr.decaySteps
                                                 : state.iteration + opts.steps;
    // A warmup fraction is of this run's decay length, also when resumed.
    if (opts.lrWarmupSteps || opts.lrWarmupFraction || !resumed)
      state.warmupFraction = opts.lrWarmupFraction;
    if (state.warmupFraction)
      lr.warmupSteps = *state.warmupFraction * double(lr.decaySteps);
    else if (opts.lrWarmupSteps)
      lr.warmupSteps = double(*opts.lrWarmupSteps);
    if (lr.style == LrDecayStyle::WSD && lr.wsdDecaySteps == 0)
      throw Error("--lr-decay-style WSD needs --lr-wsd-decay-iters");
    if (lr.style != LrDecayStyle::WSD &&
        (opts.lrWsdDecaySteps || opts.lrWsdDecayStyle))
      throw Error(std::string("--lr-wsd-decay-iters and --lr-wsd-decay-style "
                              "need --lr-decay-style WSD (the schedule is ") +
                  styleName(kLrDecayStyles, lr.style) + ")");
    if (lr.minLr > lr.maxLr)
      throw Error("the minimum learning rate " + std::to_string(lr.minLr) +
                  " exceeds the peak " + std::to_string(lr.maxLr));
    // The scaler's settings come from the flags, its position from the
    // checkpoint (Megatron saves scale and trackers only).
    DynamicLossScaler &sc = state.scaler;
    sc.minScale = opts.minLossScale;
    sc.growthInterval = opts.lossScaleWindow;
    sc.hysteresis = opts.hysteresis;
    if (!state.hasScaler) {
      sc.scale = opts.initialLossScale;
      sc.growthTracker = 0;
      sc.hysteresisTracker = opts.hysteresis;
    }
    state.hasScaler = dynamicScaling;
    buildAdamwTables();
    if (state.consumedSamples % samplesPerStep != 0)
      throw Error("the checkpoint consumed " +
                  std::to_string(state.consumedSamples) +
                  " samples, not a multiple of this plan's global batch of " +
                  std::to_string(samplesPerStep));
  });
  if (rank == 0 && (!opts.load.empty() || !opts.loadSharded.empty())) {
    std::string from = opts.load.empty() ? opts.loadSharded
                                         : optimizerStatePath(opts.load);
    if (resumed)
      std::printf("loom: resuming at iteration %" PRId64
                  " (consumed samples %" PRId64 ", optimizer step %" PRId64
                  ") from %s\n",
                  state.iteration, state.consumedSamples, state.optimizerSteps,
                  from.c_str());
    else if (!opts.load.empty())
      std::printf("loom: %s not found: the optimizer starts from zero at "
                  "iteration 0\n",
                  from.c_str());
    else
      std::printf("loom: %s holds no optimizer state: the optimizer starts "
                  "from zero at iteration 0\n",
                  from.c_str());
    std::fflush(stdout);
  }
}

void Run::loadOptimizerState() {
  std::string path = optimizerStatePath(opts.load);
  // A model-only checkpoint (e.g. converted from Hugging Face) starts a
  // fresh optimizer; a damaged optimizer file is an error.
  if (!fileExists(path))
    return;
  SafetensorsFile file(path);
  auto meta = file.metadata().find("loom.train_state");
  if (meta == file.metadata().end())
    throw Error("optimizer state " + path +
                " has no \"loom.train_state\" metadata");
  state = TrainState::fromJson(meta->second, "optimizer state " + path);
  resumed = true;

  // The file holds whole tensors: the distributed optimizer reads this
  // rank's full shards into temporary flat buffers and keeps its slices.
  std::vector<DeviceBuffer> temps;
  auto full = [&](float *slice) {
    if (!distributed)
      return slice;
    temps.emplace_back(flatSize * int64_t(sizeof(float)));
    return temps.back().as<float>();
  };
  auto keepSlice = [&](float *slice, const float *fullBuf) {
    if (distributed)
      for (const TrainBucket &b : buckets)
        loomrt_copy(slice + b.stateBase, fullBuf + b.ownBegin(),
                    b.ownElements() * int64_t(sizeof(float)));
  };

  std::map<std::string, void *> bufs;
  Manifest moments = stateLayout(
      m, {kMomentPrefixes[0], kMomentPrefixes[1]}, LOOMRT_F32);
  float *avg = full(expAvg), *avgSq = full(expAvgSq);
  for (const TrainParam &t : trained) {
    bufs[kMomentPrefixes[0] + t.spec->name] = avg + t.offset;
    bufs[kMomentPrefixes[1] + t.spec->name] = avgSq + t.offset;
  }
  loadCheckpoint(path, moments, rank, bufs);
  keepSlice(expAvg, avg);
  keepSlice(expAvgSq, avgSq);

  // Main parameters are saved when the saving run had low-precision
  // parameters; they are more precise than the model file's values.
  bool hasMain = std::any_of(
      file.tensors().begin(), file.tensors().end(), [](const auto &kv) {
        return kv.first.rfind(kMainParamPrefix, 0) == 0;
      });
  if (!hasMain)
    return;
  bufs.clear();
  // Laid out like the gradients; an f32 parameter is its own main param.
  float *main = mixedPrecision ? full(mainParams) : nullptr;
  for (const TrainParam &t : trained)
    bufs[kMainParamPrefix + t.spec->name] =
        t.spec->dtype == LOOMRT_F32 ? t.model : main + t.offset;
  loadCheckpoint(path, stateLayout(m, {kMainParamPrefix}, LOOMRT_F32), rank,
                 bufs);
  if (mixedPrecision)
    keepSlice(mainParams, main);
  for (const TrainParam &t : trained)
    if (t.spec->dtype != LOOMRT_F32)
      loomrt_cast(LOOMRT_F32, main + t.offset, t.spec->dtype, t.model, t.n);
}

void Run::allocateGradRuns() {
  // Each parameter's run, in the flat (bucket by bucket) order of trained.
  std::vector<size_t> runOf;
  for (size_t k = 0; k < trained.size(); ++k) {
    const TrainParam &t = trained[k];
    const GradRun *last = gradRuns.empty() ? nullptr : &gradRuns.back();
    if (!last || last->offset + last->n != t.offset ||
        last->dtype != t.gradDtype || last->chunk != t.chunk ||
        trained[k - 1].bucket != t.bucket)
      gradRuns.push_back({t.offset, 0, t.gradDtype, t.chunk, nullptr});
    gradRuns.back().n += t.n;
    runOf.push_back(gradRuns.size() - 1);
  }
  for (GradRun &r : gradRuns)
    r.base = loomrt_alloc(r.n * dtypeBytes(r.dtype));
  for (size_t k = 0; k < trained.size(); ++k) {
    TrainParam &t = trained[k];
    const GradRun &r = gradRuns[runOf[k]];
    t.grad = static_cast<char *>(r.base) +
             (t.offset - r.offset) * dtypeBytes(t.gradDtype);
  }
}

void Run::buildAdamwTables() {
  // The pieces, their buffers and decays stay the same from step to step.
  const float decay = float(state.adamw.weightDecay);
  for (const TrainBucket &b : buckets)
    for (const FlatPiece &pc : b.owned) {
      const TrainParam &t = trained[pc.param];
      int64_t at = stateOffset(b, pc);
      loomrt_adamw_tensor x = {};
      x.n = pc.n;
      x.param = mainOf(b, pc);
      x.grad = ownGrads + at;
      x.exp_avg = expAvg + at;
      x.exp_avg_sq = expAvgSq + at;
      x.weight_decay = t.decay ? decay : 0.0f;
      // f32 parameters are their own main parameters; a sliced bucket's
      // parameters come back by the all-gather.
      std::optional<loomrt_dtype> modelDtype;
      if (!b.sharded() && t.spec->dtype != LOOMRT_F32) {
        x.model = static_cast<char *>(t.model) +
                  pc.paramOffset * dtypeBytes(t.spec->dtype);
        modelDtype = t.spec->dtype;
      }
      auto tab = std::find_if(
          adamwTables.begin(), adamwTables.end(), [&](const AdamwTable &a) {
            return !modelDtype || !a.modelDtype || a.modelDtype == modelDtype;
          });
      if (tab == adamwTables.end())
        tab = adamwTables.insert(tab, AdamwTable{});
      if (modelDtype)
        tab->modelDtype = modelDtype;
      tab->tensors.push_back(x);
    }
}

void Run::trainStep(BoundEntry &entry, int64_t dataStep, bool first,
                    StepResult &result) {
  double lossScale = dynamicScaling ? state.scaler.scale : 1.0;
  // The compiled code differentiates grad_scale * loss: scaling for f16 and
  // the mean over micro-batches (or Megatron's per-token weighting) cost
  // nothing there.
  std::vector<float> gradScales =
      opts.calculatePerTokenLoss
          ? perTokenGradScales(*reader, dataStep, lossScale)
          : std::vector<float>(size_t(m.numMicrobatches),
                               float(lossScale / double(m.numMicrobatches)));
  loomrt_zero(mainGrads, flatSize * int64_t(sizeof(float)));
  // The step's scalars (StepStat) stay on the device until its one read.
  float *stats = dev.stepStats.as<float>();
  loomrt_zero(stats, kStepStats * int64_t(sizeof(float)));
  double lossTokens = 0.0;
  // A validation pass since the last step added to them too.
  bool routerLosses =
      m.routerLosses.loadBalancing > 0 || m.routerLosses.zLoss > 0;
  if (routerLosses)
    loomrt_zero(loomrt_metrics(), LOOMRT_NUM_METRICS * sizeof(float));
  // A pipelined entry runs every micro-batch in one call (its schedule)
  // and returns their gradients summed; the others one micro-batch a call.
  // A pipelined step signals each chunk's gradients when its last backward
  // is done (onGradsReady), and their reduction starts there.
  signalledChunks.clear();
  if (!chunkRuns.empty())
    loomrt_set_grads_ready_hook(&Run::onGradsReady, this);
  for (int64_t micro = 0; micro < m.numMicrobatches; ++micro) {
    readBatch(entry, *reader, dataStep, micro);
    loomrt_upload(dev.gradScale.at(slotOf(entry, micro)),
                  &gradScales[size_t(micro)], sizeof(float));
    if (entry.pipelined && micro + 1 < m.numMicrobatches)
      continue;
    entry.fn(entry.args.data());
    // Each micro-batch's loss, weighted by its loss tokens (Megatron logs
    // the token-weighted mean), is summed on the device (its slot is reused
    // by the next one) and read back with the step's other scalars.
    for (int64_t k = entry.pipelined ? 0 : micro; k <= micro; ++k)
      if (entry.producesLoss) {
        loomrt_axpy(1, float(microTokens[size_t(k)]), LOOMRT_F32,
                    dev.loss.at(slotOf(entry, k)), LOOMRT_F32,
                    stats + kLossWeighted);
        lossTokens += microTokens[size_t(k)];
      }
    // Accumulate in f32 whatever the parameter dtype (Megatron's main_grad),
    // a run of parameters per call.
    for (const GradRun &r : gradRuns)
      if (r.chunk < 0)
        loomrt_axpy(r.n, 1.0f, r.dtype, r.base, LOOMRT_F32,
                    mainGrads + r.offset);
  }
  loomrt_set_grads_ready_hook(nullptr, nullptr);
  if (entry.producesLoss) {
    float tokens = float(lossTokens);
    loomrt_upload(stats + kLossTokens, &tokens, sizeof(float));
  }
  if (routerLosses)
    loomrt_axpy(LOOMRT_NUM_METRICS, 1.0f, LOOMRT_F32, loomrt_metrics(),
                LOOMRT_F32, stats + kMetrics);
  for (const auto &[chunk, runs] : chunkRuns)
    if (!signalledChunks.count(chunk))
      throw Error("the compiled train step of rank " + std::to_string(rank) +
                  " never signalled the gradients of model chunk " +
                  std::to_string(chunk) +
                  " (loomrt_grads_ready): recompile with this loom-compile");
  reduceGradients();
  // Megatron's _allreduce_word_embedding_grads, after the data-parallel
  // reduction: each stage holding the tied embedding adds the other's part.
  // The members' slices are aligned (GradBuckets.h), so this covers only
  // the shared elements of this rank's optimizer range (at the start of the
  // first bucket, whose slice starts the state).
  if (sharing.group) {
    const TrainBucket &b = buckets.front();
    int64_t n = std::min(b.ownEnd(), sharedElements) - b.ownBegin();
    if (n > 0)
      loomrt_all_reduce(comms.at("embedding"), LOOMRT_F32, LOOMRT_SUM,
                        ownGrads, ownGrads, n);
  }
  if (lossScale != 1.0)
    for (const TrainBucket &b : buckets)
      loomrt_scale(LOOMRT_F32, ownGrads + b.stateBase, b.ownElements(),
                   float(1.0 / lossScale));
  // The unreduced buffer is dead now; the dump gathers the slices into it.
  if (first && !opts.dumpGrads.empty() && distributed)
    allGatherFlat(gradShard, mainGrads);
  if (first && !opts.dumpGrads.empty())
    writeFile(opts.dumpGrads, stateLayout(m, {""}, LOOMRT_F32),
              [&](size_t k) -> const void * {
                for (const TrainParam &t : trained)
                  if (t.index == k)
                    return mainGrads + t.offset;
                return nullptr; // not held: never asked for
              },
              {{"format", "pt"}, {"loom.family", m.family}});

  result.lr = state.schedule.at(state.optimizerSteps);
  // The gradient's sum of squares joins the step's scalars, and one
  // all-reduce over the world sums them all: the norm's parts, the loss
  // (its tokens from the last stage's ranks, each tp replica alike, so the
  // ratio is the dp x cp mean) and the routers' losses. A non-finite
  // gradient anywhere makes the sum non-finite: AdamW reads it on the
  // device, skips the update and clips by it, so nothing waits for it here.
  addGradSumSquares(stats + kSumSquares);
  if (worldSize > 1)
    loomrt_all_reduce(loomrt_comm_world(), LOOMRT_F32, LOOMRT_SUM, stats,
                      stats, kStepStats);
  const AdamWConfig &ad = state.adamw;
  for (const AdamwTable &tab : adamwTables)
    loomrt_adamw_multi(int64_t(tab.tensors.size()), tab.tensors.data(),
                       tab.modelDtype.value_or(LOOMRT_F32), float(result.lr),
                       float(ad.beta1), float(ad.beta2), float(ad.eps),
                       state.optimizerSteps + 1, stats + kSumSquares,
                       float(ad.clipGrad));
  if (distributed)
    allGatherParams();

  // The step's one host wait: its scalars, after the update was queued.
  float host[kStepStats];
  loomrt_copy(host, stats, sizeof(host));
  result.meanLoss = host[kLossTokens] > 0.0f
                        ? host[kLossWeighted] / host[kLossTokens]
                        : 0.0f;
  if (routerLosses)
    takeRouterLosses(host + kMetrics, result);
  const double norm = std::sqrt(double(host[kSumSquares]));
  // The same on every rank (one world sum); with f16 the scaler backs off.
  const bool nonfinite = !std::isfinite(norm);
  if (dynamicScaling)
    state.scaler.update(nonfinite);
  if (nonfinite) {
    result.skipped = true;
    ++state.skippedIterations;
    return;
  }
  result.gradNorm = norm;
  ++state.optimizerSteps;
}

void Run::checkWeightHashes() {
  // A 64-bit FNV-1a hash of each shard's bytes, as four exact 16-bit floats, for
  // the params in manifest order (zeros where not held), gathered from all.
  const int64_t n = int64_t(m.params.size()) * 4;
  std::vector<float> mine(size_t(n), 0.0f), all(size_t(n * worldSize));
  std::vector<char> bytes;
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ParamSpec &p = m.params[i];
    const Shard *s = p.shardOf(rank);
    if (!s)
      continue;
    bytes.resize(size_t(numElements(s->box.shape) * dtypeBytes(p.dtype)));
    loomrt_copy(bytes.data(), buffers.at(p.name), int64_t(bytes.size()));
    // FNV-1a over 8-byte words (then the tail bytes): 8x fewer steps than
    // bytewise, and only ever compared with itself.
    uint64_t h = 14695981039346656037ull;
    size_t words = bytes.size() / 8;
    for (size_t w = 0; w < words; ++w) {
      uint64_t v;
      std::memcpy(&v, bytes.data() + w * 8, 8);
      h = (h ^ v) * 1099511628211ull;
    }
    for (size_t b = words * 8; b < bytes.size(); ++b)
      h = (h ^ uint8_t(bytes[b])) * 1099511628211ull;
    for (int k = 0; k < 4; ++k)
      mine[i * 4 + k] = float((h >> (16 * k)) & 0xffff);
  }
  DeviceBuffer send(n * int64_t(sizeof(float))),
      recv(n * worldSize * int64_t(sizeof(float)));
  loomrt_copy(send.get(), mine.data(), n * int64_t(sizeof(float)));
  int64_t shape[1] = {n};
  loomrt_all_gather(loomrt_comm_world(), LOOMRT_F32, 1, shape, 0, send.get(),
                    recv.get());
  loomrt_copy(all.data(), recv.get(), n * worldSize * int64_t(sizeof(float)));
  collectively([&] {
    for (size_t i = 0; i < m.params.size(); ++i) {
      const ParamSpec &p = m.params[i];
      const Shard *s = p.shardOf(rank);
      if (!s)
        continue;
      int32_t first = p.firstHolder(*s);
      if (!std::equal(mine.begin() + i * 4, mine.begin() + i * 4 + 4,
                      all.begin() + first * n + i * 4))
        throw Error("after iteration " + std::to_string(state.iteration) +
                    ", rank " + std::to_string(rank) + "'s copy of \"" +
                    p.name + "\" differs from rank " + std::to_string(first) +
                    "'s, which holds the same part of it");
    }
  });
}

void Run::reportOptimizerMemory() {
  // What the distributed optimizer divides by each bucket's group: the
  // moments and the f32 main params (Megatron's "optimizer state"); the
  // main grads stay whole for the accumulation, plus the reduce-scatter's
  // slices.
  const double mib = 1024.0 * 1024.0;
  int64_t perElement = (mixedPrecision ? 3 : 2) * int64_t(sizeof(float));
  std::string what = mixedPrecision ? "exp_avg, exp_avg_sq, main params"
                                    : "exp_avg, exp_avg_sq";
  int64_t own = 0;
  std::string over;
  for (const TrainBucket &b : buckets) {
    own += b.ownElements();
    over += (over.empty() ? "" : " and ") + b.group + " " +
            std::to_string(b.partition.dpSize);
  }
  std::printf("loom: optimizer state on rank %d: %.3f MiB (%s of %" PRId64,
              rank, double(stateSize * perElement) / mib, what.c_str(), own);
  if (distributed)
    std::printf(" of %" PRId64 " elements; distributed over %s, %.3f MiB "
                "without)",
                trainedElements, over.c_str(),
                double(trainedElements * perElement) / mib);
  else
    std::printf(" elements)");
  std::printf(", main grads %.3f MiB", double(flatSize) * 4 / mib);
  if (distributed)
    std::printf(" + %.3f MiB slice", double(stateSize) * 4 / mib);
  std::printf("\n");
}

void Run::takeRouterLosses(const float *sums, StepResult &result) {
  // Every rank of a pipeline stage ran its MoE layers on its micro-batches,
  // the cp ranks of a micro-batch each its share (and the tp ranks too
  // where experts are not split over tp: each routes its own tokens): the
  // world's sum counts each layer (ranks per stage / shares) x micro-batches
  // times.
  auto size = [&](const char *dim) {
    auto it = m.plan.find(dim);
    return double(it == m.plan.end() ? 1 : it->second);
  };
  double shares = size("cp");
  if (size("tp") > 1 && size("etp") == 1)
    shares *= size("tp");
  double perLayer =
      double(worldSize) / (size("pp") * shares) * double(m.numMicrobatches);
  if (int64_t n = m.routerLosses.loadBalancing)
    result.loadBalancingLoss =
        sums[LOOMRT_METRIC_LOAD_BALANCING] / (perLayer * double(n));
  if (int64_t n = m.routerLosses.zLoss)
    result.zLoss = sums[LOOMRT_METRIC_Z_LOSS] / (perLayer * double(n));
}

} // namespace loom::rank
