"""Differential fuzzing: random valid models x random subsets and options of the optional
passes, on a backend, against the float64 reference.

    python -m irkit.fuzz --minutes 30 [--backend cpu --backend cuda-sim] [--out fuzz-out] [--seed 0]

A case is a `.graph` model drawn by `graph_sources` (elementwise ops with broadcasting, a
scalar literal or a second input; reductions over random axes; softmax, layer_norm, matmul, attention,
transpose, reshape, cast; 8-bit floats (scaled_matmul, casts through one); integers and booleans on the way: selects by comparisons, gathers
by i32/i64 indices, integer arithmetic, broadcasts, NaN guards; extents among 1, 3, 17, 33
and 127; f32, f64, f16 and bf16) and a
pipeline drawn by `pipelines`: the backend's default pipeline with each optional pass kept
or dropped, and each kept pass's options drawn from `OPTION_SPACE` (only combinations its
`check_options` accepts). The property: the model compiles on the backend and every output
matches the reference within the dtype's tolerance. Any exception is a finding: a valid
model and valid options must compile; so is a case that runs past its deadline (a hang: a
campaign found `conv-to-matmul` sinking an identity reshape forever).

A campaign runs hypothesis in rounds until its time is up; a failure is shrunk by hypothesis
to a small case and written to `--out` as a `.graph` file whose header carries the error and
the command that reproduces it. The test suite runs the same property with a small,
derandomized budget (tests/test_fuzz.py); needs `hypothesis` (`pip install -e '.[test]'`).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from irkit.errors import IrkitError

try:
    from hypothesis import strategies as st
except ImportError:  # hypothesis comes with the test extra
    if __name__ == "__main__":
        sys.exit("python -m irkit.fuzz: needs hypothesis: pip install -e '.[test]'")
    raise

SIZES = (1, 3, 17, 33, 127)
DTYPES = ("f32", "f64", "f16", "bf16")
FP8_NAMES = ("f8e4m3", "f8e5m2")

UNARY = ("relu", "neg", "abs", "tanh", "sigmoid", "gelu", "erf", "exp(0.25 * {x})",
         "sqrt(abs({x}))", "log(abs({x}) + 2.0)", "leaky_relu({x}, alpha=0.1)", "sin", "cos",
         "floor({x} * 8.0) * 0.125", "ceil({x} * 8.0) * 0.125")  # fmt: skip
"""Unary forms. Arguments stay where the op is well conditioned: log(1 + small) turns the
f16 rounding of its argument at a kernel boundary (which the tolerance allows) into a large
relative error of a small result (a 30-minute campaign found exactly that), so log's
argument is kept at 2 or more, as the op property tests do."""
BINARY = (
    "{a} + {b}",
    "{a} - {b}",
    "{a} * {b}",
    "max({a}, {b})",
    "min({a}, {b})",
    "{a} / (abs({b}) + 0.5)",
)

REDUCTIONS = {
    **dict.fromkeys(("f32", "f64"), ("reduce_sum", "reduce_max", "reduce_mean")),
    **dict.fromkeys(("f16", "bf16"), ("reduce_max", "reduce_mean")),
}
"""Reductions per element type. A sum over hundreds of f16 elements is exact to f16's
spacing at its magnitude (0.125 near 145), and a softmax after it turns that absolute
rounding into a relative error of the same size (1.5%, over the 5e-3 tolerance) although
irkit computes exactly what f16 storage gives (a campaign found it; irkit's output was bit-
identical to rounding the sum to f16 and taking the softmax in float64). The check's
per-type tolerance assumes well-conditioned chains, so narrow-type models use means."""

OPTION_SPACE: dict[str, dict[str, tuple]] = {
    "fuse-kernels": {"elementwise": (True, False), "reductions": (True, False),
                     "epilogues": (True, False), "movement-epilogues": (True, False),
                     "max-group-size": (1, 2, 64)},
    "fold-transposes": {"sink": (True, False)},
    "conv-to-matmul": {"max-expansion": (1, 16)},
    "fold-constants": {"max-elements": (1, 1 << 24)},
    "pad-leading-dims": {"align-bytes": (4, 16, 64), "skew-bytes": (0, 64),
                         "max-growth": (0.0, 0.125, 1.0)},
    "cpu-tile-matmul": {"mr": (1, 4, 6, 8), "nr": (16, 32, 64), "pack": (True, False),
                        "kc": (0, 8, 64), "min-panels": (0, 1, 4)},
    "cpu-fuse-attention": {"tiles": (True, False), "vector-bits": (0, 256), "row-vectors": (0, 1, 2),
                           "block": (5, 32)},
    "gpu-fuse-attention": {"block-q": (32, 64, 128), "block-k": (1, 5, 16),
                           "decode-rows": (0, 4, 64), "warps": (1, 3, 4)},
    "lower-graph-to-loops": {"keep-transcendentals": (True, False)},
    "block-reductions": {"block": (1, 7, 256, 4096)},
    "cpu-parallelize": {"threads": (1, 2, 3), "min-work": (0, 4096, 1 << 20)},
    "gpu-tile-matmul": {"block-m": (32, 64, 128), "block-n": (32, 64, 128),
                        "block-k": (4, 8, 16), "thread-m": (4, 8), "thread-n": (4, 8),
                        "pad": (0, 4), "vector-loads": (True, False),
                        "double-buffer": (True, False), "warp-tile": (True, False)},
    "map-to-gpu": {"block-size": (32, 128, 256, 1024), "rows": (True, False),
                   "row-items": (1, 4, 16), "shuffle": (True, False), "forward": (True, False)},
}  # fmt: skip
"""Option values the fuzzer draws from, per pass (a pass not listed runs with defaults)."""

MAX_ELEMENTS = {"cpu": 1 << 14, "cuda-sim": 1 << 10}
"""The largest tensor a case may hold, per backend (the lockstep interpreter is slow)."""


# --- models --------------------------------------------------------------------------------------


def fmt(values) -> str:
    return "[" + ", ".join(map(str, values)) + "]"


@dataclass
class _Model:
    max_elements: int
    decls: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    values: list[tuple[str, list[int], str]] = field(default_factory=list)
    """(name, shape, element type) of every value defined so far."""
    inputs: int = 0

    def input(self, shape: list[int], dtype: str, param: bool = False) -> str:
        name = f"{'w' if param else 'x'}{self.inputs}"
        self.inputs += 1
        self.decls.append(f"{'param' if param else 'input'} {name} : {dtype}{fmt(shape)}")
        return name

    def define(self, expr: str, shape: list[int], dtype: str) -> None:
        self.values.append((self.line(expr), shape, dtype))

    def line(self, expr: str) -> str:
        """A value other steps do not draw (an integer or boolean one): its name."""
        name = f"v{len(self.lines)}"
        self.lines.append(f"{name} = {expr}")
        return name

    def fits(self, shape: list[int]) -> bool:
        return math.prod(shape) <= self.max_elements


@st.composite
def _shape(draw, max_elements: int, min_rank: int = 1, max_rank: int = 3) -> list[int]:
    rank = draw(st.integers(min_rank, max_rank))
    shape = [draw(st.sampled_from(SIZES)) for _ in range(rank)]
    while math.prod(shape) > max_elements:  # shrink the largest extent until it fits
        i = shape.index(max(shape))
        shape[i] = max(s for s in (1, *SIZES) if s < shape[i])
    return shape


def _step(draw, m: _Model) -> None:
    """One op on a value drawn from those defined so far."""
    name, shape, dtype = draw(st.sampled_from(m.values))
    kind = draw(st.sampled_from(("unary", "binary", "binary", "reduce", "softmax", "matmul",
                                 "transpose", "reshape", "layer_norm", "cast", "exact",
                                 "attention", "fp8")))  # fmt: skip
    if kind == "exact":
        _exact_step(draw, m, name, shape, dtype)
        return
    rank = len(shape)
    if kind == "unary":
        op = draw(st.sampled_from(UNARY))
        m.define(op.format(x=name) if "{x}" in op else f"{op}({name})", shape, dtype)
    elif kind == "binary":
        other = draw(st.sampled_from(("same", "broadcast", "literal")))
        if other == "literal":
            b = repr(draw(st.sampled_from((0.5, 2.0, -1.25, 3.0))))
        elif other == "same":
            same = [n for n, s, t in m.values if s == shape and t == dtype]
            b = draw(st.sampled_from(same))
        else:
            keep = draw(st.integers(0, rank))
            b = m.input([1 if draw(st.booleans()) else d for d in shape[rank - keep :]], dtype)
        a, b = (b, name) if draw(st.booleans()) and other != "literal" else (name, b)
        forms = (
            BINARY if other != "literal" else ("{a} + {b}", "{a} - {b}", "{a} * {b}", "{a} / {b}")
        )
        m.define(draw(st.sampled_from(forms)).format(a=a, b=b), shape, dtype)
    elif kind == "reduce" and rank >= 1:
        axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
        keep = draw(st.booleans())
        out = (
            [1 if i in axes else d for i, d in enumerate(shape)]
            if keep
            else [d for i, d in enumerate(shape) if i not in axes]
        )
        if not out:
            return  # a rank-0 result: keep graphs of ranked values
        op = draw(st.sampled_from(REDUCTIONS[dtype]))
        m.define(f"{op}({name}, axes={fmt(axes)}, keepdims={str(keep).lower()})", out, dtype)
    elif kind == "softmax":
        m.define(f"softmax({name}, axis={draw(st.integers(-rank, rank - 1))})", shape, dtype)
    elif kind == "matmul" and rank == 2:
        n = draw(st.sampled_from(SIZES))
        if m.fits([shape[0], n]) and m.fits([shape[1], n]):
            w = m.input([shape[1], n], dtype, param=True)
            m.define(f"matmul({name}, {w})", [shape[0], n], dtype)
    elif kind == "transpose" and rank >= 2:
        perm = draw(st.permutations(list(range(rank))))
        m.define(f"transpose({name}, perm={fmt(perm)})", [shape[p] for p in perm], dtype)
    elif kind == "reshape":
        total = math.prod(shape)
        first = draw(st.sampled_from([d for d in range(1, total + 1) if total % d == 0][:8]))
        target = draw(st.sampled_from(([total], [first, total // first])))
        m.define(f"reshape({name}, shape={fmt(target)})", target, dtype)
    elif kind == "layer_norm":
        g, b = m.input([shape[-1]], dtype, param=True), m.input([shape[-1]], dtype, param=True)
        m.define(f"layer_norm({name}, {g}, {b}, axes=[-1], eps=1e-3)", shape, dtype)
    elif kind == "cast":
        to = draw(st.sampled_from(DTYPES))
        m.define(f"cast({name}, dtype={to})", shape, to)
    elif kind == "attention" and rank >= 3:
        _attention_step(draw, m, name, shape, dtype)
    elif kind == "fp8" and rank == 2:
        _fp8_step(draw, m, name, shape, dtype)


def _fp8_step(draw, m: _Model, name: str, shape: list[int], dtype: str) -> None:
    """8-bit floats: `scaled_matmul` of a new input cast to one (exact on both sides: the same
    values round the same way) by an 8-bit weight (or the dequantized matmul a quantized
    export writes for it), its scales new inputs, cast back to `dtype` and added to `name`;
    or a new input scaled by a power of two through an 8-bit float, its bytes perhaps
    reshaped or transposed and back, added to `name` (a cast of a computed value could
    round the other way from the reference's float64 at a tie, one step of 8-bit
    precision)."""
    if draw(st.booleans()):
        k = draw(st.sampled_from(SIZES))
        if not (m.fits([shape[0], k]) and m.fits([k, shape[1]])):
            return
        a = m.input([shape[0], k], dtype)
        w = m.input([k, shape[1]], draw(st.sampled_from(FP8_NAMES)), param=True)
        sa, sw = m.input([1], "f32"), m.input([1], "f32", param=True)
        fmt8 = draw(st.sampled_from(FP8_NAMES))
        a8 = f"cast({a}, dtype={fmt8})"
        product = m.line(f"scaled_matmul({a8}, {w}, {sa}, {sw})")
        if draw(st.booleans()):  # as a quantized export writes it: recognize-scaled-matmul's
            product = m.line(f"matmul(cast({a8}, dtype=f32) * {sa}, cast({w}, dtype=f32) * {sw})")
        m.define(f"{name} + cast({product}, dtype={dtype})", shape, dtype)
        return
    x = m.input(shape, dtype)
    fmt8 = draw(st.sampled_from(FP8_NAMES))
    bytes8 = f"cast({x} * 4.0, dtype={fmt8})"
    moved = draw(st.sampled_from(("", "reshape", "transpose")))  # the bytes moved and back
    if moved == "reshape":
        flat = m.line(f"reshape({bytes8}, shape=[{shape[0] * shape[1]}])")
        bytes8 = f"reshape({flat}, shape={fmt(shape)})"
    elif moved == "transpose":
        bytes8 = f"transpose(transpose({bytes8}, perm=[1, 0]), perm=[1, 0])"
    m.define(f"cast({bytes8}, dtype={dtype}) * 0.25 + {name}", shape, dtype)


def _attention_step(draw, m: _Model, name: str, shape: list[int], dtype: str) -> None:
    """`name` as the queries [B, H, S, D] (a rank-3 value as one batch), keys and values
    new inputs with H or a divisor of it heads (grouped-query attention), causal where
    every query keeps a key; or the chain exporters write (batch matmuls around a scaled,
    masked softmax) on `name`'s own rank, which `recognize-attention` makes the op."""
    q4 = shape if len(shape) == 4 else [1, *shape]
    batch, heads, length, dim = q4
    kv_heads = draw(st.sampled_from([h for h in range(1, heads + 1) if heads % h == 0]))
    keys = draw(st.sampled_from([s for s in (length, *SIZES) if s >= 1]))
    kv = [batch, kv_heads, keys, dim]
    if not m.fits(kv) or not m.fits([batch, heads, length, keys]):
        return
    if draw(st.booleans()):  # as exporters write it, for recognize-attention to find
        kv = [*shape[:-2], keys, dim]
        k, v = m.input(kv, dtype), m.input(kv, dtype)
        perm = [*range(len(shape) - 2), len(shape) - 1, len(shape) - 2]
        scale = draw(st.sampled_from(("* 0.125", "/ 8.0", "")))
        scores = m.line(f"batch_matmul({name}, transpose({k}, perm={fmt(perm)})) {scale}".strip())
        if draw(st.booleans()):  # an additive mask over the keys
            scores = m.line(f"{scores} + {m.input([keys], dtype)}")
        m.define(f"batch_matmul(softmax({scores}, axis=-1), {v})", shape, dtype)
        return
    k, v = m.input(kv, dtype), m.input(kv, dtype)
    causal = str(draw(st.booleans()) and keys >= length).lower()
    q = name if len(shape) == 4 else f"reshape({name}, shape={fmt(q4)})"
    out = f"attention({q}, {k}, {v}, causal={causal})"
    m.define(out if len(shape) == 4 else f"reshape({out}, shape={fmt(shape)})", shape, dtype)


