"""The bubblewrap command line that confines untrusted Python, and the runtime it mounts.

Isolation invariants of every command :func:`command` builds (tests/security/ attacks each one):

- **Unprivileged.** Run by root, ``setpriv`` first drops to uid/gid 65534 with no supplementary
  groups, no inheritable capabilities and an empty bounding set, so the host kernel sees an ordinary
  user: RLIMIT_NPROC applies and nothing root-owned is writable. bwrap then runs unprivileged (no
  setuid) and the program gets no capabilities in its user namespace either.
- **Namespaces.** ``--unshare-all``: new user, pid, network, IPC, UTS and cgroup namespaces. The
  network namespace has only its own loopback: no host listener, no outside address is reachable.
  In the pid namespace the program sees only its own processes (no ``/proc/<ppid>``), and the
  gateway's processes cannot be signalled. ``--disable-userns`` forbids nested user namespaces.
- **Filesystem.** The root is bwrap's tmpfs, remounted read-only, holding only: the interpreter
  binary, the shared libraries it and its ``lib-dynload`` modules link (found with ``ldd``), its
  standard library (any ``site-packages`` inside it hidden under an empty read-only tmpfs), a
  ``/proc`` of the sandbox's own pid namespace, a read-only minimal ``/dev`` (null, zero, random,
  urandom, tty, pts) and a writable ``/tmp`` tmpfs of :data:`TMPFS_BYTES` holding ``solution.py``.
  No project tree, virtualenv, ``/root``, ``/etc``, ``/home``, database or socket.
- **Environment.** ``--clearenv`` then PATH, HOME, TMPDIR and LANG only; bwrap itself is started
  with an empty environment (its reaper, pid 1 inside, shows its environment in ``/proc/1``).
- **Lifetime.** ``--die-with-parent`` (the program dies with bwrap), ``--new-session`` (no TIOCSTI
  into the gateway's terminal); the caller kills bwrap at the deadline, which kills the pid
  namespace's init and with it every process inside (a ``setsid`` grandchild too).
- **System calls.** The seccomp filter of routing/verifiers/seccomp.py (x86-64).

Limits on memory, CPU, files, open files and processes are set by the caller's prelude inside the
namespace (routing/verifiers/sandbox.py): RLIMIT_NPROC counts per user namespace, so each run gets
its own process budget rather than sharing uid 65534's with every other run.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass

SANDBOX_UID = SANDBOX_GID = 65534
TMPFS_BYTES = 64 * 1024 * 1024
WORK_DIR = "/tmp"
SOURCE_PATH = f"{WORK_DIR}/solution.py"
_HELPER_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


class SandboxUnavailable(RuntimeError):
    """bubblewrap cannot run untrusted code here; the message says why."""


@dataclass(frozen=True)
class Runtime:
    """What the sandbox mounts: host paths, all bound read-only at the same path inside."""

    python: str
    stdlib: tuple[str, ...]
    hidden: tuple[str, ...]  # site-packages directories inside ``stdlib``
    libraries: tuple[tuple[str, str], ...]  # (host file, path inside) for every shared library
    bwrap: str
    setpriv: str | None  # set when the gateway runs as root


def _readable_by_sandbox(path: str) -> bool:
    """Whether the sandbox's uid can reach ``path``: as root, by the 'other' permission bits of the
    path and every directory above it (uid 65534 owns nothing and has no groups); else by access()."""
    if os.geteuid() != 0:
        return os.access(path, os.R_OK)
    real = os.path.realpath(path)
    try:
        mode = os.stat(real).st_mode
        if not mode & stat.S_IROTH or (stat.S_ISDIR(mode) and not mode & stat.S_IXOTH):
            return False
        parent = os.path.dirname(real)
        while True:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
            if parent == os.path.dirname(parent):
                return True
            parent = os.path.dirname(parent)
    except OSError:
        return False


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    return any(os.path.commonpath([path, root]) == root for root in roots)


def _candidates(configured: str) -> list[str]:
    if configured:
        return [configured]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    own = os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
    return [own, f"/usr/bin/python{version}", f"/usr/local/bin/python{version}", "/usr/bin/python3"]


def _describe(python: str) -> dict[str, str]:
    script = (
        "import json, sys, sysconfig\n"
        "p = sysconfig.get_paths()\n"
        "print(json.dumps({k: p[k] for k in ('stdlib', 'platstdlib', 'purelib', 'platlib')}))"
    )
    out = subprocess.run(
        [python, "-I", "-S", "-c", script], capture_output=True, text=True, env=_HELPER_ENV, timeout=30
    )
    if out.returncode != 0:
        raise SandboxUnavailable(f"{python} does not run: {out.stderr.strip()[-300:]}")
    paths: dict[str, str] = json.loads(out.stdout)
    return paths


def _libraries(files: list[str]) -> tuple[tuple[str, str], ...]:
    """The shared libraries ``files`` link, as (host file, path inside), from ``ldd``."""
    ldd = shutil.which("ldd", path=_HELPER_ENV["PATH"])
    if ldd is None:
        raise SandboxUnavailable("ldd (libc-bin) is not installed; it finds the libraries to mount")
    out = subprocess.run([ldd, *files], capture_output=True, text=True, env=_HELPER_ENV, timeout=60)
    found: set[str] = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            found.add(parts[2])
        elif len(parts) == 2 and parts[0].startswith("/") and parts[1].startswith("(0x"):
            found.add(parts[0])  # the loader itself
    libc = next((p for p in found if os.path.basename(p) == "libc.so.6"), None)
    if libc is None:
        raise SandboxUnavailable(f"ldd found no libc for {files[0]}: {out.stderr.strip()[-300:]}")
    gcc_s = os.path.join(os.path.dirname(libc), "libgcc_s.so.1")  # glibc loads it to unwind threads
    if os.path.exists(gcc_s):
        found.add(gcc_s)
    return tuple(sorted((os.path.realpath(p), p) for p in found))


@functools.lru_cache(maxsize=4)
def runtime(configured_python: str, configured_bwrap: str) -> Runtime:
    """The interpreter the sandbox runs and what to mount for it; raises :class:`SandboxUnavailable`."""
    bwrap = shutil.which(configured_bwrap or "bwrap", path=_HELPER_ENV["PATH"])
    if bwrap is None:
        raise SandboxUnavailable(f"bubblewrap ({configured_bwrap or 'bwrap'}) is not installed")
    setpriv = None
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv", path=_HELPER_ENV["PATH"])
        if setpriv is None:
            raise SandboxUnavailable("setpriv (util-linux) is not installed; it drops root before bwrap")
    tried = []
    for candidate in _candidates(configured_python):
        python = os.path.realpath(candidate)
        if not os.path.isfile(python):
            tried.append(f"{candidate} (missing)")
            continue
        if not _readable_by_sandbox(python):
            tried.append(f"{candidate} (not readable by uid {SANDBOX_UID})")
            continue
        paths = _describe(python)
        stdlib = tuple(dict.fromkeys((paths["stdlib"], paths["platstdlib"])))
        if not all(_readable_by_sandbox(p) for p in stdlib):
            tried.append(f"{candidate} (its standard library is not readable by uid {SANDBOX_UID})")
            continue
        site = {paths["purelib"], paths["platlib"]}
        hidden = tuple(sorted(p for p in site if os.path.isdir(p) and _inside(p, stdlib)))
        modules = sorted(glob.glob(os.path.join(paths["platstdlib"], "lib-dynload", "*.so")))
        libraries = _libraries([python, *modules])
        if not all(_readable_by_sandbox(host) for host, _ in libraries):
            tried.append(f"{candidate} (a library it links is not readable by uid {SANDBOX_UID})")
            continue
        return Runtime(python, stdlib, hidden, libraries, bwrap, setpriv)
    raise SandboxUnavailable(
        f"no Python runtime the sandbox can mount: tried {', '.join(tried)}; set SKILLGATE_SANDBOX_PYTHON"
    )


def command(rt: Runtime, *, source_fd: int, seccomp_fd: int | None, argv: list[str]) -> list[str]:
    """``argv`` (the interpreter and its arguments) inside a new sandbox; ``source_fd`` is read into
    :data:`SOURCE_PATH`, ``seccomp_fd`` holds the BPF program. Both fds must be passed to the child."""
    cmd: list[str] = []
    if rt.setpriv is not None:
        cmd += [
            rt.setpriv,
            f"--reuid={SANDBOX_UID}",
            f"--regid={SANDBOX_GID}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ]
    cmd += [rt.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--hostname", "sandbox"]
    cmd += ["--die-with-parent", "--new-session", "--clearenv"]
    env = {"PATH": os.path.dirname(rt.python), "HOME": WORK_DIR, "TMPDIR": WORK_DIR, "LANG": "C.UTF-8"}
    for name, value in env.items():
        cmd += ["--setenv", name, value]
    for path in (rt.python, *rt.stdlib):
        cmd += ["--ro-bind", path, path]
    for path in rt.hidden:
        cmd += ["--tmpfs", path, "--remount-ro", path]
    for host, inside in rt.libraries:
        cmd += ["--ro-bind", host, inside]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
    cmd += ["--size", str(TMPFS_BYTES), "--tmpfs", WORK_DIR, "--file", str(source_fd), SOURCE_PATH]
    cmd += ["--chdir", WORK_DIR, "--remount-ro", "/"]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    return [*cmd, "--", *argv]
