//===- Linker.cpp - Link a rank object with the runtime ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// LLVM has no in-process ELF linker in Debian's packages (lld is a separate
// program), so the link is one run of the system compiler driver, which also
// supplies crt files, libstdc++ and libc.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver/Linker.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"

using namespace llvm;

// kRuntimeDir, kRuntimeMain, kRuntimeBackend, kRuntimeCudaBackend (empty
// when this build has no cuda backend), kRuntimeExtraLibs: written by CMake
// (file(GENERATE)) with this build's paths.
#include "compiler/Driver/RuntimeLink.inc"

static Error fail(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

/// The runtime directory: this build's, or LOOM_RUNTIME_DIR.
static std::optional<std::string> runtimeDirOverride() {
  return sys::Process::GetEnv("LOOM_RUNTIME_DIR");
}

Expected<std::string> loom::driver::backendLibrary(StringRef backend) {
  if (backend == "cpu")
    return sys::path::filename(kRuntimeBackend).str();
  if (backend != "cuda")
    return fail("unknown backend '" + backend + "' (cpu or cuda)");
  if (*kRuntimeCudaBackend)
    return sys::path::filename(kRuntimeCudaBackend).str();
  if (runtimeDirOverride())
    return std::string("libloomrt_cuda.so");
  return fail("this build of Loom has no cuda backend (CUDA toolkit, nvcc "
              "or NCCL were not found when it was configured: see 'loomrt: "
              "cuda backend skipped' in the CMake output)");
}

Expected<SmallVector<std::string, 2>>
loom::driver::runtimeLibraries(StringRef backend) {
  Expected<std::string> backendFile = backendLibrary(backend);
  if (!backendFile)
    return backendFile.takeError();
  std::string dir = runtimeDirOverride().value_or(kRuntimeDir);
  SmallString<256> mainLib(dir), backendLib(dir);
  sys::path::append(mainLib, sys::path::filename(kRuntimeMain));
  sys::path::append(backendLib, *backendFile);
  for (StringRef lib : {StringRef(mainLib), StringRef(backendLib)})
    if (!sys::fs::exists(lib))
      return fail("runtime library '" + lib +
                  "' is missing (build the runtime, or set LOOM_RUNTIME_DIR)");
  return SmallVector<std::string, 2>{mainLib.str().str(),
                                     backendLib.str().str()};
}

Error loom::driver::linkExecutable(StringRef objectPath, StringRef outputPath,
                                   StringRef backend) {
  Expected<SmallVector<std::string, 2>> libs = runtimeLibraries(backend);
  if (!libs)
    return libs.takeError();
  const std::string &mainLib = (*libs)[0], &backendLib = (*libs)[1];
  std::string dir = runtimeDirOverride().value_or(kRuntimeDir);

  ErrorOr<std::string> cxx = sys::findProgramByName("c++");
  if (!cxx)
    return fail("no C++ compiler driver ('c++') on PATH to link with");

  SmallVector<std::string> args = {
      *cxx,
      "-o",
      outputPath.str(),
      objectPath.str(),
      // The driver finds the entry points with dlsym.
      "-Wl,--export-dynamic",
      mainLib,
      backendLib,
      "-Wl,-rpath," + dir};
  for (StringRef lib : kRuntimeExtraLibs)
    if (!lib.empty())
      args.push_back(lib.str());
  SmallVector<StringRef> argRefs(args.begin(), args.end());

  std::string message;
  SmallString<128> log;
  sys::fs::createTemporaryFile("loom-link", "log", log);
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(log),
                                          StringRef(log)};
  int rc = sys::ExecuteAndWait(*cxx, argRefs, std::nullopt, redirects, 0, 0,
                               &message);
  auto output = MemoryBuffer::getFile(log);
  std::string text = output ? (*output)->getBuffer().str() : "";
  sys::fs::remove(log);
  if (rc != 0)
    return fail("linking '" + outputPath + "' failed" +
                (message.empty() ? "" : ": " + message) +
                (text.empty() ? "" : ":\n" + text));
  return Error::success();
}