INT_TYPES = ("i32", "i64")
COMPARISONS = ("equal", "less", "less_equal", "greater", "greater_equal")


def _exact_step(draw, m: _Model, name: str, shape: list[int], dtype: str) -> None:
    """Integers and booleans on the way: a select by a comparison, a gather by integer
    indices, integer arithmetic and back, a broadcast. Their integer and boolean values
    stay out of `m.values`: every other step takes floats."""
    rank = len(shape)
    form = draw(st.sampled_from(("where", "gather", "gather_elements", "cumsum", "int_chain",
                                 "broadcast_to", "nan_guard", "argmax", "scatter_nd")))  # fmt: skip
    if form == "where":
        pred = draw(st.sampled_from(COMPARISONS))
        cond = m.line(f"{pred}({name}, {draw(st.sampled_from(('0.0', '0.25', '-0.5')))})")
        if draw(st.booleans()):
            cond = m.line(f"{draw(st.sampled_from(('and', 'or', 'xor')))}({cond}, not({cond}))")
        m.define(f"where({cond}, {name}, {name} * 2.0)", shape, dtype)
    elif form == "gather":
        axis = draw(st.integers(0, rank - 1))
        count = draw(st.sampled_from(SIZES))
        out = [*shape[:axis], count, *shape[axis + 1 :]]
        if m.fits(out):
            idx = m.input([count], draw(st.sampled_from(INT_TYPES)))
            m.define(
                f"gather({name}, {idx}, axis={axis - rank if draw(st.booleans()) else axis})",
                out,
                dtype,
            )
    elif form == "gather_elements":
        axis = draw(st.integers(0, rank - 1))
        idx = m.input(shape, draw(st.sampled_from(INT_TYPES)))
        m.define(f"gather_elements({name}, {idx}, axis={axis})", shape, dtype)
    elif form == "argmax" and name.startswith("x"):  # of an input: exact on every side
        axis = draw(st.integers(0, rank - 1))
        op = draw(st.sampled_from(("argmax", "argmin")))
        last = str(draw(st.booleans())).lower()
        out = [1 if k == axis else d for k, d in enumerate(shape)]
        arg = m.line(f"{op}(floor({name} * 4.0), axis={axis}, select_last_index={last})")
        m.define(f"cast({arg}, dtype={dtype})", out, dtype)
    elif form == "scatter_nd":
        lead = draw(st.sampled_from((1, 3)))
        idx = m.input([lead, 1], draw(st.sampled_from(INT_TYPES)))
        upd = m.input([lead, *shape[1:]], dtype)
        mode = draw(st.sampled_from(("none", "add", "max")))
        m.define(f'scatter_nd({name}, {idx}, {upd}, reduction="{mode}")', shape, dtype)
    elif form == "cumsum":
        axis = draw(st.integers(-rank, rank - 1))
        flags = f"exclusive={str(draw(st.booleans())).lower()}, reverse={str(draw(st.booleans())).lower()}"
        m.define(f"cumsum({name}, axis={axis}, {flags})", shape, dtype)
    elif form == "int_chain":
        it = draw(st.sampled_from(INT_TYPES))
        i = m.line(f"cast({name} * 8.0, dtype={it})")
        op = draw(
            st.sampled_from(("{i} * 3 - 5", "{i} / 3", "max({i}, 0 - {i})", "abs({i}) + {i}"))
        )
        total = m.line(op.format(i=i))
        m.define(f"cast({total}, dtype={dtype}) * 0.125", shape, dtype)
    elif form == "broadcast_to":
        lead = draw(st.sampled_from((1, 3)))
        out = [lead, *shape]
        if m.fits(out) and len(out) <= 4:
            m.define(f"broadcast_to({name}, shape={fmt(out)})", out, dtype)
    else:
        m.define(f"where(is_nan(log({name})), {name} - {name}, {name})", shape, dtype)


