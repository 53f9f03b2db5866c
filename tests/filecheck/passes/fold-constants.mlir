// RUN: irkit-opt %s -p fold-constants | filecheck %s
// RUN: irkit-opt %s -p 'fold-constants{max-elements=4}' | filecheck %s --check-prefix=SMALL

// A weight transposed and scaled on every call (as an exported Gemm with transB=1 and a
// folded scale would have it) becomes one constant in the layout the matmul reads.
builtin.module {
  func.func @chain(%x: tensor<3x4xf32>) -> tensor<3x2xf32> {
    %w = graph.constant dense<[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]> : tensor<2x4xf32>
    %t = graph.transpose %w perm = [1, 0] : tensor<2x4xf32> -> tensor<4x2xf32>
    %h = graph.constant dense<0.5> : tensor<f32>
    %s = graph.mul %t, %h : (tensor<4x2xf32>, tensor<f32>) -> tensor<4x2xf32>
    %y = graph.matmul %x, %s : (tensor<3x4xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
    func.return %y : tensor<3x2xf32>
  }
}

// CHECK-LABEL: func.func @chain
// CHECK-NEXT:    %[[W:.*]] = graph.constant dense<{{\[}}[5.000000e-01, 2.500000e+00], [1.000000e+00, 3.000000e+00], [1.500000e+00, 3.500000e+00], [2.000000e+00, 4.000000e+00]]> : tensor<4x2xf32>
// CHECK-NEXT:    %{{.*}} = graph.matmul %x, %[[W]]
// CHECK-NOT:     graph.transpose
// CHECK-NOT:     graph.mul

// Results over max-elements stay as they were.
// SMALL:         graph.transpose
// SMALL:         graph.mul
