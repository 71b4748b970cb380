"""Run untrusted Python in a throw-away subprocess with resource limits and an audit-hook jail.

The child is ``sys.executable -I -B -c PRELUDE`` in a fresh temporary directory with an almost empty
environment.  The prelude lowers its rlimits, installs an audit hook (hooks cannot be removed) that
refuses network access, process creation, native-library loading, signals to other processes and
file writes outside the temporary directory, then ``exec``s ``solution.py`` from that directory.
This is defence in depth for model-written code, not a boundary against a determined attacker:
the program can still read any file the gateway's user can read.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OUTPUT_LIMIT = 64 * 1024  # bytes kept per stream (head and tail halves)
FILE_SIZE_LIMIT = 16 * 1024 * 1024
OPEN_FILES_LIMIT = 64
PROCESS_LIMIT = 64  # per-user count on Linux, ignored for root; the audit hook is the real guard
_KILL_GRACE_S = 5.0

# Runs in the child before the user's program; argv: memory_bytes cpu_s fsize nproc nofile.  Everything
# lives in a function so the hook's state is not reachable from the program's namespace.
_PRELUDE = r"""
def _jail():
    import os, resource, sys, traceback, types
    mem, cpu, fsize, nproc, nofile = (int(v) for v in sys.argv[1:6])
    limits = ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CPU, cpu), (resource.RLIMIT_FSIZE, fsize),
              (resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_NOFILE, nofile), (resource.RLIMIT_CORE, 0))
    for res, val in limits:
        hard = resource.getrlimit(res)[1]
        soft = val if hard == resource.RLIM_INFINITY else min(val, hard)
        cap = soft + 1 if res == resource.RLIMIT_CPU else soft
        resource.setrlimit(res, (soft, cap if hard == resource.RLIM_INFINITY else min(cap, hard)))
    with open("solution.py", encoding="utf-8", errors="replace") as f:
        src = f.read()
    import _posixsubprocess
    def no_fork_exec(*args, **kwargs):
        raise PermissionError("sandbox: starting processes is not allowed")
    _posixsubprocess.fork_exec = no_fork_exec
    root, realpath, fsdecode, sep, getpid, getpgid = (
        os.path.realpath(os.getcwd()), os.path.realpath, os.fsdecode, os.sep, os.getpid, os.getpgid)
    deny = frozenset({
        "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto",
        "socket.sendmsg", "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork",
        "os.forkpty", "pty.spawn", "os.kill", "os.killpg", "gc.get_objects", "gc.get_referrers",
        "gc.get_referents",
    })
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    fs_events = {  # event: (positions of paths that must stay inside root, positions of dir_fd arguments)
        "os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)),
        "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)), "os.rename": ((0, 1), (2, 3)),
        "os.link": ((0, 1), (2, 3)), "os.symlink": ((1,), (2,)), "os.truncate": ((0,), ()),
        "os.utime": ((0,), (3,)), "shutil.rmtree": ((0,), (1,)), "os.setxattr": ((0,), ()),
        "os.removexattr": ((0,), ()), "sqlite3.connect": ((0,), ()),
    }
    def inside(path):
        if path in (":memory:", "", b""):
            return True
        if not isinstance(path, (str, bytes, os.PathLike)):
            return False
        real = realpath(fsdecode(path))
        return real == root or real.startswith(root + sep)
    def hook(event, args):
        if event in deny:
            if event in ("os.kill", "os.killpg") and args and args[0] in (0, getpid(), getpgid(0)):
                return
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "ctypes.dlopen":
            raise ImportError("sandbox: loading native libraries (ctypes) is not allowed")
        if event == "import" and args and "_posixsubprocess" in f"{args[0]} {args[1]}":
            raise ImportError("sandbox: importing _posixsubprocess again is not allowed")
        if event == "open":
            path, flags = args[0], args[2]
            writes = isinstance(flags, int) and flags & write_flags
            if writes and not isinstance(path, int) and not inside(path):
                raise PermissionError(f"sandbox: writing to {path!r} is not allowed")
        elif event in fs_events:
            paths, fds = fs_events[event]
            if any(i < len(args) and args[i] not in (None, -1) for i in fds) or not all(
                inside(args[i]) for i in paths if i < len(args)
            ):
                raise PermissionError(f"sandbox: {event} outside the working directory is not allowed")
    sys.addaudithook(hook)
    main = types.ModuleType("__main__")
    main.__file__ = "solution.py"
    sys.modules["__main__"] = main
    sys.argv = ["solution.py"]
    try:
        exec(compile(src, "solution.py", "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as exc:
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None)
        sys.exit(1)
_jail()
"""


@dataclass(frozen=True)
class SandboxResult:
    ok: bool
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool


def run_python(source: str, *, timeout_s: float, memory_mb: int) -> SandboxResult:
    """Run ``source`` as a program; ``ok`` means exit status 0 within ``timeout_s``. Never raises."""
    root = Path(tempfile.mkdtemp(prefix="skillgate-sandbox-"))
    try:
        return _run(source, root, timeout_s=timeout_s, memory_mb=memory_mb)
    except Exception as exc:  # a sandbox failure is a failed run, not a crash of the caller
        return SandboxResult(False, None, "", f"sandbox error: {type(exc).__name__}: {exc}", False)
    finally:
        _remove_tree(root)


def _run(source: str, root: Path, *, timeout_s: float, memory_mb: int) -> SandboxResult:
    work = root / "work"
    work.mkdir()
    (work / "solution.py").write_text(source, encoding="utf-8")
    cpu_s = max(1, math.ceil(timeout_s)) + 1
    argv = [
        sys.executable,
        "-I",
        "-B",
        "-c",
        _PRELUDE,
        str(memory_mb * 1024 * 1024),
        str(cpu_s),
        str(FILE_SIZE_LIMIT),
        str(PROCESS_LIMIT),
        str(OPEN_FILES_LIMIT),
    ]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(work),
        "TMPDIR": str(work),
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    out_path, err_path = root / "stdout", root / "stderr"
    timed_out = False
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            argv,
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            proc.wait(timeout=_KILL_GRACE_S)
        finally:
            _kill_group(proc.pid)  # nothing may outlive the run (the jail already refuses forks)
    returncode = proc.returncode
    if returncode == -signal.SIGXCPU:
        timed_out = True  # the CPU rlimit struck before the wall clock
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
