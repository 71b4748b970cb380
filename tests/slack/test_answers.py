"""A question asked in Slack is answered in its shape: the count, the rows it counted, the confidence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from diagnostics.models import Incident
from diagnostics.toolsets.base import ReadToolset
from diagnostics.toolsets.registry import Environment, register_environment
from diagnostics.toolsets.replay import ReplayToolset
from tests.support.slack_bot import CHANNEL

RECORDED = Path(settings.EVAL_DIR) / "holmesgpt/cases/test_ask_holmes/07_high_latency"


@register_environment
class RecordedCluster(Environment):
    """The recorded cluster of one replay case, as a named environment (Slack opens incidents on the
    default environment, without options)."""

    name = "recorded-cluster"

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)

    def read_toolsets(self) -> list[ReadToolset]:
        return [ReplayToolset(RECORDED)]


def test_a_count_question_in_slack_is_answered_with_the_number_and_its_rows(
    bot, slack_client, queue, settings
):
    settings.DIAGNOSTICS_DEFAULT_ENVIRONMENT = "recorded-cluster"
    response = slack_client.command("diagnose how many pods are running in default?", user="U0ASKER")
    assert response.status_code == 200
    queue.drain()

    incident = Incident.objects.get()
    trajectory = incident.trajectories.get()
    assert trajectory.status == "succeeded"
    thread = [m for m in bot.posted() if m.get("thread_ts") == incident.slack_thread_ts]
    final = thread[-1]
    assert final["channel"] == CHANNEL
    assert final["text"].startswith(
        f":white_check_mark: Answer (trajectory {trajectory.pk}): 12 running pods"
    )
    blocks = "\n".join(b["text"]["text"] for b in final["blocks"])
    assert "count, number, confidence high" in blocks
    assert (
        "NAME | NAMESPACE | STATUS" in blocks
        and "customer-orders-766b65899b-lwqnt | default | Running" in blocks
    )
    assert "Root cause" not in blocks  # a question is not a root-cause report
