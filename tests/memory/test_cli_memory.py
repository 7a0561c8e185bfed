"""The memory commands, run as a user would (a real subprocess, $SILICONFRIEND_HOME in tmp)."""

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from memory.forgetting import PAPER
from memory.records import Kind
from siliconfriend.bench.retrieval_eval import PROMPT_WAYS, PromptBudget, evaluate_label_sets

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "memorybank_eval"

BANK = {
    "Amy": {
        "name": "Amy",
        "history": {
            "2023-04-27": [
                {"query": "I adopted a cat named Miso", "response": "What a lovely name!"},
                {"query": "I work as a nurse at night", "response": "That must be tiring."},
            ],
            "2023-04-28": [{"query": "I went hiking on Mount Tai", "response": "Beautiful views there!"}],
        },
        "summary": {"2023-04-27": {"content": "Amy adopted a cat and works nights."}},
    },
    "Bob": {"name": "Bob", "history": {"2023-04-27": [{"query": "I collect stamps", "response": "Neat!"}]}},
}


def run(home, *args, check=True):
    env = dict(os.environ, SILICONFRIEND_HOME=str(home))
    proc = subprocess.run(
        [sys.executable, "-m", "siliconfriend.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture
def bank_file(tmp_path):
    p = tmp_path / "bank.json"
    p.write_text(json.dumps(BANK))
    return p


def test_import_list_search_forget_export(tmp_path, bank_file):
    home = tmp_path / "home"
    out = run(home, "import-memorybank", str(bank_file), "--user", "Amy").stdout
    assert "Amy: 3 turns imported" in out
    listing = run(home, "memories", "list", "--user", "Amy", "--now", "2023-04-29T09:00").stdout
    assert "Miso" in listing and "S=1" in listing and "R=" in listing
    found = run(
        home, "memories", "search", "what is my cat called", "--user", "Amy", "-k", "1", "--now", "2023-04-29T09:00"
    ).stdout
    assert "Miso" in found and "why:" in found
    # small talk lasts 16 days by default, what else a person tells months (a pet years): by the
    # next January the nurse's shifts have faded
    dry = run(home, "forget", "--user", "Amy", "--dry-run", "--now", "2024-01-15T09:00").stdout
    assert "ARCHIVE" in dry and "would be archived" in dry
    assert "paces (t runs at this share of the clock" in dry and "people 0.04," in dry and "small_talk 1" in dry
    # a shadow policy beside the one in use: the cat (a pet), the hike on Mount Tai (a name) and the
    # day's summary fade only where every sort runs at the clock's pace
    shadow = run(home, "forget", "--user", "Amy", "--shadow", "one-pace", "--now", "2024-01-15T09:00").stdout
    only = [line for line in shadow.splitlines() if line.startswith("only")]
    assert all(line.startswith("only shadow") for line in only) and any("Miso" in line for line in only), shadow
    assert not any("I work as a nurse" in line for line in only)  # archived by both
    assert "in use: 1 of 4 active memories would be archived" in shadow
    assert "shadow (one-pace): 4 would be archived; both 1, only in use 0, only shadow 3" in shadow
    same = run(home, "forget", "--user", "Amy", "--shadow", "pace.people=0.04", "--now", "2024-01-15T09:00").stdout
    assert "only in use 0, only shadow 0" in same
    bad = run(home, "forget", "--user", "Amy", "--shadow", "pace.gossip=2", check=False)
    assert bad.returncode == 2 and "pace.<sort>" in bad.stderr
    assert "archived" not in run(home, "memories", "list", "--user", "Amy", "--all").stdout.split("R=")[1][:20]
    run(home, "forget", "--user", "Amy", "--now", "2024-01-15T09:00")
    assert "archived" in run(home, "memories", "list", "--user", "Amy", "--all", "--now", "2024-01-15T09:00").stdout
    exported = json.loads(run(home, "export-memorybank", "--user", "Amy").stdout)
    assert [t["query"] for t in exported["Amy"]["history"]["2023-04-27"]][0] == "I adopted a cat named Miso"
    assert "Bob" not in exported
    run(home, "export-memorybank", "--out", str(tmp_path / "all.json"))
    assert json.loads((tmp_path / "all.json").read_text())["Amy"]["summary"]


def test_a_broken_file_is_refused_with_its_position(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"Amy": {"history": {"2023-04-27": [}}}')
    proc = run(tmp_path / "home", "import-memorybank", str(bad), check=False)
    assert proc.returncode == 1
    assert "nothing imported" in proc.stderr and "bad.json: line 1, column" in proc.stderr
    assert run(tmp_path / "home", "memories", "list", "--user", "Amy", check=False).returncode == 1


def test_eval_retrieval_json_uses_a_temporary_home(tmp_path, bank_file):
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "\n".join(
            json.dumps(x)
            for x in [
                {
                    "bank_user": "Amy",
                    "question": "What is my cat's name?",
                    "evidence": [{"date": "2023-04-27", "turn": 0}],
                },
                {
                    "bank_user": "Amy",
                    "question": "Where did I go hiking on April 28th?",
                    "evidence": [{"date": "2023-04-28", "turn": 0}],
                },
                {"bank_user": "Amy", "question": "Did I ever go skydiving?", "answerable": False, "evidence": []},
                {  # the talk before the question is today's conversation: the cue it needs
                    "bank_user": "Amy",
                    "question": "Should I change that, do you think?",
                    "context": [
                        {"role": "user", "content": "Another week of night shifts at the hospital ahead."},
                        {"role": "assistant", "content": "That sounds exhausting."},
                    ],
                    "evidence": [{"date": "2023-04-27", "turn": 1}],
                },
            ]
        )
    )
    home = tmp_path / "home"
    proc = run(home, "eval", "retrieval", "--bank", str(bank_file), "--labels", str(labels), "--json", "--details")
    result = json.loads(proc.stdout)
    assert set(result) == {"n", "by_cue"} | {f"{m}@{k}" for m in ("recall", "hit") for k in (1, 2, 3, 5, 10)}
    assert result["n"] == 3 and result["recall@1"] == 1.0 and result["hit@10"] == 1.0
    details = [json.loads(x) for x in proc.stderr.splitlines() if x.startswith("{")]
    # each turn: day, place, the cue and the side that found it, the link it was reached along
    day, place, cue, side, link = details[-1]["retrieved"][0]
    assert [day, place, cue] == ["2023-04-27", 1, "conversation"] and side in ("dense", "lexical")
    assert link is None or link.startswith("linked to #")
    assert result["by_cue"]["conversation"]["recall@5"] > 0 and result["by_cue"]["message"]["recall@5"] > 0
    assert not (home / "users").exists() or not any((home / "users").iterdir())


def _part_of(tmp_path, bank_file, label_files, users, *, sessions=None):
    """A bank of ``users`` only (and of their first ``sessions`` days, if given) and each label
    file's lines whose evidence lies in it: the quality gates run on a part of each set, to stay
    within the suite's time (the whole sets: docs/benchmarks.md)."""
    bank = json.loads(Path(bank_file).read_text(encoding="utf-8"))
    part = {u: dict(bank[u]) for u in users}
    for body in part.values():
        if sessions is not None:
            body["history"] = dict(sorted(body["history"].items())[:sessions])
    days = {(u.strip(), d) for u, body in part.items() for d in body["history"]}
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "bank.json").write_text(json.dumps(part, ensure_ascii=False), encoding="utf-8")
    out = []
    for n, f in enumerate(label_files):
        labels = [json.loads(x) for x in Path(f).read_text(encoding="utf-8").splitlines() if x.strip()]
        kept = [
            x
            for x in labels
            if x["bank_user"] in users and all((x["bank_user"].strip(), e["date"]) in days for e in x["evidence"])
        ]
        (tmp_path / f"labels{n}.jsonl").write_text("\n".join(json.dumps(x) for x in kept), encoding="utf-8")
        out.append(tmp_path / f"labels{n}.jsonl")
    return tmp_path / "bank.json", out


@pytest.mark.slow
def test_retrieval_quality_on_the_papers_questions(tmp_path, e5_embedder):
    """Quality gate: the paper's English questions on the first three of its fifteen users, on the
    dev labels and on held-out labels of other questions (data/eval) that the settings were not
    tuned on. Measured: recall@5 0.917 / 1.000, recall@2 0.799 / 0.833 (the fifteen users:
    docs/benchmarks.md, "Retrieval quality"); the thresholds sit just under, so that a loss fails."""
    if not SHARED.exists():
        pytest.skip("shared evaluation data not present")
    bank_file = SHARED / "en" / "memory_bank_en.json"
    users = sorted(json.loads(bank_file.read_text(encoding="utf-8")))[:3]
    labels = [SHARED / "en" / "labels_dev_en.jsonl", ROOT / "data" / "eval" / "labels_holdout_en.jsonl"]
    dev, held_out = evaluate_label_sets(*_part_of(tmp_path, bank_file, labels, users), e5_embedder)
    assert dev["n"] >= 12 and dev["recall@5"] >= 0.90 and dev["recall@2"] >= 0.77, dev
    assert held_out["n"] >= 9 and held_out["recall@5"] >= 0.95 and held_out["recall@2"] >= 0.80, held_out


LOCOMO = ROOT.parent / "shared" / "data" / "locomo_dev"


@pytest.mark.slow
def test_retrieval_quality_on_locomo_dev_and_on_the_papers_questions_as_used(tmp_path, e5_embedder):
    """Quality gate: LoCoMo (third-person questions, half the evidence on the
    second speaker's side), the first eight sessions of one conversation of its dev half (66
    questions of all four categories), and the paper's Chinese questions asked after the days
    were lived as the companion lives them (importance, rehearsal, the default forgetting each
    night), on three of the fifteen users. Measured: LoCoMo recall@5 0.787, recall@10 0.855 (the
    dev half: docs/benchmarks.md, "Retrieval quality"); --as-used recall@5 1.000 (target 0.90).
    Thresholds just under."""
    if not LOCOMO.exists() or not SHARED.exists():
        pytest.skip("shared evaluation data not present")
    part = _part_of(tmp_path / "locomo", LOCOMO / "bank.json", [LOCOMO / "labels.jsonl"], ["conv-26"], sessions=8)
    locomo = evaluate_label_sets(*part, e5_embedder)[0]
    assert locomo["n"] >= 60 and locomo["recall@5"] >= 0.78 and locomo["recall@10"] >= 0.845, locomo
    bank_file = SHARED / "cn" / "memory_bank_cn.json"
    users = sorted(json.loads(bank_file.read_text(encoding="utf-8")))[:3]
    labels = [SHARED / "cn" / "labels_dev_cn.jsonl", ROOT / "data" / "eval" / "labels_holdout_cn.jsonl"]
    used = evaluate_label_sets(
        *_part_of(tmp_path / "cn", bank_file, labels, users), e5_embedder, as_used=True, lang="zh"
    )
    assert sum(r["n"] for r in used) >= 20 and all(r["recall@5"] >= 0.95 for r in used), used


def test_as_used_lives_the_days_and_asks_each_question_at_its_time(tmp_path, bank_file):
    """--as-used: the days are lived with the default forgetting; a question's asked_at is its
    "now" (a question asked before a turn was said cannot find it; one asked months later finds
    faded small talk only on a strong cue; by December the nurse's shifts are archived)."""
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "\n".join(
            json.dumps(x)
            for x in [
                {
                    "bank_user": "Amy",
                    "question": "What is my cat's name?",
                    "evidence": [{"date": "2023-04-27", "turn": 0}],
                },
                {
                    "bank_user": "Amy",
                    "question": "Where did I go hiking?",
                    "asked_at": "2023-04-27T18:00",
                    "evidence": [{"date": "2023-04-28", "turn": 0}],
                },
                {
                    "bank_user": "Amy",
                    "question": "Where did I go hiking?",
                    "asked_at": "2023/12/20 (Wed) 10:00",
                    "evidence": [{"date": "2023-04-28", "turn": 0}],
                },
            ]
        )
    )
    home = tmp_path / "home"
    out = run(
        home, "eval", "retrieval", "--bank", str(bank_file), "--labels", str(labels), "--as-used", "--json", "--details"
    )
    result = json.loads(out.stdout)
    forgetting = {"evidence_kept", "turns_archived", "turn_words_archived", "turns_archived_a_year_on"}
    assert (
        set(result) == {"n", "by_cue"} | {f"{m}@{k}" for m in ("recall", "hit") for k in (1, 2, 3, 5, 10)} | forgetting
    )
    # evidence kept: active when asked (the second question's evidence was not said yet)
    assert result["evidence_kept"] == pytest.approx(2 / 3, abs=1e-3)
    # a year on, unrecalled: the small talk is archived, the cat (a pet) is kept
    assert 0 < result["turns_archived"] < result["turns_archived_a_year_on"] < 1.0
    details = [json.loads(line) for line in out.stderr.splitlines() if line.startswith("{")]
    # each retrieved turn is [day, turn, the cue that found it]
    assert details[0]["retrieved"][0][:2] == ["2023-04-27", 0]
    assert ["2023-04-28", 0] not in [r[:2] for r in details[1]["retrieved"]]  # asked the day before it was said
    assert details[2]["retrieved"][0][:2] == ["2023-04-28", 0]  # months on, the hike on Mount Tai is found
    assert result["n"] == 3 and result["recall@1"] == pytest.approx(2 / 3, abs=1e-3)


