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
  no core files, then runs ``solution.py`` in that same interpreter (one start, not two): hard limits
  equal the soft ones and nothing inside holds CAP_SYS_RESOURCE, so the program cannot raise them.
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
import time
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

# The first program inside the sandbox; argv: memory_bytes cpu_s fsize nproc nofile started_fd. Once
# its limits are set, before anything of the program runs, it writes one byte on started_fd: a run
# without that byte never started (bwrap refused: no namespace, no memory), which no program can fake.
_PRELUDE = """\
import os, resource as r, sys
mem, cpu, fsize, nproc, nofile, started = (int(v) for v in sys.argv[1:7])
for res, soft, hard in ((r.RLIMIT_AS, mem, mem), (r.RLIMIT_CPU, cpu, cpu + 1),
                        (r.RLIMIT_FSIZE, fsize, fsize), (r.RLIMIT_NPROC, nproc, nproc),
                        (r.RLIMIT_NOFILE, nofile, nofile), (r.RLIMIT_CORE, 0, 0)):
    cap = r.getrlimit(res)[1]
    if cap != r.RLIM_INFINITY:
        soft, hard = min(soft, cap), min(hard, cap)
    r.setrlimit(res, (soft, hard))
os.write(started, b"1")
os.close(started)
del mem, cpu, fsize, nproc, nofile, res, soft, hard, cap, started
sys.argv[:] = ["solution.py"]
with open("solution.py", "rb") as source:
    code = compile(source.read(), "solution.py", "exec")
main = type(sys)("__main__")
main.__file__, main.__builtins__ = "solution.py", __builtins__
sys.modules["__main__"] = main
exec(code, main.__dict__)
"""

__all__ = ["OUTPUT_LIMIT", "SandboxResult", "SandboxUnavailable", "run_pair", "run_python", "sandbox_runtime"]


@dataclass(frozen=True)
class SandboxResult:
    ok: bool
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    unavailable: bool = False  # nothing ran: no sandbox here (stderr says why)
    broken: bool = False  # the sandbox machinery failed (stderr: "sandbox error: ..."): nothing was judged


def run_python(source: str, *, timeout_s: float, memory_mb: int) -> SandboxResult:
    """Run ``source`` as a program; ``ok`` means exit status 0 within ``timeout_s``. Never raises."""
    return _run([source], [[]], timeout_s=timeout_s, memory_mb=memory_mb)[0]


def run_pair(
    server: str,
    client: str,
    *,
    server_fds: list[int],
    client_fds: list[int],
    timeout_s: float,
    memory_mb: int,
) -> tuple[SandboxResult, SandboxResult]:
    """Run two programs at once, each in a sandbox of its own (its own pid, IPC and network
    namespaces, its own limits): ``server_fds`` are passed to the first only, ``client_fds`` to the
    second only, and the caller's copies are closed once both started (so a pipe between them sees
    its end when the other side dies). Waits for the client, until ``timeout_s`` in all; the
    server's result has ``returncode`` None when it was still running as the client ended (then it
    is killed). Both are killed at the deadline. Never raises."""
    first, second = _run([server, client], [server_fds, client_fds], timeout_s=timeout_s, memory_mb=memory_mb)
    return first, second


def _unavailable(why: str, count: int) -> list[SandboxResult]:
    return [SandboxResult(False, None, "", why, False, unavailable=True)] * count


def _run(
    sources: list[str], fds: list[list[int]], *, timeout_s: float, memory_mb: int
) -> list[SandboxResult]:
    """The last program is waited for; the others are judged running or ended as it ends."""
    timeout_s = max(0.1, min(float(timeout_s), MAX_TIMEOUT_S))
    memory_mb = max(32, min(int(memory_mb), MAX_MEMORY_MB))
    try:
        try:
            runtime: bwrap.Runtime | None = sandbox_runtime()
        except SandboxUnavailable as exc:
            if not conf.get().verifiers.sandbox_allow_unsafe:
                log.error("Refusing to run untrusted code: sandbox unavailable: %s", exc)
                return _unavailable(f"sandbox unavailable: {exc}", len(sources))
            log.warning(
                "SKILLGATE_SANDBOX_ALLOW_UNSAFE is on: running untrusted code WITHOUT a sandbox (%s). "
                "Never use this setting in production.",
                exc,
            )
            runtime = None
        scratch = Path(tempfile.mkdtemp(prefix="skillgate-sandbox-"))
        try:
            return _supervise(runtime, sources, fds, scratch, timeout_s=timeout_s, memory_mb=memory_mb)
        except Exception as exc:  # a sandbox failure is a failed run, not a crash of the caller
            why = f"sandbox error: {type(exc).__name__}: {exc}"
            return [SandboxResult(False, None, "", why, False, broken=True)] * len(sources)
        finally:
            _remove_tree(scratch)
    finally:
        for group in fds:  # those not handed to a child yet (each is closed once: numbers are reused)
            for fd in group:
                with contextlib.suppress(OSError):
                    os.close(fd)
            group.clear()


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
                result = _supervise(runtime, [_PROBE], [[]], scratch, timeout_s=20, memory_mb=256)[0]
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


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@dataclass
class _Child:
    proc: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path
    started: int  # the read end of the prelude's started pipe (closed by _result)


