//===- TestManifests.h - Manifests for the driver unit tests ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A small GPT-2-like parameter set in which q, k and v are tensor-parallel
// shards placed transposed into one fused HF c_attn tensor, plus a
// replicated embedding and a norm weight: the layouts the checkpoint code
// must assemble, for any tp. And a mixture-of-experts one whose expert
// weights are split over ep and summed over their own group.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_TEST_UNIT_DRIVER_TESTMANIFESTS_H
#define LOOM_TEST_UNIT_DRIVER_TESTMANIFESTS_H

#include <nlohmann/json.hpp>

#include <string>

namespace loom::rank::testing {

/// A manifest for `tp` ranks; parameters have dtype `dtype`.
inline nlohmann::json fusedQkvManifest(int tp, const std::string &dtype = "f32") {
  using json = nlohmann::json;
  const int out = 4, in = 6, vocab = 10;
  json params = json::array();
  const char *names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    json wShards = json::array(), bShards = json::array();
    for (int r = 0; r < tp; ++r) {
      wShards.push_back({{"rank", r},
                         {"offset", {r * out / tp, 0}},
                         {"shape", {out / tp, in}}});
      bShards.push_back(
          {{"rank", r}, {"offset", {r * out / tp}}, {"shape", {out / tp}}});
    }
    params.push_back(
        {{"name", std::string("attn.") + names[i] + ".weight"},
         {"shape", {out, in}},
         {"dtype", dtype},
         {"init", {{"kind", "normal"}, {"std", 0.02}}},
         {"hf",
          {{"name", "h.0.attn.c_attn.weight"},
           {"shape", {in, 3 * out}},
           {"transpose", true},
           {"offset", {0, i * out}}}},
         {"shards", wShards}});
    params.push_back({{"name", std::string("attn.") + names[i] + ".bias"},
                      {"shape", {out}},
                      {"dtype", dtype},
                      {"init", {{"kind", "normal"}, {"std", 1.0}}},
                      {"hf",
                       {{"name", "h.0.attn.c_attn.bias"},
                        {"shape", {3 * out}},
                        {"offset", {i * out}}}},
                      {"shards", bShards}});
  }
  json replicated = json::array();
  for (int r = 0; r < tp; ++r)
    replicated.push_back({{"rank", r}, {"offset", {0, 0}}, {"shape", {vocab, in}}});
  params.push_back({{"name", "wte.weight"},
                    {"shape", {vocab, in}},
                    {"dtype", dtype},
                    {"init", {{"kind", "normal"}, {"std", 0.5}}},
                    {"shards", replicated}});
  json lnShards = json::array();
  for (int r = 0; r < tp; ++r)
    lnShards.push_back({{"rank", r}, {"offset", {0}}, {"shape", {in}}});
  params.push_back({{"name", "ln_f.weight"},
                    {"shape", {in}},
                    {"dtype", dtype},
                    {"init", {{"kind", "ones"}}},
                    {"shards", lnShards}});

  json ranks = json::array(), tpGroup = json::array();
  for (int r = 0; r < tp; ++r) {
    ranks.push_back({{"rank", r},
                     {"binary", "rank-00000"},
                     {"logs_loss", r == 0}});
    tpGroup.push_back(r);
  }
  return {{"format", "loom-manifest"},
          {"version", 1},
          {"model", {{"family", "gpt2"}}},
          {"plan", {{"tp", tp}, {"dp", 1}, {"pp", 1}, {"cp", 1}}},
          {"world_size", tp},
          {"micro_batch_size", 2},
          {"seq_length", 4},
          {"num_microbatches", 1},
          {"dtype", dtype},
          {"vocab_size", vocab},
          {"eod_token_id", nullptr},
          {"groups", {{"tp", {tpGroup}}}},
          {"ranks", ranks},
          {"params", params},
          {"entries",
           {{"forward",
             {{"symbol", "loom_forward"},
              {"args",
               {{{"kind", "tokens"}},
                {{"kind", "labels"}},
                {{"kind", "loss_mask"}},
                {{"kind", "param"}, {"name", "attn.q.weight"}},
                {{"kind", "comm"}, {"group", "tp"}},
                {{"kind", "loss"}}}}}}}}};
}

/// 4 ranks, dp 4 x ep 2 (expert data-parallel groups [0, 2] and [1, 3]):
/// wte [10, 6] and router [4, 6] replicated, and expert weights w1 [4, 6]
/// and w2 [4, 5] whose rows 0..2 ranks 0 and 2 hold, rows 2..4 ranks 1
/// and 3, their gradients summed over "expert:dp", in the manifest order
/// wte, w1, router, w2.
inline nlohmann::json expertManifest() {
  using json = nlohmann::json;
  auto replicated = [](const std::string &name, int64_t rows, int64_t cols) {
    json shards = json::array();
    for (int r = 0; r < 4; ++r)
      shards.push_back(
          {{"rank", r}, {"offset", {0, 0}}, {"shape", {rows, cols}}});
    return json{{"name", name},
                {"shape", {rows, cols}},
                {"init", {{"kind", "normal"}, {"std", 0.5}}},
                {"shards", shards}};
  };
  auto expert = [](const std::string &name, int64_t cols) {
    json shards = json::array();
    for (int r = 0; r < 4; ++r)
      shards.push_back(
          {{"rank", r}, {"offset", {2 * (r % 2), 0}}, {"shape", {2, cols}}});
    return json{{"name", name},
                {"shape", {4, cols}},
                {"init", {{"kind", "normal"}, {"std", 0.5}}},
                {"gradient_group", "expert:dp"},
                {"shards", shards}};
  };
  json ranks = json::array();
  for (int r = 0; r < 4; ++r)
    ranks.push_back(
        {{"rank", r}, {"binary", "rank-00000"}, {"logs_loss", r == 0}});
  return {{"format", "loom-manifest"},
          {"version", 1},
          {"model", {{"family", "mixtral"}}},
          {"plan", {{"tp", 1}, {"dp", 4}, {"pp", 1}, {"cp", 1}, {"ep", 2}}},
          {"world_size", 4},
          {"micro_batch_size", 2},
          {"seq_length", 4},
          {"num_microbatches", 1},
          {"dtype", "f32"},
          {"vocab_size", 10},
          {"eod_token_id", nullptr},
          {"groups",
           {{"dp", {{0, 1, 2, 3}}},
            {"expert:ep", {{0, 1}, {2, 3}}},
            {"expert:dp", {{0, 2}, {1, 3}}}}},
          {"ranks", ranks},
          {"params",
           {replicated("wte.weight", 10, 6), expert("experts.w1", 6),
            replicated("router.weight", 4, 6), expert("experts.w2", 5)}},
          {"entries",
           {{"forward",
             {{"symbol", "loom_forward"},
              {"args",
               {{{"kind", "tokens"}},
                {{"kind", "labels"}},
                {{"kind", "loss_mask"}},
                {{"kind", "param"}, {"name", "wte.weight"}},
                {{"kind", "loss"}}}}}}}}};
}

} // namespace loom::rank::testing

#endif // LOOM_TEST_UNIT_DRIVER_TESTMANIFESTS_H
