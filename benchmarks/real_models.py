"""The real-model suite: architectures people run, built from their libraries' definitions
with every parameter random, exported to ONNX, imported by irkit and checked against
onnxruntime; then compile time and speed against onnxruntime on one and two threads.

    python benchmarks/real_models.py                     # the suite, full dims, every check
    python benchmarks/real_models.py --set held-out      # the held-out models
    python benchmarks/real_models.py --small --only bert,gpt2 --no-speed
    python benchmarks/real_models.py --out benchmarks/results/real_models.jsonl
    python benchmarks/real_models.py --no-speed --export-dir models/   # + models/jobs.jsonl
    irkit-bench suite --jobs models/jobs.jsonl --out attribution.jsonl  # each pass's worth

Needs the `models` extra (`pip install -e '.[models]'`: torch's CPU build, transformers).
Nothing is downloaded: each model is its configuration class with random weights. Every
parameter and buffer is redrawn (`randomize`), biases and norms included: a zero bias or a
unit scale left at its initial value folds away and hides a fault (the first study here
missed a 60x slowdown that way). Fixed shapes: batch 1, sequence 128 (`--seq`), 224 x 224
images, 16,000 audio samples (one second at 16 kHz); language models take int64 token ids
and an attention mask.

Each model gives one JSON record: its family, parameter count, whether it imported (and the
error if not), the largest relative error against onnxruntime, compile time, and with
speed measured, irkit's and onnxruntime's medians on one and two threads, timed
interleaved in one process, with their ratio. `--gpu` also compiles every kernel's CUDA C
with NVRTC under `default-cuda` and runs the program on cuda-host (at `--small` dims);
`--gpu-dtypes f16,bf16` also converts the model to each type (`irkit.load(dtype=)`, as
torch's `model.half()`) and runs it on cuda-host under `default-cuda` (mma.sync) and under
Hopper's steps (`HALF_VARIANTS`: wgmma, TMA, warp-specialized and persistent), each checked
against the float64 reference of the converted model within the type's tolerance, with the
tensor-core instructions it took and NVRTC's spills on sm_80 and sm_90. `--quantize
fp8,int8` quantizes each model with onnxruntime's tool and checks the QDQ model on the CPU
and on cuda-host against onnxruntime running it (`benchmarks/quantized.py`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Spec:
    """One architecture: how to build it and what it takes."""

    name: str
    family: str  # cnn, mobile-cnn, vit, encoder-lm, decoder-lm, audio
    build: Callable[[bool], Any]  # small -> a torch module in eval mode
    inputs: str  # "image", "tokens", "audio", "features"


def _hf(config_name: str, model_name: str, **config: Any) -> Callable[[bool], Any]:
    """A transformers model from its configuration with `config` (full dims) and, small,
    fewer layers and narrower ones."""

    def build(small: bool) -> Any:
        _torchvision_models(required=False)  # before transformers looks for torchvision
        import transformers

        cfg = dict(config)
        if small:
            cfg.update(_SMALL.get(config_name, {}))
        configuration = getattr(transformers, config_name)(**cfg)
        if hasattr(configuration, "_attn_implementation"):
            configuration._attn_implementation = "eager"
        return getattr(transformers, model_name)(configuration).eval()

    return build


_TEXT = {"vocab_size": 1000, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
_SMALL: dict[str, dict[str, Any]] = {
    **dict.fromkeys(["ViTConfig", "DeiTConfig", "BeitConfig", "Dinov2Config"], {"image_size": 64}),
    "SwinConfig": {"image_size": 64, "window_size": 4, "patch_size": 2},
    "MobileViTConfig": {"image_size": 64},
    "WhisperConfig": {"max_source_positions": 100},
}  # fmt: skip
"""Config changes at `--small` dims (64 x 64 images, 200 mel frames) where a model's
config names its input size."""


def _lm(hidden: int, layers: int, heads: int, inter: int) -> dict[str, Any]:
    return {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "intermediate_size": inter}  # fmt: skip


SUITE: list[Spec] = [
    # CNNs, mobile ones included
    Spec("resnet", "cnn", _hf("ResNetConfig", "ResNetModel", depths=[1, 1, 1, 1], hidden_sizes=[32, 64, 128, 256], embedding_size=32), "image"),
    Spec("convnext", "cnn", _hf("ConvNextConfig", "ConvNextModel", depths=[1, 1, 1, 1], hidden_sizes=[32, 64, 128, 256]), "image"),
    Spec("regnet", "cnn", _hf("RegNetConfig", "RegNetModel", depths=[1, 1, 1, 1], hidden_sizes=[32, 64, 128, 256], groups_width=16), "image"),
    Spec("mobilenet_v2", "mobile-cnn", _hf("MobileNetV2Config", "MobileNetV2Model", depth_multiplier=0.35), "image"),
    Spec("mobilenet_v1", "mobile-cnn", _hf("MobileNetV1Config", "MobileNetV1Model", depth_multiplier=0.25), "image"),
    Spec("efficientnet", "mobile-cnn", _hf("EfficientNetConfig", "EfficientNetModel", width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320), "image"),
    # vision transformers
    Spec("vit", "vit", _hf("ViTConfig", "ViTModel", **_lm(192, 4, 3, 768)), "image"),
    Spec("deit", "vit", _hf("DeiTConfig", "DeiTModel", **_lm(192, 4, 3, 768)), "image"),
    Spec("swin", "vit", _hf("SwinConfig", "SwinModel", embed_dim=32, depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8]), "image"),
    Spec("dinov2", "vit", _hf("Dinov2Config", "Dinov2Model", **_lm(192, 4, 3, 768), image_size=224), "image"),
    # encoder language models
    Spec("bert", "encoder-lm", _hf("BertConfig", "BertModel", **_TEXT, **_lm(256, 4, 4, 1024)), "tokens"),
    Spec("distilbert", "encoder-lm", _hf("DistilBertConfig", "DistilBertModel", **_TEXT, dim=256, n_layers=4, n_heads=4, hidden_dim=1024), "tokens"),
    Spec("roberta", "encoder-lm", _hf("RobertaConfig", "RobertaModel", **_TEXT, **_lm(256, 4, 4, 1024)), "tokens"),
    Spec("electra", "encoder-lm", _hf("ElectraConfig", "ElectraModel", **_TEXT, embedding_size=128, **_lm(256, 4, 4, 1024)), "tokens"),
    # decoder language models (prefill: the whole sequence, causal)
    Spec("gpt2", "decoder-lm", _hf("GPT2Config", "GPT2Model", **_TEXT, n_embd=256, n_layer=4, n_head=4), "tokens"),
    Spec("llama", "decoder-lm", _hf("LlamaConfig", "LlamaModel", **_TEXT, **_lm(256, 4, 4, 688), num_key_value_heads=2), "tokens"),
    Spec("qwen2", "decoder-lm", _hf("Qwen2Config", "Qwen2Model", **_TEXT, **_lm(256, 4, 4, 688), num_key_value_heads=2), "tokens"),
    Spec("opt", "decoder-lm", _hf("OPTConfig", "OPTModel", **_TEXT, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, ffn_dim=1024, word_embed_proj_dim=256), "tokens"),
    # audio encoders
    Spec("whisper_encoder", "audio", _hf("WhisperConfig", "WhisperModel", d_model=256, encoder_layers=4, encoder_attention_heads=4, encoder_ffn_dim=1024, decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=256, num_mel_bins=80, max_source_positions=1500, vocab_size=1000, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1), "features"),
    Spec("wav2vec2", "audio", _hf("Wav2Vec2Config", "Wav2Vec2Model", **_lm(256, 4, 4, 1024), conv_dim=[64] * 7), "audio"),
]  # fmt: skip

HELD_OUT: list[Spec] = [
    Spec("resnet_wide", "cnn", _hf("ResNetConfig", "ResNetModel", depths=[2, 1, 1, 1], hidden_sizes=[48, 96, 192, 384], embedding_size=48, layer_type="bottleneck"), "image"),
    Spec("convnextv2", "cnn", _hf("ConvNextV2Config", "ConvNextV2Model", depths=[1, 1, 1, 1], hidden_sizes=[32, 64, 128, 256]), "image"),
    Spec("mobilevit", "mobile-cnn", _hf("MobileViTConfig", "MobileViTModel", hidden_sizes=[48, 64, 80], neck_hidden_sizes=[16, 16, 24, 32, 48, 64, 96]), "image"),
    Spec("beit", "vit", _hf("BeitConfig", "BeitModel", **_lm(192, 4, 3, 768)), "image"),
    Spec("albert", "encoder-lm", _hf("AlbertConfig", "AlbertModel", **_TEXT, embedding_size=128, **_lm(256, 4, 4, 1024)), "tokens"),
    Spec("mistral", "decoder-lm", _hf("MistralConfig", "MistralModel", **_TEXT, **_lm(256, 4, 4, 688), num_key_value_heads=2), "tokens"),
    Spec("hubert", "audio", _hf("HubertConfig", "HubertModel", **_lm(256, 4, 4, 1024), conv_dim=[64] * 7), "audio"),
]  # fmt: skip


def _torchvision(name: str, small: dict[str, Any] | None = None) -> Callable[[bool], Any]:
    """A torchvision model by its builder's name (weights=None: random); at small dims, with
    `small` the class `VisionTransformer` itself, narrower (the builder fixes 224 x 224
    inputs). The CNNs take any image size."""

    def build(is_small: bool) -> Any:
        models = _torchvision_models()
        if is_small and small is not None:
            return models.VisionTransformer(**small).eval()
        return getattr(models, name)(weights=None).eval()

    return build


def _torchvision_models(required: bool = True) -> Any:
    """torchvision.models, loaded beside torch's CPU build: PyPI's torchvision is built for
    the CUDA torch, whose custom operators (nms, roi_align) it registers at import and cannot
    here; the models need none of them, so a registration that fails is skipped. (Loaded so
    before transformers first looks for torchvision, which would fail and take transformers'
    vision models with it.) None where torchvision is not installed and not `required`."""
    import importlib.util

    import torch.library

    if not required and importlib.util.find_spec("torchvision") is None:
        return None

    register = torch.library.register_fake

    def tolerant(op: Any, *args: Any, **kwargs: Any) -> Any:
        def decorate(fn: Any) -> Any:
            try:
                return register(op, *args, **kwargs)(fn)
            except RuntimeError:  # the operator's kernel library did not load
                return fn

        return decorate

    torch.library.register_fake = tolerant
    try:
        import torchvision.models
    finally:
        torch.library.register_fake = register
    return torchvision.models


TORCHVISION: list[Spec] = [
    Spec("tv_resnet18", "cnn", _torchvision("resnet18"), "image"),
    Spec("tv_resnet50", "cnn", _torchvision("resnet50"), "image"),
    Spec("tv_densenet121", "cnn", _torchvision("densenet121"), "image"),
    Spec("tv_regnet_y_400mf", "cnn", _torchvision("regnet_y_400mf"), "image"),
    Spec("tv_convnext_tiny", "cnn", _torchvision("convnext_tiny"), "image"),
    Spec("tv_squeezenet1_1", "mobile-cnn", _torchvision("squeezenet1_1"), "image"),
    Spec("tv_shufflenet_v2", "mobile-cnn", _torchvision("shufflenet_v2_x1_0"), "image"),
    Spec("tv_mobilenet_v2", "mobile-cnn", _torchvision("mobilenet_v2"), "image"),
    Spec("tv_mobilenet_v3_small", "mobile-cnn", _torchvision("mobilenet_v3_small"), "image"),
    Spec("tv_efficientnet_b0", "mobile-cnn", _torchvision("efficientnet_b0"), "image"),
    Spec(
        "tv_vit_b_16",
        "vit",
        _torchvision(
            "vit_b_16",
            small={
                "image_size": 64,
                "patch_size": 16,
                "num_layers": 2,
                "num_heads": 4,
                "hidden_dim": 128,
                "mlp_dim": 256,
            },
        ),
        "image",
    ),
    Spec("tv_swin_t", "vit", _torchvision("swin_t"), "image"),
]
"""The first study's torchvision architectures, at their published widths (a second
held-out set: other definitions of the suite's families)."""

