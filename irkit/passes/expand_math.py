"""expand-math: f32 `math.exp`, `tanh`, `erf` and `log` as arithmetic the vectorizers can widen.

The llvm target turns `math.exp` into `llvm.exp.f32`, and `tanh`/`erf`/`log` into calls, which
LLVM lowers to one scalar call to the C library per element: a loop holding one cannot be
vectorized, and a sigmoid, softmax or GELU then runs at the speed of that call, not of memory
(a GELU matmul epilogue took 13x the time of the same matmul with a bias). This pass replaces
every f32 `math.exp` with the scheme of Cephes' `expf`, written in `arith` ops:

    x = clamp(x, -104, 88.75)                 NaN kept (exp is +0 below, +inf above)
    s = x * log2(e) + 1.5 * 2^23              rounds x log2(e) to an integer n, which is then
    n = s - 1.5 * 2^23                        also the low bits of s's bit pattern
    r = x - n * C1 - n * C2                   (C1 + C2 = ln 2, split for accuracy)
    y = 1 + r + r^2 P(r)                      a degree-4 P fitted for this form (`POLY`), all
                                              by Horner's rule: 6 FMAs
    exp(x) = y * 2^h * 2^(n-h), h = n >> 1    two exact powers of two built in the exponent
                                              field from s's bits (no overflow of the field;
                                              gradual underflow, -inf gives +0, past
                                              ln(FLT_MAX) ~ 88.72 the product is +inf)

(tested over every exponent). 21 vector instructions per 16 elements with AVX-512, where the
earlier form (`math.floor`, a float-to-int conversion, clamps of n and a final select)
took 27: a softmax 512x1024 on one core 10% faster; Cephes' degree-5 P took one FMA more
(softmax 3-5% slower, interleaved on one znver4 core, the same 1 ulp at most over 2^21
samples in [-103, 88.7]). Measured error against float64
`exp` over the f32 range: at most 2 ulp on normal results (tested), where `expf` of glibc
has at most 1: the one deliberate numerical change, which the reference checks tolerate.

The others, branch-free (every path computed, `arith.select` picks), measured against float64
over 2^20 random f32 bit patterns plus dense samples near 0 and in [-5, 5] (tested):

- `tanh`: Cephes' `tanhf`, 1 - 2/(exp(2|x|) + 1) with x's sign for |x| >= 0.625, an odd
  polynomial below; at most 1 ulp.
- `erf`: x P(x^2)/Q(x^2) on x clamped to [-4, 4] (Eigen's and XLA's f32 erf), 2/sqrt(pi) x
  below 1e-4; at most 7 ulp (1e-6 relative), where glibc's `erff` has 1.
- `log`: Cephes' `logf`, the exponent and mantissa read from the bits (subnormals scaled
  first) and a degree-8 polynomial; at most 1 ulp; 0, infinities, negatives and NaN exact.

Sigmoid and GELU are built from these, so they vectorize too. f64 ops stay library calls.

`powf` by a constant integral exponent from -1 to 4 becomes multiplications (a division for
-1), in place: `x^2` as `x * x` and `1 / x` are exact like `powf`, `x^3` rounds twice where
`powf` rounds once (at most 1 ulp apart, tested), `x^4` as `x^2 * x^2` at most 2 ulp;
pow(x, 0) is 1 for every x, NaN too, as IEEE's. (x^-2 as `1 / (x * x)` lost up to 4 ulp
where `x * x` is subnormal: left to `powf`.) GPT-2's GELU,
`0.5 x (1 + tanh(c (x + 0.044715 x^3)))`, ran at 7 GFLOP/s on one znver5 core with a `powf`
call per element; RMSNorm's `x.pow(2)` likewise.

Each expansion is built once per module, as a scalar function (`@irkit_expf`, `@irkit_tanhf`,
... marked `irkit.inline`, see `irkit.loops`) that replaces the op with a `func.call`; the code
generators inline it, so the machine code is that of the expansion written in place. In place
it was 35-85 ops per call site: on a 2000-op chain with 750 transcendentals the IR grew from
3,200 ops to 29,600, and every later pass, the verifier and the LLVM translation walked them
all (default-cpu 1.65 s; as calls, 0.67 s).

Options:

    scale=auto        how exp scales by 2^n: "bits" (the two powers of two above, 9 integer
                      and float ops), "ldexp" (one `irkit_math.ldexp`: `vscalefps` with
                      AVX-512, exact into the subnormals and to infinity, 3 ops with the
                      conversions: 16 vector ops per 16 elements instead of 22), or "auto":
                      ldexp where this host's LLVM target has AVX-512F, else bits (LLVM
                      calls the C library's ldexpf once per element without it)

Optional, CPU-oriented (the CUDA target has its own fast `expf`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    Float32Type,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    SymbolRefAttr,
    UnitAttr,
    i32,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from irkit.dialects.math_ext import LdexpOp
from irkit.errors import require
from irkit.loops import INLINE_ATTR, is_scalar_function
from irkit.passes.loop_builder import FunctionConstants

F32 = Float32Type()
LOG2E = 1.44269504088896341
C1, C2 = 0.693359375, -2.12194440e-4
POLY = (1.3814551702e-3, 8.3686938353e-3, 4.1668387063e-2, 1.6666520825e-1, 4.9999993458e-1)
"""P of exp(r) = 1 + r + r^2 P(r) on [-ln2/2, ln2/2]: degree 4, fitted to the relative error
of the whole form (max 3.1e-9 in exact arithmetic, 1 ulp in f32 with FMAs over a dense grid
of r). Cephes' degree-5 P is a hundred times more accurate there than f32 can hold, for one
more FMA per element; exp's FMAs are what a softmax's exp loop is bound by."""
UNDERFLOW = -104.0
"""exp(x) rounds to +0 in f32 below this."""
OVERFLOW = 88.75
"""exp(x) overflows f32 above ln(FLT_MAX) ~ 88.7228; clamped here, n = 128 still overflows."""
ROUNDING = 12582912.0
"""1.5 * 2^23: v + ROUNDING - ROUNDING rounds v to an integer, and the sum's bit pattern holds
it in its low bits (for |v| < 2^22)."""
ROUNDING_BITS = 0x4B400000
"""ROUNDING's bit pattern: the sum's bits minus these are the integer."""
TANH_POLY = (
    -5.70498872745e-3,
    2.06390887954e-2,
    -5.37397155531e-2,
    1.33314422036e-1,
    -3.33332819422e-1,
)
ERF_NUMERATOR = (
    -2.72614225801306e-10,
    2.77068142495902e-08,
    -2.10102402082508e-06,
    -5.69250639462346e-05,
    -7.34990630326855e-04,
    -2.95459980854025e-03,
    -1.60960333262415e-02,
)
ERF_DENOMINATOR = (
    -1.45660718464996e-05,
    -2.13374055278905e-04,
    -1.68282697438203e-03,
    -7.37332916720468e-03,
    -1.42647390514189e-02,
)
TWO_OVER_SQRT_PI = 1.1283791670955126
LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
            1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
            3.3333331174e-1)  # fmt: skip
SMALLEST_NORMAL = 1.17549435e-38
SQRT_HALF = 0.707106781186547524


CONTRACTABLE = (arith.AddfOp, arith.SubfOp, arith.MulfOp)
CONTRACT = arith.FastMathFlagsAttr([arith.FastMathFlag.ALLOW_CONTRACT])
"""The expansions' multiplies and adds may fuse into FMAs (one rounding instead of two)."""


