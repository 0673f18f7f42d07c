// RUN: loom-opt %s -split-input-file --tfm-verify-distribution -verify-diagnostics

// Sharded IR whose distributions do not add up is an error naming the op,
// its values' distributions and the rule they break.

// Test: a partial sum added to a replicated value
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%p: tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>, %r: tensor<4xf32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{the operands must be distributed alike, but lhs is a partial sum over tp and rhs is replicated}}
    %s = tfm.add %p, %r : tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<4xf32, #tfm.dist<@dense>> -> tensor<4xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: a row-parallel weight fed a replicated input (global shapes)
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<1x4x8xf32, #tfm.dist<@dense>>, %w: tensor<8x8xf32, #tfm.dist<@dense, [[], [tp]]>>) {
    // expected-error @+1 {{the input is replicated and the weight split on dim 1 over tp: the input's features and the weight's in-features must be split alike (a row-parallel weight needs a split input)}}
    %y = tfm.linear %x, %w : tensor<1x4x8xf32, #tfm.dist<@dense>>, tensor<8x8xf32, #tfm.dist<@dense, [[], [tp]]>> -> tensor<1x4x8xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: a result distributed otherwise than the rule gives (a
// column-parallel output claimed whole)
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<1x4x8xf32, #tfm.dist<@dense>>, %w: tensor<4x8xf32, #tfm.dist<@dense, [[tp]]>>) {
    // expected-error @+1 {{result #0 is replicated but the op's distribution rule gives split on dim 2 over tp}}
    %y = tfm.linear %x, %w : tensor<1x4x8xf32, #tfm.dist<@dense>>, tensor<4x8xf32, #tfm.dist<@dense, [[tp]]>> -> tensor<1x4x4xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: a row-parallel bias would be added by every rank
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<1x4x4xf32, #tfm.dist<@dense, [[], [], [tp]]>>, %w: tensor<8x4xf32, #tfm.dist<@dense, [[], [tp]]>>, %b: tensor<8xf32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{adds its bias to a partial sum over tp, so every rank would add it; add it once after the reduction (tfm.bias_add)}}
    %y = tfm.linear %x, %w, %b : tensor<1x4x4xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<8x4xf32, #tfm.dist<@dense, [[], [tp]]>>, tensor<8xf32, #tfm.dist<@dense>> -> tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>>
    return
  }
}

// -----

// Test: a non-linear op on a partial sum
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>) {
    // expected-error @+1 {{the input is a partial sum over tp; the op is not linear, so it needs whole values}}
    %y = tfm.gelu %x tanh : tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>
    return
  }
}

// -----

// Test: a norm over a split dim (global shapes)
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, %w: tensor<8xf32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{the input is split on dim 2 over tp; a norm needs the normalized dim whole}}
    %y = tfm.rms_norm %x, %w eps 1.0e-6 : tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<8xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: a collective over an axis the value is not partial over
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2x2) {tfm.mesh_axes = ["cp", "tp"]}
  func.func @f(%x: tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>>) {
    // expected-error @+1 {{reduces over cp a value that is a partial sum over tp, not partial over cp}}
    %y = mesh.all_reduce %x on @dense mesh_axes = [0] : tensor<4xf32, #tfm.dist<@dense, partial = sum[tp]>> -> tensor<4xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: a gather over an axis the value is not split over
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<4xf32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{gathers dim 0 over tp but the input is replicated}}
    %y = mesh.all_gather %x on @dense mesh_axes = [0] gather_axis = 0 : tensor<4xf32, #tfm.dist<@dense>> -> tensor<8xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: a distribution naming a mesh that does not exist
module attributes {tfm.local_shapes} {
  // expected-error @+1 {{distribution names mesh @missing, which is not a mesh.mesh}}
  func.func @f(%x: tensor<4xf32, #tfm.dist<@missing>>) {
    return
  }
}

// -----

// Test: a distribution naming an axis the mesh does not have
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  // expected-error-re @+1 {{distribution {{.*}} names axis ep, which mesh @dense does not have}}
  func.func @f(%x: tensor<4xf32, #tfm.dist<@dense, [[ep]]>>) {
    return
  }
}

// -----

// Test: every value of sharded IR has a distribution
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  // expected-error @+1 {{a value of type 'tensor<4xf32>' has no distribution (run tfm-propagate-distribution)}}
  func.func @f(%x: tensor<4xf32>) {
    return
  }
}

// -----

// Test: every read of a parameter is distributed alike
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  tfm.param @w init(ones) : tensor<8x8xf32>
  func.func @f() {
    %a = tfm.get_param @w : tensor<4x8xf32, #tfm.dist<@dense, [[tp]]>>
    // expected-error @+1 {{@w is read as split on dim 1 over tp here and as split on dim 0 over tp elsewhere}}
    %b = tfm.get_param @w : tensor<8x4xf32, #tfm.dist<@dense, [[], [tp]]>>
    return
  }
}

