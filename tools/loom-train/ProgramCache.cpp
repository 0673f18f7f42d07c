//===- ProgramCache.cpp - loom-train's cache of compiled programs ---------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "tools/loom-train/ProgramCache.h"

#include "runtime/rank/RankProgram.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Chrono.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"

#include <chrono>
#include <ctime>

using namespace llvm;
using namespace loom::train;

static constexpr StringLiteral kFormat = "loom-train-program";
static constexpr int64_t kVersion = 1;
/// Private directories older than this are left by killed compiles.
static constexpr std::chrono::hours kAbandonedAfter{24};

static Error fail(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

CacheKey CacheKey::of(std::string text) {
  std::array<uint8_t, 32> digest = SHA256::hash(
      ArrayRef(reinterpret_cast<const uint8_t *>(text.data()), text.size()));
  CacheKey key;
  key.hex = toHex(ArrayRef(digest).take_front(16), /*LowerCase=*/true);
  key.text = std::move(text);
  return key;
}

std::string loom::train::defaultCacheDir() {
  if (std::optional<std::string> dir = sys::Process::GetEnv("LOOM_CACHE_DIR"))
    if (!dir->empty())
      return *dir;
  SmallString<256> path;
  if (std::optional<std::string> xdg = sys::Process::GetEnv("XDG_CACHE_HOME");
      xdg && !xdg->empty()) {
    path = *xdg;
  } else if (std::optional<std::string> home = sys::Process::GetEnv("HOME");
             home && !home->empty()) {
    path = *home;
    sys::path::append(path, ".cache");
  } else {
    sys::path::system_temp_directory(/*ErasedOnReboot=*/false, path);
  }
  sys::path::append(path, "loom");
  return path.str().str();
}

ProgramCache::ProgramCache(StringRef directory) {
  SmallString<256> path(directory);
  sys::fs::make_absolute(path);
  sys::path::remove_dots(path, /*remove_dot_dot=*/true);
  dir = path.str().str();
}

std::string ProgramCache::entryPath(const CacheKey &key) const {
  SmallString<256> path(dir);
  sys::path::append(path, key.hex);
  return path.str().str();
}

bool ProgramCache::exists(const CacheKey &key) const {
  return sys::fs::exists(entryPath(key));
}

/// The file's xxh3 digest as 16 hex digits, or nullopt if it cannot be read.
static std::optional<std::string> digestOf(StringRef path) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> file = MemoryBuffer::getFile(
      path, /*IsText=*/false, /*RequiresNullTerminator=*/false);
  if (!file)
    return std::nullopt;
  return utohexstr(xxh3_64bits((*file)->getBuffer()), /*LowerCase=*/true,
                   /*Width=*/16);
}

static std::optional<json::Object> readEntryJson(StringRef entry,
                                                 std::string &why) {
  SmallString<256> path(entry);
  sys::path::append(path, "entry.json");
  ErrorOr<std::unique_ptr<MemoryBuffer>> text = MemoryBuffer::getFile(path);
  if (!text) {
    why = "entry.json is missing (an entry is complete only with it)";
    return std::nullopt;
  }
  Expected<json::Value> value = json::parse((*text)->getBuffer());
  if (!value) {
    why = "entry.json is not valid JSON: " + toString(value.takeError());
    return std::nullopt;
  }
  json::Object *object = value->getAsObject();
  if (!object || object->getString("format") != kFormat) {
    why = "entry.json is not a loom-train entry";
    return std::nullopt;
  }
  return std::move(*object);
}

