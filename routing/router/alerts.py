"""Drift alerts: a router version or a profile's fixed fallback newly flagged for drift is announced.

Three places say it: the gauge ``skillgate_router_drift`` (app/observability/state.py, from the stored
flags), the banner of the dashboard's router page and overview (``flagged()``), and the senders
registered here, called once per newly flagged drift by the drift tasks (``routing.tasks``). Routing
imports no app above it: the Slack bot registers its sender when it starts
(``diagnostics.slack.router_alerts``: a message to ``SLACK_ALERT_CHANNEL`` through the bot's client).
A sender that fails is logged; the drift check's own work (the flag, the retrain) stands.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from django.db.models import Q

from routing.models import ProfileDrift, RouterVersion
from routing.router.versions.drift import COST_DRIFT

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Alert:
    """One newly flagged drift: of router ``version`` (a number), or of the fixed fallback (None)."""

    profile: str
    profile_id: int
    version: int | None
    reason: str
    stops: bool = True  # it no longer serves (correctness); False: cost or inputs drifted, it still does

    @property
    def subject(self) -> str:
        if self.version is not None:
            return f"router v{self.version} of {self.profile}"
        return f"the fixed fallback of {self.profile}"

    @property
    def text(self) -> str:
        if not self.stops:
            remedy = "its answers are still as correct as predicted, so it keeps serving; a retrain is queued"
        elif self.version is not None:
            remedy = "its calls are served by the safe fixed policy and a retrain is queued"
        else:
            remedy = "the teacher serves until the fallback is measured again on the new traffic"
        return f"Drift: {self.subject} is drifting ({self.reason[:600]}); {remedy}."


Sender = Callable[[Alert], None]
_SENDERS: list[Sender] = []


def register(sender: Sender) -> None:
    """Adds a sender (once: registering the same one again changes nothing)."""
    if sender not in _SENDERS:
        _SENDERS.append(sender)


def unregister(sender: Sender) -> None:
    if sender in _SENDERS:
        _SENDERS.remove(sender)


def notify(alert: Alert) -> int:
    """Hands ``alert`` to every sender; returns how many took it without an error."""
    sent = 0
    for sender in list(_SENDERS):
        try:
            sender(alert)
        except Exception:  # a broken sender must not undo the drift check's work
            log.exception("drift alert for %s not sent by %r", alert.subject, sender)
        else:
            sent += 1
    return sent


def version_alert(version: RouterVersion) -> Alert:
    reason = version.drift_reason
    return Alert(version.profile.name, version.profile_id, version.number, reason, version.drift_flag)


def fallback_alert(state: ProfileDrift) -> Alert:
    return Alert(
        state.profile.name, state.profile_id, None, state.reason, not state.reason.startswith(COST_DRIFT)
    )


def flagged() -> list[Alert]:
    """Every drift flagged now (the dashboard's banners): active versions, then fixed fallbacks."""
    active = RouterVersion.objects.filter(status=RouterVersion.Status.ACTIVE)
    versions = active.filter(Q(drift_flag=True) | Q(drift_reason__startswith=COST_DRIFT))
    alerts = [version_alert(v) for v in versions.select_related("profile").order_by("profile__name")]
    states = ProfileDrift.objects.filter(flag=True).select_related("profile").order_by("profile__name")
    return alerts + [fallback_alert(s) for s in states if s.profile_id not in {a.profile_id for a in alerts}]
