// RUN: loom-opt %s -split-input-file --tfm-mark-gradient-groups -verify-diagnostics


// A gradient must be a sum: the rank program adds the replicas.
mesh.mesh @dense(shape = 1x1x2x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
// expected-error @+1 {{the gradient of "m" leaves @step a partial maximum over cp; the rank program sums gradients}}
func.func @step(%m: tensor<8xf32, #tfm.dist<@dense, partial = max[cp]>>) -> (tensor<8xf32, #tfm.dist<@dense, partial = max[cp]>> {tfm.grad = "m"}) attributes {tfm.entry = "loom_train_step"} {
  return %m : tensor<8xf32, #tfm.dist<@dense, partial = max[cp]>>
}

// -----

// And it must have a distribution (the pass runs on sharded entries).
// expected-error @+1 {{the gradient of "u" has no distribution (run tfm-shard first)}}
func.func @unsharded(%u: tensor<8xf32>) -> (tensor<8xf32> {tfm.grad = "u"}) attributes {tfm.entry = "loom_train_step"} {
  return %u : tensor<8xf32>
}
