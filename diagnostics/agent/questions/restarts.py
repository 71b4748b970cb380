"""The answer to "how many times did X restart": the restart counts of X's pods (their describe's
``Restart Count``, else the listing's RESTARTS column), summed, with one row per pod."""

from __future__ import annotations

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.evidence.analyzers.base import normalize
from diagnostics.agent.evidence.inventory import Resolution
from diagnostics.agent.questions.answers import LOW, NUMBER, Answer
from diagnostics.agent.questions.reads import has_data, leading_number, resolved_pods
from diagnostics.agent.request.intent import Intent

_RESTART_COUNT = rx.compile(r"^\s*Restart Count:\s*(\d+)", rx.MULTILINE)


def restarts_answer(intent: Intent, state: AnalysisState, known: list[Resolution]) -> Answer:
    pods = resolved_pods(known, state)
    rows: list[list[str]] = []
    unknown: list[str] = []
    total = 0
    for pod in pods:
        counts = [
            int(n)
            for out in state.outputs
            if "describe" in out.tool.lower() and out.params.get("name") == pod.name and has_data(out)
            for n in _RESTART_COUNT.findall(normalize(out.text))
        ]
        if not counts and not rx.match(r"\d", pod.restarts or ""):
            unknown.append(pod.name)  # neither a describe nor a listing gave its count: never a 0
            continue
        restarts = sum(counts) if counts else leading_number(pod.restarts)
        total += restarts
        rows.append([pod.name, pod.namespace, pod.status, str(restarts)])
    scope = ", ".join(r.name for r in known) or "the pods asked about"
    if not pods:
        return Answer(
            intent=intent.kind,
            shape=NUMBER,
            headline=f"No data: I found no pod of {scope}, so I cannot count its restarts.",
            no_data=True,
            confidence=LOW,
            counted=f"restarts of {scope}",
        )
    if not rows:
        return Answer(
            intent=intent.kind,
            shape=NUMBER,
            headline=f"No data: no describe or listing of {', '.join(unknown)} gave a restart count, so I "
            "cannot say how often it restarted (this is not the same as never).",
            no_data=True,
            confidence=LOW,
            counted=f"restarts of {scope}",
        )
    notes = [f"no restart count could be read for {', '.join(unknown)}."] if unknown else []
    return Answer(
        intent=intent.kind,
        shape=NUMBER,
        notes=notes,
        headline=f"{scope} restarted {total} times in all ({len(pods)} pods: "
        + ", ".join(f"{r[0]} {r[3]} restarts, {r[2]}" for r in rows)
        + ").",
        value=total,
        counted=f"container restarts of {scope}",
        columns=["POD", "NAMESPACE", "STATUS", "RESTARTS"],
        rows=rows,
    )
