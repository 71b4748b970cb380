"""Block Kit payloads the bot posts (plain dicts, as the Web API takes them). No I/O here.

Slack reads ``&``, ``<`` and ``>`` as control characters in message text and ``mrkdwn`` objects:
``<!channel>`` notifies a whole channel, ``<@U123>`` pings someone, ``<http://evil|click>`` hides where
a link goes. Diagnoses, incident titles, alerts, tool output and the agent's proposed actions are
written by people and programs outside our control, so every piece of such text is escaped with
:func:`escape` (Slack's "Escaping text": ``&amp;``, ``&lt;``, ``&gt;``) before it is put into a
message; only the markup this module writes itself (bold, code, the date token) stays live.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from django.utils import timezone

from diagnostics.models import ActionRequest, Incident, Step, Trajectory

APPROVE = "approve_action"
DENY = "deny_action"
SECTION_LIMIT = 2900  # Slack refuses section text over 3000 characters
PROGRESS_PHASES = {
    Step.Phase.ALERT,
    Step.Phase.PROBE,
    Step.Phase.NOTE,
    Step.Phase.EXECUTE,
    Step.Phase.HEALTH,
}

Blocks = list[dict[str, Any]]


_CUT_ENTITY = re.compile(r"&[a-z]{0,3}$")


def escape(text: Any) -> str:
    """``text`` as literal Slack text: ``&``, ``<``, ``>`` as entities (nothing else is touched)."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    """Slack's entities back to characters: what a member typed, from the text Slack delivers."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def clip(text: str, limit: int = SECTION_LIMIT) -> str:
    """At most ``limit`` characters; never ends inside an entity that :func:`escape` wrote."""
    if len(text) <= limit:
        return text
    return _CUT_ENTITY.sub("", text[: limit - 1]) + "…"


def quoted(text: Any, limit: int) -> str:
    """Untrusted ``text``, escaped and clipped: what every diagnosis, title or tool output becomes."""
    return clip(escape(text), limit)


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip(text)}}


def _compact(args: dict[str, Any]) -> str:
    """Arguments as compact JSON, escaped (they come from the agent, or from a tool's output)."""
    return escape(json.dumps(args, sort_keys=True, separators=(",", ":"))) if args else ""


def step_line(step: Step) -> str:
    """One line of progress for a step; the diagnosis and proposals get messages of their own."""
    summary = " ".join((step.summary or "").split())
    if step.phase == Step.Phase.ALERT:
        return f":rotating_light: Investigating: {quoted(summary, 300)}"
    if step.phase == Step.Phase.PROBE:
        line = f":mag: `{escape(step.tool)}` {_compact(step.arguments)} → {quoted(summary, 300)}"
        found = [f"\n    • {quoted(f.get('summary', ''), 200)}" for f in step.findings[:3]]
        return line + "".join(found)
    if step.phase == Step.Phase.EXECUTE:
        return f":gear: {quoted(summary, 500)}"
    if step.phase == Step.Phase.HEALTH:
        icon = ":green_heart:" if step.ok else ":broken_heart:"
        return f"{icon} Health after the action: {quoted(summary, 500)}"
    if step.phase == Step.Phase.PROPOSE:
        return f":no_entry_sign: {quoted(summary, 500)}"
    return f":memo: {quoted(summary, 500)}"


def progress(
    steps: Sequence[Step], *, opened: tuple[Incident, Trajectory] | None = None
) -> tuple[str, Blocks]:
    """Progress lines; the first message of a diagnosis says which incident and environment it is."""
    lines = "\n".join(step_line(s) for s in steps)
    if opened is not None:
        incident, trajectory = opened
        lines = (
            f":hourglass_flowing_sand: Incident #{incident.pk} opened; diagnosis {trajectory.pk} runs on "
            f"`{escape(incident.environment)}`. Steps follow in this thread.\n{lines}"
        )
    return clip(lines, 3000), [_section(lines)]


def _answer_block(answer: dict[str, Any]) -> str:
    """The body of an answer shape: its rows, quoted lines, error groups or moments, in a code block."""
    rows: list[str] = []
    if answer.get("rows"):
        rows.append(" | ".join(str(c) for c in answer.get("columns") or []))
        rows += [" | ".join(str(c) for c in row) for row in answer["rows"][:20]]
    for group in (answer.get("groups") or [])[:10]:
        seen = f"{group.get('first_seen') or '-'} .. {group.get('last_seen') or '-'}"
        rows.append(
            f"{group.get('count')}x [{group.get('category')}] {seen} {group.get('signature', '')}"[:300]
        )
    for line in (answer.get("lines") or [])[:20]:
        rows.append(f"{line.get('time') or ''} [{line.get('source', '')}] {line.get('text', '')}"[:300])
    for event in (answer.get("events") or [])[:20]:
        rows.append(f"{event.get('time') or '?'} {event.get('source', '')}: {event.get('what', '')}"[:300])
    return clip("```" + escape("\n".join(rows)) + "```", 2900) if rows else ""


