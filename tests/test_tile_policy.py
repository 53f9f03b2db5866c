"""The tile passes' schedules are data chosen by pure functions (`cpu_tile_policy.cpu_tile`,
`gpu_tile_policy.gpu_tile`), tabled here against the shapes and hosts whose choices the docs
and the measurements name; each pass's declared search space (`SEARCH_SPACE`) is all valid
options, and `irkit-bench tune --space PASS` searches it."""

from __future__ import annotations

import itertools

import pytest

from irkit.errors import IrkitError, OptionError
from irkit.passes.cpu_tile_matmul import CpuTileMatmulPass
from irkit.passes.cpu_tile_policy import AUTO_KC, cpu_tile, resolve_host
from irkit.passes.cpu_tile_transpose import CpuTileTransposePass
from irkit.passes.gpu_tile_matmul import GpuTileMatmulPass
from irkit.passes.gpu_tile_policy import MatmulShape, gpu_tile


@pytest.mark.parametrize(
    ("host", "bits", "nr", "lanes", "accumulators"),
    [
        ((512, 32), 512, 64, 16, 24),  # AVX-512: 6 x 4 zmm accumulators, 4 of B, 1 broadcast
        ((256, 16), 256, 16, 8, 12),  # AVX2: 6 x 2 ymm accumulators, 2 of B, 1 broadcast
        ((128, 16), 128, 8, 4, 12),  # SSE / NEON
    ],
)
def test_the_cpu_microkernel_follows_the_host(host, bits, nr, lanes, accumulators) -> None:
    resolved_bits, resolved_nr = resolve_host(0, 0, *host)
    assert (resolved_bits, resolved_nr) == (bits, nr)
    tile = cpu_tile(CpuTileMatmulPass(vector_bits=bits, nr=nr), 32, 1024)
    assert (tile.mr, tile.nr, tile.lanes, tile.accumulators) == (6, nr, lanes, accumulators)
    assert tile.accumulators + nr // lanes + 1 <= host[1]  # the tile fits the registers


@pytest.mark.parametrize(
    ("k", "kc", "blocked"),
    [
        (1024, -1, 1024),  # a 256 KiB panel (K x 64 f32): K in one block
        (4096, -1, AUTO_KC),  # a 1 MiB panel: past a quarter of a 2 MiB L2, blocked
        (4096, 0, 4096),  # never
        (300, 512, 300),  # a block at least K is K
        (4096, 256, 256),
    ],
)
def test_the_cpu_k_blocking(k, kc, blocked) -> None:
    tile = cpu_tile(CpuTileMatmulPass(vector_bits=512, nr=64, kc=kc), 32, k)
    assert tile.kc == blocked


def test_the_cpu_policy_refuses_columns_that_are_not_whole_vectors() -> None:
    assert cpu_tile(CpuTileMatmulPass(vector_bits=512, nr=64), 64, 64).lanes == 8  # f64
    with pytest.raises(IrkitError, match="nr=24 is not a multiple of the 16 lanes"):
        cpu_tile(CpuTileMatmulPass(vector_bits=512, nr=24), 32, 64, "f32")
    assert not cpu_tile(CpuTileMatmulPass(vector_bits=256, nr=16, pack=False), 32, 64).prefetch


def _gpu(m, n, k, dtype="f32", batch=(), single_call=True, **options):
    size = {"f16": 2, "bf16": 2, "f32": 4, "f64": 8}[dtype]
    tile = gpu_tile(GpuTileMatmulPass(**options), MatmulShape(m, n, k, batch, dtype, size, single_call))  # fmt: skip
    o = tile.options
    return tile, (o.block_m, o.block_n, o.thread_m, o.thread_n)


def test_the_gpu_policy_keeps_large_tiles_for_a_large_gemm() -> None:
    tile, blocks = _gpu(4096, 4096, 4096)
    assert blocks == (128, 128, 8, 8) and tile.options.block_k == 16  # 64 bytes of k
    assert tile.warp_tiled and not tile.mma and tile.splits == 1 and tile.blocks == 1024
    assert tile.threads == 256 and (tile.rows_t, tile.cols_t) == (16, 16)


