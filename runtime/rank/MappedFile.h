//===- MappedFile.h - Read-only memory-mapped files -------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Data sets and checkpoints are read through read-only mappings: a rank
// touches only the pages of its own samples and shards.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_MAPPEDFILE_H
#define LOOM_RUNTIME_RANK_MAPPEDFILE_H

#include <cstdint>
#include <string>

namespace loom::rank {

class MappedFile {
public:
  /// Maps `path`; throws Error naming `what` ("data file", "checkpoint")
  /// when it is missing or unreadable.
  MappedFile(const std::string &path, const std::string &what);
  ~MappedFile();
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  const unsigned char *data() const { return bytes; }
  int64_t size() const { return length; }
  const std::string &path() const { return filePath; }

private:
  std::string filePath;
  const unsigned char *bytes = nullptr;
  int64_t length = 0;
};

bool fileExists(const std::string &path);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_MAPPEDFILE_H
