//===- OptimizerTest.cpp - Schedule, decay rule, clipping, loss scaler ----===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The scalar training math against values worked out by hand from
// Megatron-LM's OptimizerParamScheduler, clip_grad_norm_fp32 and
// DynamicGradScaler, and the optimizer-state file: moments written from one
// plan read back into another.
//
//===----------------------------------------------------------------------===//

#include "test/Unit/Rank/TempDir.h"
#include "test/Unit/Rank/TestManifests.h"

#include "runtime/common/ClipCoefficient.h"
#include "runtime/rank/Checkpoint.h"
#include "runtime/rank/Program.h"
#include "runtime/rank/Optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace loom::rank;
using loom::rank::testing::fusedQkvManifest;
using loom::rank::testing::TempDir;

namespace {

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s{/*maxLr=*/1e-3, /*minLr=*/1e-4, /*warmupSteps=*/4,
               /*decaySteps=*/14, LrDecayStyle::Cosine};
  // Linear warmup from 0; the first update (numSteps 0) has lr 0.
  EXPECT_DOUBLE_EQ(s.at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.at(1), 2.5e-4);
  EXPECT_DOUBLE_EQ(s.at(4), 1e-3);
  // Cosine over the 10 steps after warmup: half way is the mean of peak and
  // floor, a quarter of the way is floor + (peak - floor)(1 + cos(pi/4))/2.
  EXPECT_NEAR(s.at(9), 5.5e-4, 1e-15);
  EXPECT_NEAR(s.at(6) - 1e-4, 9e-4 * 0.5 * (1.0 + std::cos(M_PI / 5)), 1e-15);
  EXPECT_NEAR(s.at(14), 1e-4, 1e-15);
  // Past the decay: the floor.
  EXPECT_DOUBLE_EQ(s.at(15), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(1000), 1e-4);
  // Monotone after the peak.
  for (int64_t k = 4; k < 20; ++k)
    EXPECT_LE(s.at(k + 1), s.at(k)) << k;
}

TEST(LrSchedule, NoWarmup) {
  LrSchedule s{2e-3, 0.0, 0, 10, LrDecayStyle::Cosine};
  EXPECT_DOUBLE_EQ(s.at(0), 2e-3);
  EXPECT_NEAR(s.at(5), 1e-3, 1e-15);
  EXPECT_NEAR(s.at(10), 0.0, 1e-18);
  // Warmup and decay both 0 (a --steps 0 run): the peak, not 0/0.
  EXPECT_DOUBLE_EQ((LrSchedule{2e-3, 0.0, 0, 0}.at(0)), 2e-3);
}

TEST(LrSchedule, LinearIsTheDefault) {
  LrSchedule s{1e-3, 1e-4, 4, 14};
  EXPECT_EQ(s.style, LrDecayStyle::Linear);
  EXPECT_DOUBLE_EQ(s.at(2), 5e-4);
  EXPECT_NEAR(s.at(6), 1e-4 + 0.8 * 9e-4, 1e-15);
  EXPECT_NEAR(s.at(9), 5.5e-4, 1e-15);
  EXPECT_NEAR(s.at(14), 1e-4, 1e-15);
  EXPECT_DOUBLE_EQ(s.at(15), 1e-4);
}

TEST(LrSchedule, ConstantKeepsThePeakAfterWarmup) {
  LrSchedule s{1e-3, 1e-4, 4, 14, LrDecayStyle::Constant};
  EXPECT_DOUBLE_EQ(s.at(2), 5e-4);
  EXPECT_DOUBLE_EQ(s.at(5), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(100), 1e-3); // past the decay too, as Megatron
}

