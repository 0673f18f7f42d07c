//===- DeviceContract.cpp - The cpu backend's device-memory check -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// See DeviceContract.h. No library fits: sanitizers watch bounds and
// lifetimes, not which side of an ABI may touch a buffer, so the arena is
// plain mmap/mprotect.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/DeviceContract.h"

#include "runtime/common/Errors.h"

#include <cxxabi.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace loomrt::contract {
namespace {

/// Address space reserved once; pages are committed only when touched.
constexpr size_t kArenaBytes = size_t(1) << 38; // 256 GiB
constexpr size_t kPage = 4096;

struct Arena {
  std::mutex mutex;
  char *base = nullptr;
  size_t top = 0; // bytes handed out so far, a multiple of kPage
  /// Live buffers: start -> {bytes requested, bytes reserved}.
  std::map<const char *, std::pair<size_t, size_t>> live;
  /// Released page runs by length, for reuse by a request of that length.
  std::multimap<size_t, char *> released;
  int depth = 0;                      // nested open ABI calls
  const char *current = nullptr;      // outermost open call
  const char *last = "(none yet)";    // last call that returned
  int rank = -1;
  struct sigaction previous = {};
};

Arena &arena() {
  static Arena *a = new Arena; // never destroyed: used until the very end
  return *a;
}

void protect(Arena &a, int prot) {
  if (a.top && mprotect(a.base, a.top, prot) != 0)
    fatal("device contract", "mprotect failed: %s", std::strerror(errno));
}

/// The live buffer holding [p, p + 1), or the end of `live`. A pointer one
/// past a buffer's requested end still belongs to it (an empty tensor).
std::map<const char *, std::pair<size_t, size_t>>::const_iterator
bufferOf(const Arena &a, const char *p) {
  auto it = a.live.upper_bound(p);
  if (it == a.live.begin())
    return a.live.end();
  --it;
  if (p > it->first + it->second.first)
    return a.live.end();
  return it;
}

/// The symbol of one backtrace line, demangled ("f(args)+0x12" form).
std::string readableFrame(const char *line) {
  std::string s = line;
  size_t open = s.find('('), plus = s.find('+', open);
  if (open == std::string::npos || plus == std::string::npos || plus == open + 1)
    return s;
  std::string mangled = s.substr(open + 1, plus - open - 1);
  int status = 0;
  char *name = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !name)
    return s;
  std::string out = s.substr(0, open + 1) + name + s.substr(plus);
  std::free(name);
  return out;
}

/// The caller's stack on stderr, demangled, without the `skip` innermost
/// frames (the contract's own).
void printStack(int skip) {
  void *frames[48];
  int n = backtrace(frames, 48);
  if (char **lines = backtrace_symbols(frames, n)) {
    for (int i = skip; i < n; ++i)
      std::fprintf(stderr, "  %s\n", readableFrame(lines[i]).c_str());
  }
  std::fflush(stderr);
}

void onFault(int sig, siginfo_t *info, void *context) {
  Arena &a = arena();
  const char *addr = static_cast<const char *>(info->si_addr);
  if (!a.base || addr < a.base || addr >= a.base + kArenaBytes) {
    // Not ours: hand the fault to whoever had it before (the instruction
    // runs again and faults into that handler).
    sigaction(SIGSEGV, &a.previous, nullptr);
    (void)sig;
    (void)context;
    return;
  }
  char where[160];
  auto it = bufferOf(a, addr);
  if (it != a.live.end())
    std::snprintf(where, sizeof where,
                  "byte %zu of a %zu-byte loomrt_alloc buffer",
                  size_t(addr - it->first), it->second.first);
  else
    std::snprintf(where, sizeof where, "memory of no live loomrt_alloc buffer");
  std::fprintf(stderr,
               "loomrt: rank %d: device-contract violation: %s touched "
               "device memory at %p (%s); the last runtime call was %s. "
               "Call stack:\n",
               a.rank, a.depth ? a.current : "the host", (const void *)addr,
               where, a.depth ? a.current : a.last);
  printStack(1); // frame 0 is this handler
  _exit(70);
}

} // namespace