def test_as_used_each_message_recalls_what_its_prompt_would(tmp_path, e5_embedder):
    """--as-used lives each turn's recall: a memory the later messages keep calling up gains at
    each, as in a chat, and is still active when asked about. On the paper's law (S = 1, t in
    days: 2.3 days unrecalled) the cello lesson of the first day would be archived by the fifth."""
    days = {
        "2023-05-01": [
            {"query": "My cello teacher is called Mrs Lin", "response": "How lovely, a cello teacher!"},
            {"query": "It rained all morning", "response": "Stay dry!"},
        ],
        "2023-05-02": [{"query": "I practised the cello with Mrs Lin again", "response": "Mrs Lin sounds patient."}],
        "2023-05-03": [{"query": "Mrs Lin gave me a new cello piece", "response": "A new cello piece, exciting!"}],
        "2023-05-04": [{"query": "Cello lesson with Mrs Lin went well", "response": "Mrs Lin must be proud."}],
    }
    bank = tmp_path / "bank.json"
    bank.write_text(json.dumps({"Amy": {"name": "Amy", "history": days}}))
    labels = tmp_path / "labels.jsonl"
    question = {
        "bank_user": "Amy",
        "question": "Who teaches me the cello?",
        "asked_at": "2023-05-06T09:00",
        "evidence": [{"date": "2023-05-01", "turn": 0}],
    }
    labels.write_text(json.dumps(question))
    result = evaluate_label_sets(bank, [labels], e5_embedder, as_used=True, policy=PAPER)[0]
    assert result["evidence_kept"] == 1.0 and result["recall@1"] == 1.0, result


