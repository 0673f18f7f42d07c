// RUN: loom-opt %s --tfm-plan-buffers --split-input-file | FileCheck %s

func.func private @use(memref<4x8xf32>)
func.func private @use2(memref<16xf32>, memref<4x8xf32>)
func.func private @use_i32(memref<3xi32>)

// %a (128 B) and %b (64 B) are live together; %c (128 B) starts after %a
// died and reuses its place, and so does %d once %c and %b are dead. Sizes
// round up to 64 bytes. The workspace is the function's new last argument;
// nothing is allocated or freed.
// CHECK-LABEL: func.func @reuse
// CHECK-SAME: (%[[WS:.*]]: memref<192xi8>) attributes {tfm.workspace = 192 : i64}
// CHECK-NOT: memref.alloc
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[A:.*]] = memref.view %[[WS]][%[[C0]]][] : memref<192xi8> to memref<4x8xf32>
// CHECK: %[[C128:.*]] = arith.constant 128 : index
// CHECK: %[[B:.*]] = memref.view %[[WS]][%[[C128]]][] : memref<192xi8> to memref<16xf32>
// CHECK: call @use2(%[[B]], %[[A]])
// CHECK: %[[Z1:.*]] = arith.constant 0 : index
// CHECK: %[[C:.*]] = memref.view %[[WS]][%[[Z1]]][] : memref<192xi8> to memref<4x8xf32>
// CHECK: call @use(%[[C]])
// CHECK: %[[Z2:.*]] = arith.constant 0 : index
// CHECK: %[[D:.*]] = memref.view %[[WS]][%[[Z2]]][] : memref<192xi8> to memref<3xi32>
// CHECK-NOT: memref.dealloc
// CHECK: return
func.func @reuse() {
  %a = memref.alloc() : memref<4x8xf32>
  %b = memref.alloc() : memref<16xf32>
  func.call @use2(%b, %a) : (memref<16xf32>, memref<4x8xf32>) -> ()
  memref.dealloc %a : memref<4x8xf32>
  %c = memref.alloc() : memref<4x8xf32>
  func.call @use(%c) : (memref<4x8xf32>) -> ()
  memref.dealloc %c : memref<4x8xf32>
  memref.dealloc %b : memref<16xf32>
  %d = memref.alloc() : memref<3xi32>
  func.call @use_i32(%d) : (memref<3xi32>) -> ()
  memref.dealloc %d : memref<3xi32>
  return
}

// A buffer that is returned (no dealloc) stays a plain allocation, and a
// function with nothing to place gets no workspace.
// CHECK-LABEL: func.func @escaping() -> memref<16xf32> {
// CHECK: %[[R:.*]] = memref.alloc() : memref<16xf32>
// CHECK-NOT: memref.view
// CHECK: return %[[R]]
func.func @escaping() -> memref<16xf32> {
  %r = memref.alloc() : memref<16xf32>
  return %r : memref<16xf32>
}

// Deallocation passes free at the end of the block; a buffer is dead after
// its last use, including uses of pointers taken from it, so %b reuses %a's
// place although %a's dealloc comes last.
// CHECK-LABEL: func.func @dealloc_at_end
// CHECK-SAME: memref<128xi8>
// CHECK: memref.view %{{.*}}[%{{.*}}][] : memref<128xi8> to memref<4x8xf32>
// CHECK: memref.view %{{.*}}[%{{.*}}][] : memref<128xi8> to memref<4x8xf32>
func.func @dealloc_at_end() {
  %a = memref.alloc() : memref<4x8xf32>
  %pa = memref.extract_aligned_pointer_as_index %a : memref<4x8xf32> -> index
  %ia = arith.index_cast %pa : index to i64
  %ptr = llvm.inttoptr %ia : i64 to !llvm.ptr
  func.call @use_ptr(%ptr) : (!llvm.ptr) -> ()
  %b = memref.alloc() : memref<4x8xf32>
  func.call @use(%b) : (memref<4x8xf32>) -> ()
  memref.dealloc %b : memref<4x8xf32>
  memref.dealloc %a : memref<4x8xf32>
  return
}

// A buffer whose pointer feeds a later call stays live until that call.
// CHECK-LABEL: func.func @pointer_use
// CHECK-SAME: memref<256xi8>
func.func @pointer_use() {
  %a = memref.alloc() : memref<4x8xf32>
  %pa = memref.extract_aligned_pointer_as_index %a : memref<4x8xf32> -> index
  %ia = arith.index_cast %pa : index to i64
  %ptr = llvm.inttoptr %ia : i64 to !llvm.ptr
  %b = memref.alloc() : memref<4x8xf32>
  func.call @use(%b) : (memref<4x8xf32>) -> ()
  func.call @use_ptr(%ptr) : (!llvm.ptr) -> ()
  memref.dealloc %b : memref<4x8xf32>
  memref.dealloc %a : memref<4x8xf32>
  return
}
func.func private @use_ptr(!llvm.ptr)

// -----

// A callee is planned first (whatever the order of the functions); each
// call gets the callee's workspace as a temporary of the caller, which the
// caller places with its own: here at offset 128, beside %a, which is live
// across the calls. The two calls reuse one place.
func.func private @use(memref<4x8xf32>)

// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[WS:.*]]: memref<256xi8>) attributes {tfm.workspace = 256 : i64}
// CHECK: %[[A:.*]] = memref.view %[[WS]][%{{.*}}][] : memref<256xi8> to memref<4x8xf32>
// CHECK: %[[C128:.*]] = arith.constant 128 : index
// CHECK: %[[L1:.*]] = memref.view %[[WS]][%[[C128]]][] : memref<256xi8> to memref<128xi8>
// CHECK: call @layer(%[[A]], %[[L1]]) : (memref<4x8xf32>, memref<128xi8>) -> ()
// CHECK: %[[L2:.*]] = memref.view %[[WS]][%{{.*}}][] : memref<256xi8> to memref<128xi8>
// CHECK: call @layer(%[[A]], %[[L2]])
// CHECK-NOT: memref.alloc
// CHECK-NOT: memref.dealloc
func.func @step() {
  %a = memref.alloc() : memref<4x8xf32>
  func.call @layer(%a) : (memref<4x8xf32>) -> ()
  func.call @layer(%a) : (memref<4x8xf32>) -> ()
  memref.dealloc %a : memref<4x8xf32>
  return
}

// CHECK-LABEL: func.func private @layer
// CHECK-SAME: (%{{.*}}: memref<4x8xf32>, %[[WS:.*]]: memref<128xi8>) attributes {tfm.workspace = 128 : i64}
// CHECK: memref.view %[[WS]]
func.func private @layer(%x: memref<4x8xf32>) {
  %t = memref.alloc() : memref<4x8xf32>
  func.call @use(%t) : (memref<4x8xf32>) -> ()
  memref.dealloc %t : memref<4x8xf32>
  return
}

