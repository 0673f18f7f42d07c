//===- Linker.h - Link a rank object with the runtime -----------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_DRIVER_LINKER_H
#define LOOM_COMPILER_DRIVER_LINKER_H

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace loom::driver {

/// Links `objectPath` with the runtime driver (libloomrt_main) and the
/// backend library of `backend` ("cpu": libloomrt_cpu, "cuda":
/// libloomrt_cuda) into the executable `outputPath`, with the host's C++
/// compiler driver (it knows the C++ runtime and the system libraries).
/// The runtime directory defaults to the one this build produced; the
/// LOOM_RUNTIME_DIR environment variable overrides it.
/// The file name of `backend`'s runtime library ("cpu" or "cuda"), or an
/// error naming an unknown backend or one this build did not produce.
llvm::Expected<std::string> backendLibrary(llvm::StringRef backend);

/// The runtime libraries a program of `backend` links: libloomrt_main.a
/// and the backend's shared library (this build's, or LOOM_RUNTIME_DIR's),
/// or an error naming one that is missing.
llvm::Expected<llvm::SmallVector<std::string, 2>>
runtimeLibraries(llvm::StringRef backend);

llvm::Error linkExecutable(llvm::StringRef objectPath,
                           llvm::StringRef outputPath,
                           llvm::StringRef backend = "cpu");

} // namespace loom::driver

#endif // LOOM_COMPILER_DRIVER_LINKER_H
