"""The command line takes options anywhere, as users type them."""

from __future__ import annotations

import pytest

from siliconfriend.cli.main import build_parser


@pytest.mark.parametrize(
    "argv",
    [
        ["memories", "search", "--user", "U", "some", "words"],
        ["memories", "search", "some", "words", "--user", "U"],
        ["memories", "--user", "U", "search", "some", "words"],
        ["--home", "H", "memories", "search", "some", "--user", "U", "words"],
    ],
)
def test_memories_search_options_anywhere(argv):
    args, extra = build_parser().parse_known_args(argv)
    assert extra == []
    assert (args.action, args.query, args.user) == ("search", ["some", "words"], "U")


def test_a_wrong_option_is_still_reported(capsys):
    args, extra = build_parser().parse_known_args(["memories", "list", "--user", "U", "--colour", "red"])
    assert extra == ["--colour", "red"] and args.action == "list"


def test_finetune_passes_its_options_on():
    args, extra = build_parser().parse_known_args(["finetune", "--out", "x", "--max-steps", "2"])
    assert args.passes_options_on and extra == ["--out", "x", "--max-steps", "2"]
