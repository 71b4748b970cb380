"""Every command a docs page gives is one that exists (issue 41), checked without running anything.

The command blocks of the guides run on a fresh server in ``test_guide_commands.py`` (slow); here, in the
default suite: every command block of a page is either run by that test or marked with why it is not
(``<!-- guide-test: skip: why -->``), and every ``manage.py``, ``make`` and ``python -m`` command written
anywhere in the docs (blocks and inline code) names a command, option, target or module that exists,
so a renamed option cannot leave a guide behind; every file of the repository the docs' code names is
there (a test to reproduce a number, a module to read).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

from tests.guides.test_guide_commands import RUN
from tests.support.guides import DOCS, ROOT, blocks

PAGES = sorted(DOCS.rglob("*.md"))
GUIDES = [DOCS / "getting-started.md", *sorted((DOCS / "guides").glob("*.md"))]
GUIDES += sorted((DOCS / "operations").glob("*.md"))
_CODE = re.compile(r"```[a-z]*\n(.*?)```|`([^`\n]+)`", re.S)  # the docs' own text
_TARGET = re.compile(r"^([a-z][a-z-]*):", re.M)
_PATH = re.compile(
    r"(?<![\w/.-])((?:app|bench|core|diagnostics|docs|eval|infra|routing|templates|tests|training)/[\w./-]*\w)"
)


def test_every_command_block_of_a_guide_runs_or_says_why_not() -> None:
    for page in GUIDES:
        found = blocks(page)
        for block in found:
            assert block.runs or len(block.why) > 10, f"{page.name}:{block.line}: say why it does not run"
            if block.runs:
                assert "sg-…" not in block.body and "sg-..." not in block.body, f"{page.name}:{block.line}"
        running = any(block.runs for block in found)
        assert running == (page in RUN or page.name == "mcp.md"), f"{page.name}: run its blocks in the test"


def test_the_guides_give_commands_to_run() -> None:
    ran = sum(block.runs for page in RUN for block in blocks(page))
    skipped = [(p.name, b.line) for p in GUIDES if p.name != "mcp.md" for b in blocks(p) if not b.runs]
    assert ran >= 6 and len(skipped) <= 5, (ran, skipped)


def _commands(text: str) -> list[list[str]]:
    """Each command line written in ``text``'s code (blocks and inline), split as a shell would."""
    found = []
    for match in _CODE.finditer(text):
        code = match[1] or match[2]
        for line in code.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].replace("…", "").replace("[", "").replace("]", "")
            try:
                words = shlex.split(line)
            except ValueError:  # an unbalanced quote: a line of a longer command (a quoted program)
                continue
            found.append(words)
    return found


def _parser(name: str) -> argparse.ArgumentParser:
    return load_command_class(get_commands()[name], name).create_parser("manage.py", name)


def _unknown_options(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is not None and words and words[0] in sub.choices:
        return _unknown_options(sub.choices[words[0]], words[1:])
    return [
        w for w in words if w.startswith("--") and w.split("=", 1)[0] not in parser._option_string_actions
    ]


def test_every_manage_py_command_in_the_docs_exists_with_its_options() -> None:
    commands = get_commands()
    problems = []
    seen = 0
    for page in PAGES:
        for words in _commands(page.read_text()):
            if "manage.py" not in words:
                continue
            rest = words[words.index("manage.py") + 1 :]
            if not rest or not re.fullmatch(r"[a-z_]+", rest[0]):
                continue
            seen += 1
            if rest[0] not in commands:
                problems.append(f"{page.relative_to(DOCS)}: no command {rest[0]!r}")
                continue
            args = []
            for word in rest[1:]:
                if word in ("|", "&&", ";", ">", "2>&1") or word.startswith(("$(", ")")):
                    break
                args.append(word)
            unknown = _unknown_options(_parser(rest[0]), args)
            problems += [f"{page.relative_to(DOCS)}: manage.py {rest[0]} has no {w}" for w in unknown]
    assert seen >= 20
    assert problems == []


def test_every_make_target_and_python_module_in_the_docs_exists() -> None:
    targets = set(_TARGET.findall((ROOT / "Makefile").read_text()))
    problems = []
    for page in PAGES:
        for words in _commands(page.read_text()):
            for i, word in enumerate(words[:-1]):
                following = words[i + 1]
                if word == "make" and re.fullmatch(r"[a-z][a-z-]*", following) and following not in targets:
                    problems.append(f"{page.relative_to(DOCS)}: no make target {following!r}")
                module = word == "-m" and i and words[i - 1].endswith("python") and following != "pytest"
                if module and importlib.util.find_spec(following) is None:
                    problems.append(f"{page.relative_to(DOCS)}: no module {following!r}")
    assert problems == []


@pytest.mark.parametrize("page", [p for p in GUIDES if p.name != "mcp.md"], ids=lambda p: p.name)
def test_a_running_block_talks_to_the_local_server_only(page: Path) -> None:
    for block in blocks(page):
        if block.runs:
            hosts = re.findall(r"https?://([^/:\s\"']+)", block.body)
            assert set(hosts) <= {"127.0.0.1", "localhost"}, (page.name, block.line, hosts)


def _exists(path: str) -> bool:
    """``path``, or files it starts the name of (``tests/deploy/test_onebox_*``, ``hw15``-``hw20``), or a
    migration named the way Django names it (``routing/0009_backend_replicas``)."""
    app, _, rest = path.partition("/")
    found = (ROOT / path).exists() or any(ROOT.glob(path + "*")) or any(DOCS.glob(path + "*"))
    return found or any((ROOT / app / "migrations").glob(rest + ".py"))


def test_every_repository_file_the_docs_name_exists() -> None:
    missing = []
    named = 0
    for page in PAGES:
        for match in _CODE.finditer(page.read_text()):
            for path in _PATH.findall(match[1] or match[2]):
                named += 1
                if "<" not in path and not _exists(path):
                    missing.append(f"{page.relative_to(DOCS)}: {path}")
    assert named >= 100
    assert missing == []
