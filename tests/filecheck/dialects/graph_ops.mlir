// Every graph op in its custom syntax; printed, re-parsed, and through the generic form.
// RUN: irkit-opt %s | irkit-opt | filecheck %s
// RUN: irkit-opt %s --print-op-generic | irkit-opt | filecheck %s
// RUN: irkit-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// CHECK-LABEL: func.func @contractions
func.func @contractions(%a: tensor<4x8xf32>, %b: tensor<8x3xf32>, %c: tensor<2x4x8xf32>, %d: tensor<1x8x5xf32>, %x: tensor<1x4x9x9xf32>, %w: tensor<6x2x3x3xf32>, %xl: tensor<1x9x9x4xf32>, %wl: tensor<3x3x2x6xf32>) -> (tensor<4x3xf32>, tensor<2x4x5xf32>, tensor<1x6x5x3xf32>, tensor<1x5x3x6xf32>, tensor<15x36xf32>) {
  // CHECK: graph.matmul %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  // GENERIC: "graph.matmul"(%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %0 = graph.matmul %a, %b : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  // CHECK: graph.batch_matmul %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<1x8x5xf32>) -> tensor<2x4x5xf32>
  %1 = graph.batch_matmul %c, %d : (tensor<2x4x8xf32>, tensor<1x8x5xf32>) -> tensor<2x4x5xf32>
  // CHECK: graph.conv2d %{{.*}}, %{{.*}} strides = [2, 2] padding = [1, 0, 1, 0] dilations = [1, 2] groups = 2 : (tensor<1x4x9x9xf32>, tensor<6x2x3x3xf32>) -> tensor<1x6x5x3xf32>
  // GENERIC: "graph.conv2d"(%{{.*}}, %{{.*}}) <{strides = array<i64: 2, 2>, padding = array<i64: 1, 0, 1, 0>, dilations = array<i64: 1, 2>, groups = 2 : i64, layout = "nchw"}>
  %2 = graph.conv2d %x, %w strides = [2, 2] padding = [1, 0, 1, 0] dilations = [1, 2] groups = 2 : (tensor<1x4x9x9xf32>, tensor<6x2x3x3xf32>) -> tensor<1x6x5x3xf32>
  // CHECK: graph.conv2d %{{.*}}, %{{.*}} strides = [2, 2] padding = [1, 0, 1, 0] dilations = [1, 2] groups = 2 layout = "nhwc" : (tensor<1x9x9x4xf32>, tensor<3x3x2x6xf32>) -> tensor<1x5x3x6xf32>
  %3 = graph.conv2d %xl, %wl strides = [2, 2] padding = [1, 0, 1, 0] dilations = [1, 2] groups = 2 layout = "nhwc" : (tensor<1x9x9x4xf32>, tensor<3x3x2x6xf32>) -> tensor<1x5x3x6xf32>
  // CHECK: graph.im2col %{{.*}} kernel = [3, 3] strides = [2, 2] padding = [1, 0, 1, 0] dilations = [1, 2] : tensor<1x9x9x4xf32> -> tensor<15x36xf32>
  // GENERIC: "graph.im2col"(%{{.*}}) <{kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 0, 1, 0>, dilations = array<i64: 1, 2>}>
  %4 = graph.im2col %xl kernel = [3, 3] strides = [2, 2] padding = [1, 0, 1, 0] dilations = [1, 2] : tensor<1x9x9x4xf32> -> tensor<15x36xf32>
  func.return %0, %1, %2, %3, %4 : tensor<4x3xf32>, tensor<2x4x5xf32>, tensor<1x6x5x3xf32>, tensor<1x5x3x6xf32>, tensor<15x36xf32>
}

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<4x8xf16>, %b: tensor<8xf16>) -> tensor<4x8xf16> {
  // CHECK: graph.add %{{.*}}, %{{.*}} : (tensor<4x8xf16>, tensor<8xf16>) -> tensor<4x8xf16>
  %0 = graph.add %a, %b : (tensor<4x8xf16>, tensor<8xf16>) -> tensor<4x8xf16>
  // CHECK: graph.sub
  %1 = graph.sub %0, %b : (tensor<4x8xf16>, tensor<8xf16>) -> tensor<4x8xf16>
  // CHECK: graph.mul
  %2 = graph.mul %1, %a : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xf16>
  // CHECK: graph.div
  %3 = graph.div %2, %a : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xf16>
  // CHECK: graph.max
  %4 = graph.max %3, %a : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xf16>
  // CHECK: graph.min
  %5 = graph.min %4, %a : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xf16>
  // CHECK: graph.pow
  %6 = graph.pow %5, %b : (tensor<4x8xf16>, tensor<8xf16>) -> tensor<4x8xf16>
  // CHECK: graph.neg %{{.*}} : tensor<4x8xf16>
  %7 = graph.neg %6 : tensor<4x8xf16>
  // CHECK: graph.abs
  %8 = graph.abs %7 : tensor<4x8xf16>
  // CHECK: graph.relu
  %9 = graph.relu %8 : tensor<4x8xf16>
  // CHECK: graph.leaky_relu %{{.*}} alpha = 2.000000e-01 : tensor<4x8xf16>
  %10 = graph.leaky_relu %9 alpha = 0.2 : tensor<4x8xf16>
  // CHECK: graph.leaky_relu %{{.*}} : tensor<4x8xf16>
  %11 = graph.leaky_relu %10 : tensor<4x8xf16>
  // CHECK: graph.gelu %{{.*}} : tensor<4x8xf16>
  %12 = graph.gelu %11 : tensor<4x8xf16>
  // CHECK: graph.gelu %{{.*}} {approximate = "tanh"} : tensor<4x8xf16>
  // GENERIC: "graph.gelu"(%{{.*}}) <{approximate = "tanh"}> : (tensor<4x8xf16>) -> tensor<4x8xf16>
  %13 = graph.gelu %12 {approximate = "tanh"} : tensor<4x8xf16>
  // CHECK: graph.sigmoid
  %14 = graph.sigmoid %13 : tensor<4x8xf16>
  // CHECK: graph.tanh
  %15 = graph.tanh %14 : tensor<4x8xf16>
  // CHECK: graph.exp
  %16 = graph.exp %15 : tensor<4x8xf16>
  // CHECK: graph.log
  %17 = graph.log %16 : tensor<4x8xf16>
  // CHECK: graph.sqrt
  %18 = graph.sqrt %17 : tensor<4x8xf16>
  // CHECK: graph.rsqrt
  %19 = graph.rsqrt %18 : tensor<4x8xf16>
  // CHECK: graph.erf
  %20 = graph.erf %19 : tensor<4x8xf16>
  // CHECK: graph.cast %{{.*}} : tensor<4x8xf16> -> tensor<4x8xbf16>
  %21 = graph.cast %20 : tensor<4x8xf16> -> tensor<4x8xbf16>
  // CHECK: graph.cast %{{.*}} : tensor<4x8xbf16> -> tensor<4x8xf16>
  %22 = graph.cast %21 : tensor<4x8xbf16> -> tensor<4x8xf16>
  func.return %22 : tensor<4x8xf16>
}

