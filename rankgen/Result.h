//===- Result.h - Value-or-error result for the rank generator --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The rank generator is plain C++17 without LLVM, and the project builds C++
// with -fno-exceptions, so every fallible call returns a Result<T>: either a
// value or a one-line message in LLVM diagnostic style (lowercase first word,
// no trailing period, the offending numbers included), e.g.
//   "world size 12 is not divisible by tp*cp*pp = 8"
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RANKGEN_RESULT_H
#define LOOM_RANKGEN_RESULT_H

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace loom {
namespace rankgen {

/// A failure with a human-readable message. Construct one with `fail(...)`
/// and return it from any function returning Result<T>.
struct Failure {
  std::string message;
};

inline Failure fail(std::string message) { return Failure{std::move(message)}; }

/// Either a T or a Failure. Check with `ok()` / `operator bool` before using
/// the value; reading the value of a failed result is a programming error.
template <typename T> class [[nodiscard]] Result {
public:
  Result(T value) : value(std::move(value)) {}
  Result(Failure failure) : message(std::move(failure.message)) {}

  bool ok() const { return value.has_value(); }
  explicit operator bool() const { return ok(); }

  /// The error message; empty when the result holds a value.
  const std::string &error() const { return message; }

  T &operator*() & {
    assert(ok() && "reading the value of a failed Result");
    return *value;
  }
  const T &operator*() const & {
    assert(ok() && "reading the value of a failed Result");
    return *value;
  }
  T *operator->() { return &**this; }
  const T *operator->() const { return &**this; }

  /// Moves the value out; the result must hold one.
  T take() {
    assert(ok() && "taking the value of a failed Result");
    return std::move(*value);
  }

private:
  std::optional<T> value;
  std::string message;
};

} // namespace rankgen
} // namespace loom

#endif // LOOM_RANKGEN_RESULT_H
