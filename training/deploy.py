"""Serving adapters: load into the student's vLLM at run time, activate, roll back, unload retired.

vLLM must run with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (``infra/vllm_serve.sh`` sets it) and see
the adapter folders at the same paths (same machine or shared volume).

Why an adapter is never unloaded under a call: the gateway reads the profile's adapter name once, when a
call starts, and the student leg then runs for at most the backend's timeout. Activation and rollback
only change the name later calls read; the replaced adapter stays loaded. ``adapters_unload_retired``
(beat) unloads an adapter only when it has been retired for longer than ``UNLOAD_GRACE_S`` (default
twice the upstream timeout plus a minute), by which time every call that could have read its name has
ended. Keeping it loaded for that window also makes a rollback instant; a rollback to an adapter that
was already unloaded loads it again first, before any call is routed to it.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import ServiceError
from routing.calls import student_of
from routing.models import Backend, TaskProfile
from routing.services import task_profile_student_adapter_set
from training.models import Adapter, TrainingRun

logger = logging.getLogger(__name__)

LOAD_TIMEOUT_S = 120.0


class DeployError(ServiceError, RuntimeError):
    """The adapter cannot be served: no student server, vLLM refused it, or nothing to roll back to."""

    code, status = "deploy_failed", 409


def student_backend_for(profile: TaskProfile) -> Backend:
    """The server the profile's student calls go to (routing.calls picks it), as configured."""
    backend = student_of(profile, adapter="")
    if backend is None or not backend.api_base:
        raise DeployError(f"profile {profile.name!r} has no student backend with an api_base")
    return backend


