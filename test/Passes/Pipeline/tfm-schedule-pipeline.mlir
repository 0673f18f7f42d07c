// RUN: loom-import %examples/gpt-tiny.json --seq-length 8 -o %t.mlir
// RUN: loom-opt %t.mlir --tfm-plan="pp=2 num-microbatches=2" --tfm-differentiate --tfm-shard \
// RUN:   --tfm-schedule-pipeline --tfm-verify-pipeline-p2p | FileCheck %s
// RUN: loom-opt %t.mlir --tfm-plan="pp=2 num-microbatches=2 p2p-mode=unbatched" --tfm-shard \
// RUN:   --tfm-schedule-pipeline | FileCheck %s --check-prefix=FWD

// Two layers over pp 2, two micro-batches, 1F1B: pp rank 0 (embedding,
// layer 0) runs F0 F1 B0 B1, pp rank 1 (layer 1, head) F0 B0 F1 B1, with
// Megatron's p2p calls between the steps as one batch each. Each block is
// one private function, called once per micro-batch.
// CHECK-LABEL: func.func @forward_pp0(
// CHECK-LABEL: func.func @train_step_pp0(
// CHECK-SAME: tensor<2x1x8xi32, #tfm.dist<@dense>> {tfm.input = "tokens", tfm.microbatches = 2 : i64}
// CHECK-SAME: attributes {tfm.entry = "loom_train_step_pp0", tfm.pipeline_rank = 0 : i64}
// CHECK: tfm.pipeline_step mb 0 chunk 0
// CHECK: call @train_step_embedding(
// CHECK: %[[H0:.*]]:11 = call @train_step_layer0(
// CHECK: tfm.pipeline_p2p sends(%[[H0]]#0 : {{.*}}) to [1] recvs from [] payloads [0, 0, 0] -> [] on @dense axis "pp"
// CHECK: tfm.pipeline_step mb 1 chunk 0
// CHECK: call @train_step_embedding(
// CHECK: call @train_step_layer0(
// send_forward_recv_backward: activation of micro-batch 1 out, gradient of 0 in.
// CHECK: %[[G0:.*]] = tfm.pipeline_p2p sends({{.*}}) to [1] recvs from [1] payloads [0, 1, 0] -> [1, 0, 1]
// CHECK: tfm.pipeline_step backward mb 0 chunk 0
// CHECK: call @train_step_layer0_backward(%[[G0]],
// CHECK: call @train_step_embedding_backward(
// CHECK: %[[G1:.*]] = tfm.pipeline_p2p sends() to [] recvs from [1] payloads [] -> [1, 1, 1]
// Later micro-batches call the blocks' accumulating variants, which add
// the gradients to the sums of the earlier ones (this stage's only).
// CHECK: tfm.pipeline_step backward mb 1 chunk 0
// CHECK: call @train_step_layer0_backward_accumulate(%[[G1]],
// CHECK: %[[E:.*]]:2 = call @train_step_embedding_backward_accumulate(
// Both micro-batches done: the chunk's gradients are final.
// CHECK-NEXT: tfm.grads_ready chunk 0 of %[[E]]#0, %[[E]]#1,
// CHECK: return %[[E]]#0, %[[E]]#1,
// CHECK-SAME: tensor<512x64xf32
// CHECK-LABEL: func.func private @train_step_embedding(
// CHECK-LABEL: func.func private @train_step_layer0(
// CHECK: tfm.get_param @transformer.h.0.
// CHECK: return
// CHECK-LABEL: func.func private @train_step_layer0_backward_accumulate(
// CHECK: tfm.add
// CHECK: return

// CHECK-LABEL: func.func @train_step_pp1(
// The last stage writes every micro-batch's loss into one stacked result.
// CHECK: %[[E:.*]] = tfm.empty : tensor<2xf32
// CHECK: %[[X0:.*]] = tfm.pipeline_p2p sends() to [] recvs from [-1] payloads [] -> [0, 0, 0]
// CHECK: call @train_step_layer1(%[[X0]])
// CHECK: %[[L0:.*]]:5 = call @train_step_head(
// CHECK: %[[S0:.*]] = tfm.microbatch_insert %[[L0]]#0 into %[[E]][0]
// CHECK: call @train_step_head_backward(
// CHECK: %[[D0:.*]]:17 = call @train_step_layer1_backward(
// CHECK: %[[X1:.*]] = tfm.pipeline_p2p sends(%[[D0]]#0 : {{.*}}) to [-1] recvs from [-1] payloads [1, 0, 1] -> [0, 1, 0]
// CHECK: call @train_step_layer1(%[[X1]])
// CHECK: %[[L1:.*]]:5 = call @train_step_head(
// CHECK: %[[S1:.*]] = tfm.microbatch_insert %[[L1]]#0 into %[[S0]][1]
// CHECK: call @train_step_head_backward_accumulate(
// CHECK: call @train_step_layer1_backward_accumulate(
// CHECK: tfm.pipeline_p2p sends({{.*}}) to [-1] recvs from [] payloads [1, 1, 1] -> []
// The losses, then the gradients.
// CHECK: return %[[S1]],
// CHECK-NOT: func.func @train_step(
// CHECK-NOT: func.func @forward(

// Forward only (evaluation), unbatched: one call per tensor.
// FWD-LABEL: func.func @forward_pp0(
// FWD: tfm.pipeline_p2p sends({{.*}}) to [1] recvs from [] payloads [0, 0, 0]
// FWD: tfm.pipeline_p2p sends({{.*}}) to [1] recvs from [] payloads [0, 1, 0]
// FWD-LABEL: func.func @forward_pp1(
// FWD: tfm.pipeline_p2p sends() to [] recvs from [-1] payloads [] -> [0, 0, 0]
// FWD: call @forward_head(
// FWD: tfm.pipeline_p2p sends() to [] recvs from [-1] payloads [] -> [0, 1, 0]
// FWD: call @forward_head(
// FWD: return {{.*}} : tensor<2xf32
// FWD-NOT: tfm.grads_ready

// Interleaved (4 layers, pp 2 x vpp 2): pp rank 0 holds chunks 0 (embedding,
// layer 0) and 1 (layer 2). Chunk 1's backward ends first, and its
// gradients are signalled then, while chunk 0 still runs (the rank program
// starts their data-parallel reduction there).
// RUN: sed 's/"n_layer": 2/"n_layer": 4/' %examples/gpt-tiny.json > %t4.json
// RUN: loom-import %t4.json --seq-length 8 -o %t4.mlir
// RUN: loom-opt %t4.mlir --tfm-plan="pp=2 vpp=2 num-microbatches=2" --tfm-differentiate --tfm-shard \
// RUN:   --tfm-schedule-pipeline | FileCheck %s --check-prefix=VPP
// VPP-LABEL: func.func @train_step_pp0(
// VPP: tfm.pipeline_step backward mb 1 chunk 1
// VPP-NEXT: %[[C1:.*]]:17 = call @train_step_layer2_backward_accumulate(
// VPP-NEXT: tfm.grads_ready chunk 1 of %[[C1]]#1, {{.*}}, %[[C1]]#16 :
// VPP: tfm.pipeline_step backward mb 0 chunk 0
// VPP: tfm.pipeline_step backward mb 1 chunk 0
// VPP: %[[C0:.*]]:17 = call @train_step_layer0_backward_accumulate(
// VPP-NEXT: %[[E:.*]]:2 = call @train_step_embedding_backward_accumulate(
// VPP-NEXT: tfm.grads_ready chunk 0 of %[[E]]#0, %[[E]]#1, %[[C0]]#1,
// VPP-NEXT: return
