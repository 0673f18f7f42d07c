#!/usr/bin/env python3
#===- loomrt_abi.py - The runtime ABI, read from loomrt.h -------*- python -*-===#
#
# Part of the Loom project.
#
#===------------------------------------------------------------------------===#
#
# runtime/include/loomrt/loomrt.h is the one description of every runtime
# entry point: its name, its named and typed arguments and its meaning (the
# comment above it). This script reads the declarations back from the header
# and writes what other code needs of them, so nothing restates a signature:
#
#   calls     RuntimeCalls.h.inc for the compiler: one struct per entry point
#             with a typed field per argument, filled with designated
#             initializers (passes/Lowering/Runtime/Calls.h), so a call with
#             swapped, missing or mistyped arguments does not compile.
#   call-list LOOMRT_CALL(struct, function) for each of them.
#   list      one line per entry point: name, result and argument kinds.
#   backend   Backend.h.inc for the runtime: the C++ functions each backend
#             implements (namespace loomrt::backend), one per entry point
#             the ABI front forwards to a backend.
#   common    Common.h.inc: the same for the entry points runtime/common
#             implements for every backend (namespace loomrt::common; the
#             COMMON list below).
#   args      Args.h.inc: one struct per entry point holding its arguments
#             (namespace loomrt::args), what an entry point's own rule takes
#             (runtime/common/Rules.h).
#   front     Front.inc for the runtime: the extern "C" definition of every
#             entry point (runtime/common/Front.cpp): the profiler's scope
#             (runtime/common/Profile.h; not for the UNTIMED list), the
#             argument checks the types imply, the entry point's own rule
#             where it has one, then the backend's (or common code's)
#             implementation.
#
#   loomrt_abi.py {calls,call-list,backend,common,args,front,list} loomrt.h OUTPUT
#
# The implementations keep the entry point's name (loomrt::backend::
# loomrt_gemm): __func__ inside them is the name every error message and
# the cpu backend's device-contract check report.
#
# The header is plain C in a small, regular shape (one declaration per entry
# point, `type name` parameters); anything else this script cannot read is an
# error naming the line, never a silently skipped function.
#
#===------------------------------------------------------------------------===#

import re
import sys

# C type -> (kind the compiler passes it as, the C++ type the runtime takes).
# Kinds: I32, I64, U64, F32, F64, PTR (any pointer), VOID.
SCALARS = {
    "void": "VOID",
    "int": "I32",
    "int32_t": "I32",
    "loomrt_dtype": "I32",
    "int64_t": "I64",
    "uint64_t": "U64",
    "float": "F32",
    "double": "F64",
    # Opaque handles and callbacks are pointers.
    "loomrt_comm": "PTR",
    "loomrt_request": "PTR",
    "loomrt_grads_ready_fn": "PTR",
}


class AbiError(Exception):
    pass


class Param:
    def __init__(self, ctype, name):
        self.ctype = ctype  # as written, e.g. "const int32_t *"
        self.name = name

    @property
    def kind(self):
        return kind_of(self.ctype)


class Entry:
    def __init__(self, result, name, params, line):
        self.result = result
        self.name = name
        self.params = params
        self.line = line

    @property
    def short(self):
        """loomrt_linear_forward -> linear_forward"""
        return self.name[len("loomrt_"):]

    @property
    def struct(self):
        """loomrt_linear_forward -> LinearForward; loomrt_copy_2d -> Copy2d"""
        return "".join(p[:1].upper() + p[1:] for p in self.short.split("_"))


def kind_of(ctype):
    t = ctype.strip()
    if "*" in t:
        return "PTR"
    t = t.replace("const ", "").strip()
    if t not in SCALARS:
        raise AbiError("unknown C type '%s'" % ctype)
    return SCALARS[t]


def strip_comments(text):
    # Replace comments by spaces but keep newlines, so line numbers hold.
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))

    text = re.sub(r"/\*.*?\*/", blank, text, flags=re.S)
    return re.sub(r"//[^\n]*", blank, text)


DECL = re.compile(
    r"^([A-Za-z_][A-Za-z_0-9 ]*?[\s*]+)(loomrt_[a-z0-9_]+)\s*\(([^;{]*)\)\s*;",
    re.M)