// -----

// Test: at global shapes every split divides
module {
  mesh.mesh @dense(shape = 4) {tfm.mesh_axes = ["tp"]}
  // expected-error @+1 {{dim 0 of size 6 is not divisible by tp 4}}
  func.func @f(%x: tensor<6xf32, #tfm.dist<@dense, [[tp]]>>) {
    return
  }
}

// -----

// Test: an op computing on tensors without a distribution rule
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<4xf32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{'arith.negf' op has no distribution rule, so its distributions cannot be checked}}
    %y = arith.negf %x : tensor<4xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: a value without a distribution is reported once, where it is
// defined; the ops that use it are not checked (nor crash)
module attributes {tfm.local_shapes} {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<4xf32, #tfm.dist<@dense>>) {
    %y = tfm.block layer 0 ins(%x : tensor<4xf32, #tfm.dist<@dense>>) -> tensor<4xf32, #tfm.dist<@dense>> {
    ^bb0(%a: tensor<4xf32, #tfm.dist<@dense>>):
      %b = tfm.gelu %a tanh : tensor<4xf32, #tfm.dist<@dense>>
      // expected-error @+1 {{a value of type 'tensor<4xf32>' has no distribution (run tfm-propagate-distribution)}}
      %c = "tfm.add"(%b, %b) : (tensor<4xf32, #tfm.dist<@dense>>, tensor<4xf32, #tfm.dist<@dense>>) -> tensor<4xf32>
      %d = mesh.all_reduce %c on @dense mesh_axes = [0] : tensor<4xf32> -> tensor<4xf32, #tfm.dist<@dense>>
      tfm.yield %d : tensor<4xf32, #tfm.dist<@dense>>
    }
    return
  }
}

// -----

// Test: experts split over ep but not their counts (a dispatch splits both)
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<32x16xf32, #tfm.dist<@dense>>, %w: tensor<4x24x16xf32, #tfm.dist<@dense, [[tp]]>>, %c: tensor<4xi32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{the weight is split on dim 0 over tp and the expert counts replicated; the experts must be split alike}}
    %y = tfm.grouped_linear %x, %w, %c : tensor<32x16xf32, #tfm.dist<@dense>>, tensor<4x24x16xf32, #tfm.dist<@dense, [[tp]]>>, tensor<4xi32, #tfm.dist<@dense>> -> tensor<32x24xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: split experts read rows that were not dispatched to them
module {
  mesh.mesh @expert(shape = 2) {tfm.mesh_axes = ["ep"]}
  func.func @f(%x: tensor<32x16xf32, #tfm.dist<@expert>>, %w: tensor<4x24x16xf32, #tfm.dist<@expert, [[ep]]>>, %c: tensor<4xi32, #tfm.dist<@expert, [[ep]]>>) {
    // expected-error @+1 {{the rows are replicated and the weight split on dim 0 over ep; the rows of split experts are dispatched rows, split as the experts are (tfm.moe_dispatch)}}
    %y = tfm.grouped_linear %x, %w, %c : tensor<32x16xf32, #tfm.dist<@expert>>, tensor<4x24x16xf32, #tfm.dist<@expert, [[ep]]>>, tensor<4xi32, #tfm.dist<@expert, [[ep]]>> -> tensor<32x24xf32, #tfm.dist<@expert, [[ep]]>>
    return
  }
}

// -----

// Test: a combine of rows that are not dispatched ones
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["dp"]}
  mesh.mesh @expert(shape = 2) {tfm.mesh_axes = ["ep"]}
  func.func @f(%x: tensor<128x16xf32, #tfm.dist<@expert>>, %all: tensor<8xi32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{the dispatched rows are replicated but must be split on dim 0 over ep}}
    %y = tfm.moe_combine %x, %all on @expert axis "ep" : tensor<128x16xf32, #tfm.dist<@expert>>, tensor<8xi32, #tfm.dist<@dense>> -> tensor<32x16xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: a dispatch of rows that are partial sums
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  mesh.mesh @expert(shape = 2) {tfm.mesh_axes = ["ep"]}
  func.func @f(%x: tensor<32x16xf32, #tfm.dist<@dense, partial = sum[tp]>>, %all: tensor<8xi32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{the dispatch's input is a partial sum over tp; it takes each rank's own rows}}
    %y, %c = tfm.moe_dispatch %x, %all on @expert axis "ep" : tensor<32x16xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<8xi32, #tfm.dist<@dense>> -> tensor<128x16xf32, #tfm.dist<@expert, [[ep]]>>, tensor<4xi32, #tfm.dist<@expert, [[ep]]>>
    return
  }
}

