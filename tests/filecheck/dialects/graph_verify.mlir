// The graph dialect's verifiers on hand-written MLIR: one line at file:line:col per case.
// RUN: irkit-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @f(%x: tensor<4x8xf32>, %w: tensor<9x3xf32>) -> tensor<4x3xf32> {
  %0 = graph.matmul %x, %w : (tensor<4x8xf32>, tensor<9x3xf32>) -> tensor<4x3xf32>
// CHECK: graph_verify.mlir:[[# @LINE - 1]]:3: error: graph.matmul: matmul contraction mismatch: lhs [4, 8] vs rhs [9, 3]
  func.return %0 : tensor<4x3xf32>
}

// -----
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = graph.softmax %x : tensor<4x8xf32>
  %1 = graph.add %0, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x9xf32>
// CHECK: graph_verify.mlir:[[# @LINE - 1]]:3: error: graph.add: result type tensor<4x9xf32> does not match the inferred type tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----
func.func @f(%x: tensor<4x8xi32>) -> tensor<4x8xi32> {
  %0 = graph.exp %x : tensor<4x8xi32>
// CHECK: graph_verify.mlir:[[# @LINE - 1]]:3: error: graph.exp: operand #0 is i32 (int); graph.exp takes float values
  func.return %0 : tensor<4x8xi32>
}

// -----
func.func @f(%x: tensor<4x8xi16>) -> tensor<4x8xi16> {
  %0 = graph.relu %x : tensor<4x8xi16>
// CHECK: graph_verify.mlir:[[# @LINE - 1]]:3: error: graph.relu: operand #0 has element type i16; graph values are f16, bf16, f32, f64, i64, i32, i1, f8e4m3 or f8e5m2
  func.return %0 : tensor<4x8xi16>
}

// -----
func.func @f(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %0 = graph.transpose %x perm = [0, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
// CHECK: graph_verify.mlir:[[# @LINE - 1]]:3: error: graph.transpose: perm [0, 0] is not a permutation of the 2 axes
  func.return %0 : tensor<8x4xf32>
}

// -----
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = graph.frob %x : tensor<4x8xf32>
// CHECK: graph_verify.mlir:[[# @LINE - 1]]:19: error: Operation graph.frob is not registered
  func.return %0 : tensor<4x8xf32>
}

// -----
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "graph.add"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: graph_verify.mlir:[[# @LINE - 1]]:3: error: graph.add: Expected 2 operands, but got 1
  func.return %0 : tensor<4x8xf32>
}

// -----
func.func @f(%x: tensor<4x8xf32>) -> tensor<2x15xf32> {
  %0 = graph.reshape %x : tensor<4x8xf32> -> tensor<2x15xf32>
// CHECK: graph_verify.mlir:[[# @LINE - 1]]:3: error: graph.reshape: reshape must keep the element count
  func.return %0 : tensor<2x15xf32>
}

// -----
func.func @f(%x: tensor<1x3x8x8xf32>) -> tensor<1x3x4x4xf32> {
  %0 = graph.max_pool2d %x kernel = [2, 2] padding = [2, 0, 0, 0] : tensor<1x3x8x8xf32> -> tensor<1x3x4x4xf32>
// CHECK: graph_verify.mlir:[[# @LINE - 1]]:3: error: graph.max_pool2d: padding [2, 0, 0, 0] must be >= 0 and smaller than the kernel [2, 2]
  func.return %0 : tensor<1x3x4x4xf32>
}

// -----
func.func @f(%x: tensor<1x8x8x3xf32>) -> tensor<1x4x4x3xf32> {
  %0 = graph.avg_pool2d %x kernel = [2, 2] strides = [2, 2] layout = "hwcn" : tensor<1x8x8x3xf32> -> tensor<1x4x4x3xf32>
// CHECK: graph_verify.mlir:[[# @LINE - 1]]:3: error: graph.avg_pool2d: avg_pool2d layout must be one of nchw, nhwc, got 'hwcn'
  func.return %0 : tensor<1x4x4x3xf32>
}

// -----
func.func @f(%x: tensor<4x8xf32>, %g: tensor<4xf32>) -> tensor<4x8xf32> {
  %0 = graph.layer_norm %x, %g, %g : (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4x8xf32>
// CHECK: graph_verify.mlir:[[# @LINE - 1]]:3: error: graph.layer_norm: layer_norm gamma [4] must have shape [8]
  func.return %0 : tensor<4x8xf32>
}
