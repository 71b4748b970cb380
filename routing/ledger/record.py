"""The one ledger row of a call, written with the settlement of its budget hold in one transaction
(routing/ledger/writer.py: now, or group-committed behind a journal); and the bodies it stores, kept
to their lifetime (``routing.conf.get().ledger``: store_bodies, retention_days)."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from routing import budgets, conf
from routing.models import Invocation


@dataclass
class Leg:
    """One upstream attempt of a call."""

    backend: str
    role: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost_usd: Decimal = Decimal(0)
    latency_ms: float = 0.0
    verify_ms: float = 0.0
    verdict: str = Invocation.Verdict.UNVERIFIED
    detail: str = ""
    error: str = ""
    error_status: int = 0
    usage_estimated: bool = False
    # Upstream attempts sent (retries included), and whether ``cost_usd`` is the usage the provider
    # reported or holds a worst case: an attempt that may have been billed and gave no usage (timed
    # out, cut, failed with a 5xx, retried) is charged its bound (routing/call/attempts.py).
    attempts: int = 0
    cost_basis: str = Invocation.CostBasis.USAGE

    def as_json(self) -> dict[str, Any]:
        """The leg as the ledger's ``legs`` keeps it: its fields in order, the cost as a decimal string.
        Spelled out: ``dataclasses.asdict`` deep-copies each value and cost ~40 us of every ledger row."""
        return {
            "backend": self.backend,
            "role": self.role,
            "model": self.model,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "cost_usd": str(self.cost_usd),
            "latency_ms": self.latency_ms,
            "verify_ms": self.verify_ms,
            "verdict": self.verdict,
            "detail": self.detail,
            "error": self.error,
            "error_status": self.error_status,
            "usage_estimated": self.usage_estimated,
            "attempts": self.attempts,
            "cost_basis": self.cost_basis,
        }


@dataclass
class CallRecord:
    """Everything the ledger keeps about one call; filled in as the call runs."""

    id: uuid.UUID
    api_key_id: int
    profile_id: int
    requested_model: str
    route: str
    policy: str
    score: float | None
    stream: bool
    request: dict[str, Any]
    legs: list[Leg] = field(default_factory=list)
    served_by: str = ""
    cache_write: str = ""  # the prompt-cache markers "forwarded" or "dropped" (a header; not stored)
    verdict: str = Invocation.Verdict.UNVERIFIED
    verdict_detail: str = ""
    status_code: int = 200
    error: str = ""
    response: dict[str, Any] | None = None
    latency_ms: float = 0.0
    overhead_ms: float = 0.0
    router_version_id: int | None = None
    sample_leg: str = ""  # drawn up front: the leg a background sample would add (teacher_sampling)
    sample_state: str = ""
    verifier_source: str = ""  # routing/verifiers/policy.py: "profile", "call" or "" (none)
    endpoint: str = "/v1/chat/completions"  # the API the call came in on (ledger, metrics)
    profile_name: str = ""  # (metrics)

    @property
    def cost_usd(self) -> Decimal:
        return sum((leg.cost_usd for leg in self.legs), Decimal(0))

    @property
    def attempts(self) -> int:
        return sum(leg.attempts for leg in self.legs)

    @property
    def cost_basis(self) -> str:
        bound = any(leg.cost_basis == Invocation.CostBasis.BOUND for leg in self.legs)
        return Invocation.CostBasis.BOUND if bound else Invocation.CostBasis.USAGE

    @property
    def fallback(self) -> bool:
        return self.route == Invocation.Route.STUDENT and self.served_by == Invocation.Route.TEACHER


def ledger_row(record: CallRecord) -> dict[str, Any]:
    """The Invocation row of a finished call as JSON values: the line its journal keeps and what the
    writer inserts (``invocation_of``). Bodies as stored (hashes only without LEDGER_STORE_BODIES)."""
    return {
        "id": str(record.id),
        "created_at": datetime.now(UTC).isoformat(),  # timezone.now() without its settings lookup (USE_TZ)
        "api_key_id": record.api_key_id,
        "profile_id": record.profile_id,
        "requested_model": record.requested_model,
        "route": record.route,
        "served_by": record.served_by,
        "policy": record.policy,
        "score": record.score,
        "verdict": record.verdict,
        "verdict_detail": record.verdict_detail[:4000],
        "fallback": record.fallback,
        "stream": record.stream,
        "status_code": record.status_code,
        "error": record.error[:4000],
        "legs": [leg.as_json() for leg in record.legs],
        "prompt_tokens": sum(leg.prompt_tokens for leg in record.legs),
        "completion_tokens": sum(leg.completion_tokens for leg in record.legs),
        "cost_usd": str(budgets.to_cents(record.cost_usd)),
        "attempts": min(record.attempts, 32767),
        "cost_basis": record.cost_basis,
        "latency_ms": record.latency_ms,
        "overhead_ms": record.overhead_ms,
        "request": stored_request(record.request),
        "response": stored_response(record.response),
        "router_version_id": record.router_version_id,
        "sample_state": record.sample_state,
        "verifier_source": record.verifier_source,
        "endpoint": record.endpoint,
    }


def invocation_of(row: dict[str, Any]) -> Invocation:
    """The unsaved Invocation of a ``ledger_row``."""
    values = dict(row)
    values["id"] = uuid.UUID(values["id"])
    values["created_at"] = datetime.fromisoformat(values["created_at"])
    values["cost_usd"] = Decimal(values["cost_usd"])
    return Invocation(**values)


# --- bodies: what is stored, and for how long ---------------------------------------------------
# A row keeps its body while ``request`` holds the call's messages. Without one (hash-only mode, or
# purged) ``request`` is ``{"sha256": ..., "message_count": n}`` (plus ``"purged": true`` once purged):
# no ``messages`` key, so readers doing ``request.get("messages") or []`` see none; the replay, the
# router's training data and background samples leave such rows out (``HAS_BODY``).
HAS_BODY = Q(request__has_key="messages")


def digest(value: Any) -> str:
    """SHA-256 (hex) of ``value`` as canonical JSON: sorted keys, no spaces, UTF-8."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def has_body(request: Any) -> bool:
    """Whether a ledger ``request`` still holds the call's messages (not hash-only, not purged)."""
    return isinstance(request, dict) and isinstance(request.get("messages"), list)