@st.composite
def graph_sources(draw, backend: str = "cpu") -> str:
    """A random valid `.graph` model (see the module docstring)."""
    dtype = draw(st.sampled_from(DTYPES))
    m = _Model(MAX_ELEMENTS.get(backend, 1 << 14))
    shape = draw(_shape(m.max_elements))
    x = m.input(shape, dtype)
    m.values.append((x, shape, dtype))
    for _ in range(draw(st.integers(1, 6))):
        _step(draw, m)
    if not m.lines:
        m.define(f"relu({x})", shape, dtype)
    outputs = [m.values[-1][0]]
    if len(m.values) > 2 and draw(st.booleans()):
        outputs.append(draw(st.sampled_from([v[0] for v in m.values[1:-1]])))
    outs = [f"output {o}" for o in dict.fromkeys(outputs)]
    return "model fuzz\n" + "\n".join([*m.decls, *m.lines, *outs]) + "\n"


# --- pipelines ---------------------------------------------------------------------------------------


@st.composite
def pipelines(draw, backend: str = "cpu", append: str = "") -> str:
    """The backend's default pipeline with a random subset of its optional passes, each
    with options drawn from OPTION_SPACE that its `check_options` accepts; `append` (a
    pass spec) goes at the end (the tests plant a miscompiling pass there)."""
    from hypothesis import assume

    from irkit.errors import IrkitError
    from irkit.pipelines import PIPELINES, parse_passes
    from irkit.runtime import BACKENDS

    pipeline = PIPELINES[BACKENDS[backend]().default_pipeline]
    items = []
    for name in pipeline.passes:
        if name in pipeline.optional and not draw(st.booleans()):
            continue
        space = OPTION_SPACE.get(name, {})
        chosen = {k: draw(st.sampled_from(v)) for k, v in space.items() if draw(st.booleans())}
        opts = " ".join(
            f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in chosen.items()
        )
        items.append(f"{name}{{{opts}}}" if opts else name)
    spec = ",".join([*items, *([append] if append else [])])
    try:
        parse_passes(spec)
    except IrkitError:
        assume(False)  # an option combination the pass refuses: not a case
    return spec


