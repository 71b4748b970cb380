"""One call through the gateway: resolve the profile, route, call, verify, fall back, record.

The view (routing/api.py) only parses and renders; this module holds the logic. The streaming
variant lives in routing/streaming.py and reuses ``prepare`` and the leg helpers here.
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from routing import budgets, lookups, teacher_sampling, upstream
from routing.errors import ApiError, UpstreamError, bad_request
from routing.ledger import CallRecord, Leg
from routing.models import ApiKey, Backend, Invocation, Reservation, TaskProfile
from routing.pricing import PricingError, cost_bound, prices_for, prompt_token_bound, usage_cost
from routing.protocol import ChatRequest
from routing.router import Call, Decision, build_router
from routing.verifier_policy import VerifierPolicyError, resolve
from routing.verifiers import Verifier
from routing.verifiers.pool import run_verifier

AUTO_MODEL = "auto"
BEST_OF_TEMPERATURE = 0.8
DEFAULT_PROFILE = "default"


@dataclass
class Prepared:
    api_key: ApiKey
    request: ChatRequest
    profile: TaskProfile
    teacher: Backend
    student: Backend | None
    verifier: Verifier | None
    decision: Decision
    max_tokens: int
    started: float
    verifier_source: str = ""

    def body_for(self, backend: Backend) -> dict[str, Any]:
        body = self.request.upstream_body(max_tokens=self.max_tokens)
        if backend.role == Backend.Role.STUDENT and self.profile.skillbook_text:
            body["messages"] = _with_skillbook(body["messages"], self.profile.skillbook_text)
        return body

    @cached_property
    def request_dict(self) -> dict[str, Any]:
        return self.request.model_dump(exclude_none=True)

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
            verifier_source=self.verifier_source,
            sample_leg=teacher_sampling.draw(
                profile=self.profile,
                route=self.decision.route,
                policy=self.decision.policy,
                has_student=self.student is not None,
            ),
        )


def _with_skillbook(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        first = {**messages[0], "content": f"{text}\n\n{messages[0]['content']}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def profile_name_of(request: ChatRequest, header: str | None) -> str:
    name = header or (request.metadata or {}).get("task") or DEFAULT_PROFILE
    if not isinstance(name, str):
        raise bad_request("metadata.task must be a string naming a task profile.", param="metadata.task")
    return name


def verifier_for(
    request: ChatRequest, profile: TaskProfile, api_key: ApiKey | None
) -> tuple[Verifier | None, str]:
    """The call's verifier and its source, by the profile's policy (routing/verifier_policy.py)."""
    try:
        resolved = resolve(profile, request.model_dump(exclude_none=True), api_key=api_key)
    except VerifierPolicyError as exc:
        kind = "permission_error" if exc.status == 403 else "invalid_request_error"
        raise ApiError(exc.status, exc.message, type=kind, param="metadata.verifier", code=exc.code) from None
    return resolved.verifier, resolved.source


def _load_profile_and_backends(name: str) -> tuple[TaskProfile, list[Backend]] | None:
    profile = TaskProfile.objects.select_related("student", "teacher").filter(name=name).first()
    if profile is None and name == DEFAULT_PROFILE:
        profile, _ = TaskProfile.objects.get_or_create(
            name=DEFAULT_PROFILE,
            defaults={"description": "Calls that name no task profile: no verifier, so the teacher answers."},
        )
    if profile is None:
        return None
    return profile, list(Backend.objects.filter(is_active=True).order_by("pk"))


async def prepare(*, api_key: ApiKey, request: ChatRequest, task_header: str | None) -> Prepared:
    started = time.perf_counter()
    name = profile_name_of(request, task_header)
    found = await lookups.cached("profile", name, lambda: _load_profile_and_backends(name))
    if found is None:
        raise bad_request(
            f"Unknown task profile {name!r}; create it in the admin or omit it for the default profile.",
            param="metadata.task",
            code="unknown_task_profile",
        )
    profile, backends = found
    teacher = profile.teacher or next((b for b in backends if b.role == Backend.Role.TEACHER), None)
    student = profile.student or next((b for b in backends if b.role == Backend.Role.STUDENT), None)
    if student is not None and profile.student_adapter:
        student = copy.copy(student)  # this profile's admitted adapter, not the backend's default
        student.adapter = profile.student_adapter
    if teacher is None:
        raise ApiError(503, "No teacher backend is configured.", type="server_error", code="no_backend")
    verifier, verifier_source = verifier_for(request, profile, api_key)
    forced = next((b for b in backends if b.name == request.model), None)
    if request.model == AUTO_MODEL:
        decision = await build_router(profile).aroute(Call(request, profile, verifier is not None))
        if decision.route == Invocation.Route.STUDENT and student is None:
            decision = Decision(
                Invocation.Route.TEACHER, decision.score, decision.policy, "no student backend"
            )
    elif forced is not None:
        teacher, student = (forced, None) if forced.role == Backend.Role.TEACHER else (teacher, forced)
        decision = Decision(forced.role, None, "forced", f"model names backend {forced.name!r}")
    else:
        raise ApiError(
            404,
            f"The model {request.model!r} does not exist; use 'auto' or a backend listed by /v1/models.",
            param="model",
            code="model_not_found",
        )
    default_cap = profile.max_tokens or settings.SKILLGATE["DEFAULT_MAX_TOKENS"]
    max_tokens = request.output_cap(default_cap)
    return Prepared(
        api_key, request, profile, teacher, student, verifier, decision, max_tokens, started, verifier_source
    )


def legs_planned(prep: Prepared) -> list[Backend]:
    if prep.decision.route == Invocation.Route.TEACHER:
        return [prep.teacher]
    assert prep.student is not None
    # The teacher backs the student up when its answer fails verification or its server fails.
    return [prep.student] if prep.decision.policy == "forced" else [prep.student, prep.teacher]


async def reserve_budget(prep: Prepared) -> Reservation | None:
    """Hold the worst case of every leg this call may run (student, then teacher on fallback).

    A key without a budget cannot overspend, so it holds nothing and is only charged afterwards.
    Either way every leg must be priced before it runs.
    """
    try:
        prices = [(backend, prices_for(backend)) for backend in legs_planned(prep)]
    except PricingError as exc:
        raise ApiError(503, str(exc), type="server_error", code="backend_unpriced") from None
    if prep.api_key.budget_usd is None:
        return None
    total = Decimal(0)
    for backend, price in prices:
        bound = prompt_token_bound(prep.body_for(backend))
        total += cost_bound(price, prompt_tokens=bound, max_tokens=prep.max_tokens)
    return await sync_to_async(budgets.reserve)(api_key_id=prep.api_key.pk, amount=total)


async def verify(prep: Prepared, leg: Leg, message: dict[str, Any]) -> None:
    if prep.verifier is None:
        return
    started = time.perf_counter()
    verdict = await run_verifier(prep.verifier, prep.request_dict, message)  # a bounded pool, off the loop
    leg.verify_ms = (time.perf_counter() - started) * 1000
    leg.verdict = Invocation.Verdict.PASS if verdict.passed else Invocation.Verdict.FAIL
    leg.detail = verdict.detail


def new_leg(backend: Backend) -> Leg:
    return Leg(backend=backend.name, role=backend.role, model=backend.litellm_model)


def price_leg(leg: Leg, backend: Backend, usage: upstream.Usage) -> None:
    leg.prompt_tokens = usage.prompt_tokens
    leg.completion_tokens = usage.completion_tokens
    leg.cached_tokens = usage.cached_tokens
    leg.cost_usd = usage_cost(prices_for(backend), usage)


def best_of(prep: Prepared, backend: Backend) -> int:
    """How many answers to ask ``backend`` for: its ``samples`` when there is a verifier to choose."""
    return backend.samples if backend.samples > 1 and prep.verifier is not None else 1


async def verify_best_of(prep: Prepared, leg: Leg, completion: upstream.Completion) -> upstream.Completion:
    """The first of the answers that passes verification, else the first answer, marked failed."""
    verify_ms, first_failure, total = 0.0, "", len(completion.choices)
    for index, (message, _) in enumerate(completion.choices):
        await verify(prep, leg, message)
        verify_ms += leg.verify_ms
        if leg.verdict == Invocation.Verdict.PASS:
            leg.verify_ms = verify_ms
            leg.detail = f"best of {total}: answer {index + 1} passed. {leg.detail}".strip()
            return completion.pick(index)
        first_failure = first_failure or leg.detail
    leg.verify_ms = verify_ms
    leg.detail = f"best of {total}: no answer passed; the first failed: {first_failure}"
    return completion.pick(0)


async def run_leg(prep: Prepared, record: CallRecord, backend: Backend) -> upstream.Completion | None:
    leg = new_leg(backend)
    record.legs.append(leg)
    body, samples = prep.body_for(backend), best_of(prep, backend)
    if samples > 1:
        # Sampling is what makes the answers differ; a greedy request would get n copies of one answer.
        temperature = max(body.get("temperature") or 0.0, BEST_OF_TEMPERATURE)
        body = {**body, "n": samples, "temperature": temperature}
    try:
        completion = await upstream.complete(backend, body)
    except UpstreamError as exc:
        leg.error, leg.error_status = exc.message, exc.status
        leg.verdict = Invocation.Verdict.ERROR
        return None
    leg.latency_ms = completion.latency_ms
    price_leg(leg, backend, completion.usage)
    if samples > 1 and len(completion.choices) > 1:
        return await verify_best_of(prep, leg, completion)
    await verify(prep, leg, completion.message)
    return completion


def finish(record: CallRecord, prep: Prepared, upstream_ms: float) -> None:
    record.latency_ms = (time.perf_counter() - prep.started) * 1000
    record.overhead_ms = max(0.0, record.latency_ms - upstream_ms)


async def save(record: CallRecord, reservation: Reservation | None) -> None:
    # Shielded: a client that disconnects must not cancel the ledger write or the settlement.
    write = sync_to_async(teacher_sampling.record_and_sample)
    await asyncio.shield(write(record=record, reservation=reservation))


@dataclass
class Result:
    record: CallRecord
    completion: upstream.Completion
    served: Leg


async def complete_call(prep: Prepared) -> Result:
    """A non-streamed call: all planned legs until one passes (or the last one answers)."""
    reservation = await reserve_budget(prep)
    record = prep.new_record()
    completion: upstream.Completion | None = None
    served: Leg | None = None
    try:
        for backend in legs_planned(prep):
            attempt = await run_leg(prep, record, backend)
            if attempt is None:
                continue
            completion, served = attempt, record.legs[-1]
            record.served_by = backend.role
            if served.verdict in (Invocation.Verdict.PASS, Invocation.Verdict.UNVERIFIED):
                break
        if completion is None or served is None:
            last = record.legs[-1]
            failure = UpstreamError(last.error, timeout=last.error_status == 504)
            record.status_code, record.error = failure.status, failure.message
            record.verdict = Invocation.Verdict.ERROR
            raise failure
        record.verdict, record.verdict_detail = served.verdict, served.detail
        record.response = {"message": completion.message, "finish_reason": completion.finish_reason}
        return Result(record, completion, served)
    finally:
        finish(record, prep, sum(leg.latency_ms for leg in record.legs))
        await save(record, reservation)
