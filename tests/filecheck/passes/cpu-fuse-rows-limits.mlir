// RUN: irkit-opt %s -p cpu-fuse-rows | filecheck %s

// Where cpu-fuse-rows must not merge what it merges in softmax (cpu-fuse-rows.graph): the
// two kernels are a softmax's four nests as lower-graph-to-loops writes them, each changed in
// one read.
//
// reversed_sum: the sum reads the exponentials back to front, so an element is read in
// another iteration than the one that computes it: the two loops stay apart. The output's
// row still holds the exponentials (the output phase reads each where it writes it).
// CHECK-LABEL: func.func private @reversed_sum(%x: memref<4x8xf32>, %y: memref<4x8xf32> {irkit.output = "y"})
// CHECK-NOT:     memref<1x8xf32>
// CHECK:           arith.maximumf
// CHECK:         scf.for %[[J:[0-9a-z_]+]] = {{.*}} {
// CHECK:           math.exp
// CHECK-NEXT:      memref.store %{{.*}}, %y[%{{.*}}, %[[J]]]
// CHECK-NEXT:    }
// CHECK-NEXT:    scf.for %[[K:[0-9a-z_]+]] = {{.*}} iter_args
// CHECK-NEXT:      %[[REV:.*]] = arith.subi %{{.*}}, %[[K]]
// CHECK-NEXT:      memref.load %y[%{{.*}}, %[[REV]]]
//
// rotated_output: the output phase reads the exponential of the next column, which writing
// the output in place would have overwritten: the exponentials stay in a one-row stack
// buffer. The sum reads each where it is written: that loop merges.
// CHECK-LABEL: func.func private @rotated_output(%x: memref<4x8xf32>, %y: memref<4x8xf32> {irkit.output = "y"})
// CHECK:         %[[E:.*]] = memref.alloca() {alignment = 64 : i64} : memref<1x8xf32>
// CHECK:         scf.for {{.*}} iter_args
// CHECK:           math.exp
// CHECK-NEXT:      memref.store %{{.*}}, %[[E]]
// CHECK-NEXT:      arith.addf
// CHECK:         memref.load %[[E]]
// CHECK:         memref.store %{{.*}}, %y
builtin.module {
  func.func private @reversed_sum(%x: memref<4x8xf32>, %y: memref<4x8xf32> {irkit.output = "y"}, %tmp0: memref<4x1xf32> {irkit.scratch}, %tmp1: memref<4x8xf32> {irkit.scratch}, %tmp2: memref<4x1xf32> {irkit.scratch}) attributes {irkit.kernel} {
    %0 = arith.constant 0xff800000 : f32
    %1 = arith.constant 0 : index
    %2 = arith.constant 8 : index
    %3 = arith.constant 1 : index
    %4 = arith.constant 4 : index
    %5 = arith.constant 1.000000e+00 : f32
    %6 = arith.constant 0.000000e+00 : f32
    %last = arith.constant 7 : index
    "scf.parallel"(%1, %1, %4, %3, %3, %3) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%7: index, %8: index):
      %9 = scf.for %10 = %1 to %2 step %3 iter_args(%11 = %0) -> (f32) {
        %12 = memref.load %x[%7, %10] : memref<4x8xf32>
        %13 = arith.maximumf %11, %12 : f32
        scf.yield %13 : f32
      }
      memref.store %9, %tmp0[%7, %8] : memref<4x1xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    "scf.parallel"(%1, %1, %4, %2, %3, %3) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%14: index, %15: index):
      %16 = memref.load %x[%14, %15] : memref<4x8xf32>
      %17 = memref.load %tmp0[%14, %1] : memref<4x1xf32>
      %18 = arith.subf %16, %17 : f32
      %19 = math.exp %18 : f32
      memref.store %19, %tmp1[%14, %15] : memref<4x8xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    "scf.parallel"(%1, %1, %4, %3, %3, %3) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%20: index, %21: index):
      %22 = scf.for %23 = %1 to %2 step %3 iter_args(%24 = %6) -> (f32) {
        %rev = arith.subi %last, %23 : index
        %25 = memref.load %tmp1[%20, %rev] : memref<4x8xf32>
        %26 = arith.addf %24, %25 : f32
        scf.yield %26 : f32
      }
      %27 = arith.divf %5, %22 : f32
      memref.store %27, %tmp2[%20, %21] : memref<4x1xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    "scf.parallel"(%1, %1, %4, %2, %3, %3) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%28: index, %29: index):
      %30 = memref.load %tmp1[%28, %29] : memref<4x8xf32>
      %31 = memref.load %tmp2[%28, %1] : memref<4x1xf32>
      %32 = arith.mulf %30, %31 : f32
      memref.store %32, %y[%28, %29] : memref<4x8xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    func.return
  }
  func.func private @rotated_output(%x: memref<4x8xf32>, %y: memref<4x8xf32> {irkit.output = "y"}, %tmp0: memref<4x1xf32> {irkit.scratch}, %tmp1: memref<4x8xf32> {irkit.scratch}, %tmp2: memref<4x1xf32> {irkit.scratch}) attributes {irkit.kernel} {
    %0 = arith.constant 0xff800000 : f32
    %1 = arith.constant 0 : index
    %2 = arith.constant 8 : index
    %3 = arith.constant 1 : index
    %4 = arith.constant 4 : index
    %5 = arith.constant 1.000000e+00 : f32
    %6 = arith.constant 0.000000e+00 : f32
    "scf.parallel"(%1, %1, %4, %3, %3, %3) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%7: index, %8: index):
      %9 = scf.for %10 = %1 to %2 step %3 iter_args(%11 = %0) -> (f32) {
        %12 = memref.load %x[%7, %10] : memref<4x8xf32>
        %13 = arith.maximumf %11, %12 : f32
        scf.yield %13 : f32
      }
      memref.store %9, %tmp0[%7, %8] : memref<4x1xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    "scf.parallel"(%1, %1, %4, %2, %3, %3) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%14: index, %15: index):
      %16 = memref.load %x[%14, %15] : memref<4x8xf32>
      %17 = memref.load %tmp0[%14, %1] : memref<4x1xf32>
      %18 = arith.subf %16, %17 : f32
      %19 = math.exp %18 : f32
      memref.store %19, %tmp1[%14, %15] : memref<4x8xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    "scf.parallel"(%1, %1, %4, %3, %3, %3) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%20: index, %21: index):
      %22 = scf.for %23 = %1 to %2 step %3 iter_args(%24 = %6) -> (f32) {
        %25 = memref.load %tmp1[%20, %23] : memref<4x8xf32>
        %26 = arith.addf %24, %25 : f32
        scf.yield %26 : f32
      }
      %27 = arith.divf %5, %22 : f32
      memref.store %27, %tmp2[%20, %21] : memref<4x1xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    "scf.parallel"(%1, %1, %4, %2, %3, %3) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%28: index, %29: index):
      %next = arith.addi %29, %3 : index
      %rot = arith.remui %next, %2 : index
      %30 = memref.load %tmp1[%28, %rot] : memref<4x8xf32>
      %31 = memref.load %tmp2[%28, %1] : memref<4x1xf32>
      %32 = arith.mulf %30, %31 : f32
      memref.store %32, %y[%28, %29] : memref<4x8xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    func.return
  }
  func.func @rows(%x: memref<4x8xf32>, %y: memref<4x8xf32> {irkit.output = "y"}, %z: memref<4x8xf32> {irkit.output = "z"}) {
    %0 = memref.alloc() {alignment = 64 : i64} : memref<4x1xf32>
    %1 = memref.alloc() {alignment = 64 : i64} : memref<4x8xf32>
    %2 = memref.alloc() {alignment = 64 : i64} : memref<4x1xf32>
    func.call @reversed_sum(%x, %y, %0, %1, %2) : (memref<4x8xf32>, memref<4x8xf32>, memref<4x1xf32>, memref<4x8xf32>, memref<4x1xf32>) -> ()
    func.call @rotated_output(%x, %z, %0, %1, %2) : (memref<4x8xf32>, memref<4x8xf32>, memref<4x1xf32>, memref<4x8xf32>, memref<4x1xf32>) -> ()
    memref.dealloc %0 : memref<4x1xf32>
    memref.dealloc %1 : memref<4x8xf32>
    memref.dealloc %2 : memref<4x1xf32>
    func.return
  }
}
