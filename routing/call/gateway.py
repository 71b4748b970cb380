"""One call through the gateway: resolve the profile, route, call, verify, fall back, record.

The edge (routing/api/) only parses and renders; this module holds the logic. The call is planned
by routing/call/plans.py and its legs run in routing/call/legs.py; the streaming variant lives in
routing/call/streaming.py and reuses ``prepare`` and the helpers here.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from core import tracing
from core.db import run_sync
from routing import budgets, conf, scopes
from routing.access import lookups
from routing.call import body_work, sampling, upstream
from routing.call.legs import run_leg
from routing.call.metrics import observe_call
from routing.call.plans import AUTO_MODEL, CallPlan, active_backends, plan_call, teacher_of
from routing.errors import ApiError, UpstreamError, bad_request
from routing.ledger import CallRecord, Leg
from routing.ledger import writer as ledger_writer
from routing.media_urls import remote_url_param
from routing.models import ApiKey, Backend, Invocation, TaskProfile
from routing.pricing import PricingError, refuse_unpriced
from routing.protocol import ChatRequest
from routing.router.policies import Call, Decision, build_router
from routing.verifiers import Verifier
from routing.verifiers.policy import VerifierPolicyError

DEFAULT_PROFILE = "default"


@dataclass
class Prepared:
    """A planned call (routing/call/plans.py) with who made it, the routing decision and its start."""

    api_key: ApiKey
    plan: CallPlan
    decision: Decision
    started: float
    endpoint: str = "/v1/chat/completions"

    @property
    def request(self) -> ChatRequest:
        return self.plan.request

    @property
    def profile(self) -> TaskProfile:
        return self.plan.profile

    @property
    def teacher(self) -> Backend:
        assert self.plan.teacher is not None  # prepare refuses a call without one
        return self.plan.teacher

    @property
    def student(self) -> Backend | None:
        return self.plan.student

    @property
    def verifier(self) -> Verifier | None:
        return self.plan.verifier

    @property
    def max_tokens(self) -> int:
        return self.plan.max_tokens

    @property
    def request_dict(self) -> dict[str, Any]:
        return self.plan.request_dict

    def body_for(self, backend: Backend) -> dict[str, Any]:
        return self.plan.body_for(backend)

    def new_record(self) -> CallRecord:
        assert self.profile.pk is not None
        return CallRecord(
            id=uuid.uuid4(),
            api_key_id=self.api_key.pk,
            profile_id=self.profile.pk,
            requested_model=self.request.model,
            route=self.decision.route,
            policy=self.decision.policy,
            score=self.decision.score,
            stream=self.request.stream,
            request=self.request_dict,
            router_version_id=self.decision.version_id,
            verifier_source=self.plan.verifier_source,
            endpoint=self.endpoint,
            profile_name=self.profile.name,
            sample_leg=sampling.draw(
                profile=self.profile,
                route=self.decision.route,
                policy=self.decision.policy,
                has_student=self.student is not None,
                boost=self.decision.sample_boost,
            ),
        )


def profile_name_of(request: ChatRequest, header: str | None) -> str:
    name = header or (request.metadata or {}).get("task") or DEFAULT_PROFILE
    if not isinstance(name, str):
        raise bad_request("metadata.task must be a string naming a task profile.", param="metadata.task")
    return name


def _load_profile_and_backends(name: str) -> tuple[TaskProfile, list[Backend]] | None:
    profile = TaskProfile.objects.select_related("student", "teacher").filter(name=name).first()
    if profile is None and name == DEFAULT_PROFILE:
        profile, _ = TaskProfile.objects.get_or_create(
            name=DEFAULT_PROFILE,
            defaults={"description": "Calls that name no task profile: no verifier, so the teacher answers."},
        )
    if profile is None:
        return None
    return profile, active_backends()


async def profile_and_backends(name: str) -> tuple[TaskProfile, list[Backend]] | None:
    """The task profile called ``name`` and the active backends (cached per process), or None."""
    return await lookups.cached("profile", name, lambda: _load_profile_and_backends(name))


async def prepare(
    *, api_key: ApiKey, request: ChatRequest, task_header: str | None, endpoint: str = "/v1/chat/completions"
) -> Prepared:
    started = time.perf_counter()
    await body_work.pause()  # a heavy body was parsed: others' turn before it is planned
    media_url = remote_url_param(request.messages)
    if media_url is not None and not api_key.has_scope(scopes.MEDIA_URLS):
        raise ApiError(
            403,
            f"{media_url}: this API key may not send media by URL (the gateway could be made to fetch "
            "it); send it inline as a data: URL or base64, or ask an operator for the "
            f"'{scopes.MEDIA_URLS}' scope.",
            type="permission_error",
            param=media_url,
            code="missing_scope",
        )
    name = profile_name_of(request, task_header)
    found = await profile_and_backends(name)
    if found is None:
        raise bad_request(
            f"Unknown task profile {name!r}; create it in the admin or omit it for the default profile.",
            param="metadata.task",
            code="unknown_task_profile",
        )
    profile, backends = found
    if teacher_of(profile, backends) is None:
        raise ApiError(503, "No teacher backend is configured.", type="server_error", code="no_backend")
    try:
        plan = plan_call(profile=profile, request=request, api_key=api_key, backends=backends)
    except VerifierPolicyError as exc:
        kind = "permission_error" if exc.status == 403 else "invalid_request_error"
        raise ApiError(exc.status, exc.message, type=kind, param="metadata.verifier", code=exc.code) from None
    await body_work.pause()
    forced = next((b for b in backends if b.name == request.model), None)
    if request.model == AUTO_MODEL:
        # the plan dumped the request already: the router's features read that dump
        call = Call(request, profile, plan.verifier is not None, plan.request_dict)
        decision = await build_router(profile).aroute(call)
        if decision.route == Invocation.Route.STUDENT and plan.student is None:
            decision = Decision(
                Invocation.Route.TEACHER, decision.score, decision.policy, "no student backend"
            )
    elif forced is not None:
        plan = plan.forced(forced)  # the profile's own student keeps its admitted adapter
        decision = Decision(forced.role, None, "forced", f"model names backend {forced.name!r}")
    else:
        raise ApiError(
            404,
            f"The model {request.model!r} does not exist; use 'auto' or a backend listed by /v1/models.",
            param="model",
            code="model_not_found",
        )
    return Prepared(api_key, plan, decision, started, endpoint)


def legs_planned(prep: Prepared) -> list[Backend]:
    if prep.decision.route == Invocation.Route.TEACHER:
        return [prep.teacher]
    assert prep.student is not None
    # The teacher backs the student up when its answer fails verification or its server fails.
    return [prep.student] if prep.decision.policy == "forced" else [prep.student, prep.teacher]


async def reserve_budget(prep: Prepared) -> budgets.Hold | None:
    """Hold the worst case of every leg this call may run (student, then teacher on fallback; every
    answer of a best-of-n leg, each of the ``n`` choices asked for): on this
    process's lease of the key's budget, without a query while the lease covers it (routing/budgets/holds.py).

    A key without a budget cannot overspend, so it holds nothing and is only charged afterwards.
    Either way every leg must be priced before it runs, with the parameters that change its price
    (routing/pricing.py ``Terms``): one a leg's backend has no price for is a 400 naming it. A leg's
    retries hold more as they come (routing/call/attempts.py).
    """
    legs = []
    try:  # read once per leg: the refusal, the bound here, the leg's attempts and its price (plans.py)
        for backend in legs_planned(prep):
            await body_work.pause()
            legs.append((backend, prep.plan.pricing(backend)))
    except PricingError as exc:
        raise ApiError(503, str(exc), type="server_error", code="backend_unpriced") from None
    for backend, pricing in legs:
        refuse_unpriced(backend, pricing.prices, pricing.terms)
    body_work.planned()  # the caller's body is walked: its weight goes back (routing/call/body_work.py)
    if prep.api_key.budget_usd is None:
        return None
    total = Decimal(0)
    for backend, pricing in legs:
        # A best-of-n leg is paid for each of its n answers (the prompt once, as providers bill n), and
        # a call asking for n choices for each choice (routing/call/legs.py asks for choices x samples).
        answers = prep.plan.samples(backend) * prep.request.choice_count
        total += pricing.bound(max_tokens=prep.max_tokens, answers=answers)
    return await budgets.hold(api_key=prep.api_key, amount=total)


def extender(prep: Prepared, hold: budgets.Hold | None) -> Callable[[Decimal], Awaitable[bool]] | None:
    """How a leg's retry holds one more attempt on the call's hold; None for a key without a budget."""
    if hold is None:
        return None

    async def extend(amount: Decimal) -> bool:
        return await budgets.extend(api_key=prep.api_key, hold=hold, amount=amount)

    return extend


def finish(record: CallRecord, prep: Prepared, upstream_ms: float) -> None:
    record.latency_ms = (time.perf_counter() - prep.started) * 1000
    record.overhead_ms = max(0.0, record.latency_ms - upstream_ms)


def observe(record: CallRecord) -> None:
    """The call in the process's Prometheus metrics (routing/call/metrics.py: a deque append)."""
    observe_call(
        endpoint=record.endpoint,
        profile=record.profile_name,
        route=record.route,
        backend=record.legs[-1].backend if record.legs else "",
        verdict=record.verdict,
        status=record.status_code,
        latency_s=record.latency_ms / 1000,
        overhead_s=record.overhead_ms / 1000,
        fallback=record.fallback,
        cost_usd=record.cost_usd,
    )
    if tracing.tracer() is not None:  # OpenTelemetry, when OTEL_* names a collector: a deque append
        tracing.defer(trace, record)


