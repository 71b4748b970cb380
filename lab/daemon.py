"""A server binary the lab runs next to itself (Prometheus, Alertmanager): its configuration written into
its own folder, the process started in its own process group, ready when its ``/-/ready`` answers 200,
stopped with SIGTERM (SIGKILL after 10 s)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx
import yaml


class DaemonUnavailable(RuntimeError):
    """The binary is not installed, or it did not become ready; the message says which."""


@dataclass
class ReadyDaemon(ABC):
    """One server: subclasses say its name, binary and arguments; ``config`` becomes ``<name>.yml``."""

    config: dict[str, Any]
    workdir: Path
    port: int
    host: str = "127.0.0.1"
    ready_timeout_s: float = 30.0
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    name = "daemon"
    install_hint = ""

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.workdir / f"{self.name}.yml"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    @abstractmethod
    def program(self) -> str | None:
        """The binary on PATH, or None."""

    @abstractmethod
    def arguments(self) -> list[str]:
        """Its command-line arguments (config_path, a data folder under workdir, host and port)."""

    def start(self) -> Self:
        program = self.program()
        if program is None:
            raise DaemonUnavailable(f"{self.name} is not installed ({self.install_hint})")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [program, *self.arguments()], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-800:]
                raise DaemonUnavailable(f"{self.name} exited with {self.process.returncode}: {tail}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise DaemonUnavailable(f"{self.name} was not ready at {self.url} after {self.ready_timeout_s:g} s")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
