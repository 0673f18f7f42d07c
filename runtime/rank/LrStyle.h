//===- LrStyle.h - Names of the learning-rate decay styles ------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Megatron's --lr-decay-style and --lr-wsd-decay-style values and their
// spellings, shared by the flag parser (Options) and the schedule and its
// checkpointed state (Optimizer) so that both read the same names.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_LRSTYLE_H
#define LOOM_RUNTIME_RANK_LRSTYLE_H

#include <optional>
#include <string>
#include <utility>

namespace loom::rank {

enum class LrDecayStyle { Constant, Linear, Cosine, InverseSquareRoot, WSD };
/// The shape of WSD's final annealing phase.
enum class WsdDecayStyle { Exponential, Linear, Cosine, MinusSqrt };

inline constexpr std::pair<LrDecayStyle, const char *> kLrDecayStyles[] = {
    {LrDecayStyle::Constant, "constant"},
    {LrDecayStyle::Linear, "linear"},
    {LrDecayStyle::Cosine, "cosine"},
    {LrDecayStyle::InverseSquareRoot, "inverse-square-root"},
    {LrDecayStyle::WSD, "WSD"}};
inline constexpr std::pair<WsdDecayStyle, const char *> kWsdDecayStyles[] = {
    {WsdDecayStyle::Exponential, "exponential"},
    {WsdDecayStyle::Linear, "linear"},
    {WsdDecayStyle::Cosine, "cosine"},
    {WsdDecayStyle::MinusSqrt, "minus_sqrt"}};

/// Megatron's spelling of a style.
template <typename E, size_t N>
const char *styleName(const std::pair<E, const char *> (&table)[N], E value) {
  for (const auto &[e, name] : table)
    if (e == value)
      return name;
  return "?";
}

/// The style a spelling names; nullopt for an unknown one.
template <typename E, size_t N>
std::optional<E> parseStyle(const std::pair<E, const char *> (&table)[N],
                            const std::string &name) {
  for (const auto &[e, n] : table)
    if (name == n)
      return e;
  return std::nullopt;
}

/// The spellings of a table joined by `sep`, for help and errors.
template <typename E, size_t N>
std::string styleNames(const std::pair<E, const char *> (&table)[N],
                       const char *sep = "|") {
  std::string out;
  for (const auto &[e, n] : table)
    out += (out.empty() ? "" : sep) + std::string(n);
  return out;
}

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_LRSTYLE_H
