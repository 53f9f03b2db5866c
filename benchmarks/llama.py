"""Llama decoder blocks on the CPU (issue 65): a prefill over a prompt and one decode step
against a key/value cache, irkit against onnxruntime on the same ONNX export of
transformers' LlamaDecoderLayer, every output checked first; the `examples/llama_block`
and `llama_decode` programs checked against the same layer; decode beside its memory
roofline.

    python benchmarks/llama.py [--seq 512] [--cache 2048] [--threads 1,2] [--dim D=...]
                               [--out FILE]

The layer has random weights (its norms' too) at the examples' configuration unless --dim
says otherwise (D, H, HK, HD, F as in the examples; Llama-3-8B's layer: D=4096 H=32 HK=8
HD=128 F=14336). Prefill: `layer(x, position_embeddings=(cos, sin))` over S positions,
exported by torch.onnx (TorchScript exporter, opset 17; transformers' eager attention, the
causal mask the model would build given as a constant). Decode: the layer's own modules and transformers' `apply_rotary_pos_emb` and
`repeat_kv` on one position with the cache concatenated (checked against the layer run with
a `DynamicCache` holding the same cache), returning the block's output and the new
position's keys and values. Timing is `real_models.py`'s protocol (interleaved rounds, the
order alternating, ratio = onnxruntime's time / irkit's with a 95% bootstrap interval; one
thread confines the process to one CPU). The decode roofline: the bytes a step must read
(every weight once, the cache once) over the bandwidth of the level they fit in
(`irkit.runtime.ceilings`, measured on this machine), against the step's time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads its OpenMP runtime

ROOT = Path(__file__).resolve().parent.parent
DIMS = {"B": 1, "D": 256, "H": 8, "HK": 2, "HD": 32, "F": 512}
"""The examples' configuration (their `dim` defaults), the sequence lengths aside."""

WEIGHTS = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")


def layer(dims: dict[str, int], seed: int = 0) -> Any:
    """transformers' LlamaDecoderLayer at `dims`, random weights (norms around 1)."""
    from real_models import _torchvision_models

    _torchvision_models(required=False)  # before transformers looks for torchvision
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    config = LlamaConfig(
        hidden_size=dims["D"], num_attention_heads=dims["H"], num_key_value_heads=dims["HK"],
        head_dim=dims["HD"], intermediate_size=dims["F"], rms_norm_eps=1e-6,
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(seed)
    block = LlamaDecoderLayer(config, layer_idx=0).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.05)
        for norm in (block.input_layernorm, block.post_attention_layernorm):
            norm.weight.normal_(1.0, 0.1)
    return block


def weights(block: Any) -> list[np.ndarray]:
    """The layer's weights as the examples' params, in their order."""
    a, m = block.self_attn, block.mlp
    mats = [block.input_layernorm.weight, a.q_proj.weight.T, a.k_proj.weight.T,
            a.v_proj.weight.T, a.o_proj.weight.T, block.post_attention_layernorm.weight,
            m.gate_proj.weight.T, m.up_proj.weight.T, m.down_proj.weight.T]  # fmt: skip
    return [np.ascontiguousarray(w.detach().numpy(), dtype=np.float32) for w in mats]


