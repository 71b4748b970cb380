"""Corrective plans: failed diagnoses become diagnostic skills through the teacher.

Flow: a trajectory graded as failed (``evolver_sweep``) or marked wrong by a user
(:func:`trajectory_mark_wrong`) gets a pending :class:`DiagnosticSkill`; the ``evolve_trajectory``
task claims it and asks the teacher, through the gateway under the evolver profile, for a plan in
a JSON protocol that the gateway's json_schema verifier and this module both check. A plan that
does not follow the protocol is rejected (kept with the raw answer), never stored as a skill.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone
from jsonschema import Draft202012Validator

from core import jobs
from core.errors import ServiceError
from core.queues import on_commit
from diagnostics import conf as diagnostics_conf
from diagnostics import services as diagnostics_services
from diagnostics.agent.findings import Finding
from diagnostics.agent.investigation.llm import GatewayClient, LLMUnavailable, gateway_client
from diagnostics.agent.investigation.skills import PHASES, Signature, incident_signature
from diagnostics.models import Step, Trajectory
from diagnostics.recording import alert_context_for
from routing.json_body import loads_answer
from routing.models import TaskProfile
from training import conf, doorbell
from training.models import DiagnosticSkill
from training.services.evolver.jobs import SKILL_JOB, heartbeat_s, max_attempts


class EvolverError(ServiceError):
    """A request the Evolver refuses (e.g. marking a trajectory that has not finished)."""


# --- the protocol -----------------------------------------------------------------------------------

PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "went_wrong": {"enum": [choice.value for choice in DiagnosticSkill.WentWrong]},
        "explanation": {"type": "string", "minLength": 10},
        "plan": {
            "type": "object",
            "properties": {phase: {"type": "string", "minLength": 10} for phase in PHASES},
            "required": list(PHASES),
        },
    },
    "required": ["went_wrong", "explanation", "plan"],
}

SYSTEM_PROMPT = f"""You are a senior SRE reviewing a diagnosis an automated agent got wrong. You see the
incident, every step the agent took (tool, arguments, a short summary, findings), its final
diagnosis, the actions it proposed and why the diagnosis was judged wrong.

Say which phase went wrong, one of: {", ".join(c.value for c in DiagnosticSkill.WentWrong)}
(missing_fix: right diagnosis, no fix proposed; incomplete_diagnosis: facts missing; wrong_path:
probed the wrong things; missing_verification: fixed without checking health; stopped_early: gave
up before the evidence; wrong_fix: proposed an action that does not fix it).
Then write a corrective plan for the next similar incident, one instruction per phase: discover
(what to look at first), diagnose (what evidence proves the root cause), fix (which action with which
arguments), verify (how to confirm it is healthy).

Answer with exactly one JSON object and nothing else:
{{"went_wrong": "...", "explanation": "...",
  "plan": {{"discover": "...", "diagnose": "...", "fix": "...", "verify": "..."}}}}"""


def parse_plan(content: str) -> tuple[dict[str, Any] | None, str]:
    """The teacher's answer as a plan, or None and why it does not follow the protocol."""
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        value = loads_answer(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc.msg}"
    except ValueError as exc:  # nested past the answer depth bound
        return None, str(exc)
    errors = sorted(Draft202012Validator(PLAN_SCHEMA).iter_errors(value), key=lambda e: list(e.path))
    if errors:
        where = "/".join(str(p) for p in errors[0].path)
        return None, f"{where or 'answer'}: {errors[0].message}"
    assert isinstance(value, dict)
    return value, ""


# --- what the teacher sees ------------------------------------------------------------------------


def _problems(trajectory: Trajectory) -> list[Finding]:
    return [f for f in (Finding.from_json(d) for d in trajectory.findings or []) if f.is_problem]


def trajectory_signature(trajectory: Trajectory) -> Signature:
    return incident_signature(alert_context_for(trajectory.incident), _problems(trajectory))


