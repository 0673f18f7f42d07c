// RUN: loom-opt %s -split-input-file --tfm-propagate-distribution -verify-diagnostics

// Plans and programs propagation cannot distribute: errors that name the
// op and the sizes.

// Test: a column-parallel linear whose out-features do not divide
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @a init(ones) : tensor<7x8xf32>
  func.func @forward(%x: tensor<1x2x8xf32>) -> tensor<1x2x7xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x2x8xf32>) -> tensor<1x2x7xf32> {
    ^bb0(%h: tensor<1x2x8xf32>):
      %wa = tfm.get_param @a : tensor<7x8xf32>
      // expected-error @+1 {{out_features 7 of a column-parallel linear is not divisible by tp 2}}
      %c = tfm.linear %h, %wa : tensor<1x2x8xf32>, tensor<7x8xf32> -> tensor<1x2x7xf32>
      tfm.yield %c : tensor<1x2x7xf32>
    }
    return %y : tensor<1x2x7xf32>
  }
}

// -----

// Test: heads that do not divide
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @q init(ones) : tensor<12x12xf32>
  func.func @forward(%x: tensor<1x2x12xf32>) -> tensor<1x2x12xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x2x12xf32>) -> tensor<1x2x12xf32> {
    ^bb0(%h: tensor<1x2x12xf32>):
      %wq = tfm.get_param @q : tensor<12x12xf32>
      %q = tfm.linear %h, %wq : tensor<1x2x12xf32>, tensor<12x12xf32> -> tensor<1x2x12xf32>
      // expected-error @+1 {{num_heads 3 is not divisible by tp 2}}
      %a, %l = tfm.attention %q, %q, %q heads 3 kv_heads 3 head_dim 4 scale 0.5 mask causal
          : tensor<1x2x12xf32>, tensor<1x2x12xf32>, tensor<1x2x12xf32> -> tensor<1x2x12xf32>, tensor<1x3x2xf32>
      tfm.yield %a : tensor<1x2x12xf32>
    }
    return %y : tensor<1x2x12xf32>
  }
}

// -----

// Test: attention on replicated inputs
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @forward(%x: tensor<1x2x8xf32>) -> tensor<1x2x8xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x2x8xf32>) -> tensor<1x2x8xf32> {
    ^bb0(%h: tensor<1x2x8xf32>):
      // expected-error @+1 {{attention inputs are replicated; tensor parallelism expects q, k and v from column-parallel linears}}
      %a, %l = tfm.attention %h, %h, %h heads 2 kv_heads 2 head_dim 4 scale 0.5 mask causal
          : tensor<1x2x8xf32>, tensor<1x2x8xf32>, tensor<1x2x8xf32> -> tensor<1x2x8xf32>, tensor<1x2x2xf32>
      tfm.yield %a : tensor<1x2x8xf32>
    }
    return %y : tensor<1x2x8xf32>
  }
}

// -----

// Test: the meshes must exist
// expected-error @+1 {{no mesh.mesh of the plan's dense world (axes pp 1, dp 1, cp 1, tp 2); run tfm-materialize-mesh}}
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
}

// -----

// Test: a mesh of another shape is not the plan's
// expected-error @+1 {{no mesh.mesh of the plan's dense world (axes pp 1, dp 1, cp 1, tp 2); run tfm-materialize-mesh}}
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x4) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
}

// -----

// Test: the plan must exist
// expected-error @+1 {{module has no tfm.plan; run --tfm-set-plan first}}
module {
}

// -----

// Test: propagation works at global shapes
// expected-error @+1 {{tfm-propagate-distribution needs global shapes, but the module's are per-rank (tfm-localize ran)}}
module attributes {tfm.plan = #tfm.plan<tp = 2>, tfm.local_shapes} {
}

// -----

// Test: an op with no distribution rule
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{'arith.negf' op has no distribution rule; tfm-propagate-distribution cannot distribute it}}
    %y = arith.negf %x : tensor<4xf32>
    return %y : tensor<4xf32>
  }
}

// -----

// Test: with sequence parallelism the sequence must divide by tp
module attributes {tfm.plan = #tfm.plan<tp = 2, sequence_parallel = true>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @g init(ones) : tensor<8xf32>
  func.func @forward(%x: tensor<1x3x8xf32>) -> tensor<1x3x8xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x3x8xf32>) -> tensor<1x3x8xf32> {
    ^bb0(%h: tensor<1x3x8xf32>):
      %w = tfm.get_param @g : tensor<8xf32>
      // expected-error @+1 {{sequence length 3 is not divisible by tp 2 (sequence parallelism)}}
      %n = tfm.rms_norm %h, %w eps 1.0e-6 : tensor<1x3x8xf32>, tensor<8xf32>
      tfm.yield %n : tensor<1x3x8xf32>
    }
    return %y : tensor<1x3x8xf32>
  }
}

// -----

