"""Attacking the code sandbox through the running gateway, and watching it from the host.

``Gateway`` sends a call whose stub teacher answer is the attacking code (after a correct ``add``);
the profile's ``python_tests`` verifier runs it in the sandbox, as it would any model's answer.
``processes_with`` and ``Watcher`` find the sandbox's processes in the host's /proc by a marker on
their command line, which ``relaunch`` puts there.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.support.openai_stub import OpenAIStub, Reply
from routing.models import Invocation
from tests.support.wall import bound

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
                continue  # it exited while we looked
    return found


def relaunch(body: str, marker: str) -> str:
    """Code that re-executes as ``python -c body marker``, so the host can find it in /proc."""
    return f"import os, sys\nos.execv(sys.executable, [sys.executable, '-c', {body!r}, {marker!r}])\n"


class Watcher:
    """Samples, from the host, the processes whose command line holds a marker, during a call."""

    def __init__(self, marker: str) -> None:
        self.marker, self.most, self._stop = marker, 0, threading.Event()
        self._thread = threading.Thread(target=self._watch)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.most = max(self.most, len(processes_with(self.marker)))
            time.sleep(0.02)  # the sampling period

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


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
        assert outcome.elapsed < bound(QUICK_S), (outcome.elapsed, bound(QUICK_S))