std::optional<std::string> ProgramCache::check(const CacheKey &key) const {
  std::string entry = entryPath(key);
  if (!sys::fs::is_directory(entry))
    return sys::fs::exists(entry) ? "it is not a directory" : "there is none";
  std::string why;
  std::optional<json::Object> object = readEntryJson(entry, why);
  if (!object)
    return why;
  if (object->getInteger("version") != kVersion)
    return "entry.json has another version than this loom-train's " +
           std::to_string(kVersion);
  if (object->getString("key") != StringRef(key.hex))
    return "entry.json is for another key";
  const json::Array *files = object->getArray("files");
  if (!files || files->empty())
    return "entry.json lists no files";

  StringSet<> names;
  DenseMap<sys::fs::UniqueID, std::string> digests; // hard links: once
  for (const json::Value &v : *files) {
    const json::Object *f = v.getAsObject();
    std::optional<StringRef> name = f ? f->getString("name") : std::nullopt;
    std::optional<int64_t> bytes = f ? f->getInteger("bytes") : std::nullopt;
    std::optional<StringRef> xxh3 = f ? f->getString("xxh3") : std::nullopt;
    if (!name || !bytes || !xxh3 || name->empty() ||
        name->find_first_of("/\\") != StringRef::npos || name->starts_with("."))
      return "entry.json has a malformed file record";
    SmallString<256> path(entry);
    sys::path::append(path, *name);
    sys::fs::file_status status;
    if (sys::fs::status(path, status) ||
        status.type() != sys::fs::file_type::regular_file)
      return (*name + " is missing").str();
    if (int64_t(status.getSize()) != *bytes)
      return (*name + " changed size (" + Twine(status.getSize()) +
              " bytes, recorded " + Twine(*bytes) + ")")
          .str();
    auto [it, inserted] = digests.try_emplace(status.getUniqueID());
    if (inserted) {
      std::optional<std::string> digest = digestOf(path);
      if (!digest)
        return (*name + " cannot be read").str();
      it->second = *digest;
    }
    if (it->second != *xxh3)
      return (*name + " changed (its digest is not the recorded one)").str();
    names.insert(*name);
  }
  for (StringRef required : {"key.txt", "manifest.json", "launch"})
    if (!names.contains(required))
      return ("entry.json does not record " + required).str();

  SmallString<256> keyPath(entry);
  sys::path::append(keyPath, "key.txt");
  ErrorOr<std::unique_ptr<MemoryBuffer>> keyText =
      MemoryBuffer::getFile(keyPath);
  if (!keyText || (*keyText)->getBuffer() != key.text)
    return "key.txt is not this key's";

  SmallString<256> manifest(entry);
  sys::path::append(manifest, "manifest.json");
  rank::LaunchFacts facts;
  std::string manifestError =
      rank::readLaunchFacts(manifest.str().str(), facts);
  if (!manifestError.empty())
    return manifestError;
  for (int64_t r = 0; r < facts.worldSize; ++r) {
    std::string binary = formatv("rank-{0:d5}", r).str();
    if (!names.contains(binary))
      return "entry.json does not record " + binary;
  }
  return std::nullopt;
}

std::string ProgramCache::created(const CacheKey &key) const {
  std::string why;
  std::optional<json::Object> object = readEntryJson(entryPath(key), why);
  std::optional<StringRef> when =
      object ? object->getString("created") : std::nullopt;
  return when ? when->str() : "at an unknown time";
}

/// Removes the private directories of compiles killed long ago.
static void sweepAbandoned(StringRef dir) {
  std::error_code ec;
  auto now = std::chrono::system_clock::now();
  for (sys::fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    StringRef name = sys::path::filename(it->path());
    if (!name.starts_with(".tmp-") && !name.starts_with(".old-"))
      continue;
    sys::fs::file_status status;
    if (!sys::fs::status(it->path(), status) &&
        now - status.getLastModificationTime() > kAbandonedAfter)
      sys::fs::remove_directories(it->path());
  }
}

static Error writeFile(StringRef path, StringRef text) {
  std::error_code ec;
  raw_fd_ostream os(path, ec);
  if (ec)
    return fail("cannot write '" + path + "': " + ec.message());
  os << text;
  os.close();
  if (os.has_error())
    return fail("cannot write '" + path + "': " + os.error().message());
  return Error::success();
}