def trace(end_ns: int, record: CallRecord) -> None:
    """The call and its legs as spans (core/tracing.py's thread)."""
    tracing.record(
        "skillgate.call",
        end_ns=end_ns,
        duration_ms=record.latency_ms,
        error=record.error if record.status_code >= 500 else "",
        attributes={
            "skillgate.invocation": str(record.id),
            "skillgate.endpoint": record.endpoint,
            "skillgate.profile": record.profile_name,
            "skillgate.route": record.route,
            "skillgate.served_by": record.served_by,
            "skillgate.backend": record.legs[-1].backend if record.legs else "",
            "skillgate.verdict": record.verdict,
            "skillgate.fallback": record.fallback,
            "skillgate.cost_usd": float(record.cost_usd),
            "skillgate.overhead_ms": record.overhead_ms,
            "skillgate.stream": record.stream,
            "http.response.status_code": record.status_code,
        },
        children=[
            tracing.Child(
                "skillgate.leg",
                leg.latency_ms,
                {
                    "skillgate.backend": leg.backend,
                    "skillgate.role": leg.role,
                    "skillgate.verdict": leg.verdict,
                    "skillgate.cost_usd": float(leg.cost_usd),
                    "skillgate.verify_ms": leg.verify_ms,
                    "gen_ai.request.model": leg.model,
                    "gen_ai.usage.input_tokens": leg.prompt_tokens,
                    "gen_ai.usage.output_tokens": leg.completion_tokens,
                },
                leg.error,
            )
            for leg in record.legs
        ],
    )


