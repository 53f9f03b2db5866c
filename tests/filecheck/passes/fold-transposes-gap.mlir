// RUN: irkit-opt %s -p fold-transposes | filecheck %s

// A global average pool of a tensor transposed from channels-last pools the channels-last
// tensor itself: a mean over its spatial axes (1 and 2), keeping them, then the transpose
// of a tensor whose moved axes all have extent 1: a reshape.
func.func @pool(%y: tensor<1x6x6x8xf32>) -> tensor<1x8x1x1xf32> {
  %t = graph.transpose %y perm = [0, 3, 1, 2] : tensor<1x6x6x8xf32> -> tensor<1x8x6x6xf32>
  %p = graph.global_avg_pool %t : tensor<1x8x6x6xf32> -> tensor<1x8x1x1xf32>
  func.return %p : tensor<1x8x1x1xf32>
}

// CHECK-LABEL: func.func @pool
// CHECK:         %[[M:.*]] = graph.reduce_mean %y axes = [1, 2] keepdims = true : tensor<1x6x6x8xf32> -> tensor<1x1x1x8xf32>
// CHECK-NEXT:    %{{.*}} = graph.reshape %[[M]] : tensor<1x1x1x8xf32> -> tensor<1x8x1x1xf32>
// CHECK-NOT:     graph.transpose
// CHECK-NOT:     graph.global_avg_pool
