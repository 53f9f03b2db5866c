// RUN: irkit-opt %s -p lower-graph-to-loops -t llvm | filecheck %s
// RUN: not irkit-opt %s -t llvm 2>&1 | filecheck %s --check-prefix=GRAPH

// Bare-pointer convention: each memref is a noalias pointer; indices are linearized with
// the static row-major strides; exp is the LLVM intrinsic, tanh a libm call.
// CHECK:       define void @"k0_exp"(ptr noalias %"x", ptr noalias %"e")
// CHECK:         getelementptr inbounds float, ptr %"x"
// CHECK:         call float @"llvm.exp.f32"
// CHECK:       define void @"k1_tanh"
// CHECK:         call float @"tanhf"
// CHECK:       define void @"f"(ptr noalias %"x", ptr noalias %"y")
// CHECK:         call ptr @"aligned_alloc"(i64 64, i64 128)
// CHECK:         call void @"k0_exp"
// CHECK:         call void @"k1_tanh"
// CHECK:         call void @"free"
// GRAPH: error: -t llvm needs loop-level IR, but graph.exp is still here; lower first with -p lower-graph-to-loops (or a pipeline such as baseline-cpu)
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = graph.exp %x : tensor<4x8xf32>
  %y = graph.tanh %e : tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
