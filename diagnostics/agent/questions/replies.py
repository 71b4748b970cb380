"""The reply of one diagnosis: the answer shape of its intent, honest about empty reads.

- ``answer_for``: a question's answer shape (``question_answers``), an explanation of a referenced
  finding, or, for a root-cause investigation, the diagnosis as an answer; any of them built on reads
  that were all empty says so, has low confidence and is never "healthy".
- ``no_data_finding``: an empty read is its own kind of finding (``no_data``), never a clean bill.
"""

from __future__ import annotations

import json
from typing import Any

from diagnostics.agent.evidence.analyzers import AnalysisState
from diagnostics.agent.findings import Finding, Severity
from diagnostics.agent.questions.answers import DIAGNOSIS, EXPLANATION, LOW, Answer, confidence_of
from diagnostics.agent.questions.asked import asked_details
from diagnostics.agent.questions.compose import build_question_answer
from diagnostics.agent.questions.metric_answers import log_status_answer, metric_answer, metric_lines
from diagnostics.agent.questions.objects import object_verdict
from diagnostics.agent.questions.planner import finding_document, question_namespace, resolutions
from diagnostics.agent.request.intent import COUNT, EXPLAIN, LIST, STATUS

NO_DATA = "no_data"


def no_data_finding(tool: str, params: dict[str, Any], output: str) -> Finding:
    shown = ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
    return Finding(
        kind=NO_DATA,
        summary=f"No data from {tool}({shown})",
        severity=Severity.INFO,
        subject=str(params.get("name") or params.get("pod_name") or params.get("resource_name") or ""),
        evidence=" ".join(output.split())[:200],
        rank=0,
    )


def answer_for(
    state: AnalysisState, findings: list[Finding], *, diagnosis: str, root_cause: str, reads: list[bool]
) -> Answer:
    """The answer shape of the diagnosis's intent. ``reads``: for each tool call, whether it returned data."""
    intent = state.intent
    empty = sum(1 for got in reads if not got)
    kind = intent.kind if intent is not None else STATUS
    if intent is not None and (metric := metric_answer(state, reads) or log_status_answer(state)) is not None:
        return metric
    if (about := object_verdict(state)) is not None:  # a certificate, a Helm release: its own answer
        headline, lines = about
        return Answer(
            intent=kind,
            shape=DIAGNOSIS,
            headline=headline,
            # A status answer's diagnosis already holds these lines (the plan submitted them).
            details=[] if kind == STATUS else lines,
            no_data=headline.startswith("No data"),
            confidence=confidence_of(reads=len(reads), empty=empty),
        )
    if kind == STATUS:
        answer = _status(state, diagnosis=diagnosis, root_cause=root_cause, reads=reads)
        answer.lines = key_lines(findings, root_cause=root_cause, diagnosis=diagnosis)
        return answer
    if kind == EXPLAIN:
        return _explanation(state, findings, diagnosis=diagnosis, root_cause=root_cause, reads=reads)
    assert intent is not None
    answer = build_question_answer(intent, state, resolutions(state), question_namespace(state))
    if intent.kind in (COUNT, LIST):
        answer.details = asked_details(state, question_namespace(state)) + answer.details
    problems = [f for f in sorted(findings, key=lambda f: -f.rank) if f.is_problem]
    if problems:
        answer.details.append("Also noticed: " + "; ".join(dict.fromkeys(f.summary for f in problems[:4])))
    if reads and empty == len(reads):
        answer.no_data, answer.confidence = True, LOW
    return answer


def key_lines(findings: list[Finding], *, root_cause: str, diagnosis: str) -> list[dict[str, str]]:
    """The line the root cause was read from, quoted as read (an event's message, a log line), when the
    diagnosis paraphrases it rather than quoting it."""
    root = next((f for f in findings if f.is_problem and root_cause and f.summary in root_cause), None)
    evidence = " ".join((root.evidence if root is not None else "").split())
    if not evidence or evidence in " ".join(diagnosis.split()):
        return []
    return [{"source": root.subject if root is not None else "", "time": "", "text": evidence[:400]}]


def quoted_key_lines(answer: Answer) -> list[str]:
    """The key lines of a status answer as text lines of its diagnosis."""
    lines = []
    for quoted in answer.lines:
        source = f" ({quoted['source']})" if quoted.get("source") else ""
        lines.append(f"Key line{source}: {quoted['text']}")
    return lines


def _status(state: AnalysisState, *, diagnosis: str, root_cause: str, reads: list[bool]) -> Answer:
    about = state.alert.subject.label
    if reads and not any(reads):
        return Answer(
            intent=STATUS,
            shape=DIAGNOSIS,
            headline=f"No data: none of the {len(reads)} reads about {about} returned data, so I cannot tell "
            "whether it is healthy.",
            no_data=True,
            confidence=LOW,
            notes=["every read was empty."],
        )
    return Answer(
        intent=STATUS,
        shape=DIAGNOSIS,
        headline=root_cause or diagnosis.split("\n", 1)[0],
        # What the question asks besides a verdict (memory, node, IP, its pods' states, a metric no query
        # answered) comes first.
        details=metric_lines(state) + asked_details(state, question_namespace(state)),
        confidence=confidence_of(reads=len(reads), empty=sum(1 for got in reads if not got)),
    )


def _explanation(
    state: AnalysisState, findings: list[Finding], *, diagnosis: str, root_cause: str, reads: list[bool]
) -> Answer:
    intent = state.intent
    assert intent is not None
    document: dict[str, Any] | None = None
    for out in state.outputs:
        if out.params.get("id") == intent.finding_ref and not out.no_data:
            document = finding_document(out.text)
    details = []
    if document is not None:
        title = str(document.get("title") or document.get("aggregation_key") or "")
        subject = "/".join(
            str(document.get(k) or "")
            for k in ("subject_type", "subject_namespace", "subject_name")
            if document.get(k)
        )
        headline = f"Finding {intent.finding_ref}: {title}" + (f" (about {subject})" if subject else "") + "."
        annotations = document.get("annotations") if isinstance(document.get("annotations"), dict) else {}
        assert isinstance(annotations, dict)
        for text in (document.get("description"), annotations.get("description"), annotations.get("summary")):
            if text:
                details.append(f"It says: {str(text).replace(chr(92) + chr(34), chr(34))[:600]}")
        if document.get("starts_at"):
            details.append(f"Since: {document['starts_at']}")
    elif intent.finding_ref:
        headline = (
            f"No data: the finding {intent.finding_ref} could not be read; what the investigation found "
            "instead:"
        )
    else:
        headline = "What the finding means, from the investigation:"
    details.append(f"What it means: {root_cause}" if root_cause else "")
    details += [line for line in diagnosis.splitlines() if line.strip()][:12]
    problems = [f.to_json() for f in findings if f.is_problem][:5]
    return Answer(
        intent=EXPLAIN,
        shape=EXPLANATION,
        headline=headline,
        details=[d for d in details if d],
        groups=[],
        matched=[{"finding": intent.finding_ref, "findings": json.loads(json.dumps(problems))}]
        if problems
        else [],
        no_data=document is None and bool(intent.finding_ref) and not any(reads),
        confidence=confidence_of(reads=len(reads), empty=sum(1 for got in reads if not got)),
    )
