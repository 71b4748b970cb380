"""Scheduled work that did not run (issue 39, round ten's n103 class): a namespace alert about a run that did
not happen lists the CronJobs and Jobs there, and the analyzer says which CronJob does not run and why:
suspended (who set it), its latest Job failing, stuck behind an active Job under Forbid, or late."""

from __future__ import annotations

from typing import Any

from diagnostics.agent.evidence.analyzers import AnalysisState, ToolOutput, analyze
from diagnostics.agent.evidence.analyzers.scheduled_runs import schedule_period
from diagnostics.agent.findings import Finding
from diagnostics.agent.request.subject import AlertContext, from_alertmanager
from tests.support.planner import planned_reads, tool_spec

_KINDS = ("cronjob_suspended", "cronjob_runs_fail", "cronjob_blocked_by_active_job", "cronjob_not_scheduled")
_NS = {"namespace": "reports"}

CRONJOBS = """NAME             SCHEDULE       TIMEZONE   SUSPEND   ACTIVE   LAST SCHEDULE   AGE
ledger-export    0 */4 * * *    <none>     {suspend}     {active}        {last}              90d
cache-warm       */10 * * * *   <none>     False     0        4m              90d
"""
JOBS = """NAME                     STATUS     COMPLETIONS   DURATION   AGE
ledger-export-29424000   Complete   1/1           2m         8h
ledger-export-29424240   {status}   {done}           9m         4h
cache-warm-29424830      Complete   1/1           5s         4m
"""


def _cron(**spec: Any) -> str:
    lines = [
        "apiVersion: batch/v1",
        "kind: CronJob",
        "metadata:",
        "  name: ledger-export",
        "  namespace: reports",
        "  managedFields:",
        "  - manager: ops-console",
        "    operation: Update",
        '    time: "2026-11-30T09:12:00Z"',
        "    fieldsV1:",
        "      f:spec:",
        "        f:suspend: {}",
        "spec:",
        '  schedule: "0 */4 * * *"',
        f"  concurrencyPolicy: {spec.get('policy', 'Allow')}",
        f"  suspend: {str(spec.get('suspend', False)).lower()}",
        "status:",
        '  lastSuccessfulTime: "2026-11-30T04:03:00Z"',
    ]
    if spec.get("active"):
        lines += ["  active:", f"  - name: {spec['active']}"]
    return "\n".join(lines) + "\n"


def _run(*outs: ToolOutput) -> list[Finding]:
    state = AnalysisState(AlertContext())
    found: list[Finding] = []
    for out in outs:
        found += analyze(out, state)
    return [f for f in found if f.kind in _KINDS]


def _listing(kind: str, text: str) -> ToolOutput:
    return ToolOutput("kubectl_get_by_kind_in_namespace", {"kind": kind, **_NS}, text)


def _yaml(text: str) -> ToolOutput:
    return ToolOutput("kubectl_get_yaml", {"kind": "cronjob", "name": "ledger-export", **_NS}, text)


def test_a_suspended_cronjob_is_the_cause_and_its_failed_job_is_earlier():
    (finding,) = _run(
        _listing("cronjob", CRONJOBS.format(suspend="True ", active=0, last="2d4h")),
        _listing("job", JOBS.format(status="Failed  ", done="0/1")),
        _yaml(_cron(suspend=True)),
    )
    assert finding.kind == "cronjob_suspended" and finding.subject == "cronjob/reports/ledger-export"
    assert "suspend set by ops-console at 2026-11-30T09:12:00Z" in finding.summary
    assert "no run has been created since" in finding.summary
    assert "ledger-export-29424240 is an earlier failure" in finding.summary
    assert "cache-warm" not in finding.summary


def test_a_cronjob_whose_latest_job_fails():
    (finding,) = _run(
        _listing("cronjob", CRONJOBS.format(suspend="False", active=0, last="4h")),
        _listing("job", JOBS.format(status="Failed  ", done="0/1")),
        _yaml(_cron()),
    )
    assert finding.kind == "cronjob_runs_fail"
    assert "its latest Job ledger-export-29424240 failed" in finding.summary