bool enabled() {
  static const bool on = [] {
    const char *v = std::getenv("LOOMRT_CHECK_DEVICE_CONTRACT");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

void *alloc(int64_t bytes) {
  Arena &a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  if (!a.base) {
    void *p = mmap(nullptr, kArenaBytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      fatal("loomrt_alloc", "cannot reserve the device-contract arena: %s",
            std::strerror(errno));
    a.base = static_cast<char *>(p);
  }
  size_t want = std::max<size_t>(1, size_t(bytes));
  size_t reserved = (want + kPage - 1) / kPage * kPage;
  char *p;
  if (auto it = a.released.find(reserved); it != a.released.end()) {
    p = it->second;
    a.released.erase(it);
  } else {
    if (a.top + reserved > kArenaBytes)
      fatal("loomrt_alloc", "device-contract arena exhausted (%zu bytes)",
            kArenaBytes);
    p = a.base + a.top;
    a.top += reserved;
  }
  // Inside an open call (ring attention's temporaries) the new pages must
  // be reachable at once; otherwise the next call opens them.
  if (a.depth && mprotect(p, reserved, PROT_READ | PROT_WRITE) != 0)
    fatal("loomrt_alloc", "mprotect failed: %s", std::strerror(errno));
  a.live[p] = {size_t(bytes), reserved};
  return p;
}

void release(void *ptr) {
  if (!ptr)
    return;
  Arena &a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  auto it = a.live.find(static_cast<char *>(ptr));
  if (it == a.live.end())
    fatal("loomrt_free",
          "%p is not a live loomrt_alloc buffer (host memory, an interior "
          "pointer or a double free)",
          ptr);
  size_t reserved = it->second.second;
  a.live.erase(it);
  // Give the memory back; the address range is reused by a request of the
  // same size, so a run's footprint stays that of its live buffers.
  madvise(ptr, reserved, MADV_DONTNEED);
  a.released.emplace(reserved, static_cast<char *>(ptr));
}

void installFaultHandler() {
  if (!enabled())
    return;
  Arena &a = arena();
  if (const char *r = std::getenv("OMPI_COMM_WORLD_RANK"))
    a.rank = std::atoi(r);
  void *warm[1];
  backtrace(warm, 1); // loads the unwinder now, not inside the handler
  struct sigaction sa = {};
  sa.sa_sigaction = onFault;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &a.previous);
}

namespace {
/// enter()'s and enterTable()'s check (under a.mutex); `prefix` goes
/// before each name ("tensors[3]." for a table's entry).
void checkTensors(const Arena &a, const char *function, const char *prefix,
                  const char *names,
                  std::initializer_list<const void *> tensors) {
  const char *name = names;
  for (const void *t : tensors) {
    size_t len = std::strcspn(name, ",");
    if (t && bufferOf(a, static_cast<const char *>(t)) == a.live.end()) {
      std::fprintf(stderr,
                   "loomrt: rank %d: device-contract violation in "
                   "%s; call stack:\n",
                   a.rank, function);
      printStack(3);
      fatal(function,
            "argument '%s%.*s' (%p) is not device memory: under the device "
            "contract tensors live in loomrt_alloc buffers and host data "
            "enters through loomrt_copy",
            prefix, int(len), name, t);
    }
    name += len;
    name += std::strspn(name, ", ");
  }
}
} // namespace

void enter(const char *function, const char *names,
           std::initializer_list<const void *> tensors) {
  Arena &a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  if (a.depth++ == 0) {
    a.current = function;
    protect(a, PROT_READ | PROT_WRITE);
  }
  checkTensors(a, function, "", names, tensors);
}

void enterTable(const char *function, const char *table, int64_t index,
                const char *names,
                std::initializer_list<const void *> tensors) {
  Arena &a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  char prefix[96];
  std::snprintf(prefix, sizeof prefix, "%s[%lld].", table, (long long)index);
  checkTensors(a, function, prefix, names, tensors);
}

void leave() {
  Arena &a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  if (--a.depth == 0) {
    protect(a, PROT_NONE);
    a.last = a.current;
    a.current = nullptr;
  }
}

} // namespace loomrt::contract