def vllm_root(backend: Backend) -> str:
    """``http://host:port`` of the server whose OpenAI base URL is ``backend.api_base`` (``.../v1``)."""
    return backend.api_base.rstrip("/").removesuffix("/v1")


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    try:
        return httpx.post(url, json=body, timeout=LOAD_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise DeployError(f"POST {url} failed: {exc}") from exc


def adapter_load(*, adapter_id: int) -> Adapter:
    """Loads the adapter into the profile's student vLLM (``POST /v1/load_lora_adapter``); idempotent."""
    adapter = Adapter.objects.get(pk=adapter_id)
    profile = TaskProfile.objects.select_related("student").get(pk=adapter.profile_id)
    url = f"{vllm_root(student_backend_for(profile))}/v1/load_lora_adapter"
    body = {"lora_name": adapter.name, "lora_path": str(adapter.path)}
    response = _post(url, body)
    if response.status_code != 200 and "already been loaded" in response.text and not adapter.is_loaded:
        # The name is served but not by our load (a database reset while vLLM kept running): its
        # weights may be another folder's. No call is routed to an adapter we never loaded: reload.
        _post(
            f"{vllm_root(student_backend_for(profile))}/v1/unload_lora_adapter", {"lora_name": adapter.name}
        )
        response = _post(url, body)
    if response.status_code != 200 and not (adapter.is_loaded and "already been loaded" in response.text):
        raise DeployError(
            f"vLLM refused adapter {adapter.name!r} ({response.status_code}): {response.text[:500]}"
        )
    Adapter.objects.filter(pk=adapter.pk).update(loaded_at=timezone.now())
    adapter.refresh_from_db()
    return adapter


def adapter_unload(*, adapter_id: int) -> Adapter:
    """Unloads the adapter from the student vLLM (``POST /v1/unload_lora_adapter``); idempotent."""
    adapter = Adapter.objects.get(pk=adapter_id)
    profile = TaskProfile.objects.select_related("student").get(pk=adapter.profile_id)
    url = f"{vllm_root(student_backend_for(profile))}/v1/unload_lora_adapter"
    response = _post(url, {"lora_name": adapter.name})
    if response.status_code != 200 and response.status_code not in (400, 404):
        raise DeployError(
            f"vLLM did not unload {adapter.name!r} ({response.status_code}): {response.text[:500]}"
        )
    Adapter.objects.filter(pk=adapter.pk).update(unloaded_at=timezone.now())
    adapter.refresh_from_db()
    return adapter


def adapter_activate(*, adapter_id: int) -> Adapter:
    """Makes a trained adapter the profile's student: load it into vLLM, then route new calls to it.

    The previously active adapter is retired (still loaded: see the module docstring).
    """
    adapter = adapter_ready(adapter_id=adapter_id)
    if adapter.status != Adapter.Status.ACTIVE:
        adapter_activate_loaded(adapter_id=adapter.pk)
        adapter.refresh_from_db()
    return adapter


def adapter_ready(*, adapter_id: int) -> Adapter:
    """Checks that the adapter can serve and loads it into vLLM (before any call is routed to it)."""
    adapter = Adapter.objects.get(pk=adapter_id)
    if adapter.status == Adapter.Status.ACTIVE:
        return adapter
    trained = adapter.runs.filter(status=TrainingRun.Status.SUCCEEDED).exists()
    if adapter.status == Adapter.Status.FAILED or not trained:
        raise DeployError(f"adapter {adapter.name!r} has no successful training run")
    return adapter_load(adapter_id=adapter.pk)


def adapter_activate_loaded(*, adapter_id: int) -> None:
    """The database half of activation (no HTTP): the adapter, already loaded by ``adapter_ready``,
    becomes the profile's student and the active one is retired. Joins the caller's transaction."""
    adapter = Adapter.objects.get(pk=adapter_id)
    if adapter.status == Adapter.Status.ACTIVE:
        return
    if not adapter.is_loaded:
        raise DeployError(f"adapter {adapter.name!r} is not loaded into the student server")
    now = timezone.now()
    with transaction.atomic():
        TaskProfile.objects.select_for_update().get(pk=adapter.profile_id)
        Adapter.objects.filter(profile_id=adapter.profile_id, status=Adapter.Status.ACTIVE).update(
            status=Adapter.Status.RETIRED, retired_at=now
        )
        Adapter.objects.filter(pk=adapter.pk).update(
            status=Adapter.Status.ACTIVE, activated_at=now, retired_at=None, rolled_back_at=None
        )
        task_profile_student_adapter_set(profile_id=adapter.profile_id, adapter_name=adapter.name)


def adapter_refuse(*, adapter_id: int, reason: str) -> Adapter:
    """A candidate that admission refused: retired without ever serving (never a rollback target);
    if admission loaded it, beat unloads it after the grace period."""
    now = timezone.now()
    adapter = Adapter.objects.get(pk=adapter_id)
    if adapter.status == Adapter.Status.CANDIDATE:
        metrics = {**adapter.metrics, "refused": reason}
        Adapter.objects.filter(pk=adapter_id, status=Adapter.Status.CANDIDATE).update(
            status=Adapter.Status.RETIRED, retired_at=now, metrics=metrics
        )
        adapter.refresh_from_db()
    return adapter


def rollback_target(profile: TaskProfile) -> Adapter | None:
    """The adapter that was active before the current one (never one a rollback already left)."""
    return (
        Adapter.objects.filter(
            profile=profile,
            status=Adapter.Status.RETIRED,
            activated_at__isnull=False,
            rolled_back_at__isnull=True,
        )
        .order_by("-activated_at", "-version")
        .first()
    )


def adapter_rollback(*, profile_id: int) -> Adapter | None:
    """Retires the active adapter and restores the previous one (or the base model when there is
    none). Returns the adapter now active, or None for the base model."""
    profile = TaskProfile.objects.get(pk=profile_id)
    current = Adapter.objects.filter(profile=profile, status=Adapter.Status.ACTIVE).first()
    if current is None:
        raise DeployError(f"profile {profile.name!r} has no active adapter to roll back")
    target = rollback_target(profile)
    if target is not None and not target.is_loaded:
        adapter_load(adapter_id=target.pk)
    now = timezone.now()
    with transaction.atomic():
        TaskProfile.objects.select_for_update().get(pk=profile.pk)
        Adapter.objects.filter(pk=current.pk).update(
            status=Adapter.Status.RETIRED, retired_at=now, rolled_back_at=now
        )
        if target is not None:
            Adapter.objects.filter(pk=target.pk).update(status=Adapter.Status.ACTIVE, retired_at=None)
        task_profile_student_adapter_set(profile_id=profile.pk, adapter_name=target.name if target else "")
    if target is not None:
        target.refresh_from_db()
    return target


def adapters_unload_retired(*, grace_s: float | None = None) -> list[str]:
    """Unloads adapters retired for longer than the grace period; returns their names."""
    grace_s = float(settings.SKILLGATE["TRAINING"]["UNLOAD_GRACE_S"] if grace_s is None else grace_s)
    cutoff = timezone.now() - timedelta(seconds=grace_s)
    unloaded: list[str] = []
    retired = Adapter.objects.filter(
        status=Adapter.Status.RETIRED, retired_at__lte=cutoff, loaded_at__isnull=False
    ).order_by("pk")
    for adapter in retired:
        if not adapter.is_loaded:
            continue
        try:
            adapter_unload(adapter_id=adapter.pk)
        except DeployError as exc:
            logger.warning("could not unload %s: %s", adapter.name, exc)
            continue
        unloaded.append(adapter.name)
    return unloaded