// Test: kv heads and tp that do not divide each other
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @q init(ones) : tensor<24x8xf32>
  tfm.param @kv init(ones) : tensor<12x8xf32>
  func.func @forward(%x: tensor<1x2x8xf32>) -> tensor<1x2x24xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x2x8xf32>) -> tensor<1x2x24xf32> {
    ^bb0(%h: tensor<1x2x8xf32>):
      %wq = tfm.get_param @q : tensor<24x8xf32>
      %q = tfm.linear %h, %wq : tensor<1x2x8xf32>, tensor<24x8xf32> -> tensor<1x2x24xf32>
      %wk = tfm.get_param @kv : tensor<12x8xf32>
      %k = tfm.linear %h, %wk : tensor<1x2x8xf32>, tensor<12x8xf32> -> tensor<1x2x12xf32>
      // expected-error @+1 {{num_kv_heads 3 and tp 2: one must divide the other}}
      %a, %l = tfm.attention %q, %k, %k heads 6 kv_heads 3 head_dim 4 scale 0.5 mask causal
          : tensor<1x2x24xf32>, tensor<1x2x12xf32>, tensor<1x2x12xf32> -> tensor<1x2x24xf32>, tensor<1x6x2xf32>
      tfm.yield %a : tensor<1x2x24xf32>
    }
    return %y : tensor<1x2x24xf32>
  }
}

// -----

// Test: a vocabulary that does not divide
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @wte init(ones) : tensor<7x8xf32>
  func.func @forward(%t: tensor<1x2xi32>) -> tensor<1x2x8xf32> {
    %y = tfm.block embedding ins(%t : tensor<1x2xi32>) -> tensor<1x2x8xf32> {
    ^bb0(%ids: tensor<1x2xi32>):
      %w = tfm.get_param @wte : tensor<7x8xf32>
      // expected-error @+1 {{vocabulary size 7 is not divisible by tp 2; pad it (tfm-pad-vocab, which loom-compile runs)}}
      %e = tfm.embedding %ids, %w : tensor<1x2xi32>, tensor<7x8xf32> -> tensor<1x2x8xf32>
      tfm.yield %e : tensor<1x2x8xf32>
    }
    return %y : tensor<1x2x8xf32>
  }
}

// -----

// Test: one weight read as column- and as row-parallel
module attributes {tfm.plan = #tfm.plan<tp = 2>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @a init(ones) : tensor<8x8xf32>
  func.func @forward(%x: tensor<1x2x8xf32>) -> tensor<1x2x8xf32> {
    %y = tfm.block layer 0 ins(%x : tensor<1x2x8xf32>) -> tensor<1x2x8xf32> {
    ^bb0(%h: tensor<1x2x8xf32>):
      %wa = tfm.get_param @a : tensor<8x8xf32>
      %c = tfm.linear %h, %wa : tensor<1x2x8xf32>, tensor<8x8xf32> -> tensor<1x2x8xf32>
      %wb = tfm.get_param @a : tensor<8x8xf32>
      // expected-error @+1 {{@a is split on dim 0 over tp elsewhere but needs to be split on dim 1 over tp here}}
      %r = tfm.linear %c, %wb : tensor<1x2x8xf32>, tensor<8x8xf32> -> tensor<1x2x8xf32>
      tfm.yield %r : tensor<1x2x8xf32>
    }
    return %y : tensor<1x2x8xf32>
  }
}


// -----

// Test: a2a+p2p with heads that do not divide over the a2a group
module attributes {tfm.plan = #tfm.plan<cp = 4, cp_comm_type = ["a2a+p2p"], hierarchical_cp_sizes = [4, 1]>} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @wte init(ones) : tensor<32x12xf32>
  func.func @forward(%t: tensor<1x16xi32> {tfm.input = "tokens"}) -> tensor<1x16x12xf32> {
    %x = tfm.block embedding ins(%t : tensor<1x16xi32>) -> tensor<1x16x12xf32> {
    ^bb0(%ids: tensor<1x16xi32>):
      %wte = tfm.get_param @wte : tensor<32x12xf32>
      %e = tfm.embedding %ids, %wte : tensor<1x16xi32>, tensor<32x12xf32> -> tensor<1x16x12xf32>
      tfm.yield %e : tensor<1x16x12xf32>
    }
    %y = tfm.block layer 0 ins(%x : tensor<1x16x12xf32>) -> tensor<1x16x12xf32> {
    ^bb0(%h: tensor<1x16x12xf32>):
      // expected-error @+1 {{a2a context parallelism splits each tp rank's 3 query heads over cp 4, which does not divide them}}
      %a, %l = tfm.attention %h, %h, %h heads 3 kv_heads 3 head_dim 4 scale 0.5 mask causal
          : tensor<1x16x12xf32>, tensor<1x16x12xf32>, tensor<1x16x12xf32> -> tensor<1x16x12xf32>, tensor<1x3x16xf32>
      tfm.yield %a : tensor<1x16x12xf32>
    }
    return %y : tensor<1x16x12xf32>
  }
}