def parse(path):
    text = strip_comments(open(path).read())
    entries = []
    for m in DECL.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        result = " ".join(m.group(1).split())
        name = m.group(2)
        raw = " ".join(m.group(3).split())
        params = []
        if raw != "void":
            for i, p in enumerate(raw.split(",")):
                p = p.strip()
                pm = re.match(r"^(.*?[\s*])([A-Za-z_][A-Za-z_0-9]*)$", p)
                if not pm:
                    raise AbiError("%s:%d: %s: cannot read parameter %d '%s'"
                                   % (path, line, name, i + 1, p))
                params.append(Param(" ".join(pm.group(1).split()),
                                    pm.group(2)))
        e = Entry(result, name, params, line)
        try:
            kind_of(e.result)
            for p in e.params:
                p.kind
        except AbiError as err:
            raise AbiError("%s:%d: %s: %s" % (path, line, name, err))
        entries.append(e)
    # Every loomrt_ function the header mentions in code must have been read:
    # a declaration in an unexpected shape would otherwise be dropped.
    declared = {e.name for e in entries}
    for m in re.finditer(r"\b(loomrt_[a-z0-9_]+)\s*\(", text):
        if m.group(1) not in declared:
            line = text.count("\n", 0, m.start()) + 1
            raise AbiError("%s:%d: %s is declared in a shape loomrt_abi.py "
                           "cannot read" % (path, line, m.group(1)))
    if len(declared) != len(entries):
        raise AbiError("%s: an entry point is declared twice" % path)
    return entries


HEADER = """\
// Generated by runtime/abi/loomrt_abi.py from runtime/include/loomrt/loomrt.h.
// Do not edit: change the declaration in loomrt.h.
"""

KIND_TYPE = {"I32": "I32", "I64": "I64", "U64": "U64", "F32": "F32",
             "F64": "F64", "PTR": "Ptr"}


def emit_calls(entries):
    """One struct per entry point for the compiler (passes/Lowering/Runtime/
    Calls.h defines the field types and Kind)."""
    out = [HEADER]
    for e in entries:
        out.append("/// %s (loomrt.h:%d)" % (e.name, e.line))
        out.append("struct %s {" % e.struct)
        out.append('  static constexpr const char *kName = "%s";' % e.name)
        out.append("  static constexpr Kind kResult = Kind::%s;" %
                   kind_of(e.result))
        kinds = ", ".join("Kind::%s" % p.kind for p in e.params)
        out.append("  static constexpr std::array<Kind, %d> kArgs = {%s};" %
                   (len(e.params), kinds))
        for p in e.params:
            out.append("  %s %s; // %s" % (KIND_TYPE[p.kind], p.name,
                                           p.ctype))
        names = ", ".join("%s.value" % p.name for p in e.params)
        out.append("  llvm::SmallVector<mlir::Value, %d> operands() const {"
                   % max(1, len(e.params)))
        out.append("    return {%s};" % names)
        out.append("  }")
        out.append("};")
        out.append("")
    return "\n".join(out)


def emit_call_list(entries):
    """LOOMRT_CALL(struct, function) for every entry point, for code that
    walks them all (the test that the structs match the header)."""
    out = [HEADER, "#ifndef LOOMRT_CALL",
           "#error \"define LOOMRT_CALL(struct, function) first\"", "#endif"]
    out += ["LOOMRT_CALL(%s, %s)" % (e.struct, e.name) for e in entries]
    out += ["#undef LOOMRT_CALL", ""]
    return "\n".join(out)


def emit_list(entries):
    """One line per entry point: name, result kind, argument kinds."""
    return "".join("%s %s %s\n" % (e.name, kind_of(e.result),
                                   " ".join(p.kind for p in e.params))
                   for e in entries)


#===------------------------------------------------------------------------===#
# The runtime's ABI front
#===------------------------------------------------------------------------===#

