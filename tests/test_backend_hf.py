"""The local transformers backend: the real packaged SmolLM2, and each preset's code path on tiny
random models built from their config classes with the SmolLM2 tokenizer (offline, no download)."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from safetensors import safe_open

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from siliconfriend.backends.base import BackendError, BackendModelNotFound, ChatBackend, Message, Sampling, join_stream
from siliconfriend.backends.hf.chat import HFLocalChat, _until_stop, load_causal_lm
from siliconfriend.backends.hf.loader import (
    PRESETS,
    _load_source,
    gguf_plain_folder,
    needs_remote_code,
    pick_device,
    pick_dtype,
    resolve_preset,
    smollm2_gguf_path,
)

MESSAGES = [Message("system", "You are a warm companion."), Message("user", "Hi, I am Ann.")]

TINY = dict(
    vocab_size=49152,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=1024,
    pad_token_id=2,
    bos_token_id=1,
    eos_token_id=2,
    tie_word_embeddings=True,
)

LEGACY_CONFIG = (
    "from transformers import LlamaConfig\n\nclass ChatGLMConfig(LlamaConfig):\n    model_type = 'chatglm'\n"
)
LEGACY_MODEL = (
    "from transformers import LlamaForCausalLM\nfrom .configuration_chatglm import ChatGLMConfig\n\n"
    "class ChatGLMForConditionalGeneration(LlamaForCausalLM):\n    config_class = ChatGLMConfig\n"
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Folders with tiny random GLM / LLaMA / Qwen2 models and the SmolLM2 tokenizer."""
    root = tmp_path_factory.mktemp("tiny_models")
    gguf = smollm2_gguf_path()
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    kinds = {
        "glm": (transformers.GlmConfig, transformers.GlmForCausalLM, {}),
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, {}),
        "qwen": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, {"hidden_size": 48, "head_dim": 12}),
        "legacy_chatglm": (transformers.LlamaConfig, transformers.LlamaForCausalLM, {}),
        "no_template": (transformers.LlamaConfig, transformers.LlamaForCausalLM, {}),
    }
    folders = {}
    for name, (config_cls, model_cls, extra) in kinds.items():
        torch.manual_seed(0)
        folder = root / name
        model_cls(config_cls(**dict(TINY, **extra))).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders[name] = folder
    for name in ("legacy_chatglm", "no_template"):
        (folders[name] / "chat_template.jinja").unlink()
    # the original ChatGLM-6B layout: model_type "chatglm", code in the folder, only AutoModel mapped
    legacy = folders["legacy_chatglm"]
    config = json.loads((legacy / "config.json").read_text())
    config.update(
        model_type="chatglm",
        architectures=["ChatGLMForConditionalGeneration"],
        auto_map={
            "AutoConfig": "configuration_chatglm.ChatGLMConfig",
            "AutoModel": "modeling_chatglm.ChatGLMForConditionalGeneration",
        },
    )
    (legacy / "config.json").write_text(json.dumps(config))
    (legacy / "configuration_chatglm.py").write_text(LEGACY_CONFIG)
    (legacy / "modeling_chatglm.py").write_text(LEGACY_MODEL)
    return folders


def tiny_chat(folder, preset, **kw):
    return HFLocalChat(str(folder), preset=preset, max_new_tokens=4, temperature=0, **kw)


# ---------------------------------------------------------------- presets on tiny models (fast)
def test_chatglm_preset_uses_native_glm_classes(tiny):
    backend = tiny_chat(tiny["glm"], "chatglm")
    assert isinstance(backend, ChatBackend)
    assert type(backend.hf_model).__name__ == "GlmForCausalLM"
    assert backend.context_tokens == 1024
    assert backend.render(MESSAGES).endswith("<|im_start|>assistant\n")
    assert isinstance(join_stream(backend.stream(MESSAGES)), str)


def test_chatglm_legacy_remote_code_with_its_prompt_format(tiny):
    assert needs_remote_code(str(tiny["legacy_chatglm"]))
    backend = tiny_chat(tiny["legacy_chatglm"], "chatglm")
    assert type(backend.hf_model).__name__ == "ChatGLMForConditionalGeneration"
    history = MESSAGES + [Message("assistant", "Hello Ann!"), Message("user", "How are you?")]
    assert backend.render(history) == (
        "You are a warm companion.\n\n[Round 1]\n\n问：Hi, I am Ann.\n\n"
        "答：Hello Ann!\n\n[Round 2]\n\n问：How are you?\n\n答："
    )
    assert isinstance(join_stream(backend.stream(MESSAGES)), str)


