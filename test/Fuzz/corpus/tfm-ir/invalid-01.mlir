tfm.param @w init(normal, std = -1.0) : tensor<4x4xf32>
