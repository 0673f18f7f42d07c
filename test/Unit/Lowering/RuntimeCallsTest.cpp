//===- RuntimeCallsTest.cpp - Typed runtime calls match loomrt.h -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The lowering's call structs (passes/Lowering/Runtime/Calls.h) are written
// by runtime/abi/loomrt_abi.py from loomrt.h's text. This checks, at compile
// time, that the kinds it read for every entry point are those the C
// compiler sees in the same declarations: a type the script maps wrongly
// (a float read as a double, a pointer missed) fails the build of this test.
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"
#include "passes/Lowering/Runtime/Calls.h"

#include <gtest/gtest.h>

#include <type_traits>

namespace rt = loom::lowering::rt;

namespace {

template <typename T> constexpr rt::Kind kindOf() {
  if constexpr (std::is_void_v<T>)
    return rt::Kind::VOID;
  else if constexpr (std::is_pointer_v<T>)
    return rt::Kind::PTR;
  else if constexpr (std::is_same_v<T, int32_t> || std::is_same_v<T, int>)
    return rt::Kind::I32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return rt::Kind::I64;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return rt::Kind::U64;
  else if constexpr (std::is_same_v<T, float>)
    return rt::Kind::F32;
  else if constexpr (std::is_same_v<T, double>)
    return rt::Kind::F64;
  else
    static_assert(!sizeof(T), "a C type the test does not know");
}

/// Whether `Call` has the result and argument kinds of `fn`'s C type.
template <typename Call, typename R, typename... Args>
constexpr bool matches(R (*)(Args...)) {
  constexpr std::array<rt::Kind, sizeof...(Args)> args = {kindOf<Args>()...};
  return Call::kResult == kindOf<R>() && Call::kArgs == args;
}

#define LOOMRT_CALL(S, fn)                                                     \
  static_assert(matches<rt::S>(&fn), #fn ": the call struct's kinds differ "   \
                                         "from the C declaration");
#include "passes/Lowering/RuntimeCallList.h.inc"

TEST(RuntimeCalls, OneStructPerEntryPoint) {
  int count = 0;
#define LOOMRT_CALL(S, fn)                                                     \
  EXPECT_STREQ(rt::S::kName, #fn);                                             \
  ++count;
#include "passes/Lowering/RuntimeCallList.h.inc"
  // Every entry point of loomrt.h, from loomrt_dtype_size to
  // loomrt_set_timeout.
  EXPECT_GT(count, 80);
}

} // namespace
