// RUN: loom-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(tfm-free-buffers))' -verify-diagnostics | FileCheck %s

// Every buffer of straight-line code is freed before the return.
func.func @step(%out: memref<4xf32>) {
  %a = memref.alloc() : memref<4xf32>
  %b = memref.alloc() : memref<8xf32>
  memref.copy %a, %out : memref<4xf32> to memref<4xf32>
  return
}
// CHECK-LABEL: func.func @step
// CHECK: %[[A:.*]] = memref.alloc() : memref<4xf32>
// CHECK: %[[B:.*]] = memref.alloc() : memref<8xf32>
// CHECK: memref.copy
// CHECK: memref.dealloc %[[A]]
// CHECK: memref.dealloc %[[B]]
// CHECK-NEXT: return

// -----

// A returned buffer cannot be freed: results must be out-params first.
func.func @returns() -> memref<4xf32> {
  // expected-error @below {{a returned buffer (run buffer-results-to-out-params first)}}
  %a = memref.alloc() : memref<4xf32>
  return %a : memref<4xf32>
}

// -----

// Control flow other than a loop of straight-line code is not taken.
func.func @branches(%c: i1) {
  // expected-error @below {{tfm-free-buffers takes straight-line code and loops of it, not this op's regions}}
  scf.if %c {
    %a = memref.alloc() : memref<4xf32>
  }
  return
}

// -----

// A loop's body frees its buffers before the yield, except the one it
// passes to the next trip (tfm-plan-buffers places those: a loop body's
// buffers all get fixed offsets).
func.func private @use(memref<4xf32>, memref<4xf32>)
func.func @loop(%init: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%keep = %init) -> (memref<4xf32>) {
    %t = memref.alloc() : memref<4xf32>
    %new = memref.alloc() : memref<4xf32>
    func.call @use(%keep, %t) : (memref<4xf32>, memref<4xf32>) -> ()
    func.call @use(%t, %new) : (memref<4xf32>, memref<4xf32>) -> ()
    scf.yield %new : memref<4xf32>
  }
  func.call @use(%r, %r) : (memref<4xf32>, memref<4xf32>) -> ()
  return
}
// CHECK-LABEL: func.func @loop
// CHECK: scf.for
// CHECK: %[[T:.*]] = memref.alloc() : memref<4xf32>
// CHECK: %[[N:.*]] = memref.alloc() : memref<4xf32>
// CHECK: memref.dealloc %[[T]]
// CHECK-NOT: memref.dealloc
// CHECK: scf.yield %[[N]]
