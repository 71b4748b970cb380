"""Router: per profile, the active learned-router version, its cost-quality curve with the chosen
point, the drift flag, the verifier's measured precision and the fixed fallback's measured choice and its
drift watch, the labels spent (background samples, today and in 7 days, against the day's cap) and the
profile's label budget, every version, and rollback to an earlier admitted one; a banner names every drifting
profile."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from app.web import charts
from app.web.forms.confirm import confirm_step, confirmed
from app.web.pages import can, page, render_page
from core.errors import ServiceError
from routing.models import ProfileDrift, RouterVersion, TaskProfile
from routing.router import alerts
from routing.router.versions.config import label_spend
from routing.router.versions.services import router_version_rollback
from routing.router.versions.truth import profile_truth

VIEW_ROUTER = "routing.view_routerversion"
ROLLBACK_ROUTER = "routing.change_routerversion"
PARTIALS = {"router-body": "web/partials/router_body.html"}


def curve_chart(version: RouterVersion) -> charts.Chart | None:
    """Pass rate against cost (relative to always-teacher) at every threshold; the chosen one circled."""
    calibration: dict[str, Any] = version.calibration or {}
    curve = [p for p in calibration.get("curve", []) if isinstance(p, dict)]
    if not curve:
        return None
    curve.sort(key=lambda p: p["cost_rel"])
    chosen = calibration.get("chosen") or {}
    markers = []
    if chosen:
        label = f"t={chosen['threshold']:.3g}"
        markers.append((chosen["cost_rel"] * 100, chosen["pass_rate"] * 100, label))
    series = [("pass rate", [p["pass_rate"] * 100 for p in curve])]
    required = calibration.get("required_pass_rate")
    if required is not None:
        series.append(("required", [required * 100 for _ in curve]))
    return charts.line_chart(
        title=f"Cost-quality curve of v{version.number} ({len(curve)} thresholds)",
        x_values=[p["cost_rel"] * 100 for p in curve],
        series=series,
        x_label="cost, % of always-teacher",
        y_label="pass rate %",
        x_format=lambda v: f"{v:.0f}%",
        y_format=lambda v: f"{v:.0f}%",
        markers=markers,
        dashed=["required"],
        x_nice_ticks=True,
    )


def _context(request: HttpRequest, profile_id: str | None, error: str = "") -> dict[str, Any]:
    watched = Q(router_versions__isnull=False) | Q(policy=TaskProfile.Policy.LEARNED)
    with_versions = TaskProfile.objects.filter(watched).distinct().order_by("name")
    profiles = list(with_versions)
    profile = next((p for p in profiles if str(p.pk) == profile_id), profiles[0] if profiles else None)
    versions = list(RouterVersion.objects.filter(profile=profile).order_by("-number")) if profile else []
    active = next((v for v in versions if v.status == RouterVersion.Status.ACTIVE), None)
    shown = active or next((v for v in versions if v.calibration), None)
    return {
        "profiles": profiles,
        "profile": profile,
        "versions": versions,
        "active": active,
        "shown": shown,
        "curve": curve_chart(shown) if shown else None,
        "truth": profile_truth(profile) if profile else None,
        "labels": label_spend(profile) if profile else None,
        "watch": ProfileDrift.objects.filter(profile=profile).first() if profile else None,
        "drift_alerts": alerts.flagged(),
        "can_rollback": can(request, ROLLBACK_ROUTER),
        "error": error,
        "nav": "router",
    }


@page(VIEW_ROUTER)
def router(request: HttpRequest) -> HttpResponse:
    context = _context(request, request.GET.get("profile"))
    return render_page(request, "web/router.html", context, partials=PARTIALS)


@require_POST
@page(VIEW_ROUTER)
def router_rollback(request: HttpRequest, version_id: int) -> HttpResponse:
    if not can(request, ROLLBACK_ROUTER):
        raise PermissionDenied("Only admins may roll the router back.")
    version = RouterVersion.objects.select_related("profile").filter(pk=version_id).first()
    if version is None:
        raise Http404(f"No router version {version_id}.")
    if not confirmed(request):  # it changes how the profile's calls are routed: a second look first
        return confirm_step(
            request,
            question=f"Make v{version.number} the active router of {version.profile.name}? Its calls are "
            "routed by it from the next call.",
            verb=f"Roll back to v{version.number}",
            back=f"{reverse('web:router')}?profile={version.profile_id}",
        )
    try:
        router_version_rollback(profile=version.profile, to_version=version)
    except ServiceError as exc:
        context = _context(request, str(version.profile_id), error=exc.message)
        return render_page(request, "web/router.html", context, partials=PARTIALS, status=exc.status)
    messages.success(request, f"{version.profile.name}: router v{version.number} is active again.")
    return redirect(f"{reverse('web:router')}?profile={version.profile_id}")
