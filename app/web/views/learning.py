"""Learning: per profile, the cycles (start one), SkillBook versions with diffs, adapters (roll
back), training runs with live progress and a loss/reward chart, admissions with both sides' numbers."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from app.web import charts
from app.web.forms.confirm import confirm_step, confirmed
from app.web.pages import can, page, render_page
from core.errors import ServiceError
from core.snapshot import snapshot
from routing.models import TaskProfile
from training.deploy import adapter_rollback
from training.models import Adapter, Admission, Cycle, SkillBook, TrainingRun
from training.services.cycle.cancel import cycle_cancel
from training.services.cycle.orchestrate import cycle_start

VIEW_LEARNING = "training.view_cycle"
START_CYCLE = "training.add_cycle"
ROLLBACK_ADAPTER = "training.change_adapter"
PARTIALS = {"learning-live": "web/partials/learning_live.html"}
SHOWN = 10


def run_chart(run: TrainingRun) -> charts.Chart | None:
    """Loss (and reward, for GRPO) against the step, from the progress the trainer stores."""
    points = [p for p in run.progress or [] if isinstance(p, dict) and p.get("step") is not None]
    if not points:
        return None
    steps = [float(p["step"]) for p in points]
    series: list[tuple[str, list[float | None]]] = [("loss", [p.get("loss") for p in points])]
    if any(p.get("reward") is not None for p in points):
        series.append(("reward", [p.get("reward") for p in points]))
    return charts.line_chart(
        title=f"Run {run.pk} ({run.get_kind_display()}): step {run.step} of {run.total_steps or '?'}",
        x_values=steps,
        series=series,
        x_label="step",
        y_format=lambda v: f"{v:.3g}",
    )


def diff_lines(diff: str) -> list[tuple[str, str]]:
    """(css class, line) of a unified diff."""
    kinds = {"+": "add", "-": "del", "@": "hunk"}
    return [
        (kinds.get(line[:1], ""), line) for line in diff.splitlines() if not line.startswith(("+++", "---"))
    ]


def _context(request: HttpRequest, profile_id: str | None) -> dict[str, Any]:
    with snapshot():  # one moment: a cycle that just finished and its run, adapter and admission
        return _read(request, profile_id)


def _read(request: HttpRequest, profile_id: str | None) -> dict[str, Any]:
    profiles = list(TaskProfile.objects.order_by("name"))
    active_cycles = set(
        Cycle.objects.filter(status__in=Cycle.UNFINISHED).values_list("profile_id", flat=True)
    )
    default = next((p for p in profiles if p.pk in active_cycles), profiles[0] if profiles else None)
    profile = next((p for p in profiles if str(p.pk) == profile_id), default)
    cycles = list(
        Cycle.objects.filter(profile=profile).select_related("admission").order_by("-created_at")[:SHOWN]
    )
    runs = list(
        TrainingRun.objects.filter(adapter__profile=profile)
        .select_related("adapter")
        .order_by("-created_at")[:SHOWN]
    )
    skillbooks = list(SkillBook.objects.filter(profile=profile).order_by("-version")[:SHOWN])
    live = any(c.status in Cycle.UNFINISHED for c in cycles) or any(
        r.status in (TrainingRun.Status.QUEUED, TrainingRun.Status.RUNNING) for r in runs
    )
    return {
        "profiles": profiles,
        "profile": profile,
        "cycles": cycles,
        "runs": [(run, run_chart(run)) for run in runs],
        "skillbooks": [(book, diff_lines(book.diff)) for book in skillbooks],
        "adapters": list(Adapter.objects.filter(profile=profile).order_by("-version")[:SHOWN]),
        "admissions": list(
            Admission.objects.filter(profile=profile)
            .select_related("rollback")
            .order_by("-created_at")[:SHOWN]
        ),
        "live": live,
        "unfinished": Cycle.UNFINISHED,
        "can_start": can(request, START_CYCLE),
        "can_rollback": can(request, ROLLBACK_ADAPTER),
        "nav": "learning",
    }


@page(VIEW_LEARNING)
def learning(request: HttpRequest) -> HttpResponse:
    context = _context(request, request.GET.get("profile"))
    return render_page(request, "web/learning.html", context, partials=PARTIALS)


def _back(profile: TaskProfile) -> HttpResponse:
    return redirect(f"{reverse('web:learning')}?profile={profile.pk}")


@require_POST
@page(VIEW_LEARNING)
def cycle_new(request: HttpRequest, profile_id: int) -> HttpResponse:
    if not can(request, START_CYCLE):
        raise PermissionDenied("Only operators may start learning cycles.")
    profile = get_object_or_404(TaskProfile, pk=profile_id)
    if not confirmed(request):  # it spends teacher calls and may train: a second look first
        return confirm_step(
            request,
            question=f"Start a learning cycle for {profile.name}? It spends teacher calls (under the "
            "learning key) and may train an adapter.",
            verb="Start the cycle",
            back=f"{reverse('web:learning')}?profile={profile.pk}",
        )
    cycle, created = cycle_start(profile_id=profile.pk, trigger=Cycle.Trigger.DASHBOARD)
    if created:
        messages.success(request, f"Cycle {cycle.pk} of {profile.name} started.")
    else:
        messages.info(
            request, f"Cycle {cycle.pk} of {profile.name} is still {cycle.status}; not starting another."
        )
    return _back(profile)


@require_POST
@page(VIEW_LEARNING)
def adapter_roll_back(request: HttpRequest, profile_id: int) -> HttpResponse:
    if not can(request, ROLLBACK_ADAPTER):
        raise PermissionDenied("Only admins may roll adapters back.")
    profile = get_object_or_404(TaskProfile, pk=profile_id)
    if not confirmed(request):  # it changes the model serving the profile's calls: a second look first
        return confirm_step(
            request,
            question=f"Roll the student of {profile.name} back to its previous adapter? Its calls are "
            "served by that adapter from the next call.",
            verb="Roll back",
            back=f"{reverse('web:learning')}?profile={profile.pk}",
        )
    try:
        now_active = adapter_rollback(profile_id=profile.pk)
    except ServiceError as exc:
        messages.error(request, exc.message)
        return _back(profile)
    name = now_active.name if now_active else "the base model"
    messages.success(request, f"{profile.name}: the student is {name} again.")
    return _back(profile)


@require_POST
@page(VIEW_LEARNING)
def cycle_stop(request: HttpRequest, profile_id: int, cycle_id: int) -> HttpResponse:
    """Cancels an unfinished cycle (the role that starts cycles may stop them)."""
    if not can(request, START_CYCLE):
        raise PermissionDenied("Only operators may cancel learning cycles.")
    profile = get_object_or_404(TaskProfile, pk=profile_id)
    cycle = get_object_or_404(Cycle, pk=cycle_id, profile=profile)
    if cycle_cancel(cycle_id=cycle.pk, user=request.user.get_username()):
        messages.success(request, f"Cycle {cycle.pk} of {profile.name} cancelled.")
    elif Cycle.objects.filter(pk=cycle.pk, status__in=Cycle.UNFINISHED).exists():
        messages.info(request, f"Cycle {cycle.pk} of {profile.name} is applying its admission; too late.")
    else:
        messages.info(request, f"Cycle {cycle.pk} of {profile.name} had already ended ({cycle.status}).")
    return _back(profile)