# --- the property ----------------------------------------------------------------------------------


@dataclass
class Finding:
    source: str
    pipeline: str
    backend: str
    error: str


def check_case(source: str, pipeline: str, backend: str) -> None:
    """The property: compiles on `backend` and matches the reference (AssertionError if
    not; any exception from irkit is a finding too)."""
    import irkit
    from irkit.frontend.graph_lang import parse_graph
    from irkit.runtime.check import check

    module = parse_graph(source, "fuzz.graph")
    exe = irkit.compile(module, pipeline, backend)
    checks, _ = check(exe, module, seed=1)
    bad = [c.describe() for c in checks if not c.passed]
    assert not bad, f"{bad[0]} under -p '{pipeline}' on {backend}"


def write_reproducer(finding: Finding, out: Path) -> Path:
    """A .graph file holding the shrunk case, the error and the command that reproduces it."""
    from irkit.errors import one_line

    digest = hashlib.sha256(
        f"{finding.source}{finding.pipeline}{finding.backend}".encode()
    ).hexdigest()[:10]
    path = out / f"fuzz-{finding.backend}-{digest}.graph"
    out.mkdir(parents=True, exist_ok=True)
    header = (
        f"# irkit fuzz reproducer: {one_line(finding.error)[:400]}\n"
        f"# RUN: irkit-bench run {path.name} -p '{finding.pipeline}' --backend {finding.backend}\n"
    )
    path.write_text(header + finding.source)
    return path


