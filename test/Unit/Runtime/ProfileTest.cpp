//===- ProfileTest.cpp - loomrt_profile_begin_step / _end_step -----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The profiler counts the outermost entry point calls of a step, the
// backend's allocations and its host waits (the cpu backend: the calls that
// would wait on a device), and records nothing outside a step.
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace {

std::map<std::string, loomrt_profile_entry>
byName(const loomrt_profile_step &s) {
  std::map<std::string, loomrt_profile_entry> out;
  for (int32_t i = 0; i < s.num_entries; ++i)
    out[s.entries[i].name] = s.entries[i];
  return out;
}

TEST(ProfileTest, CountsCallsAllocationsAndHostWaits) {
  std::vector<float> host(256, 1.0f);
  void *outside = loomrt_alloc(1024); // before the step: not counted
  loomrt_profile_begin_step();
  void *buf = loomrt_alloc(1024);
  loomrt_copy(buf, host.data(), 1024);
  for (int i = 0; i < 3; ++i)
    loomrt_scale(LOOMRT_F32, buf, 256, 0.5f);
  float ss = loomrt_sum_squares(LOOMRT_F32, buf, 256);
  (void)loomrt_world_rank(); // a host query: not timed
  loomrt_free(buf);
  loomrt_profile_step s;
  loomrt_profile_end_step(&s);
  EXPECT_FLOAT_EQ(ss, 256 * 0.125f * 0.125f);

  auto calls = byName(s);
  ASSERT_EQ(s.num_entries, 5);
  EXPECT_EQ(calls.at("loomrt_alloc").count, 1);
  EXPECT_EQ(calls.at("loomrt_copy").count, 1);
  EXPECT_EQ(calls.at("loomrt_scale").count, 3);
  EXPECT_EQ(calls.at("loomrt_sum_squares").count, 1);
  EXPECT_EQ(calls.at("loomrt_free").count, 1);
  EXPECT_EQ(calls.count("loomrt_world_rank"), 0u);
  EXPECT_EQ(s.allocations, 1);
  // copy, sum_squares and free: each complete on the host on return.
  EXPECT_EQ(s.host_syncs, 3);
  double sum = 0.0;
  for (const auto &[name, e] : calls) {
    EXPECT_GE(e.ms, 0.0) << name;
    sum += e.ms;
  }
  EXPECT_GE(s.ms, sum);

  // Outside a step nothing is recorded; the next step starts from zero.
  loomrt_scale(LOOMRT_F32, outside, 256, 2.0f);
  loomrt_profile_begin_step();
  loomrt_zero(outside, 1024);
  loomrt_profile_end_step(&s);
  ASSERT_EQ(s.num_entries, 1);
  EXPECT_STREQ(s.entries[0].name, "loomrt_zero");
  EXPECT_EQ(s.entries[0].count, 1);
  EXPECT_EQ(s.allocations, 0);
  EXPECT_EQ(s.host_syncs, 0);
  loomrt_free(outside);
}

TEST(ProfileTest, CountsOnlyTheOutermostEntryPoint) {
  // loomrt_attention_chunked_forward is written in other entry points
  // (attention_forward, merge, copy_2d): its time includes theirs, and they
  // are not counted apart.
  const int64_t L = 4, D = 2;
  std::vector<float> q(L * D, 0.25f), k(L * D, 0.5f), v(L * D, 1.0f),
      o(L * D), lse(L);
  loomrt_profile_begin_step();
  loomrt_attention_chunked_forward(LOOMRT_F32, 1, L, 0, L, 1, nullptr, 1, 1, D,
                                   0.5f, nullptr, nullptr, q.data(), k.data(),
                                   v.data(), o.data(), lse.data());
  loomrt_profile_step s;
  loomrt_profile_end_step(&s);
  ASSERT_EQ(s.num_entries, 1);
  EXPECT_STREQ(s.entries[0].name, "loomrt_attention_chunked_forward");
  EXPECT_EQ(s.entries[0].count, 1);
  // Equal keys and values: every query's output is the value.
  for (float x : o)
    EXPECT_FLOAT_EQ(x, 1.0f);
}

TEST(ProfileDeathTest, EndWithoutBeginIsAnError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  loomrt_profile_step s;
  EXPECT_DEATH(loomrt_profile_end_step(&s), "no step is being profiled");
  EXPECT_DEATH(loomrt_profile_end_step(nullptr), "NULL out");
}

} // namespace
