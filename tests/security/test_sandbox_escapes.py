"""Escapes from the code sandbox, each attack driven through the running gateway with a real HTTP client.

A task profile owns a ``python_tests`` verifier; the stub teacher answers with attacking code, which
the gateway runs in its sandbox as it would any model's answer (tests/support/sandbox.py). Every
attacking answer also defines a correct ``add`` and then asserts that its attack worked, so a fail
verdict means the attack failed from the program's own point of view. Each test then checks from the
host that the side effect did not happen (a marker file, a live victim process, an unchanged database,
a silent listener, no secret in anything the caller or the ledger can see), and that the gateway keeps
serving: a normal verified call right after answers 200, quickly. Exhausting the sandbox's resources
is tests/security/test_sandbox_resources.py.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import socket
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from routing.verifiers.sandbox import run_python

pytestmark = pytest.mark.django_db(transaction=True)


# --- native calls and processes -----------------------------------------------------------------


@pytest.mark.parametrize(
    "attack",
    [
        "import ctypes, _ctypes\nsystem = _ctypes.dlsym(ctypes.CDLL(None)._handle, 'system')\n"
        "assert _ctypes.call_function(system, (CMD,)) == 0",
        "import ctypes\nassert ctypes.CDLL(None).system(CMD) == 0",
        "import os\nassert os.system(CMD.decode()) == 0",
        "import subprocess\nsubprocess.run(CMD.decode(), shell=True, check=True)",
        "import os\nos.execv('/usr/bin/touch', ['touch', MARKER])",
        "import subprocess, sys\n"
        "subprocess.run([sys.executable, '-c', f'open({MARKER!r}, \"w\")'], check=True)",
    ],
    ids=["dlsym_call_function", "ctypes_system", "os_system", "shell", "exec_host_binary", "python_child"],
)
def test_native_calls_and_processes_cannot_run_host_commands(gateway, tmp_path, attack):
    marker = tmp_path / "pwned"
    cmd = f"touch {marker} && id > {marker}".encode()
    gateway.attack(f"MARKER = {str(marker)!r}\nCMD = {cmd!r}\n{attack}\n")
    assert not marker.exists()


# --- reading the host -----------------------------------------------------------------------------


def test_the_gateways_environment_cannot_be_read(gateway, victim):
    initial = Path("/proc/self/environ").read_bytes().decode(errors="replace").split("\0")
    own = run_python("print(open('/proc/self/environ').read())", timeout_s=2, memory_mb=128).stdout
    # The gateway's own variables, those distinctive enough to look for, but the sandbox's own.
    needles = [entry for entry in initial if len(entry) >= 12 and entry not in own]
    victim_secret = Path(f"/proc/{victim.pid}/environ").read_text().split("SKILLGATE_VICTIM_SECRET=")[1]
    code = (
        "import glob, os, sys\n"
        f"paths = [f'/proc/{{os.getppid()}}/environ', '/proc/1/environ', '/proc/{os.getpid()}/environ',\n"
        f"         '/proc/{victim.pid}/environ', *glob.glob('/proc/*/environ')]\n"
        "blobs = []\n"
        "for path in paths:\n"
        "    try:\n"
        "        blobs.append(open(path, 'rb').read())\n"
        "    except OSError as exc:\n"
        "        print(path, type(exc).__name__, file=sys.stderr)\n"
        "data = b' '.join(blobs).replace(bytes(1), b' ').decode(errors='replace')\n"
        "print(data)\n"
        "print(data, file=sys.stderr)\n"
        "assert 'SKILLGATE_VICTIM_SECRET' in data, data\n"
    )
    outcome = gateway.attack(code)
    assert victim_secret not in outcome.exposed
    leaked = [needle for needle in needles if needle in outcome.exposed and needle not in code]
    assert leaked == []


def test_files_outside_cannot_be_read(gateway, tmp_path):
    secret = f"planted-{secrets.token_hex(12)}"
    planted_tmp = tmp_path / "planted.txt"
    planted_tmp.write_text(secret)
    planted_home = Path.home() / f"skillgate-attack-{secrets.token_hex(4)}.txt"
    planted_home.write_text(secret)
    targets = [
        str(planted_tmp),
        str(planted_home),
        str(settings.BASE_DIR / "db.sqlite3"),
        str(settings.DATABASES["default"]["NAME"]),
        str(settings.BASE_DIR / "app" / "settings" / "base.py"),
        str(settings.VAR_DIR / "secret_key"),
        "/etc/shadow",
        "/etc/passwd",
        f"{sys.prefix}/pyvenv.cfg",
    ]
    code = (
        "import sys\nleaked = []\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        leaked.append(open(path, 'rb').read(4096).decode(errors='replace'))\n"
        "    except OSError as exc:\n"
        "        print(path, type(exc).__name__, file=sys.stderr)\n"
        "print(*leaked, file=sys.stderr)\n"
        "assert leaked, 'nothing outside was readable'\n"
    )
    try:
        outcome = gateway.attack(code)
    finally:
        planted_home.unlink()
    assert secret not in outcome.exposed
    assert settings.SECRET_KEY not in outcome.exposed
    assert "SQLite format 3" not in outcome.exposed
    assert "dj_database_url" not in outcome.exposed  # app/settings/base.py
    assert "root:" not in outcome.exposed  # /etc/passwd
    assert "FileNotFoundError" in outcome.detail  # the program ran and found nothing there


# --- writing the host -----------------------------------------------------------------------------


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_databases_outside_cannot_be_written(gateway, tmp_path):
    victim_db = tmp_path / "victim.sqlite3"
    with sqlite3.connect(victim_db) as con:
        con.execute("CREATE TABLE t (x)")
        con.execute("INSERT INTO t VALUES ('original')")
    before = _digest(victim_db)
    gateway_db = str(settings.DATABASES["default"]["NAME"])
    code = (
        "import sqlite3\nerrors = []\n"
        f"for target in ({str(victim_db)!r}, {gateway_db!r}):\n"
        "    for how in ('connect', 'uri', 'attach'):\n"
        "        try:\n"
        "            if how == 'attach':\n"
        "                con = sqlite3.connect(':memory:')\n"
        "                con.execute('ATTACH DATABASE ? AS victim', (target,))\n"
        "                con.execute('CREATE TABLE victim.pwned (x)')\n"
        "            else:\n"
        "                con = sqlite3.connect(f'file:{target}?mode=rw' if how == 'uri' else target,\n"
        "                                      uri=how == 'uri')\n"
        "                con.execute('CREATE TABLE pwned (x)')\n"
        "            con.commit()\n"
        "        except sqlite3.Error as exc:\n"
        "            errors.append(f'{how} {target}: {exc}')\n"
        "assert not errors, errors\n"
    )
    outcome = gateway.attack(code)
    assert "unable to open database" in outcome.detail
    assert _digest(victim_db) == before
    assert "pwned" not in connection.introspection.table_names()


@pytest.mark.parametrize(
    "attack",
    [
        "fd = os.open(TARGET, os.O_RDONLY | os.O_DIRECTORY)\n"
        "os.close(os.open('pwned', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))",
        "fd = os.open('/', os.O_RDONLY | os.O_DIRECTORY)\n"
        "os.close(os.open(TARGET.lstrip('/') + '/pwned', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))",
        "fd = os.open('/proc/1/root', os.O_RDONLY | os.O_DIRECTORY)\n"
        "os.mkdir(TARGET.lstrip('/') + '/pwned', dir_fd=fd)",
        "fd = os.open('/tmp', os.O_RDONLY | os.O_DIRECTORY)\n"
        "os.symlink(TARGET, 'escape', dir_fd=fd)\nopen('/tmp/escape/pwned', 'w').write('x')",
        "os.makedirs(TARGET + '/pwned')",
    ],
    ids=["dir_fd_of_target", "dir_fd_of_root", "proc_root", "symlink", "makedirs"],
)
def test_writes_outside_the_work_dir_do_not_reach_the_host(gateway, attack):
    # Outside /tmp (inside, /tmp is the sandbox's private tmpfs: writes there succeed and vanish), and
    # outside the checkout, which may itself lie under /tmp (a CI clone).
    target = Path(tempfile.mkdtemp(prefix=f"sandbox-attack-{secrets.token_hex(4)}-", dir="/var/tmp"))
    try:
        gateway.attack(f"import os\nTARGET = {str(target)!r}\n{attack}\n")
        assert list(target.iterdir()) == []
    finally:
        shutil.rmtree(target)


# --- other processes and the network --------------------------------------------------------------


def test_other_processes_cannot_be_signalled(gateway, victim):
    code = (
        "import ctypes, os, signal\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def pidfd_kill(pid):\n"
        "    pidfd = libc.syscall(434, pid, 0)  # pidfd_open\n"
        "    assert pidfd >= 0, f'pidfd_open: errno {ctypes.get_errno()}'\n"
        "    assert libc.syscall(424, pidfd, signal.SIGKILL, 0, 0) == 0, f'errno {ctypes.get_errno()}'\n"
        "failures = []\n"
        f"for how, kill in (('kill', lambda: os.kill({victim.pid}, signal.SIGKILL)),\n"
        f"                  ('killpg', lambda: os.killpg({victim.pid}, signal.SIGKILL)),\n"
        f"                  ('pidfd_send_signal', lambda: pidfd_kill({victim.pid})),\n"
        f"                  ('gateway', lambda: os.kill({os.getpid()}, signal.SIGKILL)),\n"
        "                  ('everyone', lambda: os.kill(-1, signal.SIGKILL))):\n"
        "    try:\n"
        "        kill()\n"
        "    except (OSError, AssertionError) as exc:\n"
        "        failures.append(f'{how}: {exc}')\n"
        "assert not failures, failures\n"
    )
    outcome = gateway.attack(code)
    assert "pidfd_send_signal" in outcome.detail
    time.sleep(0.2)  # a kill that got through would end the victim within this: no state to wait for
    assert victim.poll() is None


def _primary_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))  # no packet is sent; picks the outgoing address
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def test_local_listeners_cannot_be_reached(gateway, tmp_path):
    listeners, targets = [], []
    tcp = socket.create_server(("0.0.0.0", 0))
    port = tcp.getsockname()[1]
    listeners.append(tcp)
    targets += [("AF_INET", ("127.0.0.1", port))]
    if (address := _primary_address()) is not None:
        targets.append(("AF_INET", (address, port)))
    gateway_port = int(gateway.url.rsplit(":", 1)[1])
    targets.append(("AF_INET", ("127.0.0.1", gateway_port)))  # the gateway's own API
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind(f"\0skillgate-attack-{secrets.token_hex(4)}")
    path_sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path_sock.bind(str(tmp_path / "gateway.sock"))
    for sock in (abstract, path_sock):
        sock.listen(1)
        listeners.append(sock)
        targets.append(("AF_UNIX", sock.getsockname()))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    code = (
        "import socket, sys\nreached = []\n"
        f"for family, address in {targets!r}:\n"
        "    s = socket.socket(getattr(socket, family), socket.SOCK_STREAM)\n"
        "    s.settimeout(1)\n"
        "    try:\n"
        "        s.connect(address)\n"
        "        s.sendall(b'pwned')\n"
        "        reached.append(address)\n"
        "    except OSError as exc:\n"
        "        print(address, exc, file=sys.stderr)\n"
        f"socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'pwned', {udp.getsockname()!r})\n"
        "assert reached, 'no listener reached'\n"
    )
    try:
        gateway.attack(code)
        for sock in listeners:
            sock.settimeout(0.2)
            with pytest.raises(TimeoutError):
                sock.accept()
        udp.settimeout(0.2)
        with pytest.raises(TimeoutError):
            udp.recvfrom(16)
    finally:
        for sock in (*listeners, udp):
            sock.close()


# --- the tests' process -----------------------------------------------------------------------------


def test_the_answer_cannot_see_or_reach_the_tests_process(gateway):
    # The tests run in a sandbox of their own: the answer's pid namespace holds bwrap's init and the
    # answer, its fds are its pipe ends and its output files, never the tests' report.
    code = (
        "import os, signal\n"
        "me, seen, reached = os.getpid(), [], []\n"
        "for pid in range(2, 4096):\n"
        "    if pid != me:\n"
        "        try:\n"
        "            os.kill(pid, signal.SIGKILL)\n"
        "            reached.append(pid)\n"
        "        except OSError:\n"
        "            pass\n"
        "seen = [p for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, me)]\n"
        "links = []\n"
        "for fd in range(0, 1024):\n"
        "    try:\n"
        "        links.append(os.readlink(f'/proc/self/fd/{fd}'))\n"
        "    except OSError:\n"
        "        pass\n"
        "print(seen, reached, links)\n"
        "assert seen or reached or any('report' in link for link in links), (seen, reached, links)\n"
    )
    outcome = gateway.attack(code)
    assert "AssertionError: ([], [], [" in outcome.detail
