"""irkit's CPU pipeline against every peer installed (onnxruntime, XLA, IREE, PyTorch, TVM,
tinygrad, numpy) on the examples, in one run (issue 23).

    pip install -e '.[peers]'            # onnxruntime and jax
    pip install -e '.[peers-compilers]'  # optional: IREE, TVM and tinygrad (which needs clang)
    pip install torch                    # optional: PyTorch (its CPU build: PyPI's default is CUDA's)
    python benchmarks/cpu_peers.py [--quick] [--threads 1] [-p default-cpu] [--no-torch]
        [--tvm-trials 64 | --no-tvm] [--no-tinygrad] [--only NAME ...] [--out FILE]
    python benchmarks/cpu_peers.py --suite [--set held-out] [--only a,b] [--out FILE]

`--suite` runs the real-model suite instead (`benchmarks/real_models.py --torch`: the models
exported from their libraries with random weights, irkit against onnxruntime and PyTorch
eager, one thread and two, interleaved; records with the host's fingerprint, its vector
extension by name, `isa`: "AVX2" or "AVX-512").

Each workload is an example `.graph` at issue 23's sizes and the same computation as an ONNX
graph built here with `onnx.helper` (standard operators: LayerNormalization, Softmax, Gelu,
Conv, BatchNormalization...), the model's params given to onnxruntime as initializers (how a
model is deployed: onnxruntime may pre-pack them once) and to irkit as inputs bound once.
irkit's result is checked against the float64 reference first and onnxruntime's against
irkit's (a wrong result is never timed); then both run in interleaved, randomly ordered
rounds on the same inputs, `--threads` each (IRKIT_NUM_THREADS; onnxruntime's intra-op
pool, inter-op 1, its threads sleeping between runs instead of spinning on the cores irkit's
threads need; PyTorch's OpenMP threads likewise, OMP_WAIT_POLICY=PASSIVE). That slows the
peers whose pools wake for every operator: PyTorch eager took 2.3x as long on two threads
for transformer_block. `--quiesce` lets every pool spin as in use (measured: onnxruntime's
threads ~45 ms after a run, PyTorch's ~10 ms, irkit's under 1 ms), and the rounds wait after
each sample (untimed) until no thread runs, so that no pool spins through another side's
sample; on this project's 2-core VM each pause put the next sample on the VM's slower
footing (irkit's two-thread softmax 80 us after a 1-5 ms pause, 160-320 us after 20 ms), so
it is no default there. Printed: medians with 95% CIs and the ratio onnxruntime / irkit paired by
round (> 1: irkit faster) with its CI; `--out` appends one record per workload with the
host fingerprint. With jax installed, XLA is a second peer: the same computation in
jax.numpy, jitted (params as arguments), checked against irkit, timed in the same rounds; one
thread by `--xla_cpu_multi_thread_eigen=false`, else XLA's own pool over the host's cores (on
this 2-core host, `--threads 2`). With PyTorch installed, PyTorch eager and torch.compile
(Inductor) are peers too, checked likewise (`--no-torch` leaves them out); with IREE, the
ONNX model imported by `iree-import-onnx` and compiled for llvm-cpu at the host's CPU, run on
its local-task runtime with `--threads` workers. With TVM, the ONNX model through Relax's
importer, each kernel tuned by MetaSchedule (`--tvm-trials` per task, minutes per example;
0: untuned), on Relax's VM; with tinygrad, the ONNX model through its OnnxRunner, captured
by TinyJit; numpy where it has the computation (not GELU: no erf).

With fewer threads than the host has CPUs, the whole process is confined to that many
(`sched_setaffinity`, before any library starts a pool): a library's flags are not a
guarantee (jax 0.10's XLA runs dots through YNNPACK on a pool of its own, which took 1.3
cores in "one-thread" runs). Each side's cores in use (CPU time over wall time) are in the
record, and a line says so where a side used more than `--threads`.
"""

from __future__ import annotations  # noqa: I001 (cpu_baseline sets thread counts before numpy)

import json
import sys
from typing import Any

if __name__ == "__main__" and "--suite" in sys.argv:
    # the real-model suite (before cpu_baseline pins the process): real_models.py's models and
    # protocol, one thread and two in one run, with PyTorch eager as a peer beside onnxruntime
    from real_models import main as suite_main

    sys.exit(suite_main(["--torch", *(a for a in sys.argv[1:] if a != "--suite")]))

