tfm.param @w init(ones) : tensor<?xf32>
