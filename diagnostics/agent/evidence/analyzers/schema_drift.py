"""Code and schema out of step: the database lacks a column or table the running code queries, because a
migration renamed or dropped it.

Databases name the object they do not have: PostgreSQL 'column "t.c" does not exist' / 'relation "t" does not
exist' (with a HINT naming a close column), MySQL "Unknown column 'c' in 'field list'" / "Table 'db.t'
doesn't exist", SQLite "no such column: c". Migrations run as Jobs (a Helm hook, an init step) and log the
DDL or the revision they apply (``ALTER TABLE t RENAME COLUMN c TO d``, "Running upgrade 0041 ->
0042_rename_c").
A schema migration moves forward only: rolling a Deployment back to an older image brings back code that
queries the old names, and does not revert the database, so the rollback heals nothing.

Read from the failing pod's log (the missing object), the namespace's pods and jobs (the migration's pod,
read for its log) and its ReplicaSets (which image the workload runs now, and whether a newer revision was
rolled back).
"""

from __future__ import annotations

from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    ToolOutput,
    clip,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.logs import log_subject
from diagnostics.agent.evidence.analyzers.once import OnceAnalyzer
from diagnostics.agent.findings import Finding, ObjRef, Severity
from diagnostics.agent.request.timewindow import iso, line_time

_MISSING = rx.compile(
    r"(?i)(?:column \"?([\w.]+)\"? does not exist|relation \"?([\w.]+)\"? does not exist|"
    r"unknown column '([\w.]+)'|table '([\w.]+)' doesn't exist|no such (?:column|table): ([\w.]+))"
)
_HINT = rx.compile(r"(?i)perhaps you meant to reference the column \"([\w.]+)\"")
_ERROR_CLASS = rx.compile(r"\b(UndefinedColumn|UndefinedTable|ProgrammingError|OperationalError)\b")
_DDL = rx.compile(r"(?i)\b(rename|drop|alter)\b")
_MIGRATION = rx.compile(r"(?i)migrat|alembic|flyway|liquibase|schema")


