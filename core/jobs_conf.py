"""The background jobs' typed settings (``core.jobs_conf.get()``): the timings of core/jobs.py.

Diagnoses, action executions, Slack deliveries, teacher samples and Evolver jobs share them. Declared
once here (the machinery: core/conf.py), read from the environment by app/settings/operations.py
through these declarations and checked at start-up (``app.apps.SkillgateConfig.ready()``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypedDict

from django.core.exceptions import ImproperlyConfigured

from core.conf import cached, load, setting


class SweepTimings(TypedDict):
    """The timing arguments of ``core.jobs.sweep``."""

    stale_after_s: float
    ring_after_s: float
    max_attempts: int


@dataclass(frozen=True)
class Jobs:
    """Background jobs whose row is the record (core/jobs.py): heartbeats, the sweep, attempts."""

    SECTION: ClassVar[str] = ""
    heartbeat_s: float = setting(
        "JOBS_HEARTBEAT_S",
        env="SKILLGATE_JOBS_HEARTBEAT_S",
        default=10.0,
        gt=0,
        doc="A running job writes its heartbeat this often.",
    )
    stale_after_s: float = setting(
        "JOBS_STALE_AFTER_S",
        env="SKILLGATE_JOBS_STALE_AFTER_S",
        default=60.0,
        gt=0,
        doc="A running job without a heartbeat this long lost its worker: requeued while it has "
        "attempts left, then failed with the reason (more than twice the heartbeat).",
    )
    ring_after_s: float = setting(
        "JOBS_RING_AFTER_S",
        env="SKILLGATE_JOBS_RING_AFTER_S",
        default=300.0,
        gt=0,
        doc="A queued job whose message was sent this long ago gets it sent again.",
    )
    max_attempts: int = setting(
        "JOBS_MAX_ATTEMPTS",
        env="SKILLGATE_JOBS_MAX_ATTEMPTS",
        default=3,
        ge=1,
        doc="Claims of one job; after the last a lost worker fails it (an interrupted action is "
        "re-checked, never re-run blindly).",
    )
    sweep_every_s: float = setting(
        "JOBS_SWEEP_EVERY_S",
        env="SKILLGATE_JOBS_SWEEP_EVERY_S",
        default=30.0,
        gt=0,
        doc="Beat runs the sweeps of diagnoses, Slack events, teacher samples and Evolver jobs this often.",
    )

    def sweep_timings(self) -> SweepTimings:
        """The keyword arguments of ``core.jobs.sweep`` these settings give."""
        return {
            "stale_after_s": self.stale_after_s,
            "ring_after_s": self.ring_after_s,
            "max_attempts": self.max_attempts,
        }


GROUPS: tuple[type, ...] = (Jobs,)


def build() -> Jobs:
    """The group from django's settings, checked (raises ImproperlyConfigured naming a bad value)."""
    jobs = load(Jobs)
    if jobs.stale_after_s <= 2 * jobs.heartbeat_s:
        raise ImproperlyConfigured(
            "SKILLGATE_JOBS_STALE_AFTER_S (settings.JOBS_STALE_AFTER_S) must exceed twice "
            f"SKILLGATE_JOBS_HEARTBEAT_S; got {jobs.stale_after_s} and {jobs.heartbeat_s}."
        )
    return jobs


get = cached(build)


def check() -> None:
    """Start-up: built and checked now."""
    build()
