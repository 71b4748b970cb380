"""The command blocks of a docs page, and a fresh `manage.py serve` to run them against (issues 40, 41).

A command block is a fenced ```bash, ```sh or ```python block. The tests run a page's blocks in order in
one shell from the repository's root (so a variable one block sets, like ``$ADMIN_KEY``, is there for the
next) against a fresh server, as written: the only change is the address (``localhost:8000`` and
``127.0.0.1:8000`` become the test server's). A block that cannot run here is preceded by a visible
marker that says why::

    <!-- guide-test: skip: needs npm ci (the registry); tests/clients/test_agent_clis.py runs the CLI -->

and every other block must run and succeed. Other fences (```toml, ```json, output without a language)
are not commands and are not run.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.support.vllm import free_port
from tests.support.lab import free_port_base
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
COMMAND_LANGUAGES = ("bash", "sh", "python")
SKIP = "<!-- guide-test: skip:"
# A page's own text (trusted: the repository's docs), not caller input.
_BLOCK = re.compile(
    r"(?:<!-- guide-test: skip: (?P<why>[^>]*?) -->\n)?```(?P<lang>bash|sh|python)\n(?P<body>.*?)```", re.S
)
_ADDRESSES = ("localhost:8000", "127.0.0.1:8000")
DONE = "--- block done"
# What the test's shell must not inherit: the test run's own servers and settings.
_SERVERS = ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "CACHE_KEY_PREFIX", "DJANGO_SETTINGS_MODULE")


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    why: str  # why it is not run; "" for a block that runs
    line: int  # where it starts in the page

    @property
    def runs(self) -> bool:
        return not self.why


def blocks(page: Path) -> list[Block]:
    """Every command block of ``page``, in order."""
    text = page.read_text()
    return [
        Block(m["lang"], m["body"], (m["why"] or "").strip(), text.count("\n", 0, m.start("body")))
        for m in _BLOCK.finditer(text)
    ]


def script(page: Path, port: int) -> str:
    """One bash script that runs every block of ``page`` that runs, each followed by :data:`DONE`."""
    lines = ["set -euo pipefail", f"cd {ROOT}"]
    for block in blocks(page):
        if not block.runs:
            continue
        body = block.body
        for address in _ADDRESSES:
            body = body.replace(address, f"127.0.0.1:{port}")
        lines.append(body if block.lang != "python" else f".venv/bin/python - <<'PY'\n{body}PY")
        lines.append(f"echo '{DONE}'")
    return "\n".join(lines) + "\n"


def clean_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a fresh `make run` in a new folder: no SKILLGATE_* setting, SQLite, its own var/
    and its own lab (var/lab in that folder, on ports no other test's lab holds)."""
    return {
        **{k: v for k, v in os.environ.items() if k not in _SERVERS and not k.startswith("SKILLGATE_")},
        "SKILLGATE_VAR_DIR": str(tmp_path / "var"),
        "SKILLGATE_LAB_DIR": str(tmp_path / "var" / "lab"),
        "SKILLGATE_LAB_PORT_BASE": str(free_port_base()),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "PYTHONUNBUFFERED": "1",
    }


def lab_down(env: Mapping[str, str]) -> None:
    """`manage.py lab down` for a guide that started the lab and stopped before its own `lab down`."""
    if Path(env["SKILLGATE_LAB_DIR"]).is_dir():
        subprocess.run(
            [sys.executable, "manage.py", "lab", "down"],
            cwd=ROOT,
            env=dict(env),
            capture_output=True,
            timeout=120,
        )


@dataclass(frozen=True)
class Serve:
    port: int
    env: dict[str, str]  # the shell's environment: the server's database and var/, none of its settings
    log: Path

    def run(self, page: Path, timeout: float = 400) -> subprocess.CompletedProcess[str]:
        """Runs ``page``'s blocks in one shell; its stdout and stderr together are in ``.stdout``."""
        return subprocess.run(
            ["bash", "-c", script(page, self.port)],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )


@contextlib.contextmanager
def fresh_serve(tmp_path: Path, server_env: Mapping[str, str] | None = None) -> Iterator[Serve]:
    """`manage.py serve --no-student --no-demo` (what `make run` runs, without the local vLLM and the demo
    traffic) on a fresh SQLite database, ready (``/readyz``); stopped with SIGTERM afterwards.
    ``server_env``: settings for the server only (the shell that runs the guide gets none of them)."""
    port = free_port()
    env = clean_env(tmp_path)
    log = tmp_path / "serve.log"
    command = [sys.executable, "manage.py", "serve", "--no-student", "--no-demo", "--no-prometheus"]
    with log.open("wb") as out:
        serve = subprocess.Popen(
            [*command, "--port", str(port)],
            cwd=ROOT,
            env={**env, **(server_env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def ready() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(
            ready,
            timeout=300,  # migrations on a fresh database, on a busy machine
            interval=0.5,
            what="serve to be ready",
            abort=lambda: None if serve.poll() is None else "serve exited: " + log.read_text()[-2000:],
        )
        yield Serve(port=port, env=env, log=log)
    finally:
        lab_down(env)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(serve.pid, signal.SIGTERM)
        try:
            serve.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait(30)
