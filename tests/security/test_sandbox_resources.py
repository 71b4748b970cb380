"""Exhausting the code sandbox's resources through the running gateway, and the service under that load.

As in tests/security/test_sandbox_escapes.py, the stub teacher's answer is the attacking code, run by
the profile's ``python_tests`` verifier in the sandbox. Fork and memory bombs, endless loops and output
floods end at their limits or deadline with a fail verdict and no process left behind (checked from
the host's /proc); meanwhile other calls are served, a saturated verifier pool fails waiting calls
instead of queueing them forever, and without a sandbox no code runs at all.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from routing.verifiers.sandbox import OUTPUT_LIMIT, PROCESS_LIMIT
from tests.support.sandbox import GOOD, QUICK_S, TIMEOUT_S, Gateway, Watcher, processes_with, relaunch
from tests.support.wait import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


# --- resource exhaustion --------------------------------------------------------------------------


def test_a_fork_bomb_is_held_by_the_process_limit_and_ends_at_the_deadline(gateway):
    marker = f"skillgate-forkbomb-{secrets.token_hex(4)}"
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    with Watcher(marker) as watcher:
        outcome = gateway.attack(relaunch(bomb, marker))
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


def _spinning_in_background(gateway: Gateway) -> threading.Thread:
    """A call whose answer spins in the sandbox until its deadline; returns once it spins there."""
    marker = f"skillgate-spin-{secrets.token_hex(4)}"

    def call() -> None:
        try:
            gateway.call(GOOD + relaunch("while True:\n    pass\n", marker))
        finally:
            connection.close()  # this thread's own database connection

    thread = threading.Thread(target=call)
    thread.start()
    wait_until(lambda: processes_with(marker), timeout=QUICK_S, what="the answer spinning in the sandbox")
    return thread


def test_slow_verifications_do_not_stall_other_calls(gateway):
    spinning = _spinning_in_background(gateway)
    try:
        started = time.monotonic()
        outcome = gateway.call("hello", task="default")  # no verifier: the loop must be free
        assert outcome.status == 200 and time.monotonic() - started < 1.5
        gateway.assert_still_serving()  # a verification of its own, next to the spinning one
    finally:
        spinning.join()


def test_a_saturated_verifier_pool_fails_waiting_calls_instead_of_queueing_forever(gateway, settings):
    settings.SKILLGATE = {**settings.SKILLGATE, "VERIFIER_WORKERS": 1, "VERIFIER_QUEUE_WAIT_S": 0.5}
    spinning = _spinning_in_background(gateway)
    try:
        queued = gateway.call(GOOD)
        assert queued.verdict == "error" and "verifier pool saturated" in queued.detail
        assert queued.elapsed < TIMEOUT_S + QUICK_S
    finally:
        spinning.join()
    gateway.assert_still_serving()


def test_without_a_sandbox_code_verifiers_refuse_to_run_code(gateway, settings, tmp_path):
    settings.SKILLGATE = {**settings.SKILLGATE, "SANDBOX_BWRAP": "/nonexistent/bwrap"}
    marker = tmp_path / "ran"
    outcome = gateway.call(GOOD + f"open({str(marker)!r}, 'w').close()\n")
    assert (outcome.status, outcome.verdict) == (200, "error")  # unknown: neither pass nor the answer's fail
    assert outcome.detail.startswith("sandbox unavailable: bubblewrap (/nonexistent/bwrap) is not installed")
    assert not marker.exists()


def test_a_sandbox_that_fails_to_start_later_is_an_error_not_the_answers_fail(gateway, settings):
    # bwrap worked when first probed, then cannot start one (no namespace left, no memory): nothing
    # ran, so the verdict is unknown. Before the prelude's started byte, this was the answer's "fail"
    # ("the answer's process ended (exit status 1)"), a wrong label for every student answer meanwhile.
    real = shutil.which("bwrap")
    assert real is not None
    folder = Path(tempfile.mkdtemp(prefix="skillgate-flaky-bwrap-"))
    folder.chmod(0o755)  # the wrapper runs as the sandbox's uid
    wrapper, broken = folder / "bwrap", folder / "broken"
    wrapper.write_text(
        f"#!/bin/sh\nif [ -e {broken} ]; then\n"
        "  echo 'bwrap: Creating new namespace failed: No space left on device' >&2\n  exit 1\nfi\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    try:
        # One worker, so the run that fails is one whose process probed bwrap when it worked.
        settings.SKILLGATE = {**settings.SKILLGATE, "SANDBOX_BWRAP": str(wrapper), "VERIFIER_WORKERS": 1}
        assert gateway.call(GOOD).verdict == "pass"  # probed and working
        broken.touch()
        outcome = gateway.call(GOOD)
        assert (outcome.status, outcome.verdict) == (200, "error"), outcome.detail
        # (the answer's side may be killed before its bwrap even speaks: then its exit status is named)
        assert outcome.detail.startswith("sandbox error: the sandbox did not start: "), outcome.detail
        broken.unlink()
        assert gateway.call(GOOD).verdict == "pass"
    finally:
        shutil.rmtree(folder)
