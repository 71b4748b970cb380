"""Scheduled work that did not run: a CronJob suspended, late, stuck behind an active Job, or whose Jobs fail.

An alert about work that did not happen ("backup too old", "job has not succeeded in 26h") names a
namespace, seldom the object. The CronJob controller creates one Job per schedule time unless the CronJob
is ``suspend: true`` (no Job at all until it is resumed), its ``concurrencyPolicy: Forbid`` finds the
previous Job still active (that run is skipped), or the schedule time was missed by more than
``startingDeadlineSeconds``. A Job that is created but fails (``Failed``, ``0/1``) is the other way no run
succeeds. Read from the listings (``kubectl get cronjobs``: SUSPEND, ACTIVE, LAST SCHEDULE; ``kubectl get
jobs``: STATUS, COMPLETIONS, AGE) and the CronJob's manifest (``spec.suspend``, who last set it in
``managedFields``, ``status.lastScheduleTime`` / ``lastSuccessfulTime``).
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import AnalysisState, Analyzer, ToolOutput, clip, register
from diagnostics.agent.evidence.analyzers.kubernetes.manifests import manifest_of
from diagnostics.agent.evidence.analyzers.tables import age_seconds
from diagnostics.agent.evidence.analyzers.waits import note_wait, start_wait, still_waiting
from diagnostics.agent.findings import Finding, ObjRef, Severity

_HOUR, _DAY = 3600, 86400
_MACROS = {"@hourly": _HOUR, "@daily": _DAY, "@midnight": _DAY, "@weekly": 7 * _DAY, "@monthly": 31 * _DAY}
_JOB_OF_CRONJOB = rx.compile(r"^(.+)-\d{6,}$")  # the controller names a Job <cronjob>-<scheduled minute>
_COLUMN = rx.compile(r"\S+(?: \S+)*")
_WAIT = 4  # reads with data a finding waits for the CronJob's manifest and the Jobs' listing


def schedule_period(schedule: str) -> int | None:
    """The longest interval, in seconds, between two times a cron schedule fires (an upper bound); None
    when the schedule cannot be read."""
    schedule = schedule.strip()
    if schedule in _MACROS:
        return _MACROS[schedule]
    fields = schedule.split()
    if len(fields) != 5 or not all(rx.fullmatch(r"[\d*/,\-A-Za-z?]+", f) for f in fields):
        return None
    minute, hour, dom, month, dow = fields
    if month != "*":
        return 366 * _DAY
    if dom not in ("*", "?"):
        return 31 * _DAY
    if dow not in ("*", "?"):
        return 7 * _DAY
    step = rx.fullmatch(r"\*/(\d+)", hour)
    if hour == "*":
        minute_step = rx.fullmatch(r"\*/(\d+)", minute)
        return 60 * int(minute_step.group(1)) if minute_step else (60 if minute == "*" else _HOUR)
    return _HOUR * int(step.group(1)) if step else _DAY


def _fixed_width(text: str, first: str) -> list[dict[str, str]]:
    """The rows of a kubectl table whose cells may hold blanks (a cron schedule), cut at the header's
    column starts."""
    lines = [line for line in text.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith(first):
            starts = [(m.start(), m.group(0)) for m in _COLUMN.finditer(line)]
            rows = []
            for row in lines[i + 1 :]:
                cells = {}
                for j, (start, name) in enumerate(starts):
                    end = starts[j + 1][0] if j + 1 < len(starts) else len(row)
                    cells[name] = row[start:end].strip()
                rows.append(cells)
            return rows
    return []


def _cronjob_of(job: str) -> str:
    match = _JOB_OF_CRONJOB.match(job)
    return match.group(1) if match else ""


@register
class ScheduledRunsAnalyzer(Analyzer):
    name = "scheduled_runs"

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        if not out.ok or out.no_data:
            return []
        facts = state.fact_dict("scheduled_runs")
        namespace = str(out.params.get("namespace") or "")
        crons: dict[str, dict[str, Any]] = facts.setdefault("cronjobs", {})
        jobs: dict[str, dict[str, Any]] = facts.setdefault("jobs", {})
        text = out.text
        head = text.lstrip()[:300]
        if facts.get("waiting"):
            note_wait(facts, out)
        if head.startswith("NAME") and "SCHEDULE" in head and "SUSPEND" in head:
            for row in _fixed_width(text, "NAME"):
                # Keyed by namespace and name: a cluster-wide listing may hold one name in two namespaces.
                where = row.get("NAMESPACE") or namespace
                cron = crons.setdefault(f"{where}/{row.get('NAME', '')}", {"namespace": where})
                cron["suspend"] = row.get("SUSPEND", "").lower() == "true"
                cron["period"] = schedule_period(row.get("SCHEDULE", ""))
                cron["schedule"] = row.get("SCHEDULE", "")
                cron["last"] = age_seconds(row.get("LAST SCHEDULE", ""))
                cron["active"] = row.get("ACTIVE", "0")
                if cron["suspend"] or self._late(cron):
                    self._wait(facts)
                    state.lead(
                        ObjRef("cronjob", row.get("NAME", ""), cron["namespace"]),
                        "a CronJob that does not run",
                        78,
                    )
            state.lead(ObjRef("job", "*", namespace), "the Jobs the CronJobs created", 70)
        elif head.startswith("NAME") and "COMPLETIONS" in head:
            facts["jobs_listed"] = True
            for row in _fixed_width(text, "NAME"):
                name = row.get("NAME", "")
                done, _, wanted = row.get("COMPLETIONS", "").partition("/")
                failed = row.get("STATUS", "").lower() == "failed" or (
                    row.get("STATUS", "") == "" and done == "0" and wanted not in ("", "0")
                )
                where = row.get("NAMESPACE") or namespace
                job = jobs[f"{where}/{name}"] = {
                    "failed": failed,
                    "age": age_seconds(row.get("AGE", "")),
                    "namespace": where,
                }
                status = row.get("STATUS", "").lower()
                if failed or status in ("running", "suspended"):
                    job["status"] = row.get("STATUS", "") or "Failed"
            if any(j["failed"] for j in jobs.values()):
                self._wait(facts)
                state.lead(ObjRef("pod", "*", namespace), "the pods of the failed Jobs", 60)
        elif (obj := manifest_of(text)) is not None and obj.get("kind") == "CronJob":
            self._manifest(obj, crons, namespace)
        return self._findings(facts)

    @staticmethod
    def _wait(facts: dict[str, Any]) -> None:
        if not facts.get("waiting"):
            facts["waiting"] = True
            start_wait(facts)

    @staticmethod
    def _late(cron: dict[str, Any]) -> bool:
        period, last = cron.get("period"), cron.get("last")
        return bool(period and last and last > 2 * period)

    @staticmethod
    def _manifest(obj: dict[str, Any], crons: dict[str, dict[str, Any]], namespace: str) -> None:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        assert isinstance(meta, dict) and isinstance(spec, dict) and isinstance(status, dict)
        where = str(meta.get("namespace") or namespace)
        cron = crons.setdefault(f"{where}/{meta.get('name') or ''}", {"namespace": where})
        cron["suspend"] = spec.get("suspend") is True
        cron["schedule"] = str(spec.get("schedule") or cron.get("schedule") or "")
        cron["period"] = schedule_period(cron["schedule"])
        cron["policy"] = str(spec.get("concurrencyPolicy") or "Allow")
        cron["last_success"] = str(status.get("lastSuccessfulTime") or "")
        cron["active_jobs"] = [
            str(a.get("name")) for a in status.get("active") or [] if isinstance(a, dict) and a.get("name")
        ]
        for entry in meta.get("managedFields") or []:
            fields = entry.get("fieldsV1") if isinstance(entry, dict) else None
            spec_fields = fields.get("f:spec") if isinstance(fields, dict) else None
            if isinstance(spec_fields, dict) and "f:suspend" in spec_fields:
                cron["suspended_by"] = f"{entry.get('manager') or 'a client'} at {entry.get('time') or '?'}"

    def _findings(self, facts: dict[str, Any]) -> list[Finding]:
        reported: set[str] = facts.setdefault("reported", set())
        findings = []
        for ref, cron in facts["cronjobs"].items():
            where, _, name = ref.rpartition("/")
            if not name:
                continue
            own = sorted(  # its Jobs: named after it, in its namespace
                (j.get("age") or 0, job.rpartition("/")[2])
                for job, j in facts["jobs"].items()
                if _cronjob_of(job.rpartition("/")[2]) == name and job.rpartition("/")[0] == where
            )
            failed = [job for _, job in own if facts["jobs"][f"{where}/{job}"]["failed"]]
            stuck = [job for job in cron.get("active_jobs", []) if cron.get("policy") == "Forbid"]
            state = (
                cron.get("suspend"),
                cron.get("suspended_by"),
                tuple(failed),
                tuple(stuck),
                self._late(cron),
            )
            key = f"{where}/{name} {state}"
            complete = "policy" in cron and facts.get("jobs_listed")
            if key in reported or not (complete or not still_waiting(facts, _WAIT)):
                continue
            finding = self._finding(name, cron, failed, stuck, [job for _, job in own])
            if finding is not None:
                reported.add(key)
                findings.append(finding)
        return findings

    def _finding(
        self, name: str, cron: dict[str, Any], failed: list[str], stuck: list[str], own: list[str]
    ) -> Finding | None:
        ns = cron.get("namespace") or ""
        subject = f"cronjob/{ns}/{name}" if ns else f"cronjob/{name}"
        success = (
            f"; its last successful run was at {cron['last_success']}" if cron.get("last_success") else ""
        )
        latest = own[0] if own else ""
        if cron.get("suspend"):
            by = f" (suspend set by {cron['suspended_by']})" if cron.get("suspended_by") else ""
            earlier = (
                f"; the failure of its Job {', '.join(failed)} is an earlier failure, before the suspension, "
                "not why the runs stopped"
                if failed
                else ""
            )
            return Finding(
                "cronjob_suspended",
                f"CronJob {name} is suspended{by}: its schedule ({cron.get('schedule') or '?'}) creates "
                f"no Job while suspend is true, so no run has been created since{success}{earlier}.",
                Severity.CRITICAL,
                subject,
                clip(f"{name}: suspend true"),
                90,
                f'Resume it (kubectl patch cronjob {name} -p \'{{"spec":{{"suspend":false}}}}\') once '
                "the earlier failure is understood, or run one Job now from it (kubectl create job --from).",
            )
        if stuck:
            return Finding(
                "cronjob_blocked_by_active_job",
                f"CronJob {name} has concurrencyPolicy Forbid and its Job {', '.join(stuck)} is still "
                f"active: every later schedule time is skipped until it ends{success}.",
                Severity.CRITICAL,
                subject,
                clip(f"{name}: Forbid, active {', '.join(stuck)}"),
                88,
                f"Find why {stuck[0]} does not finish (its pod's log); delete it, or set "
                "activeDeadlineSeconds.",
            )
        if failed and latest in failed:
            return Finding(
                "cronjob_runs_fail",
                f"CronJob {name} runs on schedule but its latest Job {latest} failed"
                + (f" ({len(failed)} failed Jobs)" if len(failed) > 1 else "")
                + f"{success}: the Job's pod log says why the run fails.",
                Severity.CRITICAL,
                subject,
                clip(f"{latest}: Failed"),
                84,
                f"Read the log of {latest}'s pod and fix the failure it names; the next schedule retries.",
            )
        if self._late(cron):
            hours, every = int(cron["last"]) // _HOUR, int(cron["period"]) // _HOUR or 1
            return Finding(
                "cronjob_not_scheduled",
                f"CronJob {name} last scheduled a Job {hours}h ago although its schedule "
                f"({cron.get('schedule')}) fires at least every {every}h: the schedule times are missed "
                "(startingDeadlineSeconds, a controller not running, or a skipped run).",
                Severity.CRITICAL,
                subject,
                clip(f"{name}: last schedule {hours}h ago"),
                82,
                "Check the CronJob's events and the kube-controller-manager; run one Job now from it.",
            )
        return None