// CHECK-LABEL: func.func @reductions
func.func @reductions(%a: tensor<4x8x16xf32>, %g: tensor<8x16xf32>, %c: tensor<8xf32>) -> (tensor<4xf32>, tensor<4x1x16xf32>, tensor<4x1x1xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) {
  // CHECK: graph.reduce_sum %{{.*}} axes = [1, 2] : tensor<4x8x16xf32> -> tensor<4xf32>
  // GENERIC: "graph.reduce_sum"(%{{.*}}) <{axes = array<i64: 1, 2>, keepdims = false}>
  %0 = graph.reduce_sum %a axes = [1, 2] : tensor<4x8x16xf32> -> tensor<4xf32>
  // CHECK: graph.reduce_max %{{.*}} axes = [-2] keepdims = true : tensor<4x8x16xf32> -> tensor<4x1x16xf32>
  %1 = graph.reduce_max %a axes = [-2] keepdims = true : tensor<4x8x16xf32> -> tensor<4x1x16xf32>
  // CHECK: graph.reduce_mean %{{.*}} axes = [1, 2] keepdims = true
  %2 = graph.reduce_mean %a axes = [1, 2] keepdims = true : tensor<4x8x16xf32> -> tensor<4x1x1xf32>
  // CHECK: graph.softmax %{{.*}} : tensor<4x8x16xf32>
  %3 = graph.softmax %a : tensor<4x8x16xf32>
  // CHECK: graph.softmax %{{.*}} axis = 1 : tensor<4x8x16xf32>
  %4 = graph.softmax %3 axis = 1 : tensor<4x8x16xf32>
  // CHECK: graph.layer_norm %{{.*}}, %{{.*}}, %{{.*}} axes = [1, 2] eps = 1.000000e-06 : (tensor<4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<4x8x16xf32>
  %5 = graph.layer_norm %4, %g, %g axes = [1, 2] eps = 1.0e-06 : (tensor<4x8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<4x8x16xf32>
  // CHECK: graph.batch_norm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x8x16xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8x16xf32>
  %6 = graph.batch_norm %5, %c, %c, %c, %c : (tensor<4x8x16xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8x16xf32>
  func.return %0, %1, %2, %4, %5, %6 : tensor<4xf32>, tensor<4x1x16xf32>, tensor<4x1x1xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>
}

// CHECK-LABEL: func.func @pooling
func.func @pooling(%x: tensor<2x3x8x8xf32>) -> (tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>, tensor<2x3x1x1xf32>) {
  // CHECK: graph.max_pool2d %{{.*}} kernel = [2, 2] strides = [2, 2] : tensor<2x3x8x8xf32> -> tensor<2x3x4x4xf32>
  %0 = graph.max_pool2d %x kernel = [2, 2] strides = [2, 2] : tensor<2x3x8x8xf32> -> tensor<2x3x4x4xf32>
  // CHECK: graph.avg_pool2d %{{.*}} kernel = [3, 3] strides = [2, 2] padding = [1, 1, 0, 0] count_include_pad = true : tensor<2x3x8x8xf32> -> tensor<2x3x4x4xf32>
  %1 = graph.avg_pool2d %x kernel = [3, 3] strides = [2, 2] padding = [1, 1, 0, 0] count_include_pad = true : tensor<2x3x8x8xf32> -> tensor<2x3x4x4xf32>
  // CHECK: graph.global_avg_pool %{{.*}} : tensor<2x3x8x8xf32> -> tensor<2x3x1x1xf32>
  %2 = graph.global_avg_pool %x : tensor<2x3x8x8xf32> -> tensor<2x3x1x1xf32>
  func.return %0, %1, %2 : tensor<2x3x4x4xf32>, tensor<2x3x4x4xf32>, tensor<2x3x1x1xf32>
}

// Channels last: the window runs over axes 1 and 2, the channels are the last axis.
// CHECK-LABEL: func.func @pooling_nhwc
func.func @pooling_nhwc(%x: tensor<2x8x8x3xf32>) -> (tensor<2x4x4x3xf32>, tensor<2x4x4x3xf32>) {
  // CHECK: graph.max_pool2d %{{.*}} kernel = [2, 2] strides = [2, 2] layout = "nhwc" : tensor<2x8x8x3xf32> -> tensor<2x4x4x3xf32>
  %0 = graph.max_pool2d %x kernel = [2, 2] strides = [2, 2] layout = "nhwc" : tensor<2x8x8x3xf32> -> tensor<2x4x4x3xf32>
  // CHECK: graph.avg_pool2d %{{.*}} kernel = [3, 3] strides = [2, 2] padding = [1, 1, 0, 0] count_include_pad = true layout = "nhwc" : tensor<2x8x8x3xf32> -> tensor<2x4x4x3xf32>
  %1 = graph.avg_pool2d %x kernel = [3, 3] strides = [2, 2] padding = [1, 1, 0, 0] count_include_pad = true layout = "nhwc" : tensor<2x8x8x3xf32> -> tensor<2x4x4x3xf32>
  func.return %0, %1 : tensor<2x4x4x3xf32>, tensor<2x4x4x3xf32>
}

// CHECK-LABEL: func.func @layout
func.func @layout(%a: tensor<4x8xbf16>) -> (tensor<8x4xbf16>, tensor<2x16xbf16>, tensor<4x24xbf16>, tensor<2x3xbf16>, tensor<2xbf16>) {
  // CHECK: graph.transpose %{{.*}} perm = [1, 0] : tensor<4x8xbf16> -> tensor<8x4xbf16>
  %0 = graph.transpose %a perm = [1, 0] : tensor<4x8xbf16> -> tensor<8x4xbf16>
  // CHECK: graph.reshape %{{.*}} : tensor<4x8xbf16> -> tensor<2x16xbf16>
  %1 = graph.reshape %a : tensor<4x8xbf16> -> tensor<2x16xbf16>
  // CHECK: graph.concat %{{.*}}, %{{.*}}, %{{.*}} axis = 1 : (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x24xbf16>
  %2 = graph.concat %a, %a, %a axis = 1 : (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x24xbf16>
  // CHECK: graph.slice %{{.*}} starts = [1, 2] limits = [3, 8] strides = [1, 2] : tensor<4x8xbf16> -> tensor<2x3xbf16>
  %3 = graph.slice %a starts = [1, 2] limits = [3, 8] strides = [1, 2] : tensor<4x8xbf16> -> tensor<2x3xbf16>
  // CHECK: graph.constant dense<[1.000000e+00, 2.500000e-01]> : tensor<2xbf16>
  // GENERIC: "graph.constant"() <{value = dense<[1.000000e+00, 2.500000e-01]> : tensor<2xbf16>}> : () -> tensor<2xbf16>
  %4 = graph.constant dense<[1.0, 0.25]> : tensor<2xbf16>
  func.return %0, %1, %2, %3, %4 : tensor<8x4xbf16>, tensor<2x16xbf16>, tensor<4x24xbf16>, tensor<2x3xbf16>, tensor<2xbf16>
}
