"""Run untrusted Python (a model's answer and its tests) in a bubblewrap sandbox with hard limits.

What the sandbox isolates is stated in routing/verifiers/bwrap.py. The invariants of this module:

- **No sandbox, no run.** Where bubblewrap cannot run here (not installed, user namespaces refused,
  no runtime it can mount; checked once by a real sandboxed run, then cached), :func:`run_python`
  runs nothing and answers a failed result whose stderr is ``sandbox unavailable: <why>``
  (``unavailable`` set). Only ``routing.conf.get().verifiers.sandbox_allow_unsafe`` (development
  only) makes it run the code in a plain subprocess instead, with the same limits, logging a WARNING
  every time.
  That subprocess is no boundary at all: the code can do whatever the gateway's user can.
- **Limits.** Wall clock ``timeout_s`` and ``memory_mb`` are clamped to :data:`MAX_TIMEOUT_S` and
  :data:`MAX_MEMORY_MB` whatever the caller asks. A prelude run inside the namespaces sets
  RLIMIT_AS (memory), RLIMIT_CPU (a little over the wall clock; SIGXCPU counts as a timeout),
  RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_NPROC (counted per user namespace: this run's own budget) and
  no core files, then execs a fresh interpreter on ``solution.py``, which cannot raise them.
- **Deadline.** At ``timeout_s`` bwrap's process group gets SIGKILL; its pid 1 inside dies with it
  (``--die-with-parent``) and the kernel then kills every process of the pid namespace, so nothing
  the program started, ``setsid`` or not, outlives the run.
- **Output.** Each stream keeps :data:`OUTPUT_LIMIT` bytes (head and tail halves, with a marker of
  what was dropped); a stream over :data:`FILE_SIZE_LIMIT` stops the program (SIGXFSZ).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from routing import conf
from routing.verifiers import bwrap, seccomp
from routing.verifiers.bwrap import SandboxUnavailable

log = logging.getLogger(__name__)

OUTPUT_LIMIT = 64 * 1024  # bytes kept per stream (head and tail halves)
FILE_SIZE_LIMIT = 16 * 1024 * 1024
OPEN_FILES_LIMIT = 64
PROCESS_LIMIT = 16  # processes and threads of one run, its interpreter and bwrap's reaper included
MAX_TIMEOUT_S = 60.0  # hard caps, whatever a verifier config or a profile allows
MAX_MEMORY_MB = 2048
_KILL_GRACE_S = 5.0
_PROBE = "print('sandbox-ok')"

# The first program inside the sandbox; argv: memory_bytes cpu_s fsize nproc nofile [secret_fd].
_PRELUDE = """\
import os, resource as r, sys
mem, cpu, fsize, nproc, nofile = (int(v) for v in sys.argv[1:6])
for res, soft, hard in ((r.RLIMIT_AS, mem, mem), (r.RLIMIT_CPU, cpu, cpu + 1),
                        (r.RLIMIT_FSIZE, fsize, fsize), (r.RLIMIT_NPROC, nproc, nproc),
                        (r.RLIMIT_NOFILE, nofile, nofile), (r.RLIMIT_CORE, 0, 0)):
    cap = r.getrlimit(res)[1]
    if cap != r.RLIM_INFINITY:
        soft, hard = min(soft, cap), min(hard, cap)
    r.setrlimit(res, (soft, hard))
