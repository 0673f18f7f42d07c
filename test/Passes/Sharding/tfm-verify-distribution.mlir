// RUN: loom-opt %s --tfm-verify-distribution | FileCheck %s

// A consistent sharded program passes the verifier unchanged: a
// column-parallel linear, a row-parallel one, its partial sum all-reduced.

// CHECK-LABEL: func.func @consistent
// CHECK: mesh.all_reduce
module attributes {tfm.plan = #tfm.plan<tp = 2>, tfm.local_shapes} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @up init(ones) : tensor<16x8xf32>
  tfm.param @down init(ones) : tensor<8x16xf32>
  func.func @consistent(%x: tensor<1x4x8xf32, #tfm.dist<@dense>>) -> tensor<1x4x8xf32, #tfm.dist<@dense>> {
    %wu = tfm.get_param @up : tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>
    %u = tfm.linear %x, %wu : tensor<1x4x8xf32, #tfm.dist<@dense>>, tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>> -> tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>
    %g = tfm.gelu %u tanh : tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>
    %wd = tfm.get_param @down : tensor<8x8xf32, #tfm.dist<@dense, [[], [tp]]>>
    %d = tfm.linear %g, %wd : tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<8x8xf32, #tfm.dist<@dense, [[], [tp]]>> -> tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>>
    %r = mesh.all_reduce %d on @dense mesh_axes = [3] : tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<1x4x8xf32, #tfm.dist<@dense>>
    %y = tfm.add %x, %r : tensor<1x4x8xf32, #tfm.dist<@dense>>
    return %y : tensor<1x4x8xf32, #tfm.dist<@dense>>
  }
}
