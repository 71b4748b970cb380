"""The verifier worker process, and the serving process's handle on one (routing/verifiers/pool.py).

A worker is ``python -m routing.verifiers.workers``: a plain interpreter that imports the verifier
kinds and nothing of Django's app world (no models, no database: about 0.2 s to start). It reads
frames on its stdin and answers on its stdout, one task at a time:

- a frame is a 4-byte big-endian length, a 1-byte type and the payload;
- ``S``: the serving process's ``settings.SKILLGATE`` (pickled: it comes from the parent, which the
  worker trusts anyway), sent before a worker's first task and again after the settings changed, so a
  worker reads the same ``routing.conf.get()`` as its parent (the sandbox's bubblewrap, an override in
  a test);
- ``T``: a task, JSON ``{"config", "request", "message"}``: the verifier is built from ``config``
  (cached in the worker, bounded in bytes like the parent's) and run;
- the answer is JSON ``{"passed", "detail", "error", "retire"}``; ``retire`` says the worker's memory
  grew past :data:`MAX_RSS_BYTES` and it exits after this answer, to be replaced.

At start-up the worker writes one ``R`` frame (ready), so the parent's deadline for a task never
counts the interpreter's start. Whatever a verifier prints goes to stderr (fd 1 is pointed there), so
it cannot corrupt the channel. The worker exits when its stdin closes (the parent went away).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import orjson
from django.conf import settings

from core.conf import forget
from routing.verifiers import VerifierConfigError, build_verifier

HEADER = 5
MAX_RSS_BYTES = 512 * 1024 * 1024
WORKER_NICENESS = 10
STARTUP_TIMEOUT_S = 60.0
_ROOT = Path(__file__).resolve().parents[2]


def frame(kind: bytes, payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + kind + payload


class WorkerGone(Exception):
    """The worker process exited, or broke the channel."""


class WorkerLate(Exception):
    """The worker did not answer before its deadline."""


class WorkerProcess:
    """The serving process's side of one worker: start it, send it frames, read its answers with a
    deadline, kill it. Used by one pool thread at a time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "routing.verifiers.workers"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=_ROOT,
            start_new_session=True,  # its own group: a kill reaches whatever it started too
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in: IO[bytes] = self.proc.stdin
        self._out = self.proc.stdout.fileno()
        self._buffer = b""
        self.ready = False
        self.settings_generation = -1

    def send(self, kind: bytes, payload: bytes) -> None:
        try:
            self._in.write(frame(kind, payload))
            self._in.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerGone(f"the worker's channel broke ({exc})") from None

    def receive(self, timeout_s: float) -> tuple[bytes, bytes]:
        """The next frame (type, payload) within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            if len(self._buffer) >= HEADER:
                size = int.from_bytes(self._buffer[:4], "big")
                if len(self._buffer) >= HEADER + size:
                    kind, payload = self._buffer[4:5], self._buffer[HEADER : HEADER + size]
                    self._buffer = self._buffer[HEADER + size :]
                    return kind, payload
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerLate
            readable, _, _ = select.select([self._out], [], [], left)
            if not readable:
                continue
            chunk = os.read(self._out, 1 << 20)
            if not chunk:
                status = self.proc.poll()
                raise WorkerGone(f"the worker process exited (status {status})")
            self._buffer += chunk

    def wait_ready(self) -> None:
        if not self.ready:
            try:
                kind, _ = self.receive(STARTUP_TIMEOUT_S)
            except WorkerLate:
                raise WorkerGone(f"the worker process did not start within {STARTUP_TIMEOUT_S:g}s") from None
            if kind != b"R":
                raise WorkerGone("the worker process did not say it was ready")
            self.ready = True

    def kill(self) -> None:
        """SIGKILL to its whole group (a stuck C extension does not see anything gentler), then reaped."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.close()

    def close(self) -> None:
        """Close its stdin (it exits on its own) and reap it when it has exited; never blocks long."""
        with contextlib.suppress(OSError):
            self._in.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=2)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


# --- the worker's side ---------------------------------------------------------------------------


def _read_exact(stream: IO[bytes], size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _apply_settings(blob: bytes) -> None:
    skillgate = pickle.loads(blob)  # from the parent process, which started this one
    if settings.configured:
        settings.SKILLGATE = skillgate
    else:
        settings.configure(SKILLGATE=skillgate)
    forget()


def _rss_bytes() -> int:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _run(task: dict[str, Any]) -> dict[str, Any]:
    try:
        verifier = build_verifier(task["config"])
    except VerifierConfigError as exc:
        return {"passed": False, "detail": f"invalid verifier: {exc}", "error": True}
    try:
        verdict = verifier.verify(request=task["request"], message=task["message"])
    except Exception as exc:  # a verifier that breaks judges nothing: an error, never a pass
        return {
            "passed": False,
            "detail": f"the verifier failed: {type(exc).__name__}: {exc}"[:500],
            "error": True,
        }
    return {"passed": verdict.passed, "detail": verdict.detail, "error": verdict.error}


def main() -> None:
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # a verifier's print goes to stderr, never into the channel
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C is for the server; stdin closing ends us
    # Below the serving process on the CPU: where verifications fill every core, the event loop still
    # gets the CPU first (its children, sandboxes included, inherit this).
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICENESS)
    out.write(frame(b"R", b""))
    stream = sys.stdin.buffer
    while True:
        header = _read_exact(stream, HEADER)
        if header is None:
            return
        payload = _read_exact(stream, int.from_bytes(header[:4], "big"))
        if payload is None:
            return
        if header[4:5] == b"S":
            _apply_settings(payload)
            continue
        answer = _run(orjson.loads(payload))
        answer["retire"] = _rss_bytes() > MAX_RSS_BYTES
        out.write(frame(b"A", orjson.dumps(answer)))
        if answer["retire"]:
            return


if __name__ == "__main__":
    main()