def test_the_gpu_policy_fills_the_sms_on_a_short_grid() -> None:
    """A 256^3 gemm on 132 SMs: 128 x 128 tiles would be 4 blocks; fill-sms halves them to
    32 x 32 and split-K 4 gives 256 blocks (2.48x on an H200); without fill-sms, no split
    (split-K alone, at least 4 k tiles a range, would still leave most SMs idle: not worth
    its second kernel); where the kernel has no single call, the small tiles alone."""
    tile, blocks = _gpu(256, 256, 256)
    assert blocks == (32, 32, 4, 4) and tile.splits == 4 and tile.blocks == 256
    assert _gpu(256, 256, 256, fill_sms=False)[0].blocks == 4
    assert _gpu(256, 256, 256, single_call=False)[0].splits == 1
    mlp, _ = _gpu(64, 4096, 1024)  # mlp at B=64: M fits, K split
    assert mlp.splits == 8 and mlp.blocks == 256


def test_the_gpu_policy_pairs_blocks_where_large_tiles_make_few_waves() -> None:
    """transformer_block's 4096 x 512 x 512 (128 such tiles: under 4 waves of 132 SMs):
    128 x 64 tiles, two blocks an SM (1.10x on an H200); batch matmuls the same."""
    tile, blocks = _gpu(4096, 512, 512)
    assert blocks == (128, 64, 8, 8) and tile.options.min_blocks == 2 and tile.threads == 128
    batched, _ = _gpu(512, 512, 512, batch=(8,))
    assert batched.batches == 8 and batched.splits == 1 and batched.options.block_n == 64


def test_the_gpu_policy_uses_tensor_cores_for_half_precision_and_tf32() -> None:
    half, _ = _gpu(4096, 4096, 4096, "f16")
    assert half.mma and half.warps == (2, 4) and half.threads == 256 and half.mma_k == 16
    assert half.options.block_k % 16 == 0
    assert not _gpu(4096, 4096, 4096, "f16", tensor_cores=False)[0].mma
    tf32, _ = _gpu(4096, 4096, 4096, tf32=True)
    assert tf32.mma and tf32.tf32 and tf32.mma_k == 8
    assert not _gpu(4096, 4096, 4096, "f64", tf32=True)[0].mma


def test_the_gpu_policy_fits_small_problems_and_refuses_tiles_past_shared_memory() -> None:
    tile, blocks = _gpu(4, 64, 32)
    assert blocks == (4, 64, 1, 4) and tile.blocks == 1  # 4 rows: a 4-row block
    with pytest.raises(OptionError, match="block-k=128"):
        _gpu(4096, 4096, 4096, block_k=128)  # 2 x 128 x 264 x 4 bytes > 48 KB


@pytest.mark.parametrize("cls", [CpuTileMatmulPass, GpuTileMatmulPass, CpuTileTransposePass])
def test_every_point_of_a_declared_search_space_is_valid(cls) -> None:
    space = cls.SEARCH_SPACE
    assert space and all(values for values in space.values())
    for combo in itertools.product(*space.values()):
        options = {k.replace("-", "_"): v for k, v in zip(space, combo, strict=True)}
        cls(**options).check_options()  # raises on an invalid point


def test_tune_searches_a_pass_s_declared_space_when_named_alone() -> None:
    from irkit.measure.tune import parse_space

    dims = parse_space("cpu-tile-matmul")
    assert {d.option: d.values for d in dims} == CpuTileMatmulPass.SEARCH_SPACE
    assert [d.option for d in parse_space("cpu-tile-matmul{mr=4,8}")] == ["mr"]  # as given
    with pytest.raises(IrkitError, match="declares no search space"):
        parse_space("cse")
