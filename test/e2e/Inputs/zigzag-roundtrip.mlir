// (The values the reshards touch are written distributed; propagation types
// the rest.)
// A tiny tied model whose hidden state is resharded into Megatron's
// load-balanced sequence order over tp (chunks r and 3 - r of 4 on rank r:
// a local reorder, then a slice) and back (an all-gather in rank order, then
// the inverse reorder) before the head. The round trip moves data only, so
// the loss is the plain model's (zigzag-plain.mlir) bitwise; a wrong chunk
// order puts hidden states beside the wrong labels.
module attributes {tfm.model = {family = "gpt2", hidden_size = 8 : i64, vocab_size = 32 : i64}} {
  tfm.param @transformer.wte.weight init(normal, std = 5.000000e-01) : tensor<32x8xf32>
  tfm.param @transformer.ln_f.weight init(ones) : tensor<8xf32>
  func.func @forward(%t: tensor<2x8xi32> {tfm.input = "tokens"}, %l: tensor<2x8xi32> {tfm.input = "labels"}, %m: tensor<2x8xf32> {tfm.input = "loss_mask"}) -> tensor<f32> attributes {tfm.entry = "loom_forward"} {
    %h = tfm.block embedding ins(%t : tensor<2x8xi32>) -> tensor<2x8x8xf32, #tfm.dist<@dense>> {
    ^bb0(%a: tensor<2x8xi32>):
      %w = tfm.get_param @transformer.wte.weight : tensor<32x8xf32>
      %e = tfm.embedding %a, %w : tensor<2x8xi32>, tensor<32x8xf32> -> tensor<2x8x8xf32, #tfm.dist<@dense>>
      tfm.yield %e : tensor<2x8x8xf32, #tfm.dist<@dense>>
    }
    %loss = tfm.block head ins(%h, %l, %m : tensor<2x8x8xf32, #tfm.dist<@dense>>, tensor<2x8xi32>, tensor<2x8xf32>) -> tensor<f32> {
    ^bb0(%x: tensor<2x8x8xf32, #tfm.dist<@dense>>, %b: tensor<2x8xi32>, %c: tensor<2x8xf32>):
      %z = tfm.reshard %x : tensor<2x8x8xf32, #tfm.dist<@dense>> -> tensor<2x8x8xf32, #tfm.dist<@dense, [[], [tp] zigzag(2)]>>
      %y = tfm.reshard %z : tensor<2x8x8xf32, #tfm.dist<@dense, [[], [tp] zigzag(2)]>> -> tensor<2x8x8xf32, #tfm.dist<@dense>>
      %g = tfm.get_param @transformer.ln_f.weight : tensor<8xf32>
      %n = tfm.rms_norm %y, %g eps 1.0e-5 : tensor<2x8x8xf32, #tfm.dist<@dense>>, tensor<8xf32>
      %w = tfm.get_param @transformer.wte.weight : tensor<32x8xf32>
      %o = tfm.linear %n, %w : tensor<2x8x8xf32, #tfm.dist<@dense>>, tensor<32x8xf32> -> tensor<2x8x32xf32>
      %ce, %ce_max, %ce_sum = tfm.cross_entropy %o, %b, %c : tensor<2x8x32xf32>, tensor<2x8xi32>, tensor<2x8xf32> -> tensor<f32>
      tfm.yield %ce : tensor<f32>
    }
    return %loss : tensor<f32>
  }
}
