//===- Optimizer.cpp - Training math of the rank program ------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Optimizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

using json = nlohmann::json;

namespace loom::rank {

double LrSchedule::at(int64_t numSteps) const {
  double n = double(numSteps);
  if (warmupSteps > 0 && n <= warmupSteps)
    return initLr + (maxLr - initLr) * n / warmupSteps;
  if (style == LrDecayStyle::Constant)
    return maxLr;
  if (numSteps > decaySteps)
    return minLr;
  if (style == LrDecayStyle::InverseSquareRoot)
    return std::max(minLr, maxLr * std::sqrt(std::max(warmupSteps, 1.0)) /
                               std::sqrt(std::max(n, 1.0)));
  // Only reachable with decaySteps <= warmup and numSteps between them,
  // where Megatron would divide by zero or go negative: the peak.
  if (double(decaySteps) <= warmupSteps)
    return maxLr;
  double ratio = (n - warmupSteps) / (double(decaySteps) - warmupSteps);
  double coeff = 1.0;
  switch (style) {
  case LrDecayStyle::Linear:
    coeff = 1.0 - ratio;
    break;
  case LrDecayStyle::Cosine:
    coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0);
    break;
  case LrDecayStyle::WSD: {
    int64_t annealStart = decaySteps - wsdDecaySteps;
    if (numSteps <= annealStart || wsdDecaySteps <= 0)
      break;
    double w = double(numSteps - annealStart) / double(wsdDecaySteps);
    switch (wsdStyle) {
    case WsdDecayStyle::Exponential:
      coeff = 2.0 * std::pow(0.5, w) - 1.0;
      break;
    case WsdDecayStyle::Linear:
      coeff = 1.0 - w;
      break;
    case WsdDecayStyle::Cosine:
      coeff = 0.5 * (std::cos(M_PI * w) + 1.0);
      break;
    case WsdDecayStyle::MinusSqrt:
      coeff = 1.0 - std::sqrt(w);
      break;
    }
    break;
  }
  case LrDecayStyle::Constant:
  case LrDecayStyle::InverseSquareRoot:
    break; // returned above
  }
  return minLr + coeff * (maxLr - minLr);
}

