"""`irkit-bench advise`: edits, the rule registry (a plugin's rule used), the exploit guards
(a kernel that writes its input, one that skips work after its first call: both refused),
the record's schema, and the invariant that every piece of advice carries a paired CI above
1. Whether advice finds planted faults is measured by benchmarks/advise_eval.py, not
asserted here (a timing outcome); one marked `timing` test checks a 5x plant."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from irkit.measure.advice import RULES, AdviseOptions, Edit, advise
from irkit.measure.advice.edits import join_items, spec_items
from irkit.measure.advice.evidence import code_features, kernel_kind
from irkit.pipelines import PIPELINES
from tests.conftest import ROOT

CHEATS = ROOT / "tests" / "plugins" / "advise_cheats.py"
SOFTMAX = str(ROOT / "irkit" / "examples" / "softmax.graph")
REFERENCE = PIPELINES["default-cpu"].passes


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "irkit.cli.bench", *args], capture_output=True, text=True, cwd=ROOT
    )


def canonical(spec: str) -> str:
    return join_items(spec_items(spec))


def test_an_edit_and_its_inverse_give_the_pipeline_back() -> None:
    default = canonical("default-cpu")
    for name in ("expand-math", "fuse-kernels", "conv-to-matmul", "canonicalize", "share-buffers"):
        without = Edit.remove(name).apply("default-cpu", REFERENCE)
        assert without is not None and name not in [n for n, _ in spec_items(without)]
        assert Edit.add(name).apply(without, REFERENCE) == default  # where, and its options
    narrow = Edit.set("cpu-tile-matmul", "vector-bits", 128).apply("default-cpu", REFERENCE)
    assert narrow is not None and "cpu-tile-matmul{vector-bits=128}" in narrow
    assert Edit.set("cpu-tile-matmul", "vector-bits", None).apply(narrow, REFERENCE) == default
    off = Edit.set("fuse-kernels", "elementwise", False).apply("default-cpu", REFERENCE)
    assert off is not None and "elementwise=false" in off
    # what changes nothing is None: a pass there already, one absent, a value it has
    assert Edit.add("expand-math").apply("default-cpu", REFERENCE) is None
    assert Edit.remove("gpu-coarsen").apply("default-cpu", REFERENCE) is None
    assert Edit.set("cpu-tile-matmul", "mr", None).apply("default-cpu", REFERENCE) is None
    # a pass the reference does not run goes last
    assert Edit.add("cse").apply("baseline-cpu", ()) == (
        "lower-graph-to-loops,interchange-matmul,block-reductions,cse"
    )


def test_kernel_kinds_and_code_features() -> None:
    assert kernel_kind("k3_matmul_add_gelu") == "contraction"
    assert kernel_kind("k8_im2col_matmul_reshape_etc") == "contraction"
    assert kernel_kind("k8_attention") == "attention"
    assert kernel_kind("k0_softmax") == "reduction"
    assert kernel_kind("k19_reduce_max") == "reduction"
    assert kernel_kind("k0_transpose") == "transpose"
    assert kernel_kind("k2_concat_concat") == "movement"
    assert kernel_kind("k0_add_mul_relu_etc") == "elementwise"
    ir = (
        "%a = vector.load %x[%i] : memref<64x1024xf32>, vector<8xf32>\n"
        "%e = math.exp %v : f32\n%q = arith.divui %i, %c : index\n"
    )
    bits, features = code_features(ir)
    assert bits == 256
    assert {"scalar-math", "index-division", "rows-4k-strided"} <= features
    assert code_features("%v = arith.addf %a, %b : f32")[0] == 0


def test_every_rule_states_its_reasoning() -> None:
    assert len(RULES) >= 15
    for name, cls in RULES.items():
        assert cls.name == name
        assert len(cls.reasoning()) > 80, name  # a docstring that argues, not a label
        assert cls.families and cls.families <= {"cpu", "gpu"}


@pytest.fixture(scope="module")
def cheats() -> dict:
    """advise on softmax under baseline-cpu with the plugin's rules: its honest one and its
    cheating one, through the command line."""
    import tempfile

    out = Path(tempfile.mkdtemp()) / "advice.json"
    done = bench("advise", SOFTMAX, "-p", "baseline-cpu", "--backend", "cpu", "--budget", "4",
                 "-L", str(CHEATS), "--rules", "cheat,plugin-expand-math", "--json", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {"record": json.loads(out.read_text()), "stdout": done.stdout}


def _by_pass(record: dict) -> dict[str, dict]:
    return {h["edits"][0]["pass"]: h for h in [*record["advice"], *record["refuted"]]}


def test_a_plugin_rule_is_used(cheats: dict) -> None:
    record = cheats["record"]
    assert {"cheat", "plugin-expand-math"} == set(record["rules"])
    h = _by_pass(record)["expand-math"]
    assert h["rules"] == ["plugin-expand-math"] and h["kernels"] == ["k0_softmax"]
    assert h["status"] in ("confirmed", "refuted", "dropped")  # timed, either way
    assert h["changed_kernels"] == {"removed": ["k0_softmax"], "added": ["k0_softmax"]}


def test_a_kernel_that_writes_its_input_is_refused(cheats: dict) -> None:
    h = _by_pass(cheats["record"])["cheat-write-input"]
    assert h["status"] == "refused" and h["why"] == "it writes its input 'x'"
    assert h["speedup"] is None  # never timed
    assert "add cheat-write-input: refused" in cheats["stdout"]


def test_a_kernel_that_skips_work_after_its_first_call_is_refused(cheats: dict) -> None:
    """It passes the reference check (its first call computes) and races (far faster: it
    does nothing); the check after timing, fresh inputs with its outputs left as they were,
    catches it."""
    h = _by_pass(cheats["record"])["cheat-skip-work"]
    assert h["status"] == "refused", h
    assert h["why"].startswith("on fresh inputs after timing its outputs are wrong")
    assert h not in cheats["record"]["advice"]
    assert "cheat" not in cheats["record"]["improved_pipeline"]


def test_the_record_schema(cheats: dict) -> None:
    record = cheats["record"]
    assert record["kind"] == "irkit.advise" and record["schema"] == 1
    for key in ("model", "dims", "backend", "pipeline", "time_label", "evidence", "examined",
                "advice", "refuted", "no_advice", "improved_pipeline", "improvement", "aa",
                "rules", "protocol", "fingerprint", "seconds"):  # fmt: skip
        assert key in record, key
    (k,) = record["evidence"]
    assert k["name"] == "k0_softmax" and k["kind"] == "reduction" and 0 < k["share"] <= 1
    assert k["roof"]["bound"] in ("memory", "compute") and "scalar-math" in k["features"]
    assert record["examined"] == ["k0_softmax"]
    for h in [*record["advice"], *record["refuted"]]:
        assert {"edits", "describe", "pipeline", "rules", "kernels", "status", "why",
                "speedup", "changed_kernels"} <= set(h)  # fmt: skip
    assert record["protocol"]["placements"] >= 1 and "A/A" in record["protocol"]["comparison"]
    assert record["aa"]["ci_low"] <= record["aa"]["median"] <= record["aa"]["ci_high"]


def _check_invariant(record: dict) -> None:
    """Every piece of advice: a CI above 1 (and the A/A floor), a median gain of at least
    the minimum; the improved pipeline is the current one when there is none."""
    floor = record["aa"]["floor"] if record["aa"] else 0.0
    for h in record["advice"]:
        assert h["status"] == "confirmed"
        assert h["speedup"]["ci_low"] > 1 + floor and h["speedup"]["median"] >= 1.01
    assert all(h["status"] != "confirmed" for h in record["refuted"])
    if not record["advice"]:
        assert record["improved_pipeline"] == record["pipeline"]
        assert record["improvement"] is None


def test_every_piece_of_advice_has_a_ci_above_one(cheats: dict) -> None:
    _check_invariant(cheats["record"])


@pytest.fixture(scope="module")
def planted() -> dict:
    """softmax under default-cpu with expand-math removed (a 5x plant on this machine)."""
    spec = Edit.remove("expand-math").apply("default-cpu", REFERENCE)
    return advise(SOFTMAX, spec, "cpu", None, AdviseOptions(budget_s=6)).to_json()


def test_a_planted_fault_is_proposed_and_timed(planted: dict) -> None:
    _check_invariant(planted)
    (h,) = [h for h in [*planted["advice"], *planted["refuted"]] if "vector-math" in h["rules"]]
    assert h["describe"] == "add expand-math" and h["status"] in ("confirmed", "refuted")
    assert h["speedup"] is not None


@pytest.mark.timing
def test_a_planted_fault_is_recovered(planted: dict) -> None:
    (h,) = planted["advice"]
    assert h["describe"] == "add expand-math" and h["speedup"]["ci_low"] > 2
    assert canonical(planted["improved_pipeline"]) == canonical("default-cpu")


def test_cuda_host_times_are_labelled_host_times() -> None:
    record = advise(
        str(ROOT / "irkit" / "examples" / "gemm.graph"), "baseline-cuda", "cuda-host",
        {"M": 32, "N": 32, "K": 32}, AdviseOptions(budget_s=2, rules=("gpu-matmul-tiles",)),
    ).to_json()  # fmt: skip
    assert record["time_label"].startswith("host times")
    (h,) = [h for h in [*record["advice"], *record["refuted"]] if h["status"] != "same code"]
    assert h["describe"] == "add gpu-tile-matmul" and h["rules"] == ["gpu-matmul-tiles"]
    _check_invariant(record)


def test_counters_say_why_not_off_the_gpu() -> None:
    record = advise(SOFTMAX, "default-cpu", "cpu", {"R": 64, "C": 256},
                    AdviseOptions(budget_s=1, counters=True, rules=("vector-math",))).to_json()  # fmt: skip
    assert record["counters"] == "counters: only on the cuda backend (this is cpu); none read"
    assert record["advice"] == [] and record["no_advice"] == ["k0_softmax"]


def test_an_unknown_rule_is_one_line() -> None:
    done = bench("advise", SOFTMAX, "--backend", "cpu", "--rules", "no-such-rule")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--rules: no rule named 'no-such-rule'" in lines[0]


def test_report_has_an_advice_section(cheats: dict, tmp_path: Path) -> None:
    rec = tmp_path / "advice.json"
    rec.write_text(json.dumps(cheats["record"]))
    done = bench("report", str(rec), "-o", str(tmp_path / "r.html"))
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "r.html").read_text()
    assert "advice: softmax" in page and "it writes its input" in page


def test_declared_search_spaces_are_valid_pipelines() -> None:
    """A pass's `SEARCH_SPACE` (shared by `tune --space PASS` and `advise`): every value
    one its option accepts, in the pipeline that runs the pass."""
    from irkit.measure.tune import candidates, parse_space
    from irkit.passes import available_passes

    declared = [n for n, f in available_passes().items() if getattr(f(), "SEARCH_SPACE", None)]
    assert len(declared) >= 9
    for name in declared:
        pipeline = "default-cuda" if name.startswith("gpu-") else "default-cpu"
        if name == "block-reductions":
            pipeline = "baseline-cpu"
        assert candidates(pipeline, parse_space(name)), name


def test_gpu_occupancy_and_waves() -> None:
    from irkit.codegen.occupancy import occupancy

    launch = {"grid": (264, 1, 1), "block": (128, 1, 1), "shared": 0}
    got = occupancy(launch, {"registers": 64, "shared_bytes": 0, "spill_stores": 2})
    # 4 warps a block; 64 registers x 32 lanes = 2048 a warp: 8 blocks by registers
    assert got == {"blocks_per_sm": 8, "occupancy_pct": 50.0, "waves": 0.25, "spills": 2,
                   "limited_by": "registers"}  # fmt: skip
    big = occupancy(launch, {"registers": 32, "shared_bytes": 100 * 1024})
    assert big is not None and big["blocks_per_sm"] == 2  # 228 KiB of shared memory an SM
    assert big["limited_by"] == "shared memory"
    a100 = occupancy(launch, {"registers": 32, "shared_bytes": 100 * 1024}, arch="sm_80")
    assert a100 is not None and a100["blocks_per_sm"] == 1  # 164 KiB on sm_80
    assert occupancy(None, {}) is None and occupancy({"threads": 2}, {}) is None


@pytest.mark.timing
def test_store_puts_the_improved_pipeline_in_the_tuning_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    import irkit

    spec = Edit.remove("expand-math").apply("default-cpu", REFERENCE)
    assert spec is not None
    env = {**os.environ, "IRKIT_CACHE": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "irkit.cli.bench", "advise", SOFTMAX, "-p", spec, "--backend",
         "cpu", "--budget", "5", "--store"],
        capture_output=True, text=True, cwd=ROOT, env=env,
    )  # fmt: skip
    assert done.returncode == 0 and "recorded in the tuning database" in done.stdout, done.stderr
    monkeypatch.setenv("IRKIT_CACHE", str(tmp_path))
    exe = irkit.compile(SOFTMAX, spec, "cpu", tuned=True)
    assert canonical(exe.pipeline or "") == canonical("default-cpu")


def test_the_roof_a_program_cannot_beat() -> None:
    """`guards.roof_seconds`: per steady kernel the larger of FLOPs over peak and minimum
    bytes over its level's bandwidth (threads scale the peak and private caches), summed;
    a hypothesis under ROOF_SLACK of it is flagged, never advice."""
    from types import SimpleNamespace

    from irkit.measure.advice.guards import roof_seconds
    from irkit.runtime.ceilings import Ceilings

    ceilings = Ceilings("cpu", 10e9, 100e9, "test", "now",
                        levels=({"name": "L1d", "bytes": 32768, "bandwidth": 100e9, "private": True},))  # fmt: skip
    kernels = [
        SimpleNamespace(flops=200_000_000, min_bytes=1_000_000, launch={"threads": 2}, once=False),
        SimpleNamespace(flops=0, min_bytes=16384, launch=None, once=False),
        SimpleNamespace(flops=10**12, min_bytes=10**9, launch=None, once=True),  # packing
    ]
    exe = SimpleNamespace(kernels=kernels)
    # 2e8 / (1e11 x 2) = 1 ms (compute: memory would be 1e6 / 1e10 = 0.1 ms); 16 KiB from L1
    assert roof_seconds(exe, ceilings) == pytest.approx(1e-3 + 16384 / 100e9)
    assert roof_seconds(exe, None) is None


def test_the_hopper_ladder_is_proposed_one_step_at_a_time() -> None:
    """hopper-matmul: a bf16 gemm under default-cuda is proposed wgmma; one that has wgmma
    and TMA, warp specialization; one with every step, 256-wide tiles where C is at least
    512 wide; every proposal compiled, checked and timed (host times on cuda-host), none for
    an f32 gemm."""
    from irkit.pipelines import pipeline_steps

    gemm = str(ROOT / "irkit" / "examples" / "gemm.graph")
    steps = [s.spec for s in pipeline_steps("default-cuda")]

    def with_tile(options: str) -> str:
        tile = f"gpu-tile-matmul{{{options}}}"
        return ",".join(tile if s.startswith("gpu-tile-matmul") else s for s in steps)

    last = "wgmma=true tma=true warp-specialize=true persistent=true group-m=8"
    for pipeline, proposed, n in (
        ("default-cuda", "gpu-tile-matmul{wgmma=true}", 64),
        (with_tile("wgmma=true tma=true"), "gpu-tile-matmul{warp-specialize=true}", 64),
        (with_tile(last), None, 64),  # C one 256-wide tile column at most: no wider tiles
        (with_tile(last), "gpu-tile-matmul{block-n=256}", 512),
        (with_tile(f"{last} block-n=256"), None, 512),
    ):
        dims = {"M": 64, "N": n, "K": 64}
        record = advise(gemm, pipeline, "cuda-host", dims,
                        AdviseOptions(budget_s=1, rules=("hopper-matmul",)), dtype="bf16").to_json()  # fmt: skip
        said = [h["describe"] for h in [*record["advice"], *record["refuted"]]]
        assert said == ([proposed] if proposed else []), (pipeline, said)
    f32 = advise(gemm, "default-cuda", "cuda-host", {"M": 64, "N": 64, "K": 64},
                 AdviseOptions(budget_s=1, rules=("hopper-matmul",))).to_json()  # fmt: skip
    assert [*f32["advice"], *f32["refuted"]] == []
