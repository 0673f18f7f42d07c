// RUN: loom-opt %s --verify-roundtrip | FileCheck %s
// RUN: loom-opt %s --mlir-print-op-generic | loom-opt | FileCheck %s

// A parameter read as this rank's tensor-parallel shard.
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  tfm.param @w init(ones) : tensor<4x8xf32>
  // CHECK-LABEL: func.func @shards
  func.func @shards() -> (tensor<2x8xf32>, tensor<4x4xf32>) {
    // CHECK: tfm.get_param @w tp_split 0 : tensor<2x8xf32>
    %a = tfm.get_param @w tp_split 0 : tensor<2x8xf32>
    // CHECK: tfm.get_param @w tp_split 1 : tensor<4x4xf32>
    %b = tfm.get_param @w tp_split 1 : tensor<4x4xf32>
    return %a, %b : tensor<2x8xf32>, tensor<4x4xf32>
  }
}