// -----

// Test: a2a+p2p with heads that do not divide over the a2a group of 2
module attributes {tfm.plan = #tfm.plan<cp = 4, cp_comm_type = ["a2a+p2p"], hierarchical_cp_sizes = [2, 2]>} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @wte init(ones) : tensor<32x12xf32>
  func.func @forward(%t: tensor<1x16xi32> {tfm.input = "tokens"}) -> tensor<1x16x12xf32> {
    %x = tfm.block embedding ins(%t : tensor<1x16xi32>) -> tensor<1x16x12xf32> {
    ^bb0(%ids: tensor<1x16xi32>):
      %wte = tfm.get_param @wte : tensor<32x12xf32>
      %e = tfm.embedding %ids, %wte : tensor<1x16xi32>, tensor<32x12xf32> -> tensor<1x16x12xf32>
      tfm.yield %e : tensor<1x16x12xf32>
    }
    %y = tfm.block layer 0 ins(%x : tensor<1x16x12xf32>) -> tensor<1x16x12xf32> {
    ^bb0(%h: tensor<1x16x12xf32>):
      // expected-error @+1 {{a2a+p2p context parallelism splits each tp rank's 3 query and 3 kv heads over a2a groups of 2, which does not divide them}}
      %a, %l = tfm.attention %h, %h, %h heads 3 kv_heads 3 head_dim 4 scale 0.5 mask causal
          : tensor<1x16x12xf32>, tensor<1x16x12xf32>, tensor<1x16x12xf32> -> tensor<1x16x12xf32>, tensor<1x3x16xf32>
      tfm.yield %a : tensor<1x16x12xf32>
    }
    return %y : tensor<1x16x12xf32>
  }
}

// -----

// Test: a2a+p2p with three levels
module attributes {tfm.plan = #tfm.plan<cp = 4, cp_comm_type = ["a2a+p2p"], hierarchical_cp_sizes = [2, 1, 2]>} {
  mesh.mesh @dense(shape = 1x1x4x1) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @wte init(ones) : tensor<32x16xf32>
  func.func @forward(%t: tensor<1x16xi32> {tfm.input = "tokens"}) -> tensor<1x16x16xf32> {
    %x = tfm.block embedding ins(%t : tensor<1x16xi32>) -> tensor<1x16x16xf32> {
    ^bb0(%ids: tensor<1x16xi32>):
      %wte = tfm.get_param @wte : tensor<32x16xf32>
      %e = tfm.embedding %ids, %wte : tensor<1x16xi32>, tensor<32x16xf32> -> tensor<1x16x16xf32>
      tfm.yield %e : tensor<1x16x16xf32>
    }
    %y = tfm.block layer 0 ins(%x : tensor<1x16x16xf32>) -> tensor<1x16x16xf32> {
    ^bb0(%h: tensor<1x16x16xf32>):
      // expected-error @+1 {{cp_comm_type a2a+p2p (layer 0) takes two hierarchical cp sizes, the a2a group's and the ring's}}
      %a, %l = tfm.attention %h, %h, %h heads 4 kv_heads 4 head_dim 4 scale 0.5 mask causal
          : tensor<1x16x16xf32>, tensor<1x16x16xf32>, tensor<1x16x16xf32> -> tensor<1x16x16xf32>, tensor<1x4x16xf32>
      tfm.yield %a : tensor<1x16x16xf32>
    }
    return %y : tensor<1x16x16xf32>
  }
}

// -----

// Without sequence parallelism there is no share of the tokens to route:
// whole experts at tp 2 are refused by name.
module attributes {tfm.plan = #tfm.plan<tp = 2, etp = 1>} {
  mesh.mesh @dense(shape = 1x1x1x2) {tfm.mesh_axes = ["pp", "dp", "cp", "tp"]}
  tfm.param @w1 init(ones) : tensor<4x24x16xf32>
  func.func @forward(%x: tensor<2x8x16xf32>, %e: tensor<2x8x2xi32>) -> tensor<32x24xf32> {
    %rows, %counts, %map = tfm.moe_permute %x, %e num_experts 4
        : tensor<2x8x16xf32>, tensor<2x8x2xi32> -> tensor<32x16xf32>, tensor<4xi32>, tensor<2x8x2xi32>
    %w1 = tfm.get_param @w1 : tensor<4x24x16xf32>
    // expected-error @+1 {{experts not split over tp (expert tensor parallel size 1) with tp 2 need sequence parallelism: each tp rank routes its own share of the sequence}}
    %g = tfm.grouped_linear %rows, %w1, %counts : tensor<32x16xf32>, tensor<4x24x16xf32>, tensor<4xi32> -> tensor<32x24xf32>
    return %g : tensor<32x24xf32>
  }
}
