//===- Driver.cpp - main() of every per-rank executable -------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The program, on every rank:
//   1. loomrt_init (MPI), flags, manifest, world size check;
//   2. one communicator per group kind the compiled code or the driver uses;
//   3. this rank's parameter shards: initialized from the seed or cut out of
//      a --load checkpoint;
//   4. --steps steps; a step runs the "forward" entry once per micro-batch,
//      averages the loss over micro-batches and data-parallel ranks, and
//      the rank with logs_loss prints a Megatron-style line;
//   5. --save: rank 0 gathers the shards and writes one safetensors file.
//
// Failures before and between steps are collective: every rank reports its
// status, the lowest failing rank prints "<binary>: error: <message>", and
// all ranks exit with status 1. Nothing hangs on a rank that failed alone.
//
//===----------------------------------------------------------------------===//

#include "runtime/driver/Driver.h"

#include "runtime/driver/Checkpoint.h"
#include "runtime/driver/Manifest.h"
#include "runtime/driver/ParamInit.h"

#include "loomrt/loomrt.h"

#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <unistd.h>

namespace loom::driver {

//===----------------------------------------------------------------------===//
// Flags
//===----------------------------------------------------------------------===//

std::string usage(const std::string &tool) {
  return "usage: " + tool + " [options]\n"
         "  --manifest PATH        manifest.json (default: next to the "
         "executable)\n"
         "  --steps N              steps to run (default 1)\n"
         "  --data FILE            Megatron .bin/.idx (prefix or either file) "
         "or a raw token file\n"
         "  --data-format F        raw token file of int32 or uint16 ids\n"
         "  --seed S               initialization and synthetic-data seed "
         "(default 1234)\n"
         "  --metrics-jsonl FILE   one JSON object per step\n"
         "  --load CKPT            start from a safetensors checkpoint\n"
         "  --save CKPT            write a safetensors checkpoint at the end\n"
         "  --threads N            kernel threads per rank\n"
         "  --help                 this text\n";
}

static int64_t parseInteger(const std::string &flag, const std::string &value,
                            int64_t min) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE)
    throw Error(flag + " expects an integer, got '" + value + "'");
  if (v < min)
    throw Error(flag + " must be at least " + std::to_string(min) + ", got " +
                value);
  return v;
}

Options parseOptions(const std::vector<std::string> &args) {
  Options o;
  static const std::set<std::string> withValue = {
      "--manifest", "--steps", "--data",  "--data-format", "--seed",
      "--metrics-jsonl", "--load", "--save", "--threads"};
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    if (flag == "--help" || flag == "-h") {
      o.help = true;
      continue;
    }
    size_t eq = flag.find('=');
    bool inlineValue = flag.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inlineValue) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    if (!withValue.count(flag))
      throw Error("unknown flag '" + flag + "' (see --help)");
    if (!inlineValue) {
      if (i + 1 >= args.size())
        throw Error(flag + " needs a value");
      value = args[++i];
    }
    if (flag == "--manifest")
      o.manifest = value;
    else if (flag == "--steps")
      o.steps = parseInteger(flag, value, 0);
    else if (flag == "--data")
      o.data = value;
    else if (flag == "--data-format") {
      if (value == "int32")
        o.dataFormat = RawFormat::Int32;
      else if (value == "uint16")
        o.dataFormat = RawFormat::UInt16;
      else
        throw Error("--data-format expects int32 or uint16, got '" + value +
                    "'");
    } else if (flag == "--seed")
      o.seed = uint64_t(parseInteger(flag, value, 0));
    else if (flag == "--metrics-jsonl")
      o.metricsJsonl = value;
    else if (flag == "--load")
      o.load = value;
    else if (flag == "--save")
      o.save = value;
    else if (flag == "--threads")
      o.threads = int32_t(parseInteger(flag, value, 1));
  }
  if (o.dataFormat && o.data.empty())
    throw Error("--data-format needs --data");
  return o;
}

//===----------------------------------------------------------------------===//
// The run
//===----------------------------------------------------------------------===//

