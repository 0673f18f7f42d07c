//===- Data.cpp - Token streams and micro-batches -------------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Data.h"

#include "runtime/rank/MappedFile.h"
#include "runtime/rank/ParamInit.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace loom::rank {

namespace {

template <typename T> T readLE(const unsigned char *p) {
  T v;
  std::memcpy(&v, p, sizeof(T)); // x86-64 and aarch64 are little-endian
  return v;
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Token ids of one element type, read from a mapping.
enum class Elem { U8, I8, I16, I32, I64, U16 };

int64_t elemBytes(Elem e) {
  switch (e) {
  case Elem::U8:
  case Elem::I8:
    return 1;
  case Elem::I16:
  case Elem::U16:
    return 2;
  case Elem::I32:
    return 4;
  case Elem::I64:
    return 8;
  }
  return 1;
}

int64_t loadToken(Elem e, const unsigned char *p) {
  switch (e) {
  case Elem::U8:
    return *p;
  case Elem::I8:
    return int8_t(*p);
  case Elem::I16:
    return readLE<int16_t>(p);
  case Elem::U16:
    return readLE<uint16_t>(p);
  case Elem::I32:
    return readLE<int32_t>(p);
  case Elem::I64:
    return readLE<int64_t>(p);
  }
  return 0;
}

//===----------------------------------------------------------------------===//
// Raw files: a flat array of int32 or uint16 ids
//===----------------------------------------------------------------------===//

class RawStream : public TokenStream {
public:
  RawStream(const std::string &path, RawFormat format)
      : file(path, "data file"),
        elem(format == RawFormat::Int32 ? Elem::I32 : Elem::U16) {
    int64_t w = elemBytes(elem);
    if (file.size() % w != 0)
      throw Error("data file " + path + " is truncated: " +
                  std::to_string(file.size()) + " bytes is not a whole number "
                  "of " + (w == 4 ? "int32" : "uint16") + " tokens");
    count = file.size() / w;
  }
  int64_t size() const override { return count; }
  void read(int64_t start, int64_t n, int64_t *out) const override {
    int64_t w = elemBytes(elem);
    for (int64_t i = 0; i < n; ++i)
      out[i] = loadToken(elem, file.data() + (start + i) * w);
  }
  std::string describe() const override { return file.path(); }

private:
  MappedFile file;
  Elem elem;
  int64_t count = 0;
};

//===----------------------------------------------------------------------===//
// Megatron indexed datasets (megatron/core/datasets/indexed_dataset.py)
//===----------------------------------------------------------------------===//
//
// prefix.idx:  "MMIDIDX\0\0"  u64 version (1)  u8 dtype code
//              u64 sequence count N  u64 document count D
//              i32 sizes[N]  i64 pointers[N] (byte offsets into .bin)
//              i64 document_indices[D]
// prefix.bin:  the tokens of every sequence.

class IndexedStream : public TokenStream {
public:
  IndexedStream(const std::string &prefix)
      : index(prefix + ".idx", "data index"), bin(prefix + ".bin", "data file"),
        prefix(prefix) {
    const unsigned char *p = index.data();
    int64_t size = index.size();
    static const char magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
    const int64_t headerBytes = 9 + 8 + 1 + 8 + 8;
    if (size < headerBytes || std::memcmp(p, magic, 9) != 0)
      throw Error("data index " + index.path() +
                  " is not a Megatron indexed dataset (no MMIDIDX header)");
    uint64_t version = readLE<uint64_t>(p + 9);
    if (version != 1)
      throw Error("data index " + index.path() + " has version " +
                  std::to_string(version) + ", expected 1");
    uint8_t code = p[17];
    switch (code) {
    case 1: elem = Elem::U8; break;
    case 2: elem = Elem::I8; break;
    case 3: elem = Elem::I16; break;
    case 4: elem = Elem::I32; break;
    case 5: elem = Elem::I64; break;
    case 8: elem = Elem::U16; break;
    default:
      throw Error("data index " + index.path() + " has dtype code " +
                  std::to_string(code) +
                  ", which is not an integer token type");
    }
    uint64_t n = readLE<uint64_t>(p + 18);
    uint64_t docs = readLE<uint64_t>(p + 26);
    // Overflow-safe: n and docs come from the file.
    if (n > uint64_t(size) || docs > uint64_t(size) ||
        headerBytes + 12 * int64_t(n) + 8 * int64_t(docs) > size)
      throw Error("data index " + index.path() + " is truncated: " +
                  std::to_string(n) + " sequences and " +
                  std::to_string(docs) + " documents need more than its " +
                  std::to_string(size) + " bytes");
    const unsigned char *sizes = p + headerBytes;
    const unsigned char *pointers = sizes + 4 * n;
    int64_t w = elemBytes(elem);
    starts.reserve(n + 1);
    pointer.reserve(n);
    starts.push_back(0);
    for (uint64_t i = 0; i < n; ++i) {
      int64_t len = readLE<int32_t>(sizes + 4 * i);
      int64_t ptr = readLE<int64_t>(pointers + 8 * i);
      if (len < 0 || ptr < 0)
        throw Error("data index " + index.path() + " is corrupt: sequence " +
                    std::to_string(i) + " has size " + std::to_string(len) +
                    " and pointer " + std::to_string(ptr));
      // Overflow-safe (ptr comes from the file): no ptr + len * w.
      if (ptr > bin.size() || len * w > bin.size() - ptr)
        throw Error("data file " + bin.path() + " is truncated: sequence " +
                    std::to_string(i) + " of " + index.path() + " needs " +
                    std::to_string(len * w) + " bytes from byte " +
                    std::to_string(ptr) + " but the file has " +
                    std::to_string(bin.size()));
      pointer.push_back(ptr);
      starts.push_back(starts.back() + len);
    }
  }

  int64_t size() const override { return starts.back(); }

  void read(int64_t start, int64_t n, int64_t *out) const override {
    // The sequence holding `start`, then consecutive sequences.
    size_t seq = std::upper_bound(starts.begin(), starts.end(), start) -
                 starts.begin() - 1;
    int64_t w = elemBytes(elem);
    while (n > 0) {
      int64_t within = start - starts[seq];
      int64_t take = std::min(n, starts[seq + 1] - start);
      const unsigned char *src = bin.data() + pointer[seq] + within * w;
      for (int64_t i = 0; i < take; ++i)
        out[i] = loadToken(elem, src + i * w);
      out += take;
      start += take;
      n -= take;
      ++seq;
    }
  }

  std::string describe() const override { return prefix + ".{bin,idx}"; }

private:
  MappedFile index, bin;
  std::string prefix;
  Elem elem = Elem::I32;
  std::vector<int64_t> starts;  // token offset of every sequence, + total
  std::vector<int64_t> pointer; // byte offset of every sequence in .bin
};

//===----------------------------------------------------------------------===//
// Synthetic stream
//===----------------------------------------------------------------------===//

class SyntheticStream : public TokenStream {
public:
  SyntheticStream(uint64_t seed, int64_t vocab) : vocab(vocab) {
    uint64_t key = streamKey(seed, "loom.synthetic-data");
    for (int k = 0; k < kStreams; ++k) {
      first[k] = int64_t(uniformAt(key, 2 * k) * double(vocab));
      // Strides in [1, min(vocab, 16)): small, so the model sees each
      // transition often.
      int64_t maxStride = std::max<int64_t>(2, std::min<int64_t>(vocab, 16));
      stride[k] = 1 + int64_t(uniformAt(key, 2 * k + 1) * double(maxStride - 1));
    }
  }
  int64_t size() const override { return INT64_MAX; }
  void read(int64_t start, int64_t n, int64_t *out) const override {
    for (int64_t i = 0; i < n; ++i) {
      int64_t p = start + i, k = p % kStreams, step = (p / kStreams) % vocab;
      // (first + step * stride) mod vocab without overflow.
      out[i] = (first[k] + (step * (stride[k] % vocab)) % vocab) % vocab;
    }
  }
  std::string describe() const override { return "synthetic data"; }

private:
  static constexpr int kStreams = 4;
  int64_t vocab;
  int64_t first[kStreams], stride[kStreams];
};

} // namespace

std::unique_ptr<TokenStream> openTokenStream(const std::string &path,
                                             std::optional<RawFormat> raw) {
  if (raw) {
    if (!fileExists(path))
      throw Error("data file " + path + " does not exist");
    return std::make_unique<RawStream>(path, *raw);
  }
  std::string prefix = path;
  if (endsWith(path, ".bin") || endsWith(path, ".idx"))
    prefix = path.substr(0, path.size() - 4);
  if (fileExists(prefix + ".idx") || fileExists(prefix + ".bin")) {
    if (!fileExists(prefix + ".idx"))
      throw Error("data index " + prefix + ".idx does not exist (" + prefix +
                  ".bin needs it)");
    if (!fileExists(prefix + ".bin"))
      throw Error("data file " + prefix + ".bin does not exist (" + prefix +
                  ".idx needs it)");
    return std::make_unique<IndexedStream>(prefix);
  }
  if (fileExists(path))
    throw Error("cannot tell the format of data file " + path +
                ": give --data-format int32 or --data-format uint16 for a raw "
                "token file, or a Megatron .bin/.idx pair");
  if (prefix != path)
    throw Error("data file " + path + " does not exist");
  throw Error("data file " + path + " does not exist (nor " + prefix +
              ".bin/.idx)");
}

std::unique_ptr<TokenStream> syntheticTokenStream(uint64_t seed,
                                                  int64_t vocabSize) {
  return std::make_unique<SyntheticStream>(seed, vocabSize);
}

BatchReader::BatchReader(const TokenStream &stream, int64_t microBatchSize,
                         int64_t seqLength, int64_t numMicrobatches,
                         int64_t vocabSize, std::optional<int64_t> eodTokenId,
                         std::vector<std::pair<int64_t, int64_t>> sequenceRanges)
    : stream(stream), B(microBatchSize), S(seqLength),
      numMicro(numMicrobatches), vocab(vocabSize), eod(eodTokenId),
      ranges(std::move(sequenceRanges)) {
  localS = 0;
  for (auto [b, e] : ranges)
    localS += e - b;
  int64_t n = stream.size();
  if (n < S + 1)
    throw Error(stream.describe() + " has " + std::to_string(n) +
                " tokens, fewer than one sample of seq_length + 1 = " +
                std::to_string(S + 1));
  samples = (n - 1) / S; // Megatron: (tokens - 1) // seq_length
}

int64_t BatchReader::firstSample(int64_t step, int64_t micro, int64_t dpRank,
                                 int64_t dpSize) const {
  return ((step * numMicro + micro) * dpSize + dpRank) * B;
}

void BatchReader::read(int64_t step, int64_t micro, int64_t dpRank,
                       int64_t dpSize, MicroBatch &out) const {
  out.tokens.resize(B * localS);
  out.labels.resize(B * localS);
  out.lossMask.resize(B * localS);
  std::vector<int64_t> sample(S + 1);
  int64_t first = firstSample(step, micro, dpRank, dpSize);
  for (int64_t b = 0; b < B; ++b) {
    int64_t k = (first + b) % samples; // wrap around: the next epoch
    stream.read(k * S, S + 1, sample.data());
    for (int64_t i = 0; i <= S; ++i)
      if (sample[i] < 0 || sample[i] >= vocab)
        throw Error("token id " + std::to_string(sample[i]) + " at position " +
                    std::to_string(k * S + i) + " of " + stream.describe() +
                    " is outside the vocabulary [0, " + std::to_string(vocab) +
                    ")");
    int64_t o = b * localS;
    for (auto [begin, end] : ranges)
      for (int64_t s = begin; s < end; ++s, ++o) {
        if (s >= S) {
          // Padding for context or sequence parallelism (a compiled length
          // past seq_length): masked, after every real token.
          out.tokens[o] = 0;
          out.labels[o] = 0;
          out.lossMask[o] = 0.0f;
          continue;
        }
        out.tokens[o] = int32_t(sample[s]);
        out.labels[o] = int32_t(sample[s + 1]);
        out.lossMask[o] = eod && sample[s] == *eod ? 0.0f : 1.0f;
      }
  }
}

} // namespace loom::rank
