"""Loaders of finetune.datasets: each format, bad records with file and line, no usable data."""

import json
from pathlib import Path

import pytest

from finetune.datasets import BadRecord, NoUsableData, load_dialogues, normalise, record_messages, split_eval
from finetune.persona import COUNSELLOR_SYSTEM_PROMPT_ZH, counsellor_system_prompt
from memory.cjk import language_of

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "psych_sample.jsonl"
SHARED = REPO.parent / "shared" / "data" / "psych" / "smilechat_2k.jsonl"

SMILE = [
    {"role": "client", "content": "我最近睡不好"},
    {"role": "counselor", "content": "听起来你很疲惫，愿意说说发生了什么吗？"},
    {"role": "client", "content": "工作压力大"},
    {"role": "counselor", "content": "压力大的时候失眠很常见，我们一起想想办法。"},
]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text(
        "\n".join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8"
    )
    return path


def test_smilechat_line_format(tmp_path):
    f = write_jsonl(tmp_path / "s.jsonl", [{"id": "1", "dialogue": SMILE}])
    dialogues, report = load_dialogues([f])
    assert report.records == 1 and not report.bad
    msgs = dialogues[0].messages
    assert [m["role"] for m in msgs] == ["user", "assistant", "user", "assistant"]
    assert msgs[1]["content"] == SMILE[1]["content"]
    assert dialogues[0].source == f"{f}:1"


def test_smilechat_folder_of_json_files(tmp_path):
    folder = tmp_path / "smile" / "data"
    folder.mkdir(parents=True)
    for i in range(3):
        annotated = [dict(m, annotation="x") for m in SMILE]
        (folder / f"{i}.json").write_text(json.dumps(annotated, ensure_ascii=False), "utf-8")
    (folder / "notes.txt").write_text("not data")
    dialogues, report = load_dialogues([tmp_path / "smile"])
    assert len(dialogues) == 3 and len(report.files) == 3
    assert all(len(d.messages) == 4 for d in dialogues)


def test_input_output_pairs_with_history_and_instruction(tmp_path):
    f = write_jsonl(
        tmp_path / "p.jsonl",
        [
            {"input": "I feel lonely.", "output": "I'm here with you."},
            {
                "instruction": "Be kind.",
                "input": "Bad day",
                "output": "Tell me more?",
                "history": [["hi", "hello"]],
                "system": "sys",
            },
        ],
    )
    (a, b), _ = load_dialogues([f])
    assert a.messages == [
        {"role": "user", "content": "I feel lonely."},
        {"role": "assistant", "content": "I'm here with you."},
    ]
    assert [m["role"] for m in b.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert b.messages[3]["content"] == "Be kind.\nBad day"


def test_chat_messages_and_sharegpt(tmp_path):
    f = write_jsonl(
        tmp_path / "c.jsonl",
        [
            {
                "messages": [
                    {"role": "system", "content": "S"},
                    {"role": "user", "content": "u"},
                    {"role": "assistant", "content": "a"},
                ]
            },
            {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "r"}]},
        ],
    )
    (a, b), _ = load_dialogues([f])
    assert [m["role"] for m in a.messages] == ["system", "user", "assistant"]
    assert b.messages == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}]


def test_normalise_merges_and_trims():
    msgs = normalise(
        [
            {"role": "counselor", "content": "opening"},  # leading reply dropped
            {"role": "client", "content": "a"},
            {"role": "client", "content": "b"},
            {"role": "counselor", "content": "  "},  # empty dropped
            {"role": "counselor", "content": "c"},
            {"role": "client", "content": "dangling"},
        ]
    )  # trailing user dropped
    assert msgs == [{"role": "user", "content": "a\nb"}, {"role": "assistant", "content": "c"}]


@pytest.mark.parametrize(
    "record, reason",
    [
        ({"dialogue": [{"role": "client", "content": "only a question"}]}, "no counsellor"),
        ({"dialogue": [{"role": "doctor", "content": "x"}]}, "unknown role"),
        ({"dialogue": [{"role": "client", "content": 3}]}, "not text"),
        ({"dialogue": "text"}, "not a list"),
        ({"text": "hello"}, "unknown record format"),
        ({"input": "x"}, '"output"'),
        ([1, 2], "not an object"),
    ],
)
def test_bad_records_raise_with_reason(record, reason):
    with pytest.raises(BadRecord, match=reason):
        record_messages(record)


def test_bad_records_reported_with_file_and_line_and_skipped(tmp_path):
    f = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            {"dialogue": SMILE},
            "{not json",
            {"dialogue": [{"role": "client", "content": "alone"}]},
            {"input": "q", "output": "a"},
        ],
    )
    seen = []
    dialogues, report = load_dialogues([f], on_bad=seen.append)
    assert len(dialogues) == 2 and report.records == 4 and len(report.bad) == 2
    assert seen == report.bad
    assert report.bad[0].startswith(f"{f}:2: invalid JSON")
    assert report.bad[1].startswith(f"{f}:3: no counsellor")
    assert "2 bad record(s) skipped" in report.summary()


def test_no_usable_record_is_an_error(tmp_path):
    f = write_jsonl(tmp_path / "bad.jsonl", ["{oops", {"text": "x"}])
    with pytest.raises(NoUsableData, match="no usable training dialogue"):
        load_dialogues([f])
    with pytest.raises(NoUsableData, match="does not exist"):
        load_dialogues([tmp_path / "missing.jsonl"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoUsableData, match="no .jsonl or .json"):
        load_dialogues([tmp_path / "empty"])


def test_invalid_json_file_is_reported(tmp_path):
    (tmp_path / "broken.json").write_text("[{", "utf-8")
    write_jsonl(tmp_path / "ok.jsonl", [{"dialogue": SMILE}])
    dialogues, report = load_dialogues([tmp_path])
    assert len(dialogues) == 1 and "broken.json: invalid JSON" in report.bad[0]


def test_split_eval_fraction_count_and_keeps_one_for_training(tmp_path):
    f = write_jsonl(tmp_path / "s.jsonl", [{"dialogue": SMILE}] * 10)
    dialogues, _ = load_dialogues([f])
    train, held = split_eval(dialogues, 0.2)
    assert len(train) == 8 and len(held) == 2
    assert len(split_eval(dialogues, 3)[1]) == 3
    assert len(split_eval(dialogues[:1], 0.5)[0]) == 1
    assert split_eval(dialogues, 0.2, seed=1) == split_eval(dialogues, 0.2, seed=1)


def test_shipped_sample_loads():
    dialogues, report = load_dialogues([SAMPLE])
    assert len(dialogues) == 40 and not report.bad
    assert all(sum(m["role"] == "assistant" for m in d.messages) >= 2 for d in dialogues)
    assert (REPO / "data" / "psych_sample.LICENSE.md").read_text().count("CC0") >= 1


@pytest.mark.skipif(not SHARED.is_file(), reason="shared SmileChat subset not present")
def test_shared_smilechat_subset_loads():
    dialogues, report = load_dialogues([SHARED])
    assert len(dialogues) > 1900 and report.records == 2000


def test_persona_prompt_language():
    assert language_of("我最近睡不好") == "zh"
    assert language_of("I can't sleep") == "en"
    assert counsellor_system_prompt("我很难过") == COUNSELLOR_SYSTEM_PROMPT_ZH
    with pytest.raises(ValueError):
        counsellor_system_prompt("x", "fr")
