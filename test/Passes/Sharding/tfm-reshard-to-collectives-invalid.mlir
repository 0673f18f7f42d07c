// RUN: loom-opt %s -split-input-file --tfm-reshard-to-collectives -verify-diagnostics

// Test: no collective makes a value partial
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<4xf32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{cannot reshard replicated to a partial sum over tp: a value cannot be made partial}}
    %y = tfm.reshard %x : tensor<4xf32, #tfm.dist<@dense>> -> tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>
    return
  }
}

// -----

// Test: collectives move per-rank tensors
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>) {
    // expected-error @+1 {{collectives move per-rank tensors: run tfm-localize first}}
    %y = tfm.reshard %x : tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<4xf32, #tfm.dist<@dense>>
    return
  }
}