SETS = {"suite": SUITE, "held-out": HELD_OUT, "torchvision": TORCHVISION}


# --- building, randomizing, exporting ------------------------------------------------------------


def randomize(model: Any, seed: int = 0) -> None:
    """Every parameter and floating buffer redrawn: weights N(0, 1/fan_in), vectors
    (biases, norm scales and shifts) around their role's value but never at it, so nothing
    folds away (a unit scale or a zero bias would)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in [*model.named_parameters(), *model.named_buffers()]:
            if not p.dtype.is_floating_point:
                continue
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            if p.dim() >= 2:
                fan_in = math.prod(p.shape[1:])
                p.copy_(noise / math.sqrt(fan_in))
            elif "var" in name:  # running variances stay positive
                p.copy_(0.5 + noise.abs() * 0.5)
            elif any(k in name for k in ("weight", "gamma", "scale")):
                p.copy_(1.0 + 0.1 * noise)
            else:
                p.copy_(0.1 * noise)


def example_inputs(spec: Spec, seq: int, small: bool, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if spec.inputs == "tokens":
        mask = np.ones((1, seq), np.int64)
        mask[0, seq - seq // 8 :] = 0  # right padding: the mask must matter
        return {
            "input_ids": rng.integers(0, 1000, (1, seq)).astype(np.int64),
            "attention_mask": mask,
        }
    if spec.inputs == "image":
        side = 64 if small else 224
        return {"pixel_values": rng.normal(size=(1, 3, side, side)).astype(np.float32)}
    if spec.inputs == "audio":
        return {"input_values": rng.normal(size=(1, 4000 if small else 16000)).astype(np.float32)}
    frames = 200 if small else 3000  # twice max_source_positions: 30 s of mel frames at full
    return {"input_features": rng.normal(size=(1, 80, frames)).astype(np.float32)}


class _Wrapped:
    """The model behind a forward of plain tensors returning its first output (the hidden
    states; a torchvision model's logits), as torch.onnx's exporter wants; a Whisper model
    runs its encoder."""

    @staticmethod
    def make(model: Any, names: list[str]) -> Any:
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *args: Any) -> Any:
                if not hasattr(self.model, "config"):  # torchvision: forward(x) -> logits
                    return self.model(*args)
                kwargs = dict(zip(names, args, strict=True))
                target = self.model.get_encoder() if hasattr(self.model, "get_encoder") and "input_features" in kwargs else self.model  # fmt: skip
                out = target(**kwargs)
                return out[0] if isinstance(out, tuple) else out.last_hidden_state

        return Wrapped().eval()


def export(
    spec: Spec, inputs: dict[str, np.ndarray], path: Path, small: bool, dynamic: bool = False
) -> Any:
    """Export the randomized model; `dynamic` names its batch and sequence dims symbolic
    ("batch", "sequence") as exports for serving do, for --dim to bind. The module exported
    (PyTorch's side of `--torch`)."""
    import torch

    model = spec.build(small)
    randomize(model)
    wrapped = _Wrapped.make(model, list(inputs))
    args = tuple(torch.from_numpy(a) for a in inputs.values())
    axes = {
        n: {0: "batch", 1: "sequence"} if spec.inputs == "tokens" else {0: "batch"} for n in inputs
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapped, args, str(path), input_names=list(inputs), output_names=["hidden"],
                          opset_version=17, dynamo=False, dynamic_axes=axes if dynamic else None)  # fmt: skip
    return wrapped


# --- checking and timing -------------------------------------------------------------------------


def onnxruntime_session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def check_model(
    spec: Spec, path: Path, inputs: dict[str, np.ndarray], backend: str = "cpu"
) -> dict:
    """Import, compile and compare with onnxruntime: the record's correctness fields."""
    import irkit
    from irkit.errors import IrkitError

    record: dict[str, Any] = {"model": spec.name, "family": spec.family}
    started = time.perf_counter()
    try:
        module = irkit.load(str(path))
        record["import_s"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        exe = irkit.compile(module, backend=backend)
        record["compile_s"] = round(time.perf_counter() - started, 3)
    except IrkitError as e:
        record.update(imported=False, error=str(e))
        return record
    (expected,) = onnxruntime_session(path, 1).run(None, inputs)
    (got,) = exe(*inputs.values())
    scale = float(np.linalg.norm(expected)) or 1.0
    record.update(
        imported=True,
        rel_error=float(np.linalg.norm(got.astype(np.float64) - expected) / scale),
        max_abs_error=float(np.max(np.abs(got.astype(np.float64) - expected))),
        kernels=len(exe.kernels),
    )
    record["matches"] = record["rel_error"] <= 1e-4
    record["_exe"] = exe
    return record


def time_against_onnxruntime(path: Path, inputs: dict[str, np.ndarray], threads: int,
                             rounds: int = 21, sample_s: float = 0.02,
                             torch_model: Any = None) -> dict:  # fmt: skip
    """irkit (compiled for `threads`: IRKIT_NUM_THREADS) and onnxruntime (`threads` intra-op,
    not spinning between runs, all graph optimizations) on the same inputs, timed interleaved
    in alternating order, each sample enough calls to last `sample_s`; with one thread the
    process is confined to one CPU. With `torch_model`, PyTorch eager as a third side (the
    module exported, `threads` intra-op threads, inference mode; its output checked against
    onnxruntime's first), the order rotating. The median of the per-round ratios (a peer's
    time over irkit's: above 1 irkit is faster) with a 95% bootstrap interval over rounds."""
    import os

    import onnxruntime as ort

    import irkit

    cpus = os.sched_getaffinity(0)
    os.environ["IRKIT_NUM_THREADS"] = str(threads)
    if threads == 1:
        os.sched_setaffinity(0, {min(cpus)})
    try:
        bound = irkit.compile(irkit.load(str(path)), backend="cpu").bind(*inputs.values())
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        sides = [bound.run_graph, lambda: session.run(None, inputs)]
        names = ["irkit", "ort"]
        if torch_model is not None:
            sides.append(_torch_side(torch_model, inputs, threads, session.run(None, inputs)[0]))
            names.append("torch")
        calls = [_calls_per_sample(f, sample_s) for f in sides]
        times: list[list[float]] = [[] for _ in sides]
        for r in range(rounds):
            order = list(range(len(sides)))
            order = order[r % len(order) :] + order[: r % len(order)]
            for k in order if r % 2 == 0 else order[::-1]:
                t = time.perf_counter()
                for _ in range(calls[k]):
                    sides[k]()
                times[k].append((time.perf_counter() - t) / calls[k])
    finally:
        os.environ.pop("IRKIT_NUM_THREADS", None)
        os.sched_setaffinity(0, cpus)
    ours = np.array(times[0])
    record = {f"irkit_ms_{threads}t": 1e3 * float(np.median(ours))}
    for name, theirs in zip(names[1:], times[1:], strict=True):
        ratios = np.array(theirs) / ours
        boot = np.random.default_rng(0).choice(ratios, (2000, len(ratios)))
        lo, hi = np.percentile(np.median(boot, axis=1), [2.5, 97.5])
        suffix = f"_{threads}t" if name == "ort" else f"_{name}_{threads}t"
        record.update({f"{name}_ms_{threads}t": 1e3 * float(np.median(theirs)),
                       f"speed_vs_{name}_{threads}t": float(np.median(ratios)),
                       f"speed_ci{suffix}": [float(lo), float(hi)]})  # fmt: skip
    return record


def _torch_side(
    model: Any, inputs: dict[str, np.ndarray], threads: int, expected: np.ndarray
) -> Callable[[], Any]:
    """PyTorch eager running `model` on `inputs` with `threads` threads, checked first."""
    import torch

    torch.set_num_threads(threads)
    args = tuple(torch.from_numpy(a) for a in inputs.values())

    def call() -> Any:
        with torch.inference_mode():
            return model(*args)

    got = call().numpy().astype(np.float64)
    rel = float(np.linalg.norm(got - expected) / (np.linalg.norm(expected) or 1.0))
    if rel > 1e-4:
        raise RuntimeError(f"PyTorch's output is {rel:.1e} off onnxruntime's: not timed")
    return call


def _calls_per_sample(f: Callable[[], Any], seconds: float) -> int:
    f()
    t = time.perf_counter()
    f()
    return max(1, int(seconds / max(time.perf_counter() - t, 1e-6)))


def gpu_path(path: Path, inputs: dict[str, np.ndarray]) -> dict:
    """Every kernel's CUDA C under default-cuda compiled by NVRTC (sm_90), and the program
    run on cuda-host against onnxruntime."""
    import irkit
    from irkit.runtime.gpu import build_kernels

    module = irkit.load(str(path))
    exe = irkit.compile(module, backend="cuda-host")
    (expected,) = onnxruntime_session(path, 1).run(None, inputs)
    (got,) = exe(*inputs.values())
    rel = float(
        np.linalg.norm(got.astype(np.float64) - expected) / (np.linalg.norm(expected) or 1.0)
    )
    kernels = build_kernels(exe.module, "sm_90")
    spills = sum(k.compiled.resources.spill_stores for k in kernels if k.compiled)
    return {"cuda_host_rel_error": rel, "cuda_host_matches": rel <= 1e-4, "nvrtc_kernels": len(kernels),
            "nvrtc_spill_stores": spills}  # fmt: skip


def _tile_pipeline(options: str) -> str:
    """default-cuda with gpu-tile-matmul{options}."""
    from irkit.pipelines import pipeline_steps

    steps = [s.spec for s in pipeline_steps("default-cuda")]
    tile = f"gpu-tile-matmul{{{options}}}"
    return ",".join(tile if s.startswith("gpu-tile-matmul") else s for s in steps)


HALF_VARIANTS = {
    "": "",
    "_wgmma": "wgmma=true",
    "_tma": "wgmma=true tma=true",
    "_persistent": "wgmma=true tma=true warp-specialize=true persistent=true",
}
"""The converted model's programs: default-cuda (mma.sync), and Hopper's steps (sm_90a):
wgmma on the cp.async ring, its tiles filled by TMA, warp-specialized over a persistent
grid."""


def gpu_half_path(path: Path, dtype: str, seed: int = 0) -> dict:
    """The model converted to `dtype`, on cuda-host under each of `HALF_VARIANTS`, each
    checked against the float64 reference of the converted model; the tensor-core (or TMA)
    instructions each program issues (counted in its IR), and NVRTC's spills (sm_80 and
    sm_90 for mma.sync, sm_90a for the others)."""
    import irkit
    from irkit.dialects.warp import MMA_OPS
    from irkit.dialects.warp_async import WgmmaOp
    from irkit.dialects.warp_tma import SetMaxNRegOp, TmaLoadOp
    from irkit.runtime.check import check
    from irkit.runtime.gpu import build_kernels

    module = irkit.load(str(path), dtype=dtype)
    record: dict[str, Any] = {}
    counted = {"": MMA_OPS, "_wgmma": (WgmmaOp,), "_tma": (TmaLoadOp,), "_persistent": (SetMaxNRegOp,)}  # fmt: skip
    for variant, options in HALF_VARIANTS.items():
        pipeline = _tile_pipeline(options) if options else "default-cuda"
        archs, ops = ("sm_80", "sm_90") if not options else ("sm_90",), counted[variant]
        exe = irkit.compile(module, pipeline, "cuda-host")
        checks, _ = check(exe, module, seed)
        key = f"{dtype}{variant}"
        spills = {}
        for arch in archs:
            kernels = build_kernels(exe.module, arch)
            spills[arch] = sum(k.compiled.resources.spill_stores for k in kernels if k.compiled)
        record |= {
            f"{key}_rel_error": max(c.rel_error for c in checks),
            f"{key}_tolerance": checks[0].tolerance,
            f"{key}_matches": all(c.passed for c in checks),
            f"{key}_tensor_ops": sum(isinstance(op, ops) for op in exe.module.walk()),
            f"{key}_spill_stores": spills,
        }
    return record


def run(args: argparse.Namespace) -> list[dict]:
    specs = SETS[args.set]
    if args.only:
        wanted = set(args.only.split(","))
        specs = [s for s in specs if s.name in wanted]
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.export_dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for spec in specs:
            inputs = example_inputs(spec, args.seq, args.small)
            path = folder / f"{spec.name}.onnx"
            try:
                torch_model = export(spec, inputs, path, args.small)
            except Exception as e:  # noqa: BLE001 - an exporter failure is recorded, not ours
                records.append({"model": spec.name, "family": spec.family, "exported": False, "error": f"{type(e).__name__}: {e}"[:300]})  # fmt: skip
                if args.out:
                    _append(args.out, records[-1])
                print(f"{spec.name:18s} export failed: {records[-1]['error']}", flush=True)
                continue
            record = check_model(spec, path, inputs)
            exe = record.pop("_exe", None)
            if exe is not None and args.speed:
                for threads in (1, 2):
                    peer = torch_model if args.torch else None
                    record.update(time_against_onnxruntime(path, inputs, threads, torch_model=peer))
            if exe is not None and args.gpu:
                record.update(gpu_path(path, inputs))
            for dtype in args.gpu_dtypes.split(",") if exe is not None and args.gpu_dtypes else ():
                record.update(gpu_half_path(path, dtype))
            for kind in args.quantize.split(",") if exe is not None and args.quantize else ():
                from quantized import quantized_path

                draw = lambda seed, spec=spec: example_inputs(spec, args.seq, args.small, seed)  # noqa: E731
                record.update(quantized_path(path, inputs, kind, draw))
            records.append(record)
            if args.out:
                _append(args.out, record)
            print(_line(record), flush=True)
            if args.export_dir and record.get("matches"):
                _add_job(args.export_dir / "jobs.jsonl", spec, path, args.strategy)
    return records


def _append(path: Path, record: dict) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def _add_job(jobs: Path, spec: Spec, path: Path, strategy: str) -> None:
    """A job for `irkit-bench suite --jobs`: attribute the default pipeline's passes."""
    with jobs.open("a") as f:
        f.write(
            json.dumps({"workload": spec.name, "model": path.name, "strategy": strategy}) + "\n"
        )


def _line(r: dict) -> str:
    if not r.get("imported"):
        return f"{r['model']:18s} {r['family']:11s} NOT IMPORTED: {r.get('error', '')[:160]}"
    gpu = ""
    if "cuda_host_rel_error" in r:
        verdict = "ok" if r["cuda_host_matches"] else "WRONG"
        gpu = f"  cuda-host {verdict} ({r['cuda_host_rel_error']:.1e}), NVRTC {r['nvrtc_kernels']} kernels"
    for kind in ("fp8", "int8"):
        if f"{kind}_cpu_rel_error" in r:
            ok = "ok" if r[f"{kind}_cpu_matches"] and r[f"{kind}_cuda-host_matches"] else "WRONG"
            gpu += (f"  {kind} {ok} (vs ort {r[f'{kind}_cpu_rel_error']:.1e}, "
                    f"{r[f'{kind}_cuda-host_rel_error']:.1e}; quantization error "
                    f"{r[f'{kind}_cpu_quantization_error']:.3f}, {r[f'{kind}_cuda-host_quantization_error']:.3f}, "
                    f"ort's {r[f'{kind}_ort_quantization_error']:.3f}; {r[f'{kind}_mma_f8']} 8-bit mma)")  # fmt: skip
        elif f"{kind}_error" in r:
            gpu += f"  {kind} FAILED: {r[f'{kind}_error'][:100]}"
    for dtype in ("f16", "bf16"):
        if f"{dtype}_matches" in r:
            keys = [f"{dtype}{v}" for v in HALF_VARIANTS if f"{dtype}{v}_matches" in r]
            ok = "ok" if all(r[f"{k}_matches"] for k in keys) else "WRONG"
            errors = ", ".join(f"{r[f'{k}_rel_error']:.1e}" for k in keys)
            gpu += f"  {dtype} {ok} ({errors})"
    speed = gpu + "".join(
        f"  {r[f'speed_vs_{p}_{t}t']:.2f}x {p} ({t}t)"
        for p in ("ort", "torch") for t in (1, 2) if f"speed_vs_{p}_{t}t" in r
    )  # fmt: skip
    return (f"{r['model']:18s} {r['family']:11s} {'ok   ' if r['matches'] else 'WRONG'} rel err {r['rel_error']:.1e}"
            f"  compile {r['compile_s']:.1f} s  {r['kernels']} kernels{speed}")  # fmt: skip


def run_header(args: argparse.Namespace) -> dict:
    """The run's record: the machine's and irkit's fingerprint, the peers' and the model
    libraries' versions, the dims and the protocol."""
    import onnxruntime
    import torch
    import transformers

    from irkit.measure.fingerprint import host_fingerprint

    return {
        "kind": "run", "set": args.set, "small": args.small, "seq": args.seq,
        "fingerprint": host_fingerprint(), "onnxruntime": onnxruntime.__version__,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "protocol": "torch.onnx (TorchScript exporter) opset 17; irkit default-cpu; onnxruntime "
                    "CPUExecutionProvider, all graph optimizations, intra-op threads = irkit's, "
                    "not spinning; 21 interleaved rounds, each sample >= 20 ms of calls; one "
                    "thread confined to one CPU; ratio = onnxruntime time / irkit time, median "
                    "over rounds, 95% bootstrap interval; with --torch, PyTorch eager (the module "
                    "exported, torch.inference_mode, set_num_threads = irkit's) a third side, the "
                    "order rotating each round",
        "torch_peer": bool(args.torch),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=sorted(SETS), default="suite")
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument(
        "--small", action="store_true", help="reduced dims (64 x 64 images, the --seq given)"
    )
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--no-speed", dest="speed", action="store_false")
    parser.add_argument("--gpu", action="store_true", help="NVRTC + cuda-host too")
    parser.add_argument(
        "--gpu-dtypes",
        default="",
        help="comma-separated f16,bf16: each model converted to each, run on cuda-host",
    )
    parser.add_argument(
        "--torch", action="store_true", help="PyTorch eager as a peer too (the module exported)"
    )
    parser.add_argument(
        "--quantize",
        default="",
        help="comma-separated fp8,int8: each model quantized by onnxruntime (QDQ), checked "
        "on cpu and cuda-host (benchmarks/quantized.py)",
    )
    parser.add_argument("--out", type=Path, help="append JSON lines here")
    parser.add_argument(
        "--export-dir",
        type=Path,
        help="keep the exported models here, with jobs.jsonl for irkit-bench suite --jobs",
    )
    parser.add_argument("--strategy", default="ablation", help="the jobs' attribution strategy")
    args = parser.parse_args(argv)
    # PyTorch's OpenMP threads sleep between its calls instead of spinning on the cores the
    # next side's sample needs (read when torch loads its OpenMP runtime: after this)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    header = run_header(args)
    if args.out:  # the header first, then each model's record as it is made: a run stopped
        _append(args.out, header)  # part way keeps the models it finished
    records = run(args)
    imported = [r for r in records if r.get("imported")]
    matched = [r for r in imported if r.get("matches")]
    print(
        f"{len(imported)} of {len(records)} imported, {len(matched)} match onnxruntime within 1e-4"
    )
    variants = [f"{t}{v}" for t in ("f16", "bf16") for v in HALF_VARIANTS]
    half = [r for r in imported for v in variants if r.get(f"{v}_matches") is False]
    if args.gpu_dtypes:
        print(f"{len(half)} (model, dtype) pairs wrong on cuda-host in {args.gpu_dtypes}")
    kinds = args.quantize.split(",") if args.quantize else []
    quantized = [r for r in imported for k in kinds for b in ("cpu", "cuda-host")
                 if not r.get(f"{k}_{b}_matches")]  # fmt: skip
    if kinds:
        print(f"{len(quantized)} (model, type, backend) triples failed or wrong in {args.quantize}")
    return 0 if len(matched) == len(records) and not half and not quantized else 1


if __name__ == "__main__":
    sys.exit(main())
