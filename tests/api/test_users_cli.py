"""``siliconfriend users create|list|delete``: accounts for an operator who runs ``serve-api``
alone -- the password from stdin or asked without echo, never on the command line; a key made at
once with ``--key``; the account's keys and memories gone with it. (Over PostgreSQL: tests/pg.)"""

from __future__ import annotations

import getpass
import io
from datetime import datetime

import pytest
from api_helpers import FAST_HASHER

from siliconfriend.accounts.keys import ApiKeys
from siliconfriend.accounts.users import Accounts
from siliconfriend.cli.main import main


class Stdin(io.StringIO):
    def __init__(self, text: str, tty: bool = False):
        super().__init__(text)
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.fixture(autouse=True)
def fast_hashing(monkeypatch):
    """Argon2 at its test cost (0.2 s a hash at the real one, and every command opens the accounts)."""
    monkeypatch.setattr("siliconfriend.accounts.users.PasswordHasher", lambda: FAST_HASHER)


def run(monkeypatch, home, *args, stdin: str = "", tty: bool = False) -> int:
    monkeypatch.setattr("sys.stdin", Stdin(stdin, tty))
    return main(["--home", str(home), "users", *args])


def test_create_list_and_delete_users_without_the_web_app(tmp_path, monkeypatch, capsys, e5_embedder):
    home = tmp_path / "home"
    assert run(monkeypatch, home, "create", "Amy", "--password-stdin", "--key", stdin="amy password\n") == 0
    out = capsys.readouterr()
    key = out.out.strip()
    assert "account Amy created" in out.err and key.startswith("sf-")
    accounts = Accounts.at(home / "accounts.db")
    try:
        accounts.login("amy", "amy password")  # the line as typed, without its newline
        assert ApiKeys(accounts).owner(key).user == "Amy"
    finally:
        accounts.close()

    # asked on a terminal, twice, without echo; a mismatch creates nothing
    answers = iter(["bob-secret", "bob-secret", "one", "two"])
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": next(answers))
    assert run(monkeypatch, home, "create", "bob", tty=True) == 0
    assert run(monkeypatch, home, "create", "cy", tty=True) == 1
    assert "differ" in capsys.readouterr().err
    # no terminal and no --password-stdin, a short password, a taken or bad name: refused, clearly
    assert run(monkeypatch, home, "create", "dee", stdin="dee-secret\n") == 1
    assert "--password-stdin" in capsys.readouterr().err
    assert run(monkeypatch, home, "create", "dee", "--password-stdin", stdin="short\n") == 1
    assert "at least" in capsys.readouterr().err
    assert run(monkeypatch, home, "create", "AMY", "--password-stdin", stdin="another password\n") == 1
    assert "taken" in capsys.readouterr().err
    assert run(monkeypatch, home, "create", "no spaces", "--password-stdin", stdin="a password\n") == 1
    assert "user name" in capsys.readouterr().err

    assert run(monkeypatch, home, "list") == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[1:] == ["Amy       1", "bob       0"] and key not in "".join(listed)

    # Amy's memories go with her account; bob's stay
    from memory.bank import MemoryBank
    from memory.stores.sqlite import SqliteStores

    bank = MemoryBank(SqliteStores(home), e5_embedder)
    for user in ("Amy", "bob"):
        bank.add_turn(user, "I keep bees on the roof.", "Lovely!", datetime(2024, 5, 1, 10, 0))
    bank.close()
    assert run(monkeypatch, home, "delete", "amy", stdin="") == 1  # no terminal to confirm on
    assert "--yes" in capsys.readouterr().err
    assert run(monkeypatch, home, "delete", "amy", stdin="Ann\n", tty=True) == 1  # typed the wrong name
    monkeypatch.setattr("builtins.input", lambda prompt="": "Amy")
    assert run(monkeypatch, home, "delete", "amy", tty=True) == 0
    assert "deleted" in capsys.readouterr().err
    bank = MemoryBank(SqliteStores(home), e5_embedder)
    assert not bank.has_user("Amy") and bank.count("bob") == 1
    bank.close()
    accounts = Accounts.at(home / "accounts.db")
    try:
        assert accounts.users() == ["bob"] and ApiKeys(accounts).owner(key) is None
    finally:
        accounts.close()
    assert run(monkeypatch, home, "delete", "amy", "--yes") == 1
    assert "no account" in capsys.readouterr().err


def test_users_are_made_even_where_web_sign_up_is_closed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SILICONFRIEND_SIGNUP_OPEN", "false")
    home = tmp_path / "home"
    assert run(monkeypatch, home, "create", "eve", "--password-stdin", stdin="eve-secret\n") == 0
    assert capsys.readouterr().out == ""  # no key unless asked for
    assert main(["--home", str(home), "keys", "create", "--user", "eve"]) == 0
    assert capsys.readouterr().out.startswith("sf-")
