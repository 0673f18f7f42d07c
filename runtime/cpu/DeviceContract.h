//===- DeviceContract.h - The cpu backend's device-memory check -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The cuda backend's memory is out of the host's reach: a program that
// dereferences a `loomrt_alloc` pointer on the host, or hands a host buffer
// to a kernel or a collective, crashes on a GPU and works on the cpu
// backend. With LOOMRT_CHECK_DEVICE_CONTRACT=1 in the environment (what
// `loom-run --check-device-contract` sets), the cpu backend enforces the
// contract instead of forgiving it:
//
//  - `loomrt_alloc` hands out pages of one reserved arena that are
//    inaccessible (PROT_NONE) while the host runs; every ABI function opens
//    the arena (one mprotect) for its duration and closes it on return, so
//    the backend computes on the same addresses the host holds.
//  - A host access to the arena faults; the handler names the address's
//    buffer, the last runtime call and the call stack (the driver step or
//    the compiled function: rank executables export their symbols), and
//    ends the rank.
//  - Every tensor argument of an ABI function must be arena memory (or
//    NULL where optional); a host buffer is an error naming the function and
//    the argument. `loomrt_copy` is the one door (any direction); shape and
//    order arrays and the scalar outputs the ABI allows on the host are
//    host metadata, not tensors.
//
// Nothing changes numerically: the kernels run the same code on the same
// data, so a checked run equals a plain one bitwise.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_DEVICECONTRACT_H
#define LOOM_RUNTIME_CPU_DEVICECONTRACT_H

#include <cstdint>
#include <initializer_list>

namespace loomrt::contract {

/// Whether the check is on (read once, from LOOMRT_CHECK_DEVICE_CONTRACT).
bool enabled();

/// Arena allocation and release (only when enabled()).
void *alloc(int64_t bytes);
void release(void *ptr);

/// Installs the fault handler (loomrt_init, after MPI's own handlers).
void installFaultHandler();

/// Opens the arena to the backend for one ABI call and checks that the
/// listed tensor arguments (named by `names`, comma-separated) are arena
/// memory or NULL; leave() closes it. Nested calls (ring attention sections
/// call kernels) keep it open until the outermost returns. Only when
/// enabled().
void enter(const char *function, const char *names,
           std::initializer_list<const void *> tensors);
void leave();

/// Inside an open call: checks the tensors that entry `index` of the host
/// table `table` lists (loomrt_adamw_multi's), as enter() checks tensor
/// arguments; the message calls them "table[index].name". The table itself
/// is host memory, never listed: the entry point's rule reads it before the
/// arena opens, so a table in the arena faults there. Only when enabled().
void enterTable(const char *function, const char *table, int64_t index,
                const char *names, std::initializer_list<const void *> tensors);

/// enter() and leave() around a scope, when the check is on.
class Scope {
public:
  Scope(const char *function, const char *names,
        std::initializer_list<const void *> tensors)
      : entered(enabled()) {
    if (entered)
      enter(function, names, tensors);
  }
  ~Scope() {
    if (entered)
      leave();
  }
  Scope(const Scope &) = delete;
  Scope &operator=(const Scope &) = delete;

private:
  bool entered;
};

} // namespace loomrt::contract

/// First statement of every entry point the cpu backend implements
/// (loomrt::backend::loomrt_*, so __func__ is the entry point's name): the
/// function's device-memory (tensor) arguments, or nothing. The
/// communication entry points (runtime/common/Comm.cpp) get the same
/// through transport::CallScope (cpu/Comm.cpp).
#define LOOMRT_DEVICE_CALL(...)                                                \
  ::loomrt::contract::Scope loomrtContractScope(__func__, #__VA_ARGS__,        \
                                                {__VA_ARGS__})

#endif // LOOM_RUNTIME_CPU_DEVICECONTRACT_H
