"""A lock held by a holder that is gone: a start that waits on a lock nobody will release.

Schema-migration tools and leader elections take a lock in a shared store before they work: Liquibase's
``DATABASECHANGELOGLOCK`` row ("Waiting for changelog lock....", then "Could not acquire change log lock.
Currently locked by <host> (<ip>) since <time>"), Flyway's and Django's advisory locks, Terraform's state
lock ("Lock Info: ... Who: ..."). The holder releases it when it finishes; a holder killed while it held the
lock (a drained node, an OOM kill, a deleted pod) never does, and every later start waits for it, times out
and fails, forever, until someone releases it by hand.

Read from the waiting pod's log (the refusal naming the holder and since when), and from the pod listings
and events of its namespace: a holder that is a pod no listing shows any more, or that an event shows
stopped, is gone.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import (
    AnalysisState,
    ToolOutput,
    clip,
    parse_events,
    parse_table,
    register,
)
from diagnostics.agent.evidence.analyzers.logs import log_subject
from diagnostics.agent.evidence.analyzers.once import OnceAnalyzer, wait_for_more
from diagnostics.agent.findings import Finding, ObjRef, Severity
from diagnostics.agent.request.timewindow import line_time

# "could not acquire change log lock. Currently locked by H (ip) since T", "lock held by H since T", ...
_REFUSED = rx.compile(
    r"(?i)(?:could not|couldn't|unable to|cannot|failed to) (?:acquire|obtain|get|take) (?:the )?"
    r"([\w ]{0,40}?lock)\b[^\n]*?(?:locked|held|owned|taken) by:? ['\"]?([\w.\-]+)['\"]?"
    r"(?: \(([^)\n]{1,60})\))?(?: since ([^\n]{4,40}))?"
)
_WAITING = rx.compile(r"(?i)waiting for (?:the )?([\w ]{0,40}?lock)")
_TOOLS = (
    ("liquibase", "Liquibase"),
    ("flyway", "Flyway"),
    ("terraform", "Terraform"),
    ("alembic", "Alembic"),
)
_GONE_REASONS = ("Killing", "Evicted", "Preempting", "Deleted", "NodeNotReady", "TaintManagerEviction")


@register
class LockHolderAnalyzer(OnceAnalyzer):
    name = "lock_holders"

    def gather(self, out: ToolOutput, state: AnalysisState, facts: dict[str, Any], namespace: str) -> None:
        if not out.is_log:
            self._note_objects(out, facts, namespace)
        elif (match := _REFUSED.search(out.text)) is not None and "holder" not in facts:
            line = next(ln for ln in out.text.splitlines() if _REFUSED.search(ln))
            _src, subject, where = log_subject(out, state)
            tool = next((label for word, label in _TOOLS if word in out.text.lower()), "")
            facts.update(
                holder=match.group(2),
                address=(match.group(3) or "").strip(),
                since=(match.group(4) or "").strip().rstrip("."),
                lock=" ".join(match.group(1).split()),
                tool=tool,
                subject=subject,
                where=where,
                namespace=namespace,
                line=line,
                waited=_waited(out.text),
                pod=str(out.params.get("pod_name") or ""),
            )
            if namespace:
                state.lead(ObjRef("pod", "*", namespace), "whether the lock's holder still runs", 82)
                state.lead(ObjRef("event", "*", namespace), "what stopped the lock's holder", 82)

    def conclude(self, facts: dict[str, Any]) -> list[Finding]:
        return self._finding(facts) if "holder" in facts else []

    @staticmethod
    def _note_objects(out: ToolOutput, facts: dict, namespace: str) -> None:
        table = parse_table(out.text)
        if table is not None and "STATUS" in table.header and "READY" in table.header:
            facts.setdefault("listed", {}).setdefault(namespace, set()).update(r[0] for r in table.rows if r)
        events = parse_events(out.text)
        if any(event.obj for event in events):  # a listing of the namespace's events (not one object's)
            facts.setdefault("events_read", set()).add(namespace)
        for event in events:
            if event.reason in _GONE_REASONS and event.obj:
                facts.setdefault("stopped", {})[event.obj.rsplit("/", 1)[-1]] = (event.reason, event.age)

    @staticmethod
    def _finding(facts: dict) -> list[Finding]:
        holder, namespace = str(facts["holder"]), str(facts["namespace"])
        listed = (facts.get("listed") or {}).get(namespace)
        stopped = (facts.get("stopped") or {}).get(holder)
        events_read = namespace in (facts.get("events_read") or set())
        if stopped is None and not (listed is not None and events_read) and wait_for_more(facts, 8):
            return []  # more reads: the namespace's pods and events say
        tool = f"{facts['tool']} " if facts["tool"] else ""
        since = f" since {facts['since']}" if facts["since"] else ""
        address = f" ({facts['address']})" if facts["address"] else ""
        gone = ""
        if stopped is not None:
            reason, age = stopped
            gone = (
                f"; {holder} is gone: it was stopped ({reason}{f', {age} ago' if age else ''}) while it held "
                "the lock, during its migration, so the lock was never released"
            )
        elif listed is not None and holder not in listed and any(_sibling(holder, p) for p in listed):
            gone = f"; {holder} no longer runs (no pod of that name), so the lock it held was never released"
        who = f"Pod {facts['pod']}" if facts["pod"] else "The workload"
        waited = f" Each start waits {facts['waited']} for it, fails and restarts;" if facts["waited"] else ""
        summary = (
            f"{who} cannot start: {tool}cannot acquire the {facts['lock']}, held{since} by "
            f"{holder}{address}{gone}.{waited} '{clip(str(facts['line']), 220)}'"
        )
        return [
            Finding(
                "lock_held_by_gone_holder" if gone else "lock_held",
                clip(summary, 900),
                Severity.CRITICAL,
                str(facts["subject"]),
                clip(str(facts["line"])),
                93 if gone else 86,
                f"Release the {facts['lock']} its gone holder {holder} left (for Liquibase: `releaseLocks`, "
                "or set LOCKED to false in DATABASECHANGELOGLOCK), then restart the waiting pods.",
            )
        ]


def _waited(text: str) -> str:
    """How long the log waited for the lock before it gave up ("5 minutes"), from its timed lines."""
    first: datetime | None = None
    last: datetime | None = None
    for line in text.splitlines():
        moment = line_time(line)
        if moment is None:
            continue
        if first is None and _WAITING.search(line):
            first = moment
        if first is not None and _REFUSED.search(line):
            last = moment
            break
    if first is None or last is None or last <= first:
        return ""
    minutes = round((last - first).total_seconds() / 60)
    return f"{minutes} minutes" if minutes >= 2 else f"{int((last - first).total_seconds())} seconds"


def _sibling(holder: str, pod: str) -> bool:
    """Whether ``pod`` is of the same workload as ``holder`` (their names differ only in the last part)."""
    return holder.rsplit("-", 1)[0] in pod
