"""Block Kit payloads the bot posts (plain dicts, as the Web API takes them). No I/O here."""

from __future__ import annotations

import json
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


def clip(text: str, limit: int = SECTION_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip(text)}}


def _compact(args: dict[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, separators=(",", ":")) if args else ""


def step_line(step: Step) -> str:
    """One line of progress for a step; the diagnosis and proposals get messages of their own."""
    summary = " ".join((step.summary or "").split())
    if step.phase == Step.Phase.ALERT:
        return f":rotating_light: Investigating: {clip(summary, 300)}"
    if step.phase == Step.Phase.PROBE:
        line = f":mag: `{step.tool}` {_compact(step.arguments)} → {clip(summary, 300)}"
        found = [f"\n    • {clip(str(f.get('summary', '')), 200)}" for f in step.findings[:3]]
        return line + "".join(found)
    if step.phase == Step.Phase.EXECUTE:
        return f":gear: {clip(summary, 500)}"
    if step.phase == Step.Phase.HEALTH:
        icon = ":green_heart:" if step.ok else ":broken_heart:"
        return f"{icon} Health after the action: {clip(summary, 500)}"
    if step.phase == Step.Phase.PROPOSE:
        return f":no_entry_sign: {clip(summary, 500)}"
    return f":memo: {clip(summary, 500)}"


def progress(
    steps: Sequence[Step], *, opened: tuple[Incident, Trajectory] | None = None
) -> tuple[str, Blocks]:
    """Progress lines; the first message of a diagnosis says which incident and environment it is."""
    lines = "\n".join(step_line(s) for s in steps)
    if opened is not None:
        incident, trajectory = opened
        lines = (
            f":hourglass_flowing_sand: Incident #{incident.pk} opened; diagnosis {trajectory.pk} runs on "
            f"`{incident.environment}`. Steps follow in this thread.\n{lines}"
        )
    return clip(lines, 3000), [_section(lines)]


def diagnosis(step: Step, *, trajectory_id: int) -> tuple[str, Blocks]:
    root_cause = " ".join((step.summary or "").split())
    text = f":white_check_mark: Diagnosis (trajectory {trajectory_id}): {clip(root_cause, 500)}"
    blocks: Blocks = [
        _section(f"*Diagnosis* (trajectory {trajectory_id})\n*Root cause:* {clip(root_cause, 1000)}"),
    ]
    if step.result:
        blocks.append(_section(step.result))
    if step.findings:
        lines = [
            f"• *{f.get('severity', '')}* {f.get('summary', '')}"
            + (f" (`{f['subject']}`)" if f.get("subject") else "")
            for f in step.findings[:10]
        ]
        blocks.append(_section("*Findings*\n" + "\n".join(lines)))
    return text, blocks


def failure(step: Step) -> str:
    return f":x: The diagnosis failed: {clip(step.summary or 'unknown error', 2000)}"


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
    decider = action.decided_by.get_username() if action.decided_by else "someone"
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
    plan = f"`{action.tool}` `{_compact(action.args)}`"
    requester = action.requested_by.get_username() if action.requested_by else "nobody (the agent)"
    expires = int(action.expires_at.timestamp())
    body = (
        f"*Proposed action {action.pk}:* {plan}\n*Reason:* {clip(action.reason or '-', 1500)}\n"
        f"*Requested by:* {requester} (cannot approve it)\n"
        f"*Expires:* <!date^{expires}^{{date_short_pretty}} {{time}}|{action.expires_at:%Y-%m-%d %H:%M} UTC>"
    )
    text = f"Proposed action {action.pk}: {action.tool} {_compact(action.args)}"
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
