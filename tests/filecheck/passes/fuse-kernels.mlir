// RUN: irkit-opt %s -p fuse-kernels --split-input-file | filecheck %s
// RUN: irkit-opt %s -p 'fuse-kernels{epilogues=false}' --split-input-file | filecheck %s --check-prefix=NOEPI
// RUN: irkit-opt %s -p 'fuse-kernels{concat-transposes=false implicit-im2col=false}' --split-input-file | filecheck %s --check-prefix=APART

// An elementwise chain with a broadcast operand becomes one kernel; only the result escapes.
// CHECK-LABEL: func.func @chain
// CHECK-NEXT:    %[[K:.*]] = graph.kernel : tensor<4x8xf32> {
// CHECK-NEXT:      %[[A:.*]] = graph.add %x, %b
// CHECK-NEXT:      %[[R:.*]] = graph.relu %[[A]]
// CHECK-NEXT:      %[[S:.*]] = graph.sigmoid %[[R]]
// CHECK-NEXT:      graph.yield %[[S]]
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[K]]
func.func @chain(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %a = graph.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r = graph.relu %a : tensor<4x8xf32>
  %s = graph.sigmoid %r : tensor<4x8xf32>
  func.return %s : tensor<4x8xf32>
}

// -----

// Bias and GELU are an epilogue of the first matmul; the second matmul does not take the
// first as a prologue (contractions never share a kernel).
// CHECK-LABEL: func.func @mlp
// CHECK-NEXT:    %[[K:.*]] = graph.kernel : tensor<2x16xf32> {
// CHECK-NEXT:      graph.matmul %x, %w1
// CHECK-NEXT:      graph.add
// CHECK-NEXT:      %[[H:.*]] = graph.gelu
// CHECK-NEXT:      graph.yield %[[H]]
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[Y:.*]] = graph.matmul %[[K]], %w2
// CHECK-NEXT:    func.return %[[Y]]
// NOEPI-LABEL: func.func @mlp
// NOEPI-NEXT:    graph.matmul %x, %w1
// NOEPI-NEXT:    graph.kernel : tensor<2x16xf32> {
// NOEPI-NEXT:      graph.add
// NOEPI-NEXT:      graph.gelu
func.func @mlp(%x: tensor<2x8xf32>, %w1: tensor<8x16xf32>, %b1: tensor<16xf32>, %w2: tensor<16x8xf32>) -> tensor<2x8xf32> {
  %m = graph.matmul %x, %w1 : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32>
  %a = graph.add %m, %b1 : (tensor<2x16xf32>, tensor<16xf32>) -> tensor<2x16xf32>
  %h = graph.gelu %a : tensor<2x16xf32>
  %y = graph.matmul %h, %w2 : (tensor<2x16xf32>, tensor<16x8xf32>) -> tensor<2x8xf32>
  func.return %y : tensor<2x8xf32>
}

// -----

// A softmax written out of primitives is one kernel, reductions included.
// CHECK-LABEL: func.func @softmax
// CHECK-NEXT:    %[[K:.*]] = graph.kernel : tensor<4x8xf32> {
// CHECK-NEXT:      graph.reduce_max
// CHECK-NEXT:      graph.sub
// CHECK-NEXT:      graph.exp
// CHECK-NEXT:      graph.reduce_sum
// CHECK-NEXT:      graph.div
// CHECK-NEXT:      graph.yield
// CHECK-NEXT:    }
func.func @softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %m = graph.reduce_max %x axes = [1] keepdims = true : tensor<4x8xf32> -> tensor<4x1xf32>
  %d = graph.sub %x, %m : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %e = graph.exp %d : tensor<4x8xf32>
  %s = graph.reduce_sum %e axes = [1] keepdims = true : tensor<4x8xf32> -> tensor<4x1xf32>
  %y = graph.div %e, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// -----

