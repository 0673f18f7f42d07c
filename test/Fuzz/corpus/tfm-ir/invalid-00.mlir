tfm.param @w init(normal) : tensor<4x4xf32>
