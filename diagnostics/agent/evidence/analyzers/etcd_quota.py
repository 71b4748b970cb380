"""etcd out of space: its database file reached the backend quota, the NOSPACE alarm refuses writes.

etcd caps its database file at ``--quota-backend-bytes`` (2 GiB by default, 8 GiB the usual maximum). When
the file reaches it, etcd raises the ``NOSPACE`` alarm ("alarm raised" ``"alarm":"NOSPACE"``, older
"alarm raised NOSPACE") and answers every write "mvcc: database space exceeded" until the alarm is
disarmed: the API server passes it on ("etcdserver: mvcc: database space exceeded"), so every create,
update and apply fails (Argo CD syncs, kubectl apply, controllers' status updates) while reads still work.
Compaction frees pages inside the file but does not shrink it; only a defragmentation does. A file at the
quota with little of it in use (``etcd_mvcc_db_total_size_in_use_in_bytes``, the compaction log's
``current-db-size-in-use``) was not defragmented: defragment each member, then ``etcdctl alarm disarm``.

Read from Prometheus (the file's size, the bytes in use, the quota), etcd's log (the alarm, the quota,
compactions' sizes) and the clients' logs (the refused writes). Current while writes are refused or the
alarm stands; an "alarm disarmed" after it makes it history.
"""

from __future__ import annotations

import json
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    Analyzer,
    ToolOutput,
    clip,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.server_states import samples_of
from diagnostics.agent.evidence.analyzers.waits import note_wait, still_waiting, waited
from diagnostics.agent.findings import Finding, ObjRef, Severity
from diagnostics.agent.request.timewindow import iso, line_time

_EXCEEDED = rx.compile(r"database space exceeded|mvcc: ?database space|etcdserver: no space", rx.IGNORECASE)
_ALARM = rx.compile(
    r"alarm raised\W*(?:NOSPACE|[^\n]{0,80}\W\"?alarm\"?\W+\"?NOSPACE)|alarm:NOSPACE", rx.IGNORECASE
)
_DISARMED = rx.compile(r"alarm (?:disarmed|cleared|deactivated)", rx.IGNORECASE)
_METRICS = ("etcd_mvcc_db_total_size", "etcd_debugging_mvcc_db_total_size", "etcd_server_quota_backend_bytes")
# Reads the finding waits for the sizes and a refused client once the alarm is known.
_WAIT = 3
_FIELDS = {
    "quota-size-bytes": "quota",
    "current-db-size-bytes": "size",
    "current-db-size-in-use-bytes": "in_use",
}


def _gb(value: float) -> str:
    return f"{value / 1e9:.1f} GB"


def _json_fields(line: str) -> dict[str, Any]:
    start = line.find("{")
    if start < 0:
        return {}
    try:
        data = json.loads(line[start:])
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