def stores_bodies() -> bool:
    return conf.get().ledger.store_bodies


def request_stub(request: dict[str, Any]) -> dict[str, Any]:
    """What stands for a request body that is not kept: its hash and how many messages it had."""
    if "input" in request and "messages" not in request:  # an embeddings call: its hash
        return {"sha256": digest(request)}
    if not has_body(request):  # already a stub: keep its hash
        return {key: request[key] for key in ("sha256", "message_count") if key in request}
    return {"sha256": digest(request), "message_count": len(request["messages"])}


def stored_request(request: dict[str, Any]) -> dict[str, Any]:
    return request if stores_bodies() else request_stub(request)


def stored_response(response: dict[str, Any] | None) -> dict[str, Any] | None:
    """The response as written: without LEDGER_STORE_BODIES, no message text, only its hash and the
    finish reason."""
    if response is None or stores_bodies():
        return response
    message = response.get("message")
    return {
        "message": None,
        "finish_reason": response.get("finish_reason"),
        "sha256": digest(message) if message is not None else None,
    }


def ledger_bodies_purge(*, now: datetime | None = None, batch: int | None = None) -> int:
    """Blanks the bodies of calls older than LEDGER_RETENTION_DAYS (0: keeps them); returns how many.

    The row stays, with its costs, tokens, legs, verdict and status (budgets and the dashboard read
    them): ``request`` becomes ``{"purged": true, "sha256", "message_count"}``, ``response`` null. In
    batches of LEDGER_PURGE_BATCH rows, oldest first, each batch its own transaction.
    """
    days = conf.get().ledger.retention_days
    if days <= 0:
        return 0
    size = batch or conf.get().ledger.purge_batch
    cutoff = (now or timezone.now()) - timedelta(days=days)
    kept = HAS_BODY | Q(request__has_key="input") | Q(response__isnull=False)  # "input": embeddings
    due = Invocation.objects.filter(created_at__lt=cutoff).filter(kept)
    purged = 0
    while True:
        with transaction.atomic():
            rows = list(due.order_by("created_at", "pk").only("pk", "request")[:size])
            for row in rows:
                row.request = {"purged": True, **request_stub(row.request or {})}
            Invocation.objects.bulk_update(rows, ["request"])
            # update(), not bulk_update: None is SQL NULL here, where bulk_update would store JSON null.
            Invocation.objects.filter(pk__in=[row.pk for row in rows]).update(response=None)
        purged += len(rows)
        if len(rows) < size:
            return purged