def rotary(block: Any, positions: range, dims: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """The rotary tables (cos, sin) [len(positions), HD] at `positions`, transformers'."""
    import torch
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    emb = LlamaRotaryEmbedding(block.self_attn.config)
    x = torch.zeros(1, len(positions), dims["D"])
    cos, sin = emb(x, torch.tensor([list(positions)]))
    return cos[0].numpy(), sin[0].numpy()


class _Decode:
    """One decode step as a module (built on first use: torch imported lazily)."""

    @staticmethod
    def of(block: Any) -> Any:
        import torch
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

        class Decode(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.block = block

            def forward(self, x: Any, cos: Any, sin: Any, past_k: Any, past_v: Any) -> Any:
                a = self.block.self_attn
                h = self.block.input_layernorm(x)
                shape = (*x.shape[:-1], -1, a.head_dim)
                q = a.q_proj(h).view(shape).transpose(1, 2)
                k = a.k_proj(h).view(shape).transpose(1, 2)
                v = a.v_proj(h).view(shape).transpose(1, 2)
                q, k = apply_rotary_pos_emb(q, k, cos[None], sin[None])
                group = a.num_key_value_groups
                keys = repeat_kv(torch.cat([past_k, k], dim=2), group)
                values = repeat_kv(torch.cat([past_v, v], dim=2), group)
                o = torch.nn.functional.scaled_dot_product_attention(
                    q, keys, values, scale=a.scaling
                )
                x1 = x + a.o_proj(o.transpose(1, 2).reshape(*x.shape[:-1], -1))
                y = x1 + self.block.mlp(self.block.post_attention_layernorm(x1))
                return y, k, v

        return Decode().eval()


def _export(model: Any, inputs: dict[str, np.ndarray], outputs: list[str], path: Path) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        args = tuple(torch.from_numpy(a) for a in inputs.values())
        torch.onnx.export(model, args, str(path), input_names=list(inputs),
                          output_names=outputs, opset_version=17, dynamo=False)  # fmt: skip


def _torch_run(model: Any, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    import torch

    with torch.inference_mode():
        out = model(*(torch.from_numpy(a) for a in inputs.values()))
    out = out if isinstance(out, tuple) else (out,)
    return [o.numpy() for o in out]


def _close(name: str, got: list[np.ndarray], want: list[np.ndarray], tol: float = 1e-4) -> float:
    worst = max(
        float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) + 1e-30))
        for g, w in zip(got, want, strict=True)
    )
    if not worst <= tol:
        raise SystemExit(f"llama.py: {name}: relative error {worst:.2e} > {tol:g}")
    return worst


