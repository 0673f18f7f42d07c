// RUN: loom-opt %s --tfm-mark-gradient-groups | FileCheck %s

// Each gradient of an entry names the group the rank program sums it over:
// the data-parallel replicas, and the axes it is partial over (context
// parallelism's cp ranks saw other tokens).
mesh.mesh @dense(shape = 1x2x2x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: {tfm.grad = "w", tfm.grad_group = "dp"}
// CHECK-SAME: {tfm.grad = "n", tfm.grad_group = "cp-dp"}
// CHECK-SAME: {tfm.grad = "b", tfm.grad_group = "dp"}
func.func @train_step(%w: tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>, %n: tensor<8xf32, #tfm.dist<@dense, partial = sum[cp]>>,
                      %b: tensor<8xf32, #tfm.dist<@dense>>)
    -> (tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>> {tfm.grad = "w"}, tensor<8xf32, #tfm.dist<@dense, partial = sum[cp]>> {tfm.grad = "n"},
        tensor<8xf32, #tfm.dist<@dense>> {tfm.grad = "b"}) attributes {tfm.entry = "loom_train_step"} {
  return %w, %n, %b : tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>, tensor<8xf32, #tfm.dist<@dense, partial = sum[cp]>>, tensor<8xf32, #tfm.dist<@dense>>
}

// Functions that are not entries are left alone.
// CHECK-LABEL: func.func private @block
// CHECK-NOT: tfm.grad_group
func.func private @block(%g: tensor<8xf32, #tfm.dist<@dense>>) -> (tensor<8xf32, #tfm.dist<@dense>> {tfm.grad = "b"}) {
  return %g : tensor<8xf32, #tfm.dist<@dense>>
}

