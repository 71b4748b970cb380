"""The benchmark's child processes: each in its own session (process group), stopped at the end, on
errors and on Ctrl-C/SIGTERM; and where each runs: ``pin`` puts the gateway under test on one CPU and the
stub and the load generator on the others (``taskset``), as issue 42 measured."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.gateway_overhead.common import ROOT, WORK, BenchError, log

# role -> CPU list for taskset ("gateway": the server measured; "rest": the stub and the load generator)
PINNING: dict[str, str] = {}


def pin(cpus: str) -> None:
    """Pin from now on: the gateways to CPU ``cpus`` (e.g. "0"), everything else to the other CPUs."""
    count = os.cpu_count() or 1
    if count < 2 or shutil.which("taskset") is None:
        raise BenchError("--pin needs taskset and at least 2 CPUs")
    gateway = {int(c) for c in cpus.split(",")}
    rest = [str(c) for c in range(count) if c not in gateway]
    if not rest:
        raise BenchError(f"--pin {cpus} leaves no CPU for the stub and the load generator")
    PINNING.update(gateway=cpus, rest=",".join(rest))


def pinned(role: str, argv: list[str]) -> list[str]:
    """``argv`` under taskset to the CPUs of ``role`` when pinning, else as it is."""
    cpus = PINNING.get(role)
    return ["taskset", "-c", cpus, *argv] if cpus else argv


class Children:
    """Every child runs in its own session (process group); ``stop_all`` ends the groups."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(
        self, name: str, argv: list[str], env: dict[str, str], *, capture: bool = False
    ) -> subprocess.Popen[bytes]:
        if capture:
            stdout: Any = subprocess.PIPE
        else:
            stdout = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the child
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=open(self.log_dir / f"{name}.log", "ab") if capture else subprocess.STDOUT,  # noqa: SIM115
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def stop(self, name: str, grace_s: float = 10.0) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                continue
            # the leader is gone; make sure nothing else of its group lingers
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            break
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

    def stop_all(self) -> None:
        for name in reversed(list(self.procs)):
            self.stop(name)


def run_captured(children: Children, name: str, argv: list[str], env: dict[str, str], timeout: float) -> str:
    proc = children.start(name, argv, env, capture=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(
            f"{name} did not finish within {timeout:.0f}s; see {children.log_dir}/{name}.log"
        ) from None
    finally:
        children.stop(name, grace_s=2.0)
    if proc.returncode != 0:
        tail = (children.log_dir / f"{name}.log").read_text(errors="replace")[-2000:]
        raise BenchError(f"{name} exited with {proc.returncode}:\n{tail}")
    return out.decode()


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def managed_children() -> Iterator[Children]:
    (WORK / "logs").mkdir(parents=True, exist_ok=True)
    for old_log in (WORK / "logs").glob("*.log"):
        old_log.unlink()
    children = Children(WORK / "logs")
    # SIGINT too: a shell starts background jobs with SIGINT ignored, and Ctrl-C must still clean up.
    previous = {
        sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        yield children
    finally:
        for sig in previous:  # a second Ctrl-C must not skip the clean-up
            signal.signal(sig, signal.SIG_IGN)
        children.stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        log("all child processes stopped")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    drop = (
        "DATABASE_URL",
        "CACHE_URL",
        "CELERY_",
        "SKILLGATE_",
        "LITELLM_",
        "DJANGO_",
        "PYTHONPATH",
        "VIRTUAL_ENV",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", **extra)
    return env
