"""Shape arithmetic shared by the graph dialect's verifiers, the frontends and the reference.

Every function here raises `ShapeError` (a `VerifyException`) with a message that names
the offending dimension, so that the caller can attach a source location.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.utils.exceptions import VerifyException

Shape = tuple[int, ...]


class ShapeError(VerifyException):
    """Operand shapes or attributes are inconsistent."""


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """Map a possibly negative axis into [0, rank)."""
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def normalize_axes(axes: Sequence[int], rank: int, what: str = "axes") -> tuple[int, ...]:
    """Normalize a list of axes; duplicates are an error."""
    out = tuple(normalize_axis(a, rank, what) for a in axes)
    if len(set(out)) != len(out):
        raise ShapeError(f"{what} {list(axes)} repeat an axis")
    return out


def broadcast_shapes(*shapes: Shape) -> Shape:
    """numpy broadcasting: align right, sizes must match or be 1."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for i in range(rank):
        sizes = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            shown = " and ".join(str(list(s)) for s in shapes)
            raise ShapeError(f"shapes {shown} do not broadcast (dimension {i})")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def reduced_shape(shape: Shape, axes: Sequence[int], keepdims: bool) -> Shape:
    """The shape left after reducing `axes` (already normalized)."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def window_output_size(
    size: int, kernel: int, stride: int, pad_lo: int, pad_hi: int, dilation: int = 1
) -> int:
    """Output extent of a sliding window (convolution, pooling), floor mode."""
    effective = dilation * (kernel - 1) + 1
    span = size + pad_lo + pad_hi - effective
    if span < 0:
        raise ShapeError(
            f"window of extent {effective} does not fit input extent {size} "
            f"padded by {pad_lo}+{pad_hi}"
        )
    return span // stride + 1


def check_positive(values: Sequence[int], what: str) -> None:
    if any(v <= 0 for v in values):
        raise ShapeError(f"{what} must be positive, got {list(values)}")


def check_length(values: Sequence[int], length: int, what: str) -> None:
    if len(values) != length:
        raise ShapeError(f"{what} needs {length} values, got {len(values)}")
