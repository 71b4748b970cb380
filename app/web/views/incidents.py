"""Incidents: the list and the open form; an incident's diagnosis followed live; approve or deny."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from app.web import roles
from app.web.forms import ActionDecisionForm, IncidentOpenForm, RediagnoseForm
from app.web.forms.confirm import confirm_step, confirmed
from app.web.pages import can, page, render_page
from core.errors import ServiceError
from diagnostics import selectors, services, visibility
from diagnostics.approvals import involvement
from diagnostics.models import ActionRequest, Incident, Trajectory

LIST_PARTIALS = {"incident-form": "web/partials/incident_form.html"}
DETAIL_PARTIALS = {"incident-live": "web/partials/incident_live.html"}
ACTIVE_ACTIONS = (ActionRequest.Status.APPROVED, ActionRequest.Status.EXECUTING)
CHECKS_DUE = (ActionRequest.Verify.PENDING, ActionRequest.Verify.CHECKING)  # the check after a fix (issue 39)
REDIAGNOSE = "diagnostics.add_trajectory"  # the operator's: queuing a diagnosis


def _list_context(request: HttpRequest, form: IncidentOpenForm) -> dict[str, Any]:
    return {
        "incidents": selectors.incident_list(limit=100),
        "form": form,
        "can_open": can(request, roles.OPEN_INCIDENT),
        "nav": "incidents",
    }


@page(roles.VIEW_INCIDENTS)
def incidents(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _open(request)
    context = _list_context(request, IncidentOpenForm(initial={"environment": "local"}))
    return render_page(request, "web/incidents.html", context, partials=LIST_PARTIALS)


def _open(request: HttpRequest) -> HttpResponse:
    if not can(request, roles.OPEN_INCIDENT):
        raise PermissionDenied("Only operators may open incidents and start diagnoses.")
    form = IncidentOpenForm(request.POST)
    if not form.is_valid():
        context = _list_context(request, form)
        return render_page(request, "web/incidents.html", context, partials=LIST_PARTIALS, status=400)
    data = form.cleaned_data
    assert isinstance(request.user, User)
    try:
        incident = services.incident_open(
            title=data["title"],
            description=data["description"],
            source=Incident.Source.DASHBOARD,
            environment=data["environment"],
            environment_options=form.environment_options(),
            created_by=request.user,
            mode=data["mode"],
            trigger=Incident.Trigger.DASHBOARD,
            trigger_ref=str(request.user.pk),
        )
    except ServiceError as exc:
        form.add_error(None, exc.message)
        context = _list_context(request, form)
        return render_page(request, "web/incidents.html", context, partials=LIST_PARTIALS, status=exc.status)
    if getattr(request, "htmx", None):  # a full page load of the new incident
        return HttpResponseClientRedirect(reverse("web:incident", args=[incident.pk]))
    return redirect("web:incident", incident_id=incident.pk)


@dataclass
class AuditEvent:
    at: datetime
    who: str
    what: str


def audit_trail(incident: Incident) -> list[AuditEvent]:
    """Who did what and when: the opening, each diagnosis, each action's proposal, decision and run."""
    events = [
        AuditEvent(incident.created_at, _trigger_name(incident), f"opened the incident ({incident.source})")
    ]
    for trajectory in incident.trajectories.all():
        if trajectory.started_at:
            events.append(AuditEvent(trajectory.started_at, "agent", f"started diagnosis {trajectory.pk}"))
        if trajectory.finished_at:
            events.append(
                AuditEvent(trajectory.finished_at, "agent", f"diagnosis {trajectory.pk} {trajectory.status}")
            )
        for action in trajectory.actions.all():
            events.append(
                AuditEvent(
                    action.created_at,
                    "agent",
                    f"proposed {action.tool} {action.args} for {_name(action.requested_by)}",
                )
            )
            if action.decided_at:
                # Only a denial or an approval sets decided_at; the status may have moved on since.
                decision = "denied" if action.status == ActionRequest.Status.DENIED else "approved"
                note = f": {action.decision_note}" if action.decision_note else ""
                events.append(
                    AuditEvent(action.decided_at, _name(action.decided_by), f"{decision} {action.tool}{note}")
                )
            if action.executed_at and action.status in (
                ActionRequest.Status.EXECUTED,
                ActionRequest.Status.FAILED,
            ):
                ok = "succeeded" if action.status == ActionRequest.Status.EXECUTED else "failed"
                events.append(AuditEvent(action.executed_at, "executor", f"ran {action.tool}: {ok}"))
    return sorted(events, key=lambda e: e.at)


