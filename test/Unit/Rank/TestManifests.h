//===- TestManifests.h - Manifests for the driver unit tests ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A small GPT-2-like parameter set in which q, k and v are tensor-parallel
// shards placed transposed into one fused HF c_attn tensor, plus a
// replicated embedding and a norm weight: the layouts the checkpoint code
// must assemble, for any tp.
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

} // namespace loom::rank::testing

#endif // LOOM_TEST_UNIT_DRIVER_TESTMANIFESTS_H
