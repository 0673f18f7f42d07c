//===- Options.cpp - The flags of the per-rank executables ----------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// One CLI11 app defines every flag. Values are parsed by our own checks
// (parseInteger, parseReal) so that every error reads "<flag> must be at
// least 1, got 0" whatever the flag; CLI11 does the command-line grammar
// (--flag value, --flag=value, repeats, unknown flags) and the help text.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Options.h"

#include "runtime/rank/Error.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace loom::rank {

namespace {

int64_t parseInteger(const std::string &flag, const std::string &value,
                     int64_t min) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE)
    throw Error(flag + " expects an integer, got '" + value + "'");
  if (v < min)
    throw Error(flag + " must be at least " + std::to_string(min) + ", got " +
                value);
  return v;
}

double parseReal(const std::string &flag, const std::string &value,
                 double min, bool inclusive = true) {
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
    throw Error(flag + " expects a number, got '" + value + "'");
  if (inclusive ? v < min : v <= min) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", min);
    throw Error(flag + " must be " + (inclusive ? "at least " : "above ") +
                text + ", got " + value);
  }
  return v;
}

const char *const kTraining =
    "Training (a program compiled with loom-compile --train)";

/// Declares every flag of the rank program, storing into `o`.
void defineFlags(CLI::App &app, Options &o) {
  app.set_help_flag(); // --help is a flag like the others: o.help
  app.allow_extras();  // reported by parseOptions, in our words
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  auto text = [&](const char *flag, std::string &into, const char *type,
                  const char *help) {
    return app
        .add_option_function<std::string>(
            flag, [&into](const std::string &v) { into = v; }, help)
        ->type_name(type);
  };
  // Errors name a flag by its first spelling ("--a,--b" declares aliases).
  auto shown = [](const char *flag) {
    std::string s(flag);
    return s.substr(0, s.find(','));
  };
  auto integer = [&](const char *flag, auto &into, int64_t min,
                     const char *help) {
    using T = std::decay_t<decltype(into)>;
    return app
        .add_option_function<std::string>(
            flag,
            [&into, name = shown(flag), min](const std::string &v) {
              into = T(parseInteger(name, v, min));
            },
            help)
        ->type_name("N");
  };
  auto real = [&](const char *flag, auto &into, double min, bool inclusive,
                  const char *help) {
    return app
        .add_option_function<std::string>(
            flag,
            [&into, name = shown(flag), min, inclusive](const std::string &v) {
              into = parseReal(name, v, min, inclusive);
            },
            help)
        ->type_name("X");
  };

  app.add_flag("-h,--help", o.help, "this text");
  text("--manifest", o.manifest, "PATH",
       "manifest.json (default: next to the executable)");
  integer("--steps,--train-iters", o.steps, 0,
          "steps to run (default 1; --train-iters is Megatron's name, but "
          "counts the steps of this run: a resumed run adds them)");
  text("--data", o.data, "FILE",
       "Megatron .bin/.idx (prefix or either file) or a raw token file "
       "(default: synthetic data)");
  app.add_option_function<std::string>(
         "--data-format",
         [&o](const std::string &v) {
           if (v == "int32")
             o.dataFormat = RawFormat::Int32;
           else if (v == "uint16")
             o.dataFormat = RawFormat::UInt16;
           else
             throw Error("--data-format expects int32 or uint16, got '" + v +
                         "'");
         },
         "raw token file of int32 or uint16 ids")
      ->type_name("F");
  integer("--seed", o.seed, 0,
          "initialization and synthetic-data seed (default 1234)");
  text("--metrics-jsonl", o.metricsJsonl, "FILE", "one JSON object per step");
  text("--load", o.load, "CKPT", "start from a safetensors checkpoint");
  text("--save", o.save, "CKPT", "write a safetensors checkpoint at the end");
  text("--load-sharded", o.loadSharded, "DIR",
       "start from a per-rank checkpoint of this plan");
  text("--save-sharded", o.saveSharded, "DIR",
       "write a per-rank checkpoint at the end");
  integer("--save-interval", o.saveInterval, 1,
          "also write --save / --save-sharded every N iterations");
  integer("--threads", o.threads, 1, "kernel threads per rank");
  real("--distributed-timeout-minutes", o.distributedTimeoutMinutes, 0.0,
       false,
       "end the job when a collective or p2p waits longer, naming the ranks "
       "that did not arrive (default 10)");
  app.add_flag("--trace-pipeline", o.tracePipeline,
               "print each forward and backward step of a pipelined program "
               "as it starts (loom-trace: rank R F<micro>.<chunk>) and where "
               "each chunk's gradients are final and their data-parallel "
               "reduction starts (loom-trace: rank R G<chunk>)");
  app.add_flag("--profile", o.profile,
               "count and time the runtime's entry points in every step and "
               "print, for one rank, a table by total time after the run "
               "(from the second step on, when there is one)");
  integer("--profile-rank", o.profileRank, 0,
          "the rank --profile reports (default 0)");
  text("--profile-json", o.profileJson, "FILE",
       "with --profile: one JSON object per step (JSON lines): step, ms, "
       "allocations, host_syncs and each entry point's count and ms");
  integer("--check-weight-hash-interval", o.checkWeightHashInterval, 0,
          "every N steps, check that all ranks holding the same part of a "
          "parameter hold the same bytes (default 0: never)");

  app.add_flag("--train", o.train,
               "run train_step and AdamW instead of the forward only")
      ->group(kTraining);
  real("--lr", o.lr, 0.0, true, "peak learning rate (default 1e-3)")
      ->group(kTraining);
  real("--min-lr", o.minLr, 0.0, true, "learning-rate floor (default 0)")
      ->group(kTraining);
  auto style = [&](const char *flag, auto &into, const auto &table,
                   const std::string &help) {
    return app
        .add_option_function<std::string>(
            flag,
            [&into, &table, flag](const std::string &v) {
              into = parseStyle(table, v);
              if (!into)
                throw Error(std::string(flag) + " expects " +
                            styleNames(table, ", ") + ", got '" + v + "'");
            },
            help + " (" + styleNames(table, ", ") + ")")
        ->type_name("STYLE")
        ->group(kTraining);
  };
  style("--lr-decay-style", o.lrDecayStyle, kLrDecayStyles,
        "learning-rate decay after the warmup, default linear");
  integer("--lr-warmup-iters,--lr-warmup-steps", o.lrWarmupSteps, 0,
          "linear warmup over N iterations (default 0)")
      ->group(kTraining);
  real("--lr-warmup-fraction", o.lrWarmupFraction, 0.0, true,
       "warmup as a fraction of --lr-decay-iters instead")
      ->group(kTraining);
  real("--lr-warmup-init", o.lrWarmupInit, 0.0, true,
       "learning rate the warmup starts from (default 0)")
      ->group(kTraining);
  integer("--lr-decay-iters,--lr-decay-steps", o.lrDecaySteps, 0,
          "iteration where the decay reaches --min-lr (default: the last "
          "step)")
      ->group(kTraining);
  integer("--lr-wsd-decay-iters", o.lrWsdDecaySteps, 1,
          "WSD: length of the final annealing phase")
      ->group(kTraining);
  style("--lr-wsd-decay-style", o.lrWsdDecayStyle, kWsdDecayStyles,
        "WSD: shape of the annealing, default exponential");
  real("--weight-decay", o.weightDecay, 0.0, true,
       "AdamW decay of >1-D non-bias parameters (default 0.01)")
      ->group(kTraining);
  real("--adam-beta1", o.adamBeta1, 0.0, true, "AdamW beta1 (default 0.9)")
      ->group(kTraining);
  real("--adam-beta2", o.adamBeta2, 0.0, true, "AdamW beta2 (default 0.999)")
      ->group(kTraining);
  real("--adam-eps", o.adamEps, 0.0, false, "AdamW epsilon (default 1e-8)")
      ->group(kTraining);
  real("--clip-grad", o.clipGrad, 0.0, true,
       "global gradient-norm clip, 0 = off (default 1.0)")
      ->group(kTraining);
  real("--initial-loss-scale", o.initialLossScale, 0.0, false,
       "f16 dynamic loss scaler: initial scale (default 2^32)")
      ->group(kTraining);
  real("--min-loss-scale", o.minLossScale, 0.0, false,
       "f16 dynamic loss scaler: floor (default 1)")
      ->group(kTraining);
  integer("--loss-scale-window", o.lossScaleWindow, 1,
          "f16 dynamic loss scaler: clean steps before the scale grows "
          "(default 1000)")
      ->group(kTraining);
  integer("--hysteresis", o.hysteresis, 1,
          "f16 dynamic loss scaler: overflows before backing off (default 2)")
      ->group(kTraining);
  text("--dump-grads", o.dumpGrads, "FILE",
       "write the first step's gradients (safetensors)")
      ->group(kTraining);
  app.add_flag("--use-distributed-optimizer", o.useDistributedOptimizer,
               "shard the optimizer state over data-parallel ranks (expert "
               "parameters' over their expert data-parallel group)")
      ->group(kTraining);
  app.add_flag("--calculate-per-token-loss", o.calculatePerTokenLoss,
               "make the gradient that of the step's token mean (each "
               "micro-batch weighted by its loss tokens), not the mean of "
               "the micro-batch means")
      ->group(kTraining);
  text("--valid-data", o.validData, "FILE",
       "validation tokens (the forms of --data)")
      ->group(kTraining);
  integer("--eval-interval", o.evalInterval, 1,
          "validate every N iterations and after the last (default 1000)")
      ->group(kTraining);
  integer("--eval-iters", o.evalIters, 1,
          "global batches per validation (default 100)")
      ->group(kTraining);
}