namespace {

std::string executableDir(const char *argv0) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string path = n > 0 ? std::string(buf, size_t(n)) : std::string(argv0);
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string baseName(const char *argv0) {
  std::string s = argv0 ? argv0 : "loom-rank";
  size_t slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

/// Thrown after a collective failure has been reported: unwinds to main.
struct JobFailed {};

using EntryFn = void (*)(void **);

/// A compiled entry bound to the driver's buffers.
struct BoundEntry {
  EntryFn fn = nullptr;
  std::vector<void *> args;
  bool producesLoss = false;
};

class Run {
public:
  Run(int argc, char **argv)
      : tool(baseName(argv[0])), exeDir(executableDir(argv[0])),
        rank(loomrt_world_rank()), worldSize(loomrt_world_size()) {
    for (int i = 1; i < argc; ++i)
      args.push_back(argv[i]);
  }
  ~Run() {
    for (auto &[name, buf] : buffers)
      loomrt_free(buf);
  }

  int main();

private:
  /// Runs `fn` on every rank; if it threw on any rank, the lowest failing
  /// rank prints its message and every rank throws JobFailed.
  void collectively(const std::function<void()> &fn);

  void setUp();
  void createCommunicators();
  void allocateParameters();
  BoundEntry bind(const Entry &entry);
  void runSteps();
  void save();

  std::string tool, exeDir;
  int32_t rank, worldSize;
  std::vector<std::string> args;
  Options opts;
  Manifest m;
  const RankInfo *me = nullptr;
  std::map<std::string, loomrt_comm> comms; // by group kind; null if absent
  std::map<std::string, void *> buffers;    // this rank's shards
  std::unique_ptr<TokenStream> stream;
  std::unique_ptr<BatchReader> reader;
  MicroBatch batch;
  float loss = 0.0f;
  FILE *metrics = nullptr;
  int64_t dpSize = 1, dpRank = 0;
};

void Run::collectively(const std::function<void()> &fn) {
  std::string error;
  try {
    fn();
  } catch (const Error &e) {
    error = e.what();
  } catch (const std::bad_alloc &) {
    error = "out of memory";
  } catch (const std::exception &e) {
    // A bug rather than bad input, but it must not leave the others hanging.
    error = std::string("internal error: ") + e.what();
  }
  // MAX over (worldSize - rank) of the failing ranks names the lowest one;
  // small integers are exact in f32.
  float flag = error.empty() ? 0.0f : float(worldSize - rank);
  if (worldSize > 1)
    loomrt_all_reduce(loomrt_comm_world(), LOOMRT_F32, LOOMRT_MAX, &flag, &flag,
                      1);
  if (flag == 0.0f)
    return;
  if (worldSize - int32_t(flag) == rank) {
    std::fprintf(stderr, "%s: error: %s\n", tool.c_str(), error.c_str());
    std::fflush(stderr);
  }
  throw JobFailed{};
}

void Run::setUp() {
  collectively([&] {
    opts = parseOptions(args);
    if (opts.help)
      return;
    std::string path =
        opts.manifest.empty() ? exeDir + "/manifest.json" : opts.manifest;
    m = readManifest(path);
    if (m.worldSize != worldSize)
      throw Error("manifest is for " + std::to_string(m.worldSize) +
                  " rank" + (m.worldSize == 1 ? "" : "s") +
                  " but this job has " + std::to_string(worldSize));
    me = &m.ranks[rank];
    std::tie(dpSize, dpRank) = m.dataParallel(rank);
    // The loss is averaged over each data-parallel group: its members must
    // all produce one or all not.
    if (auto g = m.groupOf("dp", rank))
      for (int32_t peer : *g->first)
        if (m.ranks[peer].entries.at("forward").hasArg(ArgKind::Loss) !=
            me->entries.at("forward").hasArg(ArgKind::Loss))
          throw Error("ranks " + std::to_string(rank) + " and " +
                      std::to_string(peer) +
                      " are in one data-parallel group but only one of "
                      "them computes the loss");
  });
}

void Run::createCommunicators() {
  // Every rank creates the same kinds in the same (sorted) order:
  // loomrt_comm_create is collective over the world.
  // The decision uses manifest-wide facts only, never this rank's view.
  std::set<std::string> kinds;
  if (m.groups.count("dp") && m.groups.at("dp")[0].size() > 1)
    kinds.insert("dp");
  for (const RankInfo &r : m.ranks)
    for (const auto &[name, entry] : r.entries)
      for (const EntryArg &a : entry.args)
        if (a.kind == ArgKind::Comm)
          kinds.insert(a.name);
  for (const std::string &kind : kinds) {
    const auto &lists = m.groups.at(kind);
    std::vector<int32_t> sizes, ranks;
    for (const auto &g : lists) {
      sizes.push_back(int32_t(g.size()));
      ranks.insert(ranks.end(), g.begin(), g.end());
    }
    comms[kind] =
        loomrt_comm_create(int32_t(lists.size()), sizes.data(), ranks.data());
  }
}

void Run::allocateParameters() {
  for (const ParamSpec &p : m.params)
    if (const Shard *s = p.shardOf(rank))
      buffers[p.name] =
          loomrt_alloc(numElements(s->box.shape) * dtypeBytes(p.dtype));
  if (!opts.load.empty()) {
    collectively([&] { loadCheckpoint(opts.load, m, rank, buffers); });
    return;
  }
  for (const ParamSpec &p : m.params)
    if (const Shard *s = p.shardOf(rank))
      initializeBox(p, s->box, opts.seed, buffers[p.name]);
}

BoundEntry Run::bind(const Entry &entry) {
  BoundEntry b;
  // The object exports the symbol; the executable is linked with
  // --export-dynamic so that it is in the dynamic symbol table.
  dlerror();
  void *sym = dlsym(RTLD_DEFAULT, entry.symbol.c_str());
  if (!sym)
    throw Error("entry point '" + entry.symbol + "' is not exported by " +
                tool + " (was it linked with -rdynamic?)");
  b.fn = reinterpret_cast<EntryFn>(sym);
  for (const EntryArg &a : entry.args) {
    switch (a.kind) {
    case ArgKind::Tokens:
      b.args.push_back(batch.tokens.data());
      break;
    case ArgKind::Labels:
      b.args.push_back(batch.labels.data());
      break;
    case ArgKind::LossMask:
      b.args.push_back(batch.lossMask.data());
      break;
    case ArgKind::Param:
      b.args.push_back(buffers.at(a.name));
      break;
    case ArgKind::Loss:
      b.args.push_back(&loss);
      b.producesLoss = true;
      break;
    case ArgKind::Comm:
      // The entry receives a pointer to the handle (null when this rank is
      // in no group of that kind).
      b.args.push_back(&comms.at(a.name));
      break;
    case ArgKind::Other:
      // The manifest parser admits these only in entries not run yet.
      throw Error("entry point '" + entry.symbol + "' takes an argument of "
                  "kind \"" + a.name + "\", which this driver does not "
                  "provide");
    }
  }
  return b;
}

void Run::runSteps() {
  BoundEntry forward;
  collectively([&] {
    if (opts.data.empty())
      stream = syntheticTokenStream(opts.seed, m.vocabSize);
    else
      stream = openTokenStream(opts.data, opts.dataFormat);
    reader = std::make_unique<BatchReader>(
        *stream, m.microBatchSize, m.seqLength, m.numMicrobatches, m.vocabSize,
        m.eodTokenId, me->sequenceRanges);
    // Size the buffers once: the bound pointers stay valid.
    int64_t n = m.microBatchSize * me->localSeqLength();
    batch.tokens.resize(n);
    batch.labels.resize(n);
    batch.lossMask.resize(n);
    forward = bind(me->entries.at("forward"));
    if (me->logsLoss && !opts.metricsJsonl.empty()) {
      metrics = std::fopen(opts.metricsJsonl.c_str(), "w");
      if (!metrics)
        throw Error("cannot open metrics file " + opts.metricsJsonl + ": " +
                    std::strerror(errno));
    }
  });

  int64_t samplesPerStep = m.microBatchSize * m.numMicrobatches * dpSize;
  int64_t tokensPerStep = samplesPerStep * m.seqLength;
  if (me->logsLoss) {
    // Megatron's order of the parallel sizes.
    std::string plan;
    for (const char *k : {"tp", "cp", "ep", "pp", "dp"})
      if (m.plan.count(k))
        plan += (plan.empty() ? "" : ", ") + std::string(k) + " " +
                std::to_string(m.plan.at(k));
    std::string data = stream->describe();
    if (stream->size() != INT64_MAX)
      data += ", " + std::to_string(reader->numSamples()) + " samples";
    std::printf("loom: %s, %d rank%s (%s), micro-batch %" PRId64
                " x seq %" PRId64 ", %" PRId64 " micro-batch%s x dp %" PRId64
                ", data: %s\n",
                m.family.empty() ? "model" : m.family.c_str(), worldSize,
                worldSize == 1 ? "" : "s", plan.c_str(), m.microBatchSize,
                m.seqLength, m.numMicrobatches,
                m.numMicrobatches == 1 ? "" : "es", dpSize, data.c_str());
    std::fflush(stdout);
  }

  for (int64_t step = 0; step < opts.steps; ++step) {
    double start = loomrt_wtime();
    double lossSum = 0.0;
    for (int64_t micro = 0; micro < m.numMicrobatches; ++micro) {
      try {
        reader->read(step, micro, dpRank, dpSize, batch);
      } catch (const Error &e) {
        // Only this rank sees these samples: abort the job with the reason.
        std::string msg = tool + ": error: " + e.what();
        loomrt_abort(msg.c_str());
      }
      forward.fn(forward.args.data());
      lossSum += loss;
    }
    float stepLoss = float(lossSum / double(m.numMicrobatches));
    if (forward.producesLoss && dpSize > 1) {
      loomrt_all_reduce(comms.at("dp"), LOOMRT_F32, LOOMRT_SUM, &stepLoss,
                        &stepLoss, 1);
      stepLoss /= float(dpSize);
    }
    double seconds = loomrt_wtime() - start;
    if (!me->logsLoss)
      continue;
    double ms = seconds * 1e3;
    double tps = seconds > 0 ? double(tokensPerStep) / seconds : 0.0;
    std::printf(" iteration %8" PRId64 "/%8" PRId64
                " | consumed samples: %12" PRId64
                " | elapsed time per iteration (ms): %.1f"
                " | tokens per second: %.1f | global batch size: %5" PRId64
                " | lm loss: %E |\n",
                step + 1, opts.steps, (step + 1) * samplesPerStep, ms, tps,
                samplesPerStep, double(stepLoss));
    std::fflush(stdout);
    if (metrics) {
      // %.9g round-trips an f32 exactly; JSON has no NaN/inf literals.
      char lossText[32];
      if (std::isfinite(stepLoss))
        std::snprintf(lossText, sizeof(lossText), "%.9g", double(stepLoss));
      else
        std::snprintf(lossText, sizeof(lossText), "null");
      std::fprintf(metrics,
                   "{\"step\": %" PRId64 ", \"loss\": %s, \"step_time_ms\": "
                   "%.3f, \"tokens_per_second\": %.1f, \"consumed_samples\": "
                   "%" PRId64 "}\n",
                   step + 1, lossText, ms, tps, (step + 1) * samplesPerStep);
      std::fflush(metrics);
    }
  }
  if (metrics) {
    std::fclose(metrics);
    metrics = nullptr;
  }
}

void Run::save() {
  // Rank 0 writes; the first holder of every distinct shard sends it, in
  // the order forEachCheckpointPiece defines on every rank.
  collectively([&] {
    if (rank != 0) {
      forEachCheckpointPiece(m, [&](const HfTensor &, const ParamSpec &p,
                                    const Shard &s) {
        if (s.rank == rank)
          loomrt_send(loomrt_comm_world(), p.dtype, buffers.at(p.name),
                      numElements(s.box.shape), 0);
      });
      return;
    }
    // Only what describes the tensors: the same parameters give the same
    // bytes whatever the plan, seed or step count that produced them.
    std::map<std::string, std::string> meta = {{"format", "pt"},
                                               {"loom.family", m.family}};
    writeCheckpoint(
        opts.save, m,
        [&](const ParamSpec &p, const Shard &s, void *out) {
          int64_t n = numElements(s.box.shape);
          if (s.rank == 0)
            std::memcpy(out, buffers.at(p.name), n * dtypeBytes(p.dtype));
          else
            loomrt_recv(loomrt_comm_world(), p.dtype, out, n, s.rank);
        },
        meta);
  });
  if (rank == 0) {
    std::printf("loom: saved checkpoint %s\n", opts.save.c_str());
    std::fflush(stdout);
  }
}

int Run::main() {
  setUp();
  if (opts.help) {
    if (rank == 0)
      std::fputs(usage(tool).c_str(), stdout);
    return 0;
  }
  if (opts.threads > 0)
    loomrt_set_num_threads(opts.threads);
  // A --save that cannot succeed fails before the steps, not after them.
  if (!opts.save.empty())
    collectively([&] {
      if (rank != 0)
        return;
      std::string dir = opts.save.substr(0, opts.save.rfind('/') + 1);
      if (dir.empty())
        dir = ".";
      if (::access(dir.c_str(), W_OK) != 0)
        throw Error("cannot write checkpoint " + opts.save + ": directory " +
                    dir + " is missing or not writable");
    });
  createCommunicators();
  allocateParameters();
  runSteps();
  if (!opts.save.empty())
    save();
  return 0;
}

} // namespace

int driverMain(int argc, char **argv) {
  loomrt_init(&argc, &argv);
  int status;
  try {
    status = Run(argc, argv).main();
  } catch (const JobFailed &) {
    status = 1;
  }
  loomrt_finalize();
  return status;
}

} // namespace loom::driver
