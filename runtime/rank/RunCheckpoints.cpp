//===- RunCheckpoints.cpp - The rank program's checkpoints ----------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// --save (one Hugging Face safetensors file and its optimizer file, written
// by rank 0 from every first holder's pieces, as an atomic pair),
// --save-sharded and --load-sharded (ShardedCheckpoint.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Run.h"

#include "runtime/rank/Checkpoint.h"
#include "runtime/rank/CheckpointPair.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <csignal>
#include <cstdlib>
#include <set>
#include <unistd.h>

namespace loom::rank {

void Run::saveCheckpoints() {
  if (!opts.save.empty())
    save();
  if (!opts.saveSharded.empty())
    saveSharded();
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

void Run::writeFile(const std::string &path, const Manifest &layout,
                    const std::function<const void *(size_t)> &bufferOf,
                    const std::map<std::string, std::string> &metadata) {
  StagedFile staged = stageFile(path, layout, bufferOf, metadata);
  collectively([&] {
    if (rank == 0)
      publish(staged);
  });
}

StagedFile
Run::stageFile(const std::string &path, const Manifest &layout,
               const std::function<const void *(size_t)> &bufferOf,
               const std::map<std::string, std::string> &metadata) {
  StagedFile staged;
  // Rank 0 writes; the first holder of every distinct shard sends it, in
  // the order forEachCheckpointPiece defines on every rank.
  auto indexOf = [&](const ParamSpec &p) {
    return size_t(&p - layout.params.data());
  };
  collectively([&] {
    if (rank != 0) {
      forEachCheckpointPiece(layout, [&](const HfTensor &, const ParamSpec &p,
                                         const Shard &s) {
        if (s.rank == rank)
          loomrt_send(loomrt_comm_world(), p.dtype, bufferOf(indexOf(p)),
                      numElements(s.box.shape), 0);
      });
      return;
    }
    staged = stageCheckpoint(
        path, layout,
        [&](const ParamSpec &p, const Shard &s, void *out) {
          int64_t n = numElements(s.box.shape);
          int64_t bytes = n * dtypeBytes(p.dtype);
          if (s.rank == 0) {
            loomrt_copy(out, bufferOf(indexOf(p)), bytes);
          } else {
            // Received into backend memory (a GPU's on cuda), then copied.
            DeviceBuffer staged(bytes);
            loomrt_recv(loomrt_comm_world(), p.dtype, staged.get(), n, s.rank);
            loomrt_copy(out, staged.get(), bytes);
          }
        },
        metadata);
  });
  return staged;
}

/// A test hook (checkpoint-kill.test): with LOOM_TEST_KILL_BETWEEN_RENAMES=N
/// in its environment, rank 0 SIGKILLs itself in the save of iteration N,
/// between the optimizer file's rename and the model file's: the one moment
/// a save can tear, which random kills reach too rarely to rely on.
void Run::killBetweenRenamesForTests() const {
  const char *at = std::getenv("LOOM_TEST_KILL_BETWEEN_RENAMES");
  if (!at || !*at || std::strtoll(at, nullptr, 10) != state.iteration)
    return;
  std::fprintf(stderr, "loom: test hook: killed between the renames of the "
                       "save at iteration %" PRId64 "\n",
               state.iteration);
  std::fflush(stderr);
  std::raise(SIGKILL);
}

void Run::save() {
  // Both files complete at their .tmp names first, then the optimizer state
  // renamed into place, then the model; the optimizer state names its model
  // by digest, so a --load finds one whole pair whenever this stops
  // (CheckpointPair.h). Only what describes the tensors goes into the model
  // file: the same parameters give the same bytes whatever the plan, seed
  // or step count that produced them.
  StagedFile model = stageFile(
      opts.save, m,
      [&](size_t k) -> const void * { return buffers.at(m.params[k].name); },
      {{"format", "pt"}, {"loom.family", m.family}});
  std::optional<StagedFile> optimizer;
  if (opts.train) {
    std::vector<std::string> prefixes = {kMomentPrefixes[0],
                                         kMomentPrefixes[1]};
    if (mixedPrecision)
      prefixes.push_back(kMainParamPrefix);
    Manifest layout = stateLayout(m, prefixes, LOOMRT_F32);
    size_t n = m.params.size();
    std::vector<const TrainParam *> byIndex(n, nullptr);
    for (const TrainParam &t : trained)
      byIndex[t.index] = &t;
    // The distributed optimizer's slices are gathered into whole buffers
    // first: the file is the plain optimizer's, whatever the plan.
    std::vector<DeviceBuffer> temps;
    auto full = [&](float *slice) {
      if (!distributed)
        return slice;
      temps.emplace_back(flatSize * int64_t(sizeof(float)));
      allGatherFlat(slice, temps.back().as<float>());
      return temps.back().as<float>();
    };
    float *avg = full(expAvg), *avgSq = full(expAvgSq);
    float *main = mixedPrecision ? full(mainParams) : nullptr;
    optimizer = stageFile(optimizerStatePath(opts.save), layout,
              [&](size_t k) -> const void * {
                const TrainParam &t = *byIndex[k % n];
                switch (k / n) {
                case 0:
                  return avg + t.offset;
                case 1:
                  return avgSq + t.offset;
                default:
                  return t.spec->dtype == LOOMRT_F32 ? t.model
                                                     : main + t.offset;
                }
              },
              {{"format", "pt"},
               {"loom.family", m.family},
               {"loom.train_state", state.toJson()},
               {kModelDigestKey, modelDigestStamp(model.digest)}});
  }
  collectively([&] {
    if (rank != 0)
      return;
    if (optimizer)
      publish(*optimizer);
    killBetweenRenamesForTests();
    publish(model);
  });
  if (rank == 0) {
    std::printf("loom: saved checkpoint %s%s at iteration %" PRId64 "\n",
                opts.save.c_str(),
                opts.train ? (" and " + optimizerStatePath(opts.save)).c_str()
                           : "",
                state.iteration);
    std::fflush(stdout);
  }
}

//===----------------------------------------------------------------------===//
// Sharded checkpoints
//===----------------------------------------------------------------------===//

void Run::saveSharded() {
  namespace fs = std::filesystem;
  const std::string &dir = opts.saveSharded;
  std::string tmp = dir + ".tmp", old = dir + ".old";
  // Everything goes to DIR.tmp; index.json is written last and the
  // directory renamed into place, so DIR is always a complete checkpoint
  // (the previous one, or this one) or absent.
  collectively([&] {
    if (rank != 0)
      return;
    std::error_code ec;
    fs::remove_all(tmp, ec);
    if (!fs::create_directory(tmp, ec) || ec)
      throw Error("cannot create " + tmp + ": " + ec.message());
  });
  collectively([&] {
    // Each box once, from its first holder (shardedIndexJson lists the same).
    std::vector<NamedTensor> tensors;
    for (const ParamSpec &p : m.params)
      if (const Shard *s = p.shardOf(rank); s && p.firstHolder(*s) == rank)
        tensors.push_back({p.name, p.dtype, s->box.shape, buffers.at(p.name)});
    // Each bucket's slice under its own key (the index lists the same).
    if (opts.train)
      for (const TrainBucket &b : buckets) {
        if (!writesOptimizerSlice(b))
          continue;
        std::string key = optimizerKey(m, b.group) + ".";
        Shape slice = {b.ownElements()};
        std::vector<std::pair<const char *, float *>> parts = {
            {kShardedExpAvg, expAvg}, {kShardedExpAvgSq, expAvgSq}};
        if (mixedPrecision)
          parts.push_back({kShardedMainParam, mainParams});
        for (auto [name, buf] : parts)
          tensors.push_back({key + name, LOOMRT_F32, slice, buf + b.stateBase});
      }
    writeSafetensors(tmp + "/" + shardFileName(rank), tensors,
                     {{"format", "pt"}, {"loom.rank", std::to_string(rank)}});
  });
  collectively([&] {
    if (rank != 0)
      return;
    std::string index = shardedIndexJson(
        m, distributed, opts.train ? state.toJson() : std::string());
    std::string indexTmp = tmp + "/index.json.tmp";
    FILE *f = std::fopen(indexTmp.c_str(), "w");
    bool ok = f && std::fwrite(index.data(), 1, index.size(), f) == index.size();
    ok = f && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0 && ok;
    if (f)
      ok = std::fclose(f) == 0 && ok;
    if (!ok || ::rename(indexTmp.c_str(), (tmp + "/index.json").c_str()) != 0)
      throw Error("cannot write " + tmp + "/index.json: " +
                  std::strerror(errno));
    syncDirectory(tmp);
    std::error_code ec;
    fs::remove_all(old, ec);
    if (fs::exists(dir))
      fs::rename(dir, old, ec);
    if (!ec)
      fs::rename(tmp, dir, ec);
    if (ec)
      throw Error("cannot move " + tmp + " to " + dir + ": " + ec.message());
    std::string parent = fs::path(dir).parent_path().string();
    syncDirectory(parent.empty() ? "." : parent);
    fs::remove_all(old, ec);
    std::printf("loom: saved sharded checkpoint %s (%d rank files) at "
                "iteration %" PRId64 "\n",
                dir.c_str(), worldSize, state.iteration);
    std::fflush(stdout);
  });
}

void Run::loadShardedParams() {
  const std::string &dir = opts.loadSharded;
  shardedIndex = readShardedIndex(dir, m);
  // Every rank's file must be there, even one this rank reads nothing from.
  std::map<int32_t, std::unique_ptr<SafetensorsFile>> files;
  auto fileOf = [&](int32_t writer) -> SafetensorsFile & {
    auto &f = files[writer];
    if (!f)
      f = std::make_unique<SafetensorsFile>(dir + "/" + shardFileName(writer));
    return *f;
  };
  fileOf(rank);
  for (const ParamSpec &p : m.params) {
    const Shard *s = p.shardOf(rank);
    if (!s)
      continue;
    // A replica's box is in the file of its first holder.
    int32_t writer = p.firstHolder(*s);
    SafetensorsFile &file = fileOf(writer);
    std::string path = dir + "/" + shardFileName(writer);
    auto it = file.tensors().find(p.name);
    if (it == file.tensors().end())
      throw Error("sharded checkpoint file " + path + " has no tensor \"" +
                  p.name + "\"");
    const SafetensorsFile::Tensor &t = it->second;
    if (t.dtypeName != safetensorsDTypeName(p.dtype) || t.shape != s->box.shape)
      throw Error("sharded checkpoint file " + path + ": tensor \"" + p.name +
                  "\" is " + t.dtypeName + " " + shapeString(t.shape) +
                  ", expected " + safetensorsDTypeName(p.dtype) + " " +
                  shapeString(s->box.shape));
    loomrt_copy(buffers.at(p.name), file.data() + t.begin, t.end - t.begin);
  }
}

void Run::loadShardedOptimizer() {
  const std::string &dir = opts.loadSharded;
  // A checkpoint saved without --train starts a fresh optimizer.
  if (shardedIndex.trainState.empty())
    return;
  if (shardedIndex.version < 3 && m.hasOwnGradientGroups())
    throw Error("sharded checkpoint " + dir + " (index version " +
                std::to_string(shardedIndex.version) + ") holds the "
                "optimizer state of experts and dense parameters in one "
                "slice, which this Loom does not read: load its model "
                "without --train, or resume from a full checkpoint (--load)");
  state = TrainState::fromJson(shardedIndex.trainState,
                               "sharded checkpoint " + dir);
  resumed = true;
  // The slices the files of a bucket's group hold cover the bucket (the
  // group's first rank's holds all of it without the distributed
  // optimizer); the saving run may have used the other optimizer, so each
  // rank takes its range from whichever files hold it.
  std::map<int32_t, std::unique_ptr<SafetensorsFile>> files;
  for (const TrainBucket &b : buckets) {
    std::vector<int32_t> group = {rank};
    if (auto g = m.groupOf(b.group, rank))
      group = *g->first;
    std::string key = optimizerKey(m, b.group);
    std::vector<std::pair<int64_t, int64_t>> read;
    for (int32_t peer : group) {
      const auto &slices = shardedIndex.slices[size_t(peer)];
      auto it = slices.find(b.group);
      if (it == slices.end())
        continue;
      const FlatSlice &saved = it->second;
      int64_t lo = std::max(b.sliceBegin(), saved.begin);
      int64_t hi = std::min(b.sliceEnd(), saved.end);
      if (lo >= hi)
        continue;
      read.emplace_back(lo, hi);
      std::string path = dir + "/" + shardFileName(peer);
      auto &file = files[peer];
      if (!file)
        file = std::make_unique<SafetensorsFile>(path);
      std::vector<std::pair<const char *, float *>> parts = {
          {kShardedExpAvg, expAvg}, {kShardedExpAvgSq, expAvgSq}};
      if (mixedPrecision)
        parts.push_back({kShardedMainParam, mainParams});
      for (auto [part, buf] : parts) {
        std::string name = key + "." + part;
        auto t = file->tensors().find(name);
        Shape shape = {saved.end - saved.begin};
        if (t == file->tensors().end() || t->second.dtypeName != "F32" ||
            t->second.shape != shape)
          throw Error("sharded checkpoint file " + path + " lacks the F32 " +
                      shapeString(shape) + " tensor \"" + name + "\"");
        loomrt_copy(buf + b.stateBase + (lo - b.sliceBegin()),
                    file->data() + t->second.begin +
                        (lo - saved.begin) * int64_t(sizeof(float)),
                    (hi - lo) * int64_t(sizeof(float)));
      }
    }
    std::sort(read.begin(), read.end());
    int64_t covered = b.sliceBegin();
    for (auto [lo, hi] : read)
      if (lo <= covered)
        covered = std::max(covered, hi);
    if (covered < b.sliceEnd())
      throw Error("sharded checkpoint " + dir + " holds no optimizer state "
                  "for elements " + std::to_string(covered) + ".." +
                  std::to_string(b.sliceEnd()) + " of rank " +
                  std::to_string(rank) + "'s " + b.group + " bucket in the "
                  "files of its " + b.group + " group");
  }
}

} // namespace loom::rank
