// A @forward with an op outside what tfm-lower-to-runtime converts.
module {
  func.func @forward(%t: tensor<1x4xi32> {tfm.input = "tokens"}, %l: tensor<1x4xi32> {tfm.input = "labels"}, %m: tensor<1x4xf32> {tfm.input = "loss_mask"}) -> tensor<f32> attributes {tfm.entry = "loom_forward"} {
    %e = tensor.empty() : tensor<f32>
    return %e : tensor<f32>
  }
}