def test_belle_preset_on_llama_with_human_assistant_prompt(tiny):
    backend = tiny_chat(tiny["llama"], "belle")
    assert type(backend.hf_model).__name__ == "LlamaForCausalLM"
    assert backend.render(MESSAGES) == "You are a warm companion.\n\nHuman: Hi, I am Ann.\n\nAssistant: "
    assert "Human:" in backend.stop
    assert isinstance(join_stream(backend.stream(MESSAGES)), str)


def test_qwen_preset_on_qwen2(tiny):
    backend = tiny_chat(tiny["qwen"], "qwen", context_tokens=512)
    assert type(backend.hf_model).__name__ == "Qwen2ForCausalLM"
    assert backend.context_tokens == 512
    assert backend.generation["top_p"] == PRESETS["qwen"]["generation"]["top_p"]
    assert backend.generation["temperature"] == 0
    tokens = backend.tokenizer.encode(join_stream(backend.stream(MESSAGES, max_tokens=3)), add_special_tokens=False)
    assert len(tokens) <= 3


def test_sampling_options_reach_generate(tiny):
    backend = HFLocalChat(str(tiny["llama"]), max_new_tokens=3, temperature=0.9, top_k=5, top_p=0.5)
    assert backend._sampling() == {"do_sample": True, "temperature": 0.9, "top_p": 0.5, "top_k": 5}
    assert isinstance(join_stream(backend.stream(MESSAGES)), str)


def test_lora_adapter_is_loaded_and_checked(tiny, tmp_path):
    peft = pytest.importorskip("peft")
    base = transformers.AutoModelForCausalLM.from_pretrained(tiny["llama"])
    config = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    peft.get_peft_model(base, config).save_pretrained(tmp_path / "adapter")

    backend = tiny_chat(tiny["llama"], "belle", adapter=tmp_path / "adapter")
    assert isinstance(backend.hf_model, peft.PeftModel)
    assert isinstance(join_stream(backend.stream(MESSAGES)), str)

    with pytest.raises(BackendError, match="hidden size"):  # trained for a 32-wide model, qwen is 48
        tiny_chat(tiny["qwen"], "qwen", adapter=tmp_path / "adapter")
    with pytest.raises(BackendModelNotFound, match="adapter"):
        tiny_chat(tiny["llama"], "belle", adapter=tmp_path / "missing")


def test_the_companion_opens_with_the_system_prompt_the_adapter_was_trained_with(tiny, tmp_path, e5_embedder):
    peft = pytest.importorskip("peft")
    from finetune.persona import COUNSELLOR_SYSTEM_PROMPT_EN, COUNSELLOR_SYSTEM_PROMPT_ZH
    from memory.bank import MemoryBank
    from memory.stores.sqlite import SqliteStores
    from siliconfriend.backends.hf.adapter_meta import base_identity, write_adapter_meta
    from siliconfriend.config import Settings
    from siliconfriend.core.companion import Companion

    base = transformers.AutoModelForCausalLM.from_pretrained(tiny["llama"])
    config = peft.LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    peft.get_peft_model(base, config).save_pretrained(tmp_path / "adapter")
    write_adapter_meta(
        tmp_path / "adapter",
        base=base_identity(base),
        metrics={},
        training={"system_prompts_used": {COUNSELLOR_SYSTEM_PROMPT_ZH: 40, COUNSELLOR_SYSTEM_PROMPT_EN: 2}},
        system_prompt=COUNSELLOR_SYSTEM_PROMPT_ZH,
    )
    tuned = tiny_chat(tiny["llama"], "belle", adapter=tmp_path / "adapter")
    assert tuned.system_prompts == {"zh": COUNSELLOR_SYSTEM_PROMPT_ZH, "en": COUNSELLOR_SYSTEM_PROMPT_EN}
    plain = tiny_chat(tiny["llama"], "belle")
    assert plain.system_prompts == {}

    bank = MemoryBank(SqliteStores(tmp_path / "home"), e5_embedder)
    try:
        companion = Companion(bank, tuned, settings=Settings(home=tmp_path / "home", max_new_tokens=2))
        for lang, prompt in (("zh", COUNSELLOR_SYSTEM_PROMPT_ZH), ("en", COUNSELLOR_SYSTEM_PROMPT_EN)):
            system = companion.respond("Ann", "I had a hard day.", lang=lang).collect().messages[0]
            assert system.role == "system" and system.content.startswith(prompt + "\n")
        system = companion.respond("Ann", "Hello again", lang="en", backend=plain).collect().messages[0]
        assert not system.content.startswith(COUNSELLOR_SYSTEM_PROMPT_EN)
        assert system.content.startswith("You are ")
    finally:
        bank.close()