def _name(user: Any) -> str:
    return user.get_username() if user is not None else "—"


def _trigger_name(incident: Incident) -> str:
    """Who or what opened the incident: the requester, else the recorded trigger (alert, Slack member)."""
    if incident.trigger == Incident.Trigger.ALERT:
        return f"alert ({incident.trigger_ref})"
    if incident.created_by is not None:
        return _name(incident.created_by)
    if incident.trigger == Incident.Trigger.SLACK:
        return f"Slack member {incident.trigger_ref} (unlinked)"
    return "—"


def _detail_context(
    request: HttpRequest,
    incident_id: int,
    error: str = "",
    rediagnose: RediagnoseForm | None = None,
    decision: tuple[int, ActionDecisionForm] | None = None,
) -> dict[str, Any]:
    incident = selectors.incident_detail(incident_id=incident_id)
    if incident is None:
        raise Http404(f"No incident {incident_id}.")
    visibility.redact_incident(incident, user=request.user, key_id=None)  # another's write: tool, status
    trajectories = list(incident.trajectories.all())
    may_approve = can(request, roles.APPROVE_ACTION)
    if may_approve and isinstance(request.user, User):
        # Why this approver may not decide (they opened or touched the incident): shown instead of buttons.
        for t in trajectories:
            for a in t.actions.all():
                if a.status == ActionRequest.Status.PENDING:
                    reason = involvement(action=a, incident=incident, user=request.user)
                    a.involvement = reason.message if reason else ""  # type: ignore[attr-defined]
                    # The approval's note: the refused one as it was typed, with its message.
                    refused = decision is not None and decision[0] == a.pk
                    form = decision[1] if decision is not None and refused else ActionDecisionForm()
                    a.decision_form = form  # type: ignore[attr-defined]
    live = any(
        t.status in (Trajectory.Status.QUEUED, Trajectory.Status.RUNNING)
        or any(a.status in ACTIVE_ACTIONS or a.verify_status in CHECKS_DUE for a in t.actions.all())
        for t in trajectories
    )
    return {
        "incident": incident,
        "trajectories": trajectories,
        "live": live,
        "audit": audit_trail(incident),
        "may_approve": may_approve,
        "may_rediagnose": can(request, REDIAGNOSE) and can(request, roles.OPEN_INCIDENT),
        "rediagnose_form": rediagnose or RediagnoseForm(),
        "now": timezone.now(),
        "error": error,
        "nav": "incidents",
    }


@page(roles.VIEW_INCIDENTS)
def incident(request: HttpRequest, incident_id: int) -> HttpResponse:
    context = _detail_context(request, incident_id)
    return render_page(request, "web/incident.html", context, partials=DETAIL_PARTIALS)


def _refusal(request: HttpRequest, action: ActionRequest) -> str:
    """Why this user may not approve or deny ``action`` ("" when they may; the service decides again)."""
    if not can(request, roles.APPROVE_ACTION) or not isinstance(request.user, User):
        return "You are not allowed to approve or deny actions."
    reason = involvement(action=action, incident=action.trajectory.incident, user=request.user)
    return reason.message if reason else ""


