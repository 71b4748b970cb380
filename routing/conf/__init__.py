"""The gateway's typed settings: ``routing.conf.get()`` (issue 30; the machinery is core/conf.py).

Each group declares its settings once (gateway.py, router.py): where they live in django's settings
(``SKILLGATE``), the environment variable, the default, the range. app/settings/gateway.py reads the
environment through these declarations; start-up (``check()``, from the apps' ``ready()``) builds them
once, so a wrong value stops it with a message naming the variable; code reads
``conf.get().budgets.lease_ttl_s``, never ``settings.SKILLGATE[...]``. The result is cached and built
again after Django's ``setting_changed`` (``override_settings``, pytest-django's ``settings`` fixture).
Per-profile overrides (``TaskProfile.policy_params``, ``TaskProfile.max_tokens``) are laid over these by
``core.conf.resolve`` only.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.conf import cached, load
from routing.conf.gateway import Budgets, CallMetrics, Ledger, Limits, RateLimit, Upstream, Verifiers
from routing.conf.router import Router, StudentBackend, TeacherBackend

__all__ = [
    "GROUPS",
    "Budgets",
    "CallMetrics",
    "Ledger",
    "Limits",
    "RateLimit",
    "Router",
    "Routing",
    "StudentBackend",
    "TeacherBackend",
    "Upstream",
    "Verifiers",
    "build",
    "check",
    "get",
]

GROUPS: tuple[type, ...] = (
    Limits,
    Upstream,
    Budgets,
    Ledger,
    RateLimit,
    Verifiers,
    CallMetrics,
    Router,
    TeacherBackend,
    StudentBackend,
)


@dataclass(frozen=True)
class Routing:
    """Every typed setting of routing, one group an attribute."""

    limits: Limits
    upstream: Upstream
    budgets: Budgets
    ledger: Ledger
    rate_limit: RateLimit
    verifiers: Verifiers
    call_metrics: CallMetrics
    router: Router
    teacher: TeacherBackend
    student: StudentBackend

    def backend(self, role: str) -> TeacherBackend | StudentBackend:
        """The seed of the 'teacher' or 'student' backend."""
        return self.teacher if role == "teacher" else self.student


def build() -> Routing:
    """Every group from django's settings, checked (raises ImproperlyConfigured naming a bad one)."""
    return Routing(
        limits=load(Limits),
        upstream=load(Upstream),
        budgets=load(Budgets),
        ledger=load(Ledger),
        rate_limit=load(RateLimit),
        verifiers=load(Verifiers),
        call_metrics=load(CallMetrics),
        router=load(Router),
        teacher=load(TeacherBackend),
        student=load(StudentBackend),
    )


get = cached(build)


def check() -> None:
    """Start-up: the settings are built and checked now, not on the first call that reads one."""
    build()
