//===- loom-train.cpp - Import, compile (cached) and train in one command -===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
//   loom-train examples/gpt-tiny.json --micro-batch-size 4 --seq-length 64 \
//       --tp 2 --dp 2 --train-iters 50 --lr 3e-3 --use-distributed-optimizer
//
// One Megatron-style command line for what loom-import, loom-compile and
// loom-run do apart. Every flag is sorted once, by the registrations that
// the three tools use themselves:
//  - import-time: ImportFlags (the model beyond config.json);
//  - compile-time: CompileFlags (the plan and the program; --train always);
//  - run-time: LaunchFlags (loom-run's own) and the rank program's flags
//    (runtime/rank/Options.cpp), which reach every rank as given;
//  - loom-train's own: the cache.
// --seed is both an import flag (dropout masks) and a rank flag
// (initialization, synthetic data): it goes to both, as Megatron's one
// seed. A flag that is none of these, or one of a step tool's that
// loom-train does not take (-o, --print-ir-after, --manifest, Megatron's
// model-shape flags), is an error naming it before anything is imported.
//
// The compiled program is kept in a cache (ProgramCache.h) keyed by what
// changes it: this compiler (the loom-train executable) and the runtime
// libraries it links, the imported model's text (the config and the import
// flags), and the compile-time flags given. A second command with the same
// key says "reusing ..." and runs the cached program; run-time flags are
// not in the key.
//
//===----------------------------------------------------------------------===//

#include "tools/loom-train/ProgramCache.h"

#include "compiler/Driver/Compiler.h"
#include "compiler/Driver/Linker.h"
#include "compiler/Import/ModelImporter.h"
#include "compiler/InitAll/InitAll.h"
#include "compiler/Support/CompileFlags.h"
#include "compiler/Support/ImportFlags.h"
#include "compiler/Support/Launcher.h"
#include "compiler/Support/ListFlags.h"
#include "runtime/rank/RankProgram.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

using namespace llvm;
using loom::train::CacheKey;
using loom::train::ProgramCache;

// The option categories are the sorting: each registration's flags land in
// the category it is given.
static cl::OptionCategory
    importCategory("Import-time flags (the model beyond CONFIG.json, as "
                   "loom-import takes them; part of the cache key)");
static cl::OptionCategory compileCategory(
    "Compile-time flags (the plan and the program, as loom-compile takes "
    "them, always with --train; part of the cache key)");
static cl::OptionCategory launchCategory(
    "Run-time flags of the launcher (as loom-run takes them; not in the "
    "cache key)");
static cl::OptionCategory ownCategory("loom-train's own flags");

static cl::opt<std::string> configPath(cl::Positional, cl::Required,
                                       cl::desc("<CONFIG.json>"),
                                       cl::cat(ownCategory));
// Megatron's --make-vocab-size-divisible-by is the compile-time one (padding
// kept out of the softmax), so the importer's is left out.
static loom::ImportFlags importFlags(importCategory, /*vocabPadding=*/false);
static loom::CompileFlags compileFlags(compileCategory, "loom-train",
                                       /*trainFlag=*/false);
static loom::LaunchFlags launchFlags(launchCategory);
static cl::opt<std::string> cacheDir(
    "cache-dir",
    cl::desc("Where compiled programs are kept (default: $LOOM_CACHE_DIR, "
             "else $XDG_CACHE_HOME/loom, else ~/.cache/loom)"),
    cl::value_desc("dir"), cl::cat(ownCategory));
static cl::opt<bool> recompile(
    "recompile",
    cl::desc("Compile even when the cache holds the program, and replace "
             "its entry"),
    cl::cat(ownCategory));
static cl::opt<bool>
    report("report",
           cl::desc("Print loom-compile's report (memory and communication per "
                    "rank), kept with the program in the cache"),
           cl::cat(ownCategory));
static cl::opt<bool>
    quiet("quiet",
          cl::desc("Do not print the compile's progress (the cache's one line "
                   "stays)"),
          cl::cat(ownCategory));

static const cl::OptionCategory *const kCategories[] = {
    &importCategory, &compileCategory, &launchCategory, &ownCategory};

