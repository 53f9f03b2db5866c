"""irkit's pass registry: pass name -> a factory returning the pass class.

Factories import lazily so that listing passes (as xdsl-opt does on start-up) stays cheap.
A test checks that every key equals its class's `name`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from xdsl.passes import ModulePass


def _decompose_composites() -> type[ModulePass]:
    from irkit.passes.decompose_composites import DecomposeCompositesPass

    return DecomposeCompositesPass


def _lower_graph_to_loops() -> type[ModulePass]:
    from irkit.passes.lower_graph_to_loops import LowerGraphToLoopsPass

    return LowerGraphToLoopsPass


def _fuse_kernels() -> type[ModulePass]:
    from irkit.passes.fuse_kernels import FuseKernelsPass

    return FuseKernelsPass


def _map_to_gpu() -> type[ModulePass]:
    from irkit.passes.map_to_gpu import MapToGpuPass

    return MapToGpuPass


def _gpu_coarsen() -> type[ModulePass]:
    from irkit.passes.map_to_gpu import GpuCoarsenPass

    return GpuCoarsenPass


def _cpu_tile_matmul() -> type[ModulePass]:
    from irkit.passes.cpu_tile_matmul import CpuTileMatmulPass

    return CpuTileMatmulPass


def _expand_math() -> type[ModulePass]:
    from irkit.passes.expand_math import ExpandMathPass

    return ExpandMathPass


def _gpu_tile_matmul() -> type[ModulePass]:
    from irkit.passes.gpu_tile_matmul import GpuTileMatmulPass

    return GpuTileMatmulPass


def _fold_constants() -> type[ModulePass]:
    from irkit.passes.fold_constants import FoldConstantsPass

    return FoldConstantsPass


def _fold_transposes() -> type[ModulePass]:
    from irkit.passes.fold_transposes import FoldTransposesPass

    return FoldTransposesPass


def _cpu_parallelize() -> type[ModulePass]:
    from irkit.passes.cpu_parallelize import CpuParallelizePass

    return CpuParallelizePass


def _conv_layout() -> type[ModulePass]:
    from irkit.passes.conv_layout import ConvLayoutPass

    return ConvLayoutPass


def _conv_to_matmul() -> type[ModulePass]:
    from irkit.passes.conv_to_matmul import ConvToMatmulPass

    return ConvToMatmulPass


def _pad_leading_dims() -> type[ModulePass]:
    from irkit.passes.pad_leading_dims import PadLeadingDimsPass

    return PadLeadingDimsPass


def _reshape_views() -> type[ModulePass]:
    from irkit.passes.reshape_views import ReshapeViewsPass

    return ReshapeViewsPass


def _block_reductions() -> type[ModulePass]:
    from irkit.passes.reductions import BlockReductionsPass

    return BlockReductionsPass


def _cpu_tile_transpose() -> type[ModulePass]:
    from irkit.passes.cpu_tile_transpose import CpuTileTransposePass

    return CpuTileTransposePass


def _split_concat() -> type[ModulePass]:
    from irkit.passes.split_concat import SplitConcatPass

    return SplitConcatPass


def _interchange_reductions() -> type[ModulePass]:
    from irkit.passes.interchange_reductions import InterchangeReductionsPass

    return InterchangeReductionsPass


def _interchange_matmul() -> type[ModulePass]:
    from irkit.passes.interchange_matmul import InterchangeMatmulPass

    return InterchangeMatmulPass


def _unroll_windows() -> type[ModulePass]:
    from irkit.passes.unroll_windows import UnrollWindowsPass

    return UnrollWindowsPass


def _simplify_indices() -> type[ModulePass]:
    from irkit.passes.simplify_indices import SimplifyIndicesPass

    return SimplifyIndicesPass


def _delinearize_loops() -> type[ModulePass]:
    from irkit.passes.delinearize_loops import DelinearizeLoopsPass

    return DelinearizeLoopsPass


def _reassociate_reductions() -> type[ModulePass]:
    from irkit.passes.reductions import ReassociateReductionsPass

    return ReassociateReductionsPass


def _gpu_fuse_attention() -> type[ModulePass]:
    from irkit.passes.gpu_fuse_attention import GpuFuseAttentionPass

    return GpuFuseAttentionPass


def _cpu_fuse_attention() -> type[ModulePass]:
    from irkit.passes.cpu_fuse_attention import CpuFuseAttentionPass

    return CpuFuseAttentionPass


def _recognize_attention() -> type[ModulePass]:
    from irkit.passes.recognize_attention import RecognizeAttentionPass

    return RecognizeAttentionPass


def _recognize_scaled_matmul() -> type[ModulePass]:
    from irkit.passes.recognize_scaled_matmul import RecognizeScaledMatmulPass

    return RecognizeScaledMatmulPass


def _share_buffers() -> type[ModulePass]:
    from irkit.passes.share_buffers import ShareBuffersPass

    return ShareBuffersPass


def _cpu_fuse_rows() -> type[ModulePass]:
    from irkit.passes.cpu_fuse_rows import CpuFuseRowsPass

    return CpuFuseRowsPass


IRKIT_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "decompose-composites": _decompose_composites,
    "lower-graph-to-loops": _lower_graph_to_loops,
    "fuse-kernels": _fuse_kernels,
    "map-to-gpu": _map_to_gpu,
    "gpu-coarsen": _gpu_coarsen,
    "cpu-tile-matmul": _cpu_tile_matmul,
    "expand-math": _expand_math,
    "gpu-tile-matmul": _gpu_tile_matmul,
    "fold-constants": _fold_constants,
    "fold-transposes": _fold_transposes,
    "cpu-parallelize": _cpu_parallelize,
    "conv-layout": _conv_layout,
    "conv-to-matmul": _conv_to_matmul,
    "pad-leading-dims": _pad_leading_dims,
    "reshape-views": _reshape_views,
    "cpu-fuse-rows": _cpu_fuse_rows,
    "interchange-matmul": _interchange_matmul,
    "interchange-reductions": _interchange_reductions,
    "split-concat": _split_concat,
    "unroll-windows": _unroll_windows,
    "delinearize-loops": _delinearize_loops,
    "simplify-indices": _simplify_indices,
    "cpu-tile-transpose": _cpu_tile_transpose,
    "block-reductions": _block_reductions,
    "reassociate-reductions": _reassociate_reductions,
    "share-buffers": _share_buffers,
    "recognize-attention": _recognize_attention,
    "recognize-scaled-matmul": _recognize_scaled_matmul,
    "cpu-fuse-attention": _cpu_fuse_attention,
    "gpu-fuse-attention": _gpu_fuse_attention,
}


def register_pass(cls: type[ModulePass]) -> type[ModulePass]:
    """Make a pass class usable by name in `-p` specs, pipelines and attribution (usable as a
    class decorator). Set `is_optimization = True` on the class when the pass is optional:
    removing it must not change what the module computes."""
    IRKIT_PASSES[cls.name] = lambda: cls
    available_passes.cache_clear()
    return cls


@cache
def available_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Every pass irkit can run: xDSL's upstream transforms and irkit's own."""
    from xdsl.transforms import get_all_passes

    return {**get_all_passes(), **IRKIT_PASSES}
