"""Proof that attribution's numbers mean something: synthetic games with known answers,
a planted effect recovered by every strategy, A/A comparisons that stay insignificant,
and the efficiency property on measured data."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

import irkit.measure.plants  # noqa: F401  (registers plant-work)
from irkit import load, random_inputs, reference
from irkit.cli.bench import main as bench
from irkit.errors import IrkitError
from irkit.measure.attribution import attribute, compare_pipelines, make_plan
from irkit.measure.timers import Rounds, time_cpu
from irkit.runtime import compile

CHAIN = "examples/elementwise_chain.graph"


def _unresolved(*args, **kwargs) -> set[str]:
    """The programs attribution's rounds go on with: those of the open passes."""
    from irkit.measure.attribution.sampling import open_passes

    return set().union(*open_passes(*args, **kwargs))


SMALL = {"N": 64, "D": 256}


def _game(k: int, value) -> dict:
    return {m: np.float64(value(m)) for m in itertools.product((False, True), repeat=k)}


def test_exact_shapley_matches_a_game_with_known_values() -> None:
    # T = 10 - 2a - 1b - 0.5ab: a and b share the interaction; c does nothing.
    t = _game(3, lambda m: 10 - 2 * m[0] - 1 * m[1] - 0.5 * (m[0] and m[1]))
    plan = make_plan("shapley", 3)
    phi = [float(x) for x in plan.contributions(t)]
    assert phi == pytest.approx([2.25, 1.25, 0.0])
    assert sum(phi) == pytest.approx(t[(False,) * 3] - t[(True,) * 3])


def test_prefix_and_ablation_on_the_same_game() -> None:
    t = _game(3, lambda m: 10 - 2 * m[0] - 1 * m[1] - 0.5 * (m[0] and m[1]))
    prefix = [float(x) for x in make_plan("prefix", 3).contributions(t)]
    assert prefix == pytest.approx([2.0, 1.5, 0.0])  # b gets the interaction: it came second
    ablation = [float(x) for x in make_plan("ablation", 3).contributions(t)]
    assert ablation == pytest.approx([2.5, 1.5, 0.0])  # both get it: ablation double counts


def test_sampled_shapley_keeps_efficiency_and_approaches_the_exact_values() -> None:
    k = 10
    weights = np.linspace(0.1, 1.0, k)

    def value(m):
        on = np.array(m, dtype=float)
        return 100 - weights @ on - 0.3 * on[0] * on[1] - 0.2 * on[2] * on[3] * on[4]

    plan = make_plan("shapley", k, permutations=400, seed=1)
    assert plan.permutations and len(plan.masks) < 2**k
    t = {m: np.float64(value(m)) for m in plan.masks}
    phi = np.array([float(x) for x in plan.contributions(t)])
    assert phi.sum() == pytest.approx(value((False,) * k) - value((True,) * k))
    exact = weights.copy()
    exact[[0, 1]] += 0.15
    exact[[2, 3, 4]] += 0.2 / 3
    assert np.abs(phi - exact).max() < 0.05


def test_null_players_kept_on_leave_the_other_passes_exact_shapley_values() -> None:
    """Passes that change nothing (1 and 4 of 6) kept in every variant: 2^4 variants, not
    2^6; each null pass contributes exactly 0 and the others get the exact Shapley values
    of the whole game (with interactions)."""
    k, fixed = 6, frozenset({1, 4})
    weights = np.array([3.0, 0.0, 2.0, 1.0, 0.0, 0.5])

    def value(m):
        on = np.array(m, dtype=float)
        return 100 - weights @ on - 0.6 * on[0] * on[2]

    full = make_plan("shapley", k)
    pruned = make_plan("shapley", k, fixed=fixed)
    assert len(pruned.masks) == 2**4 and all(m[1] and m[4] for m in pruned.masks)
    assert pruned.empty == (False, True, False, False, True, False)
    exact = full.contributions({m: np.float64(value(m)) for m in full.masks})
    got = pruned.contributions({m: np.float64(value(m)) for m in pruned.masks})
    np.testing.assert_allclose([float(x) for x in got], [float(x) for x in exact], atol=1e-12)
    assert float(got[1]) == float(got[4]) == 0.0


def test_sampled_orders_come_in_antithetic_pairs_and_their_sampling_is_in_the_spread() -> None:
    """Past exact Shapley: half the orders drawn, half their reverses; with bootstrap
    replicates of the times, each replicate resamples the pairs, so a pass whose marginal
    depends on its context gets a spread from the orders alone (here the times have no
    noise), and an additive pass none; `orders=False` leaves the orders as drawn. (A
    pairwise interaction has no spread: an order and its reverse put each of the two
    first once, so a pair's mean marginal is exact; a three-way one does.)"""
    k = 10
    plan = make_plan("shapley", k, permutations=16, seed=3, fixed=frozenset({9}))
    assert plan.antithetic and len(plan.permutations) == 16
    for a, b in zip(plan.permutations[:8], plan.permutations[8:], strict=True):
        assert b == a[::-1] and 9 not in a
    weights = np.linspace(0.1, 1.0, k)
    weights[9] = 0.0

    def value(m):
        on = np.array(m, dtype=float)
        return 100 - weights @ on - 2.0 * on[0] * on[1] * on[2] - 1.0 * on[3] * on[4]

    replicated = {m: np.full(200, value(m)) for m in plan.masks}
    spread = [float(np.std(c)) for c in plan.contributions(replicated)]
    assert min(spread[:3]) > 0.05  # a three-way interaction: the orders' sampling shows
    assert max(spread[3:]) < 1e-9  # pairwise or additive: every pair of orders agrees
    fixed_orders = plan.contributions(replicated, orders=False)
    assert max(float(np.std(c)) for c in fixed_orders) < 1e-9


@pytest.mark.parametrize("k", [9, 18, 30])
def test_a_sampled_shapley_plan_holds_every_pair_the_kernel_view_shows(k: int) -> None:
    """Past exact Shapley, the plan samples orders; the (without pass i, all) pair each pass's
    kernels are shown by is in it for every pass, not only where pass i came last in some
    order (default-cpu's 17 optional passes and a plugin's: one missing, a KeyError)."""
    plan = make_plan("shapley", k)
    assert plan.permutations
    for i in range(k):
        assert set(plan.pair(i)) <= set(plan.masks)


def test_passes_that_change_nothing_are_kept_in_every_variant_and_valued_zero(
    tmp_path, monkeypatch
) -> None:
    """The engine finds the optional passes that change no IR state (cse, canonicalize and
    reshape-views on a chain with nothing to fold, share or reshape), keeps them in every
    variant, and confirms
    it in the run; they are valued 0 with no code change, the record names them. A second
    run (a warm cache) takes the first's as its candidates instead of probing, and confirms
    them as well; a stale entry naming a pass that does change code is refuted and refit."""
    import hashlib
    import json

    from irkit.codegen.disk_cache import cache_dir

    monkeypatch.setenv("IRKIT_CACHE", str(tmp_path))
    spec = "canonicalize,cse,fuse-kernels,lower-graph-to-loops,reshape-views,expand-math"
    runs = [attribute(CHAIN, spec, "cpu", "shapley", {"N": 8, "D": 16}, budget_s=0.3).to_json()
            for _ in range(2)]  # fmt: skip
    assert [r["protocol"]["null_candidates"] for r in runs] == ["probe", "cache"]
    for record in runs:
        proto = record["protocol"]
        assert proto["null_passes"] == ["canonicalize", "cse", "reshape-views"]
        assert proto["variants"] == 2**2  # the 2 others, exactly
        rows = {p["pass"]: p for p in record["passes"]}
        assert not rows["cse"]["changes_code"] and not rows["canonicalize"]["changes_code"]
        assert rows["fuse-kernels"]["changes_code"]
    (entry,) = (cache_dir("attribution")).iterdir()
    raw = entry.read_bytes()
    stale = json.dumps([0, 1, 2, 3]).encode()  # fuse-kernels (2) among them: it changes code
    entry.write_bytes(hashlib.sha256(stale).digest()[:16] + stale)
    refit = attribute(CHAIN, spec, "cpu", "shapley", {"N": 8, "D": 16}, budget_s=0.3).to_json()
    assert refit["protocol"]["null_candidates"] == "cache"
    assert refit["protocol"]["null_passes"] == ["canonicalize", "cse", "reshape-views"]
    assert entry.read_bytes() == raw  # the confirmed set stored again


def test_an_unknown_strategy_is_one_line() -> None:
    from irkit.errors import IrkitError

    with pytest.raises(IrkitError, match="unknown strategy 'greedy'"):
        make_plan("greedy", 3)


@pytest.fixture(scope="module")
def planted_seconds() -> tuple[float, float]:
    """The planted kernel timed alone: (median, CI half-width in seconds)."""
    exe = compile(CHAIN, "lower-graph-to-loops,plant-work", "cpu", SMALL)
    index = [k.name for k in exe.kernels].index("planted_work")
    bound = exe.bind(*random_inputs(exe.graph))
    e = time_cpu(lambda: bound.run_kernel(index), budget_s=2.0, min_samples=20).estimate
    return e.median, (e.high - e.low) / 2


@pytest.mark.timing
@pytest.mark.parametrize("strategy", ["prefix", "ablation", "shapley"])
@pytest.mark.parametrize("trial", [0, 1])
def test_every_strategy_recovers_a_planted_effect(strategy, trial, planted_seconds) -> None:
    planted, planted_halfwidth = planted_seconds
    result = attribute(CHAIN, "fuse-kernels,lower-graph-to-loops,plant-work", "cpu", strategy,
                       SMALL, precision=0.005, budget_s=4.0, seed=trial)  # fmt: skip
    plant = next(p for p in result.passes if p.label == "plant-work")
    assert plant.changes_code and plant.significant
    assert plant.saved.value < 0  # it makes the model slower
    # The planted size is known to within its own CI plus 3%: the kernel timed alone (called
    # through ctypes, back to back) and the same kernel inside the driver differ by about
    # 1-2% on this host. The attributed delta's CI must reach that band.
    slack = planted_halfwidth + 0.03 * planted
    assert plant.saved.low - slack <= -planted <= plant.saved.high + slack, (plant.saved, planted)
    assert [k.name for k in plant.added] == ["planted_work"] and not plant.removed


