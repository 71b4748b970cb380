"""What the cycle's steps share: the profile's backends and verifier, one upstream call, task signatures.

Calls go through the gateway's own upstream code (``routing.upstream``, litellm) and verifiers, so a
replayed call meets the same backend, prompt and checks as it did behind ``/v1/chat/completions``.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings

from routing import upstream, verifier_policy
from routing.json_body import loads_answer
from routing.models import Backend, TaskProfile
from routing.pricing import prices_for, usage_cost
from routing.protocol import ChatRequest
from routing.verifiers import Verifier
from routing.verifiers.json_schema import message_text


class CycleError(Exception):
    """A step cannot run for a reason that retrying will not fix (no teacher, bad configuration)."""


def cycle_setting(name: str) -> Any:
    return settings.SKILLGATE["CYCLE"][name]


def teacher_of(profile: TaskProfile) -> Backend:
    teacher = (
        profile.teacher
        or Backend.objects.filter(role=Backend.Role.TEACHER, is_active=True).order_by("pk").first()
    )
    if teacher is None:
        raise CycleError("No teacher backend is configured.")
    return teacher


def student_of(profile: TaskProfile, *, adapter: str | None = None) -> Backend:
    """The profile's student as the gateway calls it: its admitted adapter, or ``adapter`` when given.

    The returned object is never saved: choosing an adapter here changes nothing for live traffic.
    """
    student = (
        profile.student
        or Backend.objects.filter(role=Backend.Role.STUDENT, is_active=True).order_by("pk").first()
    )
    if student is None:
        raise CycleError("No student backend is configured.")
    name = profile.student_adapter if adapter is None else adapter
    if name:
        student = copy.copy(student)
        student.adapter = name
    return student


def verifier_config(profile: TaskProfile, request: dict[str, Any]) -> dict[str, Any]:
    """The config that judged ``request`` at the gateway (the call was admitted there, so the profile's
    per-call permission is not checked again); {} when nothing verifies it."""
    try:
        return verifier_policy.config_for(profile, request, enforce=False)[0]
    except verifier_policy.VerifierPolicyError:
        return {}


def verifier_for(profile: TaskProfile, request: dict[str, Any]) -> Verifier | None:
    try:
        return verifier_policy.resolve(profile, request, enforce=False).verifier
    except verifier_policy.VerifierPolicyError:
        return None


def upstream_body(profile: TaskProfile, request: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """The body the gateway would send upstream for ``request`` (a ledger request or a demonstration's)."""
    parsed = ChatRequest.model_validate({"model": "auto", **request})
    cap = parsed.output_cap(profile.max_tokens or settings.SKILLGATE["DEFAULT_MAX_TOKENS"])
    return {**parsed.upstream_body(max_tokens=cap), **overrides}


def with_skillbook(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The student's prompt with a SkillBook in front, exactly as the gateway puts it there."""
    from routing.gateway import _with_skillbook

    return _with_skillbook(messages, text) if text else messages


@dataclass
class Answer:
    message: dict[str, Any]  # the first answer
    cost_usd: Decimal
    latency_ms: float
    choices: list[dict[str, Any]]  # every answer: more than one from a best-of-n backend


def sampled(backend: Backend, body: dict[str, Any]) -> dict[str, Any]:
    """The body as the gateway sends it to ``backend`` when a verifier can choose: a best-of-n backend
    (``samples`` > 1) is asked for n sampled answers in one call."""
    if backend.samples <= 1:
        return body
    from routing.gateway import BEST_OF_TEMPERATURE

    return {
        **body,
        "n": backend.samples,
        "temperature": max(body.get("temperature") or 0.0, BEST_OF_TEMPERATURE),
    }


async def acall(backend: Backend, body: dict[str, Any]) -> Answer:
    completion = await upstream.complete(backend, body)
    choices = [message for message, _ in completion.choices] or [completion.message]
    cost = usage_cost(prices_for(backend), completion.usage)
    return Answer(completion.message, cost, completion.latency_ms, choices)


def call(backend: Backend, body: dict[str, Any]) -> Answer:
    """One upstream call, synchronously (Celery tasks are synchronous). Raises UpstreamError."""
    return asyncio.run(acall(backend, body))


def verify(verifier: Verifier, request: dict[str, Any], message: dict[str, Any]) -> tuple[bool, str]:
    verdict = verifier.verify(request=request, message=message)
    return verdict.passed, verdict.detail


def first_passing(
    verifier: Verifier, request: dict[str, Any], answer: Answer
) -> tuple[dict[str, Any], bool, str]:
    """(answer, passed, detail): the first of the answers that passes, else the first one, failed."""
    first_detail = ""
    for message in answer.choices:
        passed, detail = verify(verifier, request, message)
        if passed:
            return message, True, detail
        first_detail = first_detail or detail
    return answer.choices[0], False, first_detail


def completion_text(message: dict[str, Any]) -> str:
    """The assistant's answer as training text: its content, then its tool calls in the Hermes format
    (``<tool_call>{"name", "arguments"}</tool_call>``) that chat templates and vLLM's parsers use."""
    parts = [message_text(message)] if message_text(message) else []
    for tool_call in message.get("tool_calls") or []:
        function = tool_call.get("function") or {}
        try:
            arguments: Any = loads_answer(function.get("arguments") or "{}")
        except ValueError:
            arguments = function.get("arguments")
        payload = json.dumps({"name": function.get("name"), "arguments": arguments}, ensure_ascii=False)
        parts.append(f"<tool_call>\n{payload}\n</tool_call>")
    return "\n".join(parts)


_SPACE = re.compile(r"\s+")


def task_signature(request: dict[str, Any]) -> tuple[str, str]:
    """(signature, label) of a call: what kind of task it is within its profile.

    Calls share a signature when they share the system prompt, the declared tools, the response format
    and the verifier kind, so one SkillBook section serves all calls of one kind (every HumanEval
    completion, every extraction with the same instructions) rather than one call.
    """
    messages = request.get("messages") or []
    system = next((m for m in messages if m.get("role") in ("system", "developer")), None)
    system_text = _SPACE.sub(" ", message_text(system)).strip()[:500] if system else ""
    tools = sorted(
        str((t.get("function") or {}).get("name")) for t in request.get("tools") or [] if isinstance(t, dict)
    )
    response_format = (request.get("response_format") or {}).get("type", "")
    kind = ((request.get("metadata") or {}).get("verifier") or {}).get("kind", "")
    key = json.dumps([system_text, tools, response_format, kind], ensure_ascii=False)
    signature = hashlib.sha256(key.encode()).hexdigest()[:16]
    if tools:
        label = "tools: " + ", ".join(tools)
    elif system_text:
        label = system_text
    else:
        first_user: dict[str, Any] = next((m for m in messages if m.get("role") == "user"), {})
        label = _SPACE.sub(" ", message_text(first_user)).strip()
    return signature, label[:80]


def split_of(messages: list[dict[str, Any]]) -> str:
    """train or heldout, fixed by the prompt: one shard in HELDOUT_SHARDS is held out for admission,
    so a teacher pair and a self-repair pair of the same prompt always land on the same side."""
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).digest()
    shards = int(cycle_setting("HELDOUT_SHARDS"))
    return "heldout" if shards > 0 and int.from_bytes(digest[:4], "big") % shards == 0 else "train"


__all__ = [
    "Answer",
    "CycleError",
    "acall",
    "call",
    "completion_text",
    "cycle_setting",
    "first_passing",
    "sampled",
    "split_of",
    "student_of",
    "task_signature",
    "teacher_of",
    "upstream_body",
    "verifier_config",
    "verifier_for",
    "verify",
    "with_skillbook",
]
