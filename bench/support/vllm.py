"""Run a real vLLM OpenAI-compatible server (CPU backend) for tests and benchmarks.

    with VllmServer(model_dir, "tiny", lora_modules={"student-v1": lora_dir}) as server:
        litellm.completion(model="hosted_vllm/student-v1", api_base=server.base_url, ...)

The server is started through ``infra/vllm_serve.sh`` in its own process group; on exit the whole group is
signalled (SIGTERM, then SIGKILL after a grace period), because SIGTERM to the API server alone can leave
its engine-core and worker processes running. Plain helpers, no pytest fixtures here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVE_SCRIPT = REPO_ROOT / "infra" / "vllm_serve.sh"


class VllmError(RuntimeError):
    """The server failed to start, died, or answered an admin call with an error."""


def vllm_available() -> bool:
    """True when vLLM (and torch) can be imported by this interpreter's venv; does not import them."""
    return all(importlib.util.find_spec(name) is not None for name in ("vllm", "torch"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``, read from /proc."""
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may contain spaces, so split after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return sorted(members)


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :].split()[0] != "Z"


class VllmServer:
    """A vLLM API server for ``model_dir`` on ``127.0.0.1:port``; a context manager.

    ``lora_modules`` maps adapter names to folders loaded at start-up; more can be loaded at run time
    with :meth:`load_lora`. The server's output goes to ``log_path`` (in a temporary folder unless
    ``log_dir`` is given).
    """

    def __init__(
        self,
        model_dir: Path,
        served_name: str,
        port: int | None = None,
        lora_modules: Mapping[str, Path] | None = None,
        *,
        venv: Path | None = None,
        startup_timeout: float | None = None,
        stop_grace: float = 20.0,
        log_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.served_name = served_name
        self.port = port or free_port()
        self.lora_modules = {name: Path(path) for name, path in (lora_modules or {}).items()}
        self.venv = Path(venv) if venv else Path(sys.prefix)
        # 40-100 s on a busy 2-core machine; SKILLGATE_VLLM_STARTUP_TIMEOUT raises it for slower ones.
        self.startup_timeout = startup_timeout or float(
            os.environ.get("SKILLGATE_VLLM_STARTUP_TIMEOUT", "180")
        )
        self.stop_grace = stop_grace
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="vllm-server-"))
        self.log_path = self.log_dir / f"vllm-{self.port}.log"
        self.extra_env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.pgid: int | None = None
        self.seen_pids: set[int] = set()
        self.startup_s: float | None = None

    # -- addresses -------------------------------------------------------------------------------

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL (what litellm calls ``api_base``)."""
        return f"{self.root_url}/v1"

    # -- life cycle ------------------------------------------------------------------------------

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self.process is not None:
            raise VllmError("server already started")
        env = {
            **os.environ,
            "VENV": str(self.venv),
            "MODEL_DIR": str(self.model_dir),
            "SERVED_NAME": self.served_name,
            "PORT": str(self.port),
            "LORA_MODULES": " ".join(f"{name}={path}" for name, path in self.lora_modules.items()),
            **self.extra_env,
        }
        self.log_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                ["bash", str(SERVE_SCRIPT)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=REPO_ROOT,
                start_new_session=True,  # its own process group: stop() signals the whole group
            )
        self.pgid = self.process.pid
        try:
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started

    def _wait_ready(self, started: float) -> None:
        assert self.process is not None
        deadline = started + self.startup_timeout
        while True:
            self._note_pids()
            if self.process.poll() is not None:
                raise VllmError(
                    f"vLLM exited with code {self.process.returncode} during start-up; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                self.models()
                self._note_pids()
                return
            except (OSError, VllmError):
                pass
            if time.monotonic() > deadline:
                raise VllmError(
                    f"vLLM did not answer /v1/models within {self.startup_timeout:.0f} s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def _note_pids(self) -> None:
        if self.pgid is not None:
            self.seen_pids.update(process_group_members(self.pgid))

    def running_pids(self) -> list[int]:
        """Processes still alive from this server: its process group plus any pid seen in it earlier."""
        if self.pgid is None:
            return []
        return sorted(set(process_group_members(self.pgid)) | {p for p in self.seen_pids if pid_alive(p)})

    def stop(self) -> None:
        """SIGTERM the process group, wait up to ``stop_grace`` seconds, then SIGKILL what is left."""
        if self.process is None or self.pgid is None:
            return
        self._note_pids()
        self._signal_all(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace
        while self.running_pids() and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.2)
        if self.running_pids():
            self._signal_all(signal.SIGKILL)
            deadline = time.monotonic() + 10
            while self.running_pids() and time.monotonic() < deadline:
                self._reap()
                time.sleep(0.1)
        self._reap()
        if self.process.poll() is None:
            self.process.wait(timeout=5)

    def _signal_all(self, sig: signal.Signals) -> None:
        assert self.pgid is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, sig)
        # Processes that left the group (none expected) but were seen in it.
        for pid in self.seen_pids:
            if pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)

    def _reap(self) -> None:
        if self.process is not None:
            self.process.poll()

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # -- HTTP ------------------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 30.0
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.root_url}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"} if data is not None else {},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read().decode()
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")
            raise VllmError(f"{method} {path} answered {err.code}: {detail}") from err
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw

    def models(self) -> list[str]:
        """Names served now: the base model's served name and every loaded adapter."""
        payload = self._request("GET", "/v1/models", timeout=5.0)
        return [str(model["id"]) for model in payload["data"]]

    def load_lora(self, name: str, path: Path) -> None:
        """Load an adapter at run time (needs VLLM_ALLOW_RUNTIME_LORA_UPDATING, set by vllm_serve.sh)."""
        self._request(
            "POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)}, timeout=120
        )

    def unload_lora(self, name: str) -> None:
        self._request("POST", "/v1/unload_lora_adapter", {"lora_name": name}, timeout=60)

    def rss_bytes(self) -> int:
        """Resident memory of all the server's processes together."""
        total = 0
        for pid in self.running_pids():
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            except OSError:
                continue
        return total