class CaseTimeout(Exception):
    """A case ran past its deadline: a hang (a rewrite that never converges, a loop that
    never ends) is a finding like a wrong result."""


def _on_alarm(signum, frame) -> None:
    raise CaseTimeout("the case ran past its deadline (a hang?)")


def fuzz_round(
    backend: str,
    examples: int,
    seed: int,
    counts: dict[str, int],
    append: str = "",
    case_timeout_s: int = 120,
) -> Finding | None:
    """One hypothesis run of `examples` cases on `backend`; the shrunk failure, if any. A
    case running past `case_timeout_s` fails (SIGALRM; POSIX, main thread)."""
    import signal

    previous = signal.signal(signal.SIGALRM, _on_alarm)
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    last: list[Finding] = []

    @hseed(seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(graph_sources(backend), pipelines(backend, append))
    def prop(source: str, pipeline: str) -> None:
        counts[backend] = counts.get(backend, 0) + 1
        signal.alarm(case_timeout_s)
        try:
            check_case(source, pipeline, backend)
        except BaseException as e:
            last.append(Finding(source, pipeline, backend, f"{type(e).__name__}: {e}"))
            raise
        finally:
            signal.alarm(0)

    try:
        prop()
    except Exception:  # noqa: BLE001 - hypothesis re-raises the shrunk case's failure last
        return last[-1] if last else None
    finally:
        signal.signal(signal.SIGALRM, previous)
    return None


def campaign(
    backends: list[str], minutes: float, out: Path, seed: int = 0
) -> tuple[dict[str, int], list[Path]]:
    """Fuzz until `minutes` are spent; returns cases run per backend and reproducers."""
    deadline = time.monotonic() + minutes * 60
    counts = {b: 0 for b in backends}
    found: list[Path] = []
    round_ = 0
    while time.monotonic() < deadline:
        backend = backends[round_ % len(backends)]
        finding = fuzz_round(backend, 20, seed * 100_003 + round_, counts)
        if finding is not None and (path := write_reproducer(finding, out)) not in found:
            found.append(path)
            print(f"FOUND on {backend}: {finding.error[:200]}\n  -> {found[-1]}", flush=True)
        round_ += 1
        left = max(0.0, deadline - time.monotonic())
        print(
            f"round {round_}: {sum(counts.values())} cases "
            f"({', '.join(f'{b} {n}' for b, n in counts.items())}); {len(found)} finding(s); "
            f"{left / 60:.1f} min left",
            flush=True,
        )
    return counts, found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m irkit.fuzz", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--minutes", type=float, default=5.0, help="campaign length (default 5)")
    parser.add_argument(
        "--backend",
        action="append",
        default=None,
        help="cpu and/or cuda-sim (repeatable; default both)",
    )
    parser.add_argument("--out", default="fuzz-out", help="where shrunk reproducers go")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    backends = args.backend or ["cpu", "cuda-sim"]

    def body() -> int:
        from irkit.files import check_writable

        out = Path(args.out)
        where = out if out.is_dir() else out.parent  # where a reproducer would be made
        check_writable(where / "fuzz-probe", "--out", out)  # before the campaign, not after it
        start = time.monotonic()
        counts, found = campaign(backends, args.minutes, out, args.seed)
        listed = "".join(f"\n  {p}" for p in found)
        print(
            f"fuzz: {sum(counts.values())} cases in {(time.monotonic() - start) / 60:.1f} min "
            f"({', '.join(f'{b} {n}' for b, n in counts.items())}), seed {args.seed}: "
            f"{len(found)} finding(s){listed}"
        )
        return 1 if found else 0

    try:
        return body()
    except IrkitError as e:  # one line, as irkit's commands say it
        print(f"fuzz: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