// -----

// Test: a row-parallel expert weight fed whole rows
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<32x24xf32, #tfm.dist<@dense>>, %w: tensor<4x16x24xf32, #tfm.dist<@dense, [[], [], [tp]]>>, %c: tensor<4xi32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{the input is replicated and the weight split on dim 2 over tp: the input's features and the weight's in-features must be split alike}}
    %y = tfm.grouped_linear %x, %w, %c : tensor<32x24xf32, #tfm.dist<@dense>>, tensor<4x16x24xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<4xi32, #tfm.dist<@dense>> -> tensor<32x16xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: rows split on dim 0 are each rank's own tokens' rows: split as the
// tokens are
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%r: tensor<32x16xf32, #tfm.dist<@dense, [[tp]]>>, %p: tensor<2x8x2xf32, #tfm.dist<@dense>>, %m: tensor<2x8x2xi32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{the rows are split on dim 0 over tp but the tokens' rows are replicated}}
    %y = tfm.moe_unpermute %r, %p, %m : tensor<32x16xf32, #tfm.dist<@dense, [[tp]]>>, tensor<2x8x2xf32, #tfm.dist<@dense>>, tensor<2x8x2xi32, #tfm.dist<@dense>> -> tensor<2x8x16xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: routing decides on whole probabilities
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%r: tensor<32x16xf32, #tfm.dist<@dense>>, %p: tensor<2x8x2xf32, #tfm.dist<@dense, partial = sum[tp]>>, %m: tensor<2x8x2xi32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{the probs is a partial sum over tp; routing operands are never partial}}
    %y = tfm.moe_unpermute %r, %p, %m : tensor<32x16xf32, #tfm.dist<@dense>>, tensor<2x8x2xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<2x8x2xi32, #tfm.dist<@dense>> -> tensor<2x8x16xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: a sigmoid gate reads its gate whole
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<2x8x16xf32, #tfm.dist<@dense>>, %g: tensor<2x8x1xf32, #tfm.dist<@dense, partial = sum[tp]>>) {
    // expected-error @+1 {{the gate is a partial sum over tp; a gate is never partial}}
    %y = tfm.sigmoid_gate %x, %g : tensor<2x8x16xf32, #tfm.dist<@dense>>, tensor<2x8x1xf32, #tfm.dist<@dense, partial = sum[tp]>>
    return
  }
}

// -----

// Test: routing operands split their tokens alike (cp chunks of the
// sequence)
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["cp"]}
  func.func @f(%x: tensor<2x8x16xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>>, %e: tensor<2x8x2xi32, #tfm.dist<@dense, [[], [cp]]>>) {
    // expected-error @+1 {{the tokens (split on dim 1 over cp in zigzag(2) order) and the experts (split on dim 1 over cp) must split their tokens alike}}
    %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 4 : tensor<2x8x16xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>>, tensor<2x8x2xi32, #tfm.dist<@dense, [[], [cp]]>> -> tensor<32x16xf32, #tfm.dist<@dense, [[cp]]>>, tensor<4xi32, #tfm.dist<@dense, partial = sum[cp]>>, tensor<2x8x2xi32, #tfm.dist<@dense, [[], [cp]]>>
    return
  }
}

// -----

// Test: the router's losses need the whole micro-batch's counts
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["cp"]}
  func.func @f(%l: tensor<2x8x4xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>>, %c: tensor<4xf32, #tfm.dist<@dense, partial = sum[cp]>>) {
    // expected-error @+1 {{the micro-batch's expert counts is a partial sum over cp but must be replicated}}
    %a, %z = tfm.moe_router_loss %l, %c top_k 2 aux_coeff 0.01 z_coeff 0.0 : tensor<2x8x4xf32, #tfm.dist<@dense, [[], [cp] zigzag(2)]>>, tensor<4xf32, #tfm.dist<@dense, partial = sum[cp]>> -> tensor<f32, #tfm.dist<@dense, partial = sum[cp]>>, tensor<f32, #tfm.dist<@dense, partial = sum[cp]>>
    return
  }
}

// -----

// Test: whole experts on each rank's own rows take that rank's own counts
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["cp"]}
  func.func @f(%x: tensor<32x16xf32, #tfm.dist<@dense, [[cp]]>>, %w: tensor<4x24x16xf32, #tfm.dist<@dense>>, %c: tensor<4xi32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{the expert counts are replicated and the rows split on dim 0 over cp; a rank's counts are those of its own rows (a partial sum over the axes the rows are split over)}}
    %y = tfm.grouped_linear %x, %w, %c : tensor<32x16xf32, #tfm.dist<@dense, [[cp]]>>, tensor<4x24x16xf32, #tfm.dist<@dense>>, tensor<4xi32, #tfm.dist<@dense>> -> tensor<32x24xf32, #tfm.dist<@dense, [[cp]]>>
    return
  }
}

