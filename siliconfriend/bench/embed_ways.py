"""Faster ways to embed an import's texts, weighed against the e5 engine as it is.

An import is nearly all e5 passes, so a faster import needs fewer operations per character. Each
way here embeds the same texts as the import does (messages on the query side, replies as
passages, chunked as ``embed_turns`` / ``embed_replies`` chunk them), alternating with the engine
in one process, and is judged on two things: characters per second over the engine's, and the
vectors' cosine to the float32 engine's (the bound is 0.995 for every text). A way is only worth
keeping if it meets both; the bench keeps them all measurable so that a CPU with other features
(no bfloat16, or no AMX) can be weighed again with the same command.

- ``int8``: the linear layers with 8-bit weights (one scale per output row) and activations
  quantized per tensor at run time: what ``torch.ao.quantization.quantize_dynamic`` makes of a
  ``Linear``, on the oneDNN engine (which has AMX / VNNI kernels).
- ``first-N``: a text's first N tokens only (of its first chunk): a long reply loses its tail.
"""

from __future__ import annotations

import copy
import os
import time
import warnings
from typing import Callable, Sequence

import numpy as np

from memory.e5_engine import E5Model, padded
from memory.embedders import chunk_text, embed_replies, embed_turns

WAYS = ("int8", "first-128", "first-256")
FIDELITY = 0.995  # the least cosine to the float32 vectors a way must keep, for every text


class _ModelEmbedder:
    """An ``Embedder`` over one E5Model (the engine, or a way's copy of it). ``first_chunk``: a
    text is cut to its first chunk before it is chunked (the first-N ways cut whole texts, not
    each of a long text's chunks)."""

    def __init__(self, model: E5Model, workers: int, *, first_chunk: bool = False):
        self.model, self.workers, self.first_chunk = model, workers, first_chunk
        self.id, self.dim = "e5-small:way", model.dim

    def embed(self, texts: Sequence[str], *, kind: str) -> np.ndarray:
        return self.model.embed(list(texts), kind == "query", workers=self.workers)

    def prepare(self, texts: list[str]) -> list[str]:
        return [chunk_text(t)[0] for t in texts] if self.first_chunk else texts


def int8_model(model: E5Model) -> E5Model:
    """A copy of ``model`` whose linear layers run in int8 (dynamic, per-tensor activations)."""
    torch = model.torch
    if "onednn" not in torch.backends.quantized.supported_engines:
        raise RuntimeError("this PyTorch has no oneDNN quantized engine")
    torch.backends.quantized.engine = "onednn"
    packed = []
    for w in model._weights:
        layer = {}
        for name in ("qkv", "ao", "fi", "fo"):
            weight = w[f"{name}.w"].float()
            scale = weight.abs().amax(1).clamp_min(1e-12) / 127
            zero = torch.zeros(weight.shape[0], dtype=torch.long)
            with warnings.catch_warnings():  # PyTorch deprecates its quantized tensors (ao's path)
                warnings.simplefilter("ignore", UserWarning)
                q = torch.quantize_per_channel(weight, scale.double(), zero, 0, torch.qint8)
            layer[name] = torch.ops.quantized.linear_prepack(q, w[f"{name}.b"].float())
        packed.append(layer)
    way = copy.copy(model)
    way._forward = lambda sequences: _int8_forward(model, packed, sequences)  # type: ignore[method-assign]
    return way