TEST(LrSchedule, InverseSquareRoot) {
  LrSchedule s{1e-3, 1e-4, 4, 100, LrDecayStyle::InverseSquareRoot};
  EXPECT_DOUBLE_EQ(s.at(4), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(16), 5e-4);  // 1e-3 * sqrt(4) / sqrt(16)
  EXPECT_DOUBLE_EQ(s.at(64), 2.5e-4);
  EXPECT_DOUBLE_EQ(s.at(101), 1e-4); // past the decay: the floor
  s.minLr = 3e-4;                    // the floor also bounds the decay
  EXPECT_DOUBLE_EQ(s.at(64), 3e-4);
  // Without warmup both square roots are of at least 1.
  EXPECT_DOUBLE_EQ((LrSchedule{1e-3, 0, 0, 100,
                               LrDecayStyle::InverseSquareRoot}
                        .at(0)),
                   1e-3);
}

TEST(LrSchedule, WsdHoldsThenAnneals) {
  auto at = [](WsdDecayStyle shape, int64_t n) {
    LrSchedule s{1e-3, 0.0, 0, 20, LrDecayStyle::WSD};
    s.wsdDecaySteps = 10;
    s.wsdStyle = shape;
    return s.at(n);
  };
  for (WsdDecayStyle shape :
       {WsdDecayStyle::Exponential, WsdDecayStyle::Linear,
        WsdDecayStyle::Cosine, WsdDecayStyle::MinusSqrt}) {
    EXPECT_DOUBLE_EQ(at(shape, 0), 1e-3);
    EXPECT_DOUBLE_EQ(at(shape, 10), 1e-3); // the stable phase ends here
    EXPECT_NEAR(at(shape, 20), 0.0, 1e-18);
  }
  EXPECT_NEAR(at(WsdDecayStyle::Exponential, 15), 1e-3 * (std::sqrt(2.0) - 1),
              1e-15);
  EXPECT_NEAR(at(WsdDecayStyle::Linear, 15), 5e-4, 1e-15);
  EXPECT_NEAR(at(WsdDecayStyle::Cosine, 15), 5e-4, 1e-15);
  EXPECT_NEAR(at(WsdDecayStyle::MinusSqrt, 15), 1e-3 * (1 - std::sqrt(0.5)),
              1e-15);
}

TEST(LrSchedule, WarmupFromInitAndFractionalWarmup) {
  LrSchedule s{1e-3, 0.0, 4, 14};
  s.initLr = 1e-4;
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(2), 5.5e-4);
  // --lr-warmup-fraction 0.25 of 10 decay iterations: 2.5 warmup steps.
  LrSchedule f{1e-3, 0.0, 2.5, 10};
  EXPECT_DOUBLE_EQ(f.at(2), 8e-4);
  EXPECT_NEAR(f.at(3), 1e-3 * (1 - 0.5 / 7.5), 1e-15);
}

TEST(LrSchedule, StyleNamesAreMegatrons) {
  EXPECT_EQ(styleNames(kLrDecayStyles),
            "constant|linear|cosine|inverse-square-root|WSD");
  EXPECT_EQ(styleNames(kWsdDecayStyles),
            "exponential|linear|cosine|minus_sqrt");
  EXPECT_EQ(parseStyle(kLrDecayStyles, "WSD"), LrDecayStyle::WSD);
  EXPECT_EQ(parseStyle(kLrDecayStyles, "wsd"), std::nullopt);
}

TEST(WeightDecay, BiasesAndOneDimensionalParamsAreExempt) {
  EXPECT_TRUE(takesWeightDecay("transformer.h.0.attn.q.weight", {64, 64}));
  EXPECT_TRUE(takesWeightDecay("transformer.wte.weight", {512, 64}));
  EXPECT_FALSE(takesWeightDecay("transformer.h.0.attn.q.bias", {64}));
  EXPECT_FALSE(takesWeightDecay("transformer.h.0.ln_1.weight", {64}));
  EXPECT_FALSE(takesWeightDecay("model.norm.weight", {64}));
  // The name rule alone also exempts a (hypothetical) 2-D bias.
  EXPECT_FALSE(takesWeightDecay("x.bias", {4, 4}));
}

