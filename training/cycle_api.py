"""The learning cycle's REST API (JSON, token auth and error shape of the incidents API).

- ``POST /api/cycles`` ``{"profile": "<name>"}``: start a cycle of the profile (201), or get its
  unfinished one (200); ``GET /api/cycles[?profile=<name>]``: recent cycles, newest first.
- ``GET /api/cycles/<id>``: one cycle with its stage timings, stats, SkillBook and admission.
- ``GET /api/training-runs[?profile=<name>]``: recent training runs with their progress.
- ``GET /api/admissions[?profile=<name>]``: recent admission decisions with both sets of numbers.

Access (``diagnostics/api_auth.py``): reads need scope ``learning:read`` and the view permission of
what they list (``training.view_cycle``, ``view_trainingrun``, ``view_admission``); starting a cycle
needs ``learning:write`` and ``training.add_cycle`` (the operator role).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse

from diagnostics.api_auth import Access, ApiError, Caller, endpoint
from routing import scopes
from routing.json_body import JsonBodyError, loads_request
from routing.models import TaskProfile
from training import selectors
from training.models import Admission, Cycle, TrainingRun
from training.services.cycle import cycle_start

READ_CYCLES = Access(scopes.LEARNING_READ, "training.view_cycle")
START_CYCLE = Access(scopes.LEARNING_WRITE, "training.add_cycle")
READ_RUNS = Access(scopes.LEARNING_READ, "training.view_trainingrun")
READ_ADMISSIONS = Access(scopes.LEARNING_READ, "training.view_admission")


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def admission_json(admission: Admission) -> dict[str, Any]:
    return {
        "id": admission.pk,
        "profile": admission.profile.name,
        "kind": admission.kind,
        "candidate": admission.candidate,
        "active": admission.active,
        "candidate_metrics": admission.candidate_metrics,
        "active_metrics": admission.active_metrics,
        "mcnemar": {"b": admission.mcnemar_b, "c": admission.mcnemar_c, "p_value": admission.p_value},
        "alpha": admission.alpha,
        "decision": admission.decision,
        "reason": admission.reason,
        "created_at": _iso(admission.created_at),
    }


def cycle_json(cycle: Cycle) -> dict[str, Any]:
    return {
        "id": cycle.pk,
        "profile": cycle.profile.name,
        "trigger": cycle.trigger,
        "status": cycle.status,
        "stage": cycle.stage,
        "timings": cycle.timings,
        "stats": cycle.stats,
        "skillbook": cycle.skillbook_id,
        "training_run": cycle.training_run_id,
        "admission": admission_json(cycle.admission) if cycle.admission else None,
        "error": cycle.error,
        "created_at": _iso(cycle.created_at),
        "finished_at": _iso(cycle.finished_at),
        "url": f"/api/cycles/{cycle.pk}",
    }


def training_run_json(run: TrainingRun) -> dict[str, Any]:
    return {
        "id": run.pk,
        "profile": run.adapter.profile.name,
        "adapter": {"id": run.adapter_id, "name": run.adapter.name, "status": run.adapter.status},
        "kind": run.kind,
        "status": run.status,
        "step": run.step,
        "total_steps": run.total_steps,
        "progress": run.progress[-20:],
        "metrics": run.metrics,
        "demonstrations": run.demonstration_count,
        "error": run.error,
        "attempts": run.attempts,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
    }


def _profile(name: Any) -> TaskProfile:
    if not isinstance(name, str) or not name:
        raise ApiError(400, "'profile' must name a task profile.", "invalid_field")
    profile = TaskProfile.objects.filter(name=name).first()
    if profile is None:
        raise ApiError(404, f"No task profile {name!r}.", "not_found")
    return profile


def _profile_filter(request: HttpRequest) -> int | None:
    name = request.GET.get("profile")
    return _profile(name).pk if name else None


@endpoint(GET=READ_CYCLES, POST=START_CYCLE)
def cycles(request: HttpRequest, caller: Caller) -> JsonResponse:
    if request.method == "POST":
        try:
            data = loads_request(request.body or b"{}")  # bounded size and nesting depth
        except JsonBodyError as exc:
            raise ApiError(400, exc.message, exc.code) from None
        if not isinstance(data, dict):
            raise ApiError(400, "Request body must be a JSON object.", "invalid_json")
        profile = _profile(data.get("profile"))
        cycle, created = cycle_start(profile_id=profile.pk, trigger=Cycle.Trigger.API)
        cycle.refresh_from_db()
        return JsonResponse({"cycle": cycle_json(cycle), "created": created}, status=201 if created else 200)
    rows = selectors.cycle_list(profile_id=_profile_filter(request))
    return JsonResponse({"cycles": [cycle_json(c) for c in rows]})


@endpoint(GET=READ_CYCLES)
def cycle_detail(request: HttpRequest, caller: Caller, cycle_id: int) -> JsonResponse:
    cycle = selectors.cycle_detail(cycle_id=cycle_id)
    if cycle is None:
        raise ApiError(404, f"No cycle {cycle_id}.", "not_found")
    return JsonResponse({"cycle": cycle_json(cycle)})


@endpoint(GET=READ_RUNS)
def training_runs(request: HttpRequest, caller: Caller) -> JsonResponse:
    rows = selectors.training_run_list(profile_id=_profile_filter(request))
    return JsonResponse({"training_runs": [training_run_json(r) for r in rows]})


@endpoint(GET=READ_ADMISSIONS)
def admissions(request: HttpRequest, caller: Caller) -> JsonResponse:
    rows = selectors.admission_list(profile_id=_profile_filter(request))
    return JsonResponse({"admissions": [admission_json(a) for a in rows]})
