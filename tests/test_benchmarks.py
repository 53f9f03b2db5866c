"""The benchmark scripts run (at smoke sizes): they check before they time, and print the
verdict against their targets; the GPU one says in one line that it needs a device."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from irkit.measure.timers import MIN_SAMPLE_S, calibrate

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_cpu_targets_prints_ratios_and_verdicts(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    r = subprocess.run(
        [sys.executable, "benchmarks/cpu_targets.py", "--quick", "--budget", "0.3", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert ">= 1.0x:" in r.stdout and ">= 2.0x:" in r.stdout
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert {rec["workload"] for rec in records} == {"gemm", "elementwise_chain", "conv_block"}
    for rec in records:
        assert all(c["passed"] for c in rec["checks"])
        s = rec["speedup_vs_numpy"]
        assert s["ci_low"] <= s["median"] <= s["ci_high"]
        has_target = rec["workload"] != "conv_block"
        assert rec["verdict"] in (("met", "median", "NOT MET") if has_target else ("no target",))


def _cpu_peers(tmp_path: Path, *args: str, timeout: int = 600) -> tuple[str, list[dict]]:
    """`cpu_peers.py --quick` with `args`: its table, and the records it appended."""
    out = tmp_path / "p.jsonl"
    r = subprocess.run(
        [sys.executable, "benchmarks/cpu_peers.py", "--quick", "--budget", "0.3", *args,
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout, [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.slow
def test_cpu_peers_checks_both_then_times_them_against_onnxruntime(tmp_path: Path) -> None:
    only = ["--only", "layernorm", "--only", "transformer_block", "--only", "conv_block"]
    table, records = _cpu_peers(tmp_path, *only, "--no-tvm", "--no-tinygrad", timeout=300)
    assert "(> 1: irkit is faster)" in table
    assert [rec["workload"] for rec in records] == ["layernorm", "transformer_block", "conv_block"]
    # numpy is a peer where it has the computation (no erf, so no GELU: not the transformer)
    assert ["numpy" in rec.get("peers", {}) for rec in records] == [True, False, True]
    for rec in records:
        assert all(c["passed"] for c in rec["checks"])
        s = rec["speedup_vs_onnxruntime"]
        assert s["ci_low"] <= s["median"] <= s["ci_high"]
        assert rec["onnxruntime"] and rec["fingerprint"]["cpu"]
        # one thread (the default) confines the process to one CPU, so no peer's own pool
        # can use a second core (XLA's YNNPACK dots did, under its one-thread flags)
        assert rec["threads"] == 1 and len(rec["cpus"]) == 1
        assert {"irkit", "onnxruntime"} <= set(rec["cores_used"])
        # CPU time over wall time: a second core would read ~2; one core reads 1 plus the
        # two clocks' skew (torch 1.12 on a loaded CI machine), so the bound is 1.5
        assert all(used <= 1.5 for used in rec["cores_used"].values()), rec["cores_used"]
        assert rec["over_threads"] == []


@pytest.mark.slow
def test_cpu_peers_times_pytorch_eager_and_compiled_where_installed(tmp_path: Path) -> None:
    """With PyTorch installed, eager and torch.compile are peers too: each checked against
    irkit's result, then timed in the same rounds; their ratios in the record."""
    pytest.importorskip("torch")
    table, records = _cpu_peers(tmp_path, "--only", "softmax", "--only", "conv_block",
                                "--no-tvm", "--no-tinygrad")  # fmt: skip
    assert sum(line.split()[0] == "torch.compile" for line in table.splitlines()) == 2
    for rec in records:
        assert {"torch", "torch.compile"} <= set(rec["peers"])
        for peer in (rec["peers"]["torch"], rec["peers"]["torch.compile"]):
            s = peer["speedup"]
            assert peer["version"] and s["ci_low"] <= s["median"] <= s["ci_high"]
        assert {"torch", "torch.compile"} <= set(rec["cores_used"])
        assert "OMP_WAIT_POLICY=PASSIVE" in rec["protocol"]


@pytest.mark.slow
def test_cpu_peers_times_iree_where_installed(tmp_path: Path) -> None:
    """With IREE installed, the same ONNX model compiled by IREE for llvm-cpu is a peer:
    checked against irkit's result, timed in the same rounds."""
    pytest.importorskip("iree.runtime")
    pytest.importorskip("iree.compiler")
    _, (rec,) = _cpu_peers(
        tmp_path, "--no-torch", "--no-tvm", "--no-tinygrad", "--only", "layernorm"
    )
    assert set(rec["peers"]) == {"iree", "numpy"} and rec["peers"]["iree"]["version"]
    s = rec["peers"]["iree"]["speedup"]
    assert s["ci_low"] <= s["median"] <= s["ci_high"]


@pytest.mark.slow
def test_cpu_peers_times_tvm_and_tinygrad_where_installed(tmp_path: Path) -> None:
    """With TVM and tinygrad installed, the same ONNX model through TVM's Relax importer
    (untuned here: tuning takes minutes) and through tinygrad's OnnxRunner are peers, each
    checked against irkit's result and timed in the same rounds, its configuration recorded."""
    pytest.importorskip("tvm.relax.frontend.onnx")
    pytest.importorskip("tinygrad.nn.onnx")
    if shutil.which("clang") is None:
        pytest.skip("tinygrad's CPU device compiles with clang")
    _, (rec,) = _cpu_peers(
        tmp_path, "--no-torch", "--tvm-trials", "0", "--only", "elementwise_chain"
    )
    assert {"tvm", "tinygrad", "numpy"} <= set(rec["peers"])
    assert rec["peers"]["tvm"]["config"] == "default lowering, untuned"
    assert rec["peers"]["tinygrad"]["config"].startswith("TinyJit")
    for peer in ("tvm", "tinygrad"):
        s = rec["peers"][peer]["speedup"]
        assert rec["peers"][peer]["version"] and s["ci_low"] <= s["median"] <= s["ci_high"]