def answer(step: Step, answer: dict[str, Any], *, trajectory_id: int) -> tuple[str, Blocks]:
    """A question's answer in its shape: the headline, then its table, lines, groups or timeline."""
    headline = " ".join(str(answer.get("headline") or step.summary or "").split())
    kind = f"{answer.get('intent', '')}, {answer.get('shape', '')}, confidence {answer.get('confidence', '')}"
    text = f":white_check_mark: Answer (trajectory {trajectory_id}): {quoted(headline, 500)}"
    blocks: Blocks = [
        _section(f"*Answer* (trajectory {trajectory_id}; {escape(kind)})\n{quoted(headline, 1500)}")
    ]
    body = _answer_block(answer)
    if body:
        blocks.append(_section(body))
    notes = [*(answer.get("details") or []), *(answer.get("notes") or [])]
    if notes:
        blocks.append(_section(clip(escape("\n".join(str(n) for n in notes)), SECTION_LIMIT)))
    return text, blocks


def diagnosis(step: Step, *, trajectory_id: int) -> tuple[str, Blocks]:
    shaped = (step.arguments or {}).get("answer") if isinstance(step.arguments, dict) else None
    if isinstance(shaped, dict) and shaped.get("intent") not in (None, "", "status"):
        return answer(step, shaped, trajectory_id=trajectory_id)
    root_cause = " ".join((step.summary or "").split())
    text = f":white_check_mark: Diagnosis (trajectory {trajectory_id}): {quoted(root_cause, 500)}"
    blocks: Blocks = [
        _section(f"*Diagnosis* (trajectory {trajectory_id})\n*Root cause:* {quoted(root_cause, 1000)}"),
    ]
    if step.result:
        blocks.append(_section(escape(step.result)))
    if step.findings:
        lines = [
            f"• *{escape(f.get('severity', ''))}* {escape(f.get('summary', ''))}"
            + (f" (`{escape(f['subject'])}`)" if f.get("subject") else "")
            for f in step.findings[:10]
        ]
        blocks.append(_section("*Findings*\n" + "\n".join(lines)))
    return text, blocks


def failure(step: Step) -> str:
    return f":x: The diagnosis failed: {quoted(step.summary or 'unknown error', 2000)}"


def _confirm(title: str, text: str, confirm: str) -> dict[str, Any]:
    return {
        "title": {"type": "plain_text", "text": title},
        "text": {"type": "mrkdwn", "text": clip(text, 300)},
        "confirm": {"type": "plain_text", "text": confirm},
        "deny": {"type": "plain_text", "text": "Cancel"},
    }


def button_value(action: ActionRequest) -> str:
    """What a click sends back: the action and the plan the clicker saw (checked on the server)."""
    return json.dumps({"action": action.pk, "plan": action.plan_hash})


def _state(action: ActionRequest) -> str:
    decider = escape(action.decided_by.get_username()) if action.decided_by else "someone"
    status = action.status
    if status == ActionRequest.Status.PENDING and action.expires_at <= timezone.now():
        status = ActionRequest.Status.EXPIRED
    states: dict[str, str] = {
        ActionRequest.Status.APPROVED: f":white_check_mark: Approved by {decider}; running.",
        ActionRequest.Status.EXECUTING: f":white_check_mark: Approved by {decider}; running.",
        ActionRequest.Status.EXECUTED: f":white_check_mark: Approved by {decider}; executed.",
        ActionRequest.Status.FAILED: f":warning: Approved by {decider}; the action failed.",
        ActionRequest.Status.DENIED: f":no_entry: Denied by {decider}.",
        ActionRequest.Status.EXPIRED: ":hourglass: Expired without a decision.",
    }
    return states.get(status, status)


def action(action: ActionRequest) -> tuple[str, Blocks]:
    """The proposal; with Approve / Deny buttons (each behind a confirm dialog) while it is pending."""
    plan = f"`{escape(action.tool)}` `{_compact(action.args)}`"
    requester = escape(action.requested_by.get_username()) if action.requested_by else "nobody (the agent)"
    expires = int(action.expires_at.timestamp())
    body = (
        f"*Proposed action {action.pk}:* {plan}\n*Reason:* {quoted(action.reason or '-', 1500)}\n"
        f"*Requested by:* {requester} (cannot approve it)\n"
        f"*Expires:* <!date^{expires}^{{date_short_pretty}} {{time}}|{action.expires_at:%Y-%m-%d %H:%M} UTC>"
    )
    text = f"Proposed action {action.pk}: {escape(action.tool)} {_compact(action.args)}"
    blocks: Blocks = [_section(body)]
    pending = action.status == ActionRequest.Status.PENDING and action.expires_at > timezone.now()
    if pending:
        value = button_value(action)
        blocks.append(
            {
                "type": "actions",
                "block_id": f"action-{action.pk}",
                "elements": [
                    {
                        "type": "button",
                        "action_id": APPROVE,
                        "text": {"type": "plain_text", "text": "Approve"},
                        "style": "primary",
                        "value": value,
                        "confirm": _confirm(
                            "Run this action?", f"{plan} will run on the environment.", "Run it"
                        ),
                    },
                    {
                        "type": "button",
                        "action_id": DENY,
                        "text": {"type": "plain_text", "text": "Deny"},
                        "style": "danger",
                        "value": value,
                        "confirm": _confirm("Deny this action?", f"{plan} will not run.", "Deny"),
                    },
                ],
            }
        )
    else:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _state(action)}]})
    return text, blocks
