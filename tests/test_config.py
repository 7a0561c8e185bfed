"""Settings: the only reader of the environment in the app, with the variables users already set
(SILICONFRIEND_*, the OpenAI SDK's OPENAI_*, Gradio's GRADIO_SERVER_NAME / GRADIO_SERVER_PORT)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from siliconfriend.config import Settings

ROOT = Path(__file__).resolve().parents[1]
# the app: everything but the tests; config.py is the one module allowed to read the environment
APP_SOURCES = ["siliconfriend", "memory", "finetune", "prompts", "app.py"]
READER = Path("siliconfriend/config.py")

ENVIRON = {"environ", "environb"}
GETENV = {"getenv", "getenvb"}
# os.environ methods that only change the environment (for this process's libraries or a child),
# when their result is not used: a write, not a read
WRITING_METHODS = {"setdefault", "update", "pop", "clear"}


def environment_reads(source: str) -> list[tuple[int, str]]:
    """(line, code) of every read of the process environment in ``source``: ``os.getenv``,
    ``os.environ`` read in any way (``.get``, ``[...]``, ``in``, copied, passed on). Writes are not
    reads: ``os.environ[K] = v``, ``del os.environ[K]``, and ``os.environ.setdefault / update /
    pop / clear(...)`` as statements. ``import os as o`` and ``from os import environ`` count."""
    tree = ast.parse(source)
    os_names: set[str] = set()
    environ_names: set[str] = set()
    getenv_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "os" or (alias.name.startswith("os.") and alias.asname is None):
                    os_names.add(alias.asname or "os")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            for alias in node.names:
                if alias.name in ENVIRON:
                    environ_names.add(alias.asname or alias.name)
                elif alias.name in GETENV:
                    getenv_names.add(alias.asname or alias.name)
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}

    def is_module(node: ast.AST, names: set[str], attributes: set[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id in names and isinstance(node.ctx, ast.Load)
        return (
            isinstance(node, ast.Attribute)
            and node.attr in attributes
            and isinstance(node.value, ast.Name)
            and node.value.id in os_names
        )

    def is_write(node: ast.AST) -> bool:
        parent = parents.get(node)
        if isinstance(parent, ast.Subscript) and parent.value is node:
            return isinstance(parent.ctx, (ast.Store, ast.Del))
        if isinstance(parent, ast.Attribute) and parent.attr in WRITING_METHODS:
            call = parents.get(parent)
            return isinstance(call, ast.Call) and call.func is parent and isinstance(parents.get(call), ast.Expr)
        return False

    lines = source.splitlines()
    found = []
    for node in ast.walk(tree):
        if is_module(node, getenv_names, GETENV) or (is_module(node, environ_names, ENVIRON) and not is_write(node)):
            line = getattr(node, "lineno", 0)
            found.append((line, lines[line - 1].strip() if line else ""))
    return sorted(found)


def app_modules() -> list[Path]:
    files = []
    for name in APP_SOURCES:
        path = ROOT / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return [f.relative_to(ROOT) for f in files]


def test_only_settings_reads_the_environment():
    modules = app_modules()
    assert READER in modules and Path("app.py") in modules and len(modules) > 50
    reads = {
        f"{path}:{line}: {code}"
        for path in modules
        if path != READER
        for line, code in environment_reads((ROOT / path).read_text(encoding="utf-8"))
    }
    assert not reads, (
        "read the environment in siliconfriend/config.py (Settings) and pass the value down:\n"
        + "\n".join(sorted(reads))
    )
    # the scan sees the reads where they are
    assert len(environment_reads((ROOT / READER).read_text(encoding="utf-8"))) >= 2


@pytest.mark.parametrize(
    "source",
    [
        "import os\nos.environ.get('X')",
        "import os\nx = os.environ['X']",
        "import os\nif 'X' in os.environ: pass",
        "import os\nenv = dict(os.environ, Y='1')",
        "import os\nrun(cmd, env={**os.environ, 'Y': '1'})",
        "import os\nos.environ.copy()",
        "import os\nvalue = os.environ.setdefault('X', '1')",
        "import os\nvalue = os.environ.pop('X', None)",
        "import os\nfor name in os.environ: pass",
        "import os\nos.getenv('X')",
        "import os as system\nsystem.getenv('X')",
        "import os.path\nos.environ.get('X')",
        "from os import environ\nenviron['X']",
        "from os import environ as env\nenv.get('X')",
        "from os import getenv\nf(getenv)",
        "def f():\n    import os\n    return os.environ.get('X')",
    ],
)
def test_the_scan_finds_reads(source):
    assert environment_reads(source), source


@pytest.mark.parametrize(
    "source",
    [
        "import os\nos.environ['FORWARDED_ALLOW_IPS'] = ''",
        "import os\ndel os.environ['X']",
        "import os\nos.environ.setdefault('OMP_NUM_THREADS', '1')",
        "import os\nos.environ.update(HF_HUB_OFFLINE='1')",
        "import os\nos.environ.pop('X', None)",
        "environ = {}\nenviron.get('X')",  # not the process environment
        "import os\nos.path.join('a', 'b')",
        "settings.environ.get('X')",
    ],
)
def test_the_scan_lets_writes_and_other_names_pass(source):
    assert environment_reads(source) == [], source


@pytest.fixture
def clean_environment(monkeypatch):
    """No SiliconFriend, OpenAI or Gradio variable from the shell running the tests."""
    import os

    for name in list(os.environ):
        if name.startswith(("SILICONFRIEND_", "OPENAI_", "GRADIO_")):
            monkeypatch.delenv(name)
    return monkeypatch


def test_the_variables_users_set_reach_the_settings(clean_environment, tmp_path):
    env = clean_environment
    env.setenv("OPENAI_API_KEY", "sk-env")
    env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    env.setenv("OPENAI_MODEL", "gpt-env")
    env.setenv("SILICONFRIEND_PORT", "7000")
    env.setenv("SILICONFRIEND_WEB_MODELS", "hf:smollm2, openai:gpt-4o")
    settings = Settings.load(home=tmp_path)
    assert (settings.openai_api_key, settings.openai_base_url, settings.openai_model) == (
        "sk-env",
        "http://127.0.0.1:9/v1",
        "gpt-env",
    )
    assert settings.default_backend == "openai" and "sk-env" not in repr(settings)
    assert settings.web_models == ("hf:smollm2", "openai:gpt-4o")
    assert settings.web_address == ("127.0.0.1", 7000)
    # Gradio's own variables come before host / port for app.py, as they did; empty ones are unset
    env.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    env.setenv("GRADIO_SERVER_PORT", "")
    env.setenv("OPENAI_API_KEY", "")
    settings = Settings.load(home=tmp_path)
    assert settings.web_address == ("0.0.0.0", 7000)
    assert settings.openai_api_key is None and settings.default_backend == "hf"
    env.setenv("GRADIO_SERVER_PORT", "8123")
    assert Settings.load(home=tmp_path).web_address == ("0.0.0.0", 8123)
    # an argument still wins over everything
    assert Settings.load(home=tmp_path, openai_api_key="sk-arg").openai_api_key == "sk-arg"


def test_the_environment_wins_over_config_toml(clean_environment, tmp_path):
    (tmp_path / "config.toml").write_text('port = 7100\nlang = "zh"\nopenai_model = "gpt-file"\n')
    assert (Settings.load(home=tmp_path).port, Settings.load(home=tmp_path).openai_model) == (7100, "gpt-file")
    clean_environment.setenv("SILICONFRIEND_HOME", str(tmp_path))
    clean_environment.setenv("SILICONFRIEND_LANG", "en")
    clean_environment.setenv("OPENAI_MODEL", "gpt-env")
    settings = Settings.load()
    assert (settings.home, settings.port, settings.lang, settings.openai_model) == (tmp_path, 7100, "en", "gpt-env")


def test_a_bad_number_names_the_setting(clean_environment, tmp_path):
    clean_environment.setenv("GRADIO_SERVER_PORT", "eighty")
    with pytest.raises(ValueError, match="gradio_server_port: 'eighty' is not a number"):
        Settings.load(home=tmp_path)
