// MLIR's gpu.shuffle, which irkit's contexts add to xDSL's gpu dialect (map-to-gpu's row
// reductions use its xor mode): the custom form parses and prints back unchanged, the
// generic form is MLIR's (tests/test_mlir_interop.py has a real mlir-opt verify it).
// RUN: irkit-opt %s --split-input-file | filecheck %s
// RUN: irkit-opt %s --split-input-file --print-op-generic | filecheck %s --check-prefix=GENERIC

func.func @f(%v: f32, %d: f64) -> (f32, f64) {
  %o = arith.constant 16 : i32
  %w = arith.constant 32 : i32
  %r, %ok = gpu.shuffle xor %v, %o, %w : f32
  %s, %ok2 = gpu.shuffle xor %d, %o, %w : f64
  func.return %r, %s : f32, f64
}
// CHECK:      %{{.*}}, %{{.*}} = gpu.shuffle xor %v, %o, %w : f32
// CHECK-NEXT: %{{.*}}, %{{.*}} = gpu.shuffle xor %d, %o, %w : f64
// GENERIC:    "gpu.shuffle"(%v, %o, %w) <{mode = #gpu<shuffle_mode xor>}> : (f32, i32, i32) -> (f32, i1)
// GENERIC:    "gpu.shuffle"(%d, %o, %w) <{mode = #gpu<shuffle_mode xor>}> : (f64, i32, i32) -> (f64, i1)
