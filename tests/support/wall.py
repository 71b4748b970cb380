"""Wall-clock bounds of the tests, stretched by the machine's load.

A test that times something the server does while other work runs (issue 37's liveness property: an
ordinary call answers within a second while an attack runs) states its bound for an unloaded
machine. On a loaded one (CI runs its two suites side by side on two cores; a developer runs tests
beside a build) every process gets a share of the cores, so a wall-clock bound is stretched by the
load beyond the cores: ``bound(1.0)`` is 1 s at a 1-minute load average up to the core count, 2 s at
twice it. The attacks these bounds guard against held the server for 3-9 s of its own CPU; where a
test must tell smaller differences apart it measures CPU time (``time.thread_time``) instead.
"""

from __future__ import annotations

import os


def load_factor() -> float:
    """The 1-minute load average per core, at least 1."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def bound(seconds: float) -> float:
    """``seconds`` on an unloaded machine, stretched by :func:`load_factor`."""
    return seconds * load_factor()