static int error(const Twine &message) {
  WithColor::error(errs(), "loom-train") << message << "\n";
  return 1;
}

static Error fail(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

//===----------------------------------------------------------------------===//
// Flags loom-train does not take
//===----------------------------------------------------------------------===//

/// Flags of the step tools, and Megatron's flags that Loom spells otherwise
/// or takes from the config, that loom-train refuses with a pointer to what
/// to write instead (docs/MEGATRON-FLAGS.md).
static std::optional<std::string> misplacedFlag(StringRef name) {
  static const char *const kModelShape[] = {
      "num-layers",
      "hidden-size",
      "ffn-hidden-size",
      "num-attention-heads",
      "num-query-groups",
      "group-query-attention",
      "kv-channels",
      "max-position-embeddings",
      "normalization",
      "swiglu",
      "position-embedding-type",
      "rotary-base",
      "untie-embeddings-and-output-weights",
      "add-qkv-bias",
      "add-bias-linear",
      "disable-bias-linear",
      "vocab-size",
      "padded-vocab-size",
      "norm-epsilon",
      "layernorm-epsilon",
      "init-method-std"};
  if (is_contained(kModelShape, name))
    return "the model's architecture comes from CONFIG.json (a Hugging Face "
           "config.json); edit it there";
  static const std::pair<const char *, const char *> kOther[] = {
      {"o", "loom-train keeps the compiled program in its cache "
            "(--cache-dir); loom-import -o and loom-compile -o write it "
            "elsewhere"},
      {"summary", "it is loom-import's (it prints the imported model "
                  "instead of compiling it)"},
      {"print-ir-after", "it is loom-compile's, for inspecting a compile: "
                         "run loom-import and loom-compile for it"},
      {"keep-intermediates", "it is loom-compile's, for inspecting a "
                             "compile: run loom-import and loom-compile for "
                             "it"},
      {"manifest", "loom-train runs the program of its cache entry with that "
                   "entry's manifest"},
      {"bf16", "write --dtype bf16 (an import-time flag)"},
      {"fp16", "write --dtype f16 (an import-time flag)"},
      {"data-path", "write --data (one Megatron .bin/.idx prefix or a raw "
                    "token file)"},
      {"valid-data-path", "write --valid-data"},
      {"check-weight-hash-across-dp-replicas-interval",
       "write --check-weight-hash-interval"},
      {"num-layers-per-virtual-pipeline-stage",
       "loom-train takes --vpp (virtual stages per pipeline rank)"},
      {"log-interval", "every iteration is logged (--metrics-jsonl writes "
                       "them as JSON)"},
      {"world-size", "the world size is the plan's: tp x cp x pp x dp"},
  };
  for (const auto &[flag, message] : kOther)
    if (name == flag)
      return std::string(message);
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// --help
//===----------------------------------------------------------------------===//

static void printHelp() {
  raw_ostream &os = outs();
  os << "OVERVIEW: loom-train: import a model, compile its training step for "
        "a parallel plan (cached) and train it under mpirun, from one "
        "Megatron-style command line\n\n"
        "USAGE: loom-train CONFIG.json [flags]\n\n"
        "Every flag is import-time, compile-time or run-time, as the groups "
        "below say.\nImport-time and compile-time flags decide the compiled "
        "program and are part of\nthe cache key; run-time flags are not (a "
        "command that changes only them reuses\nthe program). --seed is "
        "both an import flag (dropout masks) and a rank flag\n"
        "(initialization, synthetic data), and goes to both. --train is "
        "implied.\n";
  size_t width = 0;
  const StringMap<cl::Option *> &registered = cl::getRegisteredOptions();
  for (const auto &entry : registered)
    for (const cl::OptionCategory *c : kCategories)
      if (is_contained(entry.second->Categories, c))
        width = std::max(width, entry.second->getOptionWidth());
  auto printCategory = [&](const cl::OptionCategory &category) {
    os << "\n" << category.getName() << ":\n\n";
    std::vector<const cl::Option *> options;
    for (const auto &entry : registered)
      if (is_contained(entry.second->Categories, &category) &&
          entry.second->getOptionHiddenFlag() == cl::NotHidden &&
          !is_contained(options, entry.second))
        options.push_back(entry.second);
    llvm::sort(options, [](const cl::Option *a, const cl::Option *b) {
      return a->ArgStr < b->ArgStr;
    });
    for (const cl::Option *o : options)
      o->printOptionInfo(width);
  };
  printCategory(importCategory);
  printCategory(compileCategory);
  printCategory(launchCategory);
  os << "\nRun-time flags of the rank program (as loom-run passes them to "
        "every rank, but --manifest, which is the cache entry's; not in the "
        "cache key):\n\n"
     << loom::rank::rankUsage("rank-NNNNN");
  printCategory(ownCategory);
  std::string dir =
      cacheDir.empty() ? loom::train::defaultCacheDir() : std::string(cacheDir);
  os << "\nThe cache is " << dir
     << " here: one directory per compiled program,\nnamed by its key "
        "(key.txt in it says what the key covers). An entry is\nwritten "
        "whole or not at all, and one that is not intact is compiled anew.\n"
        "Removing the cache, or an entry no job is running from, is always "
        "safe.\n";
}

//===----------------------------------------------------------------------===//
// The cache key
//===----------------------------------------------------------------------===//

/// The value an option was given, as text ("2", "true", "\"p2p\"",
/// ["p2p", "a2a"]), for the key. Every compile-time option must be readable
/// here, given or not: a new flag of a type this does not know is an error
/// at every run, not a flag the key leaves out.
static Expected<std::string> optionValue(const cl::Option &o) {
  auto quoted = [](StringRef s) {
    std::string text;
    raw_string_ostream(text) << json::Value(s);
    return text;
  };
  auto listed = [](ArrayRef<std::string> items) {
    std::string text = "[";
    text += join(items, ", ");
    text += "]";
    return text;
  };
  if (auto *v = dynamic_cast<const cl::opt<loom::IntFlag> *>(&o))
    return std::to_string(v->getValue().value);
  if (auto *v = dynamic_cast<const cl::opt<bool> *>(&o))
    return std::string(v->getValue() ? "true" : "false");
  if (auto *v = dynamic_cast<const cl::opt<int64_t> *>(&o))
    return std::to_string(v->getValue());
  if (auto *v = dynamic_cast<const cl::opt<double> *>(&o)) {
    // %.17g reads back as the same double.
    std::string text;
    raw_string_ostream(text) << format("%.17g", v->getValue());
    return text;
  }
  if (auto *v = dynamic_cast<const cl::opt<std::string> *>(&o))
    return quoted(v->getValue());
  if (auto *v = dynamic_cast<const cl::list<std::string> *>(&o)) {
    std::vector<std::string> items;
    for (const std::string &s : *v)
      items.push_back(quoted(s));
    return listed(items);
  }
  if (auto *v = dynamic_cast<const cl::list<loom::IntFlag> *>(&o)) {
    std::vector<std::string> items;
    for (const loom::IntFlag &i : *v)
      items.push_back(std::to_string(i.value));
    return listed(items);
  }
  return fail("compile-time flag --" + o.ArgStr +
              " has a type the cache key cannot read (loom-train bug)");
}

/// "compile: --name=value" for every compile-time flag given (aliases count
/// as their target), sorted by name.
static Expected<std::string> compileFlagLines() {
  std::vector<std::string> lines;
  for (const auto &entry : cl::getRegisteredOptions()) {
    const cl::Option &o = *entry.second;
    if (!is_contained(o.Categories, &compileCategory) ||
        dynamic_cast<const cl::alias *>(&o))
      continue;
    Expected<std::string> value = optionValue(o);
    if (!value)
      return value.takeError();
    if (o.getNumOccurrences())
      lines.push_back(("compile: --" + o.ArgStr + "=" + *value + "\n").str());
  }
  llvm::sort(lines);
  return join(lines, "");
}

/// "<path> <xxh3> <bytes>" of a file the compile depends on.
static Expected<std::string> fileIdentity(StringRef path) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> file = MemoryBuffer::getFile(
      path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!file)
    return fail("cannot read '" + path + "': " + file.getError().message());
  return (path +
          " xxh3:" + utohexstr(xxh3_64bits((*file)->getBuffer()), true, 16) +
          " " + Twine((*file)->getBufferSize()) + " bytes")
      .str();
}

/// What the compiled program depends on, one line each (key.txt).
static Expected<std::string>
keyText(const char *argv0, StringRef modelText,
        const loom::driver::CompileOptions &options) {
  std::string text = "loom-train program cache, format 1\n";
  // The compiler is this executable (it links the whole compiler; MLIR and
  // LLVM are the shared libraries of this version).
  std::string self =
      sys::fs::getMainExecutable(argv0, reinterpret_cast<void *>(&keyText));
  Expected<std::string> compiler = fileIdentity(self);
  if (!compiler)
    return compiler.takeError();
  text += "compiler: " + *compiler + ", LLVM " LLVM_VERSION_STRING "\n";
  // The runtime every rank executable links.
  Expected<SmallVector<std::string, 2>> libraries =
      loom::driver::runtimeLibraries(options.backend);
  if (!libraries)
    return libraries.takeError();
  for (const std::string &library : *libraries) {
    Expected<std::string> identity = fileIdentity(library);
    if (!identity)
      return identity.takeError();
    text += "runtime: " + *identity + "\n";
  }
  // The model: the config and every import-time flag, as imported.
  std::array<uint8_t, 32> digest =
      SHA256::hash(arrayRefFromStringRef(modelText));
  text += "model: sha256:" + toHex(digest, /*LowerCase=*/true) + " " +
          std::to_string(modelText.size()) + " bytes of imported IR\n";
  Expected<std::string> flags = compileFlagLines();
  if (!flags)
    return flags.takeError();
  text += "compile: --train (always)\n" + *flags;
  return text;
}

//===----------------------------------------------------------------------===//
// Import and compile
//===----------------------------------------------------------------------===//

/// The model as loom-import writes it.
static Expected<std::string> importModelText(const loom::ImportOptions &o) {
  mlir::MLIRContext context;
  auto module = loom::importModel(context, configPath, o);
  if (!module)
    return module.takeError();
  std::string text;
  raw_string_ostream os(text);
  (*module)->print(os);
  os << "\n";
  return text;
}

/// Compiles `modelText` into `dir` as loom-compile compiles a file.
static Error compileModelText(StringRef modelText, StringRef name,
                              loom::driver::CompileOptions options,
                              StringRef dir, std::string &reportText) {
  mlir::DialectRegistry registry;
  loom::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false);
  SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  sourceMgr.AddNewSourceBuffer(MemoryBuffer::getMemBuffer(modelText, name),
                               SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
  if (!module)
    return fail("cannot parse the imported model (importer bug)");
  options.outputDir = dir.str();
  if (!quiet)
    options.progress = [](StringRef line) { errs() << line << "\n"; };
  raw_string_ostream reportStream(reportText);
  return loom::driver::compileModel(*module, options, &reportStream);
}

static Error writeText(StringRef dir, StringRef name, StringRef text) {
  SmallString<256> path(dir);
  sys::path::append(path, name);
  std::error_code ec;
  raw_fd_ostream os(path, ec);
  if (ec)
    return fail("cannot write '" + path + "': " + ec.message());
  os << text;
  return Error::success();
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);

  // Sort the command line before anything runs.
  std::vector<std::string> storage;
  std::vector<const char *> joined =
      loom::joinListFlags(argc, argv, loom::CompileFlags::listFlags(), storage);
  std::vector<std::string> args(joined.begin() + 1, joined.end());
  loom::SortedCommandLine sorted = loom::sortCommandLine(args, kCategories);
  if (sorted.help) {
    printHelp();
    return 0;
  }
  // A flag of a step tool that loom-train does not take (the rank program's
  // --manifest is known to the sorter), then one that is no tool's.
  for (const loom::SortedArg &arg : sorted.args) {
    StringRef flag = StringRef(arg.words.front()).split('=').first;
    if (flag.starts_with("-"))
      if (std::optional<std::string> why = misplacedFlag(flag.ltrim('-')))
        return error("'" + flag + "' is not a loom-train flag: " + *why);
  }
  if (sorted.unknown) {
    StringRef flag = *sorted.unknown;
    if (std::optional<std::string> why = misplacedFlag(flag.ltrim('-')))
      return error("'" + flag + "' is not a loom-train flag: " + *why);
    return error("unknown flag '" + flag + "' (see loom-train --help)");
  }
  if (sorted.positionals.size() > 1)
    return error("unexpected argument '" + sorted.positionals[1] +
                 "' (loom-train takes one CONFIG.json; see --help)");
  std::vector<const char *> llvmArgs = {argv[0]};
  for (const std::string &a : sorted.llvmArgs)
    llvmArgs.push_back(a.c_str());
  cl::ParseCommandLineOptions(int(llvmArgs.size()), llvmArgs.data(),
                              "loom-train\n");

  // Every flag's value and every combination the tools check, before the
  // model is imported.
  Expected<loom::ImportOptions> importOptions = importFlags.options();
  if (!importOptions)
    return error(toString(importOptions.takeError()));
  Expected<loom::driver::CompileOptions> compileOptions =
      compileFlags.options();
  if (!compileOptions)
    return error(toString(compileOptions.takeError()));
  std::vector<std::string> rankArgs = sorted.rankArgs;
  if (!is_contained(rankArgs, "--train"))
    rankArgs.insert(rankArgs.begin(), "--train");
  std::string rankError = loom::rank::checkRankFlags(rankArgs);
  if (!rankError.empty())
    return error(rankError);
  if (launchFlags.checkDeviceContract && compileOptions->backend != "cpu")
    return error("--check-device-contract checks the cpu backend, but this "
                 "command compiles for " +
                 compileOptions->backend + " (--backend)");
  if (!loom::enclosingJob())
    if (Expected<std::string> mpirun = loom::findMpirun(launchFlags); !mpirun)
      return error(toString(mpirun.takeError()));

  // Import; the key.
  Expected<std::string> modelText = importModelText(*importOptions);
  if (!modelText)
    return error(toString(modelText.takeError()));
  Expected<std::string> text = keyText(argv[0], *modelText, *compileOptions);
  if (!text)
    return error(toString(text.takeError()));
  CacheKey key = CacheKey::of(std::move(*text));
  ProgramCache cache(cacheDir.empty() ? loom::train::defaultCacheDir()
                                      : std::string(cacheDir));
  std::string entry = cache.entryPath(key);

  // The program: the cache's, or compiled into it.
  std::optional<std::string> unusable =
      recompile ? std::optional<std::string>("--recompile") : cache.check(key);
  if (!unusable) {
    errs() << "loom-train: reusing " << entry << " (compiled "
           << cache.created(key)
           << " for the same model, compile-time flags and compiler)\n";
  } else {
    if (cache.exists(key) && !recompile)
      errs() << "loom-train: cache entry " << entry << " is not usable ("
             << *unusable << "); compiling it anew\n";
    errs() << "loom-train: compiling " << configPath << " into " << entry
           << "\n";
    Expected<std::string> tmp = cache.begin(key);
    if (!tmp)
      return error(toString(tmp.takeError()));
    std::string reportText;
    Error e = writeText(*tmp, "model.mlir", *modelText);
    if (!e)
      e = compileModelText(*modelText, (entry + "/model.mlir"), *compileOptions,
                           *tmp, reportText);
    if (!e)
      e = writeText(*tmp, "report.txt", reportText);
    if (!e)
      e = cache.commit(*tmp, key, /*replace=*/recompile);
    if (e) {
      cache.abandon(*tmp);
      return error(toString(std::move(e)));
    }
  }
  if (report) {
    SmallString<256> path(entry);
    sys::path::append(path, "report.txt");
    if (ErrorOr<std::unique_ptr<MemoryBuffer>> text =
            MemoryBuffer::getFile(path))
      outs() << (*text)->getBuffer();
  }

  Expected<int> status = loom::launchProgram(entry, rankArgs, launchFlags);
  if (!status)
    return error(toString(status.takeError()));
  return *status;
}