def prefill(dims: dict[str, int], seq: int, threads: list[int], folder: Path) -> dict:
    import torch
    from real_models import time_against_onnxruntime

    import irkit

    block = layer(dims)
    cos, sin = rotary(block, range(seq), dims)
    x = np.random.default_rng(1).standard_normal((dims["B"], seq, dims["D"])).astype(np.float32)
    inputs = {"x": x, "cos": cos, "sin": sin}

    class Prefill(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = block

        def forward(self, x: Any, cos: Any, sin: Any) -> Any:
            causal = torch.full((seq, seq), float("-inf")).triu(1)[None, None]
            out = self.block(x, attention_mask=causal, position_embeddings=(cos[None], sin[None]))
            return out[0] if isinstance(out, tuple) else out

    model = Prefill().eval()
    want = _torch_run(model, inputs)
    example = irkit.load(ROOT / "examples" / "llama_block.graph", {**dims, "S": seq})
    got = irkit.compile(example, backend="cpu")(*inputs.values(), *weights(block))
    record = {"block": "prefill", "seq": seq, **dims,
              "example_rel_err": _close("llama_block vs transformers", list(got), want)}  # fmt: skip
    path = folder / f"llama_prefill_{seq}.onnx"
    _export(model, inputs, ["y"], path)
    onnx_got = irkit.compile(irkit.load(str(path)), backend="cpu")(*inputs.values())
    record["onnx_rel_err"] = _close("the export in irkit vs transformers", list(onnx_got), want)
    for t in threads:
        record.update(time_against_onnxruntime(path, inputs, t))
    return record


def decode(dims: dict[str, int], cache: int, threads: list[int], folder: Path) -> dict:
    import torch
    from real_models import time_against_onnxruntime
    from transformers import DynamicCache

    import irkit
    from irkit.runtime.ceilings import cpu_ceilings

    block = layer(dims)
    cos, sin = rotary(block, range(cache, cache + 1), dims)
    rng = np.random.default_rng(2)
    kv = (dims["B"], dims["HK"], cache, dims["HD"])
    inputs = {
        "x": rng.standard_normal((dims["B"], 1, dims["D"])).astype(np.float32),
        "cos": cos, "sin": sin,
        "past_k": rng.standard_normal(kv).astype(np.float32),
        "past_v": rng.standard_normal(kv).astype(np.float32),
    }  # fmt: skip
    model = _Decode.of(block)
    want = _torch_run(model, inputs)
    # the module is the layer with a cache: the layer's own step on a DynamicCache agrees
    past = DynamicCache()
    past.update(torch.from_numpy(inputs["past_k"]), torch.from_numpy(inputs["past_v"]), 0)
    with torch.inference_mode():
        own = block(torch.from_numpy(inputs["x"]), cache=past,
                    position_embeddings=(torch.from_numpy(cos)[None], torch.from_numpy(sin)[None]))  # fmt: skip
    own = own[0] if isinstance(own, tuple) else own
    record = {"block": "decode", "cache": cache, **dims,
              "module_rel_err": _close("decode module vs the layer with a cache", [own.numpy()], want[:1])}  # fmt: skip
    example = irkit.load(ROOT / "examples" / "llama_decode.graph", {**dims, "L": cache})
    got = irkit.compile(example, backend="cpu")(*inputs.values(), *weights(block))
    names = ["y", "new_k", "new_v"]  # the example's outputs, in its order
    record["example_rel_err"] = _close("llama_decode vs transformers", list(got), want)
    path = folder / f"llama_decode_{cache}.onnx"
    _export(model, inputs, names, path)
    onnx_got = irkit.compile(irkit.load(str(path)), backend="cpu")(*inputs.values())
    record["onnx_rel_err"] = _close("the export in irkit vs transformers", list(onnx_got), want)
    read = sum(w.nbytes for w in weights(block)) + 2 * inputs["past_k"].nbytes
    ceilings = cpu_ceilings()
    for t in threads:
        record.update(time_against_onnxruntime(path, inputs, t))
        level, bandwidth = ceilings.memory_roof(read, t)
        roof_ms = 1e3 * read / bandwidth
        record.update({f"roofline_ms_{t}t": roof_ms, f"roofline_level_{t}t": level,
                       f"of_roofline_{t}t": record[f"irkit_ms_{t}t"] / roof_ms})  # fmt: skip
    record["bytes_read"] = read
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--cache", type=int, default=2048)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--only", choices=("prefill", "decode"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    dims = dict(DIMS)
    for item in args.dim:
        name, _, value = item.partition("=")
        if name not in dims or not value.isdigit():
            parser.error(f"--dim {item}: expected one of {', '.join(dims)} = a positive integer")
        dims[name] = int(value)
    threads = [int(t) for t in args.threads.split(",")]
    from irkit.measure.fingerprint import host_fingerprint

    header = {"kind": "run", "benchmark": "llama", "fingerprint": host_fingerprint()}
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "prefill"):
            r = prefill(dims, args.seq, threads, Path(tmp))
            records.append(r)
            for t in threads:
                print(f"prefill S={args.seq:5d} {t} thread{'s' if t > 1 else ' '} irkit "
                      f"{r[f'irkit_ms_{t}t']:8.2f} ms  {r[f'speed_vs_ort_{t}t']:.2f}x onnxruntime "
                      f"[{r[f'speed_ci_{t}t'][0]:.2f}, {r[f'speed_ci_{t}t'][1]:.2f}]", flush=True)  # fmt: skip
        if args.only in (None, "decode"):
            r = decode(dims, args.cache, threads, Path(tmp))
            records.append(r)
            for t in threads:
                print(f"decode  L={args.cache:5d} {t} thread{'s' if t > 1 else ' '} irkit "
                      f"{r[f'irkit_ms_{t}t']:8.3f} ms  {r[f'speed_vs_ort_{t}t']:.2f}x onnxruntime "
                      f"[{r[f'speed_ci_{t}t'][0]:.2f}, {r[f'speed_ci_{t}t'][1]:.2f}]  "
                      f"roofline {r[f'roofline_ms_{t}t']:.3f} ms ({r[f'roofline_level_{t}t']}, "
                      f"{r['bytes_read'] / 2**20:.1f} MiB): {r[f'of_roofline_{t}t']:.2f}x it", flush=True)  # fmt: skip
    if args.out:
        from irkit.measure.records import append_record

        for r in [header, *records]:
            append_record(args.out, r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
