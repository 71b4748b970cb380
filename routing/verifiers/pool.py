"""Verifiers run off the event loop, in a bounded pool of threads per server process.

Invariants:

- A verifier that can be slow never runs on the event loop: a slow verifier (a sandboxed program near
  its deadline) holds one worker thread, never the loop, so other calls keep being served. Only a check
  whose cost is bounded and tiny (``Verifier.runs_inline``: an RE2 pattern on a short answer, a schema
  without regular expressions on a short answer) runs inline, since the thread hop would cost more.
- At most ``routing.conf.get().verifiers.workers`` verifications run at once in a process; more wait,
  asynchronously (the loop stays free), in the executor's queue.
- A verification that has not started within ``verifiers.queue_wait_s`` of being queued
  does not run: it is a failed :class:`Verdict` saying the pool was saturated. So the wait is bounded
  by that time plus the runtime of the verifications ahead of it (each bounded by its own timeout).
- A cancelled caller (the client went away) withdraws its verification if it has not started yet.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from routing import conf
from routing.verifiers.base import Verdict, Verifier

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_executor_size = 0


def _config() -> tuple[int, float]:
    verifiers = conf.get().verifiers
    return verifiers.workers, verifiers.queue_wait_s


def executor() -> ThreadPoolExecutor:
    """The process's pool, (re)made when the configured size changes."""
    global _executor, _executor_size
    workers, _ = _config()
    with _lock:
        if _executor is None or _executor_size != workers:
            old = _executor
            _executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="skillgate-verifier")
            _executor_size = workers
            if old is not None:
                old.shutdown(wait=False)  # its queued and running verifications still finish
        return _executor


def _run(
    verifier: Verifier, request: dict[str, Any], message: dict[str, Any], queued: float, wait_s: float
) -> Verdict:
    waited = time.monotonic() - queued
    if waited > wait_s:
        return Verdict(False, f"verifier pool saturated: no worker free within {wait_s:g}s")
    return verifier.verify(request=request, message=message)


async def run_verifier(verifier: Verifier, request: dict[str, Any], message: dict[str, Any]) -> Verdict:
    """``verifier.verify(...)`` in the pool, awaited without blocking the event loop (inline when the
    verifier says its check is bounded and tiny)."""
    if verifier.runs_inline(request=request, message=message):
        return verifier.verify(request=request, message=message)
    _, wait_s = _config()
    future = executor().submit(_run, verifier, request, message, time.monotonic(), wait_s)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        future.cancel()  # only withdraws it while it waits; a started verification finishes
        raise