def _launch(
    runtime: bwrap.Runtime | None,
    source: str,
    work: Path,
    *,
    timeout_s: float,
    memory_mb: int,
    fds: list[int],
) -> _Child:
    """Start ``source`` in a sandbox of its own (or, with no runtime, the unsafe plain subprocess)."""
    work.mkdir()
    started_r, started_w = os.pipe()
    prelude = [*_limits(timeout_s, memory_mb), str(started_w)]
    out_path, err_path = work / "stdout", work / "stderr"
    opened: list[int] = []
    try:
        if runtime is None:
            (work / "solution.py").write_text(source, encoding="utf-8")
            argv = [sys.executable, "-I", "-B", "-c", _PRELUDE, *prelude]
            env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "TMPDIR": str(work), "LANG": "C.UTF-8"}
            cwd = str(work)
        else:
            opened.append(_memfd("solution.py", source.encode("utf-8")))
            program = seccomp.program()
            if program is not None:
                opened.append(_memfd("seccomp", program))
            argv = [runtime.python, "-I", "-B", "-c", _PRELUDE, *prelude]
            seccomp_fd = opened[1] if len(opened) > 1 else None
            argv = bwrap.command(runtime, source_fd=opened[0], seccomp_fd=seccomp_fd, argv=argv)
            # An empty environment: bwrap's pid 1 inside keeps it, and /proc/1/environ shows it.
            env, cwd = {}, "/"
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
                pass_fds=[*opened, started_w, *fds],
            )
    except BaseException:
        os.close(started_r)
        raise
    finally:
        os.close(started_w)
        for fd in opened:
            os.close(fd)
    return _Child(proc, out_path, err_path, started_r)


def _supervise(
    runtime: bwrap.Runtime | None,
    sources: list[str],
    fds: list[list[int]],
    scratch: Path,
    *,
    timeout_s: float,
    memory_mb: int,
) -> list[SandboxResult]:
    deadline = time.monotonic() + timeout_s
    children: list[_Child] = []
    try:
        for index, (source, passed) in enumerate(zip(sources, fds, strict=True)):
            limits = {"timeout_s": timeout_s, "memory_mb": memory_mb, "fds": passed}
            children.append(_launch(runtime, source, scratch / f"p{index}", **limits))  # type: ignore[arg-type]
            while passed:  # the child holds its own copy: ours would keep the pipe open
                os.close(passed.pop())
        last = children[-1].proc
        timed_out = False
        try:
            last.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
        running = [child.proc.poll() is None for child in children]
    finally:
        for child in children:
            _kill_group(child.proc.pid)
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.proc.wait(timeout=_KILL_GRACE_S)
        started = [_started(child) for child in children]  # closes every child's pipe, whatever happened
    return [
        _result(child, timed_out=timed_out, running=still, started=began)
        for child, still, began in zip(children, running, started, strict=True)
    ]


def _started(child: _Child) -> bool:
    try:
        os.set_blocking(child.started, False)
        return os.read(child.started, 1) == b"1"
    except OSError:  # nothing written (BlockingIOError) or the pipe is gone
        return False
    finally:
        os.close(child.started)


def _result(child: _Child, *, timed_out: bool, running: bool, started: bool) -> SandboxResult:
    if not started:  # bwrap or the interpreter failed before the program ran: nothing was judged
        why = _read_capped(child.stderr).strip()[-500:] or f"exit status {child.proc.returncode}"
        why = f"sandbox error: the sandbox did not start: {why}"
        return SandboxResult(False, None, "", why, False, broken=True)
    returncode = None if running else child.proc.returncode
    if returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        timed_out = True  # the CPU rlimit struck before the wall clock (bwrap reports 128 + signal)
    return SandboxResult(
        ok=returncode == 0 and not timed_out,
        returncode=returncode,
        stdout=_read_capped(child.stdout),
        stderr=_read_capped(child.stderr),
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
