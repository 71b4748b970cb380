"""The learning operations (``/api/``): cycles, training runs, admissions and the Evolver.

A django-ninja router, mounted by ``app/api/``. Access (``diagnostics/api_auth.py``):

- ``POST /api/cycles`` ``{"profile": "<name>"}``: start a cycle of the profile (201), or get its
  unfinished one (200): ``learning:write`` + ``training.add_cycle`` (the operator role);
- ``GET /api/cycles[?profile=<name>]``, ``GET /api/cycles/{id}``: ``learning:read`` + ``training.view_cycle``;
- ``GET /api/training-runs[?profile=]``: ``learning:read`` + ``training.view_trainingrun``;
- ``GET /api/admissions[?profile=]``: ``learning:read`` + ``training.view_admission``;
- ``POST /api/evolver/trajectories/{id}/mark-wrong`` ``{"note": "..."}``: a user says a finished
  diagnosis is wrong; it is graded failed and sent to the Evolver (202, the skill job):
  ``learning:write`` + ``training.add_diagnosticskill``;
- ``GET /api/evolver/skills/{id}``: the skill job and, once ready, its corrective plan:
  ``learning:read`` + ``training.view_diagnosticskill``.

Lists are newest first and page with ``limit``/``offset``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.responses import Status, codes_4xx
from pydantic import field_validator
from pydantic_core import PydanticCustomError

from core.errors import ServiceError
from diagnostics.api_auth import ErrorOut, Page, Paged, caller, needs, page_of
from routing import scopes
from routing.models import TaskProfile
from training import selectors
from training.models import Cycle, DiagnosticSkill
from training.services.cycle import cycle_start
from training.services.evolver import trajectory_mark_wrong

router = Router(tags=["learning"])

MAX_NOTE = 4000
READ_CYCLES = needs(scopes.LEARNING_READ, "training.view_cycle")
START_CYCLE = needs(scopes.LEARNING_WRITE, "training.add_cycle")
READ_RUNS = needs(scopes.LEARNING_READ, "training.view_trainingrun")
READ_ADMISSIONS = needs(scopes.LEARNING_READ, "training.view_admission")
MARK_WRONG = needs(scopes.LEARNING_WRITE, "training.add_diagnosticskill")
READ_SKILL = needs(scopes.LEARNING_READ, "training.view_diagnosticskill")


# --- requests -----------------------------------------------------------------------------------


class CycleIn(Schema):
    profile: str = Field(min_length=1, max_length=100, description="The task profile to learn for.")


class ProfileFilter(Page):
    profile: str | None = Field(None, max_length=100, description="Only this task profile's.")


class MarkWrongIn(Schema):
    note: str = Field(max_length=MAX_NOTE, description="What is wrong with the diagnosis.")

    @field_validator("note")
    @classmethod
    def _says_something(cls, value: str) -> str:
        if not value.strip():
            raise PydanticCustomError("invalid_field", "'note' must say what is wrong with the diagnosis.")
        return value.strip()


# --- answers ------------------------------------------------------------------------------------


class McNemarOut(Schema):
    b: int
    c: int
    p_value: float


class AdmissionOut(Schema):
    id: int
    profile: str
    kind: str
    candidate: Any
    active: Any
    candidate_metrics: Any
    active_metrics: Any
    mcnemar: McNemarOut
    alpha: float
    decision: str
    reason: str
    created_at: datetime

    @staticmethod
    def resolve_profile(admission: Any) -> str:
        return str(admission.profile.name)

    @staticmethod
    def resolve_mcnemar(admission: Any) -> dict[str, Any]:
        return {"b": admission.mcnemar_b, "c": admission.mcnemar_c, "p_value": admission.p_value}


class CycleOut(Schema):
    id: int
    profile: str
    trigger: str
    status: str
    stage: str
    timings: Any
    stats: Any
    skillbook: int | None = Field(alias="skillbook_id")
    training_run: int | None = Field(alias="training_run_id")
    admission: AdmissionOut | None
    error: str
    outcome: str = Field(description='A finished cycle: "admitted", or "refused" (outcome_reason says why).')
    outcome_reason: str
    created_at: datetime
    finished_at: datetime | None
    url: str

    @staticmethod
    def resolve_profile(cycle: Any) -> str:
        return str(cycle.profile.name)

    @staticmethod
    def resolve_url(cycle: Any) -> str:
        return f"/api/cycles/{cycle.pk}"


class AdapterOut(Schema):
    id: int
    name: str
    status: str


class TrainingRunOut(Schema):
    id: int
    profile: str
    adapter: AdapterOut
    kind: str
    status: str
    step: int
    total_steps: int
    progress: Any
    metrics: Any
    demonstrations: int = Field(alias="demonstration_count")
    error: str
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @staticmethod
    def resolve_profile(run: Any) -> str:
        return str(run.adapter.profile.name)

    @staticmethod
    def resolve_progress(run: Any) -> Any:
        return run.progress[-20:]


class SkillOut(Schema):
    id: int
    trajectory: int = Field(alias="trajectory_id")
    status: str
    source: str
    note: str
    marked_by: str | None
    went_wrong: str
    explanation: str
    plan: Any
    signature: Any
    error: str
    created_at: datetime
    finished_at: datetime | None

    @staticmethod
    def resolve_marked_by(skill: Any) -> str | None:
        return skill.marked_by.get_username() if skill.marked_by else None


class CycleList(Paged):
    cycles: list[CycleOut]


class CycleStarted(Schema):
    cycle: CycleOut
    created: bool = Field(description="False: the profile's unfinished cycle, which is answered instead.")


class CycleDetail(Schema):
    cycle: CycleOut


class TrainingRunList(Paged):
    training_runs: list[TrainingRunOut]


class AdmissionList(Paged):
    admissions: list[AdmissionOut]


class SkillDetail(Schema):
    skill: SkillOut


# --- operations ---------------------------------------------------------------------------------


def _profile(name: str) -> TaskProfile:
    profile = TaskProfile.objects.filter(name=name).first()
    if profile is None:
        raise ServiceError(f"No task profile {name!r}.", code="not_found", status=404)
    return profile


def _profile_id(query: ProfileFilter) -> int | None:
    return _profile(query.profile).pk if query.profile else None


@router.post(
    "/cycles",
    auth=START_CYCLE,
    response={(200, 201): CycleStarted, codes_4xx: ErrorOut},
    url_name="training-cycles",
    summary="Start a learning cycle (or get the profile's unfinished one)",
)
def cycle_start_view(request: HttpRequest, body: CycleIn) -> Status[dict[str, Any]]:
    cycle, created = cycle_start(profile_id=_profile(body.profile).pk, trigger=Cycle.Trigger.API)
    cycle = selectors.cycle_detail(cycle_id=cycle.pk) or cycle
    return Status(201 if created else 200, {"cycle": cycle, "created": created})


@router.get(
    "/cycles",
    auth=READ_CYCLES,
    response={200: CycleList, codes_4xx: ErrorOut},
    url_name="training-cycles",
    summary="List learning cycles, newest first",
)
def cycle_list(request: HttpRequest, query: Query[ProfileFilter]) -> dict[str, Any]:
    profile_id = _profile_id(query)
    rows, paging = page_of(lambda limit: selectors.cycle_list(profile_id=profile_id, limit=limit), query)
    return {"cycles": rows, **paging}


@router.get(
    "/cycles/{int:cycle_id}",
    auth=READ_CYCLES,
    response={200: CycleDetail, codes_4xx: ErrorOut},
    url_name="training-cycle",
    summary="A learning cycle with its stages, SkillBook and admission",
)
def cycle_detail(request: HttpRequest, cycle_id: int) -> dict[str, Any]:
    cycle = selectors.cycle_detail(cycle_id=cycle_id)
    if cycle is None:
        raise ServiceError(f"No cycle {cycle_id}.", code="not_found", status=404)
    return {"cycle": cycle}


@router.get(
    "/training-runs",
    auth=READ_RUNS,
    response={200: TrainingRunList, codes_4xx: ErrorOut},
    url_name="training-runs",
    summary="List training runs, newest first",
)
def training_runs(request: HttpRequest, query: Query[ProfileFilter]) -> dict[str, Any]:
    profile_id = _profile_id(query)
    rows, paging = page_of(
        lambda limit: selectors.training_run_list(profile_id=profile_id, limit=limit), query
    )
    return {"training_runs": rows, **paging}


@router.get(
    "/admissions",
    auth=READ_ADMISSIONS,
    response={200: AdmissionList, codes_4xx: ErrorOut},
    url_name="training-admissions",
    summary="List admission decisions, newest first",
)
def admissions(request: HttpRequest, query: Query[ProfileFilter]) -> dict[str, Any]:
    profile_id = _profile_id(query)
    rows, paging = page_of(lambda limit: selectors.admission_list(profile_id=profile_id, limit=limit), query)
    return {"admissions": rows, **paging}


@router.post(
    "/evolver/trajectories/{int:trajectory_id}/mark-wrong",
    auth=MARK_WRONG,
    response={202: SkillDetail, codes_4xx: ErrorOut},
    url_name="evolver-mark-wrong",
    summary="Mark a diagnosis wrong (sends it to the Evolver)",
)
def trajectory_mark_wrong_view(
    request: HttpRequest, trajectory_id: int, body: MarkWrongIn
) -> Status[dict[str, Any]]:
    # A refusal (an EvolverError, a ServiceError) becomes the JSON error of app/api/errors.py.
    skill = trajectory_mark_wrong(trajectory_id=trajectory_id, user=caller(request).user, note=body.note)
    return Status(202, {"skill": skill})


@router.get(
    "/evolver/skills/{int:skill_id}",
    auth=READ_SKILL,
    response={200: SkillDetail, codes_4xx: ErrorOut},
    url_name="evolver-skill",
    summary="An Evolver skill job and its corrective plan",
)
def skill_detail(request: HttpRequest, skill_id: int) -> dict[str, Any]:
    skill = DiagnosticSkill.objects.select_related("marked_by").filter(pk=skill_id).first()
    if skill is None:
        raise ServiceError(f"No diagnostic skill {skill_id}.", code="not_found", status=404)
    return {"skill": skill}
