"""The real-model suite at small dims: every architecture of `benchmarks/real_models.py`
(the suite and two held-out sets: CNNs, mobile CNNs, vision transformers, encoder and decoder
language models fed int64 token ids and a padding mask, audio encoders), built from
transformers' and torchvision's definitions with every parameter random, exported by
torch.onnx, imports,
compiles and matches onnxruntime within 1e-4 on the CPU; a CNN, a vision transformer and a
language model also on the GPU path: CUDA C compiled by NVRTC for sm_90, run on cuda-host.

Needs the `models` extra (torch's CPU build and transformers); skipped without it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "real_models", ROOT / "benchmarks" / "real_models.py"
)
assert _spec is not None and _spec.loader is not None
rm = importlib.util.module_from_spec(_spec)
sys.modules["real_models"] = rm
_spec.loader.exec_module(rm)

SEQ = 16
ALL = {s.name: s for s in [*rm.SUITE, *rm.HELD_OUT, *rm.TORCHVISION]}
GPU_PATH = ["resnet", "vit", "bert"]
"""Three families for the GPU path in the tests (cuda-host runs each block's threads as
fibers: 7-30 s a model at these dims); every model's GPU path is recorded by
`real_models.py --small --gpu` (benchmarks/results/real_models/)."""


def _exported(name: str, tmp_path: Path) -> tuple[Path, dict]:
    spec = ALL[name]
    inputs = rm.example_inputs(spec, SEQ, small=True)
    path = tmp_path / f"{name}.onnx"
    rm.export(spec, inputs, path, small=True)
    return path, inputs


def test_the_suite_spans_the_families() -> None:
    assert len(rm.SUITE) >= 20
    families = {s.family for s in rm.SUITE}
    assert families == {"cnn", "mobile-cnn", "vit", "encoder-lm", "decoder-lm", "audio"}
    assert {s.family for s in rm.HELD_OUT} <= families
    assert {s.family for s in rm.TORCHVISION} <= families
    assert not {s.name for s in rm.SUITE} & {s.name for s in rm.HELD_OUT}


def test_randomize_leaves_no_parameter_at_its_initial_value() -> None:
    import torch

    model = ALL["bert"].build(True)
    rm.randomize(model)
    for name, p in model.named_parameters():
        if p.dim() == 1:  # biases and norm scales: neither all zeros nor all ones
            assert not torch.all(p == 0) and not torch.all(p == 1), name


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ALL))
def test_model_imports_and_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    path, inputs = _exported(name, tmp_path)
    record = rm.check_model(ALL[name], path, inputs)
    assert record.get("imported"), record.get("error")
    assert record["matches"], (
        f"{name}: relative error {record['rel_error']:.2e} against onnxruntime"
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", GPU_PATH)
def test_gpu_path_compiles_with_nvrtc_and_matches_on_cuda_host(name: str, tmp_path: Path) -> None:
    path, inputs = _exported(name, tmp_path)
    record = rm.gpu_path(path, inputs)
    assert record["nvrtc_kernels"] > 0
    assert record["cuda_host_matches"], (
        f"{name}: relative error {record['cuda_host_rel_error']:.2e}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "gpt2", "resnet"])
def test_symbolic_batch_and_sequence_are_bound_with_dims(name: str, tmp_path: Path) -> None:
    """An export with symbolic batch and sequence dims: unbound, one line naming the dim
    and the flag; bound (--dim, irkit.load's dims), it imports and matches onnxruntime."""
    import numpy as np

    import irkit
    from irkit.errors import IrkitError

    spec = ALL[name]
    inputs = rm.example_inputs(spec, SEQ, small=True)
    path = tmp_path / f"{name}.onnx"
    rm.export(spec, inputs, path, small=True, dynamic=True)
    with pytest.raises(IrkitError, match="has a dynamic dim 'batch'; give --dim batch=SIZE"):
        irkit.load(str(path))
    dims = {"batch": 1, "sequence": SEQ} if spec.inputs == "tokens" else {"batch": 1}
    module = irkit.load(str(path), dims=dims)
    (expected,) = rm.onnxruntime_session(path, 1).run(None, inputs)
    (got,) = irkit.compile(module, backend="cpu")(*inputs.values())
    assert float(np.linalg.norm(got - expected) / np.linalg.norm(expected)) <= 1e-4


ATTENTION = {"bert": 4, "gpt2": 4, "llama": 4, "vit": 4, "swin": 5, "whisper_encoder": 4,
             "wav2vec2": 4, "mistral": 4, "albert": 4, "mobilevit": 9}  # fmt: skip
"""Attention layers per model, as built: every family's exported attention recognized."""


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ATTENTION))
def test_exported_attention_is_recognized_and_still_matches(name: str, tmp_path: Path) -> None:
    """recognize-attention finds every layer's attention chain as torch.onnx writes it
    (BERT's and ViT's, GPT-2's and Llama's with their causal masks built from the attention
    mask, Llama's and Mistral's grouped heads broadcast, Swin's windows, the audio
    encoders'), no softmax left over, and the model still matches onnxruntime."""
    import numpy as np

    import irkit
    from irkit.dialects import graph as g
    from irkit.ir import shape_of
    from irkit.pipelines import apply_passes, parse_passes

    path, inputs = _exported(name, tmp_path)
    module = irkit.load(str(path))
    found = apply_passes(module.clone(), parse_passes("canonicalize,cse,recognize-attention"))
    ops = list(found.walk())
    attention = [op for op in ops if isinstance(op, g.AttentionOp)]
    assert len(attention) == ATTENTION[name]
    assert not any(isinstance(op, g.SoftmaxOp) for op in ops)
    if name in ("llama", "mistral"):  # 2 key/value heads for 4 query heads, read as 2
        assert all(shape_of(a.operands[1])[1] * 2 == shape_of(a.operands[0])[1] for a in attention)
    (expected,) = rm.onnxruntime_session(path, 1).run(None, inputs)
    exe = irkit.compile(module, "canonicalize,cse,recognize-attention,default-cpu", backend="cpu")
    (got,) = exe(*inputs.values())
    rel = float(np.linalg.norm(got.astype(np.float64) - expected) / np.linalg.norm(expected))
    assert rel <= 1e-4, rel
