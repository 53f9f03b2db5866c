// RUN: irkit-opt %s -p decompose-composites --split-input-file | filecheck %s

// Softmax subtracts the row maximum before exp (never overflows), then multiplies by the
// reciprocal of the sum (one division per row).
// CHECK-LABEL: func.func @softmax
// CHECK-NEXT:    %[[MAX:.*]] = graph.reduce_max %x axes = [1] keepdims = true
// CHECK-NEXT:    %[[D:.*]] = graph.sub %x, %[[MAX]]
// CHECK-NEXT:    %[[E:.*]] = graph.exp %[[D]]
// CHECK-NEXT:    %[[S:.*]] = graph.reduce_sum %[[E]] axes = [1] keepdims = true
// CHECK-NEXT:    %[[ONE:.*]] = graph.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[INV:.*]] = graph.div %[[ONE]], %[[S]]
// CHECK-NEXT:    %[[Y:.*]] = graph.mul %[[E]], %[[INV]]
// CHECK-NEXT:    func.return %[[Y]]
// CHECK-NOT:     graph.softmax
func.func @softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = graph.softmax %x : tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// -----

// Layer norm is two-pass: the variance is the mean of squared deviations from the mean,
// whose rounding is corrected by the mean of the deviations.
// CHECK-LABEL: func.func @layer_norm
// CHECK-NEXT:    %[[M:.*]] = graph.reduce_mean %x axes = [1, 2] keepdims = true
// CHECK-NEXT:    %[[C:.*]] = graph.sub %x, %[[M]]
// CHECK-NEXT:    %[[CM:.*]] = graph.reduce_mean %[[C]] axes = [1, 2] keepdims = true
// CHECK-NEXT:    %[[D:.*]] = graph.sub %[[C]], %[[CM]]
// CHECK-NEXT:    %[[SQ:.*]] = graph.mul %[[D]], %[[D]]
// CHECK-NEXT:    %[[V:.*]] = graph.reduce_mean %[[SQ]] axes = [1, 2] keepdims = true
// CHECK-NEXT:    %[[EPS:.*]] = graph.constant dense<1.000000e-03> : tensor<f32>
// CHECK-NEXT:    %[[VE:.*]] = graph.add %[[V]], %[[EPS]]
// CHECK-NEXT:    %[[R:.*]] = graph.rsqrt %[[VE]]
// CHECK-NEXT:    %[[N:.*]] = graph.mul %[[D]], %[[R]]
// CHECK-NEXT:    %[[G:.*]] = graph.mul %[[N]], %g
// CHECK-NEXT:    %[[Y:.*]] = graph.add %[[G]], %b
// CHECK-NEXT:    func.return %[[Y]]
func.func @layer_norm(%x: tensor<2x3x5xf32>, %g: tensor<3x5xf32>, %b: tensor<3x5xf32>) -> tensor<2x3x5xf32> {
  %y = graph.layer_norm %x, %g, %b axes = [-2, -1] eps = 1.000000e-03 : (tensor<2x3x5xf32>, tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<2x3x5xf32>
  func.return %y : tensor<2x3x5xf32>
}

// -----

// Batch norm folds its per-channel parameters into one factor, broadcast as [C, 1, 1].
// CHECK-LABEL: func.func @batch_norm
// CHECK-COUNT-4: graph.reshape {{.*}} : tensor<3xf32> -> tensor<3x1x1xf32>
// CHECK:         graph.rsqrt
// CHECK:         graph.sub %x
// CHECK-NOT:     graph.batch_norm
func.func @batch_norm(%x: tensor<2x3x4x4xf32>, %s: tensor<3xf32>, %b: tensor<3xf32>, %m: tensor<3xf32>, %v: tensor<3xf32>) -> tensor<2x3x4x4xf32> {
  %y = graph.batch_norm %x, %s, %b, %m, %v : (tensor<2x3x4x4xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x4x4xf32>
  func.return %y : tensor<2x3x4x4xf32>
}
