//===- ProgramCache.h - loom-train's cache of compiled programs -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A directory of loom-compile output directories, one per key:
//
//   CACHE/
//     <key>/                 32 hex digits: SHA-256 of key.txt
//       key.txt              what the program depends on, one line each
//       model.mlir           the imported model (what loom-import writes)
//       report.txt           loom-compile --report's text
//       manifest.json, launch, rank-00000, ...   (loom-compile's output)
//       entry.json           written last: every file's size and xxh3 digest
//     .tmp-<key>-XXXXXX/     a compile in progress (or killed)
//     .old-<key>-XXXXXX/     an entry being replaced
//
// A compile writes into a private .tmp- directory and renames it to <key>
// when it is complete, so a reader sees a whole entry or none, and a killed
// compile leaves only a .tmp- directory, which nothing reuses (and which is
// removed a day later). An entry is reused only when its entry.json names
// this key, its key.txt is this key's text, every file it lists has the
// recorded size and digest, and the manifest reads as the ranks read it
// with a rank executable for each rank; anything else is rebuilt, never
// trusted.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_TOOLS_LOOM_TRAIN_PROGRAMCACHE_H
#define LOOM_TOOLS_LOOM_TRAIN_PROGRAMCACHE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>

namespace loom::train {

/// What a compiled program depends on, as text ("what: value" lines), and
/// its digest, the entry's name.
struct CacheKey {
  std::string text;
  std::string hex;
  static CacheKey of(std::string text);
};

/// The cache directory when --cache-dir is not given: $LOOM_CACHE_DIR, else
/// $XDG_CACHE_HOME/loom, else $HOME/.cache/loom, else a directory in the
/// system's temporary directory.
std::string defaultCacheDir();

class ProgramCache {
public:
  /// `dir` is made absolute (against the current directory).
  explicit ProgramCache(llvm::StringRef dir);

  const std::string &directory() const { return dir; }
  /// Where the entry of `key` is (or would be).
  std::string entryPath(const CacheKey &key) const;

  /// Why the entry of `key` cannot be reused ("there is none", "entry.json
  /// is missing", "rank-00001 changed size", ...), or nullopt when it can.
  std::optional<std::string> check(const CacheKey &key) const;
  /// Whether the entry's directory exists at all (valid or not).
  bool exists(const CacheKey &key) const;
  /// When the entry was made (entry.json's "created"), for messages.
  std::string created(const CacheKey &key) const;

  /// A new private directory to compile `key` into, with key.txt in it.
  llvm::Expected<std::string> begin(const CacheKey &key);
  /// Records the files of `tmp` in its entry.json and renames it to the
  /// entry of `key`. An entry already there is kept when it is valid (a
  /// concurrent compile of the same key finished first; `tmp` is removed)
  /// unless `replace`, and otherwise moved aside and removed.
  llvm::Error commit(llvm::StringRef tmp, const CacheKey &key, bool replace);
  /// Removes `tmp` (a compile that failed).
  void abandon(llvm::StringRef tmp);

private:
  std::string dir;
};

} // namespace loom::train

#endif // LOOM_TOOLS_LOOM_TRAIN_PROGRAMCACHE_H