def test_forbid_with_an_active_job_skips_every_run():
    (finding,) = _run(
        _listing("cronjob", CRONJOBS.format(suspend="False", active=1, last="1d2h")),
        _listing("job", JOBS.format(status="Running ", done="0/1")),
        _yaml(_cron(policy="Forbid", active="ledger-export-29424240")),
    )
    assert finding.kind == "cronjob_blocked_by_active_job"
    assert "concurrencyPolicy Forbid and its Job ledger-export-29424240 is still active" in finding.summary


def test_a_late_cronjob_without_a_manifest_is_reported_after_waiting():
    outs = [_listing("cronjob", CRONJOBS.format(suspend="False", active=0, last="2d"))]
    outs += [ToolOutput("fetch_pod_logs", {"pod_name": f"p{i}", **_NS}, "INFO ok\n") for i in range(6)]
    (finding,) = _run(*outs)
    assert finding.kind == "cronjob_not_scheduled"
    assert "last scheduled a Job 48h ago" in finding.summary and "every 4h" in finding.summary


def test_healthy_cronjobs_give_nothing():
    assert (
        _run(
            _listing("cronjob", CRONJOBS.format(suspend="False", active=0, last="3h")),
            _listing("job", JOBS.format(status="Complete", done="1/1")),
            _yaml(_cron()),
        )
        == []
    )


def test_schedule_periods():
    assert schedule_period("0 */4 * * *") == 4 * 3600
    assert schedule_period("15 3 * * 0") == 7 * 86400
    assert schedule_period("*/10 * * * *") == 600
    assert schedule_period("@daily") == 86400
    assert schedule_period("0 1 1 * *") == 31 * 86400
    assert schedule_period("not a schedule") is None
    assert schedule_period("$(rm -rf) * * * *") is None


def _reads(alert: AlertContext) -> list[dict[str, Any]]:
    tools = [
        tool_spec("kubectl_get_by_kind_in_namespace", "kind", "namespace"),
        tool_spec("kubectl_get_yaml", "kind", "name"),
    ]
    return planned_reads(alert, tools, 30)


def test_a_namespace_alert_about_runs_lists_the_scheduled_work():
    alert = from_alertmanager(
        {
            "labels": {"alertname": "LedgerExportStale", "namespace": "reports", "severity": "warning"},
            "annotations": {"summary": "The ledger export job has not succeeded in 9 hours"},
        }
    )
    reads = _reads(alert)
    assert {"kind": "cronjob", **_NS} in reads and {"kind": "job", **_NS} in reads


def test_a_namespace_alert_about_something_else_lists_no_cronjobs():
    alert = from_alertmanager(
        {
            "labels": {"alertname": "NamespaceMemoryHigh", "namespace": "reports"},
            "annotations": {"summary": "Memory use in namespace reports is above 90%"},
        }
    )
    assert {"kind": "cronjob", **_NS} not in _reads(alert)


ALL_CRONJOBS = """NAMESPACE   NAME     SCHEDULE     TIMEZONE   SUSPEND   ACTIVE   LAST SCHEDULE   AGE
billing     backup   0 2 * * *    <none>     True      0        3d              90d
payroll     backup   0 2 * * *    <none>     False     0        20h             90d
"""
ALL_JOBS = """NAMESPACE   NAME              STATUS     COMPLETIONS   DURATION   AGE
payroll     backup-29420000   Failed     0/1           1m         20h
billing     backup-29416000   Complete   1/1           2m         3d
"""


def test_a_cluster_wide_listing_keeps_cronjobs_of_one_name_apart_by_namespace():
    cronjobs = ToolOutput("kubectl_get_by_kind_in_cluster", {"kind": "cronjob"}, ALL_CRONJOBS)
    jobs = ToolOutput("kubectl_get_by_kind_in_cluster", {"kind": "job"}, ALL_JOBS)
    found = _run(cronjobs, jobs, *[_listing("pod", "NAME READY STATUS\n")] * 8)
    by_subject = {f.subject: f for f in found}
    suspended = by_subject["cronjob/billing/backup"]
    assert suspended.kind == "cronjob_suspended"
    # payroll's failed Job is payroll's: not billing's earlier failure, and payroll's own latest run fails.
    assert "backup-29420000" not in suspended.summary
    assert by_subject["cronjob/payroll/backup"].kind == "cronjob_runs_fail"
