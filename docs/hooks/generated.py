"""MkDocs hook (mkdocs.yml ``hooks``): the reference pages' generated parts, built from the code.

A page writes a marker on a line of its own and the build puts the generated Markdown there:

- ``<!-- generated:openapi-api -->``: the operations of ``/api/`` from django-ninja's OpenAPI document;
- ``<!-- generated:openapi-v1 -->``: the endpoints of ``/v1`` from ``GET /v1/openapi.json``'s document;
- ``<!-- generated:cli -->``: every management command of the project's apps and its ``--help``;
- ``<!-- generated:settings -->``: every typed setting each app's ``conf`` declares (core/conf.py), then
  the other environment variables ``app/settings/`` reads through ``core.env``.

Both OpenAPI documents are also published whole, as ``reference/openapi/api.json`` and ``v1.json``. Nothing
here is copied by hand: a new route, command or setting shows up on the next build.
"""

from __future__ import annotations

import ast
import io
import json
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
COMMAND_APPS = ("app", "routing", "diagnostics", "training")
ENV_READERS = {"env_str", "env_optional", "env_bool", "env_int", "env_float", "env_list"}
_cache: dict[str, Any] = {}


def _django() -> None:
    if "django" in _cache:
        return
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "app.settings")
    import django

    django.setup()
    _cache["django"] = True


def _documents() -> dict[str, dict[str, Any]]:
    if "documents" not in _cache:
        _django()
        from app.api.api import api
        from routing.api import endpoints

        _cache["documents"] = {
            "api": api.get_openapi_schema(path_prefix="/api"),
            "v1": endpoints.document(),
        }
    docs: dict[str, dict[str, Any]] = _cache["documents"]
    return docs


def _cell(text: object) -> str:
    return " ".join(str(text or "").split()).replace("|", "\\|")


def _operations(name: str) -> str:
    doc = _documents()[name]
    rows = ["| method | path | what it does |", "| --- | --- | --- |"]
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            if method not in {"get", "post", "put", "patch", "delete"}:
                continue
            text = op.get("summary") or op.get("description") or ""
            rows.append(f"| `{method.upper()}` | `{path}` | {_cell(text)} |")
    info = doc.get("info", {})
    head = (
        f"Generated at build time from *{_cell(info.get('title'))}* (OpenAPI {doc.get('openapi')}, "
        f"version {info.get('version')}); the whole document: [{name}.json](openapi/{name}.json).\n\n"
    )
    return head + "\n".join(rows) + "\n"


def _commands() -> str:
    _django()
    from django.core.management import get_commands, load_command_class

    out = []
    for command, app in sorted(get_commands().items()):
        if app.split(".")[0] not in COMMAND_APPS:
            continue
        parser = load_command_class(app, command).create_parser("manage.py", command)
        text = parser.format_help()
        cut = text.find("  --version")  # Django's own options follow: the same for every command
        if cut > 0:
            text = text[:cut].rstrip() + "\n  (and Django's common options: --settings, --verbosity, ...)"
        out.append(f"### `{command}`\n\n*{app}*\n\n```text\n{text.strip()}\n```\n")
    return "\n".join(out)


CONF_MODULES = (
    "routing.conf",
    "training.conf",
    "diagnostics.conf",
    "diagnostics.slack.conf",
    "app.conf",
    "core.jobs_conf",
    "lab.conf",
)


def _comment_above(lines: list[str], lineno: int) -> str:
    found: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#") and not lines[i].strip().startswith("# ---"):
        found.insert(0, lines[i].strip().lstrip("#").strip())
        i -= 1
    return " ".join(found)


def _typed_settings() -> tuple[str, set[str]]:
    """One table per settings group of each app's conf (core/conf.py's declarations), and the
    variables they cover."""
    import importlib

    from core.conf import describe

    out, covered = [], set()
    for name in CONF_MODULES:
        module = importlib.import_module(name)
        for group in module.GROUPS:
            doc = " ".join((group.__doc__ or "").split())
            out.append(f"### `{name}`: {group.__name__}\n\n{_cell(doc)}\n")
            out.append("| variable | type | default | setting (`get()` field) | meaning |")
            out.append("| --- | --- | --- | --- | --- |")
            for row in describe(group):
                covered.add(row["env"])
                variable = f"`{row['env']}`" if row["env"] else "(none: set in settings)"
                out.append(
                    f"| {variable} | {_cell(row['type'])} | `{_cell(row['default'])}` | "
                    f"`{_cell(row['setting'])}` (`{row['field']}`) | {_cell(row['doc'])} |"
                )
            out.append("")
    return "\n".join(out), covered


def _other_settings(covered: set[str]) -> str:
    """The variables ``app/settings/`` still reads itself through ``core.env`` (Django's own, the
    servers, TLS), with the comment above each."""
    out = []
    for path in sorted((ROOT / "app" / "settings").glob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        rows: dict[str, tuple[str, str, str]] = {}
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                continue
            if node.func.id not in ENV_READERS or not node.args:
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            if first.value in covered:
                continue
            default = ast.unparse(node.args[1]) if len(node.args) > 1 else "(none)"
            kind = node.func.id.removeprefix("env_").replace("optional", "str, optional")
            rows.setdefault(first.value, (kind, default, _comment_above(lines, node.lineno)))
        if not rows:
            continue
        doc = ast.get_docstring(ast.parse(source)) or ""
        out.append(f"### `app/settings/{path.name}`\n\n{_cell(doc.splitlines()[0] if doc else '')}\n")
        out.append("| variable | type | default | note (the comment above it in the code) |")
        out.append("| --- | --- | --- | --- |")
        for name, (kind, default, note) in sorted(rows.items()):
            out.append(f"| `{name}` | {kind} | `{_cell(default)}` | {_cell(note)} |")
        out.append("")
    return "\n".join(out)


def _settings() -> str:
    _django()
    typed, covered = _typed_settings()
    return (
        "## Typed settings\n\n"
        "Generated from the declarations of each app's `conf` (`core/conf.py`'s `setting(...)`): the "
        "variable, the type and range start-up checks, the default, where the value lives in django's "
        "settings and the field code reads (`routing.conf.get().budgets.lease_ttl_s`).\n\n"
        + typed
        + "\n## Other variables\n\n"
        "Read by `app/settings/` itself through `core/env.py` (Django, the servers, TLS): "
        "the type, the default as the code writes it, and the comment above it.\n\n"
        + _other_settings(covered)
    )


GENERATORS = {
    "<!-- generated:openapi-api -->": lambda: _operations("api"),
    "<!-- generated:openapi-v1 -->": lambda: _operations("v1"),
    "<!-- generated:cli -->": _commands,
    "<!-- generated:settings -->": _settings,
}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for name, doc in _documents().items():
        content = json.dumps(doc, indent=2, sort_keys=True)
        files.append(File.generated(config, f"reference/openapi/{name}.json", content=content))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    for marker, build in GENERATORS.items():
        if marker in markdown:
            buffer = io.StringIO()
            with redirect_stdout(buffer):  # a command's import may print; keep the build log clean
                markdown = markdown.replace(marker, build())
    return markdown
