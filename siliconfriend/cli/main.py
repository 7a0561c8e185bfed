"""``siliconfriend``: the command line. Each group of commands lives in its own module and
registers its sub-commands here; heavy imports happen inside the commands."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = [
    "siliconfriend.cli.memory",  # import-memorybank, export-memorybank, memories, forget, eval
    "siliconfriend.cli.chat",  # chat, replay, probe, consolidate
    "siliconfriend.cli.finetune",  # finetune
    "siliconfriend.cli.models",  # prepare-model
    "siliconfriend.cli.bench",  # bench
    "siliconfriend.cli.store",  # migrate-store
    "siliconfriend.cli.api",  # keys, serve-api
    "siliconfriend.cli.users",  # users create|list|delete
]


class OptionsAnywhere(argparse.ArgumentParser):
    """A command's parser that takes options anywhere, as users type them:
    ``memories search --user U "words"`` as well as ``memories search "words" --user U``."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):
        passes_on = any(a.nargs in (argparse.REMAINDER, argparse.PARSER) for a in self._actions)
        if self._intermixing or passes_on:
            return super().parse_known_args(args, namespace)
        self._intermixing = True  # parse_known_intermixed_args calls back into this method
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="siliconfriend", description="A companion with long-term memory (MemoryBank)."
    )
    parser.add_argument("--home", help="data folder (default: $SILICONFRIEND_HOME or ~/.siliconfriend)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OptionsAnywhere)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # a command group not present in this build
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not getattr(args, "passes_options_on", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.extra_args = extra
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from ..config import home_dir
    from ..core.private_files import make_private

    make_private(args.home or home_dir())  # everything written under the home is 0600 / 0700
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (ValueError, FileNotFoundError, PermissionError) as exc:
        print(f"siliconfriend: error: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:  # the store: unreachable database, missing pgvector, newer schema
        from memory.stores.base import SchemaTooNew, StoreUnavailable

        if not isinstance(exc, (StoreUnavailable, SchemaTooNew)):
            raise
        print(f"siliconfriend: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
