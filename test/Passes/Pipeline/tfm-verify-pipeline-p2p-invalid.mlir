// RUN: loom-opt %s --split-input-file --tfm-verify-pipeline-p2p -verify-diagnostics

// Both pp ranks send first, one tensor per call (unbatched): under
// rendezvous semantics each waits for the other's receive forever.
mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["pp"]}
// expected-error @below {{pipeline p2p of @step (ranks are pp ranks): deadlock}}
func.func @step_pp0(%x: tensor<4xf32>) -> tensor<4xf32> attributes {tfm.pipeline_rank = 0 : i64} {
  tfm.pipeline_p2p sends(%x : tensor<4xf32>) to [1] recvs from [] payloads [0, 0, 0] -> [] on @dense axis "pp"
  %g = tfm.pipeline_p2p sends() to [] recvs from [1] payloads [] -> [1, 0, 1] on @dense axis "pp" : tensor<4xf32>
  return %g : tensor<4xf32>
}
func.func @step_pp1(%g: tensor<4xf32>) -> tensor<4xf32> attributes {tfm.pipeline_rank = 1 : i64} {
  tfm.pipeline_p2p sends(%g : tensor<4xf32>) to [-1] recvs from [] payloads [1, 0, 1] -> [] on @dense axis "pp"
  %x = tfm.pipeline_p2p sends() to [] recvs from [-1] payloads [] -> [0, 0, 0] on @dense axis "pp" : tensor<4xf32>
  return %x : tensor<4xf32>
}

// -----

// A hand-broken schedule: rank 1 expects micro-batch 1 first, rank 0 sends
// micro-batch 0 first.
mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["pp"]}
// expected-error @below {{pipeline p2p of @step (ranks are pp ranks): channel pp 0->1, message 0: rank 0 unit 0 (batch 0 of @step_pp0) sends act mb 0 of stage 0 [4 f32] (send_next), but rank 1 unit 0 (batch 0 of @step_pp1) expects act mb 1 of stage 0 [4 f32] (recv_prev)}}
func.func @step_pp0(%a: tensor<4xf32>, %b: tensor<4xf32>) attributes {tfm.pipeline_rank = 0 : i64} {
  tfm.pipeline_p2p sends(%a : tensor<4xf32>) to [1] recvs from [] payloads [0, 0, 0] -> [] on @dense axis "pp"
  tfm.pipeline_p2p sends(%b : tensor<4xf32>) to [1] recvs from [] payloads [0, 1, 0] -> [] on @dense axis "pp"
  return
}
func.func @step_pp1() -> (tensor<4xf32>, tensor<4xf32>) attributes {tfm.pipeline_rank = 1 : i64} {
  %b = tfm.pipeline_p2p sends() to [] recvs from [-1] payloads [] -> [0, 1, 0] on @dense axis "pp" : tensor<4xf32>
  %a = tfm.pipeline_p2p sends() to [] recvs from [-1] payloads [] -> [0, 0, 0] on @dense axis "pp" : tensor<4xf32>
  return %a, %b : tensor<4xf32>, tensor<4xf32>
}

// -----

// Batched, at pp 2 an activation and a gradient of one shape cross on one
// channel in opposite order (the interleaved schedule's trap).
mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["pp"]}
// expected-error @below {{sends grad mb 0 of stage 2 [4 f32] (send_prev), but rank 1 unit 0 (batch 0 of @step_pp1) expects act mb 2 of stage 0 [4 f32] (recv_prev) (and 3 more)}}
func.func @step_pp0(%g: tensor<4xf32>, %a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {tfm.pipeline_rank = 0 : i64} {
  %r:2 = tfm.pipeline_p2p sends(%g, %a : tensor<4xf32>, tensor<4xf32>) to [-1, 1] recvs from [-1, 1] payloads [1, 0, 2, 0, 2, 0] -> [0, 2, 1, 1, 0, 1] on @dense axis "pp" : tensor<4xf32>, tensor<4xf32>
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xf32>
}
func.func @step_pp1(%g: tensor<4xf32>, %a: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {tfm.pipeline_rank = 1 : i64} {
  %r:2 = tfm.pipeline_p2p sends(%g, %a : tensor<4xf32>, tensor<4xf32>) to [-1, 1] recvs from [-1, 1] payloads [1, 0, 1, 0, 2, 1] -> [0, 2, 0, 1, 0, 2] on @dense axis "pp" : tensor<4xf32>, tensor<4xf32>
  return %r#0, %r#1 : tensor<4xf32>, tensor<4xf32>
}

// -----

mesh.mesh @dense(shape = 2) {tfm.mesh_axes = ["pp"]}
func.func @bad(%x: tensor<4xf32>) {
  // expected-error @below {{needs three payload integers (kind, micro-batch, stage) per tensor}}
  tfm.pipeline_p2p sends(%x : tensor<4xf32>) to [1] recvs from [] payloads [0, 0] -> [] on @dense axis "pp"
  return
}
