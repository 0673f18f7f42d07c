func.func @f() {
  %w = tfm.get_param @missing : tensor<4xf32>
  return
}
