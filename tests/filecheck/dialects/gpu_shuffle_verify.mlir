// gpu.shuffle's verifier on hand-written MLIR: one line at file:line:col per case.
// RUN: irkit-opt %s --split-input-file --verify-diagnostics | filecheck %s

func.func @f(%v: f16) -> f16 {
  %o = arith.constant 16 : i32
  %w = arith.constant 32 : i32
  %r, %ok = gpu.shuffle xor %v, %o, %w : f16
// CHECK: gpu_shuffle_verify.mlir:[[# @LINE - 1]]:{{[0-9]+}}: error: gpu.shuffle: irkit shuffles f32 or f64, not f16
  func.return %r : f16
}

// -----
func.func @f(%v: f32) -> f32 {
  %o = arith.constant 16 : i64
  %w = arith.constant 32 : i32
  %r, %ok = "gpu.shuffle"(%v, %o, %w) <{mode = #gpu<shuffle_mode xor>}> : (f32, i64, i32) -> (f32, i1)
// CHECK: gpu_shuffle_verify.mlir:[[# @LINE - 1]]:{{[0-9]+}}: error: gpu.shuffle: offset and width are i32
  func.return %r : f32
}
