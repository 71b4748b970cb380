"""The Python sandbox: limits, the audit-hook jail, clean-up. Real subprocesses, no database."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from routing.verifiers.sandbox import OUTPUT_LIMIT, run_python


def run(source: str, *, timeout_s: float = 5, memory_mb: int = 256):
    return run_python(source, timeout_s=timeout_s, memory_mb=memory_mb)


def test_runs_a_program_and_captures_both_streams():
    result = run("import sys\nprint('out', 6 * 7)\nprint('oops', file=sys.stderr)")
    assert result.ok and result.returncode == 0 and not result.timed_out
    assert result.stdout == "out 42\n"
    assert result.stderr == "oops\n"


def test_runs_isolated_with_a_minimal_environment(monkeypatch):
    monkeypatch.setenv("SKILLGATE_TEST_SECRET", "hunter2")
    result = run("import os, sys\nprint(sys.flags.isolated)\nprint(sorted(os.environ))")
    assert result.ok, result.stderr
    isolated, env_names = result.stdout.splitlines()
    assert isolated == "1"
    assert "SKILLGATE_TEST_SECRET" not in env_names
    assert "PATH" in env_names


def test_failing_program_reports_traceback_and_exit_status():
    result = run("def f():\n    assert 1 == 2, 'one is not two'\nf()")
    assert not result.ok and result.returncode == 1
    assert result.stderr.strip().endswith("AssertionError: one is not two")
    assert 'File "solution.py", line 2, in f' in result.stderr


def test_exit_status_is_passed_through():
    result = run("import sys\nsys.exit(3)")
    assert not result.ok and result.returncode == 3


def test_syntax_error_is_a_failed_run():
    result = run("def broken(:\n    pass")
    assert not result.ok
    assert "SyntaxError" in result.stderr


def test_infinite_loop_times_out_promptly():
    started = time.monotonic()
    result = run("while True:\n    pass", timeout_s=1)
    elapsed = time.monotonic() - started
    assert result.timed_out and not result.ok
    assert elapsed < 1 + 3


def test_sleeping_program_is_killed_on_wall_clock_timeout():
    started = time.monotonic()
    result = run("import time\ntime.sleep(60)", timeout_s=1)
    assert result.timed_out
    assert time.monotonic() - started < 1 + 3


def test_memory_limit_stops_a_2gb_allocation():
    result = run("data = bytearray(2 * 1024 ** 3)\nprint('allocated')", memory_mb=256)
    assert not result.ok
    assert "allocated" not in result.stdout
    assert "MemoryError" in result.stderr


def test_same_allocation_fits_without_the_tight_limit():
    result = run("data = bytearray(64 * 1024 ** 2)\nprint(len(data))", memory_mb=512)
    assert result.ok, result.stderr
    assert result.stdout.strip() == str(64 * 1024**2)


@pytest.mark.parametrize(
    "connect",
    [
        "socket.create_connection(('127.0.0.1', PORT), timeout=2)",
        "s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\ns.connect(('127.0.0.1', PORT))",
    ],
    ids=["create_connection", "raw_connect"],
)
def test_network_connection_to_a_real_listener_is_blocked(connect):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        result = run(f"import socket\nPORT = {port}\n{connect}\nprint('connected')")
        listener.settimeout(0.5)
        with pytest.raises(TimeoutError):
            listener.accept()
    assert not result.ok
    assert "connected" not in result.stdout
    assert "is not allowed" in result.stderr


def test_binding_a_server_socket_is_blocked():
    result = run("import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 0))\nprint('bound')")
    assert not result.ok and "bound" not in result.stdout
    assert "socket.bind is not allowed" in result.stderr


@pytest.mark.parametrize(
    "spawn",
    [
        "import subprocess\nsubprocess.run(['touch', MARKER])",
        "import subprocess\nsubprocess.run(['echo'])\nimport os\nos.close(os.open(MARKER, os.O_CREAT))",
        "import os\nos.system('touch ' + MARKER)",
        "import os\nos.posix_spawn('/usr/bin/touch', ['touch', MARKER], {})",
        "import os\nos.execv('/usr/bin/touch', ['touch', MARKER])",
        "import os\nif os.fork() == 0:\n    open(MARKER, 'w').close()",
        "import sys\ndel sys.modules['_posixsubprocess']\nimport _posixsubprocess",
        "import _posixsubprocess\n_posixsubprocess.fork_exec()",
        "import ctypes\nctypes.CDLL(None).system(('touch ' + MARKER).encode())",
    ],
    ids=[
        "subprocess",
        "subprocess_echo",
        "os_system",
        "posix_spawn",
        "exec",
        "fork",
        "reimport",
        "fork_exec",
        "ctypes",
    ],
)
def test_process_creation_is_blocked(spawn, tmp_path):
    marker = tmp_path / "spawned"
    result = run(f"MARKER = {str(marker)!r}\n{spawn}\nprint('spawned')")
    assert not result.ok
    assert "spawned" not in result.stdout
    assert "not allowed" in result.stderr
    assert not marker.exists()


def test_signalling_other_processes_is_blocked():
    victim = subprocess.Popen(["sleep", "30"])
    try:
        result = run(f"import os, signal\nos.kill({victim.pid}, signal.SIGKILL)")
        assert not result.ok
        assert "os.kill is not allowed" in result.stderr
        time.sleep(0.2)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_files_go_to_a_temporary_directory_that_is_removed():
    result = run(
        "import os, tempfile\n"
        "open('answer.txt', 'w').write('42')\n"
        "os.makedirs('sub/dir')\n"
        "print(os.getcwd())\n"
        "print(tempfile.mkstemp()[1])"
    )
    assert result.ok, result.stderr
    workdir, temp_file = result.stdout.splitlines()
    assert Path(workdir).is_absolute()
    assert Path(workdir).resolve() != Path.cwd().resolve()
    assert temp_file.startswith(workdir)
    assert not Path(workdir).exists()
    assert not (Path.cwd() / "answer.txt").exists()


@pytest.mark.parametrize(
    "write",
    [
        "open(TARGET, 'w').write('pwned')",
        "import pathlib\npathlib.Path(TARGET).write_text('pwned')",
        "import os\nos.symlink(TARGET, 'link')\nopen('link', 'w').write('pwned')",
        "import os\nos.rename(TARGET, 'stolen')",
        "import os\nos.remove(TARGET)",
    ],
    ids=["open", "pathlib", "symlink", "rename", "remove"],
)
def test_writing_outside_the_sandbox_is_blocked(write, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("original")
    result = run(f"TARGET = {str(target)!r}\n{write}")
    assert not result.ok
    assert "not allowed" in result.stderr
    assert target.read_text() == "original"


def test_reading_and_normal_imports_still_work():
    result = run("import json, threading, numpy\nprint(json.dumps({'a': 1}))", memory_mb=512)
    if "No module named 'numpy'" in result.stderr:
        result = run("import json, threading\nprint(json.dumps({'a': 1}))")
    assert result.ok, result.stderr
    assert result.stdout.strip() == '{"a": 1}'


def test_output_is_truncated_keeping_head_and_tail():
    result = run("print('START' + 'x' * 1_000_000)\nprint('END')")
    assert result.ok
    assert len(result.stdout) <= OUTPUT_LIMIT + 100
    assert result.stdout.startswith("START")
    assert result.stdout.rstrip().endswith("END")
    assert "bytes truncated" in result.stdout


def test_never_raises_for_unencodable_source():
    result = run("print('\udc80')")
    assert not result.ok and result.returncode is None
    assert "sandbox error" in result.stderr


def test_no_process_is_left_behind():
    result = run("import os\nprint(os.getpid())")
    pid = int(result.stdout)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