def test_load_causal_lm_for_reuse(tiny):
    model, tokenizer, resolved = load_causal_lm(str(tiny["qwen"]), preset="qwen")
    assert resolved == str(tiny["qwen"])
    assert not model.training and model.dtype == pick_dtype(pick_device())  # bf16 on a GPU, fp32 on CPU
    assert tokenizer.pad_token_id == 2


def test_model_without_chat_template_is_refused(tiny):
    with pytest.raises(BackendError, match="no chat template"):
        HFLocalChat(str(tiny["no_template"]))


def test_missing_local_model_is_explained(tmp_path):
    with pytest.raises(BackendModelNotFound, match="no model at"):
        HFLocalChat(str(tmp_path / "nowhere"))


def test_prompt_longer_than_context_is_refused(tiny):
    backend = tiny_chat(tiny["llama"], "belle", context_tokens=8)
    with pytest.raises(BackendError, match="more than the 8"):
        join_stream(backend.stream([Message("user", "word " * 20)]))


def test_resolve_preset():
    assert resolve_preset("qwen").source.startswith("Qwen/")
    assert resolve_preset("chatglm").source == "THUDM/glm-4-9b-chat-hf"
    assert not needs_remote_code("THUDM/glm-4-9b-chat-hf")
    assert needs_remote_code("THUDM/chatglm3-6b")
    smol = resolve_preset("SmolLM2")
    assert smol.gguf_file == smollm2_gguf_path().name
    with pytest.raises(KeyError, match="presets: belle, chatglm, qwen, smollm2"):
        resolve_preset("gpt5")


def test_pick_dtype():
    assert pick_dtype("cpu") == torch.float32
    assert pick_dtype("cpu", "bfloat16") == torch.bfloat16


def test_stop_strings_are_cut_even_across_chunks():
    assert "".join(_until_stop(iter(["Hello", " there\nHu", "man: more"]), ["\nHuman:", "Human:"])) == "Hello there"
    assert "".join(_until_stop(iter(["Hu", "go is ", "great"]), ["Human:"])) == "Hugo is great"
    assert list(_until_stop(iter(["a", "", "b"]), [])) == ["a", "b"]


# ---------------------------------------------------------------- the real packaged SmolLM2 (slow)
@pytest.fixture(scope="module")
def smol():
    return HFLocalChat("smollm2", temperature=0, max_new_tokens=8)


def shared(smol, **kw):
    return HFLocalChat(loaded=(smol.hf_model, smol.tokenizer, smol.model), preset="smollm2", **kw)


def test_the_gguf_file_is_dequantized_once_into_a_plain_folder_with_the_same_weights(
    smol, tmp_path, monkeypatch, caplog
):
    gguf = pytest.importorskip("gguf")
    spec = resolve_preset("smollm2")
    folder = gguf_plain_folder(spec)
    assert folder is not None and (folder / "config.json").is_file()
    assert smol.hf_model.config._name_or_path == str(folder)  # the loaded model came from the folder
    saved = safe_open(str(folder / "model.safetensors"), "pt")
    file = {t.name: t for t in gguf.GGUFReader(f"{spec.source}/{spec.gguf_file}").tensors}
    # an 8-bit, a 4-bit and a float32 tensor of the file, de-quantized by the gguf package itself
    for name, key in [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("blk.3.ffn_down.weight", "model.layers.3.mlp.down_proj.weight"),
        ("output_norm.weight", "model.norm.weight"),
    ]:
        weight = saved.get_tensor(key).numpy()
        assert (gguf.quants.dequantize(file[name].data, file[name].tensor_type).reshape(weight.shape) == weight).all()
    assert (
        transformers.AutoTokenizer.from_pretrained(folder)("Hello Rex")["input_ids"]
        == smol.tokenizer("Hello Rex")["input_ids"]
    )
    # where Hugging Face's cache cannot be written, the GGUF file is read as before, with a warning
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setattr("huggingface_hub.constants.HF_HOME", str(blocked))
    with caplog.at_level(logging.WARNING):
        assert _load_source(spec, None) == (spec.source, {"trust_remote_code": False, "gguf_file": spec.gguf_file})
    assert "read from GGUF on every load" in caplog.text


def test_prepare_model_names_the_ready_folder_and_refuses_a_missing_file(smol, tmp_path, capsys):
    """``siliconfriend prepare-model`` (run by ``make install``): the folder the first load would
    make; a file that is not there is a clear error."""
    from siliconfriend.cli.main import main

    assert main(["--home", str(tmp_path), "prepare-model", "smollm2"]) == 0
    assert f"ready in {gguf_plain_folder(resolve_preset('smollm2'))}" in capsys.readouterr().out
    assert main(["--home", str(tmp_path), "prepare-model", str(tmp_path / "missing.gguf")]) == 2
    assert "no model at" in capsys.readouterr().err
    assert main(["--home", str(tmp_path), "prepare-model", "Qwen/Qwen2.5-0.5B-Instruct"]) == 0
    assert "nothing to prepare" in capsys.readouterr().out