class _Emitter:
    """Inserts ops before one anchor op; constants go to the function's entry, once each
    (`constants`), where one is given."""

    def __init__(self, anchor: Operation, constants: FunctionConstants | None = None):
        self.anchor = anchor
        self.constants = constants

    def add(self, op: Operation) -> SSAValue:
        if isinstance(op, CONTRACTABLE):
            op.properties["fastmath"] = CONTRACT
        Rewriter.insert_op(op, InsertPoint.before(self.anchor))
        return op.results[0]

    def f(self, x: float) -> SSAValue:
        if self.constants is not None and not math.isnan(x):
            return self.constants.get(FloatAttr(x, F32))
        return self.add(arith.ConstantOp(FloatAttr(x, F32)))

    def i(self, x: int) -> SSAValue:
        if self.constants is not None:
            return self.constants.get(IntegerAttr(x, i32))
        return self.add(arith.ConstantOp(IntegerAttr(x, i32)))

    def select(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.SelectOp(cond, a, b))

    def cmp(self, predicate: str, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.CmpfOp(a, b, predicate))

    def poly(self, x: SSAValue, coefficients: tuple[float, ...]) -> SSAValue:
        """Horner's rule, highest coefficient first."""
        p = self.f(coefficients[0])
        for c in coefficients[1:]:
            p = self.add(arith.AddfOp(self.add(arith.MulfOp(p, x)), self.f(c)))
        return p

    def pow2i(self, n: SSAValue) -> SSAValue:
        """2**n for an i32 n in [-127, 127], built in the exponent field."""
        bits = self.add(arith.AddiOp(n, self.i(127)))
        return self.add(arith.BitcastOp(self.add(arith.ShLIOp(bits, self.i(23))), F32))


