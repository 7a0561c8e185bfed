"""Bringing things up: a plan whose day has passed, or an important memory close to fading, is
offered to the prompt as something to ask about; it counts as recalled when the reply uses it.
Measured on a scripted replay answered by a local OpenAI-compatible server that reads its prompt."""

from __future__ import annotations

import json
import re
import threading
from datetime import datetime, timedelta

import pytest
from fakes import Clock

from memory.forgetting import EbbinghausPolicy
from memory.records import Kind
from siliconfriend.bench.turns import InstantBackend
from siliconfriend.config import Settings
from siliconfriend.core import bring_up
from siliconfriend.core.companion import Companion

MAY3 = datetime(2024, 5, 3, 18, 40)
MAY8 = datetime(2024, 5, 8, 22, 10)


def test_a_plan_whose_day_has_passed_is_offered_and_taken_up(bank, tmp_path):
    interview = bank.add_turn("Maya", "I have a job interview next Tuesday at Greenleaf Books.", "Good luck!", MAY3)
    bank.add_turn("Maya", "I watched a film tonight.", "Nice.", MAY3 + timedelta(minutes=5))
    for kind in (Kind.DAILY_EVENTS, Kind.DAILY_PERSONALITY):  # the day summarised already: no rehearsal now
        bank.set_summary("Maya", kind, "Maya watched a film.", MAY3 + timedelta(days=1), day=MAY3.date())
    clock = Clock(MAY8)
    backend = InstantBackend()
    companion = Companion(bank, backend, settings=Settings(home=tmp_path / "home"), clock=clock)
    bank.retrieval_config = bank.retrieval_config.__class__(k=1)  # the cue finds one memory
    backend.reply = "That sounds like a long day."
    first = companion.respond("Maya", "I feel a bit tired today.").collect()
    offered = [h for h in first.used if h.cue == bring_up.BRING_UP_CUE]
    assert [h.record.id for h in offered] == [interview.id]  # the interview was on Tuesday May 7th
    assert "2024-05-07" in offered[0].reasons[0]
    assert "Worth asking Maya about, if it fits the talk." in first.messages[-1].content
    before = bank.get("Maya", interview.id)
    assert before.recall_count == 0  # offered, not taken up: not a recall
    backend.reply = "By the way, how did your job interview at Greenleaf Books go?"
    second = companion.respond("Maya", "Anyway, what should I cook?").collect()
    assert interview.id in {h.record.id for h in second.used if h.cue == bring_up.BRING_UP_CUE}
    assert bank.get("Maya", interview.id).recall_count == 1  # taken up: recalled
    third = companion.respond("Maya", "Pasta it is.").collect()  # taken up once: not offered again
    assert not [h for h in third.used if h.cue == bring_up.BRING_UP_CUE]
    assert json.loads(bank.user_meta("Maya", bring_up.BRING_UP_META)) == []


def test_an_important_memory_close_to_fading_is_chosen(bank):
    bank.policy = EbbinghausPolicy(decay=())  # one pace: weeks, S = 1 + 4 x importance
    fact = bank.add_turn("Maya", "My daughter Emma was diagnosed with asthma last week.", "I'm sorry.", MAY3)
    small = bank.add_turn("Maya", "ok", "ok", MAY3)
    assert fact.importance >= bring_up.FADING_IMPORTANCE > small.importance
    policy = bank.policy_for("Maya")
    # between the two thresholds: R < 0.3 once t > S x ln(1/0.3) weeks
    soon = MAY3 + timedelta(weeks=fact.strength * 1.3)
    assert policy.tier(fact, policy.retention(fact, soon)) == "long_term"
    chosen = bring_up.choose(bank, "Maya", soon)
    assert [(e["id"], e["why"]) for e in chosen] == [(fact.id, "fading")]
    assert bring_up.choose(bank, "Maya", MAY3 + timedelta(days=1)) == []  # fresh: nothing to bring up
    # offered three times without being taken up: dropped
    bring_up.choose(bank, "Maya", soon)
    for _ in range(bring_up.OFFERS):
        assert bring_up.offer(bank, "Maya", set()) is not None
        bring_up.offered(bank, "Maya", fact.id, used=False)
    assert bring_up.offer(bank, "Maya", set()) is None
    assert bring_up.choose(bank, "Maya", soon) == []  # and not chosen again


def test_replay_counts_what_was_brought_up_with_an_openai_compatible_server(tmp_path, monkeypatch, capsys):
    """``siliconfriend replay`` of the shipped English session, answered by a local server that asks
    about what its prompt marks as worth asking about (as an instruction-following model would)."""
    pytest.importorskip("openai")
    from test_backend_openai import FakeOpenAIServer

    from siliconfriend.cli import main as cli

    def reply(body: dict) -> str:
        prompt = body["messages"][-1]["content"]
        marked = [ln for ln in prompt.splitlines() if "Worth asking" in ln]
        said = re.search(r'said: "([^"]+)"', marked[0]) if marked else None
        return f"How did it go? You told me: {said.group(1)}" if said else "I see. Tell me more."

    server = FakeOpenAIServer()
    server.script = [{"reply": reply}]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "data" / "sample_session_en.jsonl"
    try:
        code = cli.main(
            ["--home", str(tmp_path / "home"), "replay", str(script), "--user", "Maya", "--backend", "openai"]
        )
    finally:
        server.shutdown()
    out = capsys.readouterr().out
    assert code == 0, out[-2000:]
    found = re.search(r"brought up: (\d+) offered, (\d+) taken up by the reply", out)
    assert found, out[-2000:]
    offered, taken = int(found.group(1)), int(found.group(2))
    # the interview (Tuesday May 7th, said on the 3rd) is offered after its day; this server takes
    # up what it is offered
    assert offered >= 1 and taken == offered, out[-3000:]
    assert "Greenleaf Books" in out
