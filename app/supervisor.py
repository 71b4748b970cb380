"""Runs the service's processes together (web, worker, local student) and stops them together.

Each child gets its own process group, so stopping it also stops what it spawned (vLLM's engine).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Supervisor:
    log_dir: Path
    children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, *, to_log: bool = False
    ) -> None:
        out = open(self.log_dir / f"{name}.log", "ab") if to_log else None  # noqa: SIM115 (child owns it)
        self.children[name] = subprocess.Popen(
            argv, env={**os.environ, **(env or {})}, start_new_session=True, stdout=out, stderr=out
        )
        where = f" (log: {self.log_dir / f'{name}.log'})" if to_log else ""
        print(f"[serve] started {name}, pid {self.children[name].pid}{where}", flush=True)

    def dead(self) -> str | None:
        for name, child in self.children.items():
            if child.poll() is not None:
                return name
        return None

    def wait_http(self, name: str, url: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.children[name].poll() is not None:
                raise RuntimeError(f"{name} exited with {self.children[name].returncode} while starting")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{name} did not answer {url} within {timeout_s:.0f}s")

    def stop_all(self, grace_s: float = 15.0) -> None:
        for child in self.children.values():
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in self.children.values():
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
        for child in self.children.values():
            with contextlib.suppress(ProcessLookupError):  # anything the child left in its group
                os.killpg(child.pid, signal.SIGKILL)


def python() -> str:
    return sys.executable