@register
class SchemaDriftAnalyzer(OnceAnalyzer):
    name = "schema_drift"

    def gather(self, out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        if out.is_log:
            self._missing(out, state, facts, namespace)
            self._migration(out, facts)
        else:
            self._objects(out, state, facts, namespace)

    def conclude(self, facts: dict[str, Any]) -> list[Finding]:
        if not facts.get("missing") or not facts.get("ddl"):
            return []
        return self._finding(facts)

    @staticmethod
    def _missing(out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        if facts.get("missing"):
            return
        lines = [ln for ln in out.text.splitlines() if _MISSING.search(ln)]
        if not lines:
            return
        match = _MISSING.search(lines[-1])
        name = next(g for g in match.groups() if g)
        hint = _HINT.search(out.text)
        kind = _ERROR_CLASS.search(out.text)
        _src, subject, _where = log_subject(out, state)
        facts.update(
            missing=name,
            bare=name.rsplit(".", 1)[-1].lower(),
            hint=hint.group(1) if hint else "",
            error=kind.group(1) if kind else "",
            line=lines[-1].strip(),
            count=len(lines),
            subject=subject,
            pod=str(out.params.get("pod_name") or ""),
            namespace=namespace,
        )
        if namespace:
            for kind_ in ("pod", "job", "replicaset"):
                state.lead(
                    ObjRef(kind_, "*", namespace), "the migrations and revisions behind the schema", 80
                )
        for pod in facts.get("migration_pods", []):
            state.lead(ObjRef("pod", pod, namespace), "a migration's log: what it changed", 82)

    @staticmethod
    def _migration(out: ToolOutput, facts: dict[str, Any]) -> None:
        bare = str(facts.get("bare") or "")
        pod = str(out.params.get("pod_name") or "")
        if facts.get("ddl"):
            return
        for line in out.text.splitlines():
            if _DDL.search(line) and (bare and bare in line.lower()) and _MIGRATION.search(f"{pod} {line}"):
                moment = line_time(line)
                facts["ddl"] = (pod, line.strip(), iso(moment) if moment else "")
                return

    @staticmethod
    def _objects(out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        table = parse_table(out.text)
        if table is None:
            return
        kind = str(out.params.get("kind") or "").lower()
        names = [r[0] for r in table.rows if r]
        if kind in ("job", "jobs"):
            facts.setdefault("jobs", set()).update(names)
        if "IMAGES" in table.header and "AGE" in table.header:
            facts["revisions"] = [
                (r[0], table.column(r, "IMAGES"), table.column(r, "AGE"), table.column(r, "DESIRED"))
                for r in table.rows
                if r
            ]
        if "STATUS" in table.header:
            migrations = [n for n in names if _MIGRATION.search(n)]
            facts["migration_pods"] = migrations
            if facts.get("missing"):
                for pod in migrations:
                    state.lead(ObjRef("pod", pod, namespace), "a migration's log: what it changed", 82)

    @staticmethod
    def _finding(facts: dict[str, Any]) -> list[Finding]:
        pod, ddl, when = facts["ddl"]
        job = next((j for j in sorted(facts.get("jobs") or ()) if pod.startswith(j)), pod)
        owner = f"migration Job {job}" if job != pod else f"migration pod {pod}"
        rollback = _rollback(facts.get("revisions") or [], str(facts.get("pod") or ""))
        hint = f" (the database has {facts['hint']} instead)" if facts["hint"] else ""
        error = f"{facts['error']}: " if facts["error"] else ""
        missing = f"the code's queries fail with {error}{facts['missing']} does not exist{hint}"
        if rollback:
            current, newer = rollback
            lead = (
                f"The rollback to {_tag(current[1])} (ReplicaSet {current[0]}) did not heal it: the "
                f"database schema moved forward with {_tag(newer[1])} (ReplicaSet {newer[0]}): its "
                f"{owner} ran '{clip(ddl, 160)}'{f' at {when}' if when else ''}, and rolling the "
                "Deployment back does not revert the database migration, so the "
                f"{_tag(current[1])} code's queries still use the old name: {missing}"
            )
        else:
            lead = (
                f"The database schema and the running code disagree: {owner} ran '{clip(ddl, 160)}'"
                f"{f' at {when}' if when else ''}, and {missing}"
            )
        summary = f"{lead} ({facts['count']} lines; '{clip(str(facts['line']), 160)}')."
        return [
            Finding(
                "schema_migrated_under_code",
                clip(summary, 900),
                Severity.CRITICAL,
                str(facts["subject"]),
                clip(str(facts["line"])),
                92,
                "Roll forward to code that uses the migrated schema, or revert the migration (a down "
                "migration or a compatible view/column) before running the older code.",
            )
        ]


def _tag(images: str) -> str:
    """The version an image reference carries ("reg/app:3.8.2" -> "3.8.2"), else the reference."""
    first = images.split(",")[0]
    return first.rsplit(":", 1)[-1] if ":" in first.rsplit("/", 1)[-1] else first


def _age_seconds(age: str) -> float:
    total = 0.0
    for number, unit in rx.findall(r"(\d+)([smhdy])", age):
        total += int(number) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 31536000}[unit]
    return total


def _rollback(
    revisions: list[tuple[str, str, str, str]], pod: str
) -> tuple[tuple[str, str, str, str], tuple[str, str, str, str]] | None:
    """(the revision the pod runs, a newer one scaled to 0) when the workload runs an older ReplicaSet than
    one created after it: a rollback."""
    current = next((r for r in revisions if pod.startswith(r[0] + "-")), None)
    if current is None:
        return None
    prefix = current[0].rsplit("-", 1)[0]
    newer = [
        r
        for r in revisions
        if r[0] != current[0]
        and r[0].rsplit("-", 1)[0] == prefix
        and _age_seconds(r[2]) < _age_seconds(current[2])
        and r[3] in ("0", "")
    ]
    return (current, min(newer, key=lambda r: _age_seconds(r[2]))) if newer else None
