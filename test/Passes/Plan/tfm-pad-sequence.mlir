// RUN: loom-import %examples/gpt-tiny.json --seq-length 10 -o %t.mlir
// RUN: loom-opt %t.mlir --tfm-set-plan="cp=2" --tfm-pad-sequence | FileCheck %s
// RUN: loom-opt %t.mlir --tfm-set-plan="cp=2 tp=2 sp=true" --tfm-pad-sequence | FileCheck %s --check-prefix=SP
// RUN: loom-opt %t.mlir --tfm-set-plan="tp=2 sp=true" --tfm-pad-sequence | FileCheck %s --check-prefix=NONE
// RUN: loom-opt %t.mlir --tfm-set-plan="cp=2" --tfm-pad-sequence --tfm-differentiate | FileCheck %s --check-prefix=TRAIN

// cp 2 cuts the sequence into 4 chunks: 10 tokens become 12. The batch
// inputs, everything computed from them (through the blocks) and each
// attention's log-sum-exp (the sequence at dim 2) get 12; parameters and the
// loss keep their shapes; the model records the padded length.
// CHECK: tfm.model = {{{.*}}padded_seq_length = 12 : i64, seq_length = 10 : i64
// CHECK: func.func @forward(%{{.*}}: tensor<1x12xi32> {tfm.input = "tokens"}, %{{.*}}: tensor<1x12xi32> {tfm.input = "labels"}, %{{.*}}: tensor<1x12xf32> {tfm.input = "loss_mask"}) -> tensor<f32>
// CHECK: tfm.block embedding ins(%{{.*}} : tensor<1x12xi32>) -> tensor<1x12x64xf32>, tensor<1x12xi32>
// CHECK: tfm.position_ids %{{.*}} : tensor<1x12xi32>
// CHECK: tfm.embedding %{{.*}}, %{{.*}} : tensor<1x12xi32>, tensor<64x64xf32> -> tensor<1x12x64xf32>
// CHECK: tfm.attention {{.*}} -> tensor<1x12x64xf32>, tensor<1x4x12xf32>
// CHECK: tfm.cross_entropy {{.*}} : tensor<1x12x512xf32>, tensor<1x12xi32>, tensor<1x12xf32> -> tensor<f32>

// With SP, each cp rank's piece is split over tp too: a multiple of 8.
// SP: padded_seq_length = 16 : i64
// SP: func.func @forward(%{{.*}}: tensor<1x16xi32>

// SP alone needs a multiple of tp, which 10 is: nothing changes.
// NONE-NOT: padded_seq_length
// NONE: func.func @forward(%{{.*}}: tensor<1x10xi32>

// The backward, built after, follows the padded forward.
// TRAIN: func.func @train_step(%{{.*}}: tensor<1x12xi32> {tfm.input = "tokens"}
// TRAIN: tfm.attention_grad {{.*}} : tensor<1x12x64xf32>, tensor<1x12x64xf32>, tensor<1x12x64xf32>, tensor<1x4x12xf32>
