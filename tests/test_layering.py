"""The arrows of docs/architecture.md, checked on the source: every import (at the top of a module
or inside a function) must point the way the rooms allow. A new import against them fails here
with the file, the line and the rule it breaks."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("siliconfriend", "memory", "finetune", "prompts", "app.py")

# (room, rooms and modules it must not import, why); a room is a module or a package prefix
RULES = [
    ("memory", ("siliconfriend", "prompts", "finetune", "app"), "memory/ imports nothing of the app"),
    (
        "memory.stores.base",
        ("psycopg", "pgvector", "faiss", "memory.stores.pg_db"),
        "the store interface names no engine",
    ),
    ("siliconfriend.core", ("siliconfriend.web", "siliconfriend.api", "siliconfriend.cli"), "core is below them"),
    ("siliconfriend.core", ("siliconfriend.bench", "siliconfriend.factory"), "core is below them"),
    ("siliconfriend.core", ("psycopg", "memory.stores.pg_db", "memory.stores.postgres"), "core never loads psycopg"),
    ("siliconfriend.web", ("siliconfriend.api", "siliconfriend.cli", "siliconfriend.bench"), "web is below them"),
    ("siliconfriend.web", ("siliconfriend.factory",), "web receives what the factory builds"),
    ("siliconfriend.web.common", ("psycopg", "memory.stores.pg_db"), "the pages never load psycopg"),
    ("siliconfriend.web", ("siliconfriend.accounts.postgres",), "the web app gets its accounts store built"),
    ("siliconfriend.api", ("siliconfriend.cli", "siliconfriend.bench", "siliconfriend.factory"), "api is below them"),
    # api and web share what both need through modules both import (siliconfriend.accounts,
    # siliconfriend.i18n, the core), never through each other's
    ("siliconfriend.api", ("siliconfriend.web",), "api and web share through modules both import"),
    ("siliconfriend.accounts", ("siliconfriend.web", "siliconfriend.api"), "accounts are below the web and the API"),
    ("siliconfriend.accounts", ("siliconfriend.cli", "siliconfriend.bench", "siliconfriend.factory"), "below them"),
    ("siliconfriend.accounts", ("siliconfriend.core", "siliconfriend.backends"), "accounts know no companion"),
    ("siliconfriend.i18n", ("siliconfriend", "memory"), "the words know nothing (but the messages' type)"),
    ("siliconfriend.core", ("siliconfriend.accounts",), "the companion knows no accounts"),
    ("siliconfriend.backends", ("siliconfriend.core", "siliconfriend.web", "siliconfriend.api"), "backends are below"),
    ("siliconfriend.backends", ("siliconfriend.cli", "siliconfriend.bench", "siliconfriend.factory"), "below"),
    ("siliconfriend.config", ("siliconfriend", "memory"), "config knows nothing"),
    ("app", ("siliconfriend.cli", "siliconfriend.bench", "finetune"), "app.py is the web app's entry point"),
]
# only the PostgreSQL store loads psycopg (and only when a database URL is configured)
RULES += [
    (room, ("psycopg", "memory.stores.pg_db"), "only accounts.postgres loads psycopg")
    for room in (
        "siliconfriend.accounts.store",
        "siliconfriend.accounts.sqlite",
        "siliconfriend.accounts.users",
        "siliconfriend.accounts.keys",
        "siliconfriend.accounts.rate_limit",
    )
]
# the app never imports finetune (a trained adapter reaches it only as a folder); only the CLI
# command that runs a training does
RULES += [
    (room, ("finetune",), "the app never imports finetune: adapters come as folders")
    for room in ("siliconfriend.core", "siliconfriend.web", "siliconfriend.api", "siliconfriend.backends")
]
# exceptions to the rules above: (room, module it may import all the same, why)
MAY = [("siliconfriend.i18n", "memory.message", "a message is defined where it is said, with its words")]
# the factory is imported only from above it: the entry points
FACTORY_USERS = ("app", "siliconfriend.cli", "siliconfriend.bench", "siliconfriend.factory")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path`` (``from x import y`` gives x.y
    too, so that ``from ..web import service`` names ``siliconfriend.web.service``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            out.append((node.lineno, base))
            out += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return out


def within(name: str, room: str) -> bool:
    return name == room or name.startswith(room + ".")


def sources() -> list[Path]:
    files: list[Path] = []
    for name in SOURCES:
        path = ROOT / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def test_every_import_points_the_way_the_rooms_allow():
    broken = []
    for path in sources():
        here = module_name(path)
        for line, target in imports(path):
            for room, forbidden, why in RULES:
                allowed = any(within(here, r) and within(target, m) for r, m, _ in MAY)
                if within(here, room) and any(within(target, f) for f in forbidden) and not allowed:
                    broken.append(f"{path.relative_to(ROOT)}:{line} imports {target}: {why}")
            if within(target, "siliconfriend.factory") and not any(within(here, u) for u in FACTORY_USERS):
                broken.append(f"{path.relative_to(ROOT)}:{line} imports the factory, which sits above it")
    assert not broken, "\n".join(sorted(set(broken)))


def test_the_rules_catch_what_they_forbid(tmp_path):
    """The scan itself: a relative import against a rule is resolved and caught."""
    fake = ROOT / "siliconfriend" / "core" / "_layering_probe.py"
    source = (
        "from ..web import service\nfrom memory.stores import pg_db\n\ndef f():\n    from ..factory import build_bank\n"
    )
    fake.write_text(source, encoding="utf-8")
    try:
        found = {target for _, target in imports(fake)}
    finally:
        fake.unlink()
    assert {"siliconfriend.web.service", "memory.stores.pg_db", "siliconfriend.factory.build_bank"} <= found
    assert any(within("siliconfriend.web.service", f) for f in RULES[2][1])


def _memory_graph() -> dict[str, set[str]]:
    """memory/'s modules and the modules of memory/ each imports (at the top or in a function;
    a name imported from a module counts as that module)."""
    paths = {module_name(p): p for p in sorted((ROOT / "memory").rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        edges = set()
        for _, target in imports(path):
            while target and target not in paths:
                target = target.rpartition(".")[0]
            if target and target != name and not (ROOT / Path(*target.split("."))).is_dir():
                edges.add(target)  # a package's own __init__ (only words) is no step
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_module_of_memory_imports_itself_back():
    """Inside memory/, imports make no circle: a module never reaches itself through what it
    imports (the store interface below the bank, an engine's parts below its store)."""
    assert _cycles(_memory_graph()) == []


def test_the_circle_check_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