# The entry points runtime/common implements, the same for every backend:
# built from other entry points, or bookkeeping above a backend's transport
# (runtime/common/Transport.h). Every other entry point is a backend's.
COMMON = {
    # Basics.cpp
    "loomrt_dtype_size", "loomrt_abort",
    # Comm.cpp: the communicator registry, collectives' and p2p batches'
    # checks and bookkeeping; the backend moves the data.
    "loomrt_init", "loomrt_finalize", "loomrt_world_rank",
    "loomrt_world_size", "loomrt_comm_world", "loomrt_comm_create",
    "loomrt_comm_destroy", "loomrt_comm_rank", "loomrt_comm_size",
    "loomrt_comm_world_rank_of", "loomrt_all_reduce", "loomrt_broadcast",
    "loomrt_all_gather", "loomrt_reduce_scatter", "loomrt_all_to_all",
    "loomrt_p2p_begin", "loomrt_send", "loomrt_recv", "loomrt_p2p_end",
    "loomrt_all_reduce_start", "loomrt_reduce_scatter_start", "loomrt_wait",
    "loomrt_barrier", "loomrt_set_timeout",
    # AttentionSections.cpp, AttentionChunks.cpp: written in other loomrt_*
    # calls.
    "loomrt_attention_section_forward", "loomrt_attention_section_backward",
    "loomrt_attention_chunked_forward", "loomrt_attention_chunked_backward",
    # MoeDispatch.cpp: expert parallelism's exchanges, in p2p calls (or an
    # all-gather and a reduce-scatter).
    "loomrt_moe_dispatch", "loomrt_moe_combine",
    "loomrt_moe_dispatch_allgather", "loomrt_moe_combine_allgather",
    # RopePair.cpp: q's and k's rotations, one backend rotation each.
    "loomrt_rope_pair_forward", "loomrt_rope_pair_backward",
    # FusedLinears.cpp: linears of one input, and linears with a GELU or a
    # SwiGLU, from the backend's linear and activation calls.
    "loomrt_multi_linear_forward", "loomrt_multi_linear_backward_data",
    "loomrt_multi_linear_backward_weight", "loomrt_linear_gelu_forward",
    "loomrt_linear_backward_data_gelu", "loomrt_linear_swiglu_forward",
    "loomrt_linear_backward_data_swiglu",
    # Trace.cpp
    "loomrt_set_trace", "loomrt_pipeline_step", "loomrt_pipeline_tokens",
    "loomrt_pipeline_loss", "loomrt_set_grads_ready_hook", "loomrt_grads_ready",
    # Profile.cpp
    "loomrt_profile_begin_step", "loomrt_profile_end_step",
    # Metrics.cpp
    "loomrt_metrics",
}

# Entry points the profiler does not time: its own, and queries that only
# read host state (on the cuda backend timing one would cost two events
# for nothing the device does).
UNTIMED = {
    "loomrt_profile_begin_step", "loomrt_profile_end_step", "loomrt_metrics",
    "loomrt_dtype_size", "loomrt_world_rank", "loomrt_world_size",
    "loomrt_get_num_threads", "loomrt_wtime", "loomrt_comm_world",
    "loomrt_comm_rank", "loomrt_comm_size", "loomrt_comm_world_rank_of",
}

# The check a parameter's type implies, by C type: the front runs it for
# every such parameter, in parameter order, before the entry point's rule.
TYPE_CHECKS = {
    # "unknown dtype %d"
    "loomrt_dtype": "::loomrt::checkedDtypeSize",
    # loomrt_init called, not NULL, alive (runtime/common/Comm.h)
    "loomrt_comm": "::loomrt::checkedComm",
}

# Parameters whose type's check does not apply, and why.
UNCHECKED = {
    ("loomrt_comm_destroy", "comm"):
        "NULL (a rank in no group) is a no-op; Comm.cpp checks the rest",
}


def cpp_decl(ctype, name):
    """'const void *', 'x' -> 'const void *x'; 'int64_t', 'n' -> 'int64_t n'"""
    return ctype + name if ctype.endswith("*") else ctype + " " + name


def signature(e):
    return cpp_decl(e.result, e.name) + "(%s)" % ", ".join(
        cpp_decl(p.ctype, p.name) for p in e.params)


def check_lists(entries):
    names = {e.name for e in entries}
    params = {(e.name, p.name) for e in entries for p in e.params}
    for n in sorted(COMMON - names):
        raise AbiError("COMMON lists %s, which loomrt.h does not declare" % n)
    for n in sorted(UNTIMED - names):
        raise AbiError("UNTIMED lists %s, which loomrt.h does not declare" % n)
    for key in sorted(set(UNCHECKED) - params):
        raise AbiError("UNCHECKED lists %s(%s), which loomrt.h does not "
                       "declare" % key)


