"""Planning one model call: its backends, the student's adapter, the verifier, the SkillBook prefix,
best-of-n and the upstream body.

This is the one public way to plan a call (design.md, dependency direction). The gateway
(routing/call/gateway.py), background sampling (routing/call/sampling.py) and the learning cycle's
replay, SkillBook and admission (training/services/cycle/) all plan through :func:`plan_call`, so a
replayed or sampled call meets the same backend, adapter, prompt, verifier and body as it did behind
``/v1/chat/completions``. Running a planned leg is routing/call/legs.py.

- Backends: the profile's own teacher and student, else the first active backend of that role.
- Adapter: the profile's admitted ``student_adapter`` over the backend's ``adapter``; admission
  passes an explicit ``adapter`` for its candidate. The backend row is never changed (a copy).
- Verifier: routing/verifiers/policy.py decides whose verifier judges the call; ``enforce=False``
  re-judges a call the gateway already admitted (its permission was checked then).
- SkillBook: the profile's text (or admission's candidate text) in front of the student's prompt.
- Best-of-n: a backend with ``samples`` > 1 is asked for n answers at a temperature of at least
  :data:`BEST_OF_TEMPERATURE` when a verifier can choose among them.
- Body: ``ChatRequest.upstream_body`` capped at the call's own limit, else the profile's, else
  ``routing.conf.get().limits.default_max_tokens`` (``core.conf.resolve``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import cached_property
from typing import Any

from core import conf as core_conf
from routing import conf, prompt_cache
from routing.models import ApiKey, Backend, TaskProfile
from routing.pricing import (
    Prices,
    PricingError,
    Terms,
    prices_for,
    prompt_token_bound,
    terms_bound,
    terms_of,
)
from routing.protocol import ChatRequest
from routing.verifiers import Verifier
from routing.verifiers.policy import resolve

AUTO_MODEL = "auto"
BEST_OF_TEMPERATURE = 0.8

Request = ChatRequest | dict[str, Any]


def active_backends() -> list[Backend]:
    """Every active backend, oldest first: the defaults a profile without its own backends uses."""
    return list(Backend.objects.filter(is_active=True).order_by("pk"))


def _default(role: str, backends: Sequence[Backend] | None) -> Backend | None:
    if backends is None:
        return Backend.objects.filter(is_active=True, role=role).order_by("pk").first()
    return next((b for b in backends if b.role == role), None)


def teacher_of(profile: TaskProfile, backends: Sequence[Backend] | None = None) -> Backend | None:
    """The profile's teacher, else the first active one (of ``backends`` when given, else queried)."""
    return profile.teacher or _default(Backend.Role.TEACHER, backends)


def student_of(
    profile: TaskProfile, backends: Sequence[Backend] | None = None, *, adapter: str | None = None
) -> Backend | None:
    """The profile's student as the gateway calls it: its admitted adapter, or ``adapter`` when given
    ('' keeps the backend's own). The returned object is never saved: live traffic is unchanged."""
    student = profile.student or _default(Backend.Role.STUDENT, backends)
    name = profile.student_adapter if adapter is None else adapter
    if student is not None and name:
        student = copy.copy(student)
        student.adapter = name
    return student


