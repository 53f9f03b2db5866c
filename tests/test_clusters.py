"""Clusters with TMA multicast for `gpu-tile-matmul{... warp-specialize=true cluster-m=C}`
(sm_90) without a GPU: C blocks on consecutive C tile rows of one tile column, each loading
1/C of B's k tile and multicasting it to the cluster, the consumers handing every stage back
to every block. cuda-host runs a cluster's blocks at once (fibers of one scheduler, a shared
arena each), and the kernels match the reference at ragged shapes (a phantom block past M's
tile rows), every layout, persistent grids, batches and real workloads; NVRTC builds the
multicast copies, remote arrivals and cluster barriers with no spills; and each planted
slip (a multicast mask short, B's share landing one row block off, a remote arrival
dropped, the closing cluster barrier dropped) fails. The IR's shape:
tests/filecheck/passes/gpu-tile-matmul-cluster.graph."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from xdsl.dialects import gpu
from xdsl.dialects.builtin import IntegerAttr, i64

import irkit
from irkit.codegen.cuda import gpu_kernels, kernel_source
from irkit.codegen.nvrtc import compile_cuda
from irkit.dialects.warp_tma import ClusterBarrierOp, MbarrierArriveClusterOp, TmaLoadOp
from irkit.errors import IrkitError
from irkit.frontend import parse_source
from irkit.loops import launch_of
from irkit.pipelines import apply_passes, parse_passes
from tests.conftest import ROOT
from tests.test_tma import GEMM, LAYOUTS, _checked, _pipeline, host_matches

BATCHED = "model g\ninput a : bf16[3, 200, 64]\ninput b : bf16[3, 64, 136]\noutput c = batch_matmul(a, b)\n"


def _clustered(exe) -> list:
    return [f for f in gpu_kernels(exe.module) if launch_of(f).get("cluster", 1) > 1]


@pytest.mark.parametrize("backend", ["cuda-host", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("cluster", [2, 4])
@pytest.mark.parametrize(
    ("dtype", "dims"),
    [("bf16", (200, 136, 200)), ("f16", (300, 72, 96)), ("f16", (520, 200, 320))],
)
def test_clustered_tma_matches_the_reference(backend, layout, cluster, dtype, dims) -> None:
    """Ragged M, N and K; tile rows not a multiple of the cluster (a phantom block whose A
    box lies past M, which loads its share of B and stores nothing); more k tiles than
    stages, so that producers wait on stages handed back by both blocks."""
    if backend == "cuda":
        from tests.test_cuda_path import needs

        needs(backend)
    m, n, k = dims
    options = f"{LAYOUTS[layout]} warp-specialize=true cluster-m={cluster} stages=2 block-k=64 fill-sms=false"
    exe = _checked(GEMM.format(t=dtype, m=m, n=n, k=k), _pipeline(options), backend)
    (fn,) = _clustered(exe)
    launch = launch_of(fn)
    tile_rows = -(-m // 128)
    assert launch["cluster"] == cluster
    assert launch["grid"][0] == cluster * -(-tile_rows // cluster) * -(-n // 128)
    ops = list(fn.walk())
    shares = [op for op in ops if isinstance(op, TmaLoadOp) and op.cta_mask]
    assert shares and all(op.cta_mask == (1 << cluster) - 1 for op in shares)
    for op in shares:  # B's stage: [stages, n/64, k, 64] swizzled, [stages, n/8, k/8, 8, 8]
        depth = op.dest.type.get_shape()[2] * (1 if layout == "swizzled" else 8)
        assert op.box_shape[-2] == depth // cluster
    assert sum(isinstance(op, ClusterBarrierOp) for op in ops) == 2
    assert not any(isinstance(op, gpu.BarrierOp) for op in ops)


@pytest.mark.parametrize(
    ("text", "sms", "grid"),
    [
        (GEMM.format(t="f16", m=300, n=200, k=200), 4, 4),  # 4 clusters' tiles on 2 clusters
        (GEMM.format(t="bf16", m=520, n=136, k=128), 5, 4),  # sms rounded down to clusters
        (BATCHED, 3, 2),  # 3 entries of 1 cluster's tile each, on 1 cluster
    ],
)
def test_persistent_clusters_take_every_tile_once(text: str, sms: int, grid: int) -> None:
    options = f"warp-specialize=true persistent=true cluster-m=2 sms={sms} fill-sms=false"
    exe = _checked(text, _pipeline(options), "cuda-host")
    (fn,) = _clustered(exe)
    assert launch_of(fn)["grid"][0] == grid


def test_batched_clusters_stay_in_their_entry() -> None:
    exe = _checked(
        BATCHED, _pipeline("warp-specialize=true cluster-m=2 fill-sms=false"), "cuda-host"
    )
    (fn,) = _clustered(exe)
    assert launch_of(fn)["grid"][0] == 3 * 2 * 2  # entries x clusters' tiles x cluster


CLUSTERED_MODELS = {
    "mlp": {"B": 200, "D": 64, "F": 256},
    "llama_block": {"S": 150, "D": 64, "H": 4, "HK": 2, "HD": 16, "F": 96},
    "transformer_block": {"B": 1, "S": 200, "D": 64, "F": 128},
}
"""Examples at dims that give their matmuls two or more tile rows (the small test dims give
one, where a cluster would only add a phantom block, and the pass keeps none)."""


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", CLUSTERED_MODELS)
def test_workloads_run_in_clusters_on_cuda_host(name: str, dtype: str) -> None:
    module = irkit.load(ROOT / "examples" / f"{name}.graph", CLUSTERED_MODELS[name], dtype=dtype)
    exe = _checked(module, _pipeline("warp-specialize=true cluster-m=2"), "cuda-host", seed=1)
    assert _clustered(exe)


def test_one_tile_row_keeps_no_cluster() -> None:
    graph = parse_source(GEMM.format(t="f16", m=64, n=256, k=64), "g.graph", ".graph")
    module = apply_passes(graph, parse_passes(_pipeline("warp-specialize=true cluster-m=2")))
    (fn,) = gpu_kernels(module)
    assert "cluster" not in launch_of(fn)
    assert not any(isinstance(op, ClusterBarrierOp | MbarrierArriveClusterOp) for op in fn.walk())


@pytest.mark.parametrize("variant", ["", "persistent=true"])
def test_nvrtc_builds_multicast_copies_and_cluster_barriers(variant: str, tmp_path: Path) -> None:
    """1024^3 bf16 in clusters of 2: B's boxes are UTMALDG.2D.MULTICAST (A's plain), the
    remote arrivals SYNCS.ARRIVE.TRANS64.RED, two cluster barriers (UCGABAR_ARV and _WAIT:
    after the mbarriers' init, and at the end) and no block barrier; 168 registers as
    without clusters, no spills. The remote arrivals carry no `.release.cluster` (that
    made ptxas put a MEMBAR.ALL.GPU before each, 10 in the consumer's loop)."""
    from tests.test_sass import _disassemble

    graph = parse_source(GEMM.format(t="bf16", m=1024, n=1024, k=1024), "g.graph", ".graph")
    options = f"warp-specialize=true cluster-m=2 fill-sms=false {variant}"
    module = apply_passes(graph, parse_passes(_pipeline(options)))
    (fn,) = gpu_kernels(module)
    source = kernel_source(module, fn)
    assert "__cluster_dims__(2, 1, 1)" in source
    compiled = compile_cuda(source, fn.sym_name.data, "sm_90")
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(compiled.cubin)
    ops = Counter(
        re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", _disassemble(cubin))
    )
    assert ops["UTMALDG.2D.MULTICAST"] and ops["UTMALDG.2D"], ops
    assert ops["SYNCS.ARRIVE.TRANS64.RED.A1T0"], ops
    assert ops["UCGABAR_ARV"] == ops["UCGABAR_WAIT"] == 2, ops
    assert not any(op.startswith("BAR.SYNC") for op in ops), ops
    assert ops["MEMBAR.ALL.GPU"] <= 2, ops  # the two cluster barriers' release only
    r = compiled.resources
    assert r.registers == 168 and r.spill_stores == 0 and r.stack_bytes == 0, r


def _plant(module, slip: str) -> None:
    ops = list(module.walk())
    if slip == "mask":  # B's share lands in the issuing block only
        op = next(o for o in ops if isinstance(o, TmaLoadOp) and o.cta_mask)
        op.properties["multicast"] = IntegerAttr(1, i64)
    elif slip == "share":  # block 1's share lands over block 0's (its row index dropped)
        op = next(o for o in ops if isinstance(o, TmaLoadOp) and o.cta_mask)
        op.operands[3] = op.dest_indices[3]  # [stage, atom, row, 0]: the row made 0
    elif slip == "remote":  # the consumers never hand the stage back to block 1
        drop = [o for o in ops if isinstance(o, MbarrierArriveClusterOp)][1]
        drop.detach()
        drop.erase()
    else:  # "end": a block ends while the other still arrives on its barriers
        drop = [o for o in ops if isinstance(o, ClusterBarrierOp)][-1]
        drop.detach()
        drop.erase()


@pytest.mark.parametrize("slip", ["mask", "share", "remote", "end"])
def test_a_planted_cluster_slip_fails_on_cuda_host(slip: str) -> None:
    """The control matches; each slip is a hang (bytes or arrivals that never come), a
    wrong product, or a block reached after it ended, each named in one line."""
    pipeline = _pipeline("warp-specialize=true cluster-m=2 fill-sms=false stages=2")
    named = r"mbarrier|ended|cluster"
    assert host_matches(pipeline, (256, 128, 256), None, named)
    assert not host_matches(pipeline, (256, 128, 256), lambda module: _plant(module, slip), named)


def test_lockstep_refuses_a_clustered_launch_in_one_line() -> None:
    from irkit.runtime.lockstep import LockstepError

    text = GEMM.format(t="f16", m=200, n=64, k=64)
    with pytest.raises(LockstepError, match=r"clusters of 2 blocks .* run it on cuda-host"):
        _checked(text, _pipeline("warp-specialize=true cluster-m=2"), "cuda-sim")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("cluster-m=2", "cluster-m.*needs warp-specialize=true"),
        ("warp-specialize=true cluster-m=9", "cluster-m.*from 1 to 8"),
    ],
)
def test_cluster_options_are_checked(options: str, message: str) -> None:
    graph = parse_source(GEMM.format(t="f16", m=256, n=64, k=64), "g.graph", ".graph")
    with pytest.raises(IrkitError, match=message):
        apply_passes(graph, parse_passes(_pipeline(options)))