async def save(record: CallRecord, hold: budgets.Hold | None) -> None:
    """The call's ledger row and the settlement of its hold (routing/ledger/writer.py). Batched, it is
    a line in the journal and a place in the writer's queue: no database, no thread hop (unless each
    line is fsync'd). Shielded: a client that disconnects must not cancel the write or the settlement."""
    observe(record)
    if ledger_writer.writer_mode() == "batched" and conf.get().ledger.journal_fsync != "always":
        sampling.record_and_sample(record=record, hold=hold)
        return
    await asyncio.shield(run_sync(sampling.record_and_sample, record=record, hold=hold))


@dataclass
class Result:
    record: CallRecord
    completion: upstream.Completion
    served: Leg


async def complete_call(prep: Prepared) -> Result:
    """A non-streamed call: all planned legs until one passes (or the last one answers)."""
    hold = await reserve_budget(prep)
    record = prep.new_record()
    completion: upstream.Completion | None = None
    served: Leg | None = None
    try:
        for backend in legs_planned(prep):
            attempt = await run_leg(prep.plan, record, backend, extend=extender(prep, hold))
            if attempt is None:
                continue
            completion, served = attempt, record.legs[-1]
            record.served_by = backend.role
            record.cache_write = prep.plan.cache_write(backend)
            if served.verdict in (Invocation.Verdict.PASS, Invocation.Verdict.UNVERIFIED):
                break
        if completion is None or served is None:
            last = record.legs[-1]
            failure = UpstreamError.of_leg(last.error, last.error_status)
            record.status_code, record.error = failure.status, failure.message
            record.verdict = Invocation.Verdict.ERROR
            raise failure
        record.verdict, record.verdict_detail = served.verdict, served.detail
        record.response = {"message": completion.message, "finish_reason": completion.finish_reason}
        if prep.request.choice_count > 1:
            record.response["choices"] = [{"message": m, "finish_reason": f} for m, f in completion.choices]
        return Result(record, completion, served)
    finally:
        finish(record, prep, sum(leg.latency_ms for leg in record.legs))
        await save(record, hold)
