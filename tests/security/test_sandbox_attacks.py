"""Attacks on the code sandbox, each driven through the running gateway with a real HTTP client.

A task profile owns a ``python_tests`` verifier; the stub teacher answers with attacking code, which
the gateway runs in its sandbox as it would any model's answer. Every attacking answer also defines
a correct ``add`` and then asserts that its attack worked, so a fail verdict means the attack failed
from the program's own point of view. Each test then checks from the host that the side effect did
not happen (a marker file, a live victim process, an unchanged database, a silent listener, no
secret in anything the caller or the ledger can see, no process left), and that the gateway keeps
serving: a normal verified call right after answers 200, quickly.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.db import connection

from routing.models import Invocation
from routing.verifiers.sandbox import OUTPUT_LIMIT, PROCESS_LIMIT, run_python
from tests.factories import TaskProfileFactory
from tests.support.openai_stub import OpenAIStub, Reply

pytestmark = pytest.mark.django_db(transaction=True)

PROFILE = "sandbox-attacks"
TIMEOUT_S = 2
GOOD = "def add(a, b):\n    return a + b\n\n"
QUICK_S = 5.0  # a normal call after an attack; the sandbox itself takes well under a second


def processes_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (read from the host's /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


@dataclass
class Outcome:
    status: int
    verdict: str
    detail: str
    elapsed: float
    exposed: str  # everything the caller got back and everything the ledger stored


@dataclass
class Gateway:
    url: str
    key: str
    stub: OpenAIStub
    answers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Each call's question names the answer the stub teacher gives it (calls may overlap).
        self.stub.responder = lambda body: Reply(
            content=f"```python\n{self.answers[body['messages'][-1]['content']]}\n```"
        )

    def call(self, code: str, *, task: str = PROFILE) -> Outcome:
        question = f"Write add(a, b). ({secrets.token_hex(8)})"
        self.answers[question] = code
        started = time.monotonic()
        response = httpx.post(
            f"{self.url}/v1/chat/completions",
            json={"model": "teacher", "messages": [{"role": "user", "content": question}]},
            headers={"Authorization": f"Bearer {self.key}", "X-Skillgate-Task": task},
            timeout=60,
        )
        elapsed = time.monotonic() - started
        row = Invocation.objects.get(pk=response.headers["x-skillgate-invocation"])
        stored = json.dumps(
            [row.verdict_detail, row.legs, row.response, row.error], default=str, ensure_ascii=False
        )
        exposed = "\n".join([response.text, json.dumps(dict(response.headers)), stored])
        return Outcome(response.status_code, row.verdict, row.verdict_detail, elapsed, exposed)

    def attack(self, code: str) -> Outcome:
        """The attacking answer (after a correct ``add``) must fail, and the gateway keep serving."""
        outcome = self.call(GOOD + code)
        assert outcome.status == 200
        assert outcome.verdict == "fail", f"the attack was not stopped: {outcome.detail}"
        self.assert_still_serving()
        return outcome

    def assert_still_serving(self) -> None:
        outcome = self.call(GOOD)
        assert (outcome.status, outcome.verdict) == (200, "pass"), outcome.detail
        assert outcome.elapsed < QUICK_S


@pytest.fixture
def gateway(gateway_url, backends, api_key, stub) -> Gateway:
    verifier = {"kind": "python_tests", "test": "assert add(2, 3) == 5", "timeout_s": TIMEOUT_S}
    TaskProfileFactory.create(name=PROFILE, verifier={**verifier, "memory_mb": 256})
    gateway = Gateway(gateway_url, api_key.raw, stub)
    outcome = gateway.call(GOOD)  # the first call of a fresh server loads litellm; the profile works
    assert outcome.verdict == "pass", outcome.detail
    return gateway


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process outside the sandbox, of the sandbox's own uid where the tests run as root."""
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    env = {"PATH": "/usr/bin:/bin", "SKILLGATE_VICTIM_SECRET": f"victim-{secrets.token_hex(8)}"}
    proc = subprocess.Popen([*drop, "sleep", "60"], env=env, start_new_session=True)
    time.sleep(0.1)
    yield proc
    proc.kill()
    proc.wait()


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
        str(settings.BASE_DIR / "app" / "settings.py"),
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
    assert "ImproperlyConfigured" not in outcome.exposed  # app/settings.py
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
    # Outside /tmp (inside, /tmp is the sandbox's private tmpfs: writes there succeed and vanish).
    target = settings.VAR_DIR / f"sandbox-attack-{secrets.token_hex(4)}"
    target.mkdir()
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
    time.sleep(0.2)
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


# --- resource exhaustion --------------------------------------------------------------------------


class Watcher:
    """Samples, from the host, the processes whose command line holds a marker, during a call."""

    def __init__(self, marker: str) -> None:
        self.marker, self.most, self._stop = marker, 0, threading.Event()
        self._thread = threading.Thread(target=self._watch)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, len(processes_with(self.marker)))
            time.sleep(0.02)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def _relaunch(body: str, marker: str) -> str:
    """Code that re-executes as ``python -c body marker``, so the host can find it in /proc."""
    return f"import os, sys\nos.execv(sys.executable, [sys.executable, '-c', {body!r}, {marker!r}])\n"


