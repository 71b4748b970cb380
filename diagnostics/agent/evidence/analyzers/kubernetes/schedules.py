"""A CronJob's describe -> findings (the cronjob controller's semantics).

- ``concurrencyPolicy: Forbid`` with a Job still active: every schedule is skipped while it runs
  (event ``JobAlreadyActive``: "Not starting job because prior execution is running ..."), so a run that
  hangs stops all later ones;
- more than 100 missed schedules (controller down, or a ``startingDeadlineSeconds`` too short) and the
  controller gives up (``TooManyMissedTimes``: "too many missed start times");
- ``Suspend: True``: nothing is scheduled at all.
Other warning events go through the shared event reading (events.py).
"""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    field_value,
    looks_like_describe,
    parse_events,
    register,
)
from diagnostics.agent.evidence.analyzers.events import event_findings
from diagnostics.agent.findings import Finding, ObjRef, Severity


@register
class CronJobDescribeAnalyzer(Analyzer):
    name = "k8s_cronjob_describe"

    def applies(self, out: ToolOutput) -> bool:
        return looks_like_describe(out.text) and "Schedule:" in out.text and "Concurrency Policy:" in out.text

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        obj = ObjRef("cronjob", field_value(out.text, "Name"), field_value(out.text, "Namespace"))
        policy = field_value(out.text, "Concurrency Policy")
        active = [j for j in field_value(out.text, "Active Jobs").replace(",", " ").split() if j != "<none>"]
        last = field_value(out.text, "Last Schedule Time")
        events = parse_events(out.text)
        findings: list[Finding] = []
        for job in active:
            state.lead(ObjRef("job", job, obj.namespace), f"the active run of cronjob {obj.name}", 80)
        skipped = [e for e in events if e.reason == "JobAlreadyActive"]
        if skipped or (policy == "Forbid" and active and any(e.type == "Warning" for e in events)):
            running = f" {active[0]}" if active else ""
            findings.append(
                Finding(
                    "cronjob_blocked_by_active_run",
                    f"The CronJob {obj.name} starts no new run: its previous Job{running} is still running "
                    f"and its concurrency policy is {policy or 'Forbid'}, so every schedule since "
                    f"{last or 'then'} is skipped (JobAlreadyActive).",
                    Severity.CRITICAL,
                    obj.label,
                    clip(skipped[0].message if skipped else f"Active Jobs: {' '.join(active)}"),
                    84,
                    "Find why the running Job hangs (its pod's logs) and delete it, set its "
                    "activeDeadlineSeconds so a stuck run ends, or use concurrencyPolicy Replace.",
                )
            )
        missed = [e for e in events if "too many missed start times" in e.message.lower()]
        if missed:
            findings.append(
                Finding(
                    "cronjob_missed_too_many",
                    f"The CronJob {obj.name} is no longer scheduled: it missed more than 100 start times, "
                    "and the cronjob controller stops trying (set startingDeadlineSeconds).",
                    Severity.CRITICAL,
                    obj.label,
                    clip(missed[0].message),
                    80,
                )
            )
        if field_value(out.text, "Suspend") == "True":
            findings.append(
                Finding(
                    "cronjob_suspended",
                    f"The CronJob {obj.name} is suspended (Suspend: True): no run is scheduled.",
                    Severity.WARNING,
                    obj.label,
                    "Suspend: True",
                    60,
                )
            )
        handled = {"JobAlreadyActive"}
        findings += event_findings([e for e in events if e.reason not in handled], obj, state)
        return findings