def test_as_used_can_live_only_the_first_users_and_days(tmp_path, bank_file):
    """--users / --days bound a slow backend's run: only the first users' first days are lived,
    and a question whose evidence lies outside them is left out."""
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "\n".join(
            json.dumps({"bank_user": user, "question": q, "evidence": [{"date": day, "turn": 0}]})
            for user, q, day in [
                ("Amy", "What is my cat's name?", "2023-04-27"),
                ("Amy", "Where did I go hiking?", "2023-04-28"),
                ("Bob", "What do I collect?", "2023-04-27"),
            ]
        )
    )
    home = tmp_path / "home"
    args = ["eval", "retrieval", "--bank", str(bank_file), "--labels", str(labels), "--users", "1", "--days", "1"]
    assert run(home, *args, check=False).returncode == 2  # the days lived: --as-used only
    result = json.loads(run(home, *args, "--as-used", "--json").stdout)
    assert result["n"] == 1 and result["recall@1"] == 1.0 and "summaries" not in result


def test_eval_measures_what_the_prompts_memory_budget_holds(tmp_path, bank_file, e5_embedder):
    """--prompt-tokens: the first k hits laid out as the companion lays them out, placed by tier
    within the budget, in the ranking's order within it, and the ranking filling it without k."""
    labels = tmp_path / "labels.jsonl"
    labels.write_text(
        "\n".join(
            json.dumps({"bank_user": "Amy", "question": q, "evidence": [{"date": day, "turn": turn}]})
            for q, day, turn in [("What is my cat's name?", "2023-04-27", 0), ("Where did I hike?", "2023-04-28", 0)]
        )
    )
    roomy = evaluate_label_sets(bank_file, [labels], e5_embedder, prompt=PromptBudget(tokens=1000, k=1))[0]["prompt"]
    # a budget that holds them all: the tiers hold the k hits, as the ranking's order does; the
    # ranking without the cap holds all three turns of Amy
    assert roomy["tiers"] == roomy["rank_order"] and roomy["tiers"]["prompt_turns"] == 1.0
    assert roomy["tiers"]["prompt_recall"] == 1.0 and roomy["filled"]["prompt_turns"] == 3.0
    # a budget smaller than one line holds nothing: no memory is cut mid-sentence
    tight = evaluate_label_sets(bank_file, [labels], e5_embedder, prompt=PromptBudget(tokens=4, k=1))[0]["prompt"]
    assert all(tight[way]["prompt_turns"] == 0 and tight[way]["prompt_recall"] == 0 for way in PROMPT_WAYS)
    assert 0 < roomy["filled"]["prompt_tokens"] <= 1000


