tfm.param @w init(ones) : tensor<4xf32>
func.func @f() {
  %w = tfm.get_param @w : tensor<8xf32>
  return
}