TEST(Clipping, MegatronCoefficient) {
  // From the gradient's sum of squares (the AdamW kernels read it).
  using loomrt::clipCoefficient;
  EXPECT_FLOAT_EQ(clipCoefficient(0.25f, 1.0f), 1.0f);
  EXPECT_FLOAT_EQ(clipCoefficient(16.0f, 1.0f), float(1.0 / (4.0 + 1e-6)));
  // Exactly at the clip the epsilon makes the coefficient just below 1.
  EXPECT_LT(clipCoefficient(1.0f, 1.0f), 1.0f);
  EXPECT_FLOAT_EQ(clipCoefficient(1e9f, 0.0f), 1.0f); // clipping off
  // After scaling, the norm is the clip (up to the epsilon).
  float norm = 7.5f, c = clipCoefficient(norm * norm, 2.0f);
  EXPECT_NEAR(norm * c, 2.0, 1e-6);
}

TEST(LossScaler, HysteresisBackoffAndGrowth) {
  DynamicLossScaler s;
  s.scale = 1024;
  s.hysteresis = s.hysteresisTracker = 2;
  s.growthInterval = 3;
  // First overflow: only spends hysteresis.
  s.update(true);
  EXPECT_EQ(s.scale, 1024);
  EXPECT_EQ(s.hysteresisTracker, 1);
  // Second: backs off; every further overflow backs off again.
  s.update(true);
  EXPECT_EQ(s.scale, 512);
  s.update(true);
  EXPECT_EQ(s.scale, 256);
  EXPECT_EQ(s.hysteresisTracker, -1);
  // Clean steps count towards growth; growth refills the hysteresis.
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale, 256);
  EXPECT_EQ(s.growthTracker, 2);
  s.update(false);
  EXPECT_EQ(s.scale, 512);
  EXPECT_EQ(s.growthTracker, 0);
  EXPECT_EQ(s.hysteresisTracker, 2);
  // An overflow restarts the growth count.
  s.update(false);
  s.update(true);
  EXPECT_EQ(s.growthTracker, 0);
  EXPECT_EQ(s.scale, 512);
}

TEST(LossScaler, NeverBelowMinimum) {
  DynamicLossScaler s;
  s.scale = 4;
  s.minScale = 1;
  s.hysteresis = s.hysteresisTracker = 1;
  for (int i = 0; i < 5; ++i)
    s.update(true);
  EXPECT_EQ(s.scale, 1);
}

