"""e5-small's encoder as TorchScript functions: the layers of a forward pass are one call into PyTorch.

Run op by op from Python, a pass makes ~170 PyTorch calls. Each gives Python's lock back while
it computes and must take it again to make the next call. While another thread runs Python (a
second user's turn, the lexical search beside the query), every call waits for that thread to
let the lock go: a query beside another thread's work then takes more than twice as long as
alone.

Scripted, the layers run in PyTorch's own interpreter without the lock: the same query takes
about as long beside another user's retrievals as alone (docs/benchmarks-journal.md, "The e5 pass
in one call"). The
arithmetic is the same operations in the same order, and the vectors are identical to the op-by-op
pass's (``tests/memory/test_e5_engine.py``).

PyTorch 2.13 marks TorchScript deprecated in favour of ``torch.compile`` / ``torch.export``, which
would need a C++ compiler on the user's machine and about a minute of compiling at each start.
The functions are plain PyTorch code: where a PyTorch cannot script them, they run as they are,
op by op, with a warning in the log.

Imported by ``e5_engine.E5Model`` when it loads; the functions compile at that import.
"""

from __future__ import annotations

import logging
import warnings
from typing import Callable, List, TypeVar

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

# a layer's tensors in the order ``encode`` reads them (``E5Model`` builds the lists)
LAYER_ORDER = ("qkv.w", "qkv.b", "ao.w", "ao.b", "aln.w", "aln.b", "fi.w", "fi.b", "fo.w", "fo.b", "oln.w", "oln.b")

_Fn = TypeVar("_Fn", bound=Callable)


def _scripted(fn: _Fn) -> _Fn:
    """``fn`` compiled by TorchScript, or ``fn`` itself where this PyTorch cannot script it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the deprecation above
            return torch.jit.script(fn)  # type: ignore[return-value]
    except Exception as exc:  # a PyTorch without TorchScript, or one that reads the code otherwise
        log.warning("e5's network runs op by op: TorchScript could not compile %s (%s)", fn.__name__, exc)
        return fn


def _encode(
    words: torch.Tensor,
    keep: torch.Tensor,
    positions: torch.Tensor,
    token_type: torch.Tensor,
    embedding_norm: List[torch.Tensor],
    layers: List[List[torch.Tensor]],
    heads: int,
    eps: float,
    dtype: torch.dtype,
) -> torch.Tensor:
    """The last layer's token states [batch, length, dim] of token embeddings ``words``
    [batch, length, dim] (float32), ``keep`` the mask of real tokens [batch, length]: position
    and type embeddings, their norm, then the post-norm layers. Linear layers in ``dtype``, the
    residual stream in float32. Padding positions hold garbage."""
    batch, length, dim = words.shape[0], words.shape[1], words.shape[2]
    head_dim = dim // heads
    x = words + positions[:length] + token_type
    x = F.layer_norm(x, [dim], embedding_norm[0], embedding_norm[1], eps)
    attend = keep.unsqueeze(1).unsqueeze(2)
    for w in layers:
        qkv = F.linear(x.to(dtype), w[0], w[1]).view(batch, length, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        ctx = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=attend)
        ctx = ctx.transpose(1, 2).reshape(batch, length, dim)
        x = F.layer_norm(x + F.linear(ctx, w[2], w[3]).float(), [dim], w[4], w[5], eps)
        mid = F.gelu(F.linear(x.to(dtype), w[6], w[7]))
        x = F.layer_norm(x + F.linear(mid, w[8], w[9]).float(), [dim], w[10], w[11], eps)
    return x


encode = _scripted(_encode)


def _mean_pooled(states: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The mean of each sequence's real tokens [batch, dim] of ``encode``'s ``states`` (not
    normalised), in float64."""
    weights = keep.to(states.dtype).unsqueeze(-1)
    return ((states * weights).sum(1) / weights.sum(1)).double()


mean_pooled = _scripted(_mean_pooled)