/// Checks between flags, after every value parsed.
void checkCombinations(const Options &o, const std::vector<std::string> &args) {
  if (o.dataFormat && o.data.empty())
    throw Error("--data-format needs --data");
  for (const auto &[name, beta] :
       {std::pair{"--adam-beta1", o.adamBeta1}, {"--adam-beta2", o.adamBeta2}})
    if (beta && *beta >= 1.0)
      throw Error(std::string(name) + " must be below 1");
  if (o.minLr && o.lr && *o.minLr > *o.lr)
    throw Error("--min-lr must not exceed --lr");
  if (o.lrWarmupFraction && o.lrWarmupSteps)
    throw Error("--lr-warmup-fraction and --lr-warmup-iters exclude each "
                "other");
  if (o.lrWarmupFraction && *o.lrWarmupFraction > 1.0)
    throw Error("--lr-warmup-fraction must be at most 1");
  if (o.lrDecayStyle && *o.lrDecayStyle != LrDecayStyle::WSD &&
      (o.lrWsdDecaySteps || o.lrWsdDecayStyle))
    throw Error("--lr-wsd-decay-iters and --lr-wsd-decay-style need "
                "--lr-decay-style WSD");
  if (!o.train && !o.dumpGrads.empty())
    throw Error("--dump-grads needs --train");
  if (!o.train && o.useDistributedOptimizer)
    throw Error("--use-distributed-optimizer needs --train");
  if (!o.train && o.calculatePerTokenLoss)
    throw Error("--calculate-per-token-loss needs --train");
  if (!o.load.empty() && !o.loadSharded.empty())
    throw Error("--load and --load-sharded exclude each other");
  if (o.saveInterval && o.save.empty() && o.saveSharded.empty())
    throw Error("--save-interval needs --save or --save-sharded");
  bool evalFlags = std::find_if(args.begin(), args.end(), [](auto &a) {
                     return a.rfind("--eval-", 0) == 0;
                   }) != args.end();
  if (evalFlags && o.validData.empty())
    throw Error("--eval-interval and --eval-iters need --valid-data");
  if (!o.validData.empty() && !o.train)
    throw Error("--valid-data needs --train");
}

} // namespace