def with_skillbook(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The student's prompt with a SkillBook in front: merged into a leading system message."""
    if not text:
        return messages
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        first = {**messages[0], "content": f"{text}\n\n{messages[0]['content']}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def best_of_body(backend: Backend, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as sent to a best-of-n backend (``samples`` > 1): n answers in one call, sampled, since a
    greedy request would get n copies of one answer. Only for a call whose answers something checks."""
    if backend.samples <= 1:
        return body
    temperature = max(body.get("temperature") or 0.0, BEST_OF_TEMPERATURE)
    return {**body, "n": backend.samples, "temperature": temperature}


def parse(request: Request) -> ChatRequest:
    """A stored request (a ledger row's, a demonstration's) parsed as the gateway parsed it."""
    if isinstance(request, ChatRequest):
        return request
    return ChatRequest.model_validate({"model": AUTO_MODEL, **request})


@dataclass(frozen=True)
class LegPricing:
    """What pricing reads of one leg's upstream body, read once (issue 42): the backend's prices, the
    body's price-changing parameters and its prompt's token bound. The budget hold, the attempts' worst
    case and the answer's price of a call all read the same one (:meth:`CallPlan.pricing`)."""

    prices: Prices
    terms: Terms
    prompt_tokens: int  # routing/pricing.py ``prompt_token_bound``

    @classmethod
    def of(cls, prices: Prices, body: dict[str, Any]) -> LegPricing:
        """``body``'s pricing at ``prices`` (its backend's)."""
        return cls(prices, terms_of(body), prompt_token_bound(body))

    def bound(self, *, max_tokens: int, answers: int = 1) -> Decimal:
        """The worst case of one attempt (routing/pricing.py ``terms_bound``)."""
        return terms_bound(
            self.prices, self.terms, self.prompt_tokens, max_tokens=max_tokens, answers=answers
        )


@dataclass
class _Planned:
    """One backend's body as the plan sends it, what became of its prompt-cache markers, its pricing."""

    backend: Backend  # held, so that its id() keys no other backend while the plan lives
    body: dict[str, Any]  # never handed out: callers get a copy of its top level
    cache_write: str
    pricing: LegPricing | None = None


def _same_body(body: dict[str, Any], planned: dict[str, Any]) -> bool:
    """Whether ``body`` is a copy of ``planned``'s top level (the same values, not equal ones)."""
    return len(body) == len(planned) and all(body.get(k, body) is v for k, v in planned.items())


@dataclass(frozen=True)
class CallPlan:
    """How one call is made. ``teacher`` or ``student`` is None where no such backend exists."""

    profile: TaskProfile
    request: ChatRequest
    request_dict: dict[str, Any]  # what verifiers see and the ledger stores
    teacher: Backend | None
    student: Backend | None
    verifier: Verifier | None
    verifier_source: str
    verifier_config: dict[str, Any]
    max_tokens: int
    skillbook_text: str
    owner: str = ""  # the API key's id: its share of the verifier pool (routing/verifiers/pool.py)

    @cached_property
    def _upstream_body(self) -> dict[str, Any]:
        """The request's upstream body, dumped once per call (each leg, the budget's bound, a replay
        read it); callers get a copy of its top level."""
        return self.request.upstream_body(max_tokens=self.max_tokens)

    @cached_property
    def _planned(self) -> dict[int, _Planned]:
        """Per backend (at most one entry for each backend object this call is sent to)."""
        return {}

    @cached_property
    def _read_prices(self) -> dict[int, tuple[Backend, Prices | PricingError]]:
        """Per backend object (held, as in ``_planned``): its prices, or why it has none."""
        return {}

    def _prices(self, backend: Backend) -> Prices:
        """``backend``'s prices, read once per call (the cache-write rule and the leg's pricing share
        them). Raises ``routing.pricing.PricingError`` for a backend without prices."""
        found = self._read_prices.get(id(backend))
        if found is None:
            try:
                read: Prices | PricingError = prices_for(backend)
            except PricingError as error:
                read = error
            found = self._read_prices[id(backend)] = (backend, read)
        if isinstance(found[1], PricingError):
            raise found[1]
        return found[1]

    def _for(self, backend: Backend) -> _Planned:
        found = self._planned.get(id(backend))
        if found is None:
            body, cache_write = self._body(backend)
            found = self._planned[id(backend)] = _Planned(backend, body, cache_write)
        return found

    def _body(self, backend: Backend, **overrides: Any) -> tuple[dict[str, Any], str]:
        body = {**self._upstream_body, **overrides}
        if backend.role == Backend.Role.STUDENT and self.skillbook_text:
            body["messages"] = with_skillbook(body["messages"], self.skillbook_text)
        return prompt_cache.cache_writes(backend, body, self._prices)  # an unpriced marker is dropped

    def body_for(self, backend: Backend, **overrides: Any) -> dict[str, Any]:
        """The upstream body for ``backend`` (``overrides`` on top, e.g. a replay's temperature); a
        student's prompt has the SkillBook in front. Built once per backend (without ``overrides``);
        each caller gets a copy of its top level."""
        return self._body(backend, **overrides)[0] if overrides else dict(self._for(backend).body)

    def cache_write(self, backend: Backend) -> str:
        """What became of the request's prompt-cache markers on ``backend`` (``x-skillgate-cache-write``)."""
        return self._for(backend).cache_write

    def pricing(self, backend: Backend, body: dict[str, Any] | None = None) -> LegPricing:
        """The pricing of ``body`` sent to ``backend`` (None: :meth:`body_for`'s). Read once per call and
        backend where ``body`` is a copy of :meth:`body_for`'s (the hold, a leg's attempts and its answer
        all read it); read from ``body`` itself where a leg changed it (n answers, best-of-n). Raises
        ``routing.pricing.PricingError`` for a backend without prices."""
        planned = self._for(backend)
        if body is not None and not _same_body(body, planned.body):
            return LegPricing.of(self._prices(backend), body)
        if planned.pricing is None:
            planned.pricing = LegPricing.of(self._prices(backend), planned.body)
        return planned.pricing

    def samples(self, backend: Backend) -> int:
        """How many answers to ask ``backend`` for: its ``samples`` when there is a verifier to choose."""
        return backend.samples if backend.samples > 1 and self.verifier is not None else 1

    def leg_body(self, backend: Backend, **overrides: Any) -> dict[str, Any]:
        """The body one leg sends: :meth:`body_for`, asking a best-of-n backend for its n answers."""
        body = self.body_for(backend, **overrides)
        return best_of_body(backend, body) if self.samples(backend) > 1 else body

    def forced(self, backend: Backend) -> CallPlan:
        """The plan of a call whose ``model`` names ``backend``: a teacher alone, or that student. The
        profile's own student keeps the profile's admitted adapter."""
        if backend.role == Backend.Role.TEACHER:
            return replace(self, teacher=backend, student=None)
        if self.student is not None and self.student.pk == backend.pk:
            return self
        return replace(self, student=backend)


def output_cap(profile: TaskProfile, request: ChatRequest) -> int:
    """The call's own cap, else the profile's max_tokens, else the setting (``core.conf.resolve``)."""
    return request.output_cap(
        core_conf.resolve(conf.get().limits, "default_max_tokens", profile, key="max_tokens")
    )


def plan_call(
    *,
    profile: TaskProfile,
    request: Request,
    api_key: ApiKey | None = None,
    enforce: bool = True,
    backends: Sequence[Backend] | None = None,
    adapter: str | None = None,
    skillbook_text: str | None = None,
) -> CallPlan:
    """The plan of ``request`` (parsed, or a stored request dict) under ``profile``.

    ``backends``: the active backends when the caller holds them (the gateway's cached list), else
    the defaults are queried. ``adapter`` and ``skillbook_text`` replace the profile's admitted ones
    (admission's candidate). Raises ``VerifierPolicyError`` when the call's verifier cannot be used,
    and pydantic's ``ValidationError`` (a ``ValueError``) for a stored request that does not parse.
    """
    parsed = parse(request)
    request_dict = request if isinstance(request, dict) else parsed.dump()  # schemas shared, not copied
    resolved = resolve(profile, request_dict, api_key=api_key, enforce=enforce)
    return CallPlan(
        profile=profile,
        request=parsed,
        request_dict=request_dict,
        teacher=teacher_of(profile, backends),
        student=student_of(profile, backends, adapter=adapter),
        verifier=resolved.verifier,
        verifier_source=resolved.source,
        verifier_config=resolved.config,
        max_tokens=output_cap(profile, parsed),
        skillbook_text=profile.skillbook_text if skillbook_text is None else skillbook_text,
        owner=str(api_key.pk) if api_key is not None else "",
    )


__all__ = [
    "AUTO_MODEL",
    "BEST_OF_TEMPERATURE",
    "CallPlan",
    "LegPricing",
    "active_backends",
    "best_of_body",
    "output_cap",
    "parse",
    "plan_call",
    "student_of",
    "teacher_of",
    "with_skillbook",
]
