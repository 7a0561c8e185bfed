"""The training loss: logits only at the counsellor's positions, in chunks, equal to the plain
full-vocabulary loss, gradients included."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from finetune.masking import IGNORE_INDEX  # noqa: E402
from finetune.trainer import masked_loss_sum  # noqa: E402


def tiny_model():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        pad_token_id=0,
        tie_word_embeddings=True,
    )
    return transformers.LlamaForCausalLM(config)


def plain_loss(model, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
    target = batch["labels"][:, 1:]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )


def test_chunked_loss_equals_the_full_logits_loss():
    model = tiny_model()
    ids = torch.randint(1, 300, (2, 20))
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 5:12], labels[1, 14:19] = ids[0, 5:12], ids[1, 14:19]
    mask = torch.ones_like(ids)
    mask[1, 19:] = 0
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}

    want = plain_loss(model, batch)
    want.backward()
    want_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    got, count = masked_loss_sum(model, batch, chunk_tokens=3)  # several chunks
    got.backward()
    assert count == 7 + 5
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
    for p, g in zip(model.parameters(), want_grads):
        assert torch.allclose(p.grad, g, rtol=1e-4, atol=1e-6)


def test_no_grad_evaluation_gives_the_same_loss():
    model = tiny_model()
    ids = torch.randint(1, 300, (1, 16))
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 8:] = ids[0, 8:]
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    with torch.no_grad():
        got, _ = masked_loss_sum(model, batch, chunk_tokens=4)
        want = plain_loss(model, batch)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