@pytest.mark.slow
def test_smollm2_answers(smol):
    assert smol.model.endswith(".gguf") and smol.context_tokens == 8192
    assert smol.render([Message("user", "hi")]).startswith("<|im_start|>system\n")
    chunks = list(smol.stream([Message("user", "What is the capital of France?")], max_tokens=8))
    assert len(chunks) >= 2
    assert "Paris" in "".join(chunks)
    assert 0 < smol.count_tokens("The capital of France is Paris.") < 12


@pytest.mark.slow
def test_smollm2_two_concurrent_streams(smol):
    backend = shared(smol, temperature=0, max_new_tokens=5)
    results: dict[int, str] = {}

    def talk(i: int, text: str) -> None:
        results[i] = join_stream(backend.stream([Message("user", text)]))

    threads = [
        threading.Thread(target=talk, args=(i, q))
        for i, q in enumerate(["What is the capital of France?", "Name a color."])
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(results) == [0, 1] and all(results.values())


@pytest.mark.slow
def test_smollm2_stream_closed_early_frees_the_model(smol):
    backend = shared(smol, temperature=0, max_new_tokens=200)
    stream = backend.stream([Message("user", "Tell me a long story about a dragon.")])
    assert next(stream)
    stream.close()  # the user pressed stop: generation ends at the next token
    start = time.monotonic()
    assert join_stream(backend.stream([Message("user", "Hi")], max_tokens=2))
    assert time.monotonic() - start < 30


@pytest.mark.slow
def test_registry_default_is_smollm2_with_a_notice(smol, tmp_path, caplog):
    from siliconfriend.config import Settings
    from siliconfriend.factory import build_backend

    settings = Settings(home=tmp_path / "home", openai_api_key=None)  # no key: the embedded model
    with caplog.at_level(logging.WARNING, logger="siliconfriend.backends"):
        backend = build_backend(settings, loaded=(smol.hf_model, smol.tokenizer, smol.model), max_new_tokens=3)
    assert isinstance(backend, HFLocalChat) and backend.preset == "smollm2"
    assert "English-only" in caplog.text
    assert join_stream(backend.stream([Message("user", "Hello!")]))


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_smollm2_on_cuda_uses_half_precision():
    backend = HFLocalChat("smollm2", temperature=0, max_new_tokens=8)
    assert backend.hf_model.device.type == "cuda"
    assert backend.hf_model.dtype in (torch.bfloat16, torch.float16)
    assert "Paris" in join_stream(backend.stream([Message("user", "What is the capital of France?")]))


def test_one_calls_sampling_over_the_backends_own(tiny):
    """A summary asks for greedy decoding and penalties on its own words only, whatever the
    backend's reply settings; two greedy runs write the same text."""
    backend = HFLocalChat(str(tiny["llama"]), max_new_tokens=6, temperature=0.9, top_p=0.5, repetition_penalty=1.2)
    summary = Sampling(temperature=0.0, repetition_penalty=1.3, no_repeat_ngram_size=3, penalise_prompt=False)
    options = backend._sampling(summary, prompt_len=10)
    assert options["do_sample"] is False and "temperature" not in options and "repetition_penalty" not in options
    (own,) = options["logits_processor"]
    assert (own.start, own.penalty, own.ngram) == (10, 1.3, 3)
    assert backend._sampling(Sampling(temperature=0.0)) == {"do_sample": False, "repetition_penalty": 1.2}
    first, second = (join_stream(backend.stream(MESSAGES, sampling=summary)) for _ in range(2))
    assert first == second


def test_a_summarys_penalties_count_its_own_words_not_the_prompts():
    from siliconfriend.backends.hf.chat import _OwnWordsPenalty

    ids = torch.tensor([[7, 8, 9, 7, 3, 4, 3]])  # the prompt 7 8 9 7, then the model's 3 4 3
    scores = torch.ones(1, 12)
    scores[0, 9] = -1.0
    out = _OwnWordsPenalty(start=4, penalty=2.0, ngram=2)(ids, scores.clone())
    assert out[0, 4] == float("-inf")  # "3 4" was written once: after 3, not again
    assert out[0, 3] == 0.5  # written: penalised
    assert out[0, 7] == 1.0 and out[0, 8] == 1.0 and out[0, 9] == -1.0  # the prompt's words are free to copy
    assert torch.equal(_OwnWordsPenalty(start=7, penalty=2.0, ngram=2)(ids, scores.clone()), scores)
