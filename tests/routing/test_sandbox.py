"""The Python sandbox (routing/verifiers/sandbox.py, bwrap.py, seccomp.py) run for real, no database.

Attacks through the running gateway are in tests/security/test_sandbox_escapes.py and
test_sandbox_resources.py; these tests call ``run_python`` directly and check each isolation
invariant from the inside and from the host.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from routing.verifiers import sandbox, seccomp
from routing.verifiers.bwrap import TMPFS_BYTES
from routing.verifiers.sandbox import FILE_SIZE_LIMIT, OUTPUT_LIMIT, PROCESS_LIMIT, run_python
from tests.support.sandbox import processes_with


def run(source: str, *, timeout_s: float = 5, memory_mb: int = 256):
    result = run_python(source, timeout_s=timeout_s, memory_mb=memory_mb)
    assert not result.unavailable, result.stderr
    return result


def test_runs_a_program_and_captures_both_streams():
    result = run("import sys\nprint('out', 6 * 7)\nprint('oops', file=sys.stderr)")
    assert result.ok and result.returncode == 0 and not result.timed_out
    assert result.stdout == "out 42\n"
    assert result.stderr == "oops\n"


def test_environment_is_exactly_the_sandbox_one(monkeypatch):
    monkeypatch.setenv("SKILLGATE_TEST_SECRET", "hunter2")
    result = run("import os, sys\nprint(sys.flags.isolated)\nprint(sorted(os.environ))")
    assert result.ok, result.stderr
    isolated, env_names = result.stdout.splitlines()
    assert isolated == "1"
    assert env_names == str(sorted(["HOME", "LANG", "PATH", "PWD", "TMPDIR"]))


def test_runs_unprivileged_in_its_own_namespaces():
    result = run(
        "import os, socket\n"
        "print(os.getuid(), os.getgid(), os.getgroups())\n"
        "print(os.getpid(), os.getppid(), sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
        "print(socket.gethostname(), [l.split(':')[0].strip() for l in open('/proc/net/dev')][2:])\n"
        "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])"
    )
    assert result.ok, result.stderr
    ids, pids, net, caps = result.stdout.splitlines()
    if os.geteuid() == 0:
        assert ids == "65534 65534 []"
    assert pids == "2 1 ['1', '2']"  # bwrap's reaper and the program: no host process is visible
    assert net == "sandbox ['lo']"
    assert int(caps, 16) == 0


def test_the_filesystem_holds_only_the_runtime_and_a_private_tmp(tmp_path):
    (tmp_path / "host-file").write_text("host")
    result = run(
        "import os, sys\n"
        "print(sorted(os.listdir('/')))\n"
        f"print(os.path.exists({str(tmp_path)!r}), os.path.exists({os.getcwd()!r}))\n"
        "print([p for p in ('/root', '/etc', '/home', '/work', '/var') if os.path.exists(p)])\n"
        "print(os.getcwd(), sorted(os.listdir('.')))\n"
        "print(any('site-packages' in p and os.listdir(p) for p in sys.path if os.path.isdir(p)))\n"
        "for path in ('/newfile', '/usr/newfile', '/dev/newfile', '/proc/newfile', sys.executable):\n"
        "    try:\n"
        "        open(path, 'w').close()\n"
        "        print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print(type(exc).__name__)\n"
        "open('/tmp/answer.txt', 'w').write('42')\n"
        "print(open('/tmp/answer.txt').read())"
    )
    assert result.ok, result.stderr
    lines = result.stdout.splitlines()
    assert set(eval(lines[0])) <= {"dev", "lib", "lib64", "proc", "tmp", "usr", "root", "opt"}
    assert lines[1] == "False False"  # neither the host's temp files nor the project tree
    assert lines[2] in ("[]", "['/root']")  # /root only as the path of a mounted interpreter
    assert lines[3] == "/tmp ['solution.py']"
    assert lines[4] == "False"  # no third-party package is importable
    assert "wrote" not in result.stdout
    assert lines[-1] == "42"
    assert not Path("/tmp/answer.txt").exists()


def test_third_party_packages_are_not_importable():
    result = run("import django")
    assert not result.ok and "No module named 'django'" in result.stderr


def test_limits_are_set_inside_and_cannot_be_raised():
    result = run(
        "import resource as r\n"
        "for name in ('AS', 'CPU', 'FSIZE', 'NPROC', 'NOFILE', 'CORE'):\n"
        "    print(name, *r.getrlimit(getattr(r, 'RLIMIT_' + name)))\n"
        "try:\n"
        "    r.setrlimit(r.RLIMIT_NPROC, (10_000, 10_000))\n"
        "except (ValueError, OSError) as exc:\n"
        "    print('refused')",
        timeout_s=3,
        memory_mb=300,
    )
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == [
        f"AS {300 * 1024 * 1024} {300 * 1024 * 1024}",
        "CPU 4 5",
        f"FSIZE {FILE_SIZE_LIMIT} {FILE_SIZE_LIMIT}",
        f"NPROC {PROCESS_LIMIT} {PROCESS_LIMIT}",
        "NOFILE 64 64",
        "CORE 0 0",
        "refused",
    ]


def test_hard_caps_apply_whatever_the_caller_asks(monkeypatch):
    result = run("import resource as r\nprint(r.getrlimit(r.RLIMIT_AS)[0])", memory_mb=65536)
    assert int(result.stdout) == sandbox.MAX_MEMORY_MB * 1024 * 1024
    monkeypatch.setattr(sandbox, "MAX_TIMEOUT_S", 1.0)
    started = time.monotonic()
    result = run("import time\ntime.sleep(30)", timeout_s=300)
    assert result.timed_out and time.monotonic() - started < 4


def test_failing_program_reports_traceback_and_exit_status():
    result = run("def f():\n    assert 1 == 2, 'one is not two'\nf()")
    assert not result.ok and result.returncode == 1
    assert result.stderr.strip().endswith("AssertionError: one is not two")
    assert 'solution.py", line 2, in f' in result.stderr


def test_exit_status_is_passed_through():
    result = run("import sys\nsys.exit(3)")
    assert not result.ok and result.returncode == 3


def test_syntax_error_is_a_failed_run():
    result = run("def broken(:\n    pass")
    assert not result.ok and "SyntaxError" in result.stderr


def test_infinite_loop_times_out_promptly():
    started = time.monotonic()
    result = run("while True:\n    pass", timeout_s=1)
    assert result.timed_out and not result.ok
    assert time.monotonic() - started < 1 + 2


def test_memory_limit_stops_a_2gb_allocation():
    result = run("data = bytearray(2 * 1024 ** 3)\nprint('allocated')", memory_mb=256)
    assert not result.ok and "allocated" not in result.stdout
    assert "MemoryError" in result.stderr


def test_same_allocation_fits_without_the_tight_limit():
    result = run("data = bytearray(64 * 1024 ** 2)\nprint(len(data))", memory_mb=512)
    assert result.ok, result.stderr
    assert result.stdout.strip() == str(64 * 1024**2)


def test_the_writable_tmp_is_small():
    chunk = FILE_SIZE_LIMIT - 1024 * 1024
    files = TMPFS_BYTES // chunk + 2
    result = run(
        f"for i in range({files}):\n    open(f'/tmp/fill{{i}}', 'wb').write(b'x' * {chunk})", memory_mb=512
    )
    assert not result.ok and "No space left on device" in result.stderr


def test_network_is_a_private_loopback():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        result = run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)")
        listener.settimeout(0.3)
        with pytest.raises(TimeoutError):
            listener.accept()
    assert not result.ok and "ConnectionRefusedError" in result.stderr


def test_processes_are_limited_per_run():
    # Two runs at once each get their own budget (RLIMIT_NPROC counts per user namespace).
    bomb = (
        "import os, time\nn = 0\nfor _ in range(100):\n    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(10)\n        os._exit(0)\n"
        "    n += 1\nprint(n, flush=True)\ntime.sleep(1)"
    )
    results = []
    threads = [threading.Thread(target=lambda: results.append(run(bomb, timeout_s=5))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        assert result.ok, result.stderr
        assert int(result.stdout) == PROCESS_LIMIT - 2  # bwrap's reaper and the program count too


@pytest.mark.parametrize("exit_early", [True, False], ids=["parent_exits", "parent_times_out"])
def test_no_process_outlives_the_run(exit_early):
    marker = f"skillgate-orphan-{os.getpid()}-{exit_early}"
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.extend(processes_with(marker))
            time.sleep(0.05)

    program = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}])"
        "\n"
        "    os._exit(0)\n"
        "time.sleep(0.5)\n" + ("" if exit_early else "while True:\n    pass\n")
    )
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = run(program, timeout_s=1.5)
    finally:
        time.sleep(0.2)
        stop.set()
        watcher.join()
    assert result.timed_out is not exit_early
    assert seen, "the setsid grandchild never started"
    assert processes_with(marker) == []


def test_seccomp_refuses_kernel_attack_surface():
    result = run(
        "import ctypes, errno, socket\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "calls = (('ptrace', 101), ('mount', 165), ('unshare', 272), ('bpf', 321), ('clone3', 435))\n"
        "for name, nr in calls:\n"
        "    print(name, libc.syscall(nr, 0, 0, 0, 0, 0), errno.errorcode[ctypes.get_errno()])\n"
        "for family in (socket.AF_VSOCK, socket.AF_NETLINK, socket.AF_PACKET):\n"
        "    try:\n"
        "        socket.socket(family, socket.SOCK_RAW)\n"
        "    except OSError as exc:\n"
        "        print(family, errno.errorcode[exc.errno])\n"
        "socket.socket(socket.AF_INET).close()\n"
        "socket.socket(socket.AF_UNIX).close()\n"
        "import subprocess, sys, threading\n"
        "print(subprocess.run([sys.executable, '-c', 'print(7)'], capture_output=True).stdout)"
    )
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == [
        "ptrace -1 EPERM",
        "mount -1 EPERM",
        "unshare -1 EPERM",
        "bpf -1 EPERM",
        "clone3 -1 ENOSYS",  # so libc falls back to clone(), which still works:
        f"{socket.AF_VSOCK} EAFNOSUPPORT",
        f"{socket.AF_NETLINK} EAFNOSUPPORT",
        f"{socket.AF_PACKET} EAFNOSUPPORT",
        "b'7\\n'",
    ]


def test_seccomp_kills_a_32_bit_system_call():
    # mov eax, 20 (getpid in the i386 table); int 0x80; ret -- the filter only knows x86-64 numbers.
    result = run(
        "import ctypes, mmap\n"
        "buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        "buf.write(bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3]))\n"
        "print('calling', flush=True)\n"
        "ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))()\n"
        "print('returned')"
    )
    assert result.stdout == "calling\n"
    assert result.returncode == 128 + 31  # SIGSYS, as bwrap reports a signal


def test_seccomp_program_checks_the_architecture_first():
    program = seccomp.x86_64_program()
    insns = [struct.unpack("<HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    assert insns[0] == (0x20, 0, 0, 4)  # load seccomp_data.arch
    assert insns[1] == (0x15, 1, 0, seccomp.AUDIT_ARCH_X86_64)
    assert insns[2] == (0x06, 0, 0, 0x80000000)  # otherwise kill the process
    denied = {k for code, _, _, k in insns if code == 0x15}
    assert set(seccomp.DENIED_X86_64.values()) <= denied


def test_output_is_truncated_keeping_head_and_tail():
    result = run("print('START' + 'x' * 1_000_000)\nprint('END')")
    assert result.ok
    assert len(result.stdout) <= OUTPUT_LIMIT + 100
    assert result.stdout.startswith("START")
    assert result.stdout.rstrip().endswith("END")
    assert "bytes truncated" in result.stdout


def test_an_output_flood_stops_at_the_file_size_limit():
    started = time.monotonic()
    result = run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)")
    assert not result.ok  # Python ignores SIGXFSZ: the write past the limit fails instead
    assert "OSError: [Errno 27] File too large" in result.stderr
    assert len(result.stdout) <= OUTPUT_LIMIT + 100
    assert time.monotonic() - started < 5


def test_never_raises_for_unencodable_source():
    result = run("print('\udc80')")
    assert not result.ok and result.returncode is None
    assert "sandbox error" in result.stderr


def test_refuses_to_run_without_bubblewrap(settings, tmp_path):
    settings.SKILLGATE = {**settings.SKILLGATE, "SANDBOX_BWRAP": "/nonexistent/bwrap"}
    marker = tmp_path / "ran"
    result = run_python(f"open({str(marker)!r}, 'w').close()", timeout_s=2, memory_mb=128)
    assert result.unavailable and not result.ok
    assert result.stderr.startswith("sandbox unavailable: bubblewrap")
    assert not marker.exists()


def test_unsafe_mode_runs_unsandboxed_with_a_warning(settings, tmp_path, caplog):
    settings.SKILLGATE = {
        **settings.SKILLGATE,
        "SANDBOX_BWRAP": "/nonexistent/bwrap",
        "SANDBOX_ALLOW_UNSAFE": True,
    }
    marker = tmp_path / "ran"
    with caplog.at_level(logging.WARNING, logger="routing.verifiers.sandbox"):
        result = run_python(f"open({str(marker)!r}, 'w').close()", timeout_s=2, memory_mb=128)
    assert result.ok and not result.unavailable, result.stderr
    assert marker.exists()  # no isolation at all: that is what the warning is for
    assert any("WITHOUT a sandbox" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


# --- two programs, two sandboxes (python_tests: routing/verifiers/harness/) --------------------------


def _pair(server: str, client: str, *, timeout_s: float = 5):
    to_server_r, to_server_w = os.pipe()
    to_client_r, to_client_w = os.pipe()
    server = server.format(read=to_server_r, write=to_client_w)
    client = client.format(read=to_client_r, write=to_server_w)
    return sandbox.run_pair(
        server,
        client,
        server_fds=[to_server_r, to_client_w],
        client_fds=[to_client_r, to_server_w],
        timeout_s=timeout_s,
        memory_mb=128,
    )


ECHO = "import os, time\nos.write({write}, os.read({read}, 100).upper())\ntime.sleep(60)\n"
ASK = (
    "import os\nos.write({write}, b'ping')\nprint(os.read({read}, 100).decode())\n"
    "print((sorted(p for p in os.listdir('/proc') if p.isdigit()), sorted(os.listdir('/proc/self/fd'))))\n"
)


def test_a_pair_talks_only_through_its_pipes_from_separate_pid_namespaces():
    server, client = _pair(ECHO, ASK)
    assert client.ok, client.stderr
    answer, listing = client.stdout.splitlines()
    assert answer == "PING"
    pids, fds = eval(listing)
    assert pids == ["1", "2"]  # bwrap's init and the client: the server is in another namespace
    assert len(fds) == 6  # stdin, stdout, stderr, its two pipe ends, and listdir's own
    assert server.returncode is None and not server.ok  # still running when the client ended


def test_a_pair_reports_a_server_that_ended_early_and_kills_both_at_the_deadline():
    server, client = _pair("import os\nos._exit(3)\n", "import os\nprint(os.read({read}, 1))\n")
    assert client.ok and client.stdout == "b''\n"  # the server's end closed: the pipe reads its end
    assert server.returncode == 3
    started = time.monotonic()
    server, client = _pair(ECHO, "import time\ntime.sleep(60)\n", timeout_s=1)
    assert client.timed_out and server.timed_out and time.monotonic() - started < 4
