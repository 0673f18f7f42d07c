// RUN: loom-import %examples/gpt-tiny.json --seq-length 8 -o %t.mlir
// RUN: loom-opt %t.mlir --tfm-plan="pp=2" --tfm-differentiate --tfm-shard \
// RUN:   --tfm-schedule-pipeline="num-microbatches=2" --tfm-verify-pipeline-p2p | FileCheck %s
// RUN: loom-opt %t.mlir --tfm-plan="pp=2" --tfm-shard \
// RUN:   --tfm-schedule-pipeline="num-microbatches=2 p2p-mode=unbatched" | FileCheck %s --check-prefix=FWD

// Two layers over pp 2, two micro-batches, 1F1B: pp rank 0 (embedding,
// layer 0) runs F0 F1 B0 B1, pp rank 1 (layer 1, head) F0 B0 F1 B1, with
// Megatron's p2p calls between the steps as one batch each.
// CHECK-LABEL: func.func @forward_pp0(
// CHECK-LABEL: func.func @train_step_pp0(
// CHECK-SAME: {tfm.input = "tokens", tfm.microbatch = 0 : i64}
// CHECK-SAME: {tfm.input = "tokens", tfm.microbatch = 1 : i64}
// CHECK-SAME: attributes {tfm.entry = "loom_train_step_pp0", tfm.pipeline_rank = 0 : i64}
// CHECK: tfm.block embedding
// CHECK: %[[H0:.*]]:11 = tfm.block layer 0
// CHECK: tfm.pipeline_p2p sends(%[[H0]]#0 : {{.*}}) to [1] recvs from [] payloads [0, 0, 0] -> [] on @dense axis "pp"
// CHECK: tfm.block embedding
// CHECK: tfm.block layer 0 ins
// send_forward_recv_backward: activation of micro-batch 1 out, gradient of 0 in.
// CHECK: %[[G0:.*]] = tfm.pipeline_p2p sends({{.*}}) to [1] recvs from [1] payloads [0, 1, 0] -> [1, 0, 1]
// CHECK: tfm.block layer 0 backward ins(%[[G0]],
// CHECK: tfm.block embedding backward
// CHECK: %[[G1:.*]] = tfm.pipeline_p2p sends() to [] recvs from [1] payloads [] -> [1, 1, 1]
// CHECK: tfm.block layer 0 backward ins(%[[G1]],
// CHECK: tfm.block embedding backward
// Gradients summed over the micro-batches; this stage's parameters only.
// CHECK: tfm.add
// CHECK: return
// CHECK-SAME: tensor<512x64xf32
// CHECK-NOT: ln_f

// CHECK-LABEL: func.func @train_step_pp1(
// CHECK: %[[X0:.*]] = tfm.pipeline_p2p sends() to [] recvs from [-1] payloads [] -> [0, 0, 0]
// CHECK: tfm.block layer 1 ins(%[[X0]]
// CHECK: %[[L0:.*]]:5 = tfm.block head ins
// CHECK: tfm.block head backward
// CHECK: %[[D0:.*]]:17 = tfm.block layer 1 backward
// CHECK: %[[X1:.*]] = tfm.pipeline_p2p sends(%[[D0]]#0 : {{.*}}) to [-1] recvs from [-1] payloads [1, 0, 1] -> [0, 1, 0]
// CHECK: tfm.block layer 1 ins(%[[X1]]
// CHECK: %[[L1:.*]]:5 = tfm.block head ins
// CHECK: tfm.block head backward
// CHECK: tfm.block layer 1 backward
// CHECK: tfm.pipeline_p2p sends({{.*}}) to [-1] recvs from [] payloads [1, 1, 1] -> []
// The last stage returns each micro-batch's loss, then its gradients.
// CHECK: return %[[L0]]#0, %[[L1]]#0,
// CHECK-NOT: func.func @train_step(
// CHECK-NOT: func.func @forward(

// Forward only (evaluation), unbatched: one call per tensor.
// FWD-LABEL: func.func @forward_pp0(
// FWD: tfm.pipeline_p2p sends({{.*}}) to [1] recvs from [] payloads [0, 0, 0]
// FWD: tfm.pipeline_p2p sends({{.*}}) to [1] recvs from [] payloads [0, 1, 0]
// FWD-LABEL: func.func @forward_pp1(
// FWD: tfm.pipeline_p2p sends() to [] recvs from [-1] payloads [] -> [0, 0, 0]
// FWD: tfm.block head
// FWD: tfm.pipeline_p2p sends() to [] recvs from [-1] payloads [] -> [0, 1, 0]
// FWD: tfm.block head
// FWD: return {{.*}}, {{.*}} : tensor<f32{{.*}}>, tensor<f32
