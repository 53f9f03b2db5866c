// RUN: irkit-opt %s -p gpu-tile-matmul | filecheck %s --check-prefix=GPU
// RUN: irkit-opt %s -p cpu-tile-matmul | filecheck %s --check-prefix=CPU

// A matmul nest whose epilogue's addend is loaded before the k loop (the lowering loads an
// operand where the graph names it first: a quantized export's `bias + dequantized(x @ W)`)
// is still a matmul to both tiling passes: the load joins the epilogue, cloned in order.
// GPU:      func.func private @k0_matmul_mul_add
// GPU-SAME:   mapping = "tiled"
// GPU:        memref.load %b
// GPU:        arith.addf
// CPU:      func.func private @k0_matmul_mul_add
// CPU:        vector.fma
// CPU:        memref.load %b
// CPU:        arith.addf
builtin.module {
  func.func private @k0_matmul_mul_add(%x: memref<40x24xf32>, %w: memref<24x56xf32>, %b: memref<56xf32>, %out0: memref<40x56xf32> {irkit.output = "out0"}) attributes {irkit.kernel} {
    %0 = arith.constant 0.000000e+00 : f32
    %1 = arith.constant 0 : index
    %2 = arith.constant 24 : index
    %3 = arith.constant 1 : index
    %4 = arith.constant 5.000000e-01 : f32
    %5 = arith.constant 40 : index
    %6 = arith.constant 56 : index
    "scf.parallel"(%1, %1, %5, %6, %3, %3) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%7: index, %8: index):
      %17 = memref.load %b[%8] : memref<56xf32>
      %9 = scf.for %10 = %1 to %2 step %3 iter_args(%11 = %0) -> (f32) {
        %12 = memref.load %x[%7, %10] : memref<40x24xf32>
        %13 = memref.load %w[%10, %8] : memref<24x56xf32>
        %14 = arith.mulf %12, %13 : f32
        %15 = arith.addf %11, %14 : f32
        scf.yield %15 : f32
      }
      %16 = arith.mulf %9, %4 : f32
      %18 = arith.addf %17, %16 : f32
      memref.store %18, %out0[%7, %8] : memref<40x56xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    func.return
  }
  func.func @ahead(%x: memref<40x24xf32>, %w: memref<24x56xf32> {irkit.param}, %b: memref<56xf32> {irkit.param}, %y: memref<40x56xf32> {irkit.output = "y"}) {
    func.call @k0_matmul_mul_add(%x, %w, %b, %y) : (memref<40x24xf32>, memref<24x56xf32>, memref<56xf32>, memref<40x56xf32>) -> ()
    func.return
  }
}

