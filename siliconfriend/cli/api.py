"""``siliconfriend keys create|list|revoke`` and ``siliconfriend serve-api``: per-user API keys, and
the OpenAI-compatible API served alone (the web app serves it too, under /v1)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime


def _settings(args: argparse.Namespace):
    from ..config import Settings

    return Settings.load(home=getattr(args, "home", None))


def _keys(args: argparse.Namespace):
    from ..accounts.keys import ApiKeys
    from ..accounts.users import open_accounts

    settings = _settings(args)
    accounts = open_accounts(settings)  # accounts.db in the home, or the database of database_url
    if accounts.canonical(args.user) is None:
        accounts.close()
        where = "the database of database_url" if settings.database_url else str(settings.home)
        raise ValueError(
            f"no account named {args.user!r} in {where} (sign up in the web app, or `siliconfriend users create NAME`)"
        )
    return accounts, ApiKeys(accounts)


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else "-"


def cmd_keys_create(args) -> int:
    accounts, keys = _keys(args)
    try:
        new = keys.create(args.user, args.label or "")
    finally:
        accounts.close()
    print(new.key)
    print(
        f"key {new.info.id} for {args.user}: shown this once, keep it safe (it is stored hashed); "
        f"revoke it with `siliconfriend keys revoke {new.info.id} --user {args.user}`",
        file=sys.stderr,
    )
    return 0


def cmd_keys_list(args) -> int:
    accounts, keys = _keys(args)
    try:
        rows = keys.list(args.user)
    finally:
        accounts.close()
    if not rows:
        print(f"{args.user} has no API keys", file=sys.stderr)
        return 0
    print(f"{'id':>4}  {'key':<14}{'state':<9}{'created':<18}{'last used':<18}label")
    for k in rows:
        state = "active" if k.active else "revoked"
        print(f"{k.id:>4}  {k.prefix + '…':<14}{state:<9}{_when(k.created_at):<18}{_when(k.last_used_at):<18}{k.label}")
    return 0


def cmd_keys_revoke(args) -> int:
    accounts, keys = _keys(args)
    try:
        info = keys.revoke(args.user, args.id)
    finally:
        accounts.close()
    print(f"key {info.id} ({info.prefix}…) of {args.user} revoked: it is refused from now on", file=sys.stderr)
    return 0


def cmd_serve_api(args) -> int:
    import logging

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return serve(_settings(args), host=args.host, port=args.port)


def serve(settings, *, host: str | None = None, port: int | None = None) -> int:
    """Serve the API on 127.0.0.1 unless told otherwise; the companion is built on the first chat."""
    import uvicorn

    from ..api.http_server import server_options, stop_on_sigterm
    from ..api.routes import standalone_app
    from ..factory import build_api_service

    api = build_api_service(settings)
    host = host or settings.host
    port = port or settings.api_port
    print(
        f"SiliconFriend API: data in {settings.home}; base URL http://{host}:{port}/v1 (OpenAPI at /v1/openapi.json)",
        file=sys.stderr,
    )
    # uvicorn stops cleanly on SIGTERM and Ctrl-C, then raises the signal again: ours makes it an
    # interruption, so that the stores are closed and their logs emptied before the process ends
    stop_on_sigterm()
    try:
        # the connection limits: a request head within 15 s, idle keep-alive 5 s (api/http_server.py)
        uvicorn.run(standalone_app(api), host=host, port=port, log_level="info", **server_options())
    except KeyboardInterrupt:
        pass
    finally:
        api.bank.close()
        api.accounts.close()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    keys = sub.add_parser("keys", help="per-user API keys for the OpenAI-compatible API")
    keys_sub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    p = keys_sub.add_parser("create", help="make a key (printed once; stored hashed)")
    p.add_argument("--user", required=True)
    p.add_argument("--label", help="a name to tell it apart, e.g. 'SillyTavern on my laptop'")
    p.add_argument("--home", default=argparse.SUPPRESS, help="data folder (same as the global --home)")
    p.set_defaults(func=cmd_keys_create)
    p = keys_sub.add_parser("list", help="the user's keys (their first characters, never the whole key)")
    p.add_argument("--user", required=True)
    p.add_argument("--home", default=argparse.SUPPRESS, help="data folder (same as the global --home)")
    p.set_defaults(func=cmd_keys_list)
    p = keys_sub.add_parser("revoke", help="refuse a key from now on")
    p.add_argument("id", type=int, help="the key's id (see `keys list`)")
    p.add_argument("--user", required=True)
    p.add_argument("--home", default=argparse.SUPPRESS, help="data folder (same as the global --home)")
    p.set_defaults(func=cmd_keys_revoke)

    p = sub.add_parser("serve-api", help="serve the OpenAI-compatible API and the memory API alone (/v1)")
    p.add_argument("--host", help="address to listen on (default: settings.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: settings.api_port, 7861)")
    p.add_argument("--home", default=argparse.SUPPRESS, help="data folder (same as the global --home)")
    p.set_defaults(func=cmd_serve_api)