TEST(TrainState, JsonRoundTripAndErrors) {
  TrainState s;
  s.iteration = 7;
  s.consumedSamples = 28;
  s.optimizerSteps = 6;
  s.skippedIterations = 1;
  s.schedule = {3e-4, 3e-5, 2, 100, LrDecayStyle::WSD, 1e-5, 30,
                WsdDecayStyle::MinusSqrt};
  s.decayStepsGiven = true;
  s.warmupFraction = 0.02;
  s.adamw = {0.1, 0.8, 0.95, 1e-6, 0.5};
  s.hasScaler = true;
  s.scaler.scale = 65536;
  s.scaler.growthTracker = 5;
  s.scaler.hysteresisTracker = 1;
  TrainState t = TrainState::fromJson(s.toJson(), "x");
  EXPECT_EQ(t.iteration, 7);
  EXPECT_EQ(t.consumedSamples, 28);
  EXPECT_EQ(t.optimizerSteps, 6);
  EXPECT_EQ(t.skippedIterations, 1);
  EXPECT_EQ(t.schedule.maxLr, 3e-4);
  EXPECT_EQ(t.schedule.minLr, 3e-5);
  EXPECT_EQ(t.schedule.warmupSteps, 2);
  EXPECT_EQ(t.schedule.decaySteps, 100);
  EXPECT_EQ(t.schedule.style, LrDecayStyle::WSD);
  EXPECT_EQ(t.schedule.initLr, 1e-5);
  EXPECT_EQ(t.schedule.wsdDecaySteps, 30);
  EXPECT_EQ(t.schedule.wsdStyle, WsdDecayStyle::MinusSqrt);
  EXPECT_EQ(t.warmupFraction, 0.02);
  EXPECT_EQ(t.adamw.weightDecay, 0.1);
  EXPECT_EQ(t.adamw.beta1, 0.8);
  EXPECT_EQ(t.adamw.beta2, 0.95);
  EXPECT_EQ(t.adamw.eps, 1e-6);
  EXPECT_EQ(t.adamw.clipGrad, 0.5);
  EXPECT_TRUE(t.hasScaler);
  EXPECT_EQ(t.scaler.scale, 65536);
  EXPECT_EQ(t.scaler.growthTracker, 5);
  EXPECT_EQ(t.scaler.hysteresisTracker, 1);

  EXPECT_TRUE(t.decayStepsGiven);
  s.hasScaler = false;
  s.decayStepsGiven = false; // defaulted: not carried over
  t = TrainState::fromJson(s.toJson(), "x");
  EXPECT_FALSE(t.hasScaler);
  EXPECT_FALSE(t.decayStepsGiven);
  auto errorOf = [](const std::string &text) {
    try {
      TrainState::fromJson(text, "f.optim.safetensors");
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(errorOf("{"), "f.optim.safetensors: the training state is not JSON");
  // A state saved before the decay styles existed was cosine.
  std::string old = s.toJson();
  size_t at = old.find("\"style\":\"WSD\"");
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(TrainState::fromJson(old.substr(0, at) +
                                     old.substr(at + 14), // and its comma
                                 "x")
                .schedule.style,
            LrDecayStyle::Cosine);
  old.replace(at, 13, "\"style\":\"wsd\"");
  EXPECT_EQ(errorOf(old), "f.optim.safetensors: training state "
                          "\"lr_schedule.style\" is not a known style");
  // A number too large for a double is nlohmann's out_of_range, not a
  // parse_error (the same escape fuzz/ManifestFuzzer.cpp found).
  EXPECT_EQ(errorOf("{\"iteration\": 1e999}"),
            "f.optim.safetensors: the training state is not JSON");
  EXPECT_EQ(errorOf("{\"iteration\": 1}"),
            "f.optim.safetensors: the training state has no "
            "\"consumed_samples\"");
  EXPECT_EQ(errorOf("{\"iteration\": -1}"),
            "f.optim.safetensors: training state \"iteration\" must be a "
            "non-negative integer");
}

TEST(OptimizerState, PathNextToTheCheckpoint) {
  EXPECT_EQ(optimizerStatePath("a/ckpt.safetensors"),
            "a/ckpt.optim.safetensors");
  EXPECT_EQ(optimizerStatePath("ckpt"), "ckpt.optim.safetensors");
}

TEST(OptimizerState, MomentsRoundTripAcrossPlans) {
  // Moments of a tp 2 plan, written with the HF layout under optimizer.*
  // prefixes and read back into tp 1 and tp 4: every element lands where
  // the global index says, whatever the sharding.
  TempDir dir;
  auto layoutOf = [](int tp) {
    Manifest m = parseManifest(fusedQkvManifest(tp).dump(), "m.json");
    return std::make_pair(m, stateLayout(m,
                                         {"optimizer.exp_avg.",
                                          "optimizer.exp_avg_sq."},
                                         LOOMRT_F32));
  };
  // The value of element i of a parameter's global tensor, per prefix.
  auto value = [](size_t prefix, size_t param, int64_t i) {
    return float(prefix * 1000 + param * 100) + float(i) * 0.25f;
  };
  auto fill = [&](const Manifest &m, const ParamSpec &p, size_t k,
                  const Shard &s, float *out) {
    size_t n = m.params.size();
    Shape g = p.shape;
    int64_t count = numElements(s.box.shape);
    for (int64_t e = 0; e < count; ++e) {
      // Global row-major index of local element e (1-D or 2-D boxes).
      int64_t gi = s.box.shape.size() == 1
                       ? s.box.offset[0] + e
                       : (s.box.offset[0] + e / s.box.shape[1]) * g[1] +
                             s.box.offset[1] + e % s.box.shape[1];
      out[e] = value(k / n, k % n, gi);
    }
  };

  auto [m2, l2] = layoutOf(2);
  EXPECT_EQ(l2.params.size(), 2 * m2.params.size());
  EXPECT_EQ(l2.hfTensors.size(), 2 * m2.hfTensors.size());
  EXPECT_EQ(l2.hfTensors[0].name, "optimizer.exp_avg.h.0.attn.c_attn.bias");
  std::string path = dir.path("x.optim.safetensors");
  writeCheckpoint(
      path, l2,
      [&](const ParamSpec &p, const Shard &s, void *out) {
        size_t k = size_t(&p - l2.params.data());
        fill(m2, p, k, s, static_cast<float *>(out));
      },
      {{"format", "pt"}});
  SafetensorsFile f(path);
  EXPECT_EQ(f.tensors().at("optimizer.exp_avg_sq.wte.weight").dtypeName, "F32");

  for (int tp : {1, 4}) {
    auto [m, l] = layoutOf(tp);
    for (int32_t r = 0; r < tp; ++r) {
      std::map<std::string, std::vector<float>> got;
      std::map<std::string, void *> ptrs;
      for (const ParamSpec &p : l.params)
        if (const Shard *s = p.shardOf(r)) {
          got[p.name].assign(numElements(s->box.shape), -1.0f);
          ptrs[p.name] = got[p.name].data();
        }
      loadCheckpoint(path, l, r, ptrs);
      for (size_t k = 0; k < l.params.size(); ++k) {
        const ParamSpec &p = l.params[k];
        const Shard *s = p.shardOf(r);
        std::vector<float> expect(numElements(s->box.shape));
        fill(m, p, k, *s, expect.data());
        EXPECT_EQ(got[p.name], expect) << "tp " << tp << " rank " << r << " "
                                       << p.name;
      }
    }
  }
}

TEST(Options, TrainingFlags) {
  Options o = parseOptions(
      {"--train", "--lr", "3e-4", "--min-lr=3e-5", "--lr-warmup-steps", "2",
       "--lr-decay-steps", "10", "--weight-decay", "0.1", "--adam-beta1",
       "0.8", "--adam-beta2", "0.95", "--adam-eps", "1e-6", "--clip-grad", "0",
       "--initial-loss-scale", "65536", "--min-loss-scale", "2",
       "--loss-scale-window", "50", "--hysteresis", "3", "--dump-grads",
       "g.safetensors", "--check-weight-hash-interval", "5", "--save",
       "c.safetensors", "--save-interval", "100", "--valid-data", "v.bin",
       "--eval-interval", "20", "--eval-iters", "3"});
  EXPECT_TRUE(o.train);
  EXPECT_EQ(*o.lr, 3e-4);
  EXPECT_EQ(*o.minLr, 3e-5);
  EXPECT_EQ(*o.lrWarmupSteps, 2);
  EXPECT_EQ(*o.lrDecaySteps, 10);
  EXPECT_EQ(*o.weightDecay, 0.1);
  EXPECT_EQ(*o.adamBeta1, 0.8);
  EXPECT_EQ(*o.adamBeta2, 0.95);
  EXPECT_EQ(*o.adamEps, 1e-6);
  EXPECT_EQ(*o.clipGrad, 0.0);
  EXPECT_EQ(o.initialLossScale, 65536);
  EXPECT_EQ(o.minLossScale, 2);
  EXPECT_EQ(o.lossScaleWindow, 50);
  EXPECT_EQ(o.hysteresis, 3);
  EXPECT_EQ(o.dumpGrads, "g.safetensors");
  EXPECT_EQ(o.checkWeightHashInterval, 5);
  EXPECT_EQ(o.saveInterval, 100);
  EXPECT_EQ(o.validData, "v.bin");
  EXPECT_EQ(o.evalInterval, 20);
  EXPECT_EQ(o.evalIters, 3);
  // Unset settings are left to the checkpoint or Megatron's defaults.
  Options d = parseOptions({});
  EXPECT_FALSE(d.train);
  EXPECT_FALSE(d.lr);
  EXPECT_FALSE(d.weightDecay);
  EXPECT_FALSE(d.clipGrad);
  AdamWConfig defaults;
  EXPECT_EQ(defaults.weightDecay, 0.01);
  EXPECT_EQ(defaults.beta1, 0.9);
  EXPECT_EQ(defaults.beta2, 0.999);
  EXPECT_EQ(defaults.eps, 1e-8);
  EXPECT_EQ(defaults.clipGrad, 1.0);
  EXPECT_EQ(d.initialLossScale, 4294967296.0);
  EXPECT_EQ(d.lossScaleWindow, 1000);
  EXPECT_EQ(d.hysteresis, 2);
  EXPECT_EQ(d.checkWeightHashInterval, 0);
  EXPECT_EQ(d.evalInterval, 1000);
  EXPECT_EQ(d.evalIters, 100);
}

TEST(Options, TrainingFlagErrors) {
  auto errorOf = [](const std::vector<std::string> &args) {
    try {
      parseOptions(args);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(errorOf({"--lr", "fast"}), "--lr expects a number, got 'fast'");
  EXPECT_EQ(errorOf({"--lr", "-1"}), "--lr must be at least 0, got -1");
  EXPECT_EQ(errorOf({"--adam-eps", "0"}), "--adam-eps must be above 0, got 0");
  EXPECT_EQ(errorOf({"--adam-beta2", "1"}), "--adam-beta2 must be below 1");
  EXPECT_EQ(errorOf({"--lr", "1e-4", "--min-lr", "1e-3"}),
            "--min-lr must not exceed --lr");
  EXPECT_EQ(errorOf({"--dump-grads", "g"}), "--dump-grads needs --train");
  EXPECT_EQ(errorOf({"--hysteresis", "0"}),
            "--hysteresis must be at least 1, got 0");
  EXPECT_EQ(errorOf({"--lr-decay-style", "exp"}),
            "--lr-decay-style expects constant, linear, cosine, "
            "inverse-square-root, WSD, got 'exp'");
  EXPECT_EQ(errorOf({"--lr-warmup-fraction", "0.1", "--lr-warmup-iters", "3"}),
            "--lr-warmup-fraction and --lr-warmup-iters exclude each other");
  EXPECT_EQ(errorOf({"--lr-warmup-fraction", "1.5"}),
            "--lr-warmup-fraction must be at most 1");
  EXPECT_EQ(errorOf({"--lr-decay-style", "cosine", "--lr-wsd-decay-iters", "3"}),
            "--lr-wsd-decay-iters and --lr-wsd-decay-style need "
            "--lr-decay-style WSD");
  // An alias is named by the flag's Megatron spelling.
  EXPECT_EQ(errorOf({"--lr-decay-steps", "-2"}),
            "--lr-decay-iters must be at least 0, got -2");
}

TEST(Options, ScheduleFlags) {
  Options o = parseOptions(
      {"--lr-decay-style", "WSD", "--lr-warmup-fraction", "0.1",
       "--lr-warmup-init", "1e-5", "--lr-decay-iters", "40",
       "--lr-wsd-decay-iters", "8", "--lr-wsd-decay-style", "minus_sqrt"});
  EXPECT_EQ(o.lrDecayStyle, LrDecayStyle::WSD);
  EXPECT_EQ(o.lrWarmupFraction, 0.1);
  EXPECT_EQ(o.lrWarmupInit, 1e-5);
  EXPECT_EQ(o.lrDecaySteps, 40);
  EXPECT_EQ(o.lrWsdDecaySteps, 8);
  EXPECT_EQ(o.lrWsdDecayStyle, WsdDecayStyle::MinusSqrt);
  EXPECT_EQ(parseOptions({"--lr-warmup-iters", "3"}).lrWarmupSteps, 3);
  EXPECT_FALSE(parseOptions({}).lrDecayStyle); // the checkpoint's or linear
}

} // namespace
