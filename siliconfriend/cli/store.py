"""``siliconfriend migrate-store``: move a store between a home folder and PostgreSQL."""

from __future__ import annotations


def cmd_migrate(args) -> int:
    from tqdm import tqdm

    from ..config import Settings
    from .migrate_store import migrate_store

    settings = Settings.load(home=args.home)
    source = args.source or settings.database_url or str(settings.home)
    migrate_store(settings, source, args.to, progress=tqdm)
    return 0


def register(sub) -> None:
    p = sub.add_parser("migrate-store", help="copy accounts and memories to PostgreSQL (or back to a home folder)")
    p.add_argument("--to", required=True, help="postgresql://user:password@host:port/db, or a home folder")
    p.add_argument(
        "--from", dest="source", help="where to copy from (default: the configured store: database_url, else the home)"
    )
    p.set_defaults(func=cmd_migrate)