@require_POST
@page(roles.VIEW_INCIDENTS)
def action_decide(request: HttpRequest, incident_id: int, action_id: int, decision: str) -> HttpResponse:
    """Approve or deny: the service checks the permission, the two-person rule (nobody who triggered or
    touched the incident), expiry and the plan (tool, args, environment)."""
    action = selectors.action_request_get(action_request_id=action_id)
    if action is None or action.trajectory.incident_id != incident_id:
        raise Http404(f"No action {action_id} on incident {incident_id}.")
    # Who may not decide is told so before any second look: the confirmation step is for those who may.
    if refused := _refusal(request, action):
        context = _detail_context(request, incident_id, error=refused)
        return render_page(request, "web/incident.html", context, partials=DETAIL_PARTIALS, status=403)
    form = ActionDecisionForm(request.POST)
    if not form.is_valid():  # the note as typed, its message next to it; nothing decided, nothing asked
        context = _detail_context(request, incident_id, decision=(action.pk, form))
        return render_page(request, "web/incident.html", context, partials=DETAIL_PARTIALS, status=400)
    note = form.cleaned_data["note"]
    if decision == "approve" and not confirmed(request):  # it runs a fix: a second look first
        return confirm_step(
            request,
            question=f"Run {action.tool} {action.args} in {action.trajectory.incident.environment} now?",
            verb="Approve and run it",
            back=reverse("web:incident", args=[incident_id]),
            keep=("plan_hash", "note"),
        )
    try:
        if decision == "approve":
            services.action_request_approve(
                action_request_id=action_id,
                user=request.user,
                plan_hash_seen=request.POST.get("plan_hash") or None,
                note=note,
            )
        else:
            services.action_request_deny(action_request_id=action_id, user=request.user, note=note)
    except ServiceError as exc:
        context = _detail_context(request, incident_id, error=exc.message)
        return render_page(request, "web/incident.html", context, partials=DETAIL_PARTIALS, status=exc.status)
    if getattr(request, "htmx", None):
        return render_page(
            request, "web/incident.html", _detail_context(request, incident_id), partials=DETAIL_PARTIALS
        )
    messages.success(request, f"Action {action_id} {decision}d.")
    return redirect("web:incident", incident_id=incident_id)


@require_POST
@page(roles.VIEW_INCIDENTS)
def incident_rediagnose(request: HttpRequest, incident_id: int) -> HttpResponse:
    """Diagnose again: queues another trajectory, unless one is still queued or running; only on a
    confirmed form (without JavaScript the first post answers with the confirmation step)."""
    if not (can(request, REDIAGNOSE) and can(request, roles.OPEN_INCIDENT)):
        raise PermissionDenied("Only operators may start diagnoses.")
    found = Incident.objects.filter(pk=incident_id).first()
    if found is None:
        raise Http404(f"No incident {incident_id}.")
    form = RediagnoseForm(request.POST)
    busy = (Trajectory.Status.QUEUED, Trajectory.Status.RUNNING)
    if form.is_valid() and found.trajectories.filter(status__in=busy).exists():
        form.add_error(None, "A diagnosis of this incident is still running; wait for it to finish.")
    if form.errors:
        context = _detail_context(request, incident_id, rediagnose=form)
        return render_page(request, "web/incident.html", context, partials=DETAIL_PARTIALS, status=400)
    if not confirmed(request):  # it calls models and tools again (it spends): a second look first
        return confirm_step(
            request,
            question=f"Start another diagnosis of #{found.pk} ({found.title})? "
            "It calls models and tools again.",
            verb="Diagnose again",
            back=reverse("web:incident", args=[incident_id]),
            keep=("mode",),
        )
    assert isinstance(request.user, User)
    services.trajectory_queue(incident=found, mode=form.cleaned_data["mode"], user=request.user)
    if getattr(request, "htmx", None):
        context = _detail_context(request, incident_id)
        return render_page(request, "web/incident.html", context, partials=DETAIL_PARTIALS)
    messages.success(request, "Another diagnosis is queued.")
    return redirect("web:incident", incident_id=incident_id)
