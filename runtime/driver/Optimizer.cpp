//===- Optimizer.cpp - Training math of the driver ------------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/driver/Optimizer.h"

#include <nlohmann/json.hpp>

#include <cmath>

using json = nlohmann::json;

namespace loom::driver {

double LrSchedule::at(int64_t numSteps) const {
  if (warmupSteps > 0 && numSteps <= warmupSteps)
    return maxLr * double(numSteps) / double(warmupSteps);
  if (numSteps > decaySteps)
    return minLr;
  // Only reachable with warmup == decay == numSteps == 0, where Megatron
  // would divide by zero: no decay phase, so the peak.
  if (decaySteps <= warmupSteps)
    return maxLr;
  double ratio = double(numSteps - warmupSteps) /
                 double(decaySteps - warmupSteps);
  double coeff = 0.5 * (std::cos(M_PI * ratio) + 1.0);
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

double clipCoefficient(double totalNorm, double clip) {
  if (clip <= 0.0)
    return 1.0;
  double coeff = clip / (totalNorm + 1.0e-6);
  return coeff < 1.0 ? coeff : 1.0;
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
             {{"style", "cosine"},
              {"max_lr", schedule.maxLr},
              {"min_lr", schedule.minLr},
              {"warmup_steps", schedule.warmupSteps},
              {"decay_steps", decayStepsGiven ? json(schedule.decaySteps)
                                              : json(nullptr)}}},
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

} // namespace loom::driver
