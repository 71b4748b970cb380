"""The house rule that no module outside migrations is over 450 lines (docs/design.md): a module that
outgrows it splits into modules named for what they do."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 450
# Not the project's modules: the virtualenv, npm's packages, the built docs site, run-time output, and the
# recorded evaluation cases of eval/ (third-party data under its own licenses; ruff and mypy skip it too).
SKIPPED = {".venv", "node_modules", "site", "var", "test-artifacts", ".git", "__pycache__", "migrations"}
SKIPPED_AT_ROOT = {"eval"}


def modules(folder: Path) -> list[Path]:
    found = []
    for path in folder.iterdir():
        if path.is_dir():
            if path.name not in SKIPPED and not (folder == ROOT and path.name in SKIPPED_AT_ROOT):
                found += modules(path)
        elif path.suffix == ".py":
            found.append(path)
    return found


def test_no_module_outside_migrations_is_over_450_lines() -> None:
    sizes = {p.relative_to(ROOT): len(p.read_text(errors="replace").splitlines()) for p in modules(ROOT)}
    assert len(sizes) > 100  # the walk found the project
    over = sorted(f"{path} ({n} lines)" for path, n in sizes.items() if n > MAX_LINES)
    assert not over, f"over {MAX_LINES} lines; split them into modules named for what they do: {over}"