bool takesWeightDecay(const std::string &name, const Shape &shape) {
  auto endsWith = [&](const char *suffix) {
    std::string s(suffix);
    return name.size() >= s.size() &&
           name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return !(endsWith(".bias") || shape.size() == 1);
}

void DynamicLossScaler::update(bool foundNonfinite) {
  if (foundNonfinite) {
    growthTracker = 0;
    hysteresisTracker -= 1;
    if (hysteresisTracker <= 0)
      scale = std::max(scale * backoff, minScale);
    return;
  }
  growthTracker += 1;
  if (growthTracker == growthInterval) {
    growthTracker = 0;
    hysteresisTracker = hysteresis;
    scale *= growth;
  }
}

std::string TrainState::toJson() const {
  json j = {{"iteration", iteration},
            {"consumed_samples", consumedSamples},
            {"consumed_valid_samples", consumedValidSamples},
            {"optimizer_steps", optimizerSteps},
            {"skipped_iterations", skippedIterations},
            {"lr_schedule",
             {{"style", styleName(kLrDecayStyles, schedule.style)},
              {"max_lr", schedule.maxLr},
              {"min_lr", schedule.minLr},
              {"init_lr", schedule.initLr},
              {"warmup_steps", schedule.warmupSteps},
              {"warmup_fraction",
               warmupFraction ? json(*warmupFraction) : json(nullptr)},
              {"decay_steps", decayStepsGiven ? json(schedule.decaySteps)
                                              : json(nullptr)},
              {"wsd_decay_steps", schedule.wsdDecaySteps},
              {"wsd_decay_style", styleName(kWsdDecayStyles, schedule.wsdStyle)}}},
            {"adamw",
             {{"weight_decay", adamw.weightDecay},
              {"beta1", adamw.beta1},
              {"beta2", adamw.beta2},
              {"eps", adamw.eps},
              {"clip_grad", adamw.clipGrad}}}};
  if (hasScaler)
    j["loss_scaler"] = {{"scale", scaler.scale},
                        {"min_scale", scaler.minScale},
                        {"growth_factor", scaler.growth},
                        {"backoff_factor", scaler.backoff},
                        {"growth_interval", scaler.growthInterval},
                        {"hysteresis", scaler.hysteresis},
                        {"growth_tracker", scaler.growthTracker},
                        {"hysteresis_tracker", scaler.hysteresisTracker}};
  return j.dump();
}

TrainState TrainState::fromJson(const std::string &text,
                                const std::string &what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception &) { // also a number out of range
    throw Error(what + ": the training state is not JSON");
  }
  auto get = [&](const json &obj, const char *key, const std::string &path,
                 auto &out) {
    if (!obj.is_object() || !obj.contains(key))
      throw Error(what + ": the training state has no \"" + path + key + "\"");
    const json &v = obj[key];
    using T = std::decay_t<decltype(out)>;
    if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        throw Error(what + ": training state \"" + path + key +
                    "\" must be a non-negative integer");
    } else {
      if (!v.is_number())
        throw Error(what + ": training state \"" + path + key +
                    "\" must be a number");
    }
    out = v.get<T>();
  };
  TrainState s;
  get(j, "iteration", "", s.iteration);
  get(j, "consumed_samples", "", s.consumedSamples);
  // Absent in states saved before validation existed.
  if (j.contains("consumed_valid_samples"))
    get(j, "consumed_valid_samples", "", s.consumedValidSamples);
  get(j, "optimizer_steps", "", s.optimizerSteps);
  get(j, "skipped_iterations", "", s.skippedIterations);
  if (!j.contains("lr_schedule"))
    throw Error(what + ": the training state has no \"lr_schedule\"");
  const json &lr = j["lr_schedule"];
  get(lr, "max_lr", "lr_schedule.", s.schedule.maxLr);
  get(lr, "min_lr", "lr_schedule.", s.schedule.minLr);
  get(lr, "warmup_steps", "lr_schedule.", s.schedule.warmupSteps);
  s.decayStepsGiven = !(lr.contains("decay_steps") && lr["decay_steps"].is_null());
  if (s.decayStepsGiven)
    get(lr, "decay_steps", "lr_schedule.", s.schedule.decaySteps);
  // States saved before the styles existed were cosine, with no init lr.
  auto style = [&](const char *key, const auto &table, auto &out) {
    if (!lr.contains(key))
      return;
    auto v = lr[key].is_string() ? parseStyle(table, lr[key].get<std::string>())
                                 : std::nullopt;
    if (!v)
      throw Error(what + ": training state \"lr_schedule." + key +
                  "\" is not a known style");
    out = *v;
  };
  s.schedule.style = LrDecayStyle::Cosine;
  style("style", kLrDecayStyles, s.schedule.style);
  style("wsd_decay_style", kWsdDecayStyles, s.schedule.wsdStyle);
  if (lr.contains("init_lr"))
    get(lr, "init_lr", "lr_schedule.", s.schedule.initLr);
  if (lr.contains("wsd_decay_steps"))
    get(lr, "wsd_decay_steps", "lr_schedule.", s.schedule.wsdDecaySteps);
  if (lr.contains("warmup_fraction") && !lr["warmup_fraction"].is_null()) {
    double f = 0;
    get(lr, "warmup_fraction", "lr_schedule.", f);
    s.warmupFraction = f;
  }
  if (!j.contains("adamw"))
    throw Error(what + ": the training state has no \"adamw\"");
  const json &ad = j["adamw"];
  get(ad, "weight_decay", "adamw.", s.adamw.weightDecay);
  get(ad, "beta1", "adamw.", s.adamw.beta1);
  get(ad, "beta2", "adamw.", s.adamw.beta2);
  get(ad, "eps", "adamw.", s.adamw.eps);
  get(ad, "clip_grad", "adamw.", s.adamw.clipGrad);
  if (j.contains("loss_scaler")) {
    const json &ls = j["loss_scaler"];
    const std::string p = "loss_scaler.";
    s.hasScaler = true;
    get(ls, "scale", p, s.scaler.scale);
    get(ls, "min_scale", p, s.scaler.minScale);
    get(ls, "growth_factor", p, s.scaler.growth);
    get(ls, "backoff_factor", p, s.scaler.backoff);
    get(ls, "growth_interval", p, s.scaler.growthInterval);
    get(ls, "hysteresis", p, s.scaler.hysteresis);
    get(ls, "growth_tracker", p, s.scaler.growthTracker);
    get(ls, "hysteresis_tracker", p, s.scaler.hysteresisTracker);
  }
  return s;
}

} // namespace loom::rank
