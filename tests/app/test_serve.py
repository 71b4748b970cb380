"""`manage.py serve` on the embedded default: bootstraps, prints the demo secrets once, serves, and
stops every child on SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench.support.vllm import free_port
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]


def start_serve(tmp_path: Path, port: int) -> subprocess.Popen[str]:
    servers = ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL")
    env = {
        **{k: v for k, v in os.environ.items() if k not in servers},
        "SKILLGATE_VAR_DIR": str(tmp_path / "var"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "PYTHONUNBUFFERED": "1",  # the banner is read while serve runs
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--no-student", "--no-demo", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def answers_200(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def wait_ready(url: str, proc: subprocess.Popen[str]) -> None:
    def exited() -> str | None:
        if proc.poll() is None:
            return None
        return f"serve exited ({proc.returncode}):\n{proc.stdout.read() if proc.stdout else ''}"

    wait_until(lambda: answers_200(url), timeout=90, interval=0.3, what="serve to be ready", abort=exited)


def banner_dashboard(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """The dashboard address that serve's start-up banner names, and the output up to the banner."""
    assert proc.stdout is not None
    seen = ""
    for line in proc.stdout:
        seen += line
        if found := re.search(r"Skillgate is up: .*?(\S+) \(dashboard\)", line):
            return found.group(1), seen
    raise AssertionError(f"serve exited without its start-up banner:\n{seen}")


def test_serve_runs_on_the_embedded_default_and_stops_cleanly(tmp_path):
    port = free_port()
    proc = start_serve(tmp_path, port)
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", proc)
        assert (tmp_path / "db.sqlite3").exists()
        assert (tmp_path / "var" / "broker" / "queue").is_dir()  # the file transport, no broker server
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert "Demo admin user: demo / " in out
    assert "Demo API key: sg-" in out
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
    worker_log = (tmp_path / "var" / "logs" / "worker.log").read_text()
    assert "Traceback" not in worker_log

    # A second start keeps the demo user and key and does not print secrets again; the banner's
    # dashboard address is the dashboard (its login page), not Django's admin.
    proc = start_serve(tmp_path, port)
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", proc)
        dashboard, before = banner_dashboard(proc)
        assert dashboard == f"http://127.0.0.1:{port}/"
        login = httpx.get(dashboard, follow_redirects=True, timeout=10)
        assert login.status_code == 200 and login.url.path == "/accounts/login/"
        assert login.url.params["next"] == "/"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    out = before + out
    assert "already exist" in out and "sg-" not in out
