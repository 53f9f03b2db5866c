// RUN: irkit-opt %s -p lower-graph-to-loops --split-input-file | filecheck %s

// Baseline: each graph op is a private kernel over memrefs (inputs, outputs); the graph
// function becomes the driver, which allocates the intermediate, calls both kernels in
// order, frees it after its last use, and writes the output argument directly.
// CHECK-LABEL: func.func private @k0_add(%x: memref<4x8xf32>, %b: memref<8xf32>, %t: memref<4x8xf32> {irkit.output = "t"}) attributes {irkit.kernel}
// CHECK:         "scf.parallel"
// CHECK:           %[[X:.*]] = memref.load %x[%[[I:.*]], %[[J:.*]]] : memref<4x8xf32>
// CHECK-NEXT:      %[[B:.*]] = memref.load %b[%[[J]]] : memref<8xf32>
// CHECK-NEXT:      %[[S:.*]] = arith.addf %[[X]], %[[B]] : f32
// CHECK-NEXT:      memref.store %[[S]], %t[%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK:       func.func private @k1_relu
// CHECK:           arith.maximumf
// CHECK-LABEL: func.func @f(%x: memref<4x8xf32>, %b: memref<8xf32> {irkit.param}, %y: memref<4x8xf32> {irkit.output = "y"})
// CHECK-NEXT:    %[[T:.*]] = memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
// CHECK-NEXT:    func.call @k0_add(%x, %b, %[[T]])
// CHECK-NEXT:    func.call @k1_relu(%[[T]], %y)
// CHECK-NEXT:    memref.dealloc %[[T]]
// CHECK-NEXT:    func.return
func.func @f(%x: tensor<4x8xf32>, %b: tensor<8xf32> {irkit.param}) -> (tensor<4x8xf32> {irkit.name = "y"}) {
  %t = graph.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %y = graph.relu %t : tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// -----

// A kernel region is one kernel: the elementwise producer is recomputed inline inside
// each reduction, and the row max and row sum live in scratch buffers the driver provides.
// CHECK-LABEL: func.func private @k0_mul_softmax(%x: memref<4x8xf16>, %out0: memref<4x8xf16> {irkit.output = "out0"}, %tmp0: memref<4x1xf32> {irkit.scratch}, %tmp1: memref<4x1xf32> {irkit.scratch})
// CHECK-COUNT-3: "scf.parallel"
// CHECK-NOT:     "scf.parallel"
// CHECK:       func.func @g
// CHECK-COUNT-2: memref.alloc() {alignment = 64 : i64} : memref<4x1xf32>
// CHECK-NEXT:    func.call @k0_mul_softmax
func.func @g(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
  %0 = graph.kernel : tensor<4x8xf16> {
    %c = graph.constant dense<5.000000e-01> : tensor<f16>
    %1 = graph.mul %x, %c : (tensor<4x8xf16>, tensor<f16>) -> tensor<4x8xf16>
    %2 = graph.softmax %1 : tensor<4x8xf16>
    graph.yield %2 : tensor<4x8xf16>
  }
  func.return %0 : tensor<4x8xf16>
}

// -----

// f16 data is widened on load and rounded on store; a matmul accumulates in f32.
// CHECK-LABEL: func.func private @k0_matmul
// CHECK:         scf.for %[[K:.*]] = {{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32)
// CHECK:           arith.extf {{.*}} : f16 to f32
// CHECK:           arith.mulf {{.*}} : f32
// CHECK:           arith.addf %[[ACC]], {{.*}} : f32
// CHECK:         arith.truncf {{.*}} : f32 to f16
func.func @h(%a: tensor<3x5xf16>, %b: tensor<5x2xf16>) -> tensor<3x2xf16> {
  %c = graph.matmul %a, %b : (tensor<3x5xf16>, tensor<5x2xf16>) -> tensor<3x2xf16>
  func.return %c : tensor<3x2xf16>
}
