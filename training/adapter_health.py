"""The student's adapters across vLLM restarts and replicas: check, reload, alarm.

vLLM forgets every adapter loaded at run time when it restarts, and a replica that is added has none.
:func:`check_backend` (beat, every few seconds, and at once when a call found an adapter missing:
routing/call/replicas.py) asks each replica of a student backend what it serves (``GET /v1/models``),
compares that with the adapters the profiles using the backend have admitted, loads the missing ones
(``POST /v1/load_lora_adapter``, training/deploy.py), and writes what it saw per replica into
``Backend.replica_status``: up, adapters served, admitted ones still missing, when, and the last
error. The gateway sends a call that needs an adapter only to replicas whose status lists no such gap
(routing/call/replicas.py), so a replica becomes active for an adapter only once it has loaded it.

While a replica cannot be reached or an admitted adapter cannot be loaded into it, every check logs
an ``ALARM`` line (error level) and the status keeps ``failing_since``: the dashboard shows the alarm
(:func:`dashboard`, ``templates/web/_student_health.html``) and Prometheus the gauge
``skillgate_student_adapter_status`` (app/observability/replicas.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from django.db.models import Q, TextField
from django.db.models.functions import Cast

from routing.access import lookups
from routing.call import replicas
from routing.models import Backend, Invocation, TaskProfile
from training.deploy import DeployError, load_on, vllm_root
from training.models import Adapter

logger = logging.getLogger(__name__)

MODELS_TIMEOUT_S = 5.0


def student_backends() -> list[Backend]:
    """Active student backends with at least one server to check."""
    found = Backend.objects.filter(is_active=True, role=Backend.Role.STUDENT).order_by("pk")
    return [backend for backend in found if replicas.endpoints(backend)]


def admitted(backend: Backend) -> dict[str, str]:
    """The adapters calls on ``backend`` need, by name, with their folders ('' when no Adapter row
    names the folder): the admitted adapter of each profile using it (its own student, or the default
    student when it has none), the profiles' active adapters, and the backend's own ``adapter``."""
    default = Backend.objects.filter(is_active=True, role=Backend.Role.STUDENT).order_by("pk").first()
    using = Q(student=backend)
    if default is not None and default.pk == backend.pk:
        using |= Q(student__isnull=True)
    profiles = TaskProfile.objects.filter(using)
    names = {profile.student_adapter for profile in profiles if profile.student_adapter}
    names |= set(
        Adapter.objects.filter(profile__in=profiles, status=Adapter.Status.ACTIVE).values_list(
            "name", flat=True
        )
    )
    if backend.adapter:
        names.add(backend.adapter)
    folders = dict(Adapter.objects.filter(name__in=names).values_list("name", "path"))
    return {name: folders.get(name, "") for name in sorted(names)}


def served_by(url: str) -> list[str]:
    """The model names the replica at ``url`` serves: its base model and every loaded adapter."""
    response = httpx.get(f"{vllm_root(url)}/v1/models", timeout=MODELS_TIMEOUT_S)
    response.raise_for_status()
    data = response.json().get("data")
    if not isinstance(data, list):
        raise ValueError("GET /v1/models did not answer a list of models")
    return [str(model["id"]) for model in data if isinstance(model, dict) and "id" in model]


def _check_replica(
    backend: Backend, url: str, wanted: dict[str, str], before: dict[str, Any]
) -> dict[str, Any]:
    now = time.time()
    try:
        names = served_by(url)
    except (httpx.HTTPError, ValueError, KeyError, AttributeError) as exc:
        error = f"GET /v1/models failed: {type(exc).__name__}: {str(exc)[:300]}"
        logger.error("ALARM student replica %s of backend %r is unreachable: %s", url, backend.name, error)
        return _entry(up=False, adapters=[], missing=sorted(wanted), error=error, before=before, now=now)
    errors, reloaded = [], []
    for name, folder in wanted.items():
        if name in names:
            continue
        if not folder:
            errors.append(f"{name}: no adapter folder is known, so it cannot be loaded")
            continue
        try:
            load_on(url, name, folder, ours=True)
        except DeployError as exc:
            errors.append(str(exc))
            continue
        names.append(name)
        reloaded.append(name)
    missing = sorted(set(wanted) - set(names))
    if reloaded:
        logger.warning(
            "student replica %s of backend %r: reloaded %s", url, backend.name, ", ".join(reloaded)
        )
    if missing:
        logger.error(
            "ALARM student replica %s of backend %r cannot serve admitted adapter(s) %s: %s",
            url,
            backend.name,
            ", ".join(missing),
            "; ".join(errors),
        )
    entry = _entry(
        up=True, adapters=sorted(names), missing=missing, error="; ".join(errors), before=before, now=now
    )
    return {**entry, "reloaded": reloaded}


def _entry(
    *, up: bool, adapters: list[str], missing: list[str], error: str, before: dict[str, Any], now: float
) -> dict[str, Any]:
    failing = not up or bool(missing)
    since = before.get("failing_since") if failing else None
    return {
        "up": up,
        "adapters": adapters,
        "missing": missing,
        "error": error[:2000],
        "checked_at": now,
        "failing_since": (since or now) if failing else None,
    }


def targets(backend: Backend) -> list[tuple[str, str]]:
    """The replicas to check now, each with the ``dns+`` entry it was found behind ('' for a listed
    URL): a name's addresses are resolved afresh, so a replica that appears behind it is checked (and
    gets the admitted adapters) before the gateway sends it a call."""
    listed = (
        [url for url in backend.replicas if isinstance(url, str)]
        if isinstance(backend.replicas, list)
        else []
    )
    found: dict[str, str] = {}
    for url in listed:
        if not url.startswith(replicas.DNS_PREFIX):
            found.setdefault(url, "")
            continue
        try:
            addresses = replicas.discovered(url)
        except OSError as exc:
            logger.error("ALARM student replicas %s of backend %r do not resolve: %s", url, backend.name, exc)
            addresses = []
        for address in addresses or [url.removeprefix(replicas.DNS_PREFIX)]:
            found.setdefault(address, url)
    if not listed and backend.api_base:
        found[backend.api_base] = ""
    return list(found.items())


def check_backend(backend_id: int) -> dict[str, dict[str, Any]]:
    """Checks every replica of one student backend (resolving ``dns+`` entries), loads what is
    missing, records and returns the status by replica URL (replicas gone are dropped). Idempotent."""
    backend = Backend.objects.filter(pk=backend_id, role=Backend.Role.STUDENT).first()
    if backend is None:
        return {}
    wanted = admitted(backend)
    before = backend.replica_status if isinstance(backend.replica_status, dict) else {}
    checked = {}
    for url, via in targets(backend):
        entry = _check_replica(backend, url, wanted, before.get(url) or {})
        checked[url] = {**entry, "via": via} if via else entry
    Backend.objects.filter(pk=backend_id).update(replica_status=checked)
    lookups.clear()
    return checked


def check_all() -> list[int]:
    """The ids of the student backends to check (beat sends one check each)."""
    return [backend.pk for backend in student_backends()]


# --- the dashboard --------------------------------------------------------------------------------


@dataclass
class ReplicaRow:
    backend: str
    url: str
    up: bool
    adapters: list[str]
    missing: list[str]
    error: str
    checked_at: datetime | None
    failing_since: datetime | None

    @property
    def alarm(self) -> bool:
        return self.failing_since is not None


@dataclass
class StudentHealth:
    replicas: list[ReplicaRow] = field(default_factory=list)
    adapter_missing_legs: int = 0  # student legs that failed because their adapter was not loaded
    since: datetime | None = None

    @property
    def alarm(self) -> bool:
        return any(row.alarm for row in self.replicas)


def _when(value: Any) -> datetime | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=UTC)
    return None


def adapter_missing_legs(since: datetime) -> int:
    """Student legs since ``since`` that failed because their adapter was not loaded (the ledger's
    legs, routing/call/replicas.py ``leg_adapter_missing``); the text filter only narrows the rows read."""
    rows = (
        Invocation.objects.filter(created_at__gte=since)
        .annotate(legs_text=Cast("legs", TextField()))
        .filter(legs_text__contains=replicas.ADAPTER_MISSING)
        .values_list("legs", flat=True)
    )
    return sum(
        sum(1 for leg in legs if isinstance(leg, dict) and replicas.leg_adapter_missing(leg))
        for legs in rows.iterator()
        if isinstance(legs, list)
    )


def dashboard(*, since: datetime) -> StudentHealth:
    """What the dashboard shows of the student's replicas: each one's last check, alarms, and how many
    student legs since ``since`` found their adapter missing."""
    rows: list[ReplicaRow] = []
    for backend in student_backends():
        status = backend.replica_status if isinstance(backend.replica_status, dict) else {}
        for url in replicas.endpoints(backend):
            entry = status.get(url)
            if not isinstance(entry, dict):
                rows.append(ReplicaRow(backend.name, url, True, [], [], "not checked yet", None, None))
                continue
            rows.append(
                ReplicaRow(
                    backend=backend.name,
                    url=url,
                    up=bool(entry.get("up")),
                    adapters=[str(name) for name in entry.get("adapters") or []],
                    missing=[str(name) for name in entry.get("missing") or []],
                    error=str(entry.get("error") or ""),
                    checked_at=_when(entry.get("checked_at")),
                    failing_since=_when(entry.get("failing_since")),
                )
            )
    return StudentHealth(replicas=rows, adapter_missing_legs=adapter_missing_legs(since), since=since)
