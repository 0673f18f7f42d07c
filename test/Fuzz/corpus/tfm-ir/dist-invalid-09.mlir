func.func @f() attributes {tfm.mesh = @dense} {
  return
}
