// A tiny model whose loss is summed over the data-parallel group inside the
// compiled program. A program is one data-parallel replica's step (the rank
// program averages over dp), so its values are whole over dp and such an
// all-reduce has nothing partial to reduce: loom-compile refuses it.
module attributes {tfm.model = {family = "gpt2", hidden_size = 8 : i64, vocab_size = 32 : i64}} {
  mesh.mesh @dense(shape = 1x2x1x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @transformer.wte.weight init(normal, std = 2.000000e-01) : tensor<32x8xf32>
  func.func @forward(%t: tensor<2x4xi32> {tfm.input = "tokens"}, %l: tensor<2x4xi32> {tfm.input = "labels"}, %m: tensor<2x4xf32> {tfm.input = "loss_mask"}) -> tensor<f32> attributes {tfm.entry = "loom_forward"} {
    %loss = tfm.block head ins(%t, %l, %m : tensor<2x4xi32>, tensor<2x4xi32>, tensor<2x4xf32>) -> tensor<f32> {
    ^bb0(%a: tensor<2x4xi32>, %b: tensor<2x4xi32>, %c: tensor<2x4xf32>):
      %w = tfm.get_param @transformer.wte.weight : tensor<32x8xf32>
      %e = tfm.embedding %a, %w : tensor<2x4xi32>, tensor<32x8xf32> -> tensor<2x4x8xf32>
      %o = tfm.linear %e, %w : tensor<2x4x8xf32>, tensor<32x8xf32> -> tensor<2x4x32xf32>
      %x, %x_max, %x_sum = tfm.cross_entropy %o, %b, %c : tensor<2x4x32xf32>, tensor<2x4xi32>, tensor<2x4xf32> -> tensor<f32>
      tfm.yield %x : tensor<f32>
    }
    %sum = mesh.all_reduce %loss on @dense mesh_axes = [1] : tensor<f32> -> tensor<f32>
    return %sum : tensor<f32>
  }
}
