//===- TempDir.h - A scratch directory per test -----------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_TEST_UNIT_DRIVER_TEMPDIR_H
#define LOOM_TEST_UNIT_DRIVER_TEMPDIR_H

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace loom::rank::testing {

/// Creates a fresh directory under $TMPDIR; removes it at the end.
class TempDir {
public:
  TempDir() {
    const char *base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/loom-drv-XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data()))
      ADD_FAILURE() << "mkdtemp failed";
    dir = buf.data();
  }
  ~TempDir() { std::system(("rm -rf '" + dir + "'").c_str()); }
  std::string path(const std::string &name) const { return dir + "/" + name; }

  /// Writes raw bytes to `name` and returns its path.
  std::string write(const std::string &name, const void *data, size_t n) const {
    std::ofstream out(path(name), std::ios::binary);
    out.write(static_cast<const char *>(data), std::streamsize(n));
    return path(name);
  }

private:
  std::string dir;
};

} // namespace loom::rank::testing

#endif // LOOM_TEST_UNIT_DRIVER_TEMPDIR_H