from cpu_baseline import (  # noqa: I001, E402
    CPUS,
    THREADS,
    _ms,
    benchmark_parser,
    conv_block_peer,
    elementwise_peer,
    thread_note,
    thread_record,
)

import os  # noqa: E402

# cpu_baseline confined the process to THREADS CPUs: the flags below are not enough alone
# (XLA's YNNPACK dots use a pool of their own, sized from the CPUs the process may use)
if THREADS == 1:  # XLA's CPU backend: one thread (read when jax is imported)
    os.environ.setdefault(
        "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    )
os.environ.setdefault("TVM_NUM_THREADS", str(THREADS))  # TVM's runtime pool, read at its start

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import irkit  # noqa: E402
from irkit.measure.fingerprint import host_fingerprint  # noqa: E402
from irkit.measure.stats import ratio_ci  # noqa: E402
from irkit.measure.timers import time_interleaved  # noqa: E402
from irkit.runtime.check import check  # noqa: E402

OPSET = 20  # Gelu
TVM_TRIALS = 64
"""MetaSchedule's trials per TVM kernel by default: ~4 minutes for gemm 1024^3 on the 2-core
VM (22.5 ms at two threads after 64; untuned, TVM's default lowering took 3.5 s)."""
MIN_SAMPLE_S = 2e-3
"""A sample's length under `--quiesce`: each sample starts with every pool asleep, its first
call waking them; over 2 ms of calls that is a small part."""


def _node(op: str, inputs: list[str], output: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [output], **attrs)


def _const(name: str, value: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.float32), name)


def softmax(d: dict) -> list:
    return [_node("Softmax", ["x"], "y", axis=-1)]


def layernorm(d: dict) -> list:
    return [_node("LayerNormalization", ["x", "gamma", "beta"], "y", axis=-1, epsilon=1e-5)]


def gemm(d: dict) -> list:
    return [_node("MatMul", ["a", "b"], "c")]


def elementwise_chain(d: dict) -> list:
    return [
        _node("Add", ["x", "bias"], "t0"), _node("Mul", ["t0", "y"], "t1"),
        _node("Relu", ["t1"], "t2"), _node("Sub", ["t2", "x"], "t3"),
        _node("Sigmoid", ["t3"], "t4"), _node("Mul", ["t4", "two"], "z"),
    ]  # fmt: skip


def mlp(d: dict) -> list:
    return [
        _node("MatMul", ["x", "w1"], "h0"), _node("Add", ["h0", "b1"], "h1"),
        _node("Gelu", ["h1"], "h"), _node("MatMul", ["h", "w2"], "y"),
    ]  # fmt: skip


def conv_block(d: dict) -> list:
    return [
        _node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1], strides=[1, 1]),
        _node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], "b", epsilon=1e-5),
        _node("Relu", ["b"], "r"),
        _node("MaxPool", ["r"], "y", kernel_shape=[2, 2], strides=[2, 2]),
    ]  # fmt: skip


def transformer_block(d: dict) -> list:
    b, s, dm = d["B"], d["S"], d["D"]
    shape = lambda name, dims: numpy_helper.from_array(np.array(dims, np.int64), name)  # noqa: E731
    return [
        shape("bsd", [b, s, dm]), shape("nd", [b * s, dm]), _const("scale", 0.08838834764831845),
        _node("LayerNormalization", ["x", "ln1_g", "ln1_b"], "ln1", axis=-1, epsilon=1e-5),
        _node("Reshape", ["ln1", "nd"], "h"),
        *(n for w in ("q", "k", "v") for n in (
            _node("MatMul", ["h", f"w{w}"], f"{w}0"), _node("Reshape", [f"{w}0", "bsd"], w))),
        _node("Transpose", ["k"], "kt", perm=[0, 2, 1]),
        _node("MatMul", ["q", "kt"], "s0"), _node("Mul", ["s0", "scale"], "scores"),
        _node("Softmax", ["scores"], "p", axis=-1), _node("MatMul", ["p", "v"], "a0"),
        _node("Reshape", ["a0", "nd"], "attn"), _node("MatMul", ["attn", "wo"], "o0"),
        _node("Reshape", ["o0", "bsd"], "o"), _node("Add", ["x", "o"], "x1"),
        _node("LayerNormalization", ["x1", "ln2_g", "ln2_b"], "ln2", axis=-1, epsilon=1e-5),
        _node("Reshape", ["ln2", "nd"], "h2"), _node("MatMul", ["h2", "w1"], "m0"),
        _node("Add", ["m0", "b1"], "m1"), _node("Gelu", ["m1"], "m"),
        _node("MatMul", ["m", "w2"], "f0"), _node("Add", ["f0", "b2"], "f1"),
        _node("Reshape", ["f1", "bsd"], "f"), _node("Add", ["x1", "f"], "y"),
    ]  # fmt: skip


