"""cpu-tile-matmul's schedule as data: the microkernel and blocking one matmul nest gets
(`cpu_tile`), a pure function of the pass's options, the host's vector width and
registers, and the nest's element width and depth; applied by the emitter
(`cpu_tile_matmul`). `irkit-bench tune` searches the options the pass declares
(`CpuTileMatmulPass.SEARCH_SPACE`); tests table the choices.

- `vector-bits=0`: the host's widest vector (`irkit.host.vector_bits`);
- `nr=0`: 4 vectors where the host has 32 vector registers (AVX-512: 6 x 4 accumulators, 4
  of B, 1 broadcast), 2 where it has 16 (AVX2, SSE: 12 + 2 + 1), BLIS's shapes for those
  ISAs. On a 2-core znver3 VM (AVX2), transformer_block ran 2.52x [2.45, 2.61] faster at
  256 bits and nr=16 than with the AVX-512 tile (48 ymm accumulators, spilled), and 1.6x
  faster than untiled (2026-11-28, `irkit-bench tune`);
- `kc=-1`: K blocked by `AUTO_KC` where a whole packed panel (K x nr) would pass
  `AUTO_KC_PANEL_BYTES` (a quarter of a 2 MiB L2). On a 2-core Sapphire Rapids VM against
  onnxruntime: mlp (a 1 MiB panel) 0.89x -> 0.95x with kc=512; gemm 1024^3 (256 KiB panels)
  1.28x -> 1.16x, so it stays unblocked; on znver4 (1 MiB L2), kc = 128, 256 and 512
  measured the same as unblocked on gemm 1024^3, 384x512x8192, 96x2048x4096 and mlp;
- `prefetch` only with packing (it prefetches the packed panel's next block).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from irkit.errors import IrkitError

if TYPE_CHECKING:
    from irkit.passes.cpu_tile_matmul import CpuTileMatmulPass

AUTO_KC = 512
AUTO_KC_PANEL_BYTES = 512 * 1024
"""kc=-1 (auto) blocks K by AUTO_KC where a whole packed panel would be larger than this."""


@dataclass(frozen=True)
class CpuTile:
    """One matmul nest's schedule: what the emitter builds."""

    mr: int
    """Rows of C per microkernel (its register tile is mr x nr)."""
    nr: int
    """Columns per microkernel and per packed panel of B, whole vectors."""
    lanes: int
    """Elements per vector register."""
    kc: int
    """k steps per block of a panel (K itself where it is not blocked)."""
    pack: bool
    prefetch: bool
    min_panels: int
    """With fewer panels, the row tiles are the parallel loop."""

    @property
    def accumulators(self) -> int:
        """Vector registers the microkernel's tile of C holds."""
        return self.mr * self.nr // self.lanes


def resolve_host(vector_bits: int, nr: int, host_bits: int, host_registers: int) -> tuple[int, int]:
    """`vector-bits` and `nr` with 0 (auto) replaced by the host's: its widest vector, and
    4 vectors of columns with 32 registers, 2 with 16."""
    bits = vector_bits or host_bits
    return bits, nr or bits // 32 * (4 if host_registers >= 32 else 2)


def cpu_tile(o: CpuTileMatmulPass, element_bits: int, k: int, element: str = "") -> CpuTile:
    """The schedule of one nest of depth `k` with elements of `element_bits` under the
    resolved options `o` (`CpuTileMatmulPass.resolved`); an `nr` that is not whole vectors
    of this element type is an error naming it (`element`: the type, for the message)."""
    lanes = o.vector_bits // element_bits
    if o.nr % lanes or o.nr <= 0:
        raise IrkitError(
            f"cpu-tile-matmul: nr={o.nr} is not a multiple of the {lanes} "
            f"lanes of a {o.vector_bits}-bit vector of {element or f'{element_bits}-bit'}"
        )
    kc = o.kc
    if kc < 0:
        panel = k * o.nr * element_bits // 8
        kc = AUTO_KC if panel > AUTO_KC_PANEL_BYTES else 0
    return CpuTile(
        mr=o.mr,
        nr=o.nr,
        lanes=lanes,
        kc=kc if 0 < kc < k else k,
        pack=o.pack,
        prefetch=o.prefetch and o.pack,
        min_panels=o.min_panels,
    )


MIN_TAIL_LANES = 4
"""The narrowest vector a column tail gets (a half vector of at least this many lanes)."""


def narrow_tail(columns: int, lanes: int) -> list[int]:
    """The vector widths, halving from `lanes / 2` down to MIN_TAIL_LANES, that together
    cover `columns` (fewer than `lanes`) exactly; none where they cannot."""
    widths, width = [], lanes // 2
    while width >= MIN_TAIL_LANES and columns:
        if columns >= width:
            widths.append(width)
            columns -= width
        width //= 2
    return [] if columns else widths
