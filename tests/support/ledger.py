"""Ledger rows as the gateway writes them, for the router-version tests (no upstream needed): a call's
legs, one call, and a learned profile's ledger filled with easy calls the student passes and hard ones
it fails (every third)."""

from __future__ import annotations

from typing import Any

from routing.models import ApiKey, Invocation, RouterVersion, TaskProfile
from tests.factories import ApiKeyFactory, InvocationFactory, TaskProfileFactory

JSON_VERIFIER = {"kind": "json_schema", "schema": {"type": "object"}}


def leg(
    role: str, verdict: str, *, correct: bool | None = None, background: bool = False, by: str = ""
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "backend": role,
        "role": role,
        "model": f"{role}-model",
        "cost_usd": "0.001" if role == "student" else "0.010",
        "latency_ms": 100.0 if role == "student" else 400.0,
        "verify_ms": 1.0,
        "verdict": verdict,
    }
    if correct is not None:
        data["correct"] = correct
        data["correct_by"] = by or "sample:json"
    if background:
        data.update(background=True, sample_rate=1.0)
    return data


def call_row(
    *,
    profile: TaskProfile,
    key: ApiKey,
    text: str,
    student_ok: bool,
    teacher_ok: bool = True,
    verified: bool = True,
    version: RouterVersion | None = None,
    route: str = "student",
) -> Invocation:
    """A call the cascade ran: the student, then the teacher when the verifier failed the student;
    a passed student call carries a background teacher sample whose comparison labels the student's
    answer, so every row is complete. Without a verifier the student's answer stands and the sample
    tells whether it was correct."""
    request = {"messages": [{"role": "user", "content": text}]}
    if route == "teacher":
        student = leg("student", "pass", background=True, correct=student_ok)  # the sample, compared
        legs = [leg("teacher", "pass" if verified else "unverified"), student]
        return InvocationFactory.create(
            api_key=key,
            profile=profile,
            request=request,
            legs=legs,
            route="teacher",
            served_by="teacher",
            verdict=legs[0]["verdict"],
            router_version=version,
        )
    if verified and not student_ok:
        verdict = "pass" if teacher_ok else "fail"
        legs = [leg("student", "fail"), leg("teacher", verdict)]
        served = "teacher"
    elif verified:  # the sample's comparison labels the student's passed answer (correct, or not)
        legs = [leg("student", "pass", correct=student_ok), leg("teacher", "pass", background=True)]
        served, verdict = "student", "pass"
    else:
        legs = [
            leg("student", "unverified", correct=student_ok),
            leg("teacher", "unverified", correct=True, background=True),
        ]
        served, verdict = "student", "unverified"
    return InvocationFactory.create(
        api_key=key,
        profile=profile,
        request=request,
        legs=legs,
        route="student",
        served_by=served,
        verdict=verdict,
        fallback=served == "teacher",
        router_version=version,
    )


def hard(i: int) -> str:
    return f"Reconcile the multi-currency statement {i} across the ledgers."


def easy(i: int) -> str:
    return f"Read the total on receipt {i}."


def text_of(i: int) -> str:
    return hard(i) if i % 3 == 0 else easy(i)


def learned_profile(name: str = "totals", verifier: dict | None = None, **params: object) -> TaskProfile:
    return TaskProfileFactory.create(
        name=name,
        policy=TaskProfile.Policy.LEARNED,
        verifier=JSON_VERIFIER if verifier is None else verifier,
        policy_params={"target": 0.97, "target_relative": True, **params},
    )


def fill(profile: TaskProfile, n: int = 150, *, verified: bool = True) -> None:
    key = ApiKeyFactory.create()
    for i in range(n):
        call_row(profile=profile, key=key, text=text_of(i), student_ok=i % 3 != 0, verified=verified)
