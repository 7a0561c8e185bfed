"""``siliconfriend replay | probe | consolidate | chat`` with a temporary --home and the real
SmolLM2 (the session's copy is handed to the CLI instead of loading a second one)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from memory.bank import MemoryBank
from memory.records import Kind
from memory.stores.sqlite import SqliteStores
from siliconfriend.cli import main as cli
from siliconfriend.cli.chat import read_questions, read_script

DATA = Path(__file__).resolve().parent.parent / "data"


@pytest.fixture
def model(monkeypatch, smollm2_backend):
    import siliconfriend.factory as factory

    monkeypatch.setattr(factory, "build_backend", lambda settings, **options: smollm2_backend)
    monkeypatch.delenv("SILICONFRIEND_HOME", raising=False)
    return smollm2_backend


def write(path: Path, lines: list) -> Path:
    path.write_text(
        "\n".join(json.dumps(x, ensure_ascii=False) if not isinstance(x, str) else x for x in lines) + "\n",
        encoding="utf-8",
    )
    return path


def test_replay_then_consolidate_then_probe(tmp_path, model, capsys, e5_embedder):
    home = tmp_path / "home"
    script = write(
        tmp_path / "s.jsonl",
        [
            {"date": "2024-05-01", "time": "19:30", "text": "I adopted a grey kitten and named her Pixel."},
            "",
            {"date": "2024-05-02", "text": "I signed up for a pottery class."},
        ],
    )
    assert cli.main(["replay", str(script), "--user", "Maya", "--home", str(home), "--max-new-tokens", "6"]) == 0
    out = capsys.readouterr().out
    assert "=== Maya · 2024-05-01 (Wednesday) ===" in out and "=== Maya · 2024-05-02 (Thursday) ===" in out
    assert "Maya: I adopted a grey kitten and named her Pixel.\nSiliconFriend: " in out
    assert "(summarised 2024-05-01)" in out

    # the last day, summarised on demand (global --home this time)
    assert (
        cli.main(
            [
                "--home",
                str(home),
                "consolidate",
                "--user",
                "Maya",
                "--date",
                "2024-05-02",
                "--now",
                "2024-05-02T22:00",
                "--max-new-tokens",
                "6",
                "--show",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    # the tiny model's profiles do not pass the grounding check: each day's is Maya's own words
    # about herself, so the global one is never empty once she spoke of herself
    assert "Maya: summarised 2024-05-02; updated global_events, global_personality" in out
    assert "What happened so far: " in out
    assert (
        cli.main(
            ["--home", str(home), "consolidate", "--user", "Maya", "--date", "2024-05-02", "--now", "2024-05-02T22:05"]
        )
        == 0
    )
    assert "Maya: summarised nothing new" in capsys.readouterr().out

    bank = MemoryBank(SqliteStores(home), e5_embedder)
    try:
        turns = [t for d in bank.days("Maya") for t in bank.turns_on("Maya", d)]
        assert [(t.created_at, t.query) for t in turns] == [
            (datetime(2024, 5, 1, 19, 30), "I adopted a grey kitten and named her Pixel."),
            (datetime(2024, 5, 2, 9, 0), "I signed up for a pottery class."),
        ]
        assert bank.get_summary("Maya", Kind.DAILY_EVENTS, turns[1].day) is not None
        profile = bank.get_summary("Maya", Kind.GLOBAL_PERSONALITY)
        assert profile is not None and "pottery class" in profile.text and "Pixel" in profile.text, profile
        stored = bank.count("Maya")
    finally:
        bank.close()

    questions = write(tmp_path / "q.jsonl", [{"Maya": ["What is my kitten called?"]}, {"Tom": ["Not for Maya."]}])
    answers = tmp_path / "answers.jsonl"
    assert (
        cli.main(
            [
                "--home",
                str(home),
                "probe",
                str(questions),
                "--user",
                "Maya",
                "--out",
                str(answers),
                "--max-new-tokens",
                "6",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "Maya [2024-05-03]: What is my kitten called?" in out and "Not for Maya" not in out
    (line,) = answers.read_text(encoding="utf-8").splitlines()
    record = json.loads(line)
    assert record["question"] == "What is my kitten called?" and record["date"] == "2024-05-03"
    assert record["error"] is None and isinstance(record["answer"], str)
    assert any("Pixel" in m["text"] and m["day"] == "2024-05-01" for m in record["memories"])
    bank = MemoryBank(SqliteStores(home), e5_embedder)
    try:
        assert bank.count("Maya") == stored  # probing stores nothing
    finally:
        bank.close()


def test_chat_session(tmp_path, model, monkeypatch, capsys):
    lines = iter(["Hello, I'm Maya!", "/memories", "/summary", "/help", "/quit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    assert cli.main(["--home", str(tmp_path), "chat", "--user", "Maya", "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert "SiliconFriend: talking with Maya." in out
    assert "(no memory was used)" in out and "What happened so far: (nothing summarised yet)" in out
    assert "/regenerate" in out


def test_script_errors_name_the_line(tmp_path):
    bad = write(tmp_path / "bad.jsonl", [{"date": "2024-05-01", "text": "hi"}, "{not json"])
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not JSON"):
        read_script(bad, "Maya")
    bad = write(tmp_path / "bad.jsonl", [{"date": "2024-05-01"}])
    with pytest.raises(ValueError, match=r":1: each line needs \"date\""):
        read_script(bad, "Maya")
    bad = write(tmp_path / "bad.jsonl", [{"date": "2024-05-02", "text": "a"}, {"date": "2024-05-01", "text": "b"}])
    with pytest.raises(ValueError, match=r":2: .* earlier than the line before"):
        read_script(bad, "Maya")
    bad = write(tmp_path / "bad.jsonl", [{"date": "May 1", "text": "a"}])
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        read_script(bad, "Maya")
    with pytest.raises(ValueError, match="no user"):
        read_script(write(tmp_path / "u.jsonl", [{"date": "2024-05-01", "text": "a"}]), None)


def test_bad_script_is_a_clean_cli_error(tmp_path, capsys):
    bad = write(tmp_path / "bad.jsonl", ["{nope"])
    assert cli.main(["--home", str(tmp_path), "replay", str(bad), "--user", "Maya"]) == 1
    assert "siliconfriend: error:" in capsys.readouterr().err


def test_script_times_and_users(tmp_path):
    script = write(
        tmp_path / "s.jsonl",
        [
            {"date": "2024-05-01", "text": "a", "user": "Ann"},
            {"date": "2024-05-01", "text": "b", "user": "Ann"},
            {"date": "2024-05-01", "text": "c", "user": "Bo", "time": "21:15"},
        ],
    )
    assert read_script(script, None) == [
        ("Ann", datetime(2024, 5, 1, 9, 0), "a"),
        ("Ann", datetime(2024, 5, 1, 9, 2), "b"),
        ("Bo", datetime(2024, 5, 1, 21, 15), "c"),
    ]


def test_question_files(tmp_path):
    q = write(
        tmp_path / "q.jsonl",
        [
            '"plain?"',
            {"question": "dated?", "date": "2024-05-04"},
            {"question": "Tom's?", "user": "Tom"},
            {"Maya": ["a?", "b?"]},
        ],
    )
    from datetime import date

    assert read_questions(q, "Maya") == [
        ("Maya", "plain?", None),
        ("Maya", "dated?", date(2024, 5, 4)),
        ("Maya", "a?", None),
        ("Maya", "b?", None),
    ]
    with pytest.raises(ValueError, match="no user"):
        read_questions(q, None)


@pytest.mark.parametrize("lang, user", [("en", "Maya"), ("zh", "林晓")])
def test_the_shipped_samples_parse(lang, user):
    script = read_script(DATA / f"sample_session_{lang}.jsonl", user)
    assert len({when.date() for _, when, _ in script}) == 10
    questions = read_questions(DATA / f"sample_probes_{lang}.jsonl", user)
    assert len(questions) == 6 and {u for u, _, _ in questions} == {user}


RUNS = 2  # an exit that aborts did so on every run tried: two runs catch it


def test_the_cli_exits_cleanly_with_the_reply_worker_busy(tmp_path, e5_embedder):
    """``siliconfriend replay`` as a process, answered at once by a local OpenAI-compatible server:
    it stores the turns and exits while the memory bank's worker is still embedding the replies.
    An exit with the worker running aborts ("terminate called without an active exception",
    SIGABRT, status 134) with every turn stored; so the worker is stopped and joined first."""
    import os
    import subprocess
    import sys
    import threading

    from test_backend_openai import FakeOpenAIServer

    server = FakeOpenAIServer()
    server.script = [{"reply": "A long and thoughtful reply about cats, gardens and the sea. " * 12}]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    script = write(
        tmp_path / "s.jsonl",
        [
            {"date": "2024-05-01", "time": f"10:{i:02d}", "text": f"Message {i}: my cat Pixel sat in the garden."}
            for i in range(6)
        ],
    )
    env = {
        **os.environ,
        "OPENAI_API_KEY": "test-key",
        "OPENAI_BASE_URL": server.base_url,
        "SILICONFRIEND_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(DATA.parent),
    }
    try:
        for run in range(RUNS):
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "siliconfriend.cli",
                    "replay",
                    str(script),
                    "--user",
                    f"u{run}",
                    "--backend",
                    "openai",
                ],
                env=env,
                cwd=DATA.parent,
                capture_output=True,
                text=True,
                timeout=180,
            )
            assert proc.returncode == 0 and "terminate called" not in proc.stderr, (run, proc.stderr[-3000:])
    finally:
        server.shutdown()
    bank = MemoryBank(SqliteStores(tmp_path / "home"), e5_embedder)
    assert all(len(bank.records(f"u{run}", kind=Kind.TURN)) == 6 for run in range(RUNS))
    bank.close()