def trajectory_brief(trajectory: Trajectory, *, note: str = "") -> str:
    incident = trajectory.incident
    lines = [
        "## Incident",
        f"Title: {incident.title}",
        f"Description: {incident.description[:1500] or '-'}",
    ]
    if incident.alert:
        lines.append(f"Alert: {json.dumps(incident.alert)[:1500]}")
    lines += ["", f"## Steps ({trajectory.mode} mode)"]
    for step in trajectory.steps.exclude(phase=Step.Phase.ALERT).order_by("index"):
        call = f" {step.tool} {json.dumps(step.arguments)[:200]}" if step.tool else ""
        lines.append(f"#{step.index} {step.phase}{call}: {' '.join(step.summary.split())[:300]}")
        for finding in step.findings[:3]:
            lines.append(f"    finding: {str(finding.get('summary', ''))[:200]}")
    lines += ["", "## Final diagnosis", trajectory.diagnosis[:3000] or "(none)"]
    actions = list(trajectory.actions.all())
    if actions:
        lines += ["", "## Proposed actions"]
        lines += [
            f"- {a.tool} {json.dumps(a.args)}: {a.status}; health after: {a.health_after or '-'}"
            for a in actions
        ]
    lines += ["", "## Why it was judged wrong", note or json.dumps(trajectory.grading)[:2000] or "-"]
    return "\n".join(lines)


# --- requests: graded failures and diagnoses marked wrong --------------------------------------------


def _observer_profile() -> TaskProfile:
    profile, _ = TaskProfile.objects.get_or_create(name=diagnostics_conf.get().agent.observer_profile)
    return profile


def _enqueue(skill_id: int) -> None:
    on_commit(doorbell.tasks().evolver.enqueue_evolve, skill_id)


@transaction.atomic
def diagnostic_skill_request(
    *, trajectory: Trajectory, source: str, note: str = "", user: User | None = None
) -> tuple[DiagnosticSkill, bool]:
    """The skill job of a failed trajectory (created once; a second request changes nothing)."""
    skill, created = DiagnosticSkill.objects.get_or_create(
        trajectory=trajectory,
        defaults={"profile": _observer_profile(), "source": source, "note": note, "marked_by": user},
    )
    if created:
        _enqueue(skill.pk)
    return skill, created


@transaction.atomic
def trajectory_mark_wrong(*, trajectory_id: int, user: User, note: str) -> DiagnosticSkill:
    """A user says a finished diagnosis is wrong: grade it failed and send it to the Evolver."""
    trajectory = Trajectory.objects.select_for_update().filter(pk=trajectory_id).first()
    if trajectory is None:
        raise EvolverError(f"No trajectory {trajectory_id}.", code="not_found", status=404)
    if trajectory.status != Trajectory.Status.SUCCEEDED:
        raise EvolverError(
            f"Trajectory {trajectory_id} is {trajectory.status}; only a finished diagnosis can be wrong.",
            code="not_finished",
            status=409,
        )
    grading = {
        **(trajectory.grading or {}),
        "marked_wrong": {"by": user.get_username(), "note": note, "at": timezone.now().isoformat()},
    }
    diagnostics_services.trajectory_grade(trajectory=trajectory, success=False, grading=grading)
    skill, created = diagnostic_skill_request(
        trajectory=trajectory, source=DiagnosticSkill.Source.USER, note=note, user=user
    )
    if not created and skill.status in (DiagnosticSkill.Status.REJECTED, DiagnosticSkill.Status.FAILED):
        # Asked again with (maybe) a better note: one more try.
        DiagnosticSkill.objects.filter(pk=skill.pk).update(
            status=DiagnosticSkill.Status.PENDING,
            note=note,
            marked_by=user,
            error="",
            heartbeat_at=timezone.now(),
        )
        _enqueue(skill.pk)
        skill.refresh_from_db()
    return skill


def evolver_sweep() -> list[int]:
    """Graded failures that have no skill job yet get one; returns the new jobs' ids."""
    failed = Trajectory.objects.filter(graded=True, success=False, diagnostic_skill__isnull=True)
    created = []
    for trajectory in failed.select_related("incident")[:200]:
        skill, made = diagnostic_skill_request(
            trajectory=trajectory, source=DiagnosticSkill.Source.GRADED, note=json.dumps(trajectory.grading)
        )
        if made:
            created.append(skill.pk)
    return created


