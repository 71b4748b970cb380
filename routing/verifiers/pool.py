"""Verifiers run in worker processes, never under the serving process's GIL (issue 37).

Invariants:

- **The event loop only awaits.** A check whose cost the caller controls (a schema on an answer, a
  pattern on a long text, a sandboxed program) runs in a worker *process*
  (routing/verifiers/workers.py): Python work under the GIL in a thread would stop every other call of
  the process. Only a check that says it is bounded and tiny (``Verifier.runs_inline``: an RE2 pattern
  on a short answer, a small schema without patterns, formats or references on a short answer) runs
  inline, since the round trip to a worker costs more.
- **A bounded pool.** ``routing.conf.get().verifiers.workers`` processes per server process, started
  together when the pool is first used (in parallel; each is ready in about 0.2 s). Each has one pool
  thread that writes its task and waits on its pipe with ``select`` (no GIL held while it waits).
- **No key fills it.** One API key verifies at most ``verifiers.workers_per_key`` answers at once
  (capped at the pool's size); its further verifications wait their turn in the event loop, outside the
  pool's queue, so other keys' calls still find a worker.
- **A deadline per task.** A verification still running ``verifiers.task_timeout_s`` (plus a code
  verifier's own ``timeout_s``) after its worker took it is stopped: the worker's process group is
  killed, a fresh worker replaces it, and the verdict is ``error`` with the reason. A worker that dies
  or breaks the channel is replaced the same way.
- **Bounded waits.** A verification that has not started within ``verifiers.queue_wait_s`` (waiting for
  its key's share or for a worker) does not run: verdict ``error``, "verifier pool saturated". A
  cancelled caller withdraws its verification if it has not started yet.
- ``error`` is neither a pass nor the answer's failure (routing/verifiers/base.py ``Verdict``): the
  gateway falls back as for any verdict that is not a pass, and no label or demonstration is made of it.
"""

from __future__ import annotations

import asyncio
import collections
import pickle
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from routing import conf
from routing.verifiers.base import Verdict, Verifier
from routing.verifiers.workers import WorkerGone, WorkerLate, WorkerProcess


@dataclass(frozen=True)
class _Shape:
    workers: int
    per_key: int
    task_timeout_s: float
    queue_wait_s: float


def _shape() -> _Shape:
    v = conf.get().verifiers
    return _Shape(v.workers, min(v.workers_per_key, v.workers), v.task_timeout_s, v.queue_wait_s)