def test_memories_delete_removes_the_words_everywhere(tmp_path, bank_file):
    """``memories delete`` goes the way the page and the API go (``Companion.forget``): the turn,
    the day's summary written from it, and every byte of its words in the home."""
    home = tmp_path / "home"
    run(home, "import-memorybank", str(bank_file), "--user", "Amy")
    listing = run(home, "memories", "list", "--user", "Amy", "--all").stdout
    miso = next(line for line in listing.splitlines() if "Miso" in line)
    mid = miso.split("#", 1)[1].split()[0].strip(":")
    out = run(home, "memories", "delete", mid, "--user", "Amy").stdout
    assert "1 memories deleted for good" in out
    assert "Miso" not in run(home, "memories", "list", "--user", "Amy", "--all").stdout
    assert not [p for p in home.rglob("*") if p.is_file() and b"miso" in p.read_bytes().lower()]
    bad = run(home, "memories", "delete", "999", "--user", "Amy", check=False)
    assert bad.returncode == 1 and "nothing was deleted" in bad.stderr


def test_forget_purge_deletes_what_was_written_from_the_purged_memories(tmp_path):
    """``forget --purge`` deletes as the page does (``Companion.forget``): a purged turn's day
    summary and the global ones go with it (written again, without it, at the next rollover), and
    no byte of its words is left in the home; the other day keeps its own."""
    from siliconfriend.config import Settings
    from siliconfriend.factory import build_bank

    bank_file = tmp_path / "bank.json"
    history = {
        "2023-04-27": [
            {"query": "I adopted a cat named Miso", "response": "What a lovely name!"},
            {"query": "I work as a nurse at night", "response": "That must be tiring, qorvath."},
        ],
        "2023-04-28": [{"query": "I went hiking on Mount Tai", "response": "Beautiful views there!"}],
    }
    summary = {
        "2023-04-27": {"content": "Amy adopted a cat and works nights at Qorvath."},
        "2023-04-28": {"content": "Amy hiked on Mount Tai."},
    }
    bank_file.write_text(json.dumps({"Amy": {"name": "Amy", "history": history, "summary": summary}}))
    home = tmp_path / "home"
    run(home, "import-memorybank", str(bank_file), "--user", "Amy")
    bank = build_bank(Settings.load(home=home), lazy=True)
    try:
        bank.set_summary("Amy", Kind.GLOBAL_EVENTS, "Amy is a night nurse at Qorvath.", datetime(2023, 4, 29))
    finally:
        bank.close()
    # by mid-July the nurse's small talk has faded (test_import_list_search_forget_export), the rest not
    out = run(home, "forget", "--user", "Amy", "--now", "2024-01-15T09:00", "--purge").stdout
    assert "1 archived memories deleted for good" in out
    listing = run(home, "memories", "list", "--user", "Amy", "--all").stdout
    assert "Miso" in listing and "Mount Tai" in listing  # the day's other turn, the other day and its summary
    assert "qorvath" not in listing.lower() and "works nights" not in listing
    assert not [p for p in home.rglob("*") if p.is_file() and b"qorvath" in p.read_bytes().lower()]
