//===- Passes.td - Lowering passes -------------------------*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// From tfm ops at local shapes to LLVM dialect code that calls the runtime:
//
//   tfm-inline-blocks -> tfm-expand-ring-attention -> tfm-params-to-args
//   -> tfm-comms-to-args -> tfm-lower-to-runtime
//   -> (upstream: buffer-results-to-out-params, buffer deallocation,
//       arith/memref/func to LLVM) -> tfm-emit-entry
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_LOWERING_PASSES_TD
#define LOOM_PASSES_LOWERING_PASSES_TD

include "mlir/Pass/PassBase.td"

def TfmInlineBlocks : Pass<"tfm-inline-blocks", "mlir::func::FuncOp"> {
  let summary = "inline every tfm.block into its parent";
  let description = [{
    Once the passes that need the model's structure (pipeline splitting,
    recomputation) have run, the blocks are only grouping. This pass moves
    each block's ops into the parent, replacing the region arguments with the
    block's inputs and the block's results with the yielded values.

    ```mlir
    %y = tfm.block layer 0 ins(%x : tensor<..>) -> tensor<..> {
    ^bb0(%a: tensor<..>):
      %r = tfm.silu %a : tensor<..>
      tfm.yield %r : tensor<..>
    }
    // becomes
    %y = tfm.silu %x : tensor<..>
    ```
  }];
  let dependentDialects = ["loom::tfm::TfmDialect"];
}

