"""The ``timeline`` answer: the moments the reads hold (describe times, log lines, first and last errors),
in order, with the first sign of trouble; events that carry only their age are listed after them."""

from __future__ import annotations

from datetime import datetime
from email.utils import parsedate_to_datetime

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.evidence.analyzers.base import normalize, parse_events
from diagnostics.agent.evidence.inventory import Resolution
from diagnostics.agent.evidence.logtemplates import error_events, group_errors
from diagnostics.agent.questions.answers import LOW, TIMELINE, Answer
from diagnostics.agent.questions.reads import has_data, in_window, log_lines, scope_phrase
from diagnostics.agent.request.intent import Intent
from diagnostics.agent.request.timewindow import line_time

_DESCRIBE_TIMES = rx.compile(
    r"^\s*(Start Time|Started|Finished|Completed At|Creation Timestamp|CreationTimestamp|Last Schedule Time|"
    r"Started At|Last Transition Time):\s+(.+)$",
    rx.MULTILINE,
)
_STATE = rx.compile(r"^\s*(State|Last State):\s+(\w+)", rx.MULTILINE)
# A describe's Conditions row with its times (a Node's): type, status, last heartbeat, last transition.
_RFC1123 = r"\w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} [+-]\d{4}"
_CONDITION = rx.compile(
    rf"^\s+(\w+)\s+(True|False|Unknown)\s+{_RFC1123}\s+({_RFC1123})\s+(\w+)\s+(.*)$", rx.MULTILINE
)


def _transitions(text: str, source: str) -> list[tuple[datetime, str, str]]:
    """When each condition took its status (``LastTransitionTime``): Ready not True is "NotReady since"."""
    moments = []
    for kind, status, when, reason, message in _CONDITION.findall(text):
        moment = _parse_time(when)
        if moment is None:
            continue
        if kind == "Ready" and status != "True":
            what = f"NotReady since {moment.isoformat()} (Ready {status}: {reason}: {message.strip()[:160]})"
        else:
            what = f"{kind} became {status} ({reason}: {message.strip()[:160]})"
        moments.append((moment, source, what))
    return moments


def _parse_time(text: str) -> datetime | None:
    try:
        return parsedate_to_datetime(text.strip())
    except (TypeError, ValueError):
        return line_time(text)


def timeline_answer(intent: Intent, state: AnalysisState, known: list[Resolution], namespace: str) -> Answer:
    moments: list[tuple[datetime, str, str]] = []
    relative: list[dict[str, str]] = []
    for out in state.outputs:
        if not has_data(out) or out.tool == "alert":
            continue
        source = str(
            out.params.get("name")
            or out.params.get("pod_name")
            or out.params.get("resource_name")
            or out.tool
        )
        if out.is_log:
            lines = [ln for ln in log_lines(out.text) if in_window(ln, intent)]
            stamped: list[tuple[datetime, str]] = []
            for ln in lines:
                moment = line_time(ln)
                if moment is not None:
                    stamped.append((moment, ln))
            if stamped:
                moments.append((stamped[0][0], source, f"first log line: {stamped[0][1].strip()[:200]}"))
                moments.append((stamped[-1][0], source, f"last log line: {stamped[-1][1].strip()[:200]}"))
            for group in group_errors(error_events("\n".join(lines), intent.window), source=source)[:5]:
                if group.first_seen:
                    moments.append(
                        (
                            group.first_seen,
                            source,
                            f"first {group.category} ({group.count}x): {group.example[:200]}",
                        )
                    )
                if group.last_seen and group.last_seen != group.first_seen:
                    moments.append(
                        (group.last_seen, source, f"last {group.category}: {group.template[:160]}")
                    )
            continue
        state_word = ""
        text = normalize(out.text)
        moments += _transitions(text, source)
        for label, value in _DESCRIBE_TIMES.findall(text):
            moment = _parse_time(value)
            if moment is not None:
                before = text[: text.find(value)]
                states = _STATE.findall(before)
                state_word = (
                    f" ({states[-1][0]}: {states[-1][1]})"
                    if states and label in ("Started", "Finished")
                    else ""
                )
                moments.append((moment, source, f"{label}{state_word}"))
        for event in parse_events(text):
            relative.append(
                {"time": "", "source": source, "what": f"{event.type} {event.reason}: {event.message[:200]}"}
            )
    moments = sorted(set(moments), key=lambda m: (m[0], "NotReady since" not in m[2]))
    if intent.window is not None:
        moments = [m for m in moments if intent.window.contains(m[0])]
    events = [{"time": t.isoformat(), "source": s, "what": w} for t, s, w in moments] + relative
    scope = scope_phrase(intent, known, namespace) or "what was asked about"
    if not events:
        return Answer(
            intent=intent.kind,
            shape=TIMELINE,
            headline=f"No data: no read about {scope} returned a time or an event, so I cannot say when.",
            no_data=True,
            confidence=LOW,
        )
    problem = next(
        (
            m
            for m in moments
            if rx.search(
                r"error|fail|timeout|terminated|exception|refused|panic|deadline|sigterm|sigkill|killed|stopp|oom|evict|backoff|unhealthy|notready",
                m[2],
                rx.I,
            )
        ),
        None,
    )
    if problem is not None:
        headline = (
            f"The first sign of trouble for {scope}: {problem[0].isoformat()} ({problem[1]}: {problem[2]})."
        )
    elif moments:
        first, last = moments[0], moments[-1]
        headline = (
            f"{scope}: earliest recorded moment {first[0].isoformat()} ({first[2]}); "
            f"latest {last[0].isoformat()}."
        )
    else:
        headline = f"{scope}: the events below carry only their age, not a time."
    return Answer(intent=intent.kind, shape=TIMELINE, headline=headline, events=events)
