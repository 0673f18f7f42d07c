// RUN: loom-opt %s --tfm-plan-buffers --allow-unregistered-dialect --split-input-file -verify-diagnostics

// The input is straight-line code (what tfm-free-buffers accepts); a
// function of more blocks is an error, not skipped.
func.func private @use(memref<4x8xf32>)

// expected-error@+1 {{tfm-plan-buffers plans straight-line functions; @branchy has 2 blocks}}
func.func @branchy() {
  %a = memref.alloc() : memref<4x8xf32>
  "test.br"()[^bb1] : () -> ()
^bb1:
  func.call @use(%a) : (memref<4x8xf32>) -> ()
  memref.dealloc %a : memref<4x8xf32>
  return
}

// -----

// A value that lives a whole trip: the next trip allocates it again while
// it is still read, so no one offset can hold it.
func.func private @make(memref<16xf32>)
func.func private @read(memref<16xf32>, memref<16xf32>)

func.func @whole_trip(%init: memref<16xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %last = scf.for %i = %c0 to %c8 step %c1 iter_args(%keep = %init) -> (memref<16xf32>) {
    // expected-error@+1 {{a loop-carried buffer is still read when the next trip writes it again (unroll the loop body further)}}
    %new = memref.alloc() : memref<16xf32>
    func.call @read(%keep, %new) : (memref<16xf32>, memref<16xf32>) -> ()
    scf.yield %new : memref<16xf32>
  }
  return
}
