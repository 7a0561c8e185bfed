"""Every string a person reads is a message with its English and its Chinese, made where it is
said (``memory/message.py``), and the page shows it in its language by its id, or by reading an
English text back to the message it was made from: never an English sentence patched by a
pattern, never English on a Chinese page."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from memory.message import Message

ROOT = Path(__file__).resolve().parents[1]
CJK = re.compile(r"[\u3400-\u9fff]")
FIELD = re.compile(r"\{(\w+)\}")


@pytest.fixture(scope="module")
def messages() -> list[Message]:
    """Every message of the app: each module that says something is imported (a message is
    defined where it is said)."""
    import memory
    import siliconfriend

    for package in (memory, siliconfriend):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.split(".")[-1].startswith("_") or ".bench" in info.name or "postgres" in info.name:
                continue
            importlib.import_module(info.name)
    return Message.all()


def test_every_message_has_its_chinese(messages):
    assert len(messages) > 40
    for m in messages:
        en, zh = m.templates["en"], m.templates["zh"]
        assert en.strip() and zh.strip(), m.id
        assert CJK.search(FIELD.sub("", zh)), f"{m.id}: its Chinese is not Chinese: {zh!r}"
        # a translation may leave a value out ("you" for the user's name), never add one
        assert set(FIELD.findall(zh)) <= set(FIELD.findall(en)), f"{m.id}: its Chinese takes a value the English lacks"
        said = m(**{name: "7" for name in FIELD.findall(en)})
        assert Message.read(str(said)).in_lang("zh") == said.in_lang("zh"), f"{m.id}: its English reads back wrong"


# what is refused below the pages reaches a person through the page's guard (ValueError and its
# kin): such a refusal is a message, never an English literal
REFUSALS = {"ValueError", "AccountError", "SignupClosed", "ApiKeyError", "UnknownMemory", "NotLoggedIn"}
REFUSALS |= {"ModelUnavailable"}
SPEAKERS = ["siliconfriend/web", "siliconfriend/accounts", "siliconfriend/core", "memory/bank.py", "app.py"]
# refusals that never reach the page: a setting or an argument a program or an operator got wrong
# (told at start-up, on the command line, or in a traceback), each with where it is read
NOT_FOR_THE_PAGE = {
    ("siliconfriend/web/client.py", "trusted_proxies"),  # config.toml, read at start-up
    ("siliconfriend/accounts/users.py", "unknown preferences"),  # a caller's wrong field name
    ("siliconfriend/accounts/users.py", "no such user"),  # the CLI's users command
    ("siliconfriend/accounts/keys.py", "no account named"),  # the CLI's keys command
    ("memory/bank.py", "sentences must be one of"),  # the bank's arguments
    ("memory/bank.py", "replies must be"),
    ("memory/bank.py", "links must be"),
    ("memory/bank.py", "the bank's tokenizer"),
    ("memory/bank.py", "use add_turn"),
    ("memory/bank.py", "needs the day it summarises"),
    ("memory/bank.py", "only runs beside it"),
}


def english_refusals(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        call = node.exc if isinstance(node, ast.Raise) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in REFUSALS):
            continue
        if call.args and isinstance(call.args[0], (ast.Constant, ast.JoinedStr, ast.BinOp)):
            text = ast.unparse(call.args[0])
            if not any(rel == where and needle in text for where, needle in NOT_FOR_THE_PAGE):
                out.append(f"{rel}:{node.lineno}: {text[:80]}")
    return out


def test_no_refusal_a_person_reads_is_an_english_literal():
    files = [p for s in SPEAKERS for p in ((ROOT / s).rglob("*.py") if (ROOT / s).is_dir() else [ROOT / s])]
    assert [r for f in files for r in english_refusals(f)] == []


def test_the_scan_catches_an_english_refusal():
    probe = ROOT / "siliconfriend" / "core" / "_message_probe.py"
    probe.write_text('def f(x):\n    raise ValueError(f"no memory {x} for this user")\n', encoding="utf-8")
    try:
        assert english_refusals(probe) == ["siliconfriend/core/_message_probe.py:2: f'no memory {x} for this user'"]
    finally:
        probe.unlink()


def test_what_leaked_in_english_reads_chinese(messages):
    from memory.shown import UsedMemory
    from siliconfriend.config import Settings
    from siliconfriend.factory import model_labels
    from siliconfriend.i18n import say, why_words
    from siliconfriend.web.chat import remembered_markdown

    assert say("no memory 4 for this user", "zh") == "没有编号为 4 的记忆。"
    assert say("fits the conversation so far", "zh") == "和到目前为止的对话相符"
    why = "had faded; brought back by a strong cue; shares words with your message; similar in meaning (0.86)"
    assert why_words(why, "zh") == "曾经淡忘；被强烈的提示唤起；和你的话有相同的词；意思相近（0.86）"
    assert why_words(why, "en") == why
    label = model_labels(Settings(backend="hf"))["hf:smollm2"]
    assert label == "SmolLM2 135M (built in, tiny, English)" and "内置" in say(label, "zh")
    entry = {"kind": "turn", "day": "2024-05-01", "strength": 1.0, "retention": 0.9, "id": 3, "text": "我的狗叫旺财"}
    panel = remembered_markdown([UsedMemory.from_json({**entry, "why": "fits the conversation so far"})], "zh")
    assert "和到目前为止的对话相符" in panel and "conversation" not in panel
