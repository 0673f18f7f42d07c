// RUN: loom-opt %s -split-input-file --tfm-emit-entry -verify-diagnostics | FileCheck %s

// The packed entry loads one pointer per argument and calls the function;
// the Loom attributes are dropped.

// CHECK-LABEL: llvm.func @forward
// CHECK-SAME: (%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
// CHECK-NOT: tfm.
// CHECK-LABEL: llvm.func @loom_forward
// CHECK-SAME: (%[[ARGS:.*]]: !llvm.ptr)
// CHECK: %[[S0:.*]] = llvm.getelementptr %[[ARGS]][0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK: %[[A0:.*]] = llvm.load %[[S0]] : !llvm.ptr -> !llvm.ptr
// CHECK: %[[S1:.*]] = llvm.getelementptr %[[ARGS]][1]
// CHECK: %[[A1:.*]] = llvm.load %[[S1]]
// CHECK: llvm.call @forward(%[[A0]], %[[A1]]) : (!llvm.ptr, !llvm.ptr) -> ()
// CHECK: llvm.return
llvm.func @forward(%a: !llvm.ptr, %w: !llvm.ptr {tfm.param = "w"}) attributes {tfm.entry = "loom_forward"} {
  llvm.return
}

// Functions without tfm.entry get no wrapper.
// CHECK-NOT: llvm.func @loom_
llvm.func @helper(%a: !llvm.ptr) {
  llvm.return
}

// -----

// expected-error @+1 {{tfm.entry must be a non-empty string}}
llvm.func @f(%a: !llvm.ptr) attributes {tfm.entry = 1 : i32} {
  llvm.return
}

// -----

// expected-error @+1 {{entry @f returns a value; results must be out-params (run buffer-results-to-out-params)}}
llvm.func @f(%a: !llvm.ptr) -> i32 attributes {tfm.entry = "loom_f"} {
  %c = llvm.mlir.constant(0 : i32) : i32
  llvm.return %c : i32
}

// -----

// expected-error @+1 {{entry @f argument 1 has type 'i64'; entries take buffers only (bare pointers)}}
llvm.func @f(%a: !llvm.ptr, %n: i64) attributes {tfm.entry = "loom_f"} {
  llvm.return
}