def _exp(e: _Emitter, x: SSAValue, ldexp: bool = False) -> SSAValue:
    """expf of `x` in the scheme of Cephes' (see the module docstring)."""
    # x clamped (NaN kept: each select passes an unordered x through) to where the result is
    # +0 or +inf anyway, so n = round(x * log2(e)) is in [-150, 128]; rounded by adding
    # 1.5 * 2^23, which leaves n in the low bits of the sum's bit pattern
    x = e.select(e.cmp("olt", x, e.f(UNDERFLOW)), e.f(UNDERFLOW), x)
    x = e.select(e.cmp("ogt", x, e.f(OVERFLOW)), e.f(OVERFLOW), x)
    shifted = e.add(arith.AddfOp(e.add(arith.MulfOp(x, e.f(LOG2E))), e.f(ROUNDING)))
    n = e.add(arith.SubfOp(shifted, e.f(ROUNDING)))
    r = e.add(arith.SubfOp(x, e.add(arith.MulfOp(n, e.f(C1)))))
    r = e.add(arith.SubfOp(r, e.add(arith.MulfOp(n, e.f(C2)))))
    y = e.poly(r, (*POLY, 1.0, 1.0))  # 1 + r + r^2 P(r), by Horner's rule
    ni = e.add(arith.SubiOp(e.add(arith.BitcastOp(shifted, i32)), e.i(ROUNDING_BITS)))
    if ldexp:  # y * 2^n in one exact scaling (vscalefps on AVX-512)
        return e.add(LdexpOp(y, ni))
    h = e.add(arith.ShRSIOp(ni, e.i(1)))  # floor(n / 2)
    # two exact powers of two: each exponent stays in the normal range, and the second
    # product rounds once into the subnormals (gradual underflow) or overflows to +inf
    return e.add(
        arith.MulfOp(e.add(arith.MulfOp(y, e.pow2i(h))), e.pow2i(e.add(arith.SubiOp(ni, h))))
    )


def expand_exp(
    op: xmath.ExpOp, constants: FunctionConstants | None = None, ldexp: bool = False
) -> SSAValue:
    """The arithmetic replacing one f32 `math.exp` (inserted before it); its result."""
    return _exp(_Emitter(op, constants), op.operand, ldexp)


def expand_tanh(
    op: xmath.TanhOp, constants: FunctionConstants | None = None, ldexp: bool = False
) -> SSAValue:
    """Cephes' tanhf: 1 - 2 / (exp(2|x|) + 1) with x's sign for |x| >= 0.625, an odd
    polynomial x + x^3 P(x^2) below (where the first form cancels)."""
    e = _Emitter(op, constants)
    x = op.operand
    z = e.add(xmath.AbsFOp(x))
    s = _exp(e, e.add(arith.AddfOp(z, z)), ldexp)
    big = e.add(
        arith.SubfOp(e.f(1.0), e.add(arith.DivfOp(e.f(2.0), e.add(arith.AddfOp(s, e.f(1.0))))))
    )
    big = e.select(e.cmp("olt", x, e.f(0.0)), e.add(arith.NegfOp(big)), big)
    x2 = e.add(arith.MulfOp(x, x))
    small = e.add(arith.MulfOp(e.add(arith.MulfOp(e.poly(x2, TANH_POLY), x2)), x))
    small = e.add(arith.AddfOp(small, x))
    return e.select(e.cmp("oge", z, e.f(0.625)), big, small)  # NaN: the polynomial's NaN


