tfm.param @w init(zeros, std = 1.0) : tensor<4xf32>