def emit_impl(entries, namespace, common, what):
    guard = "LOOMRT_ABI_%s_H_INC" % namespace.upper()
    out = [HEADER, "// %s" % what, "#ifndef " + guard, "#define " + guard, "",
           '#include "loomrt/loomrt.h"', "", "#include <cstdint>", "",
           "namespace loomrt::%s {" % namespace, ""]
    for e in entries:
        if (e.name in COMMON) != common:
            continue
        out.append("/// %s (loomrt.h:%d)" % (e.name, e.line))
        out.append(signature(e) + ";")
    out += ["", "} // namespace loomrt::%s" % namespace, "",
            "#endif // " + guard, ""]
    return "\n".join(out)


def emit_backend(entries):
    """The functions each backend defines, one per entry point it owns."""
    return emit_impl(entries, "backend", False,
                     "The entry points each backend implements "
                     "(runtime/common/Backend.h).")


def emit_common(entries):
    """The functions runtime/common defines for every backend."""
    return emit_impl(entries, "common", True,
                     "The entry points runtime/common implements for every "
                     "backend.")


def emit_args(entries):
    """One struct per entry point: its arguments, for its rule."""
    guard = "LOOMRT_ABI_ARGS_H_INC"
    out = [HEADER, "// The arguments of each entry point, named as in loomrt.h "
           "(runtime/common/Rules.h).", "#ifndef " + guard, "#define " + guard,
           "", '#include "loomrt/loomrt.h"', "", "#include <cstdint>", "",
           "namespace loomrt::args {", ""]
    for e in entries:
        out.append("/// %s (loomrt.h:%d)" % (e.name, e.line))
        out.append("struct %s {" % e.struct)
        out.append('  static constexpr const char *kName = "%s";' % e.name)
        for p in e.params:
            out.append("  %s;" % cpp_decl(p.ctype, p.name))
        out.append("};")
        out.append("")
    out += ["} // namespace loomrt::args", "", "#endif // " + guard, ""]
    return "\n".join(out)


def emit_front(entries):
    """The extern "C" definition of every entry point."""
    out = [HEADER, "// The ABI front: included by runtime/common/Front.cpp.", "",
           "// The profiler's names of the entry points, by index.",
           "const char *const ::loomrt::profile::kEntryNames[] = {"]
    out += ['    "%s",' % e.name for e in entries]
    out += ["};", "const int32_t ::loomrt::profile::kNumEntries = %d;"
            % len(entries), ""]
    for index, e in enumerate(entries):
        args = ", ".join(p.name for p in e.params)
        out.append("// loomrt.h:%d" % e.line)
        out.append('extern "C" %s {' % signature(e))
        if e.name not in UNTIMED:
            out.append("  ::loomrt::profile::Scope profile(%d);" % index)
        for p in e.params:
            check = TYPE_CHECKS.get(p.ctype)
            if check and (e.name, p.name) not in UNCHECKED:
                out.append('  %s("%s", %s);' % (check, e.name, p.name))
        out.append("  ::loomrt::rules::check(::loomrt::args::%s{%s});"
                   % (e.struct, args))
        impl = "common" if e.name in COMMON else "backend"
        out.append("  return ::loomrt::%s::%s(%s);" % (impl, e.name, args))
        out.append("}")
        out.append("")
    return "\n".join(out)


RUNTIME_EMITTERS = {"backend": emit_backend, "common": emit_common,
                    "args": emit_args, "front": emit_front}
EMITTERS = {"calls": emit_calls, "call-list": emit_call_list,
            "list": emit_list, **RUNTIME_EMITTERS}


def main(argv):
    if len(argv) != 4 or argv[1] not in EMITTERS:
        sys.stderr.write("usage: loomrt_abi.py {%s} loomrt.h OUTPUT\n"
                         % ",".join(sorted(EMITTERS)))
        return 2
    try:
        entries = parse(argv[2])
        if argv[1] in RUNTIME_EMITTERS:
            check_lists(entries)
    except (AbiError, OSError) as err:
        sys.stderr.write("loomrt_abi.py: %s\n" % err)
        return 1
    text = EMITTERS[argv[1]](entries)
    # Rewrite only on change, so dependents do not rebuild for nothing.
    try:
        if open(argv[3]).read() == text:
            return 0
    except OSError:
        pass
    with open(argv[3], "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