def expand_erf(
    op: xmath.ErfOp, constants: FunctionConstants | None = None, ldexp: bool = False
) -> SSAValue:
    """erf as x P(x^2) / Q(x^2) on x clamped to [-4, 4] (Eigen's and XLA's f32 erf: beyond 4,
    erf is +-1 in f32), and 2/sqrt(pi) x for |x| < 1e-4 (where the ratio's leading
    coefficient is a few ulp off)."""
    e = _Emitter(op, constants)
    x = op.operand
    c = e.add(arith.MinimumfOp(e.add(arith.MaximumfOp(x, e.f(-4.0))), e.f(4.0)))  # keeps NaN
    c2 = e.add(arith.MulfOp(c, c))
    p = e.add(arith.MulfOp(e.poly(c2, ERF_NUMERATOR), c))
    q = e.poly(c2, ERF_DENOMINATOR)
    ratio = e.add(arith.DivfOp(p, q))
    tiny = e.cmp("olt", e.add(xmath.AbsFOp(x)), e.f(1e-4))
    return e.select(tiny, e.add(arith.MulfOp(x, e.f(TWO_OVER_SQRT_PI))), ratio)


def expand_log(
    op: xmath.LogOp, constants: FunctionConstants | None = None, ldexp: bool = False
) -> SSAValue:
    """Cephes' logf: x = m 2^k with m in [sqrt(1/2), sqrt(2)) read from the bits (subnormals
    scaled by 2^23 first), log(m) = f - f^2/2 + f^3 P(f) for f = m - 1, plus k ln 2 in two
    parts; log(0) = -inf, log(+inf) = +inf, negative or NaN gives NaN."""
    e = _Emitter(op, constants)
    x = op.operand
    sub = e.cmp("olt", x, e.f(SMALLEST_NORMAL))
    xs = e.select(sub, e.add(arith.MulfOp(x, e.f(2.0**23))), x)
    bits = e.add(arith.BitcastOp(xs, i32))
    k = e.add(arith.SubiOp(e.add(arith.ShRSIOp(bits, e.i(23))), e.i(126)))
    k = e.add(arith.SIToFPOp(k, F32))
    k = e.select(sub, e.add(arith.SubfOp(k, e.f(23.0))), k)
    mantissa = e.add(arith.OrIOp(e.add(arith.AndIOp(bits, e.i(0x007FFFFF))), e.i(0x3F000000)))
    m = e.add(arith.BitcastOp(mantissa, F32))  # in [0.5, 1)
    low = e.cmp("olt", m, e.f(SQRT_HALF))
    k = e.select(low, e.add(arith.SubfOp(k, e.f(1.0))), k)
    f = e.add(arith.SubfOp(e.select(low, e.add(arith.AddfOp(m, m)), m), e.f(1.0)))
    f2 = e.add(arith.MulfOp(f, f))
    y = e.add(arith.MulfOp(e.add(arith.MulfOp(e.poly(f, LOG_POLY), f)), f2))
    y = e.add(arith.AddfOp(y, e.add(arith.MulfOp(k, e.f(C2)))))
    y = e.add(arith.SubfOp(y, e.add(arith.MulfOp(f2, e.f(0.5)))))
    y = e.add(arith.AddfOp(e.add(arith.AddfOp(f, y)), e.add(arith.MulfOp(k, e.f(C1)))))
    y = e.select(e.cmp("oeq", x, e.f(math.inf)), e.f(math.inf), y)
    y = e.select(e.cmp("oeq", x, e.f(0.0)), e.f(-math.inf), y)
    return e.select(e.cmp("ult", x, e.f(0.0)), e.f(math.nan), y)


EXPANSIONS: dict[type[Operation], Callable[..., SSAValue]] = {
    xmath.ExpOp: expand_exp,
    xmath.TanhOp: expand_tanh,
    xmath.ErfOp: expand_erf,
    xmath.LogOp: expand_log,
}
"""The f32 math ops this pass replaces, and the arithmetic that replaces each."""


