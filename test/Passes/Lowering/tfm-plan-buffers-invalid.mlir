// RUN: loom-opt %s --tfm-plan-buffers --allow-unregistered-dialect -verify-diagnostics

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
