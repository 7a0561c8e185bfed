"""``siliconfriend migrate-store``: a home folder's accounts and memories into a PostgreSQL
database, or back. Accounts (names, password hashes, preferences, sessions, so that nobody has
to log in again) and every user's memories with their stored vectors; counts verified; safe to
run again (what is already there is left alone)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from memory.store_copy import copy_user
from memory.stores.base import is_postgres_url

from ..accounts.users import Accounts
from ..config import Settings


def _settings_for(settings: Settings, where: str) -> Settings:
    """``settings`` pointed at a database URL or a home folder."""
    if is_postgres_url(where):
        return dataclasses.replace(settings, database_url=where)
    return dataclasses.replace(settings, home=Path(where).expanduser(), database_url="")


def _copy_accounts(source: Accounts, target: Accounts) -> tuple[int, int]:
    """Users and sessions that the target lacks; returns (users, sessions) now in the target."""
    users = source.store.user_rows()
    target.store.copy_in(users, source.store.session_rows())
    have_users = len(target.users())
    have_sessions = len(target.store.session_rows())
    missing = {u.name for u in users} - set(target.users())
    if missing:
        raise RuntimeError(f"accounts not copied (a name taken in another case?): {', '.join(sorted(missing))}")
    return have_users, have_sessions


def migrate_store(
    settings: Settings, source: str, target: str, *, log: Callable[[str], None] = print, progress=None
) -> dict:
    """Copy accounts and memories from ``source`` to ``target`` (each a home folder or a
    postgresql:// URL). Returns what was done, per user."""
    from ..accounts.users import open_accounts as build_accounts
    from ..factory import build_bank

    if (is_postgres_url(source) and source == target) or (
        not is_postgres_url(source) and not is_postgres_url(target) and Path(source).resolve() == Path(target).resolve()
    ):
        raise ValueError("the source and the target are the same store")
    src_settings, dst_settings = _settings_for(settings, source), _settings_for(settings, target)
    if (
        not is_postgres_url(source)
        and not (Path(source).expanduser() / "users").is_dir()
        and not (Path(source).expanduser() / "accounts.db").exists()
    ):
        raise FileNotFoundError(f"{source}: no SiliconFriend home there (no users/ folder, no accounts.db)")
    report: dict = {"users": {}, "accounts": 0, "sessions": 0}
    src_acc, dst_acc = build_accounts(src_settings), build_accounts(dst_settings)
    try:
        report["accounts"], report["sessions"] = _copy_accounts(src_acc, dst_acc)
    finally:
        src_acc.close()
        dst_acc.close()
    # the copy embeds nothing: the second reader's vectors a source has are copied, and those it
    # lacks are made where the target is next used, not by this command
    src_bank = build_bank(dataclasses.replace(src_settings, second_reader=""), progress=None)
    dst_bank = build_bank(dataclasses.replace(dst_settings, second_reader=""), progress=None)
    try:
        users = src_bank.users()
        bar = progress(total=len(users), desc="users", unit="user") if progress else None
        for user in users:
            report["users"][user] = copy_user(src_bank, dst_bank, user)
            if bar:
                bar.update(1)
        if bar:
            bar.close()
    finally:
        src_bank.close()
        dst_bank.close()
    copied = sum(v == "copied" for v in report["users"].values())
    log(
        f"{len(report['users'])} users ({copied} copied, {len(report['users']) - copied} already there, counts "
        f"verified), {report['accounts']} accounts and {report['sessions']} sessions in the target"
    )
    return report