@dataclass(frozen=True)
class ExpandMathPass(ModulePass):
    """Replace f32 `math.exp`, `tanh`, `erf` and `log` with vectorizable arithmetic (see the
    module docstring)."""

    name = "expand-math"
    is_optimization = True

    scale: str = "auto"

    def check_options(self) -> None:
        require(self.scale in SCALES, "scale", self.scale, f"must be one of {', '.join(SCALES)}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.check_options()
        for power in [o for o in op.walk() if isinstance(o, xmath.PowFOp)]:
            _integral_power(power)
        ldexp = self.scale == "ldexp" or (self.scale == "auto" and host_has_scalef())
        functions: dict[type[Operation], func.FuncOp] = {}
        for math_op in [o for o in op.walk() if type(o) in EXPANSIONS]:
            if math_op.results[0].type == F32:
                kind = type(math_op)
                if kind not in functions:
                    functions[kind] = scalar_function(op, math_op, ldexp)
                callee = {"callee": SymbolRefAttr(functions[kind].sym_name)}
                call = func.CallOp.create(
                    operands=math_op.operands, result_types=[F32], properties=callee
                )  # 4x faster than func.CallOp()
                Rewriter.insert_op(call, InsertPoint.before(math_op))
                math_op.results[0].replace_all_uses_with(call.res[0])
                math_op.detach()
                math_op.erase()


INTEGRAL_POWERS = range(-1, 5)
"""The constant exponents `powf` is multiplied out for."""


def _integral_power(power: xmath.PowFOp) -> None:
    """`powf(x, n)` for a constant f32 n in `INTEGRAL_POWERS`, as multiplications in place:
    x^2 = x * x, x^3 = x^2 * x, x^4 = x^2 * x^2, x^-1 = 1 / x, x^0 = 1."""
    exponent = power.rhs.owner
    if (
        power.result.type != F32
        or not isinstance(exponent, arith.ConstantOp)
        or not isinstance(exponent.value, FloatAttr)
    ):
        return
    n = exponent.value.value.data
    if not float(n).is_integer() or int(n) not in INTEGRAL_POWERS:
        return
    e = _Emitter(power)
    x, m = power.lhs, abs(int(n))
    result = x if m else e.f(1.0)
    if m >= 2:
        square = result = e.add(arith.MulfOp(x, x))
        if m == 3:
            result = e.add(arith.MulfOp(square, x))
        elif m == 4:
            result = e.add(arith.MulfOp(square, square))
    if n < 0:
        result = e.add(arith.DivfOp(e.f(1.0), result))
    power.result.replace_all_uses_with(result)
    power.detach()
    power.erase()


NAMES: dict[type[Operation], str] = {
    xmath.ExpOp: "expf",
    xmath.TanhOp: "tanhf",
    xmath.ErfOp: "erff",
    xmath.LogOp: "logf",
}
"""The scalar functions' names (`irkit_<name>`; `_scalef` where the exp in them scales with
`irkit_math.ldexp`)."""


def scalar_function(module: ModuleOp, like: Operation, ldexp: bool) -> func.FuncOp:
    """The module's scalar function (`irkit.inline`, see `irkit.loops`) computing the f32
    expansion of ops like `like`, built and added at the module's top unless an earlier run
    left it: the name says the kind and the scaling, so one name is one body."""
    kind = type(like)
    name = f"irkit_{NAMES[kind]}" + (
        "_scalef" if ldexp and kind in (xmath.ExpOp, xmath.TanhOp) else ""
    )
    taken = {o.sym_name.data: o for o in module.ops if isinstance(o, func.FuncOp)}
    if name in taken and is_scalar_function(taken[name]):
        return taken[name]
    unique, n = name, 1
    while unique in taken:  # the model has a function of that name
        unique, n = f"{name}_{n}", n + 1
    fn = func.FuncOp(unique, ((F32,), (F32,)), visibility="private")
    fn.attributes[INLINE_ATTR] = UnitAttr()
    block = fn.body.block
    block.args[0].name_hint = "x"
    anchor = like.clone(value_mapper={like.operands[0]: block.args[0]})
    block.add_op(anchor)
    result = EXPANSIONS[kind](anchor, FunctionConstants(fn), ldexp)
    block.add_op(func.ReturnOp(result))
    anchor.detach()
    anchor.erase()
    # at the module's top, after the others: a call's verification looks its callee up by a
    # scan from the top, which at the end passed every kernel (a tenth of verifying a chain)
    after = next((o for o in module.ops if not is_scalar_function(o)), None)
    if after is None:
        module.body.block.add_op(fn)
    else:
        module.body.block.insert_op_before(fn, after)
    return fn


SCALES = ("auto", "bits", "ldexp")


def host_has_scalef() -> bool:
    """Whether this host's LLVM target has AVX-512F, whose `vscalefps` is `llvm.ldexp` on a
    vector (elsewhere LLVM calls the C library once per element)."""
    import platform

    import llvmlite.binding as llvm

    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        return bool(llvm.get_host_cpu_features().get("avx512f", False))
    except RuntimeError:
        return False
