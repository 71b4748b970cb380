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

Replicas: a student backend may list several vLLM servers (``Backend.replicas``). Loading and unloading
go to every one, and each replica's ``replica_status`` records what it serves, so the gateway sends a
call only to replicas that have loaded its adapter (routing/call/replicas.py). A replica that refuses a load
is recorded as missing the adapter (an alarm; training/adapter_health.py retries it on every check); the
load fails only when no replica took it. A restarted or added replica gets the admitted adapters from
the health check, without anyone acting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import httpx
from django.db import transaction
from django.utils import timezone

from core.errors import ServiceError
from routing.access import lookups
from routing.call import replicas
from routing.call.plans import student_of
from routing.models import Backend, TaskProfile
from routing.services import task_profile_student_adapter_set
from training import conf
from training.models import Adapter, TrainingRun

logger = logging.getLogger(__name__)

LOAD_TIMEOUT_S = 120.0


class DeployError(ServiceError, RuntimeError):
    """The adapter cannot be served: no student server, vLLM refused it, or nothing to roll back to."""

    code, status = "deploy_failed", 409


def student_backend_for(profile: TaskProfile) -> Backend:
    """The server the profile's student calls go to (routing.call.plans picks it), as configured."""
    backend = student_of(profile, adapter="")
    if backend is None or not replicas.endpoints(backend):
        raise DeployError(f"profile {profile.name!r} has no student backend with an api_base or replicas")
    return backend


def vllm_root(base_url: str) -> str:
    """``http://host:port`` of the server whose OpenAI base URL is ``base_url`` (``.../v1``)."""
    return base_url.rstrip("/").removesuffix("/v1")


def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    try:
        return httpx.post(url, json=body, timeout=LOAD_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise DeployError(f"POST {url} failed: {exc}") from exc


def load_on(base_url: str, name: str, path: str, *, ours: bool) -> None:
    """Loads adapter ``name`` from ``path`` into the replica at ``base_url``; idempotent. ``ours``: this
    service loaded that name before, so 'already loaded' is our load (else the name is reloaded: its
    weights may be another folder's, after a database reset while vLLM kept running)."""
    root = vllm_root(base_url)
    body = {"lora_name": name, "lora_path": path}
    response = _post(f"{root}/v1/load_lora_adapter", body)
    if response.status_code != 200 and "already been loaded" in response.text and not ours:
        _post(f"{root}/v1/unload_lora_adapter", {"lora_name": name})
        response = _post(f"{root}/v1/load_lora_adapter", body)
    if response.status_code != 200 and not (ours and "already been loaded" in response.text):
        raise DeployError(
            f"vLLM at {root} refused adapter {name!r} ({response.status_code}): {response.text[:500]}"
        )


def unload_from(base_url: str, name: str) -> None:
    """Unloads adapter ``name`` from the replica at ``base_url``; one that does not serve it is fine."""
    root = vllm_root(base_url)
    response = _post(f"{root}/v1/unload_lora_adapter", {"lora_name": name})
    if response.status_code != 200 and response.status_code not in (400, 404):
        raise DeployError(
            f"vLLM at {root} did not unload {name!r} ({response.status_code}): {response.text[:500]}"
        )


def note_replica(
    backend_id: int,
    url: str,
    *,
    served: Sequence[str] = (),
    dropped: Sequence[str] = (),
    lacking: Sequence[str] = (),
    **changes: Any,
) -> None:
    """Merges what was just seen of one replica into ``Backend.replica_status`` (under a row lock, so a
    load and a health check at once both land): ``served`` names join its adapters (and leave its
    missing ones), ``dropped`` leave its adapters, ``lacking`` join its missing ones; other ``changes``
    (``up``, ``error``) are set as given. Stamps ``checked_at``."""
    with transaction.atomic():
        rows = (
            Backend.objects.select_for_update().filter(pk=backend_id).values_list("replica_status", flat=True)
        )
        found = next(iter(rows), None)
        if found is None:
            return
        status = found if isinstance(found, dict) else {}
        entry = dict(status.get(url) or {"up": True, "adapters": [], "missing": [], "error": ""})
        adapters = (set(entry.get("adapters") or []) | set(served)) - set(dropped)
        missing = (set(entry.get("missing") or []) - set(served)) | set(lacking)
        entry.update(changes, adapters=sorted(adapters), missing=sorted(missing), checked_at=time.time())
        Backend.objects.filter(pk=backend_id).update(replica_status={**status, url: entry})
    lookups.clear()


def adapter_load(*, adapter_id: int) -> Adapter:
    """Loads the adapter into every replica of the profile's student vLLM (``POST
    /v1/load_lora_adapter``); idempotent. Each replica's status records the load (calls go only to
    replicas that have it); a replica that refuses is recorded missing it, and the adapter health check
    retries it. Raises DeployError when no replica loaded it."""
    adapter = Adapter.objects.get(pk=adapter_id)
    profile = TaskProfile.objects.select_related("student").get(pk=adapter.profile_id)
    backend = student_backend_for(profile)
    failures: list[str] = []
    for url in replicas.endpoints(backend):
        try:
            load_on(url, adapter.name, str(adapter.path), ours=adapter.is_loaded)
        except DeployError as exc:
            failures.append(str(exc))
            note_replica(backend.pk, url, lacking=[adapter.name], error=str(exc)[:500])
            continue
        note_replica(backend.pk, url, served=[adapter.name])
    if len(failures) == len(replicas.endpoints(backend)):
        raise DeployError("; ".join(failures))
    for failure in failures:
        logger.error("ALARM adapter %s not loaded on every student replica: %s", adapter.name, failure)
    Adapter.objects.filter(pk=adapter.pk).update(loaded_at=timezone.now())
    adapter.refresh_from_db()
    return adapter


def adapter_unload(*, adapter_id: int) -> Adapter:
    """Unloads the adapter from every replica of the student vLLM (``POST /v1/unload_lora_adapter``);
    idempotent. Raises DeployError (after trying them all) when a replica did not unload it."""
    adapter = Adapter.objects.get(pk=adapter_id)
    profile = TaskProfile.objects.select_related("student").get(pk=adapter.profile_id)
    backend = student_backend_for(profile)
    failures: list[str] = []
    for url in replicas.endpoints(backend):
        try:
            unload_from(url, adapter.name)
        except DeployError as exc:
            failures.append(str(exc))
            continue
        note_replica(backend.pk, url, dropped=[adapter.name])
    if failures:
        raise DeployError("; ".join(failures))
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
    grace_s = float(conf.get().training.unload_grace_s if grace_s is None else grace_s)
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
