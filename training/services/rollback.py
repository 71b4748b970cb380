"""Auto-rollback: an admitted configuration that does worse live than its admission said is taken back.

Admission measured the candidate's student pass rate on held-out items (``Admission.candidate_metrics
["student_pass_rate"]``, the figure). Live, the gateway's background teacher samples
(routing/call/sampling.py) label some of the student's answers correct or wrong. A beat task
(``training.tasks.cycle.cycles_check_live``) compares the two for each profile's latest admitted
admission that is still served, and rolls the admission back, adapter and SkillBook together, when

* at least ``rollback_min_samples`` live calls since the admission carry a label,
* the live correctness is below ``figure - rollback_margin``, and
* a one-sided binomial test finds it below that line at the cycle's admission level (``ADMISSION_ALPHA``).

Live correctness per student answer since the admission: a failed verification is wrong (every one of
them is known); a passed one with a sample's ``correct`` label counts as labelled, weighted by the inverse
of the rate it was sampled at (only that share of passes is labelled); a passed answer without a label
is unknown. The estimate is the weighted share of correct answers, tested on its effective sample size.

``rollback_margin`` (default 0.10) and ``rollback_min_samples`` (default 30) are profile settings, in the
profile's ``policy_params`` beside its sampling rates. Idempotent: a rollback is recorded once per
admission (``training.models.Rollback``), under the profile's row lock, and only an admission whose parts
still serve is checked, so a manual change or a newer admission is never undone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from core.errors import ServiceError
from routing.models import Invocation, TaskProfile
from routing.services import task_profile_skillbook_set
from training import conf, selectors
from training.deploy import DeployError, adapter_load, adapter_rollback, rollback_target
from training.models import Adapter, Admission, Rollback, SkillBook
from training.services.cycle.skillbook import served_text, skillbook_activate

log = logging.getLogger(__name__)

DEFAULT_MARGIN = 0.10
DEFAULT_MIN_SAMPLES = 30
SCAN_LIMIT = 5000  # the newest calls since the admission that are read per check


class RollbackSettingError(ServiceError):
    """A profile's rollback setting is unusable (names the field)."""

    code = "invalid_rollback_setting"
    status = 400


@dataclass(frozen=True)
class RollbackSettings:
    margin: float
    min_samples: int


def rollback_settings(profile: TaskProfile) -> RollbackSettings:
    params = profile.policy_params if isinstance(profile.policy_params, dict) else {}
    margin = params.get("rollback_margin", DEFAULT_MARGIN)
    min_samples = params.get("rollback_min_samples", DEFAULT_MIN_SAMPLES)
    if isinstance(margin, bool) or not isinstance(margin, int | float) or not 0 <= margin <= 1:
        raise RollbackSettingError(
            f"policy_params.rollback_margin must be a number in [0, 1]; got {margin!r}"
        )
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise RollbackSettingError(
            f"policy_params.rollback_min_samples must be a positive integer; got {min_samples!r}"
        )
    return RollbackSettings(float(margin), min_samples)


@dataclass(frozen=True)
class Live:
    labelled: int  # student answers with a label
    correct: float  # weighted share of them that were correct
    effective: float  # effective sample size of the weighted share

    def p_below(self, line: float) -> float:
        """One-sided p-value that the live correctness is below ``line``."""
        from scipy.stats import binomtest  # here: scipy.stats costs every process's start-up ~2 s

        n = max(round(self.effective), 1)
        k = min(max(round(self.correct * n), 0), n)
        return float(binomtest(k, n, min(max(line, 0.0), 1.0), alternative="less").pvalue)


def _sample_rate(legs: list[dict[str, Any]]) -> float:
    rate = next(
        (leg.get("sample_rate") for leg in legs if leg.get("background") and leg.get("role") == "teacher"),
        None,
    )
    return float(rate) if isinstance(rate, int | float) and 0 < rate <= 1 else 1.0


def live_correctness(*, profile_id: int, since: datetime) -> Live:
    """The student's labelled live answers of the profile since ``since`` (see the module docstring)."""
    weights: list[tuple[float, bool]] = []
    calls = (
        Invocation.objects.filter(profile_id=profile_id, created_at__gt=since, route=Invocation.Route.STUDENT)
        .order_by("-created_at")
        .values_list("legs", flat=True)[:SCAN_LIMIT]
    )
    for legs in calls:
        legs = [leg for leg in legs or [] if isinstance(leg, dict)]
        student = next(
            (leg for leg in legs if leg.get("role") == "student" and not leg.get("background")), None
        )
        if student is None:
            continue
        if student.get("verdict") == Invocation.Verdict.FAIL:
            weights.append((1.0, False))
        elif isinstance(student.get("correct"), bool):
            weights.append((1.0 / _sample_rate(legs), student["correct"]))
    total = sum(w for w, _ in weights)
    if not total:
        return Live(0, 0.0, 0.0)
    correct = sum(w for w, ok in weights if ok) / total
    return Live(len(weights), correct, total**2 / sum(w * w for w, _ in weights))


