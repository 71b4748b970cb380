"""What every attack test of tests/security asserts besides the refusal itself: nothing left the
machine (a listener stands where the attack points and must see no request), and an ordinary call sent
while the attack runs is answered in under :data:`PLAIN_CALL_S`."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from bench.support.openai_stub import OpenAIStub, Reply

PLAIN_CALL_S = 2.0
PLAIN = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


@contextlib.contextmanager
def listener() -> Iterator[OpenAIStub]:
    """Where a fetched URL would go: answers like a server and records every request."""
    with OpenAIStub(responder=lambda body: Reply(content="from the attacker's server")) as server:
        yield server


def plain_call(gateway_url: str, key: str) -> float:
    """Seconds an ordinary chat call took; fails unless it was answered 200. The client skips loading
    the CA bundle (plain HTTP on loopback): that took 0.05-0.2 s, counted in the call's time."""
    started = time.perf_counter()
    headers = {"Authorization": f"Bearer {key}"}
    url = f"{gateway_url}/v1/chat/completions"
    response = httpx.post(url, json=PLAIN, headers=headers, timeout=30, verify=False)
    assert response.status_code == 200, response.text
    return time.perf_counter() - started


def during(attack: Callable[[], Any], gateway_url: str, key: str, *, copies: int = 1) -> list[Any]:
    """Runs ``copies`` of ``attack`` at once and, once they are in flight, an ordinary call: returns
    the attacks' results after asserting the ordinary call took under :data:`PLAIN_CALL_S`."""
    with ThreadPoolExecutor(max_workers=copies + 1) as pool:
        attacks = [pool.submit(attack) for _ in range(copies)]
        time.sleep(0.05)
        took = plain_call(gateway_url, key)
        results = [future.result(timeout=60) for future in attacks]
    assert took < PLAIN_CALL_S, f"an ordinary call took {took:.2f}s during the attack"
    return results
