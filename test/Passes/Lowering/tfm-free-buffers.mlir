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

// Control flow is not straight-line code.
func.func @branches(%c: i1) {
  // expected-error @below {{tfm-free-buffers takes straight-line code, not ops with regions}}
  scf.if %c {
    %a = memref.alloc() : memref<4xf32>
  }
  return
}
