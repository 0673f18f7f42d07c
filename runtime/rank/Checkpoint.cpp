//===- Checkpoint.cpp - Safetensors checkpoints with HF names -------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Checkpoint.h"
#include "runtime/rank/DeviceIO.h"

#include "runtime/rank/Layout.h"
#include "runtime/rank/ParamInit.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <tuple>
#include <unistd.h>

using json = nlohmann::json;

namespace loom::rank {

void forEachCheckpointPiece(
    const Manifest &m,
    const std::function<void(const HfTensor &, const ParamSpec &,
                             const Shard &)> &fn) {
  for (const HfTensor &t : m.hfTensors)
    for (size_t i : t.pieces)
      for (const Shard *s : m.params[i].distinctShards())
        fn(t, m.params[i], *s);
}

Manifest stateLayout(const Manifest &m, const std::vector<std::string> &prefixes,
                     loomrt_dtype dtype) {
  Manifest out = m;
  out.params.clear();
  out.hfTensors.clear();
  size_t n = m.params.size();
  for (size_t k = 0; k < prefixes.size(); ++k) {
    for (const ParamSpec &p : m.params) {
      ParamSpec q = p;
      q.name = prefixes[k] + p.name;
      q.hf.name = prefixes[k] + p.hf.name;
      q.dtype = dtype;
      out.params.push_back(std::move(q));
    }
    for (const HfTensor &t : m.hfTensors) {
      HfTensor u = t;
      u.name = prefixes[k] + t.name;
      u.dtype = dtype;
      for (size_t &i : u.pieces)
        i += k * n;
      out.hfTensors.push_back(std::move(u));
    }
  }
  out.indexParams();
  std::sort(out.hfTensors.begin(), out.hfTensors.end(),
            [](const HfTensor &a, const HfTensor &b) { return a.name < b.name; });
  // Entries name parameters of `m`; nothing runs them on this layout.
  for (RankInfo &r : out.ranks)
    r.entries.clear();
  return out;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

/// A file written with POSIX calls so that it can be fsynced. The first
/// failure is remembered instead of thrown: the writer must keep receiving
/// the other ranks' shards (they block in their sends otherwise) and reports
/// the failure once all pieces went by. Removes the file unless kept.
class OutFile {
public:
  OutFile(const std::string &path) : path(path) {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
      fail("cannot create");
  }
  ~OutFile() {
    if (fd >= 0)
      ::close(fd);
    if (!kept)
      ::unlink(path.c_str());
  }
  void write(const void *data, int64_t n) {
    const char *p = static_cast<const char *>(data);
    if (hashing)
      hash.update(p, n);
    while (n > 0 && error.empty()) {
      ssize_t w = ::write(fd, p, size_t(std::min<int64_t>(n, 1 << 30)));
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        fail("cannot write");
      p += w;
      n -= w;
    }
  }
  void syncAndClose() {
    if (error.empty() && ::fsync(fd) != 0)
      fail("cannot fsync");
    if (fd >= 0 && ::close(fd) != 0)
      fail("cannot close");
    fd = -1;
  }
  /// Throws the first failure, if any.
  void check() const {
    if (!error.empty())
      throw Error(error);
  }
  void keep() { kept = true; }
  /// Everything written from now on (the tensor data) enters digest().
  void startDigest() { hashing = true; }
  uint64_t digest() const { return hash.value(); }

private:
  void fail(const char *what) {
    if (error.empty())
      error = std::string(what) + " checkpoint file " + path + ": " +
              std::strerror(errno);
  }

  std::string path;
  int fd = -1;
  bool kept = false;
  bool hashing = false;
  Fnv1a64 hash;
  std::string error;
};

std::string directoryOf(const std::string &path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

/// Writes the header of a safetensors file whose tensors follow in the
/// order of `tensors` (name, dtype, shape).
void writeHeader(OutFile &out,
                 const std::vector<std::tuple<std::string, loomrt_dtype,
                                              Shape>> &tensors,
                 const std::map<std::string, std::string> &metadata) {
  // The offsets follow from the shapes alone.
  json header = json::object();
  int64_t offset = 0;
  for (const auto &[name, dtype, shape] : tensors) {
    int64_t bytes = numElements(shape) * dtypeBytes(dtype);
    header[name] = {{"dtype", safetensorsDTypeName(dtype)},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  json meta = json::object();
  for (const auto &[k, v] : metadata)
    meta[k] = v;
  header["__metadata__"] = meta;
  std::string text = header.dump();
  // Pad so that the tensor data starts 8-byte aligned, as the reference
  // writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t headerLen = text.size();
  out.write(&headerLen, 8);
  out.write(text.data(), int64_t(text.size()));
  out.startDigest();
}

/// Makes the temporary file `tmp` complete and durable, still at `tmp`.
StagedFile stage(OutFile &out, const std::string &tmp,
                 const std::string &path) {
  out.syncAndClose();
  out.check();
  out.keep();
  return {tmp, path, out.digest()};
}

} // namespace

void publish(const StagedFile &file) {
  if (::rename(file.tmp.c_str(), file.path.c_str()) != 0)
    throw Error("cannot rename " + file.tmp + " to " + file.path + ": " +
                std::strerror(errno));
  syncDirectory(directoryOf(file.path));
}

void syncDirectory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void writeSafetensors(const std::string &path,
                      const std::vector<NamedTensor> &tensors,
                      const std::map<std::string, std::string> &metadata) {
  std::vector<std::tuple<std::string, loomrt_dtype, Shape>> layout;
  for (const NamedTensor &t : tensors)
    layout.emplace_back(t.name, t.dtype, t.shape);
  std::string tmp = path + ".tmp";
  OutFile out(tmp);
  writeHeader(out, layout, metadata);
  // Through a host buffer, one tensor at a time: `data` is backend memory.
  std::vector<char> host;
  for (const NamedTensor &t : tensors) {
    host.resize(size_t(numElements(t.shape) * dtypeBytes(t.dtype)));
    loomrt_copy(host.data(), t.data, int64_t(host.size()));
    out.write(host.data(), int64_t(host.size()));
  }
  publish(stage(out, tmp, path));
}

void writeCheckpoint(const std::string &path, const Manifest &m,
                     const ShardFetcher &fetch,
                     const std::map<std::string, std::string> &metadata) {
  publish(stageCheckpoint(path, m, fetch, metadata));
}

StagedFile stageCheckpoint(const std::string &path, const Manifest &m,
                           const ShardFetcher &fetch,
                           const std::map<std::string, std::string> &metadata) {
  // A tensor's rows are written in order, as one file tensor or several
  // consecutive ones: a padded tensor's file rows under its name, then the
  // padding rows under paddingName(); stacked experts one per expert.
  std::vector<std::tuple<std::string, loomrt_dtype, Shape>> layout;
  for (const HfTensor &t : m.hfTensors)
    for (auto &[name, shape] : t.fileTensors())
      layout.emplace_back(name, t.dtype, shape);
  std::string tmp = path + ".tmp";
  OutFile out(tmp);
  writeHeader(out, layout, metadata);

  // One HF tensor in memory at a time: gather its pieces, write, drop.
  std::vector<unsigned char> tensor, piece;
  const HfTensor *current = nullptr;
  auto flush = [&] {
    if (current)
      out.write(tensor.data(), int64_t(tensor.size()));
  };
  forEachCheckpointPiece(m, [&](const HfTensor &t, const ParamSpec &p,
                                const Shard &s) {
    if (current != &t) {
      flush();
      current = &t;
      tensor.assign(numElements(t.shape) * dtypeBytes(t.dtype), 0);
    }
    int64_t w = dtypeBytes(p.dtype);
    piece.resize(numElements(s.box.shape) * w);
    fetch(p, s, piece.data());
    copyStrided(s.box.shape, w, piece.data(),
                {0, contiguousStrides(s.box.shape)}, tensor.data(),
                hfViewOfBox(p, s.box));
  });
  flush();
  return stage(out, tmp, path);
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

void loadCheckpoint(const std::string &path, const Manifest &m, int32_t rank,
                    const std::map<std::string, void *> &buffers,
                    std::optional<uint64_t> paddingSeed) {
  SafetensorsFile file(path);
  // Validate everything before touching any buffer, so that every rank
  // reports the same first problem.
  auto check = [&](const std::string &name, const Shape &shape) {
    const SafetensorsFile::Tensor &f = file.tensors().at(name);
    if (f.shape != shape)
      throw Error("checkpoint " + path + ": tensor \"" + name +
                  "\" has shape " + shapeString(f.shape) + ", expected " +
                  shapeString(shape));
    if (!parseSafetensorsDType(f.dtypeName))
      throw Error("checkpoint " + path + ": tensor \"" + name +
                  "\" has dtype " + f.dtypeName +
                  ", expected F32, BF16 or F16");
  };
  std::map<std::string, const HfTensor *> byName;
  for (const HfTensor &t : m.hfTensors) {
    byName[t.name] = &t;
    if (t.experts > 0) {
      for (int64_t e = 0; e < t.experts; ++e) {
        if (!file.tensors().count(t.expertName(e)))
          throw Error("checkpoint " + path + " has no tensor \"" +
                      t.expertName(e) + "\"");
        check(t.expertName(e), t.expertShape());
      }
      continue;
    }
    if (!file.tensors().count(t.name))
      throw Error("checkpoint " + path + " has no tensor \"" + t.name + "\"");
    check(t.name, t.padded() ? t.fileShape() : t.shape);
    if (!t.padded())
      continue;
    if (file.tensors().count(t.paddingName()))
      check(t.paddingName(), t.paddingShape());
    else if (!paddingSeed)
      throw Error("checkpoint " + path + " has no tensor \"" +
                  t.paddingName() + "\" (the padding rows of the vocabulary)");
  }

  // Copies `shape` elements at view `src` of file tensor `name` to the
  // contiguous `dst`, converting to `dtype`.
  std::vector<unsigned char> tmp;
  auto copyIn = [&](const std::string &name, const Shape &shape,
                    const StridedView &src, loomrt_dtype dtype, void *dst) {
    const SafetensorsFile::Tensor &f = file.tensors().at(name);
    loomrt_dtype fileType = *parseSafetensorsDType(f.dtypeName);
    StridedView to{0, contiguousStrides(shape)};
    const unsigned char *data = file.data() + f.begin;
    // Cut the box out on the host, then into backend memory (converted
    // there when the checkpoint has another float type).
    int64_t n = numElements(shape);
    tmp.resize(n * dtypeBytes(fileType));
    copyStrided(shape, dtypeBytes(fileType), data, src, tmp.data(), to);
    uploadAs(fileType, tmp.data(), dtype, dst, n);
  };

  for (const ParamSpec &p : m.params) {
    const Shard *s = p.shardOf(rank);
    auto buf = buffers.find(p.name);
    if (!s || buf == buffers.end())
      continue;
    const HfTensor &t = *byName.at(p.hf.name);
    if (t.experts > 0) {
      // Each expert (row of dim 0) from its own file tensor.
      const Box &box = s->box;
      int64_t lo = box.offset[0], hi = lo + box.shape[0];
      int64_t expertBytes = numElements(box.shape) /
                            std::max<int64_t>(hi - lo, 1) * dtypeBytes(p.dtype);
      for (int64_t e = lo; e < hi; ++e) {
        Box one = box;
        one.offset[0] = e;
        one.shape[0] = 1;
        StridedView view = hfViewOfBox(p, one);
        view.base -= e * contiguousStrides(t.shape)[0];
        copyIn(t.expertName(e), one.shape, view, p.dtype,
               static_cast<char *>(buf->second) + (e - lo) * expertBytes);
      }
      continue;
    }
    if (!t.padded()) {
      copyIn(t.name, s->box.shape, hfViewOfBox(p, s->box), p.dtype,
             buf->second);
      continue;
    }
    // The parameter's rows are the tensor's (Manifest checks it): rows
    // below fileRows come from the tensor, the rest from the padding.
    const Box &box = s->box;
    int64_t lo = box.offset[0], hi = lo + box.shape[0];
    int64_t split = std::clamp(t.fileRows, lo, hi);
    int64_t rowBytes = numElements(box.shape) / std::max<int64_t>(hi - lo, 1) *
                       dtypeBytes(p.dtype);
    auto rows = [&](int64_t r0, int64_t r1) {
      Box b = box;
      b.offset[0] = r0;
      b.shape[0] = r1 - r0;
      return b;
    };
    char *dst = static_cast<char *>(buf->second);
    if (lo < split) {
      Box head = rows(lo, split);
      copyIn(t.name, head.shape, hfViewOfBox(p, head), p.dtype, dst);
    }
    if (split < hi) {
      Box tail = rows(split, hi);
      char *out = dst + (split - lo) * rowBytes;
      if (!file.tensors().count(t.paddingName())) {
        // A Hugging Face file: the padding starts as a fresh run's would.
        initializeBox(p, tail, *paddingSeed, out);
        continue;
      }
      StridedView view = hfViewOfBox(p, tail);
      view.base -= t.fileRows * contiguousStrides(t.shape)[0];
      copyIn(t.paddingName(), tail.shape, view, p.dtype, out);
    }
  }
}

} // namespace loom::rank