Expected<std::string> ProgramCache::begin(const CacheKey &key) {
  if (std::error_code ec = sys::fs::create_directories(dir))
    return fail("cannot create the cache directory '" + dir +
                "': " + ec.message());
  sweepAbandoned(dir);
  SmallString<256> prefix(dir), tmp;
  sys::path::append(prefix, ".tmp-" + key.hex);
  if (std::error_code ec = sys::fs::createUniqueDirectory(prefix, tmp))
    return fail("cannot create a directory in the cache directory '" + dir +
                "': " + ec.message());
  SmallString<256> keyPath(tmp);
  sys::path::append(keyPath, "key.txt");
  if (Error e = writeFile(keyPath, key.text))
    return std::move(e);
  return tmp.str().str();
}

void ProgramCache::abandon(StringRef tmp) { sys::fs::remove_directories(tmp); }

Error ProgramCache::commit(StringRef tmp, const CacheKey &key, bool replace) {
  // Every file of the compile, with its size and digest.
  json::Array files;
  std::vector<std::string> names;
  std::error_code ec;
  for (sys::fs::directory_iterator it(tmp, ec), end; !ec && it != end;
       it.increment(ec)) {
    StringRef name = sys::path::filename(it->path());
    if (name != "entry.json")
      names.push_back(name.str());
  }
  if (ec)
    return fail("cannot list '" + tmp + "': " + ec.message());
  llvm::sort(names);
  for (const std::string &name : names) {
    SmallString<256> path(tmp);
    sys::path::append(path, name);
    sys::fs::file_status status;
    if (sys::fs::status(path, status) ||
        status.type() != sys::fs::file_type::regular_file)
      return fail("'" + path + "' is not a regular file");
    std::optional<std::string> digest = digestOf(path);
    if (!digest)
      return fail("cannot read '" + path + "'");
    files.push_back(json::Object{{"name", name},
                                 {"bytes", int64_t(status.getSize())},
                                 {"xxh3", *digest}});
  }
  std::time_t now = std::time(nullptr);
  char created[32];
  std::strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ",
                std::gmtime(&now));
  json::Object entry{{"format", kFormat},
                     {"version", kVersion},
                     {"key", key.hex},
                     {"created", created},
                     {"files", std::move(files)}};
  SmallString<256> entryJson(tmp);
  sys::path::append(entryJson, "entry.json");
  if (Error e = writeFile(
          entryJson,
          formatv("{0:2}", json::Value(std::move(entry))).str() + "\n"))
    return e;

  // Into place: a reader sees the whole entry or none.
  std::string path = entryPath(key);
  if (!sys::fs::rename(tmp, path))
    return Error::success();
  if (!sys::fs::exists(path))
    return fail("cannot move '" + tmp + "' to '" + path + "'");
  if (!replace && !check(key)) {
    // Another compile of the same key finished first.
    abandon(tmp);
    return Error::success();
  }
  // Replace what is there: a file is removed, a directory first moved
  // aside (a reader sees it whole until the new entry takes its name).
  SmallString<256> old;
  if (!sys::fs::is_directory(path)) {
    if (std::error_code e = sys::fs::remove(path))
      return fail("cannot remove '" + path + "': " + e.message());
  } else {
    SmallString<256> prefix(dir);
    sys::path::append(prefix, ".old-" + key.hex);
    if (std::error_code e = sys::fs::createUniqueDirectory(prefix, old))
      return fail("cannot create a directory in '" + dir + "': " + e.message());
    if (std::error_code e = sys::fs::rename(path, old))
      return fail("cannot move the entry '" + path + "' aside: " + e.message());
  }
  if (std::error_code e = sys::fs::rename(tmp, path))
    return fail("cannot move '" + tmp + "' to '" + path + "': " + e.message());
  if (!old.empty())
    sys::fs::remove_directories(old);
  return Error::success();
}