def test_gpu_targets_needs_a_device() -> None:
    from irkit.runtime import BACKENDS

    if BACKENDS["cuda"]().available()[0]:
        pytest.skip("a CUDA device is present: the script would run in full")
    r = subprocess.run(
        [sys.executable, "benchmarks/gpu_targets.py", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1
    assert r.stderr.strip() == "gpu_targets: error: no CUDA device available"


def _gpu_targets():
    """benchmarks/gpu_targets.py as a module. Its import of cpu_baseline confines the process
    to the CPUs of its thread count and sets the thread variables (a benchmark's protocol):
    undone here, or every later test ran on one CPU."""
    import os

    cpus, env = os.sched_getaffinity(0), dict(os.environ)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_targets
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
        os.sched_setaffinity(0, cpus)
        os.environ.clear()
        os.environ.update(env)
    return gpu_targets


def test_gpu_targets_prints_the_ladder_rung_reached_and_checks_variants() -> None:
    """The gemm's line names the highest rung whose ratio its CI's low end reaches (a 0.897x
    median with CI [0.890, 0.906] read "met" beside "0.9x" before); `--variant` and `--only`
    name workloads or fail in one line (a typo in --only had run nothing, silently)."""
    g = _gpu_targets()
    rec = {"workload": "gemm", "irkit": {"seconds": {"median": 3.0e-3}}, "gflops": 45000.0,
           "fraction_of_copy_bw": 0.016, "peers": ["cublas"],
           "speed_vs_cublas": {"median": 0.897, "ci_low": 0.890, "ci_high": 0.906},
           "target": "ladder: 0.5x, 0.7x, 0.9x cuBLAS", "rung": 0.7, "verdict": True}  # fmt: skip
    assert g._line(rec).endswith("ladder: 0.5x, 0.7x, 0.9x cuBLAS: 0.7x rung reached")
    assert g._line({**rec, "rung": None, "verdict": False}).endswith("NOT MET (below 0.5x)")
    # the tensor-core ladder names its own lowest rung
    half = {**rec, "rungs": [0.6, 0.8, 0.95], "rung": None, "verdict": False}
    assert g._line(half).endswith("NOT MET (below 0.6x)")
    by_name = {w.name: w for w in g.WORKLOADS}
    assert by_name["gemm"].rungs[-1] == 0.93 and by_name["gemm_tf32"].rungs == (0.8,)
    assert {by_name[n].rungs for n in ("gemm_f16", "gemm_bf16", "gemm_bf16_8192")} == {
        (0.6, 0.8, 0.95)
    }
    r = subprocess.run(
        [sys.executable, "benchmarks/gpu_targets.py", "--variant", "gemm_typo:gpu-coarsen"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--variant 'gemm_typo:gpu-coarsen': expected WORKLOAD:PASSES" in r.stderr
    r = subprocess.run([sys.executable, "benchmarks/gpu_targets.py", "--only", "gemm", "--only", "softmx"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--only softmx: no such workload" in r.stderr.splitlines()[-1]


def test_every_gpu_targets_variant_builds_kernels_nvrtc_compiles() -> None:
    """Each workload's pipeline (a variant's options merged into default-cuda) lowers its
    model at the quick sizes to kernels NVRTC compiles for sm_90: a variant the next GPU
    session would time cannot fail on a typo. (No GPU needed; nothing runs.)"""
    gpu_targets = _gpu_targets()
    from irkit.codegen.cuda import gpu_kernels, kernel_source
    from irkit.codegen.nvrtc import compile_cuda
    from irkit.pipelines import apply_passes, parse_passes

    for w in gpu_targets.WORKLOADS:
        spec = gpu_targets.variant("default-cuda", w)
        module = apply_passes(gpu_targets.load(w, w.quick_dims), parse_passes(spec))
        kernels = gpu_kernels(module)
        assert kernels, w.name
        if w.passes:  # a variant: its kernels compile as the GPU would build them
            for fn in kernels:
                compile_cuda(kernel_source(module, fn), fn.sym_name.data, "sm_90")


@pytest.mark.slow
def test_compile_speed_records_chains_and_examples_cold_and_warm(tmp_path: Path) -> None:
    out = tmp_path / "c.jsonl"
    r = subprocess.run(
        [sys.executable, "benchmarks/compile_speed.py", "--quick", "--repeats", "2", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert [c["ops"] > 0 for c in rec["chains"]] == [True, True]
    assert rec["chains"][0]["ops"] < rec["chains"][1]["ops"]
    assert all("lower-graph-to-loops" in c["passes"] for c in rec["chains"])
    assert all(len(c["runs"]) == 2 and min(c["runs"]) <= c["seconds"] <= max(c["runs"])
               for c in rec["chains"])  # fmt: skip
    assert set(rec["examples"]) == {p.stem for p in (ROOT / "examples").glob("*.graph")}
    assert all(e["cold_s"] > 0 and e["warm_s"] > 0 for e in rec["examples"].values())


@pytest.mark.slow
def test_compile_speed_times_exported_models_cold_and_their_cuda_c(tmp_path: Path) -> None:
    """--real-models DIR: each model's cold default-cpu compile and its CUDA C, with the two
    targets judged; a model made with onnx.helper stands in for an export."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])],
        [onnx.numpy_helper.from_array(np.ones((8, 3), np.float32), "w")],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        tmp_path / "tiny.onnx",
    )
    out = tmp_path / "c.jsonl"
    r = subprocess.run(
        [sys.executable, "benchmarks/compile_speed.py", "--real-models", str(tmp_path), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert set(rec["models"]) == {"tiny"}
    assert rec["models"]["tiny"]["cold_s"] > 0 and rec["models"]["tiny"]["cuda_c_s"] > 0
    assert [t["met"] for t in rec["targets"]] == [True, True]


@pytest.mark.slow
def test_attention_benchmark_checks_and_times_three_sides(tmp_path: Path) -> None:
    """benchmarks/attention.py at a small S: irkit, onnxruntime and PyTorch's SDPA on each
    case (full, causal, grouped-query), checked before timed, with irkit's memory."""
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    out = tmp_path / "a.jsonl"
    r = subprocess.run(
        [sys.executable, "benchmarks/attention.py", "--seq", "32", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    header, *records = [json.loads(line) for line in out.read_text().splitlines()]
    assert header["benchmark"] == "attention" and header["fingerprint"]["isa"]
    assert [(x["kv_heads"], x["causal"]) for x in records] == [(8, False), (8, True), (2, True)]
    for x in records:
        assert x["irkit_ms_1t"] > 0 and x["irkit_bound_bytes"] > 0
        assert x["speed_ci_torch_1t"][0] <= x["speed_vs_torch_1t"] <= x["speed_ci_torch_1t"][1]
        assert x["speed_ci_1t"][0] <= x["speed_vs_ort_1t"] <= x["speed_ci_1t"][1]


@pytest.mark.slow
def test_llama_benchmark_checks_the_examples_against_transformers(tmp_path: Path) -> None:
    """benchmarks/llama.py at a small prompt and cache: the examples and the ONNX exports
    in irkit agree with transformers' LlamaDecoderLayer before anything is timed, and the
    decode step is placed against its memory roofline."""
    pytest.importorskip("transformers")
    pytest.importorskip("onnxruntime")
    out = tmp_path / "l.jsonl"
    r = subprocess.run(
        [sys.executable, "benchmarks/llama.py", "--seq", "24", "--cache", "40", "--threads",
         "1", "--dim", "D=64", "--dim", "H=4", "--dim", "HD=16", "--dim", "F=96", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    header, prefill, decode = [json.loads(line) for line in out.read_text().splitlines()]
    assert header["benchmark"] == "llama"
    assert prefill["block"] == "prefill" and decode["block"] == "decode"
    for x in (prefill, decode):
        assert x["example_rel_err"] <= 1e-4 and x["onnx_rel_err"] <= 1e-4
        assert x["speed_ci_1t"][0] <= x["speed_vs_ort_1t"] <= x["speed_ci_1t"][1]
    assert decode["module_rel_err"] <= 1e-4
    assert decode["roofline_ms_1t"] > 0 and decode["bytes_read"] > 0


FAKE_TARGETS = r"""#!/bin/bash
# gpu_targets.py as targets_watched sees it: each named workload in turn, its name in the
# progress file, then its record; "hang" never returns, "sticky" poisons the process (exit 3)
shift
names=()
while [ $# -gt 0 ]; do
  case $1 in --only) names+=("$2"); shift 2 ;; --progress) progress=$2; shift 2 ;;
    --out) out=$2; shift 2 ;; *) shift ;; esac
done
for n in "${names[@]}"; do
  echo "$n" >"$progress"
  [ "$n" = hang ] && sleep 600
  echo "{\"workload\": \"$n\"}" >>"$out"
  [ "$n" = sticky ] && exit 3
done
exit 0
"""


def test_a_hung_workload_is_recorded_and_the_rest_run_anew(tmp_path: Path) -> None:
    """gpu_acceptance.sh's targets_watched: a workload with no record after HANG seconds (a
    kernel that never returns cannot be stopped inside its process) is recorded as hung,
    its process killed, and the workloads not yet recorded run in a new process; so do
    those after a failure that left the device unusable (gpu_targets.py exits 3)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_TARGETS)
    (bin_dir / "python3").chmod(0o755)
    out = tmp_path / "t.jsonl"
    script = (
        f"eval \"$(sed -n '/^targets_watched() {{/,/^}}/p' benchmarks/gpu_acceptance.sh)\"; "
        f"targets=(--budget 1); PATH={bin_dir}:$PATH; "
        f"targets_watched {out} 2 a hang b sticky c"
    )
    r = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [x["workload"] for x in records] == ["a", "hang", "b", "sticky", "c"], records
    assert "hung" in records[1]["error"] and "error" not in records[2]
    assert r.returncode == 1 and "hang FAILED: hung" in r.stdout, (r.stdout, r.stderr)


@pytest.mark.slow
def test_gpu_acceptance_keeps_going_past_failing_steps(tmp_path: Path) -> None:
    """Without a GPU every device step fails, and the script still runs each, logs each,
    and ends by naming the failed ones (its exit status is their number)."""
    from irkit.runtime import BACKENDS

    if BACKENDS["cuda"]().available()[0]:
        pytest.skip("a CUDA device is present: the script would run in full")
    out = tmp_path / "acc"
    r = subprocess.run(["bash", "benchmarks/gpu_acceptance.sh", str(out), "--quick"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]
    assert [s[0] for s in steps] == [
        "host",
        "pytest_gpu",
        "run_examples",
        "gpu_targets",
        "tensor_cores",
        "flash_attention",
        "llama",
        "attribute",
        "attention",
    ]
    failed = [s[0] for s in steps if s[1] != "0"]
    device_steps = {"run_examples", "gpu_targets", "tensor_cores", "flash_attention", "llama",
                    "attribute"}  # fmt: skip
    assert device_steps | {"attention"} <= set(failed)
    assert "FAILED:" in r.stdout and all(name in r.stdout for name in failed)
    assert r.returncode >= len(failed)
    assert all((out / f"{s[0]}.log").exists() for s in steps)


@pytest.mark.slow
def test_gpu_acceptance_runs_in_full_on_cuda_host(tmp_path: Path) -> None:
    """BACKEND=cuda-host: the acceptance script's own steps, without a GPU, through the
    printed CUDA C run on the host (three examples at test sizes: a matmul chain, a decode
    step and the transformer block; every example's GPU path is tested elsewhere): every
    step passes and writes its records; the device-only steps are left out and say so."""
    import os

    out = tmp_path / "acc"
    examples = ["llama_decode", "mlp", "transformer_block"]
    env = {**os.environ, "BACKEND": "cuda-host", "SKIP": "wheels", "EXAMPLES": " ".join(examples)}
    r = subprocess.run(["bash", "benchmarks/gpu_acceptance.sh", str(out), "--quick"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:]
    steps = [line.split("\t") for line in (out / "steps.tsv").read_text().splitlines()[1:]]
    assert [s[0] for s in steps] == [
        "host", "pytest_gpu", "run_examples", "tensor_cores", "flash_attention", "llama",
        "attribute", "attention",
    ]  # fmt: skip
    assert all(s[1] == "0" for s in steps)
    assert "skipped" in (out / "gpu_targets.log").read_text()
    assert not (out / "run_gemm.json").exists()  # not among EXAMPLES
    for example in examples:
        run = json.loads((out / f"run_{example}.json").read_text())
        assert run["backend"] == "cuda-host" and run["correct"] is True
        assert json.loads((out / f"attribute_{example}.json").read_text())["backend"] == "cuda-host"
    for t in ("f16", "bf16"):  # issue 69's steps, each checked on the host
        tma, kernels = "wgmma_true_tma_true", set()
        for step in ("default", "async_copy_false", "stages_2", "stages_3", "wgmma_true", tma,
                     f"{tma}_warp_specialize_true", f"{tma}_warp_specialize_true_persistent_true",
                     f"{tma}_warp_specialize_true_persistent_true_group_m_8",
                     f"{tma}_warp_specialize_true_persistent_true_group_m_8_block_n_256"):  # fmt: skip
            run = json.loads((out / f"tensor_cores_{t}_{step}.json").read_text())
            assert run["correct"] is True and run["dtype"] == t, (t, step)
            kernels.add(run["kernels"][0]["hash"])
        assert len(kernels) == 10  # each step built a kernel of its own
    for example in ("llama_block", "llama_decode"):  # the Llama layer in bf16, prefill, decode
        run = json.loads((out / f"llama_{example}.json").read_text())
        assert run["correct"] is True and run["dtype"] == "bf16", example
    for causal in ("false", "true"):  # bf16 attention, fused, as the flash step times it
        run = json.loads((out / f"flash_attention_{causal}.json").read_text())
        assert run["correct"] is True and [k["name"] for k in run["kernels"]] == ["k0_attention"]
    cross = json.loads((out / "attribute_mlp_cross.json").read_text())
    assert cross["backends"] == ["cpu", "cuda-host"]
    fused = json.loads((out / "attribute_attention_40.json").read_text())
    (p,) = [p for p in fused["passes"] if p["pass"] == "gpu-fuse-attention"]
    assert p["changes_code"] and [k["name"] for k in p["kernels"]["added"]] == ["k0_attention"]


@pytest.mark.slow
def test_fidelity_plants_and_scores_known_effects(tmp_path: Path) -> None:
    """benchmarks/fidelity.py at a smoke size: the plants go through the public pass API,
    the truth is timed independently, and the record scores every planted effect (coverage,
    sign, significance) and the zero-cost plants; the IR-only plant gets exactly zero. No
    timing outcome is asserted: the counts are what the run measured."""
    out = tmp_path / "f.jsonl"
    r = subprocess.run(
        [sys.executable, "benchmarks/fidelity.py", "--examples", "elementwise_chain",
         "--strategies", "prefix", "--trials", "1", "--budget", "0.5", "--placements", "2",
         "--truth-seconds", "0.3", "--truth-copies", "2", "--truth-first", "1",
         "--out", str(out), "--rounds", str(tmp_path / "rounds")],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["kind"] == "irkit.fidelity" and record["placements"] == 2
    _check_saved_rounds(record)
    again = subprocess.run([sys.executable, "benchmarks/ci_reanalysis.py", str(out), "--resamples", "200"],
                           cwd=ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert again.returncode == 0, again.stderr
    rows = [
        line.split(" | ") for line in again.stdout.splitlines() if line.startswith("| elementwise")
    ]
    assert {r[2] for r in rows} == set(ci_reanalysis_rules())
    # 3 sizes, each planted twice (slower, faster), under each rule
    assert all(r[4] == "2" for r in rows) and len(rows) == 6 * 3
    rows = record["summary"]["prefix"]
    sizes = {k for k in rows if k.startswith(("slower", "faster"))}
    assert sizes == {"slower 2%", "slower 5%", "slower 20%", "faster 2%", "faster 5%", "faster 20%"}
    assert rows["plant-ir-only"] == {"n": 3, "covered": 3, "sign": 0, "significant": 0, "exact_zero": 3}  # fmt: skip
    assert rows["A/A twins"]["n"] == 6
    # the truth: sampled once before the trials and once after each of the 3 trials, two
    # copy pairs per sample and plant
    assert len(record["truth_samples"]) == 4
    assert {n: v["pairs"] for n, v in record["truth"].items()} == {
        str(n): 8 for n in record["plant_iters"].values()
    }
    for t in record["trials"]:
        assert set(t["truth"]) == {"plant-work", "plant-unwaste", "plant-zero", "plant-ir-only"}
        assert t["spin_alone_s"]["plant-work"] > 0  # the drift check
        assert not t["passes"]["plant-ir-only"]["changes_code"]
        assert t["passes"]["plant-zero"]["changes_code"]
    assert "coverage" in r.stdout and "false positives" in r.stdout


def ci_reanalysis_rules() -> list[str]:
    return ["medians", "own", "pooled", "own, floor pooled/4", "upper", "none"]


def _check_saved_rounds(record: dict) -> None:
    """Each run's saved rounds (`--rounds`) are enough to recompute its contributions: the
    point estimate of every pass, from the rounds and slots as attribution computes it
    (programs that left the rounds early NaN after, brought to the run's level)."""
    import numpy as np

    from irkit.measure.attribution import make_plan
    from irkit.measure.attribution.bootstrap import round_bootstrap

    for t in record["trials"]:
        saved = np.load(t["rounds_file"])
        seconds, slots = saved["seconds"], saved["slots"]
        assert seconds.shape[1] == slots.size and len(saved["programs"]) == seconds.shape[0]
        point = round_bootstrap(seconds, 10, 0, slots)[0]
        masks = [tuple(bool(x) for x in m) for m in saved["masks"]]
        times = {m: point[i] for m, i in zip(masks, saved["variant_program"], strict=True)}
        plan = make_plan(t["strategy"], len(saved["passes"]))
        assert set(plan.masks) == set(masks)
        contributions = plan.contributions(times)
        for label, value in zip(saved["passes"], contributions, strict=True):
            assert float(value) == pytest.approx(
                t["passes"][str(label)]["saved_s"]["value"], rel=1e-12, abs=1e-15
            )


def test_fidelity_repeats_each_trial_at_the_run_level(tmp_path: Path) -> None:
    """fidelity.py --runs N: each trial's attribution is N runs combined as `attribute
    --runs` combines them, so its CIs are the runs' (Student's t on their spread)."""
    out = tmp_path / "f.jsonl"
    r = subprocess.run(
        [sys.executable, "benchmarks/fidelity.py", "--examples", "elementwise_chain", "--quick",
         "--strategies", "ablation", "--trials", "1", "--budget", "0.3", "--placements", "2",
         "--truth-seconds", "0.2", "--truth-copies", "2", "--truth-first", "1", "--runs", "3",
         "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["runs"] == 3 and len(record["trials"]) == 3
    for t in record["trials"]:
        for name in ("plant-work", "plant-unwaste"):
            s = t["passes"][name]["saved_s"]
            assert s["ci_low"] < s["value"] < s["ci_high"]  # a t interval about the mean


@pytest.mark.slow
def test_fidelity_runs_on_the_gpu_path(tmp_path: Path) -> None:
    """benchmarks/fidelity.py on the GPU path, checked on cuda-host (the printed CUDA C run
    on this CPU) at test sizes: the plants go in before map-to-gpu and become one-thread GPU
    kernels, the truth is timed through bind and synchronize, and the record names the
    backend and carries the device fingerprint. No timing outcome is asserted."""
    out = tmp_path / "f.jsonl"
    r = subprocess.run(
        [sys.executable, "benchmarks/fidelity.py", "--backend", "cuda-host", "--quick",
         "--examples", "elementwise_chain", "--strategies", "prefix", "--trials", "1",
         "--budget", "0.5", "--placements", "2", "--truth-seconds", "0.3",
         "--truth-copies", "2", "--truth-first", "1", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["backend"] == "cuda-host" and record["quick"] and "device" in record
    assert record["dims"] == {"N": 64, "D": 96}
    rows = record["summary"]["prefix"]
    assert rows["plant-ir-only"]["exact_zero"] == rows["plant-ir-only"]["n"] == 3
    # a launch costs off the CPU: plant-zero's truth is measured there, not taken as 0
    assert record["truth"]["-1"]["pairs"] == 8
    for t in record["trials"]:
        assert t["passes"]["plant-zero"]["changes_code"]
        assert t["truth"]["plant-zero"] == -record["truth"]["-1"]["seconds"]
        assert t["placement_io"] == "shared"  # a slot's programs in one set of buffers


def test_fidelity_errors_are_in_units_of_the_ci_on_the_truths_side() -> None:
    """A planted pass's error is (estimate - truth) over its CI's half on the truth's side
    / 1.96: an asymmetric CI counts the side the truth lies on; the miss share's Wilson
    interval holds the share."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fidelity

    est = {"value": 10.0, "ci_low": 6.0, "ci_high": 11.0}  # halves 4 below, 1 above
    trial = {
        "passes": {k: {"saved_s": est} for k in ("plant-work", "plant-unwaste", "plant-zero")},
        "truth": {"plant-work": 2.0, "plant-unwaste": 12.0, "plant-zero": 10.0},
    }
    z = fidelity.standard_errors(trial)
    assert z["plant-work"] == pytest.approx((10 - 2) / (4 / 1.96))  # truth below: lower half
    assert z["plant-unwaste"] == pytest.approx((10 - 12) / (1 / 1.96))  # above: upper half
    assert z["plant-zero"] == 0.0
    lo, hi = fidelity._wilson(9, 180)
    assert 0 < lo < 9 / 180 < hi < 0.1
    # CIs of `--runs 4` are t-based (3 degrees of freedom): their own quantile, 3.18
    q = fidelity.ci_quantile({"runs": 4})
    assert q == pytest.approx(3.182446, abs=1e-6) and fidelity.ci_quantile({"runs": 1}) == 1.96
    assert fidelity.standard_errors(trial, q)["plant-work"] == pytest.approx((10 - 2) / (4 / q))


def test_fidelity_truth_scales_by_the_machine_speed_smoothed_over_neighbouring_trials() -> None:
    """The truth follows a slow drift of the machine's speed (the spins alone slowing 4%
    over the run's second half) but not one trial's noisy spin timing (a single trial's
    spins 5% slow move its truth by an eleventh of that, shared with its neighbours)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fidelity

    n = 40
    speed = np.where(np.arange(n) < n // 2, 1.0, 1.04)
    speed[10] = 1.05  # one noisy trial
    trials = [{"iters": {"plant-work": 100, "plant-unwaste": 200},
               "spin_alone_s": {"plant-work": 1e-4 * s, "plant-unwaste": 2e-4 * s}}
              for s in speed]  # fmt: skip
    fidelity.assign_truth(trials, {"100": {"seconds": 1e-4}, "200": {"seconds": 2e-4}})
    mean = speed.mean()
    work = np.array([-t["truth"]["plant-work"] for t in trials]) / 1e-4 * mean
    assert work[0] == pytest.approx(1.0, abs=0.01) and work[-1] == pytest.approx(1.04, abs=1e-9)
    assert work[10] == pytest.approx((1.05 + 10 * 1.0) / 11, abs=1e-9)
    assert trials[3]["truth"]["plant-unwaste"] == pytest.approx(
        -2 * trials[3]["truth"]["plant-work"]
    )
    # a spin timed 3x while something else ran is an interruption, not the machine's
    # speed: it moves no trial's truth, its own included
    speed[30] = 3.0
    for t, s in zip(trials, speed, strict=True):
        t["spin_alone_s"] = {"plant-work": 1e-4 * s, "plant-unwaste": 2e-4 * s}
    fidelity.assign_truth(trials, {"100": {"seconds": 1e-4}, "200": {"seconds": 2e-4}})
    clean = np.delete(speed, 30)
    work = np.array([-t["truth"]["plant-work"] for t in trials]) / 1e-4 * clean.mean()
    assert work[25:36] == pytest.approx(np.full(11, 1.04), abs=1e-9)


def test_fidelity_off_the_cpu_takes_the_truth_unscaled_and_scores_the_launch() -> None:
    """On a GPU the spins alone are host-timed around a whole program (microseconds of
    spread against a 3-us spin) and scaled the truth by up to 1.5 in the H200 runs: off the
    CPU the truth is the plants' cost in the program as measured, and plant-zero, whose
    truth there is a kernel launch, is scored for coverage like the effects, not counted as
    a false positive. The device timer falls back to the host's clock where there is none."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fidelity

    def trial(alone: float, zero_ci: tuple[float, float]) -> dict:
        ci = {"plant-work": (-1.1e-4, -0.9e-4), "plant-unwaste": (1.9e-4, 2.1e-4),
              "plant-zero": zero_ci, "plant-ir-only": (0.0, 0.0)}  # fmt: skip
        return {"strategy": "ablation", "iters": {"plant-work": 100, "plant-unwaste": 200},
                "spin_alone_s": {"plant-work": alone, "plant-unwaste": 2 * alone},
                "twins_exclude_1": [False],
                "passes": {n: {"saved_s": {"value": sum(c) / 2, "ci_low": c[0], "ci_high": c[1]},
                               "significant": c != (0.0, 0.0), "changes_code": True}
                           for n, c in ci.items()}}  # fmt: skip

    truth = {"100": {"seconds": 1e-4, "se": 1e-7, "pairs": 8},
             "200": {"seconds": 2e-4, "se": 1e-7, "pairs": 8},
             str(fidelity.ZERO): {"seconds": 2e-6, "se": 1e-8, "pairs": 8}}  # fmt: skip
    trials = [trial(a, (-2.5e-6, -1.5e-6)) for a in (0.5e-4, 1e-4, 1.5e-4)]
    trials.append(trial(1e-4, (-1.5e-6, -1.2e-6)))  # its launch missed
    fidelity.assign_truth(trials, truth, "cuda")
    assert [t["truth"]["plant-work"] for t in trials] == [-1e-4] * 4
    assert [t["truth"]["plant-zero"] for t in trials] == [-2e-6] * 4
    record = {"example": "mlp", "backend": "cuda", "loaded": False, "trials": trials,
              "plant_iters": {"0.02": 100, "0.05": 200}, "truth_samples": []}  # fmt: skip
    record["truth_samples"] = [{"diffs": {n: [v["seconds"]] * 8 for n, v in truth.items()}}]
    table = fidelity.markdown([record])
    launch = [row for row in table.splitlines() if "plant-zero (a launch)" in row]
    assert launch == [
        "| mlp | cuda, host quiet | ablation | plant-zero (a launch) | 4 | 75% | 100% | 100% |"
    ]
    assert "| mlp | cuda, host quiet | ablation | (a launch: above) | 4/4 | 0/4 |" in table
    assert "| mlp | cuda, host quiet | ablation | slower 2% | 4 | 100% |" in table

    class Host:  # a bound program with the host's clock only (as on the CPU)
        calls = 0

        def timed_graph(self):
            return lambda: None

        def run_graph(self) -> None:
            self.calls += 1

        def synchronize(self) -> None:
            pass

    bound = Host()
    seconds = fidelity.call_timer(bound, "device")()
    assert bound.calls == 1 and 0 <= seconds < 1
    assert np.isfinite(seconds)

    class Events:  # a device's events: 50 us a call, as attribution's timers would see it
        def __init__(self) -> None:
            self.asked: list[int] = []

        def sample(self, reps: int) -> float:
            self.asked.append(reps)
            return 50e-6

    events = Events()
    Host.timed_graph = lambda self: events  # type: ignore[method-assign]
    assert fidelity.call_timer(Host(), "device")() == 50e-6
    # batched as attribution's Rounds batch a 50-us program: 4 calls (200 us) a sample
    assert events.asked[-1] == calibrate(events, MIN_SAMPLE_S) == 4


def _simulated_cells(*args: str, rows: int) -> list[list[str]]:
    """benchmarks/ci_coverage_sim.py's table at a few trials: each row's two "coverage
    (width)" cells, `rows` rows, every coverage a share between 0 and 1."""
    r = subprocess.run([sys.executable, "benchmarks/ci_coverage_sim.py", *args, "--resamples", "50"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("| ") and "%" in line]
    assert len(lines) == rows
    cells = [[c for c in line.split("|") if "(" in c] for line in lines]
    assert all(len(row) == 2 for row in cells)
    assert all(0.0 <= float(c.split("%")[0]) <= 100.0 for row in cells for c in row)
    return cells


def test_ci_coverage_simulation_prints_both_estimators() -> None:
    """benchmarks/ci_coverage_sim.py runs (few trials: its numbers are not asserted, only
    that each case gets both estimators' coverage, a share between 0 and 1)."""
    _simulated_cells("--trials", "5", rows=7)


def test_ci_coverage_simulation_of_focused_rounds() -> None:
    """benchmarks/ci_coverage_sim.py --focused runs its ten cases, programs that left and
    programs sampled every k-th cycle (few trials: coverage is a share
    between 0 and 1 and widths are positive, nothing more asserted)."""
    cells = _simulated_cells("--focused", "--trials", "3", rows=10)
    assert all(float(c.split("(")[1].rstrip(") ")) > 0 for row in cells for c in row)


def test_run_to_run_measures_a_pair_trial_by_trial_and_keeps_the_record(tmp_path: Path) -> None:
    """benchmarks/run_to_run.py at a smoke size: every trial checked and timed, the record
    holds the trials and a summary computed from them (no timing outcome asserted); a
    pipeline that does not parse is one line and exit 1, and --out refuses the model."""
    out = tmp_path / "r.jsonl"
    args = [sys.executable, "benchmarks/run_to_run.py", "examples/elementwise_chain.graph",
            "--a", "lower-graph-to-loops", "--b", "fuse-kernels,lower-graph-to-loops",
            "--dim", "N=16", "--dim", "D=32", "--trials", "3", "--placements", "2",
            "--rounds", "6"]  # fmt: skip
    r = subprocess.run([*args, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["kind"] == "irkit.run_to_run" and len(record["trials"]) == 3
    assert record["fingerprint"]["git_sha"] == record["git_sha"]
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import run_to_run

    assert record["summary"] == run_to_run.summarize(record["trials"])
    assert "3 runs: difference" in r.stdout
    bad = subprocess.run([*args[:4], "no-such-pass", *args[5:]], cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert bad.returncode == 1 and "unknown pass 'no-such-pass'" in bad.stderr
    assert "Traceback" not in bad.stderr
    model = tmp_path / "m.graph"
    model.write_text((ROOT / "examples/elementwise_chain.graph").read_text())
    kept = model.read_text()
    refused = subprocess.run([*args[:2], str(model), *args[3:], "--out", str(model)], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert refused.returncode == 1 and "refusing to write over it" in refused.stderr
    assert model.read_text() == kept


def test_run_to_run_alternates_pinning_and_summarizes_each_group(tmp_path: Path) -> None:
    """`--pin alternate` under `--load`: even trials pinned (the timer on the last CPU, the
    loader on the others), odd ones free, each group summarized from its own trials; the
    process's affinity is given back at the end."""
    out = tmp_path / "r.jsonl"
    args = [sys.executable, "benchmarks/run_to_run.py", "examples/elementwise_chain.graph",
            "--a", "lower-graph-to-loops", "--b", "fuse-kernels,lower-graph-to-loops",
            "--dim", "N=16", "--dim", "D=32", "--trials", "6", "--placements", "2",
            "--rounds", "6", "--load", "--pin", "alternate", "--out", str(out)]  # fmt: skip
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert [t["pinned"] for t in record["trials"]] == [True, False] * 3
    assert record["pin"] == "alternate" and record["pinned_cpu"] == [max(os.sched_getaffinity(0))]
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import run_to_run

    for name, flag in (("pinned", True), ("unpinned", False)):
        group = [t for t in record["trials"] if t["pinned"] == flag]
        assert record["groups"][name] == run_to_run.summarize(group)
    assert "pinned: 3 runs" in r.stdout and "unpinned: 3 runs" in r.stdout


def test_run_to_run_summary_finds_a_known_run_level_component() -> None:
    """`summarize` on synthetic trials (seeded): each run's SE 1 us, and a run-level offset
    of sd 1 us that no run's SE holds: sd(z) about sqrt(2), the component about 1 us, and a
    run's 95% CI holding the mean in about P(|z| < 1.96/sqrt(2)) = 83% of runs; with no
    run-level offset, sd(z) about 1 and the component about 0."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import numpy as np
    import run_to_run

    rng = np.random.default_rng(7)
    n = 4000

    def trials(offset_sd: float) -> list[dict]:
        d = 100e-6 + rng.normal(0, 1e-6, n) + rng.normal(0, offset_sd, n)
        return [{"diff_s": float(x), "se_s": 1e-6, "a_s": 1e-3} for x in d]

    s = run_to_run.summarize(trials(1e-6))
    assert abs(s["sd_z"] - np.sqrt(2)) < 0.05 and abs(s["run_to_run_s"] - 1e-6) < 0.08e-6
    assert abs(s["ci_held_mean"] - 0.834) < 0.02 and abs(s["ci_expected_to_hold"] - 0.834) < 0.02
    assert abs(s["run_to_run_of_a"] - 1e-3) < 0.1e-3 and abs(s["lag1_autocorrelation"]) < 0.05
    s = run_to_run.summarize(trials(0.0))
    assert abs(s["sd_z"] - 1) < 0.04 and s["run_to_run_s"] < 0.25e-6
    assert abs(s["ci_held_mean"] - 0.95) < 0.015
    # a run whose copies timed identically (the timer's quantum) has no SE: its z is left
    # out, and with no run left sd(z) is undefined (None), not a division by zero
    quantized = [{"diff_s": 1e-7, "se_s": 0.0, "a_s": 1e-6}, *trials(0.0)[:50]]
    assert abs(run_to_run.summarize(quantized)["sd_z"] - 1) < 0.3
    s = run_to_run.summarize([{"diff_s": d, "se_s": 0.0, "a_s": 1e-6} for d in (1e-7, 2e-7, 1e-7)])
    assert s["sd_z"] is None and s["ci_expected_to_hold"] == 1.0
    assert "sd(z) undefined" in run_to_run.describe(s)


def test_every_fidelity_example_takes_the_plants_and_computes_right() -> None:
    """Each example fidelity.py plants into (on the CPU and on the GPU path) has test sizes,
    and its pipeline with every plant in it compiles and matches the reference there: the
    plants keep every result, whatever the example."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import fidelity

    from irkit.frontend import load
    from irkit.runtime.check import check

    plants = "plant-waste{iters=10},plant-work{iters=10},plant-unwaste,plant-zero,plant-ir-only"
    for backend in ("cpu", "cuda-sim"):
        for example, (model, _, real) in fidelity.examples_for(backend).items():
            dims = fidelity.QUICK_DIMS[example]
            exe = fidelity.compiled(backend, ROOT / model, dims, f"{real},{plants}")
            checks, _ = check(exe, load(ROOT / model, dims), seed=0)
            assert all(c.passed for c in checks), (backend, example, [c.describe() for c in checks])


@pytest.mark.parametrize("name", ["llama_prefill_bf16", "llama_decode_bf16"])
def test_the_llama_peers_compute_what_the_examples_compute(name: str) -> None:
    """The PyTorch layer gpu_targets.py times the Llama examples against (RMSNorm, rotary,
    grouped-query SDPA, SwiGLU; decode appending to the cache) agrees with irkit's float64
    reference of the example, in f32 on the CPU at the workload's quick sizes: a peer that
    computed something else would make a GPU ratio meaningless."""
    torch = pytest.importorskip("torch")
    g = _gpu_targets()
    from dataclasses import replace

    from irkit.runtime.reference import reference

    w = replace(next(w for w in g.LLAMA_LADDER if w.name == name), dtype="")
    module = g.load(w, w.quick_dims)
    inputs = g.llama_inputs(module, w.quick_dims)
    expected = reference(module, *inputs)[0]
    peer = g.torch_peers(torch)[w.peer]
    got = peer(*[torch.from_numpy(np.ascontiguousarray(a, np.float32)) for a in inputs]).numpy()
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() / np.abs(expected).max() < 1e-4


@pytest.mark.parametrize("name", ["llama_prefill_bf16", "llama_decode_bf16"])
def test_the_llama_inputs_keep_a_correct_bf16_layer_within_tolerance(name: str) -> None:
    """At width 1024 (heads of 128), PyTorch's layer computed in bf16 from the workload's
    inputs (`llama_inputs`: a trained layer's scales) is within the workload's peer
    tolerance of the float64 reference. With weights uniform in [-1, 1) it was 0.23 off at
    this width (the attention scores in the hundreds, the softmax picking keys by less
    than bf16's rounding), and at Llama-3-8B's width on the H200 neither irkit's result
    nor the peer could pass: the check measured the inputs, not the programs."""
    torch = pytest.importorskip("torch")
    g = _gpu_targets()
    from dataclasses import replace

    from irkit.runtime.reference import reference

    w = replace(next(w for w in g.LLAMA_LADDER if w.name == name), dtype="")
    dims = {**w.quick_dims, "D": 1024, "HD": 128, "F": 2048}
    module = g.load(w, dims)
    inputs = g.llama_inputs(module, dims)
    expected = reference(module, *inputs)[0]
    peer = g.torch_peers(torch)[w.peer]
    args = [
        torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(torch.bfloat16) for a in inputs
    ]
    got = peer(*args).float().numpy()
    assert np.abs(got - expected).max() / np.abs(expected).max() < w.peer_tolerance