def TfmExpandRingAttention
    : Pass<"tfm-expand-ring-attention", "mlir::func::FuncOp"> {
  let summary = "write ring attention (context parallelism's p2p) step by step";
  let description = [{
    Rewrites every `tfm.attention ... ring "cp"` (each rank's pieces of the
    sequence in Megatron's load-balanced layout) into TransformerEngine's
    ring (AttnFuncWithCPAndKVP2P): the diagonal tile of the rank's own k and
    v, then cp - 1 steps that each pass k and v one rank on
    (`tfm.ring_shift`, offset 1) and merge the tile of the block received,
    lower or upper section, by log-sum-exp (`tfm.attention_section`).

    The backward (`tfm.attention_grad ... ring`) runs the ring the other
    way: starting from the block of rank r + 1 (the last block the forward
    received, when the forward is in the same function; else shifted once
    more), each step adds the tile's gradients to dq and to the block's dk
    and dv, then passes k, v, dk and dv on (offset -1), so that after cp - 1
    steps each block's gradient arrives at its owner with the diagonal tile
    last: cp - 1 hops of k and v and cp - 1 of dk and dv.

    ```mlir
    %o, %lse = tfm.attention %q, %k, %v heads 4 kv_heads 4 head_dim 16
        scale 0.25 mask causal ring "cp" : ...
    // becomes (cp 2)
    %o0, %l0 = tfm.attention_section %q, %k, %v kv_from 0 on @dense axis "cp" ...
    %k1, %v1 = tfm.ring_shift %k, %v on @dense axis "cp" offset 1 : ...
    %o, %lse = tfm.attention_section %q, %k1, %v1 merge(%o0, %l0 : ...)
        kv_from -1 on @dense axis "cp" ...
    ```

    Runs on per-rank IR after tfm-inline-blocks (so that a backward finds
    its forward) and before tfm-comms-to-args (the new ops need the ring's
    communicator).
  }];
  let dependentDialects = ["loom::tfm::TfmDialect"];
}

def TfmParamsToArgs : Pass<"tfm-params-to-args", "mlir::ModuleOp"> {
  let summary = "pass parameters into functions as arguments";
  let description = [{
    Every function that reads parameters with `tfm.get_param` gets one extra
    argument per parameter it reads, in the order of the module's `tfm.param`
    declarations, appended after its own arguments and marked with the
    argument attribute `tfm.param = "name"`. The reads are replaced by the
    arguments. The runtime owns parameter memory and passes it in, so the
    compiled code holds no global state. Nested `tfm.block` regions must be
    inlined first (their isolation forbids using function arguments).

    ```mlir
    func.func @forward(%t: tensor<2x8xi32>) -> ... {
      %w = tfm.get_param @wte : tensor<64x32xf32>
    // becomes
    func.func @forward(%t: tensor<2x8xi32>,
                       %w: tensor<64x32xf32> {tfm.param = "wte"}) -> ...
    ```
  }];
  let dependentDialects = ["loom::tfm::TfmDialect"];
}

def TfmCommsToArgs : Pass<"tfm-comms-to-args", "mlir::ModuleOp"> {
  let summary = "pass the communicators of mesh collectives into functions";
  let description = [{
    Every process group a function's `mesh` collectives run over, or that
    splits a value whose global position a tfm op's kernel reads (a
    vocab-parallel table's rows, dropout's global indices), becomes one
    extra argument, a pointer to the runtime's communicator handle
    (`loomrt_comm *`), marked `tfm.comm = "<group kind>"`. The group kind
    names the mesh axes in the plan's order, fastest first, e.g. `"tp"` or
    `"cp-dp"` (the axis names come from the mesh's `tfm.mesh_axes`); the
    driver creates that communicator from the manifest's groups.

    ```mlir
    mesh.mesh @dense(shape = 1x2x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %y = mesh.all_reduce %x on @dense mesh_axes = [3] : tensor<4xf32> -> tensor<4xf32>
    // becomes
    func.func @f(%x: tensor<4xf32>, %tp: !llvm.ptr {tfm.comm = "tp"}) -> ...
    ```
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect"];
}

def TfmLowerToRuntime : Pass<"tfm-lower-to-runtime", "mlir::ModuleOp"> {
  let summary = "lower tfm ops to calls of the Loom runtime on buffers";
  let description = [{
    Converts tensors to memrefs and every op with a
    RuntimeLoweringInterface (the tfm ops and the mesh collectives; their
    lowerings are external models in Runtime/, one file per concern) to
    `memref.alloc` of its results plus `func.call`s of runtime kernels
    (declared on first use from the typed call structs read from loomrt.h),
    with pointers taken by `memref.extract_aligned_pointer_as_index`. Input: no
    `tfm.block` and no `tfm.get_param` (run tfm-inline-blocks and
    tfm-params-to-args first); an op that cannot be lowered is reported as
    "failed to legalize". `mesh` collectives (all_reduce with sum or max,
    all_gather, reduce_scatter, all_to_all) become runtime collectives on
    the communicator argument tfm-comms-to-args added. Output: func, memref,
    arith and llvm ops only; the
    `tfm.param` declarations are dropped (the runtime owns parameters and
    the arguments still name them), and so are `mesh.mesh` declarations that
    no collective refers to any more.

    ```mlir
    %y = tfm.silu %x : tensor<2x8x64xf32>
    // becomes
    %y = memref.alloc() {alignment = 64 : i64} : memref<2x8x64xf32>
    func.call @loomrt_silu_forward(%f32, %c1024, %px, %py)
        : (i32, i64, !llvm.ptr, !llvm.ptr) -> ()
    ```
  }];
  let dependentDialects = ["mlir::func::FuncDialect", "mlir::memref::MemRefDialect",
                           "mlir::arith::ArithDialect", "mlir::LLVM::LLVMDialect"];
}

def TfmUniqueResults : Pass<"tfm-unique-results", "mlir::ModuleOp"> {
  let summary = "return each buffer of a private function once, and no "
                "argument";
  let description = [{
    After bufferization a function may return one buffer twice (CSE merges
    equal results) or return one of its arguments (a block that passes an
    input through). Neither has a buffer of its own to become an out-param
    (`buffer-results-to-out-params` with hoisting, which LLVM 19 crashes
    on). For private functions, whose callers are all in the module, the
    pass drops such results: each call uses the first equal result, or the
    argument it passed, instead.

    ```mlir
    func.func private @f(%a: memref<4xi32>) -> (memref<4xf32>, memref<4xf32>, memref<4xi32>)
    // returns %x, %x, %a  becomes  returns %x; calls use %r#0 twice and %a
    ```
  }];
}

def TfmFreeBuffers : Pass<"tfm-free-buffers", "mlir::func::FuncOp"> {
  let summary = "free every buffer a straight-line function allocates";
  let description = [{
    Input: single-block functions without regions (what tfm-lower-to-runtime
    and buffer-results-to-out-params produce). Each `memref.alloc` of the
    block gets a `memref.dealloc` before the return; tfm-plan-buffers then
    places it by its real live range. This is what upstream's
    ownership-based deallocation computes for such code, without its
    simplification pass, whose cost grows with the square of a block's
    buffers (a pipelined step of thousands of calls took minutes).
    An `scf.for` over straight-line code frees its body's buffers before
    its yield, except those the yield passes to the next trip. Other
    regions, nested loops or more than one block are an error.
  }];
}

def TfmPlanBuffers : Pass<"tfm-plan-buffers", "mlir::ModuleOp"> {
  let summary = "place each function's temporary buffers in one workspace at compile time";
  let description = [{
    Input: straight-line functions where every temporary is a static
    `memref.alloc` freed by one `memref.dealloc` in the same block (what
    the buffer deallocation passes produce). Each function gets a workspace
    as its new last argument, `memref<Nxi8>`, and `tfm.workspace = N`;
    each temporary becomes a `memref.view` at a fixed offset in it. Offsets
    come from the buffers' live ranges (from the alloc to the last op that
    uses the buffer or a pointer taken from it), placed largest first at the
    lowest offset that does not overlap a buffer live at the same time,
    64-byte aligned. Allocs without a matching dealloc in the block
    (results) are left alone; a function without temporaries gets no
    workspace.

    One `scf.for` per function: its body's buffers are placed together,
    live in the function from the loop to the last use of its results. A
    buffer the body yields to the next trip is live, on the body taken as
    a circle, from its alloc to the body's end and from the body's start
    to the last use of the iteration argument it becomes; so every trip
    writes it at the same offset, without a copy. One still read when its
    alloc runs again (a value that lives a whole trip) is an error: the
    body must be unrolled further.

    Callees are planned first: each call of one gets the callee's workspace
    as a temporary of the caller, allocated before the call and freed after
    it, which the caller then places with its own. An entry point's
    workspace is the caller's (the rank program's) to provide: allocated
    once and kept, a step allocates nothing.

    ```mlir
    func.func @f() {
      %a = memref.alloc() : memref<4x8xf32>   ... memref.dealloc %a
      %b = memref.alloc() : memref<16xf32>    ... memref.dealloc %b
    // becomes
    func.func @f(%ws: memref<128xi8>) attributes {tfm.workspace = 128 : i64} {
      %a = memref.view %ws[%c0][] : memref<128xi8> to memref<4x8xf32>
      %b = memref.view %ws[%c0][] : memref<128xi8> to memref<16xf32>  // a is dead
    ```
  }];
  let statistics = [
    Statistic<"numPlanned", "planned-buffers", "Buffers placed in workspaces">,
    Statistic<"arenaBytes", "workspace-bytes",
              "Size of the functions' workspaces in bytes">,
    Statistic<"unplannedBytes", "unplanned-bytes",
              "Bytes the buffers would take without reuse">
  ];
  let dependentDialects = ["mlir::memref::MemRefDialect", "mlir::arith::ArithDialect"];
}

def TfmEmitEntry : Pass<"tfm-emit-entry", "mlir::ModuleOp"> {
  let summary = "emit the packed C entry point of each compiled function";
  let description = [{
    Runs on the LLVM dialect, after functions were lowered with the bare
    pointer calling convention. For every `llvm.func` carrying
    `tfm.entry = "<symbol>"`, emits `void <symbol>(void **args)` that loads
    one pointer per argument from `args` and calls the function, so the
    runtime driver can call any entry through one C type. The `tfm.entry`
    and `tfm.param` attributes are removed (LLVM IR has no place for them).

    ```mlir
    llvm.func @forward(%a: !llvm.ptr, %b: !llvm.ptr) attributes {tfm.entry = "loom_forward"}
    // adds
    llvm.func @loom_forward(%args: !llvm.ptr) {
      // %a = load args[0], %b = load args[1]; call @forward(%a, %b)
    }
    ```
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect"];
}

#endif // LOOM_PASSES_LOWERING_PASSES_TD
