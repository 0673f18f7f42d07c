module attributes {tfm.local_shapes} {
  tfm.param @w init(ones) : tensor<4x8xf32>
  func.func @f() {
    %w = tfm.get_param @w : tensor<2x8xf32, #tfm.dist<@dense, [[tp]]>>
    return
  }
}
