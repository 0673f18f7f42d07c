//===- RunSteps.cpp - The rank program's step loop ------------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Batches into backend memory, the micro-batch losses and their
// token-weighted mean over dp (x cp), validation, the Megatron-style log
// line and metrics records, and the loop over --steps.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Run.h"
#include "runtime/rank/StepProfile.h"


#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <unistd.h>

namespace loom::rank {

//===----------------------------------------------------------------------===//
// The step loop
//===----------------------------------------------------------------------===//

// Up without waiting (loomrt_upload), down with the one wait for the result.
float Run::allReduceScalar(loomrt_comm comm, int32_t op, float value) {
  loomrt_upload(dev.scalar.get(), &value, sizeof(float));
  loomrt_all_reduce(comm, LOOMRT_F32, op, dev.scalar.get(), dev.scalar.get(),
                    1);
  loomrt_copy(&value, dev.scalar.get(), sizeof(float));
  return value;
}

std::pair<float, float> Run::allReduceScalars(loomrt_comm comm, int32_t op,
                                              float a, float b) {
  float values[2] = {a, b};
  loomrt_upload(dev.scalar.get(), values, sizeof(values));
  loomrt_all_reduce(comm, LOOMRT_F32, op, dev.scalar.get(), dev.scalar.get(),
                    2);
  loomrt_copy(values, dev.scalar.get(), sizeof(values));
  return {values[0], values[1]};
}


float Run::meanLoss(const LossTally &tally) {
  float weighted = float(tally.weighted), tokens = float(tally.tokens);
  if (gradSize > 1)
    std::tie(weighted, tokens) = allReduceScalars(
        comms.at(m.gradientGroup), LOOMRT_SUM, weighted, tokens);
  return tokens > 0.0f ? weighted / tokens : 0.0f;
}

std::vector<float> Run::perTokenGradScales(const BatchReader &from,
                                           int64_t step, double lossScale) {
  // The counts come from the data alone: read ahead, before any backward.
  size_t n = size_t(m.numMicrobatches);
  std::vector<float> counts(n);
  MicroBatch ahead;
  for (size_t micro = 0; micro < n; ++micro) {
    from.read(step, int64_t(micro), dpRank, dpSize, ahead);
    double tokens = 0.0;
    for (float w : ahead.lossMask)
      tokens += w;
    counts[micro] = float(tokens);
  }
  // Each micro-batch's tokens over its cp chunks, then the step's over dp.
  if (comms.count("cp") && comms.at("cp")) {
    DeviceBuffer buf(int64_t(n * sizeof(float)));
    loomrt_copy(buf.get(), counts.data(), int64_t(n * sizeof(float)));
    loomrt_all_reduce(comms.at("cp"), LOOMRT_F32, LOOMRT_SUM, buf.get(),
                      buf.get(), int64_t(n));
    loomrt_copy(counts.data(), buf.get(), int64_t(n * sizeof(float)));
  }
  float total = 0.0f;
  for (float c : counts)
    total += c;
  if (dpSize > 1)
    total = allReduceScalar(comms.at("dp"), LOOMRT_SUM, total);
  std::vector<float> scales(n, 0.0f);
  if (total > 0.0f)
    for (size_t micro = 0; micro < n; ++micro)
      scales[micro] =
          float(lossScale * double(dpSize) * counts[micro] / double(total));
  return scales;
}

float Run::takeLoss(const BoundEntry &entry, int64_t micro) {
  if (entry.producesLoss)
    loomrt_copy(&loss, dev.loss.at(slotOf(entry, micro)), sizeof(float));
  return loss;
}

/// A test hook (device-contract.test): with LOOM_TEST_PLANT_HOST_ACCESS=1
/// the rank reads backend memory on the host, the mistake
/// --check-device-contract exists to catch. A plain cpu run reads the
/// value harmlessly; a checked run must die naming the access, which proves
/// the check was on in a run that otherwise equals a plain one.
void Run::plantHostAccessForTests(const void *device) const {
  static const bool plant = [] {
    const char *v = std::getenv("LOOM_TEST_PLANT_HOST_ACCESS");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  if (plant)
    (void)*static_cast<const volatile int32_t *>(device);
}

void Run::readBatch(const BoundEntry &entry, const BatchReader &from,
                    int64_t step, int64_t micro) {
  try {
    from.read(step, micro, dpRank, dpSize, batch);
    size_t slot = slotOf(entry, micro);
    int64_t bytes = int64_t(batch.tokens.size()) * 4;
    loomrt_upload(dev.tokens.at(slot), batch.tokens.data(), bytes);
    loomrt_upload(dev.labels.at(slot), batch.labels.data(), bytes);
    loomrt_upload(dev.lossMask.at(slot), batch.lossMask.data(), bytes);
    plantHostAccessForTests(dev.tokens.at(slot));
    double tokens = 0.0;
    for (float w : batch.lossMask)
      tokens += w;
    microTokens[size_t(micro)] = tokens;
  } catch (const Error &e) {
    std::string msg = tool + ": error: " + e.what();
    loomrt_abort(msg.c_str());
  }
}

void Run::forwardStep(BoundEntry &entry, const BatchReader &from,
                      int64_t step, LossTally &tally) {
  // A pipelined entry runs the step's micro-batches in one call, after
  // they are all read; the others one per call.
  auto add = [&](int64_t micro) {
    double tokens = microTokens[size_t(micro)];
    tally.weighted += takeLoss(entry, micro) * tokens;
    tally.tokens += tokens;
  };
  for (int64_t micro = 0; micro < m.numMicrobatches; ++micro) {
    readBatch(entry, from, step, micro);
    if (!entry.pipelined) {
      entry.fn(entry.args.data());
      add(micro);
    }
  }
  if (entry.pipelined) {
    entry.fn(entry.args.data());
    for (int64_t micro = 0; micro < m.numMicrobatches; ++micro)
      add(micro);
  }
}

float Run::evaluate() {
  // Megatron's evaluate(): the token-weighted mean of the micro-batch
  // losses; each evaluation continues where the last one stopped (consumed
  // valid samples are checkpointed).
  int64_t first = state.consumedValidSamples / samplesPerStep;
  LossTally tally;
  for (int64_t k = 0; k < opts.evalIters; ++k)
    forwardStep(evalEntry, *validReader, first + k, tally);
  state.consumedValidSamples += opts.evalIters * samplesPerStep;
  return evalEntry.producesLoss ? meanLoss(tally) : 0.0f;
}

void Run::logStep(const StepResult &result, float stepLoss, double seconds,
                  int64_t lastIteration, std::optional<float> validLoss) {
  int64_t tokensPerStep = samplesPerStep * m.seqLength;
  double ms = seconds * 1e3;
  double tps = seconds > 0 ? double(tokensPerStep) / seconds : 0.0;
  // Megatron's training_log fields, in its order.
  std::printf(" iteration %8" PRId64 "/%8" PRId64
              " | consumed samples: %12" PRId64
              " | elapsed time per iteration (ms): %.1f"
              " | tokens per second: %.1f",
              state.iteration, lastIteration, state.consumedSamples, ms, tps);
  if (opts.train)
    std::printf(" | learning rate: %E", result.lr);
  std::printf(" | global batch size: %5" PRId64 " | lm loss: %E |",
              samplesPerStep, double(stepLoss));
  if (result.loadBalancingLoss)
    std::printf(" load_balancing_loss: %E |", *result.loadBalancingLoss);
  if (result.zLoss)
    std::printf(" z_loss: %E |", *result.zLoss);
  if (opts.train) {
    if (dynamicScaling)
      std::printf(" loss scale: %.1f |", state.scaler.scale);
    if (result.gradNorm)
      std::printf(" grad norm: %.3f |", *result.gradNorm);
    std::printf(" number of skipped iterations: %3d |", int(result.skipped));
  }
  std::printf("\n");
  if (validLoss) {
    // Megatron's evaluate_and_print_results block.
    char line[200];
    std::snprintf(line, sizeof(line),
                  " validation loss at iteration %" PRId64
                  " | lm loss value: %E | lm loss PPL: %E | ",
                  state.iteration, double(*validLoss),
                  std::exp(std::min(20.0, double(*validLoss))));
    std::string rule(std::strlen(line) + 1, '-');
    std::printf("%s\n%s\n%s\n", rule.c_str(), line, rule.c_str());
  }
  std::fflush(stdout);
  if (metrics) {
    // %.9g round-trips an f32 exactly; JSON has no NaN/inf literals.
    auto number = [](double v, const char *fmt) {
      char text[40];
      if (std::isfinite(v))
        std::snprintf(text, sizeof(text), fmt, v);
      else
        std::snprintf(text, sizeof(text), "null");
      return std::string(text);
    };
    std::fprintf(metrics,
                 "{\"step\": %" PRId64 ", \"loss\": %s, \"step_time_ms\": "
                 "%.3f, \"tokens_per_second\": %.1f, \"consumed_samples\": "
                 "%" PRId64,
                 state.iteration, number(stepLoss, "%.9g").c_str(), ms, tps,
                 state.consumedSamples);
    if (opts.train) {
      // lr and grad norm in full double precision for reference checks.
      std::fprintf(metrics, ", \"lr\": %s, \"grad_norm\": %s",
                   number(result.lr, "%.17g").c_str(),
                   result.gradNorm ? number(*result.gradNorm, "%.17g").c_str()
                                   : "null");
      if (dynamicScaling)
        std::fprintf(metrics, ", \"loss_scale\": %s",
                     number(state.scaler.scale, "%.17g").c_str());
      std::fprintf(metrics, ", \"skipped_iterations\": %" PRId64,
                   state.skippedIterations);
      if (result.loadBalancingLoss)
        std::fprintf(metrics, ", \"load_balancing_loss\": %s",
                     number(*result.loadBalancingLoss, "%.9g").c_str());
      if (result.zLoss)
        std::fprintf(metrics, ", \"z_loss\": %s",
                     number(*result.zLoss, "%.9g").c_str());
    }
    if (validLoss)
      std::fprintf(metrics, ", \"valid_loss\": %s",
                   number(*validLoss, "%.9g").c_str());
    std::fprintf(metrics, "}\n");
    std::fflush(metrics);
  }
}

void Run::runSteps() {
  BoundEntry entry;
  collectively([&] {
    if (opts.data.empty())
      stream = syntheticTokenStream(opts.seed, m.vocabSize);
    else
      stream = openTokenStream(opts.data, opts.dataFormat);
    reader = std::make_unique<BatchReader>(
        *stream, m.microBatchSize, m.seqLength, m.numMicrobatches, m.vocabSize,
        m.eodTokenId, me->sequenceRanges);
    // Size the buffers once: the bound pointers stay valid.
    int64_t n = m.microBatchSize * me->localSeqLength();
    batch.tokens.resize(n);
    batch.labels.resize(n);
    batch.lossMask.resize(n);
    // One slot per micro-batch when this rank's entries are pipelined.
    size_t slots = me->entries.at("forward").pipelined()
                       ? size_t(m.numMicrobatches)
                       : 1;
    for (auto *bufs : {&dev.tokens, &dev.labels, &dev.lossMask})
      *bufs = SlotBuffer(n * 4, slots); // int32 or f32
    dev.loss = SlotBuffer(int64_t(sizeof(float)), slots);
    dev.gradScale = SlotBuffer(int64_t(sizeof(float)), slots); // trainStep
    dev.stepStats = DeviceBuffer(kStepStats * int64_t(sizeof(float)));
    microTokens.assign(size_t(m.numMicrobatches), 0.0);
    entry = bind(me->entries.at(opts.train ? "train_step" : "forward"));
    if (!opts.validData.empty()) {
      validStream = openTokenStream(opts.validData, opts.dataFormat);
      validReader = std::make_unique<BatchReader>(
          *validStream, m.microBatchSize, m.seqLength, m.numMicrobatches,
          m.vocabSize, m.eodTokenId, me->sequenceRanges);
      evalEntry = bind(me->entries.at("forward"));
    }
    if (me->logsLoss && !opts.metricsJsonl.empty()) {
      metrics = std::fopen(opts.metricsJsonl.c_str(), "w");
      if (!metrics)
        throw Error("cannot open metrics file " + opts.metricsJsonl + ": " +
                    std::strerror(errno));
    }
  });

  if (me->logsLoss) {
    // Megatron's order of the parallel sizes.
    std::string plan;
    for (const char *k : {"tp", "cp", "ep", "pp", "dp"})
      if (m.plan.count(k))
        plan += (plan.empty() ? "" : ", ") + std::string(k) + " " +
                std::to_string(m.plan.at(k));
    std::string data = stream->describe();
    if (stream->size() != INT64_MAX)
      data += ", " + std::to_string(reader->numSamples()) + " samples";
    if (validReader)
      data += "; validation: " + validStream->describe() + ", " +
              std::to_string(validReader->numSamples()) + " samples";
    std::string padding;
    if (m.paddedSeqLength != m.seqLength)
      padding = " (padded to " + std::to_string(m.paddedSeqLength) + ")";
    std::printf("loom: %s, %d rank%s (%s), micro-batch %" PRId64
                " x seq %" PRId64 "%s, %" PRId64 " micro-batch%s x dp %" PRId64
                ", data: %s\n",
                m.family.empty() ? "model" : m.family.c_str(), worldSize,
                worldSize == 1 ? "" : "s", plan.c_str(), m.microBatchSize,
                m.seqLength, padding.c_str(), m.numMicrobatches,
                m.numMicrobatches == 1 ? "" : "es", dpSize, data.c_str());
    if (opts.train)
      reportOptimizerMemory();
    std::fflush(stdout);
  }

  std::unique_ptr<StepProfile> profiler;
  if (opts.profile) {
    if (opts.profileRank >= worldSize)
      throw Error("--profile-rank " + std::to_string(opts.profileRank) +
                  " but the job has " + std::to_string(worldSize) + " rank" +
                  (worldSize == 1 ? "" : "s"));
    profiler = std::make_unique<StepProfile>(rank == opts.profileRank, rank,
                                             opts.profileJson);
  }

  // A resumed run continues the iteration count and the sample stream.
  int64_t firstIteration = state.iteration;
  int64_t firstDataStep = state.consumedSamples / samplesPerStep;
  int64_t lastIteration = firstIteration + opts.steps;
  for (int64_t step = 0; step < opts.steps; ++step) {
    double start = loomrt_wtime();
    if (profiler)
      profiler->beginStep();
    StepResult result;
    if (opts.train) {
      trainStep(entry, firstDataStep + step, step == 0, result);
    } else {
      LossTally tally;
      forwardStep(entry, *reader, firstDataStep + step, tally);
      result.meanLoss = entry.producesLoss ? meanLoss(tally) : 0.0f;
    }
    state.iteration += 1;
    state.consumedSamples += samplesPerStep;
    const float stepLoss = result.meanLoss;
    if (profiler)
      profiler->endStep(state.iteration);
    double seconds = loomrt_wtime() - start;
    // Validation after the step, untimed; the last step's too.
    std::optional<float> validLoss;
    if (validReader && (state.iteration % opts.evalInterval == 0 ||
                        step + 1 == opts.steps))
      validLoss = evaluate();
    // Not timed, as Megatron's check is not.
    if (opts.checkWeightHashInterval > 0 &&
        state.iteration % opts.checkWeightHashInterval == 0)
      checkWeightHashes();
    if (me->logsLoss)
      logStep(result, stepLoss, seconds, lastIteration, validLoss);
    // Megatron's --save-interval: the latest checkpoint, replaced
    // atomically; the last step's is written after the loop.
    if (opts.saveInterval > 0 && state.iteration % opts.saveInterval == 0 &&
        step + 1 < opts.steps)
      saveCheckpoints();
  }
  if (metrics) {
    std::fclose(metrics);
    metrics = nullptr;
  }
  if (profiler)
    profiler->print(stdout);
}

} // namespace loom::rank