def _int8_forward(model: E5Model, packed: list[dict], sequences: list[list[int]]) -> np.ndarray:
    """``E5Model._forward`` with the quantized linear layers (float32 in and out)."""
    torch, F = model.torch, model.torch.nn.functional
    ids, mask = padded(sequences)
    batch, length = ids.shape
    keep = torch.from_numpy(mask)
    heads, dim = model.heads, model.dim
    linear = torch.ops.quantized.linear_dynamic
    with torch.inference_mode():
        x = model._embed_tokens(ids) + model._pos[:length] + model._type
        x = F.layer_norm(x, (dim,), *model._ln, eps=model.eps)
        attend = keep[:, None, None, :]
        for w, p in zip(model._weights, packed):
            qkv = linear(x, p["qkv"]).to(model.dtype).view(batch, length, 3, heads, dim // heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=attend)
            ctx = ctx.transpose(1, 2).reshape(batch, length, dim).float()
            x = F.layer_norm(x + linear(ctx, p["ao"]), (dim,), w["aln.w"], w["aln.b"], eps=model.eps)
            mid = F.gelu(linear(x, p["fi"]))
            x = F.layer_norm(x + linear(mid, p["fo"]), (dim,), w["oln.w"], w["oln.b"], eps=model.eps)
        weights = keep.to(x.dtype)[..., None]
        pooled = (x * weights).sum(1) / weights.sum(1)
    return pooled.double().numpy()


def first_tokens_model(model: E5Model, tokens: int) -> E5Model:
    """A copy of ``model`` that embeds only a text's first ``tokens`` content tokens."""
    way = copy.copy(model)

    def windows(text: str, is_query: bool) -> list[list[int]]:
        first = model.windows(text, is_query)[0]
        return [first if len(first) <= tokens + 2 else [*first[: tokens + 1], first[-1]]]

    way.windows = windows  # type: ignore[method-assign]
    return way


def way_model(model: E5Model, way: str) -> E5Model:
    if way == "int8":
        return int8_model(model)
    if way.startswith("first-"):
        return first_tokens_model(model, int(way.split("-", 1)[1]))
    raise ValueError(f"unknown way {way!r} (one of {', '.join(WAYS)})")


def _embed_import(embedder: _ModelEmbedder, messages: list[str], replies: list[str]) -> np.ndarray:
    """The vectors an import makes of these texts: messages as turns, replies as passages."""
    messages, replies = embedder.prepare(messages), embedder.prepare(replies)
    return np.concatenate([embed_turns(embedder, messages), embed_replies(embedder, replies)])


def weigh_ways(
    model: E5Model,
    messages: list[str],
    replies: list[str],
    *,
    ways: Sequence[str] = WAYS,
    rounds: int = 2,
    workers: int | None = None,
    reference: Callable[[], np.ndarray] | None = None,
) -> dict:
    """Each way against the engine as it is (``model``), alternating ``rounds`` times in this
    process on ``workers`` batch workers (the import's default: one per core): characters per
    second each, their ratio to the engine's, and the vectors' cosine to the float32 engine's."""
    workers = workers or (os.cpu_count() or 1)
    chars = sum(map(len, messages)) + sum(map(len, replies))
    embedders = {"engine": _ModelEmbedder(model, workers)}
    embedders.update(
        {way: _ModelEmbedder(way_model(model, way), workers, first_chunk=way.startswith("first-")) for way in ways}
    )
    seconds: dict[str, list[float]] = {name: [] for name in embedders}
    vectors: dict[str, np.ndarray] = {}
    load = [round(os.getloadavg()[0], 2)]
    for _ in range(rounds):
        for name, embedder in embedders.items():
            start = time.perf_counter()
            vectors[name] = _embed_import(embedder, messages, replies)
            seconds[name].append(round(time.perf_counter() - start, 3))
    load.append(round(os.getloadavg()[0], 2))
    if reference is None:
        f32 = _ModelEmbedder(E5Model(model.path, dtype="float32"), workers)
        expected = _embed_import(f32, messages, replies)
    else:
        expected = reference()
    engine_s = sum(seconds["engine"])
    result: dict = {"chars": chars, "texts": len(messages) + len(replies), "workers": workers, "load_avg_1m": load}
    for name, vecs in vectors.items():
        cos = (vecs * expected).sum(axis=1)
        result[name] = {
            "seconds": seconds[name],
            "chars_per_s": round(chars * rounds / sum(seconds[name])),
            "speedup_per_char": round(engine_s / sum(seconds[name]), 2),
            "cosine_to_float32": {"min": round(float(cos.min()), 5), "mean": round(float(cos.mean()), 5)},
            "meets_fidelity": bool(cos.min() >= FIDELITY),
        }
    return result
