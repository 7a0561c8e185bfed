"""``siliconfriend users create|list|delete``: accounts without the web app, for an operator who
runs ``serve-api`` alone (``keys create`` needs an account, and only the web page could make one).

The accounts are the configured ones: ``accounts.db`` in the home, or the PostgreSQL database of
``database_url``. Only the public ``Accounts`` methods are used (signup, users, canonical, delete),
so that any accounts store that keeps them works here too. A password is read without echo
(``getpass``, asked twice), or as one line from stdin with ``--password-stdin`` (scripts), never
from the command line, where other users of the machine could read it in the process list.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from dataclasses import replace


def _accounts(args: argparse.Namespace, *, create: bool = False):
    from ..accounts.users import open_accounts
    from ..config import Settings

    settings = Settings.load(home=getattr(args, "home", None))
    if create:  # the operator makes accounts even where sign-up on the web page is closed
        settings = replace(settings, signup_open=True)
    return settings, open_accounts(settings)


def _read_password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        line = sys.stdin.readline()
        return line[:-1] if line.endswith("\n") else line  # the line as typed (spaces are allowed)
    if not sys.stdin.isatty():
        raise ValueError("no terminal to ask for the password: pipe it in with --password-stdin")
    first = getpass.getpass(f"password for {args.name}: ")
    if getpass.getpass("again: ") != first:
        raise ValueError("the two passwords differ: nothing was created")
    return first


def cmd_users_create(args) -> int:
    from ..accounts.keys import ApiKeys
    from ..accounts.users import Accounts

    Accounts.check_username(args.name)  # a bad name is refused before the password is asked
    password = Accounts.check_password(_read_password(args))
    settings, accounts = _accounts(args, create=True)
    try:
        session = accounts.signup(args.name, password)
        accounts.logout(session.token)  # sign-up logs in; nobody will use this session
        name = accounts.canonical(args.name) or args.name
        where = settings.database_url and "the database of database_url" or str(settings.home)
        print(f"account {name} created in {where}", file=sys.stderr)
        if args.key:
            new = ApiKeys(accounts).create(name, args.label or "")
            print(new.key)
            print(
                f"API key {new.info.id} for {name}: shown this once, keep it safe (it is stored hashed)",
                file=sys.stderr,
            )
    finally:
        accounts.close()
    return 0


def cmd_users_list(args) -> int:
    from ..accounts.keys import ApiKeys

    _, accounts = _accounts(args)
    try:
        keys = ApiKeys(accounts)
        rows = [(name, sum(k.active for k in keys.list(name))) for name in accounts.users()]
    finally:
        accounts.close()
    if not rows:
        print("no accounts yet: make one with `siliconfriend users create NAME`", file=sys.stderr)
        return 0
    width = max(8, *(len(name) for name, _ in rows)) + 2
    print(f"{'user':<{width}}API keys")
    for name, active in rows:
        print(f"{name:<{width}}{active}")
    return 0


def cmd_users_delete(args) -> int:
    from ..factory import build_bank

    settings, accounts = _accounts(args)
    try:
        name = accounts.canonical(args.name)
        if name is None:
            raise ValueError(f"no account named {args.name!r}")
        if not args.yes:
            if not sys.stdin.isatty():
                raise ValueError("deleting needs a confirmation: add --yes (nothing was deleted)")
            typed = input(f"delete {name}, its API keys and every memory for good? type the name to confirm: ")
            if typed.strip() != name:
                print("not confirmed: nothing was deleted", file=sys.stderr)
                return 1
        # the memories first, as the web app does: an account left without memories can be deleted
        # again, while memories left without an account could not be reached by anyone
        bank = build_bank(settings, lazy=True)
        try:
            bank.delete_user(name)
        finally:
            bank.close()
        accounts.delete(name)
    finally:
        accounts.close()
    print(f"account {name} deleted, with its API keys, sessions and memories", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    users = sub.add_parser("users", help="accounts, without the web app (for serve-api alone)")
    users_sub = users.add_subparsers(dest="users_command", metavar="ACTION", required=True)
    p = users_sub.add_parser("create", help="make an account (the password is asked for, without echo)")
    p.add_argument("name")
    p.add_argument("--password-stdin", action="store_true", help="read the password as one line from stdin")
    p.add_argument("--key", action="store_true", help="also make an API key for it (printed once)")
    p.add_argument("--label", help="the key's label, e.g. 'Open WebUI' (with --key)")
    p.add_argument("--home", default=argparse.SUPPRESS, help="data folder (same as the global --home)")
    p.set_defaults(func=cmd_users_create)
    p = users_sub.add_parser("list", help="the accounts, with how many live API keys each has")
    p.add_argument("--home", default=argparse.SUPPRESS, help="data folder (same as the global --home)")
    p.set_defaults(func=cmd_users_list)
    p = users_sub.add_parser(
        "delete",
        help="delete an account, its API keys and every memory, for good (stop a server using the same store first)",
    )
    p.add_argument("name")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--home", default=argparse.SUPPRESS, help="data folder (same as the global --home)")
    p.set_defaults(func=cmd_users_delete)
