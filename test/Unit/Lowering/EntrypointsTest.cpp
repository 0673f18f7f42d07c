//===- EntrypointsTest.cpp - Entrypoints.def matches loomrt.h ---*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The lowering declares runtime functions from Entrypoints.def; the runtime
// defines them from loomrt.h. This test compares every .def line with the
// header's prototype, kind by kind, at compile time (and lists them at run
// time so a mismatch names the function).
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include "gtest/gtest.h"

#include <array>
#include <cstdint>
#include <string>
#include <type_traits>

namespace {

enum Kind : char {
  VOID = 'v',
  I32 = 'i',
  I64 = 'l',
  U64 = 'u',
  F32 = 'f',
  PTR = 'p',
  OTHER = '?'
};

template <typename T> constexpr Kind kindOf() {
  if constexpr (std::is_pointer_v<T>)
    return PTR;
  else if constexpr (std::is_same_v<T, void>)
    return VOID;
  else if constexpr (std::is_same_v<T, int32_t>)
    return I32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return I64;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return U64;
  else if constexpr (std::is_same_v<T, float>)
    return F32;
  else
    return OTHER;
}

/// "v:ilp..." for a function pointer type: result, then arguments.
template <typename R, typename... A> std::string signature(R (*)(A...)) {
  std::string s(1, kindOf<R>());
  s += ':';
  ((s += kindOf<A>()), ...);
  return s;
}

template <typename... K> std::string expected(Kind result, K... args) {
  std::string s(1, result);
  s += ':';
  ((s += static_cast<char>(args)), ...);
  return s;
}

TEST(Entrypoints, MatchTheRuntimeHeader) {
  int checked = 0;
#define LOOMRT_ENTRY(name, result, ...)                                        \
  EXPECT_EQ(signature(&name), expected(result, __VA_ARGS__)) << #name;         \
  ++checked;
#include "runtime/include/loomrt/Entrypoints.def"
  EXPECT_GT(checked, 20);
}

} // namespace
