"""Fixtures of the sandbox attack tests (test_sandbox_escapes.py, test_sandbox_resources.py)."""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.factories import TaskProfileFactory
from tests.support.sandbox import GOOD, PROFILE, TIMEOUT_S, Gateway
from tests.support.wait import wait_until


@pytest.fixture
def gateway(gateway_url, backends, api_key, stub) -> Gateway:  # type: ignore[no-untyped-def]
    """The running gateway with a profile whose ``python_tests`` verifier runs every answer in the sandbox."""
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
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    wait_until(lambda: cmdline.read_bytes() == b"sleep\x0060\x00", timeout=10, what="the victim to run sleep")
    yield proc
    proc.kill()
    proc.wait()
