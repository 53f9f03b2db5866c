// RUN: irkit-opt %s -p conv-layout,fold-transposes | filecheck %s

// An exported Pad between two convolutions (as the ONNX importer writes it): zero slabs
// concatenated on the channels-first tensor, and a zero-width Pad as a broadcast_to its own
// shape. conv-layout wraps each conv in transposes; fold-transposes sinks the first conv's
// way back below the concatenations (the slabs permuted with it) and drops the identity
// broadcast, so that it meets the next conv's way in and the pair cancels: one transpose in,
// one out.
func.func @padded(%x: tensor<1x4x6x6xf32>, %w1: tensor<8x4x1x1xf32>, %w2: tensor<8x8x3x3xf32>, %w3: tensor<8x8x1x1xf32>) -> tensor<1x8x5x5xf32> {
  %h = graph.conv2d %x, %w1 : (tensor<1x4x6x6xf32>, tensor<8x4x1x1xf32>) -> tensor<1x8x6x6xf32>
  %0 = graph.constant dense<0.000000e+00> : tensor<1x8x1x6xf32>
  %1 = graph.concat %0, %h axis = 2 : (tensor<1x8x1x6xf32>, tensor<1x8x6x6xf32>) -> tensor<1x8x7x6xf32>
  %2 = graph.constant dense<0.000000e+00> : tensor<1x8x7x1xf32>
  %p = graph.concat %1, %2 axis = 3 : (tensor<1x8x7x6xf32>, tensor<1x8x7x1xf32>) -> tensor<1x8x7x7xf32>
  %c = graph.conv2d %p, %w2 : (tensor<1x8x7x7xf32>, tensor<8x8x3x3xf32>) -> tensor<1x8x5x5xf32>
  %q = graph.broadcast_to %c shape = [1, 8, 5, 5] : tensor<1x8x5x5xf32> -> tensor<1x8x5x5xf32>
  %y = graph.conv2d %q, %w3 : (tensor<1x8x5x5xf32>, tensor<8x8x1x1xf32>) -> tensor<1x8x5x5xf32>
  func.return %y : tensor<1x8x5x5xf32>
}

// CHECK-LABEL: func.func @padded
// CHECK:         graph.transpose %x perm = [0, 2, 3, 1]
// CHECK-NOT:     graph.broadcast_to
// CHECK:         graph.concat %{{.*}}, %{{.*}} axis = 1 : (tensor<1x1x6x8xf32>, tensor<1x6x6x8xf32>) -> tensor<1x7x6x8xf32>
// CHECK:         graph.concat %{{.*}}, %{{.*}} axis = 2 : (tensor<1x7x6x8xf32>, tensor<1x7x1x8xf32>) -> tensor<1x7x7x8xf32>
// CHECK-NOT:     graph.transpose %{{.*}} perm = [0, 2, 3, 1] : tensor<1x8
// CHECK:         graph.transpose %{{.*}} perm = [0, 3, 1, 2] : tensor<1x5x5x8xf32> -> tensor<1x8x5x5xf32>
// CHECK-NEXT:    func.return
