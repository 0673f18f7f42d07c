// RUN: loom-opt %s --tfm-unique-results | FileCheck %s

// A private function returning one buffer twice and an argument returns
// the buffer once; its caller uses that result twice and its own operand.
func.func private @block(%a: memref<4xi32>) -> (memref<4xf32>, memref<4xf32>, memref<4xi32>) {
  %x = memref.alloc() : memref<4xf32>
  return %x, %x, %a : memref<4xf32>, memref<4xf32>, memref<4xi32>
}
// CHECK-LABEL: func.func private @block(%{{.*}}: memref<4xi32>) -> memref<4xf32>
// CHECK: return %{{.*}} : memref<4xf32>

func.func @step(%t: memref<4xi32>) -> (memref<4xf32>, memref<4xf32>, memref<4xi32>) {
  %r:3 = call @block(%t) : (memref<4xi32>) -> (memref<4xf32>, memref<4xf32>, memref<4xi32>)
  return %r#0, %r#1, %r#2 : memref<4xf32>, memref<4xf32>, memref<4xi32>
}
// CHECK-LABEL: func.func @step(
// CHECK-SAME: %[[T:.*]]: memref<4xi32>)
// CHECK: %[[R:.*]] = call @block(%[[T]]) : (memref<4xi32>) -> memref<4xf32>
// CHECK: return %[[R]], %[[R]], %[[T]]

// Public functions (entries) are left alone.
func.func @entry(%a: memref<4xi32>) -> memref<4xi32> {
  return %a : memref<4xi32>
}
// CHECK-LABEL: func.func @entry(%{{.*}}: memref<4xi32>) -> memref<4xi32>