@pytest.mark.timing
def test_a_a_comparisons_are_not_significant_at_the_stated_rate() -> None:
    # This failed in CI (3 of 12) while bound buffers sat wherever the allocator put them:
    # two binds of one program then differed by ~5% (sd) through 4K aliasing, and 12-19%
    # of A/A comparisons were flagged. Page-aligned buffers bring that to ~0.4%.
    trials = 12
    flagged = sum(
        compare_pipelines(
            CHAIN, "default-cpu", "default-cpu", "cpu", SMALL, budget_s=0.5, seed=s
        ).significant  # fmt: skip
        for s in range(trials)
    )
    # At a 5% rate, 3 or more of 12 has probability 2%; a biased protocol fails this.
    assert flagged <= 2


@pytest.mark.timing
def test_a_real_difference_is_significant() -> None:
    c = compare_pipelines(CHAIN, "lower-graph-to-loops", "lower-graph-to-loops,plant-work",
                          "cpu", SMALL, budget_s=1.0)  # fmt: skip
    assert c.significant and c.ratio.low > 1


def test_a_comparison_binds_both_pipelines_and_the_twin_as_placement_slots() -> None:
    # whatever the timings: the slots bound, shared inputs and outputs on the CPU, the
    # copies' spread estimated, and the ratio's CI about its point
    c = compare_pipelines(CHAIN, "lower-graph-to-loops", "lower-graph-to-loops,plant-work",
                          "cpu", SMALL, budget_s=0.3, placements=4)  # fmt: skip
    assert c.placements == 4 and c.placement_io == "shared"
    assert c.copy_sd is not None and c.copy_sd >= 0 and c.rounds >= 10
    assert c.ratio.low <= c.ratio.value <= c.ratio.high and c.floor >= 0
    one = compare_pipelines(CHAIN, "lower-graph-to-loops", "lower-graph-to-loops", "cpu", SMALL,
                            budget_s=0.2, placements=1)  # fmt: skip
    assert one.placements == 1 and one.copy_sd is None
    with pytest.raises(IrkitError, match="compare_pipelines: placements must be an integer"):
        compare_pipelines(CHAIN, "cse", "cse", "cpu", SMALL, placements=0)


def test_shapley_contributions_sum_to_the_measured_total(tmp_path) -> None:
    result = attribute(CHAIN, "cse,fuse-kernels,lower-graph-to-loops,plant-work", "cpu",
                       "shapley", SMALL, budget_s=3.0)  # fmt: skip
    total = result.total_saved
    summed = sum(p.saved.value for p in result.passes)
    assert math.isclose(summed, total.value, rel_tol=1e-9, abs_tol=1e-15)
    assert total.low <= summed <= total.high
    cse = next(p for p in result.passes if p.label == "cse")
    assert not cse.changes_code and cse.saved.value == 0 and not cse.significant
    assert result.protocol["programs_measured"] == 4  # 8 variants; cse changes nothing


def test_cli_attribute_mlp_shapley_writes_every_optional_pass(tmp_path, capsys) -> None:
    out = tmp_path / "out.json"
    code = bench(["attribute", "examples/mlp.graph", "--backend", "cpu", "--strategy", "shapley",
                  "--dim", "B=4", "--dim", "D=64", "--dim", "F=256", "--budget", "3",
                  "--json", str(out)])  # fmt: skip
    assert code == 0
    record = json.loads(out.read_text())
    optional = [s["pass"] for s in record["steps"] if s["optional"]]
    assert optional == ["canonicalize", "cse", "cpu-fuse-attention", "conv-layout", "fold-transposes", "conv-to-matmul",
                        "fold-constants", "fuse-kernels", "reshape-views", "pad-leading-dims", "cpu-tile-matmul",
                        "cpu-tile-transpose", "expand-math", "cpu-fuse-rows", "interchange-reductions",
                        "unroll-windows", "delinearize-loops", "reassociate-reductions",
                        "split-concat", "simplify-indices",
                        "cpu-parallelize", "share-buffers"]  # fmt: skip
    assert [p["pass"] for p in record["passes"]] == optional
    for p in record["passes"]:
        s = p["saved_s"]
        assert s["ci_low"] <= s["value"] <= s["ci_high"]
    assert record["protocol"]["stop_reason"] in ("resolved", "budget", "max_samples")
    assert record["fingerprint"]["git_sha"] is not None and record["ceilings"]["flops"] > 0
    shown = capsys.readouterr().out
    assert "fuse-kernels" in shown and "A/A check" in shown


