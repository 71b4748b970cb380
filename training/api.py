"""The training REST API (JSON, same authentication and error shape as the incidents API).

- ``POST /api/evolver/trajectories/<id>/mark-wrong`` ``{"note": "..."}``: a user says a finished
  diagnosis is wrong; it is graded failed and sent to the Evolver (202, the skill job).
- ``GET /api/evolver/skills/<id>``: a skill job and, once ready, its corrective plan.

Access (``diagnostics/api_auth.py``): marking wrong needs scope ``learning:write`` and the
permission ``training.add_diagnosticskill``; reading a skill ``learning:read`` and
``training.view_diagnosticskill``.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse

from diagnostics.api_auth import Access, ApiError, Caller, endpoint
from routing import scopes
from routing.json_body import JsonBodyError, loads_request
from training.models import DiagnosticSkill
from training.services.evolver import trajectory_mark_wrong

MAX_NOTE = 4000
MARK_WRONG = Access(scopes.LEARNING_WRITE, "training.add_diagnosticskill")
READ_SKILL = Access(scopes.LEARNING_READ, "training.view_diagnosticskill")


def skill_json(skill: DiagnosticSkill) -> dict[str, Any]:
    return {
        "id": skill.pk,
        "trajectory": skill.trajectory_id,
        "status": skill.status,
        "source": skill.source,
        "note": skill.note,
        "marked_by": skill.marked_by.get_username() if skill.marked_by else None,
        "went_wrong": skill.went_wrong,
        "explanation": skill.explanation,
        "plan": skill.plan,
        "signature": skill.signature,
        "error": skill.error,
        "created_at": skill.created_at.isoformat(),
        "finished_at": skill.finished_at.isoformat() if skill.finished_at else None,
    }


def _note(request: HttpRequest) -> str:
    try:
        data = loads_request(request.body or b"{}")  # bounded size and nesting depth
    except JsonBodyError as exc:
        raise ApiError(400, exc.message, exc.code) from None
    note = data.get("note", "") if isinstance(data, dict) else None
    if not isinstance(note, str) or not note.strip():
        raise ApiError(400, "'note' must say what is wrong with the diagnosis.", "invalid_field")
    if len(note) > MAX_NOTE:
        raise ApiError(400, f"'note' is longer than {MAX_NOTE} characters.", "invalid_field")
    return note.strip()


@endpoint(POST=MARK_WRONG)
def trajectory_mark_wrong_view(request: HttpRequest, caller: Caller, trajectory_id: int) -> JsonResponse:
    # A refusal (an EvolverError, a ServiceError) becomes the JSON error at the edge (``endpoint``).
    skill = trajectory_mark_wrong(trajectory_id=trajectory_id, user=caller.user, note=_note(request))
    return JsonResponse({"skill": skill_json(skill)}, status=202)


@endpoint(GET=READ_SKILL)
def skill_detail(request: HttpRequest, caller: Caller, skill_id: int) -> JsonResponse:
    skill = DiagnosticSkill.objects.select_related("marked_by").filter(pk=skill_id).first()
    if skill is None:
        raise ApiError(404, f"No diagnostic skill {skill_id}.", "not_found")
    return JsonResponse({"skill": skill_json(skill)})