@register
class EtcdQuotaAnalyzer(Analyzer):
    name = "etcd_nospace"

    def applies(self, out: ToolOutput) -> bool:
        return True  # every read: the finding waits a few reads for the sizes and a refused client

    def analyze(self, out: ToolOutput, state: AnalysisState) -> list[Finding]:
        facts = state.fact_dict("etcd_nospace")
        if not ("etcd" in out.text or "space exceeded" in out.text or "NOSPACE" in out.text):
            return self._finding(facts) if waited(facts) else []
        for sample in samples_of(out, _METRICS):
            name = sample.name.replace("etcd_debugging_", "etcd_")
            key = {
                "etcd_mvcc_db_total_size_in_bytes": "size",
                "etcd_mvcc_db_total_size_in_use_in_bytes": "in_use",
                "etcd_server_quota_backend_bytes": "quota",
            }.get(name)
            if key:
                facts[key] = max(float(facts.get(key) or 0), sample.value)
        for line in out.text.splitlines():
            self._read_line(line, out, facts)
        self._lead(out, state, facts)
        return self._finding(facts)

    @staticmethod
    def _read_line(line: str, out: ToolOutput, facts: dict[str, Any]) -> None:
        if "etcd" in line or "db-size" in line or "quota" in line:
            fields = _json_fields(line) if "{" in line else {}
            for field, key in _FIELDS.items():
                if isinstance(fields.get(field), int | float):
                    value = float(fields[field])
                    facts[key] = value if key == "in_use" else max(float(facts.get(key) or 0), value)
        if _ALARM.search(line):
            facts.update(alarm=True, alarm_line=line, disarmed=False)
        elif _DISARMED.search(line) and facts.get("alarm"):
            facts["disarmed"] = True
        if _EXCEEDED.search(line):
            who = str(out.params.get("pod_name") or out.params.get("name") or "")
            refused = facts.setdefault("refused", {})
            if who and "etcd-" not in who[:5]:
                refused[who] = line
            facts["exceeded_line"] = line

    @staticmethod
    def _lead(out: ToolOutput, state: AnalysisState, facts: dict[str, Any]) -> None:
        """Once etcd looks full: the control plane's pods, then etcd's and the API server's logs."""
        full = (
            facts.get("alarm")
            or facts.get("exceeded_line")
            or (facts.get("quota") and float(facts.get("size") or 0) >= 0.95 * float(facts["quota"]))
        )
        if not full:
            return
        state.lead(ObjRef("pod", "*", "kube-system"), "the control plane's pods (etcd is full)", 78)
        table = parse_table(out.text) if "NAME" in out.text else None
        led = facts.setdefault("led", [])
        for row in table.rows if table else []:
            # One pod of each is enough: every member shares the quota, every API server the refusals.
            prefix = next((p for p in ("etcd-", "kube-apiserver-") if row and row[0].startswith(p)), "")
            if prefix and prefix not in led:
                led.append(prefix)
                state.lead(ObjRef("pod", row[0], "kube-system"), "etcd's alarm and the refused writes", 79)

    @staticmethod
    def _finding(facts: dict[str, Any]) -> list[Finding]:
        quota, size, in_use = (float(facts.get(k) or 0) for k in ("quota", "size", "in_use"))
        at_quota = bool(quota and size >= 0.95 * quota)
        if not (facts.get("alarm") or (at_quota and facts.get("exceeded_line"))):
            return []
        # Stated once (again only when the alarm is disarmed after): when the sizes and a refused client
        # are known, or after _WAIT more reads.
        if facts.get("told") is not None and facts["told"] == bool(facts.get("disarmed")):
            return []
        complete = bool(quota and size and in_use and facts.get("refused"))
        note_wait(facts)
        if facts.get("told") is None and not complete and still_waiting(facts, _WAIT):
            return []
        facts["told"] = bool(facts.get("disarmed"))
        parts = (bool(facts.get("alarm")), quota, in_use, bool(facts.get("refused")))
        alarm = "etcd has raised its NOSPACE alarm" if facts.get("alarm") else "etcd is out of space"
        reached = (
            f": its database file reached its backend quota of {quota:.0f} bytes ({_gb(quota)})"
            if quota and (at_quota or facts.get("alarm"))
            else ""
        )
        refused = sorted(facts.get("refused") or {})
        writers = f" (seen refused in the logs of {', '.join(refused[:4])})" if refused else ""
        summary = (
            f"{alarm}{reached}, so the API server refuses every write with database space exceeded{writers}: "
            "applies and syncs fail while reads still work."
        )
        if in_use and size and in_use < 0.6 * size:
            summary += (
                f" Only about {_gb(in_use)} of the etcd database is in use after compaction ({in_use:.0f} of "
                f"{size:.0f} bytes): the file was never defragmented since it grew (compaction frees pages "
                "inside the file; only a defrag returns them)."
            )
        over = bool(facts.get("disarmed"))
        line = str(facts.get("alarm_line") or facts.get("exceeded_line") or "")
        # When it was last seen true: the latest time of the lines it rests on (unknown: the read's time).
        times = [
            line_time(str(ln))
            for ln in (line, facts.get("exceeded_line"), *(facts.get("refused") or {}).values())
        ]
        seen = max((t for t in times if t is not None), default=None)
        return [
            Finding(
                "etcd_nospace",
                summary + (" The alarm was disarmed since: over." if over else ""),
                Severity.INFO if over else Severity.CRITICAL,
                "etcd",
                clip(line),
                30 if over else 88 + sum(1 for part in parts if part),
                "Defragment each etcd member (etcdctl defrag, one member at a time), then clear the alarm "
                "(etcdctl alarm disarm); find what grows the keyspace (events, many Jobs) and keep "
                "compaction plus periodic defragmentation going.",
                history=over,
                at=iso(seen) if seen else "",
            )
        ]
