"""Writes to the routing tables (house style: ``<entity>_<action>(*, ...)``, atomic)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import transaction
from django.utils import timezone

from core.errors import ServiceError
from routing import conf
from routing.access import lookups
from routing.access.keys import generate_key
from routing.budgets.periods import budget_period_start
from routing.models import ApiKey, Backend, TaskProfile, validate_replica_urls
from routing.router.policy_params import params_problem
from routing.scopes import default_scopes, unknown_scopes


class UnknownScopeError(ServiceError, ValueError):
    """A key was asked for scopes that do not exist (routing/scopes.py)."""

    code = "unknown_scope"


@transaction.atomic
def api_key_create(
    *,
    name: str,
    owner: User | None = None,
    budget_usd: Decimal | None = None,
    rpm_limit: int | None = None,
    scopes: list[str] | tuple[str, ...] | None = None,
    trusted_for_training: bool = False,
    budget_period: str = "",
) -> tuple[ApiKey, str]:
    """Creates a key; returns it with the raw secret, which is never stored and shown once.

    ``scopes``: what the key may do (routing/scopes.py); only ``llm`` unless named explicitly.
    ``trusted_for_training``: answers judged by this key's own per-call verifiers may become training
    demonstrations (for the operator's own tooling, never for a client's key).
    """
    chosen = list(dict.fromkeys(scopes)) if scopes is not None else default_scopes()
    unknown = unknown_scopes(chosen)
    if unknown:
        raise UnknownScopeError(f"Unknown scope(s): {', '.join(unknown)}.")
    raw, prefix, digest = generate_key()
    key = ApiKey.objects.create(
        name=name,
        prefix=prefix,
        key_hash=digest,
        owner=owner,
        budget_usd=budget_usd,
        rpm_limit=rpm_limit,
        scopes=chosen,
        trusted_for_training=trusted_for_training,
        budget_period=budget_period,
        budget_period_start=budget_period_start(budget_period, timezone.now()),
    )
    return key, raw


@transaction.atomic
def api_key_update(
    *,
    api_key: ApiKey,
    budget_usd: Decimal | None,
    rpm_limit: int | None,
    scopes: list[str] | tuple[str, ...],
    expires_at: datetime | None,
    budget_period: str | None = None,
) -> ApiKey:
    """Sets a key's budget, rate limit, scopes, expiry (None: unlimited, never) and budget period
    (None: unchanged). What it has spent stays: a new period starts counting at the current period's
    start, and the spend goes back to zero when the next one begins. A budget under the spend refuses
    the key's next calls. Other processes see the change when their key cache entry ends
    (``routing/access/lookups.py``)."""
    chosen = list(dict.fromkeys(scopes))
    unknown = unknown_scopes(chosen)
    if unknown:
        raise UnknownScopeError(f"Unknown scope(s): {', '.join(unknown)}.")
    fields: dict[str, Any] = {}
    if budget_period is not None and budget_period != api_key.budget_period:
        if budget_period not in ApiKey.BudgetPeriod.values:
            raise ServiceError(f"Unknown budget period {budget_period!r}.", code="unknown_budget_period")
        fields = {
            "budget_period": budget_period,
            "budget_period_start": budget_period_start(budget_period, timezone.now()),
        }
    ApiKey.objects.filter(pk=api_key.pk).update(
        budget_usd=budget_usd, rpm_limit=rpm_limit, scopes=chosen, expires_at=expires_at, **fields
    )
    lookups.clear()
    api_key.refresh_from_db()
    return api_key


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    lookups.clear()
    api_key.refresh_from_db()
    return api_key


@transaction.atomic
def _replicas(role: str, urls: list[str]) -> list[str]:
    """The configured replicas of a backend, refused at start-up when malformed."""
    try:
        validate_replica_urls(urls)
    except ValidationError as exc:
        raise ImproperlyConfigured(f"SKILLGATE_{role.upper()}_REPLICAS: {' '.join(exc.messages)}") from exc
    return urls


def backends_sync_from_settings() -> list[Backend]:
    """Upserts the 'teacher' and 'student' backends from the SKILLGATE_* environment.

    The student's admitted adapter is left alone: only admission changes it.
    """
    synced = []
    for role in (Backend.Role.TEACHER, Backend.Role.STUDENT):
        typed = conf.get()
        seed = typed.backend(role.value)
        backend, _ = Backend.objects.update_or_create(
            name=role.value,
            defaults={
                "role": role,
                "model": seed.model,
                "api_base": seed.api_base,
                "api_key_env": seed.api_key_env,
                "input_cost_per_token": seed.input_cost,
                "output_cost_per_token": seed.output_cost,
                "timeout_s": typed.upstream.timeout_s,
                "samples": getattr(seed, "samples", 1),
                "replicas": _replicas(role, list(getattr(seed, "replicas", ()))),
            },
        )
        synced.append(backend)
    return synced


@transaction.atomic
def task_profile_student_adapter_set(*, profile_id: int, adapter_name: str) -> TaskProfile:
    """Makes ``adapter_name`` (a LoRA the student's vLLM serves) the profile's student model name.

    An empty name goes back to the student backend's own model. Calls that already read the profile
    keep the name they read; only calls that start afterwards use the new one.
    """
    TaskProfile.objects.filter(pk=profile_id).update(student_adapter=adapter_name)
    lookups.clear()
    return TaskProfile.objects.get(pk=profile_id)


@transaction.atomic
def task_profile_skillbook_set(*, profile_id: int, text: str) -> TaskProfile:
    """Makes ``text`` the SkillBook the gateway puts in front of the profile's student prompts.

    Written by training's admission; calls that already read the profile keep the text they read.
    """
    TaskProfile.objects.filter(pk=profile_id).update(skillbook_text=text)
    lookups.clear()
    return TaskProfile.objects.get(pk=profile_id)


PROFILE_EDITABLE = (
    "name",
    "description",
    "policy",
    "policy_params",
    "verifier",
    "student",
    "teacher",
    "max_tokens",
    "allow_call_verifier",
    "verifier_max_timeout_s",
    "verifier_max_memory_mb",
)


@transaction.atomic
def task_profile_save(*, profile: TaskProfile | None, fields: dict[str, Any]) -> TaskProfile:
    """Creates a profile (``profile`` None) or changes one: its policy, target, verifier, backends and
    limits (``PROFILE_EDITABLE``; the SkillBook and the adapter belong to admission). The caller has
    validated the values (the dashboard's form); the model's own checks run again here. Calls that
    already read the profile keep what they read."""
    unknown = set(fields) - set(PROFILE_EDITABLE)
    if unknown:
        raise ServiceError(f"Not editable here: {', '.join(sorted(unknown))}.", code="not_editable")
    target = profile if profile is not None else TaskProfile()
    for name, value in fields.items():
        setattr(target, name, value)
    if problem := params_problem(target.policy_params or {}):
        raise ServiceError(f"policy_params: {problem}.", code="invalid_profile")
    try:
        target.full_clean(exclude=["skillbook_text", "student_adapter"])
    except ValidationError as exc:
        raise ServiceError("; ".join(exc.messages), code="invalid_profile") from None
    target.save()
    lookups.clear()
    return target
