// RUN: loom-opt %s --tfm-free-buffers --tfm-plan-buffers | FileCheck %s

// A pipelined step's steady phase as a loop, after lowering: each trip
// computes %new (kept for the next trip, which reads it through %keep) and
// a temporary %t; %init comes from before the loop and %last is read after
// it.
func.func private @make(memref<16xf32>)
func.func private @read(memref<16xf32>, memref<16xf32>)

// The body's buffers take a workspace of their own (128 bytes): %t is live
// from its alloc to the call, %new from its alloc to the end of the body
// and, on the next trip, from the start to the call that reads %keep, so
// the two cannot share (the call reads %keep and writes %t). %init, made
// before the loop for its first trip, takes %new's place: the first trip
// reads it where later trips read theirs. The loop carries the view:
// every trip writes the same offset, and the loop's result (read after
// the loop) is that view.
// CHECK-LABEL: func.func @steady
// CHECK-SAME: (%[[WS:.*]]: memref<128xi8>) attributes {tfm.workspace = 128 : i64}
// CHECK-NOT: memref.alloc
// CHECK: arith.constant 8 : index
// CHECK-NEXT: %[[OI:.*]] = arith.constant [[ON:[0-9]+]] : index
// CHECK-NEXT: %[[INIT:.*]] = memref.view %[[WS]][%[[OI]]][] : memref<128xi8> to memref<16xf32>
// CHECK: %[[LAST:.*]] = scf.for {{.*}} iter_args(%[[KEEP:.*]] = %[[INIT]])
// CHECK:   %[[O1:.*]] = arith.constant {{[0-9]+}} : index
// CHECK:   %[[T:.*]] = memref.view %[[WS]][%[[O1]]][]
// CHECK:   call @read(%[[KEEP]], %[[T]])
// CHECK:   %[[O2:.*]] = arith.constant [[ON]] : index
// CHECK:   %[[NEW:.*]] = memref.view %[[WS]][%[[O2]]][]
// CHECK:   call @make(%[[NEW]])
// CHECK:   scf.yield %[[NEW]]
// CHECK: call @read(%[[LAST]], %[[LAST]])
// CHECK-NOT: memref.dealloc
func.func @steady() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %init = memref.alloc() : memref<16xf32>
  func.call @make(%init) : (memref<16xf32>) -> ()
  %last = scf.for %i = %c0 to %c8 step %c1 iter_args(%keep = %init) -> (memref<16xf32>) {
    %t = memref.alloc() : memref<16xf32>
    func.call @read(%keep, %t) : (memref<16xf32>, memref<16xf32>) -> ()
    %new = memref.alloc() : memref<16xf32>
    func.call @make(%new) : (memref<16xf32>) -> ()
    scf.yield %new : memref<16xf32>
  }
  func.call @read(%last, %last) : (memref<16xf32>, memref<16xf32>) -> ()
  return
}
