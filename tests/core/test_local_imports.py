"""Function-local imports of project code are the rare, commented exception (docs/design.md section 5):
an import cycle is untied by moving the shared piece down or by a hook, never hidden inside a function.

An import of project code inside a function passes only in an ``AppConfig.ready()`` (the models load after
``apps.py``) or with a comment saying why, on its line or just above it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("app", "bench", "core", "diagnostics", "lab", "routing", "training")


def _project(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] in PROJECT
    return any(alias.name.split(".")[0] in PROJECT for alias in node.names)


def local_imports() -> list[tuple[str, int, str, bool]]:
    """(file, line, the function, whether the line says why) of every function-local project import."""
    found = []
    for package in PROJECT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            source = path.read_text()
            lines = source.splitlines()
            for function in ast.walk(ast.parse(source)):
                if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(function):
                    if isinstance(node, ast.Import | ast.ImportFrom) and _project(node):
                        line, above = lines[node.lineno - 1], lines[node.lineno - 2].strip()
                        said = "#" in line or above.startswith("#") or function.name == "ready"
                        found.append((str(path.relative_to(ROOT)), node.lineno, function.name, said))
    return sorted(set(found))


def test_every_function_local_project_import_says_why():
    found = local_imports()
    unexplained = [f"{path}:{line} (in {function})" for path, line, function, said in found if not said]
    assert unexplained == [], "move these to the top, or untie the cycle; see docs/design.md section 5"


def test_they_are_rare():
    assert len(local_imports()) <= 15