def _still_served(admission: Admission) -> dict[str, Any]:
    """The admission's parts that still serve: {"adapter": Adapter, "skillbook": SkillBook}."""
    served: dict[str, Any] = {}
    adapter_id = admission.candidate.get("adapter")
    if adapter_id is not None:
        adapter = Adapter.objects.filter(pk=adapter_id, status=Adapter.Status.ACTIVE).first()
        if adapter is not None:
            served["adapter"] = adapter
    skillbook_id = admission.candidate.get("skillbook")
    active = selectors.skillbook_active(profile_id=admission.profile_id)
    if skillbook_id is not None and active is not None and active.pk == skillbook_id:
        served["skillbook"] = active
    return served


def _restore_skillbook(admission: Admission, current: SkillBook) -> int | None:
    """The SkillBook that served before the admission serves again (none: the profile's text is
    emptied, the Evolver's block kept). Returns its id."""
    previous = admission.active.get("skillbook")
    if (
        previous is not None
        and SkillBook.objects.filter(pk=previous, profile_id=admission.profile_id).exists()
    ):
        skillbook_activate(skillbook_id=previous)
        return int(previous)
    SkillBook.objects.filter(pk=current.pk).update(activated_at=None)
    profile = TaskProfile.objects.get(pk=admission.profile_id)
    task_profile_skillbook_set(profile_id=profile.pk, text=served_text(profile, ""))
    return None


def rollback_check(*, profile_id: int) -> Rollback | None:
    """Checks the profile's latest admitted admission against its live correctness; rolls it back when
    it is significantly worse than the admission's figure by the margin. Returns the rollback or None."""
    profile = TaskProfile.objects.get(pk=profile_id)
    admission = (
        Admission.objects.filter(profile_id=profile_id, decision=Admission.Decision.ADMITTED)
        .order_by("-created_at", "-pk")
        .first()
    )
    if admission is None or Rollback.objects.filter(admission=admission).exists():
        return None
    figure = (admission.candidate_metrics or {}).get("student_pass_rate")
    if isinstance(figure, bool) or not isinstance(figure, int | float):
        return None
    served = _still_served(admission)
    if not served:
        return None
    setting = rollback_settings(profile)
    live = live_correctness(profile_id=profile_id, since=admission.created_at)
    line = float(figure) - setting.margin
    if live.labelled < setting.min_samples or live.correct >= line:
        return None
    p_value, alpha = live.p_below(line), conf.get().cycle.admission_alpha
    if p_value >= alpha:
        return None
    if "adapter" in served:  # loaded before anything is routed to it (HTTP, idempotent)
        target = rollback_target(profile)
        if target is not None and not target.is_loaded:
            adapter_load(adapter_id=target.pk)
    reason = (
        f"live correctness {live.correct:.3f} on {live.labelled} labelled calls is below the admission's "
        f"{figure:.3f} - margin {setting.margin:.2f} (one-sided p={p_value:.4f} < {alpha})"
    )
    with transaction.atomic():
        TaskProfile.objects.select_for_update().get(pk=profile_id)
        if Rollback.objects.filter(admission=admission).exists():
            return None  # another worker took it back meanwhile
        restored: dict[str, Any] = {}
        if "adapter" in served:
            target = adapter_rollback(profile_id=profile_id)
            restored["adapter"] = target.name if target is not None else ""
        if "skillbook" in served:
            restored["skillbook"] = _restore_skillbook(admission, served["skillbook"])
        rollback = Rollback.objects.create(
            profile_id=profile_id,
            admission=admission,
            figure=float(figure),
            live=live.correct,
            samples=live.labelled,
            margin=setting.margin,
            p_value=p_value,
            restored=restored,
            reason=reason,
        )
    log.warning("profile %s: admission #%s rolled back: %s", profile.name, admission.pk, reason)
    return rollback


def rollbacks_check() -> list[int]:
    """Beat: every profile with an admitted admission not rolled back is checked; returns the ids of the
    rollbacks made. A profile whose check fails (a bad setting, the student server down) is logged and
    checked again next time."""
    made = []
    profiles = (
        Admission.objects.filter(decision=Admission.Decision.ADMITTED, rollback__isnull=True)
        .values_list("profile_id", flat=True)
        .distinct()
    )
    for profile_id in list(profiles):
        try:
            rollback = rollback_check(profile_id=profile_id)
        except (RollbackSettingError, DeployError) as exc:
            log.warning("profile %s: rollback check failed: %s", profile_id, exc)
            continue
        if rollback is not None:
            made.append(rollback.pk)
    return made


__all__ = ["Live", "RollbackSettingError", "live_correctness", "rollback_check", "rollbacks_check"]
