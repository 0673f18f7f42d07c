module attributes {tfm.plan = #tfm.plan<tp = 2, cp = 2>} {
  mesh.mesh @dense(shape = 1x1x2x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}

  func.func @spellings(
      %a: tensor<2x8xf32, #tfm.dist<@dense>>,
      %b: tensor<2x8xf32, #tfm.dist<@dense, [[], [tp]]>>,
      %c: tensor<2x8xf32, #tfm.dist<@dense, [[], [cp, tp] zigzag(2)]>>,
      %d: tensor<2x8xf32, #tfm.dist<@dense, [[], [] chunks(0, 2, 1, 3)]>>,
      %e: tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp, cp]>>,
      %f: tensor<2x8xf32, #tfm.dist<@dense, [[cp]], partial = max[tp]>>,
      %g: tensor<2x8xf32, #tfm.dist<@dense, [[tp], []]>>,
      %h: tensor<2x8xf32, #tfm.dist<@dense, [[], [] chunks(0, 1, 2, 3)]>>) {
    return
  }

  func.func @coarsest(%x: tensor<8xf32, #tfm.dist<@dense, [[] chunks(0, 1, 4, 5, 2, 3, 6, 7)]>>) {
    return
  }

  func.func @grads(%x: tensor<2x8x8xf32, #tfm.dist<@dense>>,
                   %w: tensor<4x8xf32, #tfm.dist<@dense, [[tp]]>>,
                   %dy: tensor<2x8x4xf32, #tfm.dist<@dense, [[], [], [tp]]>>,
                   %s: tensor<2x4x8xf32, #tfm.dist<@dense, [[], [tp]]>>,
                   %n: tensor<8xf32, #tfm.dist<@dense>>) {
    %dx, %dw = tfm.linear_grad %x, %w, %dy : tensor<2x8x8xf32, #tfm.dist<@dense>>, tensor<4x8xf32, #tfm.dist<@dense, [[tp]]>>, tensor<2x8x4xf32, #tfm.dist<@dense, [[], [], [tp]]>> grads(tensor<2x8x8xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<4x8xf32, #tfm.dist<@dense, [[tp]]>>)
    %dn, %dnw = tfm.rms_norm_grad %s, %n, %s eps 1.0e-5 : tensor<2x4x8xf32, #tfm.dist<@dense, [[], [tp]]>>, tensor<8xf32, #tfm.dist<@dense>> grads(tensor<8xf32, #tfm.dist<@dense, partial = sum[tp]>>)
    return
  }

  func.func @mixed(%p: tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>, %r: tensor<4xf32, #tfm.dist<@dense>>) {
    %s = tfm.add %p, %r : tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<4xf32, #tfm.dist<@dense>> -> tensor<4xf32, #tfm.dist<@dense>>
    return
  }

  func.func @reshard(%p: tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp]>>) {
    %r = tfm.reshard %p : tensor<2x8xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<2x8xf32, #tfm.dist<@dense, [[], [tp]]>>
    return
  }
}