def test_a_fork_bomb_is_held_by_the_process_limit_and_ends_at_the_deadline(gateway):
    marker = f"skillgate-forkbomb-{secrets.token_hex(4)}"
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    with Watcher(marker) as watcher:
        outcome = gateway.attack(_relaunch(bomb, marker))
    assert outcome.detail == f"timeout after {TIMEOUT_S}s"
    assert 1 < watcher.most <= PROCESS_LIMIT
    assert processes_with(marker) == []
    assert subprocess.run(["true"]).returncode == 0  # the host still forks


@pytest.mark.parametrize(
    "bomb",
    [
        "data = bytearray(8 * 1024 ** 3)",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024 ** 2))",
        "i = 0\nwhile True:\n    open(f'/tmp/fill{i}', 'wb').write(b'x' * (8 * 1024 ** 2))\n    i += 1",
        "open('/dev/shm/fill', 'wb').write(b'x' * (1024 ** 3))",
    ],
    ids=["one_allocation", "growing", "tmpfs", "dev_shm"],
)
def test_a_memory_bomb_is_stopped(gateway, bomb):
    outcome = gateway.attack(bomb + "\n")
    assert any(err in outcome.detail for err in ("MemoryError", "No space left", "Read-only file system"))
    assert outcome.elapsed < TIMEOUT_S + QUICK_S


def test_an_infinite_loop_ends_at_the_deadline(gateway):
    outcome = gateway.attack("while True:\n    pass\n")
    assert outcome.detail == f"timeout after {TIMEOUT_S}s"
    assert outcome.elapsed < TIMEOUT_S + 3


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_an_output_flood_is_capped(gateway, stream):
    outcome = gateway.attack(f"import sys\nwhile True:\n    sys.{stream}.write('A' * 65536)\n")
    if stream == "stdout":
        assert "OSError: [Errno 27] File too large" in outcome.detail
    else:  # the traceback itself no longer fits: only the flood's tail is reported
        assert set(outcome.detail) == {"A"}
    assert len(outcome.detail) < 2000
    assert len(outcome.exposed) < 4 * OUTPUT_LIMIT


@pytest.mark.parametrize("parent", ["exits", "spins"])
def test_setsid_children_do_not_outlive_the_run(gateway, parent):
    marker = f"skillgate-orphan-{secrets.token_hex(4)}"
    child = "import time\nwhile True:\n    time.sleep(0.05)\n"
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', {child!r}, {marker!r}])\n"
        "    os._exit(0)\n"
        "time.sleep(0.5)\n"
        + ("raise SystemExit('the parent leaves its grandchild behind')\n" if parent == "exits" else "")
        + ("while True:\n    pass\n" if parent == "spins" else "")
    )
    with Watcher(marker) as watcher:
        gateway.attack(code)
    assert watcher.most == 1  # it did run, detached, in its own session
    assert processes_with(marker) == []


# --- the service under attack -----------------------------------------------------------------


def _in_background(gateway: Gateway, code: str) -> threading.Thread:
    def call() -> None:
        try:
            gateway.call(code)
        finally:
            connection.close()  # this thread's own database connection

    thread = threading.Thread(target=call)
    thread.start()
    time.sleep(0.3)  # its answer is in the sandbox now
    return thread


def test_slow_verifications_do_not_stall_other_calls(gateway):
    spinning = _in_background(gateway, GOOD + "while True:\n    pass\n")
    try:
        started = time.monotonic()
        outcome = gateway.call("hello", task="default")  # no verifier: the loop must be free
        assert outcome.status == 200 and time.monotonic() - started < 1.5
        gateway.assert_still_serving()  # a verification of its own, next to the spinning one
    finally:
        spinning.join()


def test_a_saturated_verifier_pool_fails_waiting_calls_instead_of_queueing_forever(gateway, settings):
    settings.SKILLGATE = {**settings.SKILLGATE, "VERIFIER_WORKERS": 1, "VERIFIER_QUEUE_WAIT_S": 0.5}
    spinning = _in_background(gateway, GOOD + "while True:\n    pass\n")
    try:
        queued = gateway.call(GOOD)
        assert queued.verdict == "fail" and "verifier pool saturated" in queued.detail
        assert queued.elapsed < TIMEOUT_S + QUICK_S
    finally:
        spinning.join()
    gateway.assert_still_serving()


def test_without_a_sandbox_code_verifiers_refuse_to_run_code(gateway, settings, tmp_path):
    settings.SKILLGATE = {**settings.SKILLGATE, "SANDBOX_BWRAP": "/nonexistent/bwrap"}
    marker = tmp_path / "ran"
    outcome = gateway.call(GOOD + f"open({str(marker)!r}, 'w').close()\n")
    assert (outcome.status, outcome.verdict) == (200, "fail")
    assert outcome.detail.startswith("sandbox unavailable: bubblewrap (/nonexistent/bwrap) is not installed")
    assert not marker.exists()
