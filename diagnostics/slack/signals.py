"""The hook from the diagnosis to Slack: a committed Step of a Slack incident enqueues a thread sync.

Nothing in the diagnosis path knows about Slack; this receiver is connected by the app's ready().
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_save

from diagnostics.models import Step
from diagnostics.slack import conf, tasks

DISPATCH_UID = "diagnostics.slack.step_saved"


def step_saved(sender: type[Step], instance: Step, created: bool, **kwargs: Any) -> None:
    if not created or kwargs.get("raw") or not conf.enabled():
        return
    if not instance.trajectory.incident.slack_channel:
        return
    trajectory_id = instance.trajectory_id

    transaction.on_commit(lambda: tasks.enqueue_sync(trajectory_id))


def connect() -> None:
    post_save.connect(step_saved, sender=Step, dispatch_uid=DISPATCH_UID)