# --- the job ----------------------------------------------------------------------------------------


def diagnostic_skill_claim(*, skill_id: int) -> DiagnosticSkill | None:
    """pending -> running, once (``core/jobs.py``): the job, its ``attempts`` naming this run, or None
    when another delivery has it or it is finished. A job whose worker died is requeued by the
    sweeper (``evolver_jobs_sweep``), not here."""
    if jobs.claim(SKILL_JOB, skill_id, started_at=timezone.now()) is None:
        return None
    return DiagnosticSkill.objects.get(pk=skill_id)


def _finish(skill: DiagnosticSkill, **fields: Any) -> DiagnosticSkill:
    """Ends the job, as long as this run still owns it (else the sweeper's decision stands)."""
    jobs.still_ours(SKILL_JOB, skill.pk, skill.attempts).update(finished_at=timezone.now(), **fields)
    skill.refresh_from_db()
    return skill


def diagnostic_skill_release(*, skill: DiagnosticSkill, error: str) -> None:
    """Hand a claimed job back (a transient error; the task retries it, and should its message be
    lost, the sweeper sends it again)."""
    jobs.still_ours(SKILL_JOB, skill.pk, skill.attempts).update(
        status=DiagnosticSkill.Status.PENDING, error=error[:2000], heartbeat_at=timezone.now()
    )


def diagnostic_skill_evolve(
    *, skill: DiagnosticSkill, client: GatewayClient | None = None
) -> DiagnosticSkill:
    """Ask the teacher for the corrective plan of a claimed job and store it, or reject the answer.

    Raises LLMUnavailable when the gateway cannot be reached (the task retries)."""
    client = client or gateway_client(conf.get().evolver.profile)
    if client is None:
        return _finish(
            skill,
            status=DiagnosticSkill.Status.FAILED,
            error=f"No teacher: {diagnostics_conf.AGENT_KEY_ENV} is not set.",
        )
    trajectory = Trajectory.objects.select_related("incident").get(pk=skill.trajectory_id)
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": trajectory_brief(trajectory, note=skill.note)},
    ]
    reply = client.complete(messages, schema=PLAN_SCHEMA, max_tokens=700)
    plan, problem = parse_plan(reply.content)
    common = {"teacher_invocation_id": reply.invocation_id[:36], "teacher_output": reply.content[:8000]}
    if plan is None:
        return _finish(
            skill, status=DiagnosticSkill.Status.REJECTED, error=f"malformed plan: {problem}", **common
        )
    return _finish(
        skill,
        status=DiagnosticSkill.Status.READY,
        went_wrong=plan["went_wrong"],
        explanation=plan["explanation"],
        plan={phase: plan["plan"][phase] for phase in PHASES},
        signature=trajectory_signature(trajectory).to_json(),
        error="",
        **common,
    )


def diagnostic_skill_run(*, skill_id: int, client: GatewayClient | None = None) -> str:
    """Claim and evolve one job, with a heartbeat while the teacher answers; idempotent (a job that
    is claimed or finished is left as it is). An unreachable teacher hands the job back for the
    task's retry (raises LLMUnavailable) until the job used its attempts; any other error fails it."""
    skill = diagnostic_skill_claim(skill_id=skill_id)
    if skill is None:
        return (
            DiagnosticSkill.objects.filter(pk=skill_id).values_list("status", flat=True).first() or "missing"
        )
    with jobs.heartbeat(SKILL_JOB, skill.pk, skill.attempts, every_s=heartbeat_s()):
        try:
            return diagnostic_skill_evolve(skill=skill, client=client).status
        except LLMUnavailable as exc:
            if skill.attempts >= max_attempts():
                return _finish(skill, status=DiagnosticSkill.Status.FAILED, error=str(exc)[:2000]).status
            diagnostic_skill_release(skill=skill, error=str(exc))
            raise
        except Exception as exc:
            _finish(skill, status=DiagnosticSkill.Status.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000])
            raise
