//===- MappedFile.cpp - Read-only memory-mapped files ---------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/MappedFile.h"

#include "runtime/rank/Error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace loom::rank {

bool fileExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

MappedFile::MappedFile(const std::string &path, const std::string &what)
    : filePath(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error("cannot open " + what + " " + path + ": " +
                std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(what + " " + path + " is not a regular file");
  }
  length = st.st_size;
  if (length > 0) {
    void *p = ::mmap(nullptr, size_t(length), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw Error("cannot map " + what + " " + path + ": " +
                  std::strerror(err));
    }
    bytes = static_cast<const unsigned char *>(p);
  }
  ::close(fd); // the mapping keeps the file alive
}

MappedFile::~MappedFile() {
  if (bytes)
    ::munmap(const_cast<unsigned char *>(bytes), size_t(length));
}

} // namespace loom::rank
