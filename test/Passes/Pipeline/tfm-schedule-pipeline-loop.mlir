// RUN: loom-import %examples/gpt-tiny.json --seq-length 8 -o %t.mlir
// RUN: loom-opt %t.mlir --tfm-plan="pp=2 num-microbatches=8" --tfm-differentiate --tfm-shard \
// RUN:   --tfm-schedule-pipeline --tfm-verify-pipeline-p2p | FileCheck %s

// The steady phase of 1F1B as a loop over the micro-batch offset: on pp
// rank 1 (no warmup) F0 B0 run before it, then 3 trips of F(1+i) B(1+i)
// F(2+i) B(2+i) for i = 0, 2, 4, then F7 B7. What a trip hands the next
// (the gradient sums, the stacked losses, the gradient it sends first) are
// iteration arguments; micro-batch inputs are sliced at run time; the
// markers and batches name their micro-batches relative to the index.
// CHECK-LABEL: func.func @train_step_pp1(
// CHECK-SAME: %[[TOKENS:[^:]*]]: tensor<8x1x8xi32
// CHECK: tfm.pipeline_step mb 0 chunk 0
// CHECK: tfm.pipeline_step backward mb 0 chunk 0
// CHECK: %[[C2:.*]] = arith.constant 2 : index
// CHECK: %[[C6:.*]] = arith.constant 6 : index
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: %[[LOOP:.*]]:21 = scf.for %[[I:.*]] = %[[C0]] to %[[C6]] step %[[C2]] iter_args(
// CHECK:   tfm.pipeline_p2p sends(%{{.*}}) to [-1] recvs from [-1] payloads [1, 0, 1] -> [0, 1, 0] shifted by %[[I]] on @dense axis "pp"
// CHECK:   tfm.microbatch_slice %{{.*}}[1 + %[[I]]]
// CHECK:   tfm.pipeline_step mb 1 + %[[I]] chunk 0
// CHECK:   call @train_step_head(
// CHECK:   tfm.microbatch_insert %{{.*}} into %{{.*}}[1 + %[[I]]]
// CHECK:   tfm.pipeline_step backward mb 1 + %[[I]] chunk 0
// CHECK:   call @train_step_head_backward_accumulate(
// CHECK:   tfm.pipeline_step mb 2 + %[[I]] chunk 0
// CHECK:   tfm.pipeline_step backward mb 2 + %[[I]] chunk 0
// CHECK:   scf.yield
// CHECK: tfm.pipeline_p2p sends(%[[LOOP]]#20 : {{.*}}) to [-1] recvs from [-1] payloads [1, 6, 1] -> [0, 7, 0] on @dense axis "pp"
// CHECK: tfm.pipeline_step mb 7 chunk 0
// CHECK: tfm.pipeline_step backward mb 7 chunk 0
// CHECK: tfm.grads_ready chunk 0
