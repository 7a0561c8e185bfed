"""Embedders by configuration: an OpenAI-compatible embeddings server (a real HTTP server on
127.0.0.1 that embeds with the packaged e5), and the lazy embedder of the commands that embed nothing."""

import json
import threading
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from memory.bank import MemoryBank
from memory.embedders import (
    _LAZY,
    LazyEmbedder,
    OpenAIEmbedder,
    create_embedder,
    embed_documents,
)
from memory.stores.sqlite import SqliteStores

D = datetime(2024, 5, 1, 12)


@pytest.fixture
def embeddings_server(e5_embedder):
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            vecs = e5_embedder.embed(texts, kind="document")
            out = {
                "object": "list",
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
                "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vecs)],
            }
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1", seen
    server.shutdown()


def test_openai_compatible_embeddings(tmp_path, embeddings_server, e5_embedder):
    url, seen = embeddings_server
    emb = OpenAIEmbedder("e5-small", dim=384, api_key="test-key", base_url=url)
    vec = embed_documents(emb, ["I adopted a cat named Miso"])[0]
    assert vec.shape == (384,) and np.isclose(np.linalg.norm(vec), 1.0)
    bank = MemoryBank(SqliteStores(tmp_path), emb)
    cat = bank.add_turn("amy", "I adopted a cat named Miso", "Lovely!", D)
    bank.add_turn("amy", "I work night shifts", "Tiring.", D)
    assert bank.retrieve("amy", "my pet's name", D + timedelta(hours=1), k=1)[0].record.id == cat.id
    assert seen and all(b["model"] == "e5-small" for b in seen)
    bank.close()


def test_an_unknown_embedder_is_named_in_the_error():
    with pytest.raises(ValueError, match="unknown embedder 'word2vec'"):
        create_embedder("word2vec")


def test_a_lazy_embedder_loads_on_its_first_text_as_the_real_one(tmp_path, e5_embedder):
    """Commands that list, export or forget open the bank with ``lazy_embedder``: its id and
    dimension, known before loading, must be the real model's, or the stored vectors would be
    thought foreign and redone."""
    for spec, cls in _LAZY.items():
        real = create_embedder(spec)
        assert (real.id, real.dim) == (cls.ID_FORMAT.format("original"), cls.DIM)
    lazy = LazyEmbedder("e5", e5_embedder.id, e5_embedder.dim)
    bank = MemoryBank(SqliteStores(tmp_path / "home"), lazy)
    when = datetime(2023, 5, 1, 9)
    bank.add_turn("Amy", "I adopted a cat named Miso", "Lovely!", when)
    bank.settle()
    assert lazy.loaded
    found = bank.retrieve("Amy", "what is my cat called?", when + timedelta(days=1), k=1)
    assert "Miso" in found[0].record.query
    bank.close()
    # a bank opened lazily on a stored home reads, lists and archives without loading the model
    quiet = LazyEmbedder("e5", e5_embedder.id, e5_embedder.dim)
    bank = MemoryBank(SqliteStores(tmp_path / "home"), quiet)
    assert [r.query for r in bank.records("Amy")] == ["I adopted a cat named Miso"]
    bank.forget_pass("Amy", when + timedelta(days=400))
    bank.close()
    assert not quiet.loaded
    with pytest.raises(ValueError, match="not"):
        LazyEmbedder("e5", "e5-small:other", 384).embed(["hello"], kind="query")