def test_attribute_refuses_a_pipeline_without_optional_passes(capsys) -> None:
    code = bench(["attribute", CHAIN, "--backend", "cpu", "-p", "baseline-cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err == (
        "irkit-bench: -p: error: pipeline 'baseline-cpu' has no optional pass to attribute"
    )


def test_a_variant_with_a_wrong_result_is_never_timed(capsys) -> None:
    import tests.broken  # noqa: F401  (registers break-add, an "optimization" that is wrong)

    code = bench(["attribute", CHAIN, "--backend", "cpu", "--dim", "N=8", "--dim", "D=8",
                  "-p", "lower-graph-to-loops,break-add"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1
    assert "the variant with all optional passes" in err[0] and "not timed" in err[0]


def test_once_per_bind_kernels_are_not_counted_per_call() -> None:
    """A pass that adds a weight-packing kernel (run once per bind) is not charged its time
    per call in the kernels' sum, and the record says which kernels those are."""
    from irkit.measure.attribution import Interval, KernelTime, PassResult

    def kernel(name: str, seconds: float, once: bool = False) -> KernelTime:
        return KernelTime(name, name, seconds, (seconds, seconds), 10, 10, None, once)

    one = Interval(1.0, 0.9, 1.1)
    result = PassResult("cpu-tile-matmul", "cpu-tile-matmul", one, one, 0.5, True, True,
                        removed=[kernel("naive", 5e-3)],
                        added=[kernel("tiled", 1e-3), kernel("pack", 4e-3, once=True)])  # fmt: skip
    assert result.kernel_delta == pytest.approx(4e-3)
    added = result.to_json()["kernels"]["added"]
    assert [k["once_per_bind"] for k in added] == [False, True]


@pytest.mark.parametrize("backend", ["cpu", "cuda-sim"])
def test_a_variant_that_computes_a_wrong_result_is_refused_before_timing(backend: str) -> None:
    """Each distinct program is checked on the call that binds it (its outputs start as
    NaN): the variant with the planted miscompile is named, and nothing is timed."""
    import tests.broken  # noqa: F401  (registers break-add)
    from irkit.errors import IrkitError

    pipeline = "fuse-kernels,lower-graph-to-loops,break-add"
    if backend == "cuda-sim":
        pipeline += ",map-to-gpu"
    with pytest.raises(IrkitError, match=r"break-add.*computes a wrong result"):
        attribute("examples/elementwise_chain.graph", pipeline, backend=backend,
                  strategy="prefix", dims={"N": 64, "D": 64}, budget_s=0.5)  # fmt: skip


def test_cross_backend_attribution_compares_passes_on_cpu_and_cuda_host(tmp_path, capsys) -> None:
    """One pipeline attributed on two backends in one record; passes that change no code
    agree exactly, fuse-kernels changes code on both, and the host-run CUDA C is labelled
    as such (its times are not a GPU's)."""
    out = tmp_path / "cross.json"
    code = bench(["attribute", CHAIN, "--backend", "cpu,cuda-host", "--dim", "N=16",
                  "--dim", "D=64", "--budget", "1", "--no-kernel-times", "--json", str(out)])  # fmt: skip
    assert code == 0
    record = json.loads(out.read_text())
    assert record["kind"] == "irkit.attribution.cross_backend"
    assert record["backends"] == ["cpu", "cuda-host"]
    assert [r["backend"] for r in record["records"]] == ["cpu", "cuda-host"]
    assert "not a GPU time" in record["timers"]["cuda-host"]
    assert all(r["pipeline"] == record["pipelines"][r["backend"]] for r in record["records"])
    # both bind a slot's programs into one set of inputs and outputs (the host path too)
    assert [r["protocol"]["placement_io"] for r in record["records"]] == ["shared", "shared"]
    rows = {row["pass"]: row for row in record["comparison"]}
    assert rows["cse"]["verdict"] == "agree: no code change on any"
    fuse = rows["fuse-kernels"]["effects"]
    assert fuse["cpu"]["changes_code"] and fuse["cuda-host"]["changes_code"]
    assert rows["fuse-kernels"]["verdict"].split(":")[0] in ("agree", "differ", "differ in size")
    shown = capsys.readouterr().out
    assert "cross-backend attribution" in shown and "cuda-host: times are" in shown


def test_fused_attention_is_attributed_on_cpu_and_cuda_host_side_by_side(tmp_path, capsys) -> None:
    """Without -p, each backend runs its own default pipeline's shared passes: default-cpu's
    cpu-fuse-attention and default-cuda's gpu-fuse-attention are one row, `fuse-attention`,
    each changing its backend's program (one fused kernel in place of the decomposed
    chain's) and each attributed with its CI."""
    model = tmp_path / "att.graph"
    model.write_text(
        "model att\ninput q : f32[1, 4, 32, 16]\ninput k : f32[1, 2, 32, 16]\n"
        "input v : f32[1, 2, 32, 16]\noutput y = attention(q, k, v, causal=true)\n"
    )
    out = tmp_path / "cross.json"
    code = bench(["attribute", str(model), "--backend", "cpu,cuda-host", "--budget", "1",
                  "--no-kernel-times", "--json", str(out)])  # fmt: skip
    assert code == 0
    record = json.loads(out.read_text())
    assert "cpu-fuse-attention" in record["pipelines"]["cpu"].split(",")
    assert "gpu-fuse-attention" in record["pipelines"]["cuda-host"].split(",")
    rows = {row["pass"]: row for row in record["comparison"]}
    fused = rows["fuse-attention"]
    assert fused["names"] == {"cpu": "cpu-fuse-attention", "cuda-host": "gpu-fuse-attention"}
    assert all(e["changes_code"] for e in fused["effects"].values())
    for r in record["records"]:
        (p,) = [p for p in r["passes"] if p["pass"].endswith("fuse-attention")]
        assert [k["name"] for k in p["kernels"]["added"]] == ["k0_attention"]
        assert any("batch_matmul" in k["name"] for k in p["kernels"]["removed"])
    shown = capsys.readouterr().out  # the row names the pass on each (rich may wrap the cell)
    assert "fuse-attention (cpu-fuse-attention" in shown and "gpu-fuse-attention)" in shown


def test_cross_backend_verdicts() -> None:
    from irkit.measure.cross import common_pipeline, verdict

    def effect(value: float, low: float, high: float, significant=True, changes=True) -> dict:
        return {"speedup": {"value": value, "ci_low": low, "ci_high": high},
                "significant": significant, "changes_code": changes}  # fmt: skip

    fast, faster, slow = effect(1.2, 1.1, 1.3), effect(2.0, 1.9, 2.1), effect(0.8, 0.7, 0.9)
    noise = effect(1.0, 0.99, 1.01, significant=False)
    assert verdict({"a": fast, "b": effect(1.25, 1.2, 1.3)}) == "agree: faster on all, CIs overlap"
    assert verdict({"a": fast, "b": faster}) == "differ in size: faster on all, CIs apart"
    assert verdict({"a": fast, "b": slow}) == "differ: faster on a, slower on b"
    assert verdict({"a": fast, "b": noise}) == "differ: an effect on a only"
    assert verdict({"a": noise, "b": noise}) == "agree: within noise on all"
    assert (
        verdict({"a": fast, "b": effect(1, 1, 1, False, False)}) == "differ: changes code on a only"
    )
    assert verdict({"a": fast, "b": None}) == "not in the pipeline on b"
    shared = common_pipeline(["cpu", "cuda-host"])
    cpu, gpu = shared["cpu"].split(","), shared["cuda-host"].split(",")
    assert "fuse-kernels{concat-transposes=false}" in cpu and "fuse-kernels" in gpu
    # each target's own form of a pass both have, in its own pipeline: compared by kind
    assert "cpu-fuse-attention" in cpu and "gpu-fuse-attention" in gpu
    assert "cpu-tile-matmul" in cpu and "gpu-tile-matmul" in gpu
    # what one pipeline alone has is left out
    assert "cpu-parallelize" not in cpu and "gpu-coarsen" not in gpu


def test_cross_backend_needs_two_different_backends(capsys) -> None:
    code = bench(["attribute", CHAIN, "--backend", "cpu,cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and "two or more different backends" in err and len(err.splitlines()) == 1


def test_records_say_whether_the_machine_was_loaded(capsys) -> None:
    """Issue 24: the load around the timings is in the protocol, and a loaded machine is
    named beside the noise floor."""
    from rich.console import Console

    from irkit.cli.views import show_attribution
    from irkit.measure.fingerprint import load_record

    assert load_record(3.2, 0.4)["loaded"] and not load_record(0.9, 1.4)["loaded"]
    assert not load_record(None, None)["loaded"]
    # a one-thread program that had the CPU 60% of its wall time waited for a core; a
    # two-thread one may use any share, and a share near 1 is a quiet run
    waited = load_record(0.2, 0.3, cpu_over_wall=0.6, threads=1)
    assert waited["loaded"] and waited["waited_for_a_core"]
    assert not load_record(0.2, 0.3, cpu_over_wall=0.6, threads=2)["loaded"]
    assert not load_record(0.2, 0.3, cpu_over_wall=0.98, threads=1)["loaded"]
    record = attribute(CHAIN, "cse,fuse-kernels,lower-graph-to-loops", "cpu", "prefix",
                       {"N": 8, "D": 16}, budget_s=0.3).to_json()  # fmt: skip
    load = record["protocol"]["load"]
    assert set(load) >= {"load_1min_start", "load_1min_end", "cpus", "loaded", "rule"}
    assert load["threads"] == 1 and 0 < load["cpu_over_wall"]  # the CPU share was measured
    record["protocol"]["load"] = load_record(4.7, 3.9)
    show_attribution(Console(width=200), record)
    out = capsys.readouterr().out
    assert "the machine was loaded: 1-minute load 4.70 at the start" in out
    # what a CI holds, and what it cannot (2026-11-27: a run's state moved mlp's tiling
    # effect by 4 of its run's SEs between runs)
    assert "this run's rounds and placements (a run's state is not in it" in " ".join(out.split())
    record["protocol"]["load"] = load_record(0.1, 0.2, cpu_over_wall=0.55, threads=1)
    show_attribution(Console(width=200), record)
    assert "had the CPU 55% of its wall time on one thread" in capsys.readouterr().out
    # other runnable threads: on this host's CPUs, a one-thread program shares a core when
    # the others fill the rest; the run queue at the start and end is recorded
    cpus = load["cpus"]
    assert load_record(0.1, 0.1, threads=1, run_queue_start=cpus)["crowded"]
    assert not load_record(0.1, 0.1, threads=1, run_queue_start=cpus - 1, run_queue_end=0)["loaded"]
    assert {"run_queue_start", "run_queue_end", "run_queue_mean", "run_queue_samples"} <= set(load)
    # sampled through the rounds, the run queue decides, not the lagging load average: a
    # finished step's threads (load 4.7) with no other process runnable now is not loaded;
    # one other thread runnable on average is
    assert not load_record(4.7, 4.4, threads=1, run_queue_mean=0.0, run_queue_samples=40)["loaded"]
    # one reading of a thread awake for a moment at the start of a quiet run is not load
    # (it had made a 2-thread program on 2 CPUs read as crowded); one busy core beside a
    # program filling the others is
    fills = min(cpus, 2)
    assert not load_record(1.3, 1.3, threads=fills, run_queue_start=cpus - fills + 1,
                           run_queue_end=0, run_queue_mean=0.03, run_queue_samples=40)["loaded"]  # fmt: skip
    assert load_record(0.1, 0.1, threads=fills, run_queue_mean=1.0, run_queue_samples=40)["loaded"]
    busy = load_record(0.3, 0.2, threads=1, run_queue_mean=1.0, run_queue_samples=40)
    assert busy["loaded"] and busy["others_busy"]
    record["protocol"]["load"] = busy
    show_attribution(Console(width=200), record)
    assert "other processes' threads runnable 1.00 on average over 40 readings" in (
        capsys.readouterr().out
    )


def test_the_run_queue_leaves_out_the_measuring_process_own_threads() -> None:
    """Issue 24: threads of the measuring process (here 3 threads hashing outside the GIL,
    runnable nearly all the time) are not other processes' load; on the GPU host numpy's
    BLAS workers, spinning after a reference check, had read as 15 other runnable threads."""
    import hashlib
    import threading
    import time

    from irkit.measure.fingerprint import RunQueueSampler, _own_running, run_queue

    if run_queue() is None:
        pytest.skip("no /proc/stat on this OS")
    stop = threading.Event()
    data = bytes(1 << 20)

    def spin() -> None:
        while not stop.is_set():
            hashlib.sha256(data).digest()  # hashlib releases the GIL for large inputs

    spinners = [threading.Thread(target=spin) for _ in range(3)]
    for t in spinners:
        t.start()
    try:
        time.sleep(0.05)
        own = max(_own_running() for _ in range(20))
        sampler = RunQueueSampler(interval_s=0.0)
        for _ in range(20):
            sampler()
    finally:
        stop.set()
        for t in spinners:
            t.join()
    assert own >= 3  # the hashing threads are counted as this process's own
    assert len(sampler.samples) == 20 and sampler.mean is not None


def test_attribute_cli_placements_pinning_and_quiet_machine(tmp_path, capsys) -> None:
    """Issue 24: `--placements`, `--pin` and `--quiet-machine` reach the record: how many
    copies were bound, the CPUs the process ran on, and how long it waited for quiet (a
    short limit here: the test does not depend on the host being quiet)."""
    import os

    from irkit.measure.fingerprint import wait_until_quiet

    out = tmp_path / "a.json"
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    try:
        code = bench(["attribute", CHAIN, "-p", "cse,fuse-kernels,lower-graph-to-loops",
                      "--backend", "cpu", "--dim", "N=8", "--dim", "D=16", "--budget", "0.3",
                      "--placements", "2", "--pin", str(cpu), "--quiet-machine", "1",
                      "--no-kernel-times", "--json", str(out)])  # fmt: skip
    finally:
        os.sched_setaffinity(0, before)
    assert code == 0, capsys.readouterr().err
    proto = json.loads(out.read_text())["protocol"]
    assert proto["placements"] == 2 and proto["pinned_cpus"] == [cpu]
    attempts = proto["quiet_machine"]["attempts"]
    assert 1 <= len(attempts) <= 3 and attempts[0]["quiet_wait"]["waited_s"] >= 0.9
    assert wait_until_quiet(0.0)["run_queue"] is not None
    with pytest.raises(SystemExit) as exit_:
        bench(["attribute", CHAIN, "--pin", "99999"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "CPUs '99999': this process may run on" in err[-1]


def test_one_significance_rule_in_seconds_with_a_minimum_detectable_effect() -> None:
    """Issue 24: one rule, in seconds per call: significant when the saving's CI excludes 0
    (and, where an A/A check of its contexts failed, beyond that floor); the minimum
    detectable effect is the saving called significant with 80% power, (1.96 + 0.84)
    standard errors, or the floor where larger."""
    from irkit.measure.attribution import Interval, significance

    saving = Interval(2e-6, 1e-6, 3e-6)  # half-width 1e-6: standard error 1e-6 / 1.96
    assert significance(saving, True) == (True, pytest.approx(2.8e-6 / 1.96))
    assert significance(saving, True, 5e-6) == (False, 5e-6)  # a failed A/A's floor
    assert significance(Interval(2e-6, -1e-6, 5e-6), True) == (False, pytest.approx(3e-6 * 2.8 / 1.96))  # fmt: skip
    assert significance(Interval(-4e-6, -5e-6, -3e-6), True)[0]  # a slowdown counts too
    assert significance(saving, False) == (False, None)  # no code change: exactly zero


def test_the_bootstrap_resamples_placements_as_well_as_rounds() -> None:
    """Issue 24: copies of one program sit at different offsets (here +-3%); rounds rotate
    through them. A bootstrap over rounds alone gives a CI far narrower than the spread of
    the copies' levels, which a new set of copies would move the median by; the two-stage
    bootstrap's CI covers it. The point is the plain median without copies, the mean of
    the copies' medians with them."""
    from irkit.measure.attribution.bootstrap import round_bootstrap

    rng = np.random.default_rng(0)
    copies, rounds = 4, 200
    slots = np.arange(rounds) % copies
    offsets = np.array([0.97, 1.03, 1.01, 0.99])
    samples = (offsets[slots] * (1 + 0.002 * rng.standard_normal(rounds)))[None, :]
    point, flat = round_bootstrap(samples, 2000, 0)
    point2, placed = round_bootstrap(samples, 2000, 0, slots)
    assert point[0] == np.median(samples)
    per_copy = [np.median(samples[0, slots == c]) for c in range(copies)]
    assert point2[0] == pytest.approx(np.mean(per_copy), rel=1e-12)
    width = lambda b: np.quantile(b, 0.975) - np.quantile(b, 0.025)  # noqa: E731
    # the spread of the mean of 4 copies with sd 0.026, the sd estimated from those 4:
    # 95% width 2 x t(0.975, 3 df) x 0.026 / sqrt(4)
    assert width(placed[0]) == pytest.approx(2 * 3.182 * np.std(offsets, ddof=1) / 2, rel=0.25)
    assert width(placed[0]) > 2 * width(flat[0])
    # one program per row: the replicates of every row draw the same rounds (copies with no
    # offsets here, so the rounds are all there is)
    steady = 1 + 0.01 * rng.standard_normal(rounds)
    _, both = round_bootstrap(np.vstack([steady, steady * 1.5]), 500, 1, slots)
    assert np.corrcoef(both)[0, 1] > 0.9


def test_the_placement_bootstrap_is_calibrated_on_simulated_programs() -> None:
    """Issue 24: the CI of a difference between two programs covers the true difference at
    about its stated rate when everything a real run has is simulated: a fresh set of
    copies per experiment with offsets (sd 1%), a common factor per round (sd 6%, the VM's
    speed), a drift over the run (up to 5% either way) and noise per sample (sd 4%), rounds
    rotating through 4 copies. (Subtracting round noise estimated with the drift in it
    undercounted the copies' spread: A/A twins came out different 4 times in 21.)
    Deterministic (seeded): no timing is involved."""
    from irkit.measure.attribution.bootstrap import round_bootstrap

    rng = np.random.default_rng(7)
    rounds, copies, trials = 80, 4, 300
    slots = np.arange(rounds) % copies
    covered = 0
    for t in range(trials):
        levels = np.array([1.0, 1.05])[:, None] * (1 + 0.01 * rng.standard_normal((2, copies)))
        drift = 1 + 0.05 * rng.standard_normal() * np.linspace(-1, 1, rounds)
        common = (1 + 0.06 * rng.standard_normal(rounds)) * drift
        samples = levels[:, slots] * common * (1 + 0.04 * rng.standard_normal((2, rounds)))
        _, boot = round_bootstrap(samples, 400, t, slots)
        low, high = np.quantile(boot[1] - boot[0], [0.025, 0.975])
        covered += low <= 0.05 <= high
    assert 0.91 <= covered / trials <= 0.99, covered / trials


def test_the_bootstrap_holds_a_program_s_own_drift_within_a_cycle(monkeypatch) -> None:
    """Issue 24: under load a program's own noise is not independent from round to round
    (the rounds of a stretch run alike). Simulated: each program's level moves every 4
    rounds (sd 1.5%), beside independent noise (sd 1%), 8 copies in turn; resampling whole
    cycles covers the true difference at about the stated rate, resampling rounds within
    each copy (what it falls back to below `MIN_CYCLES` cycles) falls short.
    Deterministic (seeded): no timing is involved."""
    from irkit.measure import attribution

    rounds, copies, trials = 240, 8, 300
    slots = np.arange(rounds) % copies

    def coverage() -> float:
        covered = 0
        for t in range(trials):
            r = np.random.default_rng(t)
            stretch = np.repeat(0.015 * r.standard_normal((2, rounds // 4)), 4, axis=1)
            samples = np.array([[1.0], [1.05]]) * (1 + stretch + 0.01 * r.standard_normal((2, rounds)))  # fmt: skip
            _, boot = attribution.bootstrap.round_bootstrap(samples, 400, t, slots)
            low, high = np.quantile(boot[1] - boot[0], [0.025, 0.975])
            covered += low <= 0.05 <= high
        return covered / trials

    cycles = coverage()
    assert 0.91 <= cycles <= 0.99, cycles
    monkeypatch.setattr(attribution.bootstrap, "MIN_CYCLES", 10**9)  # rounds within each copy
    assert coverage() < cycles - 0.03


def test_the_ci_is_expanded_for_the_few_cycles_it_resamples() -> None:
    """Issue 24: the spread is estimated from n cycles, so the replicates are spread by
    Student's t(n-1) over the normal quantile (and not by a mean's sqrt(n/(n-1)) too: the
    point is a mean of per-copy medians, whose bootstrap is not narrow). Simulated: two
    programs, 1% independent noise, 8 cycles of 22 copies; the CI covers their true
    difference at least at the stated rate, and is no wider than the pooled median's with
    the full expanded percentile interval was (`benchmarks/ci_coverage_sim.py`'s
    `pooled_median`): a more efficient point for the same power. Deterministic (seeded)."""
    import importlib.util

    from irkit.measure import attribution

    spec = importlib.util.spec_from_file_location(
        "sim", Path(__file__).resolve().parents[1] / "benchmarks" / "ci_coverage_sim.py"
    )
    assert spec is not None and spec.loader is not None
    sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim)

    rounds, copies, trials = 8 * 22, 22, 300
    slots = np.arange(rounds) % copies

    def coverage(method) -> tuple[float, float]:
        covered, widths = 0, []
        for t in range(trials):
            r = np.random.default_rng(t)
            samples = np.array([[1.0], [1.05]]) * (1 + 0.01 * r.standard_normal((2, rounds)))
            _, boot = method(samples, 400, t, slots)
            low, high = np.quantile(boot[1] - boot[0], [0.025, 0.975])
            covered += low <= 0.05 <= high
            widths.append(high - low)
        return covered / trials, float(np.median(widths))

    groups = [np.flatnonzero(slots == s) for s in range(copies)]
    assert attribution.bootstrap.expansion(groups) == pytest.approx(2.364624 / 1.959964, rel=1e-4)
    assert sim._mean_expansion(groups) == pytest.approx(
        math.sqrt(8 / 7) * 2.364624 / 1.959964, rel=1e-4
    )
    now, width = coverage(attribution.bootstrap.round_bootstrap)
    was, was_width = coverage(sim.pooled_median)
    assert now >= 0.95 and was >= 0.93, (now, was)
    assert width <= 1.03 * was_width, (width, was_width)


@pytest.mark.parametrize(
    "df, exact",
    [(3, 3.182446), (4, 2.776445), (7, 2.364624), (18, 2.100922), (60, 2.000298),
     (101, 1.983731), (1000, 1.962339)],
)  # fmt: skip
def test_student_t_quantile_matches_the_tables(df, exact) -> None:
    """Exact (the series inverted) to 100 degrees of freedom, the expansion beyond: both
    agree with the tables to their 6 decimals. (The expansion alone was 4e-3 low at 3
    degrees of freedom: `--runs 4` CIs 0.1% narrow.)"""
    from irkit.measure.stats import t_cdf, t_quantile

    assert t_quantile(0.975, df) == pytest.approx(exact, abs=2e-6)
    assert t_quantile(0.025, df) == pytest.approx(-exact, abs=2e-6)
    if df <= 100:
        assert t_cdf(exact, df) == pytest.approx(0.975, abs=1e-6)


def test_each_program_s_ci_holds_its_own_copy_spread() -> None:
    """Issue 24: programs are not equally sensitive to where their copies land. Simulated:
    one program's copies spread 2.5%, five others' 0.4%; the CI of its difference from a
    quiet one covers the true difference at about the stated rate (its own copy variance,
    with its own copies' degrees of freedom; averaged with the one pooled over the programs,
    87.7% here). Deterministic (seeded): no timing is involved."""
    from irkit.measure.attribution.bootstrap import round_bootstrap

    rng = np.random.default_rng(11)
    rounds, copies, trials = 96, 8, 300
    slots = np.arange(rounds) % copies
    spread = np.array([0.004, 0.025, 0.004, 0.004, 0.004, 0.004])[:, None]
    level = np.linspace(1.0, 1.25, 6)[:, None]
    covered = 0
    for t in range(trials):
        levels = level * (1 + spread * rng.standard_normal((6, copies)))
        common = 1 + 0.02 * rng.standard_normal(rounds)
        samples = levels[:, slots] * common * (1 + 0.01 * rng.standard_normal((6, rounds)))
        _, boot = round_bootstrap(samples, 400, t, slots)
        low, high = np.quantile(boot[1] - boot[0], [0.025, 0.975])
        covered += low <= level[1, 0] - level[0, 0] <= high
    assert 0.92 <= covered / trials <= 0.99, covered / trials


def test_the_split_a_a_flags_a_program_whose_copies_differ() -> None:
    """Issue 24: the per-context A/A check splits a program's copies in two halves
    (alternate slots): equal copies pass, a half 10% slower fails."""
    from irkit.measure.attribution.noise import split_aa

    rng = np.random.default_rng(1)
    slots = np.arange(160) % 4
    same = 1 + 0.01 * rng.standard_normal(160)
    assert not split_aa(same, slots, 1000, 0).excludes(1.0)
    skewed = same * np.where(slots % 2 == 0, 1.1, 1.0)
    ratio = split_aa(skewed, slots, 1000, 0)
    assert ratio.excludes(1.0) and ratio.value == pytest.approx(1.1, rel=0.02)


def test_context_checks_hold_their_error_rate_for_the_family() -> None:
    """Issue 24: with 60 programs whose copies are alike, a 95% check each fails a few by
    chance; judged at 95% for the family (Bonferroni) none fail, while a program whose
    half of copies is 8% slower still does."""
    from irkit.measure.attribution.noise import context_checks

    rng = np.random.default_rng(7)
    slots = np.arange(120) % 4
    rows = {f"p{i}": 1 + 0.02 * rng.standard_normal(120) for i in range(60)}
    rows["bad"] = rows["p0"] * np.where(slots % 2 == 0, 1.08, 1.0)
    split, failed = context_checks(rows, slots, 1000, 0)
    alone = sum(split[k].excludes(1.0) for k in rows if k != "bad")
    assert alone >= 1  # what one 95% check per program calls
    assert failed["bad"] and not any(v for k, v in failed.items() if k != "bad")


def test_sampling_stops_when_every_verdict_is_resolved() -> None:
    """Issue 24: the stopping rule targets the question: a pass whose saving clearly
    excludes 0, or whose CI is already narrower than the precision, is resolved; one whose
    CI still straddles 0 widely is not, and sampling goes on with its contexts' programs
    only. Passes that change no code need nothing."""

    plan = make_plan("prefix", 2)  # masks: (F, F), (T, F), (T, T)
    rng = np.random.default_rng(3)
    rounds = 60
    slots = np.arange(rounds) % 4
    noise = lambda: 1 + 0.02 * rng.standard_normal(rounds)  # noqa: E731
    # pass 0 saves 30% (clear); pass 1 saves 0.1% (tiny): resolved once its CI is narrow
    rows = np.array([1.0 * noise(), 0.7 * noise(), 0.699 * noise()])
    key_of = dict(zip(plan.masks, ["a", "b", "c"], strict=True))
    row_of = {"a": 0, "b": 1, "c": 2}
    # pass 1 open: its programs go on, "a" (only in pass 0's context, resolved) leaves
    assert _unresolved(plan, key_of, row_of, rows, slots, 0.001, 0) == {"b", "c"}
    assert _unresolved(plan, key_of, row_of, rows, slots, 0.05, 0) == set()  # within 5%: known
    same = {**key_of, plan.masks[2]: "b"}  # pass 1 changes no code: nothing to resolve
    assert _unresolved(plan, same, row_of, rows, slots, 0.001, 0) == set()


def _prefix_of_three(levels: tuple[float, float, float], rounds: int, copies: int, seed: int):
    """Two passes switched on in turn (prefix): the plan, its programs "a", "b", "c" at
    `levels` with 2% noise a round, and the rounds' slots."""
    plan = make_plan("prefix", 2)
    rng = np.random.default_rng(seed)
    rows = np.array([f * (1 + 0.02 * rng.standard_normal(rounds)) for f in levels])
    key_of = dict(zip(plan.masks, ["a", "b", "c"], strict=True))
    return plan, key_of, {"a": 0, "b": 1, "c": 2}, rows, np.arange(rounds) % copies


def test_a_small_effect_is_known_against_the_programs_it_is_measured_between() -> None:
    """Issue 24: "known well enough" is relative to the full program or to the pass's own
    contexts, whichever is longer: a 0.5% saving between two slow programs (10 s, ten times
    the full program) is known once its CI is within 2% of them, not of the full program,
    which under load it never was (conv_block's fold-transposes kept its two 8.3 ms
    programs in every round to the budget's end). And a saving between two programs a
    hundred times faster than the full one is known within the full program's precision
    (against its contexts alone, tiny programs ran to the rounds' cap)."""

    plan, key_of, row_of, rows, slots = _prefix_of_three((10.0, 9.95, 1.0), 240, 4, 4)
    assert _unresolved(plan, key_of, row_of, rows, slots, 0.02, 0) == set()
    assert _unresolved(plan, key_of, row_of, rows, slots, 0.002, 0) == {"a", "b"}
    fast = _prefix_of_three((0.01, 0.00995, 1.0), 240, 4, 14)[3]
    assert _unresolved(plan, key_of, row_of, fast, slots, 0.002, 0) == set()


def test_a_pass_whose_program_left_needs_nothing_more() -> None:
    """Issue 24: once a program has left the rounds, a pass measured against it cannot be
    helped: its other program alone would be sampled for nothing (one ran 1800 rounds alone
    in a trial). Open passes whose programs are all still in the rounds keep them."""

    plan = make_plan("prefix", 3)  # masks: FFF, TFF, TTF, TTT
    rng = np.random.default_rng(0)
    rounds = 64
    slots = np.arange(rounds) % 4
    levels = (10.0, 9.97, 1.0, 0.99)  # pass 0 and pass 2 open, pass 1 clear
    rows = np.array([f * (1 + 0.03 * rng.standard_normal(rounds)) for f in levels])
    names = ["a", "b", "c", "d"]
    key_of = dict(zip(plan.masks, names, strict=True))
    row_of = {k: i for i, k in enumerate(names)}
    assert _unresolved(plan, key_of, row_of, rows, slots, 0.001, 0) == {"a", "b", "c", "d"}
    rows[0, 32:] = np.nan  # "a" left the rounds after 8 cycles
    assert _unresolved(plan, key_of, row_of, rows, slots, 0.001, 0, left={"a"}) == {"c", "d"}
    # sampled only every other cycle from then on, "a" has not left: its pass stays open
    rows[0, 32:] = np.where((np.arange(32, rounds) // 4) % 2 == 0, 10.0, np.nan)
    assert _unresolved(plan, key_of, row_of, rows, slots, 0.001, 0) == {"a", "b", "c", "d"}


def test_a_small_effect_is_known_only_once_its_stricter_interval_is_narrow() -> None:
    """Issue 24: "known well enough" is judged at the same 99.9% as "clear", not at the
    reported 95%: asked at every look, a 95% width stops sampling on the first chance dip
    under the precision and keeps it (elementwise_chain's trials that stopped so missed the
    truth in 12-50% of CIs, those that ran on in 2-5%). Between the two widths: open."""
    from irkit.measure.attribution import Interval
    from irkit.measure.attribution.bootstrap import round_bootstrap
    from irkit.measure.attribution.sampling import RESOLVE_CONFIDENCE

    plan, key_of, row_of, rows, slots = _prefix_of_three((1.0, 0.7, 0.7), 64, 8, 5)
    point, boot = round_bootstrap(rows, 300, 0, slots, upper=True)  # what the rule computes
    saved = plan.contributions(dict(zip(plan.masks, point, strict=True)))[1]
    saved_boot = plan.contributions(dict(zip(plan.masks, boot, strict=True)))[1]
    halves = [Interval.of(float(saved), saved_boot, c) for c in (0.95, RESOLVE_CONFIDENCE)]
    half95, half999 = ((i.high - i.low) / 2 for i in halves)
    assert not halves[1].excludes(0.0) and half95 < half999
    full = float(point[2])
    between = (half95 + half999) / 2 / full
    assert _unresolved(plan, key_of, row_of, rows, slots, between, 0) == {"b", "c"}
    assert not _unresolved(plan, key_of, row_of, rows, slots, 1.01 * half999 / full, 0)


def test_rounds_go_on_with_only_the_functions_still_needed() -> None:
    """Issue 24 (sequential stopping that targets the question): once `needed` leaves a
    function out, the rounds no longer call it (its samples NaN from then on, so round r
    stays position r), it is never called again, the looks fall on whole cycles, and
    sampling stops when nothing is needed."""
    from irkit.measure.timers import time_interleaved

    calls = {"a": 0, "b": 0, "c": 0}

    def counter(name: str):
        def fn() -> None:
            calls[name] += 1

        fn.sample = lambda reps: 1e-3  # type: ignore[attr-defined]  # times itself
        return fn

    looks: list[int] = []

    def needed(now: Rounds) -> set[str]:
        looks.append(len(now.samples["a"]))
        return {"b", "c"} if len(looks) < 3 else ({"a", "b"} if len(looks) < 5 else set())

    timings = time_interleaved({k: counter(k) for k in calls}, budget_s=60, min_rounds=10,
                               max_rounds=1000, warmup=0, needed=needed, cycle=4)  # fmt: skip
    assert all(n % 4 == 0 for n in looks) and looks[0] == 12
    a, b, c = (timings[k].samples for k in "abc")
    assert timings["a"].stop_reason == "resolved" and len(a) == looks[-1]
    assert not np.isnan(a[:12]).any() and np.isnan(a[12:]).all()  # left at the first look
    assert not np.isnan(b).any()  # named to the end
    assert not np.isnan(c[: looks[2]]).any() and np.isnan(c[looks[2] :]).all()
    assert timings["a"].estimate.n == 12 and timings["b"].estimate.n == len(b)


def test_rounds_sample_each_function_at_its_period() -> None:
    """Issue 24 (rounds by cost as well as need): `needed` may give each function a period
    in cycles; a function of period k is sampled in the cycles whose index is a multiple of
    k, whole cycles at a time, so functions of periods 2 and 4 share every fourth cycle;
    the periods may change at a later look; the shortest is scaled to 1."""
    from irkit.measure.timers import time_interleaved

    def fn() -> None:
        pass

    fn.sample = lambda reps: 1e-3  # type: ignore[attr-defined]
    looks: list[int] = []

    def needed(now: Rounds) -> dict[str, int]:
        looks.append(len(now.samples["a"]))
        if len(looks) == 1:
            return {"a": 1, "b": 2, "c": 4}
        if len(looks) < 4:
            return {"a": 1, "b": 2, "c": 4, "gone": 1}  # "gone" was never asked back
        return {"b": 2, "c": 2} if len(looks) < 6 else {}  # scaled: both every cycle

    timings = time_interleaved({k: fn for k in ("a", "b", "c", "gone")}, budget_s=60,
                               min_rounds=8, max_rounds=1000, warmup=0, needed=needed, cycle=4)  # fmt: skip
    measured = {k: ~np.isnan(t.samples) for k, t in timings.items()}
    cycles = np.arange(len(measured["a"])) // 4
    first, third, fifth = looks[0], looks[3], looks[5]
    assert not measured["gone"][first:].any()
    between = slice(first, third)
    assert measured["a"][between].all()
    assert (measured["b"][between] == (cycles[between] % 2 == 0)).all()
    assert (measured["c"][between] == (cycles[between] % 4 == 0)).all()
    assert not measured["a"][third:].any()
    assert measured["b"][third:fifth].all() and measured["c"][third:fifth].all()
    assert measured["b"][third:fifth].sum() > 0 and timings["a"].stop_reason == "resolved"


def _three_programs(
    t: int, levels: np.ndarray, slots: np.ndarray, machine: np.ndarray, first: np.ndarray,
    noise: float,
) -> np.ndarray:  # fmt: skip
    """Simulated rounds of three programs at `levels` on the copies `slots` (a 1% copy
    offset each), each round's time off by `noise` and by a common factor (half that),
    times the machine's speed; the first program sampled only in the rounds `first`."""
    r = np.random.default_rng(t)
    copies, rounds = len(np.unique(slots)), len(slots)
    offsets = 1 + 0.01 * r.standard_normal((3, copies))
    common = 1 + noise / 2 * r.standard_normal(rounds)
    samples = levels[:, None] * offsets[:, slots] * (common * machine)[None] * (1 + noise * r.standard_normal((3, rounds)))  # fmt: skip
    samples[0, ~first] = np.nan
    return samples


def _covered(run, slots: np.ndarray, truths: list[tuple[int, int, float]]) -> np.ndarray:
    """How often, over 200 seeded runs (`run(t)`), each difference's 95% CI holds its truth."""
    from irkit.measure.attribution.bootstrap import round_bootstrap

    covered = np.zeros(len(truths))
    trials = 200
    for t in range(trials):
        point, boot = round_bootstrap(run(t), 400, t, slots)
        for j, (x, y, truth) in enumerate(truths):
            low, high = np.quantile(boot[x] - boot[y], [0.025, 0.975])
            covered[j] += low <= truth <= high
    return covered / trials


def test_a_program_that_left_the_rounds_early_is_at_the_run_s_level() -> None:
    """Issue 24: a program whose passes have verdicts leaves the rounds (`open_passes`);
    the machine may then run faster or slower. Simulated: a program at 1.6 leaves after 8
    cycles of 16 copies, the machine is 10% slower for the 40 cycles after; its difference
    to a program sampled to the end keeps their ratio (1.6 / 1.05), at the whole run's
    level, where the raw medians would take the slowdown for an effect. With no drift, the
    bootstrap covers both differences at about the stated rate. Deterministic (seeded),
    nothing timed."""
    from irkit.measure.attribution.bootstrap import round_bootstrap

    copies, early, late = 16, 8, 40
    rounds = copies * (early + late)
    slots = np.arange(rounds) % copies
    levels = np.array([1.6, 1.05, 1.0])
    first = np.arange(rounds) < copies * early

    def run(t: int, drift: float, noise: float) -> np.ndarray:
        return _three_programs(t, levels, slots, np.where(first, 1.0, 1.0 + drift), first, noise)

    samples = run(0, 0.10, 0.005)
    point, boot = round_bootstrap(samples, 400, 0, slots)
    assert point[0] / point[1] == pytest.approx(1.6 / 1.05, rel=0.01)
    assert point[1] == pytest.approx(1.05 * 1.10, rel=0.01)  # the run's level: mostly late
    raw = np.nanmedian(samples, axis=1)
    assert raw[0] / raw[1] < 1.6 / 1.05 / 1.05  # what the raw medians would say
    assert (boot[0] - boot[1]).std() > (boot[2] - boot[1]).std()  # 128 rounds against 768

    covered = _covered(lambda t: run(t, 0.0, 0.08), slots, [(0, 1, 0.55), (1, 2, 0.05)])
    assert (covered >= 0.93).all() and (covered <= 0.995).all(), covered


def test_a_program_sampled_every_few_cycles_is_at_the_run_s_level() -> None:
    """Issue 24 (rounds by cost): a slow program sampled only every fourth cycle after the
    first eight, the machine 10% slower in just those cycles; its time is the run's level
    (its ratio to a program of every round kept within 1%; the raw medians of the cycles it
    was in would be off), and over 200 runs without drift its difference to a program of
    every round, and one between two of every round, are covered at about the stated rate.
    Deterministic (seeded), nothing timed."""
    from irkit.measure.attribution.bootstrap import round_bootstrap

    copies, cycles = 16, 48
    rounds = copies * cycles
    slots = np.arange(rounds) % copies
    cycle = np.arange(rounds) // copies
    thinned = (cycle < 8) | (cycle % 4 == 0)
    levels = np.array([8.0, 1.05, 1.0])

    def run(t: int, drift: float, noise: float) -> np.ndarray:
        machine = 1.0 + drift * ((cycle >= 8) & (cycle % 4 == 0))  # slower when it was thinned
        return _three_programs(t, levels, slots, machine, thinned, noise)

    samples = run(0, 0.10, 0.005)
    point, boot = round_bootstrap(samples, 400, 0, slots)
    assert point[0] / point[1] == pytest.approx(8.0 / 1.05, rel=0.01)
    raw = np.nanmedian(samples, axis=1)
    assert raw[0] / raw[1] > 8.0 / 1.05 * 1.03  # what the cycles it was in alone would say
    assert (boot[0] - boot[1]).std() > (boot[2] - boot[1]).std()

    covered = _covered(lambda t: run(t, 0.0, 0.08), slots, [(0, 1, 6.95), (1, 2, 0.05)])
    assert (covered >= 0.93).all() and (covered <= 0.995).all(), covered


def test_rounds_go_by_need_and_cost() -> None:
    """Issue 24 (rounds by cost as well as need, `cost_periods`): of two open passes, one
    between two slow programs whose rounds spread little and one between two fast programs
    whose rounds spread much (conv_block's `fold-transposes` and its plants under load), the
    fast pair is sampled every cycle and the slow pair every eighth or sixteenth; two alike
    pairs stay alike however their spreads differ by chance; a program that serves an
    expensive pass and a cheaper one goes at the cheaper one's period."""
    from irkit.measure.attribution.sampling import MAX_PERIOD, cost_periods

    rng = np.random.default_rng(0)
    rounds, copies = 128, 16
    slots = np.arange(rounds) % copies
    spreads, levels = np.array([0.04, 0.04, 0.15, 0.15]), np.array([8.3e-3, 8.2e-3, 6e-4, 5.8e-4])
    rows = levels[:, None] * np.exp(spreads[:, None] * rng.standard_normal((4, rounds)))
    periods = cost_periods(rows, slots, levels, [[0, 1], [2, 3]])
    assert periods[2] == periods[3] == 1 and periods[0] == periods[1] in (8, MAX_PERIOD)
    alike = levels[2] * np.exp(np.array([[0.12], [0.12], [0.17], [0.17]]) * rng.standard_normal((4, rounds)))  # fmt: skip
    assert (cost_periods(alike, slots, np.full(4, levels[2]), [[0, 1], [2, 3]]) == 1).all()
    # a pass between the slow and the fast pair: program 1 at its period, not the slow pair's
    shared = cost_periods(rows, slots, levels, [[0, 1], [1, 2], [2, 3]])
    assert shared[2] == shared[3] == 1 and 1 < shared[1] < shared[0] == periods[0]


def test_attribution_samples_on_with_the_open_passes_only(capsys) -> None:
    """Issue 24: a pass with a clear verdict (a large plant) stops costing rounds: its
    programs leave at a look, a whole number of cycles in, with the baseline's A/A twin,
    while the passes still open (a zero-cost plant, never narrower than a tiny precision)
    go on to the budget. The record says how many rounds each program had, and so does the
    printed summary."""
    from rich.console import Console

    from irkit.cli.views import show_attribution
    from irkit.measure.attribution import MIN_ROUNDS_PER_COPY

    spec = "lower-graph-to-loops,plant-work{iters=200000},plant-zero"
    # rounds without a cap: the budget ends them, however fast the machine (at the default
    # 2,000 a quick machine ran out of rounds first: stop reason "max_samples")
    result = attribute(CHAIN, spec, "cpu", "prefix", {"N": 8, "D": 16}, budget_s=3.0,
                       placements=3, kernel_times=False, precision=1e-9,
                       max_rounds=10**9)  # fmt: skip
    rec = result.to_json()
    proto = rec["protocol"]
    per = proto["rounds_per_program"]
    empty, work, full = (v["program"] for v in rec["variants"])
    assert len({empty, work, full}) == 3 and proto["stop_reason"] == "budget"
    assert per[empty] == per["aa-twin-baseline"] and per[empty] % 3 == 0
    assert per[empty] >= MIN_ROUNDS_PER_COPY * 3
    assert per[work] == per[full] == per["aa-twin"] == proto["rounds"] > per[empty]
    assert proto["programs_left"] == [empty] and proto["periods"] == {work: 1, full: 1}
    assert rec["passes"][0]["significant"] and rec["passes"][0]["saved_s"]["value"] < 0
    show_attribution(Console(width=200), rec)
    assert (
        f"1 of 3 programs left once their passes had verdicts, after {per[empty]} rounds"
        in capsys.readouterr().out
    )


def test_the_summary_says_which_programs_left_and_which_went_by_cost() -> None:
    """The printed summary of focused rounds: how many programs left and after how many
    rounds, and how many went every few cycles for their cost (twins not counted); records
    from before periods were recorded: every program short of the most rounds left."""
    from irkit.cli.views import _focused

    per = {"a": 128, "b": 128, "c": 300, "d": 640, "e": 640, "aa-twin": 640}
    proto = {"rounds_per_program": per, "programs_left": ["a", "b"],
             "periods": {"c": 8, "d": 1, "e": 1}}  # fmt: skip
    assert _focused(proto) == (
        " (2 of 5 programs left once their passes had verdicts, after 128 rounds; "
        "1 sampled in one cycle of every 8 for their cost at the end)"
    )
    old = {"rounds_per_program": {"a": 128, "b": 256, "c": 640, "aa-twin": 640}}
    assert (
        _focused(old)
        == " (2 of 3 programs left once their passes had verdicts, after 128-256 rounds)"
    )
    assert _focused({"rounds_per_program": {"a": 640, "aa-twin": 640}}) == ""


def test_the_stopping_rule_never_takes_the_copy_variance_for_zero() -> None:
    """Issue 24: with a few rounds per copy the round noise in the copies' means can exceed
    their spread, and the reported CIs' copy variance (the spread less that noise) is then
    zero: a CI with no copy term, narrow by accident, that ended sampling. The stopping rule
    judges by the spread itself, an upper bound that the noise cannot cancel."""
    from irkit.measure.attribution.bootstrap import copy_variance

    rng = np.random.default_rng(0)
    copies, per = 16, 8
    slots = np.arange(copies * per) % copies
    groups = [np.flatnonzero(slots == s) for s in range(copies)]
    offsets = 0.02 * rng.standard_normal((6, copies))  # a 2% copy spread
    noisy = np.exp(offsets[:, slots] + 0.2 * rng.standard_normal((6, copies * per)))
    reported = copy_variance(noisy, groups)
    bound = copy_variance(noisy, groups, upper=True)
    own = copy_variance(noisy, groups, per_program=True)
    own_bound = copy_variance(noisy, groups, per_program=True, upper=True)
    assert bound > reported and np.all(own_bound >= own) and np.all(own_bound > 0)
    assert (own == 0).any()  # noise 0.2/sqrt(8) per copy's mean against a 0.02 spread
    # with the noise gone the two agree
    clean = np.exp(offsets[:, slots])
    assert copy_variance(clean, groups, upper=True) == pytest.approx(copy_variance(clean, groups))


def test_verdicts_end_sampling_only_after_rounds_on_every_copy() -> None:
    """Issue 24: a copy's offset is estimated from the rounds run on it; with two or three
    rounds per copy mlp's Shapley CIs missed a 20% plant in 5 of 20 trials and its A/A twins
    failed in 10%. Verdicts, however clear, end sampling only after `MIN_ROUNDS_PER_COPY`
    rounds per copy; only the budget may end it sooner (after two per copy)."""
    from irkit.measure.attribution import BUDGET_ROUNDS_PER_COPY, MIN_ROUNDS_PER_COPY

    spec = "cse,fuse-kernels,lower-graph-to-loops,plant-work{iters=200000}"  # clear verdicts
    proto = attribute(CHAIN, spec, "cpu", "prefix", {"N": 8, "D": 16}, budget_s=30.0,
                      placements=3, kernel_times=False).to_json()["protocol"]  # fmt: skip
    assert proto["placements"] == 3
    if proto["stop_reason"] == "budget":  # a very slow machine: the floor still holds
        assert proto["rounds"] >= BUDGET_ROUNDS_PER_COPY * 3
    else:
        assert proto["stop_reason"] == "resolved"
        assert proto["rounds"] >= MIN_ROUNDS_PER_COPY * 3


def test_every_program_is_timed_as_several_placements(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: each distinct program and each A/A twin bound `placements` times, every
    copy checked; the record says how many, and has an A/A check per context (program).
    A program is compiled once; its further copies are its code linked again (issue 25)."""
    from irkit.runtime.cpu import CpuBackend, CpuExecutable

    counts = {"compile": 0, "copy": 0}
    compile_, copy = CpuBackend.compile, CpuExecutable.copy

    def counted(name, real):
        def call(*args):
            counts[name] += 1
            return real(*args)

        return call

    monkeypatch.setattr(CpuBackend, "compile", counted("compile", compile_))
    monkeypatch.setattr(CpuExecutable, "copy", counted("copy", copy))
    inputs_at: list[int] = []  # where each bound program's first input is
    bind = CpuExecutable.bind

    def bind_and_note(self, *arrays, **kw):
        bound = bind(self, *arrays, **kw)
        inputs_at.append(bound.io[0].ctypes.data)
        return bound

    monkeypatch.setattr(CpuExecutable, "bind", bind_and_note)
    record = attribute(CHAIN, "cse,fuse-kernels,lower-graph-to-loops", "cpu", "prefix",
                       {"N": 8, "D": 16}, budget_s=0.3, placements=3).to_json()  # fmt: skip
    proto, noise = record["protocol"], record["noise_floor"]
    assert proto["placements"] == 3
    assert proto["programs_bound"] == 3 * (proto["programs_measured"] + 2)  # two twins
    # every program and twin of a slot bound into the slot's buffers: three sets in all
    assert proto["placement_io"] == "shared" and len(inputs_at) == proto["programs_bound"]
    per_slot = proto["programs_measured"] + 2
    assert len(set(inputs_at)) == 3 and len(set(inputs_at[:per_slot])) == 1
    assert proto["copy_sd"] is not None and 0.0 <= proto["copy_sd"] < 1.0  # reported, relative
    from irkit.measure.attribution.bootstrap import MIN_CYCLES  # every copy's j-th round: cycle j

    assert proto["bootstrap_unit"] == ("cycles" if proto["rounds"] // 3 >= MIN_CYCLES else "rounds")
    assert proto["ci_expansion"] > 1.0  # a few cycles or rounds per copy: never taken as known
    assert counts["compile"] == proto["programs_measured"]
    assert counts["copy"] == proto["programs_bound"] - proto["programs_measured"]
    assert set(noise["per_context"]["programs"]) == {v["program"] for v in record["variants"]}
    with pytest.raises(IrkitError, match="placements must be an integer from 1 to 64"):
        attribute(CHAIN, "cse,lower-graph-to-loops", "cpu", "prefix", SMALL, placements=0)


def test_a_change_llvm_folds_away_is_no_code_change() -> None:
    """Issue 24: identity by compiled code. `dead-add` adds an unused addition to every
    kernel: the loop-level IR differs, the code after O3 does not, so the pass changes no
    program and gets exactly zero."""
    from dataclasses import dataclass

    from xdsl.dialects import arith, func
    from xdsl.dialects.builtin import FloatAttr, f32
    from xdsl.passes import ModulePass

    from irkit.loops import KERNEL_ATTR
    from irkit.passes import register_pass

    @register_pass
    @dataclass(frozen=True)
    class DeadAddPass(ModulePass):
        name = "dead-add"
        is_optimization = True

        def apply(self, ctx, op) -> None:
            for fn in op.ops:
                if isinstance(fn, func.FuncOp) and KERNEL_ATTR in fn.attributes:
                    one = arith.ConstantOp(FloatAttr(1.0, f32))
                    block = fn.body.block
                    block.insert_ops_before([one, arith.AddfOp(one, one)], block.first_op)

    exe = compile(CHAIN, "cse,fuse-kernels,lower-graph-to-loops,dead-add", "cpu", SMALL)
    plain = compile(CHAIN, "cse,fuse-kernels,lower-graph-to-loops", "cpu", SMALL)
    assert [k.hash for k in exe.kernels] != [k.hash for k in plain.kernels]  # the IR differs
    assert [k.code_hash for k in exe.kernels] == [k.code_hash for k in plain.kernels]
    result = attribute(CHAIN, "cse,fuse-kernels,lower-graph-to-loops,dead-add", "cpu", "prefix",
                       SMALL, budget_s=0.3)  # fmt: skip
    dead = next(p for p in result.passes if p.label == "dead-add")
    assert not dead.changes_code and dead.saved.value == 0 and not dead.significant


def test_the_noise_floor_is_measured_at_both_ends_of_the_contexts() -> None:
    """Issue 24: an A/A twin of the full pipeline and of the program without optional passes,
    each floor in seconds at its own scale; the run's floor is the larger."""
    record = attribute(CHAIN, "cse,fuse-kernels,lower-graph-to-loops", "cpu", "prefix",
                       {"N": 8, "D": 16}, budget_s=0.3).to_json()  # fmt: skip
    noise = record["noise_floor"]
    assert {"aa_ratio", "aa_ratio_baseline", "floor_full_s", "floor_baseline_s"} <= set(noise)
    assert noise["floor_s"] == max(noise["floor_full_s"], noise["floor_baseline_s"])
    base = record["total"]["baseline_s"]["median"]
    assert noise["floor_baseline_s"] == pytest.approx(noise["floor_baseline"] * base, rel=0.2)
    failed = noise["aa_ratio"]["ci_low"] > 1 or noise["aa_ratio"]["ci_high"] < 1
    failed = (
        failed
        or noise["aa_ratio_baseline"]["ci_low"] > 1
        or noise["aa_ratio_baseline"]["ci_high"] < 1
    )
    assert noise["aa_failed"] == failed
    assert noise["aa_confidence"] == pytest.approx(0.975)  # 95% for the pair of twins


@pytest.mark.parametrize("strategy", ["prefix", "ablation", "shapley"])
def test_pair_weights_are_the_contributions_coefficients(strategy: str) -> None:
    """Issue 24: a failed context's floor is weighted as its pair enters the contribution;
    the weights are the contributions' own coefficients (linear in the times)."""
    from irkit.measure.attribution import make_plan

    plan = make_plan(strategy, 4, permutations=0 if strategy == "shapley" else 64, seed=0)
    rng = np.random.default_rng(3)
    t = {m: float(rng.uniform(1, 2)) for m in plan.masks}
    for i, c in enumerate(plan.contributions(t)):
        pairs = plan.weighted_pairs(i)
        assert sum(w for w, _, _ in pairs) == pytest.approx(1.0)
        assert float(c) == pytest.approx(sum(w * (t[a] - t[b]) for w, a, b in pairs))


def test_placements_by_default_grow_with_few_programs() -> None:
    """Issue 24: a one-pair contrast (prefix, ablation) holds two programs' copy variance
    over the copies, so few programs get up to 32 copies; many (Shapley) 4, their binding cost
    bounded (`AUTO_COPIES` in all)."""
    from irkit.measure.attribution import AUTO_COPIES, auto_placements

    assert [auto_placements(n) for n in (1, 9, 25, 34, 50, 84, 500)] == [32, 22, 8, 5, 4, 4, 4]
    assert all(auto_placements(n) * n <= AUTO_COPIES for n in range(1, 51))
    record = attribute(CHAIN, "cse,lower-graph-to-loops", "cpu", "prefix", SMALL,
                       budget_s=0.2, kernel_times=False).to_json()  # fmt: skip
    proto = record["protocol"]
    assert proto["placements_wanted"] == "auto" and proto["placements"] == 32
    assert proto["placements_limited"] is None
    assert proto["placement_bytes"] <= proto["placement_budget_bytes"]


def test_a_bound_copy_s_memory_counts_its_intermediates() -> None:
    """`bound_bytes`: what a bound CPU copy holds, counted from the IR before binding, is
    what binding allocates: inputs and outputs once, every intermediate twice (the kernel
    plan's buffers, which `bind` keeps, and the driver's kept scratch)."""
    from irkit.runtime.backend import bound_bytes

    exe = compile(CHAIN, "cse,lower-graph-to-loops", backend="cpu", dims=SMALL)
    bound = exe.bind(*random_inputs(load(CHAIN, SMALL), seed=0))
    kept = {a.ctypes.data: a.nbytes for a in bound.keep}  # inputs, outputs, intermediates
    io = sum(t.nbytes for t in [*exe.inputs, *exe.outputs])
    assert sum(kept.values()) > io  # the chain has intermediates
    assert bound_bytes(exe) == io + 2 * (sum(kept.values()) - io)


@pytest.mark.parametrize("backend", ["cpu", "cuda-sim", "cuda-host",
                                     pytest.param("cuda", marks=pytest.mark.gpu)])  # fmt: skip
def test_a_program_binds_into_another_program_s_buffers(backend: str) -> None:
    """`bind(io=...)`: a program bound into another's inputs and outputs (attribution's
    placement slots) uses those very buffers, computes its own result into them, and
    leaves the other program correct; buffers of another signature are refused. Every
    backend that times copies (on `cuda` the buffers are device memory)."""
    from tests.test_cuda_path import needs

    needs(backend)
    gpu = ",map-to-gpu" if backend != "cpu" else ""
    unfused = compile(CHAIN, f"cse,lower-graph-to-loops{gpu}", backend=backend, dims=SMALL)
    fused = compile(CHAIN, f"cse,fuse-kernels,lower-graph-to-loops{gpu}", backend=backend,
                    dims=SMALL)  # fmt: skip
    inputs = random_inputs(load(CHAIN, SMALL), seed=0)
    expected = reference(load(CHAIN, SMALL), *inputs)
    first = unfused.bind(*inputs)
    second = fused.bind(*inputs, io=first.io)
    assert len(first.io) == len(inputs) + len(expected)
    assert all(a is b for a, b in zip(first.io, second.io, strict=True))
    for bound in (second, first, second):
        for buffer in bound.io[len(inputs) :]:  # the outputs poisoned where they lie
            if isinstance(buffer, np.ndarray):
                buffer[...] = np.nan
            else:
                buffer.poison()
        bound.run_graph()
        for got, want in zip(bound.outputs, expected, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    wrong = [*first.io[:-1], np.zeros((3, 3), np.float32)]
    with pytest.raises(IrkitError, match=r"shared buffer for '\w+' is float32\[3, 3\]"):
        fused.bind(*inputs, io=wrong)
    with pytest.raises(IrkitError, match="binding into 1 shared buffers"):
        fused.bind(*inputs, io=first.io[:1])


def test_shared_inputs_and_outputs_are_counted_once_a_slot() -> None:
    """`copies_within_budget` with `shared_io`: a slot holds its inputs and outputs once, not once a
    program, so more copies fit the same memory."""
    from irkit.measure.attribution.placements import copies_within_budget
    from irkit.runtime.backend import bound_bytes

    exe = compile(CHAIN, "cse,lower-graph-to-loops", backend="cpu", dims=SMALL)
    io = bound_bytes(exe, io_only=True)
    assert io == sum(t.nbytes for t in [*exe.inputs, *exe.outputs])
    own, shared = (
        copies_within_budget(4, [exe, exe], 2),
        copies_within_budget(4, [exe, exe], 2, shared_io=True),
    )
    assert own[0] == shared[0] == 4
    assert own[1] - shared[1] == 4 * 3 * io  # each slot: one set of four (2 programs, 2 twins)


def test_a_further_copy_releases_its_kernel_plan() -> None:
    """A copy timed only as a whole (attribution's further placements) lets go of the kernel
    plan's intermediates: what it keeps is what `bound_bytes(kernels=False)` counts, it
    still computes the same outputs, and running one of its kernels alone is refused."""
    from irkit.runtime.backend import bound_bytes

    exe = compile(CHAIN, "cse,lower-graph-to-loops", backend="cpu", dims=SMALL)
    inputs = random_inputs(load(CHAIN, SMALL), seed=0)
    bound = exe.bind(*inputs)
    expected = [o.copy() for o in bound.outputs]
    bound.release_kernels()
    io = sum(t.nbytes for t in [*exe.inputs, *exe.outputs])
    assert sum(a.nbytes for a in bound.keep) == io  # no once-per-bind kernels: no prepared
    assert bound_bytes(exe, kernels=False) == bound_bytes(exe) - (bound_bytes(exe) - io) // 2
    for o in bound.outputs:
        o[...] = np.nan
    bound.run_graph()
    for a, b in zip(expected, bound.outputs, strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(IrkitError, match="kernel plan was released"):
        bound.run_kernel(0)


def test_copies_are_bounded_by_memory_and_the_output_says_so(tmp_path, capsys,
                                                             monkeypatch) -> None:  # fmt: skip
    """Copies hold inputs, outputs and scratch each: where the copies wanted would take more
    than `placement_budget()` (two thirds of IRKIT_MAX_MEMORY), fewer are bound, and the
    record and the printed output say how many were wanted and what they hold."""
    from irkit.measure.attribution import placement_budget
    from irkit.measure.attribution.placements import copies_within_budget
    from irkit.runtime.backend import bound_bytes

    exe = compile(CHAIN, "cse,lower-graph-to-loops", backend="cpu", dims=SMALL)
    first, lean = bound_bytes(exe), bound_bytes(exe, kernels=False)
    assert lean < first  # a further copy releases its kernel plan
    slot = 3 * lean  # the one program, and its two twins (the same program)
    five = first + 2 * lean + 4 * slot
    monkeypatch.setenv("IRKIT_MAX_MEMORY", str(five * 3 // 2 + 1))
    assert placement_budget() >= five > placement_budget() - slot
    assert copies_within_budget(32, [exe], 2) == (5, five, placement_budget())
    assert copies_within_budget(4, [exe], 2)[0] == 4
    out = tmp_path / "a.json"
    code = bench(["attribute", CHAIN, "-p", "cse,lower-graph-to-loops", "--backend", "cpu",
                  "--dim", "N=64", "--dim", "D=256", "--budget", "0.2", "--no-kernel-times",
                  "--json", str(out)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    proto = json.loads(out.read_text())["protocol"]
    assert proto["placements_limited"] == 32 and proto["placements"] < 32
    assert proto["placement_bytes"] <= proto["placement_budget_bytes"] == placement_budget()
    printed = " ".join(capsys.readouterr().out.split())
    assert f"only {proto['placements']} of the 32 copies wanted fit in memory" in printed


def test_option_steps_run_the_pass_with_their_options_in_its_place() -> None:
    """`option_chain`: each change is a step after its pass (and the changes before it on
    the same pass), running the pass with the options so far; in any variant the pass runs
    once, with the options of the last change kept, and not at all when it is left out."""
    from irkit.measure.attribution.plan import kept, option_chain, variant_spec
    from irkit.pipelines import pipeline_steps

    steps = option_chain(
        pipeline_steps("default-cuda"),
        ["gpu-tile-matmul{wgmma=true}", "gpu-tile-matmul{tma=true}"],
    )
    labels = [s.label for s in steps]
    at = labels.index("gpu-tile-matmul")
    assert labels[at + 1 : at + 3] == ["gpu-tile-matmul{wgmma=true}", "gpu-tile-matmul{tma=true}"]
    assert steps[at + 2].spec == "gpu-tile-matmul{wgmma=true tma=true}"
    assert steps[at + 1].refines == steps[at + 2].refines == at
    optional = [n for n, s in enumerate(steps) if s.optional]
    k = len(optional)
    full = (True,) * k
    tiles = [p for p in variant_spec(steps, optional, full).split(",") if "tile" in p]
    assert tiles == ["gpu-tile-matmul{wgmma=true tma=true}"]
    first = tuple(n != optional.index(at + 2) for n in range(k))  # the last change left out
    assert [p for p in variant_spec(steps, optional, first).split(",") if "tile" in p] == [
        "gpu-tile-matmul{wgmma=true}"
    ]
    without = tuple(n != optional.index(at) for n in range(k))  # the pass itself left out
    assert not any(kept(steps, optional, without)[at : at + 3])


def test_attribute_prices_option_steps_with_the_prefix_strategy() -> None:
    """`irkit-bench attribute --step`: the record lists each option change as a pass of its
    own, after its pass, with its spec and whether it changed the program; another strategy,
    a change of a pass the pipeline lacks, or an option the pass lacks is one line."""
    rec = attribute(CHAIN, "default-cpu", "cpu", "prefix", SMALL,
                    option_steps=("cpu-tile-matmul{mr=4}",), budget_s=1.0, kernel_times=False)  # fmt: skip
    names = [p.label for p in rec.passes]
    assert names[names.index("cpu-tile-matmul") + 1] == "cpu-tile-matmul{mr=4}"
    (step,) = [p for p in rec.passes if p.label == "cpu-tile-matmul{mr=4}"]
    assert "mr=4" in step.spec
    for strategy, changes, says in (
        ("shapley", ("cpu-tile-matmul{mr=4}",), "--strategy prefix"),
        ("prefix", ("gpu-tile-matmul{tma=true}",), "no pass gpu-tile-matmul"),
        ("prefix", ("cpu-tile-matmul{tma=true}",), "tma"),
    ):
        with pytest.raises(IrkitError, match=says):
            attribute(CHAIN, "default-cpu", "cpu", strategy, SMALL, option_steps=changes, budget_s=1.0)  # fmt: skip
