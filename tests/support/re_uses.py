"""Every use of Python's ``re`` in a package, for the allow-list tests (tests/security/test_regex_linear.py
for routing, tests/diagnostics/test_regex_linear.py for diagnostics): (file, the pattern's literal, or
``"<not a literal>"``, or ``"from re import"``). ``re.escape`` is not a match and is not listed."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def re_uses(package: str) -> set[tuple[str, str]]:
    found = set()
    for path in sorted((ROOT / package).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        name = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(), name)):
            if isinstance(node, ast.ImportFrom) and node.module == "re":
                found.add((name, "from re import"))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                target = node.func.value
                if isinstance(target, ast.Name) and target.id == "re" and node.func.attr != "escape":
                    arg = node.args[0] if node.args else None
                    found.add((name, arg.value if isinstance(arg, ast.Constant) else "<not a literal>"))
    return found
