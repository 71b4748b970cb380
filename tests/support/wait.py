"""Waiting for a condition instead of sleeping for a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    check: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    what: str = "the condition",
    abort: Callable[[], str | None] | None = None,
) -> T:
    """Calls ``check`` until it returns something truthy, and returns that.

    A check that raises AssertionError (a Playwright ``expect``, a plain assert) is retried too. At the
    deadline, or as soon as ``abort`` returns a reason (a process the condition depends on died), this
    fails with an AssertionError naming ``what``, chained to the check's last AssertionError if any.
    """
    deadline = time.monotonic() + timeout
    while True:
        last: AssertionError | None = None
        try:
            result = check()
            if result:
                return result
        except AssertionError as error:
            last = error
        reason = abort() if abort is not None else None
        if reason is None and time.monotonic() > deadline:
            reason = f"timed out after {timeout:g}s"
        if reason is not None:
            raise AssertionError(f"{reason} waiting for {what}") from last
        time.sleep(interval)