class _Settings:
    """The parent's ``settings.SKILLGATE`` as the workers get it: pickled again only when
    ``routing.conf.get()`` was rebuilt (a settings change), with a generation each worker compares."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conf: Any = None
        self.generation = 0
        self.blob = b""

    def current(self) -> tuple[int, bytes]:
        routing_conf = conf.get()
        with self._lock:
            if routing_conf is not self._conf:
                self.blob = pickle.dumps(settings.SKILLGATE)
                self.generation += 1
                self._conf = routing_conf
            return self.generation, self.blob


class _Pool:
    def __init__(self, size: int) -> None:
        self.size = size
        self.idle: queue.SimpleQueue[WorkerProcess | None] = queue.SimpleQueue()
        for _ in range(size):
            self.idle.put(WorkerProcess())
        self.threads = ThreadPoolExecutor(max_workers=size, thread_name_prefix="skillgate-verifier")
        self.closed = False

    def run(self, task: dict[str, Any], deadline_s: float, queued: float, wait_s: float) -> Verdict:
        """In a pool thread: one task on an idle worker (there is always one: a thread per worker)."""
        if time.monotonic() - queued > wait_s:
            return Verdict.errored(f"verifier pool saturated: no worker free within {wait_s:g}s")
        try:
            payload = orjson.dumps(task)
        except TypeError as exc:
            return Verdict.errored(f"the call cannot be sent to a verifier worker: {exc}")
        worker = self.idle.get()
        global _sent
        _sent += 1
        if worker is None and self.closed:  # the pool was retired while this task waited
            self.idle.put(None)
            return Verdict.errored("the verifier pool was resized while this verification waited")
        if worker is None:  # its predecessor could not be started: try again now
            try:
                worker = WorkerProcess()
            except OSError as exc:
                self.idle.put(None)
                return Verdict.errored(f"no verifier worker process could be started: {exc}")
        try:
            verdict, keep = self._on(worker, payload, deadline_s)
        except BaseException:
            worker.kill()
            self._replace()
            raise
        if keep and not self.closed:
            self.idle.put(worker)
            return verdict
        if keep:
            worker.close()
        else:
            worker.kill()
        self._replace()
        return verdict

    def _on(self, worker: WorkerProcess, payload: bytes, deadline_s: float) -> tuple[Verdict, bool]:
        try:
            worker.wait_ready()
            generation, blob = _SETTINGS.current()
            if worker.settings_generation != generation:
                worker.send(b"S", blob)
                worker.settings_generation = generation
            worker.send(b"T", payload)
            _, answer = worker.receive(deadline_s)
        except WorkerLate:
            return (
                Verdict.errored(
                    f"verification stopped at its {deadline_s:g}s deadline (its worker process was killed "
                    "and replaced): the answer was not judged"
                ),
                False,
            )
        except WorkerGone as exc:
            return Verdict.errored(f"the verifier worker process failed: {exc}"), False
        data = orjson.loads(answer)
        verdict = Verdict(bool(data["passed"]), str(data["detail"]), error=bool(data["error"]))
        return verdict, not data.get("retire", False)

    def _replace(self) -> None:
        """A fresh worker in the place of one that is gone, started now so it is ready when needed."""
        if self.closed:
            return
        try:
            self.idle.put(WorkerProcess())
        except OSError:  # cannot start a process now: the next task that takes its place tries again
            self.idle.put(None)

    def close(self) -> None:
        """Retire the pool (its size changed): running tasks finish, idle workers exit now, the others
        as their task ends."""
        self.closed = True
        self.threads.shutdown(wait=False)
        while True:
            try:
                worker = self.idle.get_nowait()
            except queue.Empty:
                break
            if worker is not None:
                worker.close()
        self.idle.put(None)  # wakes a task still queued on the retired pool (it answers error)


class _KeyGate:
    """At most ``cap`` verifications of one key in the pool at once; the rest wait in their event loop
    (in arrival order), never in the pool's queue. Thread-safe: a slot is handed to the next waiter of
    that key on its own loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._waiting: dict[
            str, collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]
        ] = {}

    async def acquire(self, key: str, cap: int, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._held.get(key, 0) < cap:
                self._held[key] = self._held.get(key, 0) + 1
                return True
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiting.setdefault(key, collections.deque()).append((loop, waiter))
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except (TimeoutError, asyncio.CancelledError):
            with self._lock:
                line = self._waiting.get(key)
                if line is not None and (loop, waiter) in line:
                    line.remove((loop, waiter))
            if waiter.done() and not waiter.cancelled():  # handed a slot as it gave up: pass it on
                self.release(key)
            raise
        return True

    def release(self, key: str) -> None:
        with self._lock:
            line = self._waiting.get(key)
            while line:
                loop, waiter = line.popleft()
                if not waiter.done():
                    loop.call_soon_threadsafe(self._hand, key, waiter)
                    return
            self._waiting.pop(key, None)
            left = self._held.get(key, 0) - 1
            if left > 0:
                self._held[key] = left
            else:
                self._held.pop(key, None)

    def _hand(self, key: str, waiter: asyncio.Future[None]) -> None:
        if waiter.done():  # it gave up meanwhile: the slot goes to the next one
            self.release(key)
        else:
            waiter.set_result(None)

    def held(self, key: str) -> int:
        with self._lock:
            return self._held.get(key, 0)


_lock = threading.Lock()
_pool: _Pool | None = None
_sent = 0  # tasks taken to a worker by this process (an approximate count: for tests and benchmarks)
_SETTINGS = _Settings()
_GATE = _KeyGate()


def pool() -> _Pool:
    """The process's pool, (re)made when the configured size changes."""
    global _pool
    size = _shape().workers
    with _lock:
        if _pool is None or _pool.size != size:
            old, _pool = _pool, _Pool(size)
            if old is not None:
                old.close()
        return _pool


def tasks_sent() -> int:
    """How many verifications this process has taken to a worker process."""
    return _sent


def deadline_s(verifier: Verifier) -> float:
    """The wall time one verification may take in its worker."""
    return _shape().task_timeout_s + verifier.own_seconds()


async def run_verifier(
    verifier: Verifier, request: dict[str, Any], message: dict[str, Any], *, owner: str = ""
) -> Verdict:
    """``verifier.verify(...)`` in a worker process, awaited without blocking the event loop (inline
    when the verifier says its check is bounded and tiny). ``owner``: the API key the call is made with
    (its share of the pool); background work shares the key ''."""
    if verifier.runs_inline(request=request, message=message):
        return verifier.verify(request=request, message=message)
    task = {"config": verifier.config, "request": request, "message": message}
    return await run_task(task, deadline=deadline_s(verifier), owner=owner)


async def run_task(task: dict[str, Any], *, deadline: float, owner: str = "") -> Verdict:
    """One worker task (``{"config", "request", "message"}``: the verifier of ``config`` is built in the
    worker and run there), within ``owner``'s share of the pool and ``deadline`` seconds."""
    shape = _shape()
    queued = time.monotonic()
    try:
        await _GATE.acquire(owner, shape.per_key, shape.queue_wait_s)
    except TimeoutError:
        return Verdict.errored(
            f"verifier pool saturated: this key's share ({shape.per_key} workers) stayed busy for "
            f"{shape.queue_wait_s:g}s"
        )
    try:
        wait_s = shape.queue_wait_s - (time.monotonic() - queued)
        current = pool()
        future = current.threads.submit(current.run, task, deadline, time.monotonic(), wait_s)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()  # only withdraws it while it waits; a started verification finishes
            raise
    finally:
        _GATE.release(owner)