// -----

// Test: a residual add and norm of features split over tp
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, %r: tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>,
               %w: tensor<8xf32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{a norm needs the normalized dim whole}}
    %s, %y = tfm.add_rms_norm %x, %r, %w eps 1.0e-06 : tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<8xf32, #tfm.dist<@dense>>
    return
  }
}

// -----

// Test: an input gradient accumulated onto a value distributed otherwise (a
// column-parallel linear's input gradient is a partial sum over tp)
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<1x4x8xf32, #tfm.dist<@dense>>, %w: tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>,
               %dy: tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, %r: tensor<1x4x8xf32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{accumulates onto replicated but its input gradient is a partial sum over tp}}
    %dx, %dw = tfm.linear_grad %x, %w, %dy accumulate(%r : tensor<1x4x8xf32, #tfm.dist<@dense>>)
        : tensor<1x4x8xf32, #tfm.dist<@dense>>, tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>, tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>
        grads(tensor<1x4x8xf32, #tfm.dist<@dense>>, tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>)
    return
  }
}

// -----

// Test: GELU fused onto a linear whose output is a partial sum (a
// row-parallel weight): GELU of the unreduced value is wrong
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, %w: tensor<8x8xf32, #tfm.dist<@dense, [[], [tp]]>>) {
    // expected-error @+1 {{applies GELU to a partial sum over tp: a nonlinear map needs the reduced value}}
    %h, %a = tfm.linear_gelu %x, %w tanh : tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<8x8xf32, #tfm.dist<@dense, [[], [tp]]>>
        -> tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>>
    return
  }
}

// -----

// Test: a linear's input gradient through a GELU whose input is
// distributed otherwise (a column-parallel weight gives a partial sum)
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%a: tensor<1x4x8xf32, #tfm.dist<@dense>>, %w: tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>,
               %dy: tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>) {
    // expected-error @+1 {{the GELU's input is replicated but the linear's input gradient is a partial sum over tp}}
    %dh, %dw = tfm.linear_grad_gelu %a, %w, %dy gelu(%a) tanh : tensor<1x4x8xf32, #tfm.dist<@dense>>, tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>, tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>
    return
  }
}

// -----

// Test: linears of one input whose input gradients are distributed apart
// cannot be summed
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<1x4x8xf32, #tfm.dist<@dense>>, %wc: tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>,
               %wr: tensor<8x8xf32, #tfm.dist<@dense>>, %dyc: tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>,
               %dyr: tensor<1x4x8xf32, #tfm.dist<@dense>>) {
    // expected-error @+1 {{sums input gradients a partial sum over tp and replicated}}
    %dx, %dw1, %dw2 = tfm.multi_linear_grad %x [%wc, %wr] [%dyc, %dyr]
        : tensor<1x4x8xf32, #tfm.dist<@dense>> [tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>, tensor<8x8xf32, #tfm.dist<@dense>>]
          [tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<1x4x8xf32, #tfm.dist<@dense>>]
        -> tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>> [tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>, tensor<8x8xf32, #tfm.dist<@dense>>]
    return
  }
}

// -----

// Test: SwiGLU fused onto gate and up linears whose outputs are partial
// sums (row-parallel weights)
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%x: tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, %w: tensor<8x8xf32, #tfm.dist<@dense, [[], [tp]]>>) {
    // expected-error @+1 {{applies SwiGLU to a partial sum over tp: a nonlinear map needs the reduced value}}
    %g, %u, %a = tfm.linear_swiglu %x, %w, %w : tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>, tensor<8x8xf32, #tfm.dist<@dense, [[], [tp]]>>
        -> tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>>, tensor<1x4x8xf32, #tfm.dist<@dense, partial = sum[tp]>>
    return
  }
}

// -----

// Test: a linear's input gradient through a SwiGLU whose gate is
// distributed otherwise (a column-parallel weight gives a partial sum)
module {
  mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["tp"]}
  func.func @f(%a: tensor<1x4x8xf32, #tfm.dist<@dense>>, %w: tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>,
               %dy: tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>) {
    // expected-error @+1 {{the SwiGLU's gate is replicated but the linear's input gradient is a partial sum over tp}}
    %dg, %du, %dw = tfm.linear_grad_swiglu %a, %w, %dy swiglu(%a, %a) : tensor<1x4x8xf32, #tfm.dist<@dense>>, tensor<8x8xf32, #tfm.dist<@dense, [[tp]]>>, tensor<1x4x8xf32, #tfm.dist<@dense, [[], [], [tp]]>>
    return
  }
}