WORKLOADS = {
    # name: (example, dims, quick dims, ONNX graph, extra constants)
    "gemm": ("gemm", {"M": 1024, "N": 1024, "K": 1024}, {"M": 128, "N": 128, "K": 128}, gemm, {}),
    "elementwise_chain": ("elementwise_chain", {"N": 1024, "D": 1024}, {"N": 128, "D": 256},
                          elementwise_chain, {"two": 2.0}),
    "conv_block": ("conv_block", {}, {"N": 1, "H": 16}, conv_block, {}),
    "mlp": ("mlp", {"B": 64, "D": 1024, "F": 4096}, {"B": 8, "D": 64, "F": 256}, mlp, {}),
    "layernorm": ("layernorm", {"T": 512, "H": 768}, {"T": 32, "H": 96}, layernorm, {}),
    "transformer_block": ("transformer_block", {}, {"B": 1, "S": 16, "D": 32, "F": 64},
                          transformer_block, {}),
    "softmax": ("softmax", {"R": 512, "C": 1024}, {"R": 32, "C": 128}, softmax, {}),
}  # fmt: skip


def onnx_model(name: str, dims: dict, exe, inputs: list[np.ndarray], params: set[str]):
    """The workload as an ONNX model, the model's params as initializers, and its feeds."""
    _, _, _, build, consts = WORKLOADS[name]
    nodes = build(dims)
    initializers = [n for n in nodes if isinstance(n, onnx.TensorProto)]
    nodes = [n for n in nodes if isinstance(n, onnx.NodeProto)]
    initializers += [_const(k, v) for k, v in consts.items()]
    feeds, graph_inputs = {}, []
    for spec, array in zip(exe.inputs, inputs, strict=True):
        if spec.name in params:
            initializers.append(numpy_helper.from_array(array, spec.name))
        else:
            feeds[spec.name] = array
            graph_inputs.append(
                helper.make_tensor_value_info(spec.name, TensorProto.FLOAT, spec.shape)
            )
    outputs = [
        helper.make_tensor_value_info(s.name, TensorProto.FLOAT, s.shape) for s in exe.outputs
    ]
    graph = helper.make_graph(nodes, name, graph_inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model, feeds


def onnx_session(model: onnx.ModelProto, spin: bool = False):
    """An onnxruntime session for the model; its threads spinning between runs only where
    `spin`."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # its pool's threads spin ~45 ms after a run; interleaved with irkit's on the same cores
    # they would slow irkit down (as OpenBLAS's did, see cpu_baseline.py): they sleep,
    # unless the rounds wait for them (`--quiesce`)
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session, ort.__version__


def iree_function(model: onnx.ModelProto, feeds: dict):
    """The ONNX model through IREE (`iree-import-onnx`, then `iree-compile` for llvm-cpu at
    the host's CPU) on IREE's local-task runtime with THREADS workers: a function of the
    feeds, placed on the device once, returning its outputs; None without IREE."""
    try:
        import iree.compiler
        import iree.runtime as rt
    except ImportError:
        return None, None
    import subprocess
    import tempfile
    from importlib.metadata import version
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        onnx.save(model, f"{tmp}/model.onnx")
        subprocess.run([str(Path(sys.executable).parent / "iree-import-onnx"), f"{tmp}/model.onnx",
                        "-o", f"{tmp}/model.mlir"], check=True, capture_output=True)  # fmt: skip
        vmfb = iree.compiler.compile_file(
            f"{tmp}/model.mlir", target_backends=["llvm-cpu"],
            extra_args=["--iree-llvmcpu-target-cpu=host"],
        )  # fmt: skip
    rt.flags.parse_flags(f"--task_topology_group_count={THREADS}")
    config = rt.Config("local-task")
    context = rt.SystemContext(config=config)
    context.add_vm_module(rt.VmModule.copy_buffer(context.instance, vmfb))
    main = context.modules.module[model.graph.name]
    args = [rt.asdevicearray(config.device, a) for a in feeds.values()]
    return (lambda: main(*args)), version("iree-base-compiler")


def numpy_function(name: str):
    """The workload as a numpy user writes it (OpenBLAS matmuls, im2col convolution), a
    function of the arrays in irkit's input order; None where numpy has no form of it (GELU
    needs erf, which numpy lacks)."""

    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def layernorm(x, g, b):
        m = x.mean(-1, keepdims=True)
        d = x - m
        return d / np.sqrt((d * d).mean(-1, keepdims=True) + np.float32(1e-5)) * g + b

    functions = {
        "gemm": lambda a, b: a @ b, "elementwise_chain": elementwise_peer,
        "conv_block": conv_block_peer, "softmax": softmax, "layernorm": layernorm,
    }  # fmt: skip
    return functions.get(name), np.__version__


def tvm_function(model: onnx.ModelProto, feeds: dict, trials: int):
    """The ONNX model through TVM's Relax importer, its kernels tuned by MetaSchedule for
    `trials` candidates each (0: TVM's default CPU lowering, untuned) at the host's CPU, run
    on Relax's VM with TVM_NUM_THREADS workers: a function of the feeds, placed once; None
    without TVM. The model's params are constants of the module, as in onnxruntime."""
    try:
        import tvm
        from tvm import relax
        from tvm.relax.frontend.onnx import from_onnx
    except ImportError:
        return None, None
    import logging
    import tempfile

    from llvmlite import binding as llvm

    target = tvm.target.Target(
        {"kind": "llvm", "mcpu": llvm.get_host_cpu_name(), "num-cores": THREADS}
    )
    module = from_onnx(model, keep_params_in_input=False)
    if trials:  # the tuning's progress goes to its logs, not the table
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
        # its builders get every CPU: confined to one, each build outlived the builder's
        # time limit and no candidate was ever measured (candidates run at `target`'s cores)
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
        try:
            with tempfile.TemporaryDirectory() as work_dir:
                # the total only bounds the run (64 tasks' worth); each task stops at `trials`
                module = relax.pipeline.static_shape_tuning_pipeline(
                    total_trials=trials * 64, max_trials_per_task=trials, target=target,
                    work_dir=work_dir,
                )(module)  # fmt: skip
        finally:
            os.sched_setaffinity(0, CPUS)
    executable = tvm.compile(module, target=target)
    device = tvm.cpu()
    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(a, device) for a in feeds.values()]
    main = vm["main"]
    return (lambda: main(*args)), tvm.__version__


def tinygrad_function(model: onnx.ModelProto, feeds: dict):
    """The ONNX model through tinygrad's OnnxRunner on its CPU device (clang-compiled
    kernels), captured once by TinyJit; each call runs the captured kernels and waits for
    them. None without tinygrad (or without clang, which its CPU device compiles with)."""
    import shutil

    try:
        from tinygrad import Device, Tensor, TinyJit
        from tinygrad.nn.onnx import OnnxRunner
    except ImportError:
        return None, None
    if shutil.which("clang") is None:
        print("tinygrad: not run (its CPU device needs clang)", file=sys.stderr)
        return None, None
    from importlib.metadata import version

    runner = OnnxRunner(Tensor(model.SerializeToString()))
    tensors = {k: Tensor(v, device="CPU").realize() for k, v in feeds.items()}
    jit = TinyJit(lambda **inputs: [t.realize() for t in runner(inputs).values()])
    device = Device["CPU"]

    def run():
        out = jit(**tensors)
        device.synchronize()
        return out

    return run, version("tinygrad")


def xla_function(name: str, dims: dict, exe):
    """The workload in jax.numpy, jitted by XLA for the CPU: a function of the arrays in
    irkit's input order (params too: how jax models take them); None without jax."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None, None
    from jax import lax

    def layer_norm(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / jnp.sqrt(v + 1e-5) * g + b

    def gelu(x):
        return jax.nn.gelu(x, approximate=False)

    def transformer(x, ln1_g, ln1_b, wq, wk, wv, wo, ln2_g, ln2_b, w1, b1, w2, b2):
        h = layer_norm(x, ln1_g, ln1_b)
        q, k, v = h @ wq, h @ wk, h @ wv
        p = jax.nn.softmax(q @ k.transpose(0, 2, 1) * 0.08838834764831845, axis=-1)
        x1 = x + (p @ v) @ wo
        return x1 + gelu(layer_norm(x1, ln2_g, ln2_b) @ w1 + b1) @ w2 + b2

    def conv(x, w, scale, shift, mean, var):
        c = lax.conv_general_dilated(x, w, (1, 1), [(1, 1), (1, 1)],
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))  # fmt: skip
        per = lambda t: t[None, :, None, None]  # noqa: E731
        r = jnp.maximum((c - per(mean)) / jnp.sqrt(per(var) + 1e-5) * per(scale) + per(shift), 0)
        return lax.reduce_window(r, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    functions = {
        "gemm": lambda a, b: a @ b,
        "elementwise_chain": lambda x, y, bias: jax.nn.sigmoid(jnp.maximum((x + bias) * y, 0) - x) * 2,
        "conv_block": conv,
        "mlp": lambda x, w1, b1, w2: gelu(x @ w1 + b1) @ w2,
        "layernorm": layer_norm,
        "transformer_block": transformer,
        "softmax": lambda x: jax.nn.softmax(x, axis=-1),
    }  # fmt: skip
    return jax.jit(functions[name]), jax.__version__


def torch_functions(name: str, dims: dict) -> tuple[dict[str, Any], str | None]:
    """The workload in PyTorch, eager and through `torch.compile` (Inductor's C++/OpenMP
    code for the CPU), functions of the arrays in irkit's input order; none without torch."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return {}, None
    from gpu_targets import torch_peers as torch_computations  # the GPU targets' PyTorch forms

    torch.set_num_threads(THREADS)
    shared = torch_computations(torch)

    def conv(x, w, scale, shift, mean, var):
        c = F.conv2d(x, w, padding=1)
        r = F.batch_norm(c, mean, var, scale, shift, training=False, eps=1e-5)
        return F.max_pool2d(torch.relu(r), 2, 2)

    functions = {
        "gemm": shared["matmul"],
        "elementwise_chain": lambda x, y, bias: torch.sigmoid(torch.relu((x + bias) * y) - x) * 2,
        "conv_block": conv,
        "mlp": shared["mlp"],
        "layernorm": shared["layer_norm"],
        "transformer_block": shared["transformer_block"],
        "softmax": shared["softmax"],
    }  # fmt: skip
    fn = functions[name]
    return {"torch": fn, "torch.compile": torch.compile(fn)}, torch.__version__


def measure(name: str, quick: bool, pipeline: str, budget: float, torch_peers: bool = True,
            quiesce: bool = False, tvm_trials: int | None = TVM_TRIALS,
            tinygrad: bool = True) -> dict:  # fmt: skip
    example, dims, quick_dims, _, _ = WORKLOADS[name]
    dims = quick_dims if quick else dims
    module = irkit.load(f"examples/{example}.graph", dims)
    exe = irkit.compile(module, pipeline, backend="cpu")
    checks, inputs = check(exe, module, seed=0)
    if not all(c.passed for c in checks):
        raise SystemExit(
            f"{name}: irkit's result is wrong; not timed: {[c.describe() for c in checks]}"
        )
    lines = open(f"examples/{example}.graph").read().splitlines()
    params = {line.split()[1] for line in lines if line.startswith("param ")}
    model, feeds = onnx_model(name, {**_defaults(lines), **dims}, exe, inputs, params)
    session, version = onnx_session(model, spin=quiesce)
    ours = exe(*inputs)
    _agree(name, "onnxruntime", ours, session.run(None, feeds))
    peers = {"onnxruntime": lambda: session.run(None, feeds)}
    versions = {"onnxruntime": version}
    xla, xla_version = xla_function(name, dims, exe)
    if xla is not None:
        import jax

        args = [jax.device_put(a) for a in inputs]
        _agree(name, "XLA", ours, [np.asarray(xla(*args))])
        peers["xla"] = lambda: xla(*args).block_until_ready()
        versions["xla"] = xla_version
    iree, iree_version = iree_function(model, feeds)
    if iree is not None:
        result = iree()
        _agree(name, "IREE", ours, [np.asarray(r) for r in (result if isinstance(result, tuple | list) else [result])])  # fmt: skip
        peers["iree"] = iree
        versions["iree"] = iree_version
    if torch_peers:
        peers.update(_torch_peers(name, dims, inputs, ours, versions))
    configs = {}
    numpy_fn, versions["numpy"] = numpy_function(name)
    if numpy_fn is not None:
        _agree(name, "numpy", ours, [numpy_fn(*inputs)])
        peers["numpy"] = lambda: numpy_fn(*inputs)
    if tvm_trials is not None:
        tvm, versions["tvm"] = tvm_function(model, feeds, tvm_trials)
        if tvm is not None:
            _agree(name, "TVM", ours, [tvm().numpy()])
            peers["tvm"] = tvm
            configs["tvm"] = (f"MetaSchedule, at most {tvm_trials} trials per task"
                              if tvm_trials else "default lowering, untuned")  # fmt: skip
    if tinygrad:
        tiny, versions["tinygrad"] = tinygrad_function(model, feeds)
        if tiny is not None:
            for _ in range(2):  # TinyJit captures on its second call
                tiny()
            _agree(name, "tinygrad", ours, [t.numpy() for t in tiny()])
            peers["tinygrad"] = tiny
            configs["tinygrad"] = f"TinyJit, BEAM={os.environ.get('BEAM', '0')}"
    bound = exe.bind(*inputs)
    timings = time_interleaved(
        {"irkit": bound.run_graph, **peers},
        budget_s=budget,
        min_sample_s=MIN_SAMPLE_S if quiesce else 2e-4,
        quiesce=quiesce,
    )
    speed = {peer: ratio_ci(timings[peer].samples, timings["irkit"].samples) for peer in peers}
    others = {
        peer: {"version": versions[peer], "time": timings[peer].to_json(),
               "speedup": speed[peer].to_json(),
               **({"config": configs[peer]} if peer in configs else {})}
        for peer in peers if peer not in ("onnxruntime", "xla")
    }  # fmt: skip
    xla_record = {}
    if xla is not None:
        xla_record = {"xla": xla_version, "xla_time": timings["xla"].to_json(),
                      "speedup_vs_xla": speed["xla"].to_json()}  # fmt: skip
    return {
        **xla_record,
        "kind": "irkit.benchmark", "benchmark": "cpu_peers", "workload": name, "dims": dims,
        **thread_record(timings),
        "pipeline": exe.pipeline, "threads": THREADS, "onnxruntime": version,
        "checks": [c.to_json() for c in checks],
        "irkit": timings["irkit"].to_json(), "onnxruntime_time": timings["onnxruntime"].to_json(),
        "speedup_vs_onnxruntime": speed["onnxruntime"].to_json(),
        **({"peers": others} if others else {}),
        "protocol": f"interleaved randomized rounds, perf_counter_ns, warm caches, {THREADS} "
                    "thread(s) each, the process confined to as many CPUs (cpus; cores_used: "
                    "each side's CPU time over wall time) (IRKIT_NUM_THREADS; onnxruntime "
                    "intra-op, inter-op 1, ORT_ENABLE_ALL; XLA: one thread by "
                    "--xla_cpu_multi_thread_eigen=false, else its default pool over the host's cores; "
                    "torch: torch.set_num_threads, eager and torch.compile (Inductor, default mode, "
                    "compiled and warmed before timing), under inference_mode; numpy: its "
                    "OpenBLAS's threads; TVM: TVM_NUM_THREADS, MetaSchedule-tuned per its config; "
                    "tinygrad: its CPU device, TinyJit-captured), "
                    + ("every pool as it comes (spinning), the rounds waiting after each sample "
                       "(untimed) until no thread of the process runs, samples of 2 ms or more, "
                       if quiesce else "onnxruntime's threads not spinning between runs, "
                       "torch's OpenMP threads passive (OMP_WAIT_POLICY=PASSIVE), TVM's pool not spinning "
                       "(TVM_THREAD_POOL_SPIN_COUNT=0), ") +
                    "params as onnxruntime initializers, jax and torch arguments, and bound once in irkit, "
                    "same inputs, irkit checked against float64 and every peer against irkit first",
        "fingerprint": host_fingerprint(),
    }  # fmt: skip


def _torch_peers(name: str, dims: dict, inputs: list, ours: list, versions: dict) -> dict:
    """PyTorch eager and torch.compile as peers (none without torch): each checked against
    irkit's result, torch.compile compiled (and so warmed) by that check."""
    functions, version = torch_functions(name, dims)
    if not functions:
        return {}
    import torch

    args = [torch.from_numpy(a) for a in inputs]
    peers = {}
    for peer, fn in functions.items():
        with torch.inference_mode():
            _agree(name, peer, ours, [fn(*args).numpy()])

        def run(fn=fn) -> None:
            with torch.inference_mode():
                fn(*args)

        peers[peer] = run
        versions[peer] = version
    return peers


def peer_rows(rec: dict) -> list[tuple[str, dict, dict]]:
    """A record's peers as (name, time, peer/irkit ratio), whatever field holds each."""
    rows = [("onnxruntime", rec["onnxruntime_time"], rec["speedup_vs_onnxruntime"])]
    if "xla" in rec:
        rows.append(("xla", rec["xla_time"], rec["speedup_vs_xla"]))
    rows += [(peer, r["time"], r["speedup"]) for peer, r in rec.get("peers", {}).items()]
    return rows


def _agree(name: str, peer: str, ours: list, theirs: list) -> None:
    """Refuse to time a peer whose result is not irkit's (which matched float64)."""
    for a, b in zip(ours, theirs, strict=True):
        scale = max(float(np.max(np.abs(a))), 1e-30)
        if float(np.max(np.abs(a - b))) / scale > 1e-3:
            raise SystemExit(
                f"{name}: {peer} disagrees with irkit ({np.max(np.abs(a - b)):.3g}); not timed"
            )


def _defaults(lines: list[str]) -> dict:
    """An example's declared dims (its `dim NAME = VALUE` lines)."""
    out = {}
    for line in lines:
        if line.startswith("dim "):
            name, value = line[4:].split("#")[0].split("=")
            out[name.strip()] = int(value)
    return out


def main() -> int:
    parser = benchmark_parser(__doc__, "default-cpu")
    parser.add_argument(
        "--only", action="append", choices=sorted(WORKLOADS), help="workload(s) to run"
    )
    parser.add_argument(
        "--no-torch", action="store_true",
        help="leave PyTorch (eager and torch.compile) out even where it is installed",
    )  # fmt: skip
    parser.add_argument(
        "--quiesce", action="store_true",
        help="every side's pool spins as in use, and the rounds wait after each sample until "
        "no thread runs (default: onnxruntime's and torch's threads sleep between runs)",
    )  # fmt: skip
    parser.add_argument(
        "--tvm-trials", type=int, default=TVM_TRIALS, metavar="N",
        help=f"TVM's MetaSchedule trials per kernel (default {TVM_TRIALS}; 0: untuned)",
    )  # fmt: skip
    parser.add_argument("--no-tvm", action="store_true", help="leave TVM out")
    parser.add_argument("--no-tinygrad", action="store_true", help="leave tinygrad out")
    args = parser.parse_args()
    if not args.quiesce:  # read when torch loads its OpenMP runtime and TVM its pool (after this)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "0")
    budget = args.budget or (1.0 if args.quick else 10.0)
    for name in args.only or WORKLOADS:
        rec = measure(name, args.quick, args.pipeline, budget, torch_peers=not args.no_torch,
                      quiesce=args.quiesce, tvm_trials=None if args.no_tvm else args.tvm_trials,
                      tinygrad=not args.no_tinygrad)  # fmt: skip
        print(f"{name}: irkit {_ms(rec['irkit']['seconds'])}{thread_note(rec)}")
        for peer, time, ratio in sorted(peer_rows(rec), key=lambda row: row[2]["median"]):
            print(f"  {peer:14} {_ms(time['seconds']):>28}   {ratio['median']:6.3f}x "
                  f"[{ratio['ci_low']:.3f}, {ratio['ci_high']:.3f}]", flush=True)  # fmt: skip
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
    print(f"host {host_fingerprint()['cpu']}; {THREADS} thread(s) on CPUs {CPUS}; pipeline {args.pipeline}; "
          "each peer's median time, then peer/irkit paired by round with its 95% CI "
          "(> 1: irkit is faster), closest peer first")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