// Fusing %a with %c would put the matmul %m between two halves of one kernel (a cycle):
// %a stays alone, and %c joins the matmul as its epilogue. %a is also an output.
// CHECK-LABEL: func.func @no_cycle
// CHECK-NEXT:    %[[A:.*]] = graph.relu %x
// CHECK-NEXT:    %[[K:.*]] = graph.kernel : tensor<4x4xf32> {
// CHECK-NEXT:      %[[M:.*]] = graph.matmul %[[A]], %w
// CHECK-NEXT:      %[[C:.*]] = graph.add %[[M]], %[[A]]
// CHECK-NEXT:      graph.yield %[[C]]
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[K]], %[[A]]
func.func @no_cycle(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %a = graph.relu %x : tensor<4x4xf32>
  %m = graph.matmul %a, %w : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %c = graph.add %m, %a : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  func.return %c, %a : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// A view feeding a pool joins the pool's kernel (the pool reads the matmul's [pixels,
// channels] result as NHWC, with no reshaped copy); the matmul does not take the reshape
// as an epilogue, and the transpose after the pool stays out of its kernel.
// CHECK-LABEL: func.func @pool_view
// CHECK:         graph.matmul
// CHECK:         %[[K:.*]] = graph.kernel : tensor<2x2x2x4xf32> {
// CHECK-NEXT:      %[[V:.*]] = graph.reshape
// CHECK-NEXT:      %[[P:.*]] = graph.max_pool2d %[[V]]
// CHECK-NEXT:      graph.yield %[[P]]
// CHECK-NEXT:    }
// CHECK-NEXT:    graph.transpose %[[K]]
func.func @pool_view(%x: tensor<32x8xf32>, %w: tensor<8x4xf32>) -> tensor<2x4x2x2xf32> {
  %m = graph.matmul %x, %w : (tensor<32x8xf32>, tensor<8x4xf32>) -> tensor<32x4xf32>
  %v = graph.reshape %m : tensor<32x4xf32> -> tensor<2x4x4x4xf32>
  %p = graph.max_pool2d %v kernel = [2, 2] strides = [2, 2] layout = "nhwc" : tensor<2x4x4x4xf32> -> tensor<2x2x2x4xf32>
  %t = graph.transpose %p perm = [0, 3, 1, 2] : tensor<2x2x2x4xf32> -> tensor<2x4x2x2xf32>
  func.return %t : tensor<2x4x2x2xf32>
}

// -----

// An implicit im2col joins the matmul reading it (the lowering reads the patches in place);
// the padding concat takes the layout transpose in with it. With concat-transposes=false,
// the transpose moving the innermost axis stays a kernel of its own (cpu-tile-transpose
// tiles it); with implicit-im2col=false, the im2col too.
// CHECK-LABEL: func.func @implicit
// CHECK:         %[[P:.*]] = graph.kernel : tensor<1x4x4x2xf32> {
// CHECK-NEXT:      graph.transpose %x
// CHECK-NEXT:      graph.concat
// CHECK:         graph.kernel : tensor<4x8xf32> {
// CHECK-NEXT:      %[[C:.*]] = graph.im2col %[[P]]
// CHECK-NEXT:      graph.matmul %[[C]], %w
// APART-LABEL: func.func @implicit
// APART:         %[[T:.*]] = graph.transpose %x
// APART:         %[[P:.*]] = graph.concat %z, %[[T]], %z
// APART-NEXT:    %[[C:.*]] = graph.im2col %[[P]]
// APART-NEXT:    graph.matmul %[[C]], %w
func.func @implicit(%x: tensor<1x2x2x4xf32>, %w: tensor<18x8xf32>) -> tensor<4x8xf32> {
  %t = graph.transpose %x perm = [0, 2, 3, 1] : tensor<1x2x2x4xf32> -> tensor<1x2x4x2xf32>
  %z = graph.constant dense<0.000000e+00> : tensor<1x1x4x2xf32>
  %p = graph.concat %z, %t, %z axis = 1 : (tensor<1x1x4x2xf32>, tensor<1x2x4x2xf32>, tensor<1x1x4x2xf32>) -> tensor<1x4x4x2xf32>
  %c = graph.im2col %p kernel = [3, 3] {irkit.implicit} : tensor<1x4x4x2xf32> -> tensor<4x18xf32>
  %m = graph.matmul %c, %w : (tensor<4x18xf32>, tensor<18x8xf32>) -> tensor<4x8xf32>
  func.return %m : tensor<4x8xf32>
}
