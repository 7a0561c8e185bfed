"""Import / export of the original MemoryBank JSON."""

import json
from datetime import datetime
from pathlib import Path

import pytest

from memory.memorybank_format import BankFormatError, export_bank, import_bank
from memory.records import Kind

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "memorybank_eval"

SAMPLE = {
    " Jason ": {
        "name": "Jason",
        "history": {
            "2023-04-27": [
                {"query": "Hi, I'm Jason.", "response": "Hello Jason!"},
                {
                    "query": "I love hiking.",
                    "response": "Where do you hike?",
                    "memory_strength": 3,
                    "last_recall_date": "2023-04-29",
                },
            ],
            "2023-04-28": [{"query": "I'm planning a trip to New Zealand.", "response": "Exciting!"}],
        },
        "summary": {"2023-04-27": {"content": "Jason introduced himself and his love of hiking."}},
        "personality": {"2023-04-27": "Outgoing and adventurous."},
        "overall_history": "Jason loves the outdoors and plans a trip.",
        "overall_personality": "Adventurous; reply with enthusiasm.",
    },
    "Mia": {"name": "Mia", "history": {"2023-05-01": [{"query": "你好", "response": "你好呀"}]}},
}


def _write(tmp_path, data, name="bank.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return p


def test_import_then_export_keeps_everything(paper_bank, tmp_path):
    counts = import_bank(paper_bank, _write(tmp_path, SAMPLE))
    assert counts == {"Jason": 3, "Mia": 1}
    # the replies' vectors come from the reply worker, as a live turn's: all there once settled
    paper_bank.settle()
    for user in ("Jason", "Mia"):
        store = paper_bank.user_store(user)
        assert store.replies_pending() == []
        turns = [r.id for r in paper_bank.records(user, kind=Kind.TURN)]
        assert store.vectors(turns)[1].any(axis=1).all()
    out = export_bank(paper_bank)
    j = out["Jason"]
    assert [t["query"] for t in j["history"]["2023-04-27"]] == ["Hi, I'm Jason.", "I love hiking."]
    assert j["history"]["2023-04-28"][0]["response"] == "Exciting!"
    assert j["history"]["2023-04-27"][1]["memory_strength"] == 3
    assert j["history"]["2023-04-27"][1]["last_recall_date"] == "2023-04-29"
    assert j["summary"]["2023-04-27"]["content"].startswith("Jason introduced")
    assert j["personality"]["2023-04-27"] == "Outgoing and adventurous."
    assert j["overall_history"] == SAMPLE[" Jason "]["overall_history"]
    assert j["overall_personality"] == SAMPLE[" Jason "]["overall_personality"]
    assert out["Mia"]["history"]["2023-05-01"][0]["query"] == "你好"
    # and it imports back into a fresh home identically
    again = _write(tmp_path, out, "exported.json")
    import_bank(paper_bank, again)  # same turns: nothing duplicated
    assert paper_bank.count("Jason", kind=Kind.TURN) == 3


def test_import_one_user_by_stripped_name(paper_bank, tmp_path):
    assert import_bank(paper_bank, _write(tmp_path, SAMPLE), only_user="Jason") == {"Jason": 3}
    assert paper_bank.users() == ["Jason"]
    with pytest.raises(BankFormatError, match="no user 'Nobody'"):
        import_bank(paper_bank, _write(tmp_path, SAMPLE), only_user="Nobody")


GOOD_USER = '"Bob": {"history": {"2023-04-27": [{"query": "hello", "response": "hi"}]}}'


@pytest.mark.parametrize(
    "text, where",
    [
        ("{" + GOOD_USER + ', "Amy": {"history": {"2023-04-27": [{"query": "hi"', "line 1, column 127"),
        (
            "{" + GOOD_USER + ', "Amy": {"history": {"2023-04-27": [{"response": "yo"}]}}}',
            "user 'Amy' history['2023-04-27'][0]: a turn needs a 'query'",
        ),
        ("{" + GOOD_USER + ', "Amy": {"history": {"27/04/2023": []}}}', "'27/04/2023' is not a date"),
        ("[1, 2]", "the top level must be an object"),
    ],
)
def test_broken_files_name_the_place_and_import_nothing(paper_bank, tmp_path, text, where):
    p = tmp_path / "broken.json"
    p.write_text(text)
    with pytest.raises(BankFormatError) as exc:
        import_bank(paper_bank, p)
    assert str(p) in str(exc.value) and where in str(exc.value)
    assert paper_bank.users() == []  # Bob, who was fine, was not imported either


@pytest.mark.skipif(not SHARED.exists(), reason="shared evaluation data not present")
def test_the_papers_bank_round_trips(paper_bank, tmp_path):
    src = json.loads((SHARED / "cn" / "memory_bank_cn.json").read_text(encoding="utf-8"))
    name = next(iter(src))
    import_bank(paper_bank, SHARED / "cn" / "memory_bank_cn.json", only_user=name)
    out = export_bank(paper_bank)[name.strip()]
    for day, turns in src[name]["history"].items():
        assert [(t["query"], t["response"]) for t in out["history"][day]] == [
            (t["query"], t["response"]) for t in turns
        ]


def test_a_lone_reply_is_kept_at_its_place_in_the_day(paper_bank, tmp_path):
    """A conversation's second speaker may open a session: the turn has a reply and no message.
    It is a memory like any other, and the turns after it keep their places (evidence labels and
    the neighbours retrieval uses count turns by their index in the day)."""
    data = {
        "Ann": {
            "history": {
                "2023-05-25": [
                    {"query": "", "response": "I ran a charity race for mental health last Saturday."},
                    {"query": "That race sounds great!", "response": "Thanks, it was rewarding."},
                    {"query": "  ", "response": ""},
                    {"query": "What's next?", "response": "A trip to the coast."},
                ]
            }
        }
    }
    assert import_bank(paper_bank, _write(tmp_path, data)) == {"Ann": 3}
    turns = paper_bank.records("Ann", kind=Kind.TURN)
    assert [(t.position, t.query) for t in turns] == [(0, ""), (1, "That race sounds great!"), (2, "What's next?")]
    assert turns[0].text == "I ran a charity race for mental health last Saturday."
    paper_bank.settle()
    hits = paper_bank.retrieve("Ann", "When did Ann run the charity race?", datetime(2023, 6, 1), k=1)
    assert hits[0].record.position == 0
    assert paper_bank.add_turn("Ann", "   ", "a reply to nothing", datetime(2023, 6, 1)) is None


def test_an_import_shows_its_turns_and_then_its_reply_vectors(paper_bank, tmp_path):
    """A long import shows the turns stored, then the reply vectors it waits for (with long
    replies, the longer part), each with a count and tqdm's rate and time left."""
    import functools
    import io

    from tqdm import tqdm

    out = io.StringIO()
    counts = import_bank(
        paper_bank, _write(tmp_path, SAMPLE), progress=functools.partial(tqdm, file=out, mininterval=0)
    )
    shown = out.getvalue()
    assert counts == {"Jason": 3, "Mia": 1}
    assert "importing" in shown and "4/4" in shown
    assert "reply vectors" in shown and "4/4" in shown.split("reply vectors")[-1]
    # the import waited for them: every stored turn has its reply's vector
    store = paper_bank.user_store("Jason")
    assert store.replies_pending(10) == []
    again = io.StringIO()  # nothing new: no reply to wait for
    import_bank(paper_bank, _write(tmp_path, SAMPLE), progress=functools.partial(tqdm, file=again, mininterval=0))
    assert "importing" in again.getvalue() and "reply vectors" not in again.getvalue()