os.execv(sys.executable, [sys.executable, "-I", "-B", "solution.py", *sys.argv[6:7]])
"""

__all__ = ["OUTPUT_LIMIT", "SandboxResult", "SandboxUnavailable", "run_python", "sandbox_runtime"]


@dataclass(frozen=True)
class SandboxResult:
    ok: bool
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    unavailable: bool = False  # nothing ran: no sandbox here (stderr says why)


def run_python(source: str, *, timeout_s: float, memory_mb: int, secret: bytes = b"") -> SandboxResult:
    """Run ``source`` as a program; ``ok`` means exit status 0 within ``timeout_s``. Never raises.

    A ``secret`` is not in the program's text, files, arguments or environment: it waits in a pipe
    whose fd number is the program's ``sys.argv[1]``, for the program to read and close before it runs
    anything untrusted (routing/verifiers/python_tests.py reports completion with it)."""
    timeout_s = max(0.1, min(float(timeout_s), MAX_TIMEOUT_S))
    memory_mb = max(32, min(int(memory_mb), MAX_MEMORY_MB))
    try:
        runtime: bwrap.Runtime | None = sandbox_runtime()
    except SandboxUnavailable as exc:
        if not conf.get().verifiers.sandbox_allow_unsafe:
            log.error("Refusing to run untrusted code: sandbox unavailable: %s", exc)
            return SandboxResult(False, None, "", f"sandbox unavailable: {exc}", False, unavailable=True)
        log.warning(
            "SKILLGATE_SANDBOX_ALLOW_UNSAFE is on: running untrusted code WITHOUT a sandbox (%s). "
            "Never use this setting in production.",
            exc,
        )
        runtime = None
    scratch = Path(tempfile.mkdtemp(prefix="skillgate-sandbox-"))
    try:
        with _secret_pipe(secret) as secret_fds:
            limits = {"timeout_s": timeout_s, "memory_mb": memory_mb, "extra": secret_fds}
            if runtime is None:
                return _run_unsafe(source, scratch, **limits)
            return _run_sandboxed(runtime, source, scratch, **limits)
    except Exception as exc:  # a sandbox failure is a failed run, not a crash of the caller
        return SandboxResult(False, None, "", f"sandbox error: {type(exc).__name__}: {exc}", False)
    finally:
        _remove_tree(scratch)


_probe_lock = threading.Lock()
_verified: set[bwrap.Runtime] = set()


def sandbox_runtime() -> bwrap.Runtime:
    """The runtime, once a real sandboxed run has worked with it; raises :class:`SandboxUnavailable`."""
    try:
        verifiers = conf.get().verifiers  # checked at start-up: a wrong value never gets this far
        runtime = bwrap.runtime(verifiers.sandbox_python, verifiers.sandbox_bwrap)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        raise SandboxUnavailable(f"cannot inspect the sandbox runtime: {exc}") from exc
    with _probe_lock:
        if runtime not in _verified:
            scratch = Path(tempfile.mkdtemp(prefix="skillgate-sandbox-probe-"))
            try:
                result = _run_sandboxed(runtime, _PROBE, scratch, timeout_s=20, memory_mb=256, extra=[])
            except Exception as exc:
                raise SandboxUnavailable(f"bwrap cannot start: {type(exc).__name__}: {exc}") from exc
            finally:
                _remove_tree(scratch)
            if not (result.ok and result.stdout == "sandbox-ok\n"):
                why = result.stderr.strip()[-500:] or f"exit status {result.returncode}"
                raise SandboxUnavailable(f"bwrap cannot start a sandbox here: {why}")
            _verified.add(runtime)
    return runtime


def _limits(timeout_s: float, memory_mb: int) -> list[str]:
    cpu_s = max(1, math.ceil(timeout_s)) + 1
    limits = (memory_mb * 1024 * 1024, cpu_s, FILE_SIZE_LIMIT, PROCESS_LIMIT, OPEN_FILES_LIMIT)
    return [str(v) for v in limits]


@contextlib.contextmanager
def _secret_pipe(secret: bytes) -> Any:
    """``[read fd]`` of a pipe holding ``secret`` (closed for writing), or ``[]`` without one."""
    if not secret:
        yield []
        return
    read, write = os.pipe()
    try:
        os.write(write, secret)  # far below a pipe's buffer: never blocks
        os.close(write)
        yield [read]
    finally:
        os.close(read)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _run_sandboxed(
    runtime: bwrap.Runtime, source: str, scratch: Path, *, timeout_s: float, memory_mb: int, extra: list[int]
) -> SandboxResult:
    code = source.encode("utf-8")
    program = seccomp.program()
    fds = [_memfd("solution.py", code)]
    if program is not None:
        fds.append(_memfd("seccomp", program))
    try:
        argv = [runtime.python, "-I", "-B", "-c", _PRELUDE, *_limits(timeout_s, memory_mb), *map(str, extra)]
        cmd = bwrap.command(runtime, source_fd=fds[0], seccomp_fd=fds[1] if len(fds) > 1 else None, argv=argv)
        # An empty environment: bwrap's pid 1 inside keeps it, and /proc/1/environ shows it.
        return _execute(cmd, scratch, cwd="/", env={}, pass_fds=[*fds, *extra], timeout_s=timeout_s)
    finally:
        for fd in fds:
            os.close(fd)


def _run_unsafe(
    source: str, scratch: Path, *, timeout_s: float, memory_mb: int, extra: list[int]
) -> SandboxResult:
    work = scratch / "work"
    work.mkdir()
    (work / "solution.py").write_text(source, encoding="utf-8")
    argv = [sys.executable, "-I", "-B", "-c", _PRELUDE, *_limits(timeout_s, memory_mb), *map(str, extra)]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8"}
    return _execute(argv, scratch, cwd=str(work), env=env, pass_fds=extra, timeout_s=timeout_s)


def _execute(
    argv: list[str], scratch: Path, *, cwd: str, env: dict[str, str], pass_fds: list[int], timeout_s: float
) -> SandboxResult:
    out_path, err_path = scratch / "stdout", scratch / "stderr"
    timed_out = False
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            close_fds=True,
            pass_fds=pass_fds,
        )
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            proc.wait(timeout=_KILL_GRACE_S)
        finally:
            _kill_group(proc.pid)
    returncode = proc.returncode
    if returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        timed_out = True  # the CPU rlimit struck before the wall clock (bwrap reports 128 + signal)
    return SandboxResult(
        ok=returncode == 0 and not timed_out,
        returncode=returncode,
        stdout=_read_capped(out_path),
        stderr=_read_capped(err_path),
        timed_out=timed_out,
    )


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


def _read_capped(path: Path, limit: int = OUTPUT_LIMIT) -> str:
    size = path.stat().st_size
    with open(path, "rb") as fh:
        if size <= limit:
            data = fh.read()
        else:
            head = fh.read(limit // 2)
            fh.seek(size - limit // 2)
            dropped = size - 2 * (limit // 2)
            data = head + f"\n...[{dropped} bytes truncated]...\n".encode() + fh.read()
    return data.decode("utf-8", errors="replace")


def _remove_tree(root: Path) -> None:
    def make_writable_and_retry(func: Any, path: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(path), stat.S_IRWXU)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, stat.S_IRWXU)
            func(path)
        except OSError:
            pass

    shutil.rmtree(root, onerror=make_writable_and_retry)