Options parseOptions(const std::vector<std::string> &args) {
  Options o;
  CLI::App app;
  defineFlags(app, o);
  // CLI11 takes the arguments last-first.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ArgumentMismatch &) {
    // A flag at the end without its value: name the last flag given.
    for (auto it = args.rbegin(); it != args.rend(); ++it)
      if (it->rfind("--", 0) == 0)
        throw Error(*it + " needs a value");
    throw Error("a flag needs a value");
  } catch (const CLI::ParseError &e) {
    throw Error(std::string(e.what()) + " (see --help)");
  }
  if (!app.remaining().empty()) {
    std::string flag = app.remaining().front();
    throw Error("unknown flag '" + flag.substr(0, flag.find('=')) +
                "' (see --help)");
  }
  if (!o.profileJson.empty())
    o.profile = true;
  checkCombinations(o, args);
  return o;
}

std::string rankUsage(const std::string &tool) {
  Options o;
  CLI::App app("The per-rank program of a loom-compile output directory "
               "(docs/MANIFEST.md)",
               tool);
  defineFlags(app, o);
  return app.help();
}

std::string checkRankFlags(const std::vector<std::string> &args) {
  try {
    parseOptions(args);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

bool rankFlagTakesValue(const std::string &name) {
  Options o;
  CLI::App app;
  defineFlags(app, o);
  const CLI::Option *opt = app.get_option_no_throw(name);
  return opt && opt->get_items_expected_min() > 0;
}

bool isRankFlag(const std::string &name) {
  Options o;
  CLI::App app;
  defineFlags(app, o);
  return name.rfind("--", 0) == 0 && name != "--help" &&
         app.get_option_no_throw(name) != nullptr;
}

} // namespace loom::rank
