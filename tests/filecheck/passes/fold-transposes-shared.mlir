// RUN: irkit-opt %s -p conv-layout,fold-transposes | filecheck %s

// SiLU between two convolutions, x * sigmoid(x): the first conv's transpose back to NCHW is
// read twice. fold-transposes gives each reader its own copy, sinks both below the
// activation, and the pair with the second conv's transpose into NHWC cancels: the
// activation runs channels-last, and one transpose is left at each end.
func.func @silu(%x: tensor<1x4x6x6xf32>, %w1: tensor<8x4x3x3xf32>, %w2: tensor<8x8x1x1xf32>) -> tensor<1x8x6x6xf32> {
  %h = graph.conv2d %x, %w1 padding = [1, 1, 1, 1] : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x6x6xf32>
  %s = graph.sigmoid %h : tensor<1x8x6x6xf32>
  %a = graph.mul %h, %s : (tensor<1x8x6x6xf32>, tensor<1x8x6x6xf32>) -> tensor<1x8x6x6xf32>
  %y = graph.conv2d %a, %w2 : (tensor<1x8x6x6xf32>, tensor<8x8x1x1xf32>) -> tensor<1x8x6x6xf32>
  func.return %y : tensor<1x8x6x6xf32>
}

// CHECK-LABEL: func.func @silu
// CHECK:         graph.transpose %x perm = [0, 2, 3, 1]
// CHECK:         %[[C:.*]] = graph.conv2d {{.*}} -> tensor<1x6x6x8xf32>
// CHECK-NEXT:    %[[S:.*]] = graph.sigmoid %[[C]] : tensor<1x6x6x8xf32>
// CHECK-NEXT:    graph.mul %[[C]], %[[S]] : (tensor<1x6x6x8xf32>, tensor<1x6x6x8xf32>)
// CHECK-NOT:     graph.transpose %{{.*}} : tensor<1x{{.*}}x8xf32> -> tensor<1x8x6x6xf32>
// CHECK:         graph.conv2d
// CHECK-NEXT:    graph.transpose %{{.*}} perm = [0, 3, 1, 2] : tensor<1x6x6x8xf32> -> tensor<1x8x6x6xf32>
// CHECK-NEXT:    func.return
