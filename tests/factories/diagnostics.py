"""Incidents, trajectories and steps, actions, and the Slack bot's rows."""

from __future__ import annotations

from datetime import timedelta

import factory
from django.utils import timezone

from diagnostics.approvals import plan_hash
from diagnostics.models import (
    ActionRequest,
    Incident,
    IncidentTouch,
    Step,
    Trajectory,
)
from diagnostics.slack.models import ActionMessage, SlackEvent, SlackUser, ThreadCursor
from tests.factories.users import UserFactory


class IncidentFactory(factory.django.DjangoModelFactory[Incident]):
    """An incident (no trajectory: use diagnostics.services.incident_open for a queued diagnosis)."""

    class Meta:
        model = Incident

    title = factory.Sequence(lambda n: f"incident {n}")
    environment = "fake"
    status = Incident.Status.DIAGNOSED


class IncidentTouchFactory(factory.django.DjangoModelFactory[IncidentTouch]):
    class Meta:
        model = IncidentTouch

    incident = factory.SubFactory(IncidentFactory)
    user = factory.SubFactory(UserFactory)
    kind = IncidentTouch.Kind.OPENED


class TrajectoryFactory(factory.django.DjangoModelFactory[Trajectory]):
    class Meta:
        model = Trajectory

    incident = factory.SubFactory(IncidentFactory)
    status = Trajectory.Status.SUCCEEDED
    diagnosis = "the api process exits: DATABASE_URL is not set"


class StepFactory(factory.django.DjangoModelFactory[Step]):
    class Meta:
        model = Step

    trajectory = factory.SubFactory(TrajectoryFactory)
    index = factory.Sequence(lambda n: n)
    phase = Step.Phase.PROBE
    tool = "list_processes"
    result = "NAME   STATE\napi    FATAL  Exited too quickly"


class ActionRequestFactory(factory.django.DjangoModelFactory[ActionRequest]):
    """A pending action whose plan hash matches its tool, arguments and incident's environment (what
    diagnostics.services.action_request_propose stores), expiring in an hour."""

    class Meta:
        model = ActionRequest

    trajectory = factory.SubFactory(TrajectoryFactory)
    tool = "restart_service"
    args = factory.LazyFunction(lambda: {"service": "api"})
    plan_hash = factory.LazyAttribute(
        lambda o: plan_hash(
            tool=o.tool,
            args=o.args,
            environment=o.trajectory.incident.environment,
            environment_options=o.trajectory.incident.environment_options or {},
        )
    )
    expires_at = factory.LazyFunction(lambda: timezone.now() + timedelta(hours=1))


class SlackUserFactory(factory.django.DjangoModelFactory[SlackUser]):
    class Meta:
        model = SlackUser

    slack_user_id = factory.Sequence(lambda n: f"U{n:08d}")
    team_id = "T0SKILLGATE"
    user = factory.SubFactory(UserFactory)


class SlackEventFactory(factory.django.DjangoModelFactory[SlackEvent]):
    class Meta:
        model = SlackEvent

    key = factory.Sequence(lambda n: f"event:Ev{n:08d}")
    kind = SlackEvent.Kind.MENTION
    payload = factory.LazyFunction(lambda: {"type": "app_mention", "text": "<@U0BOT> the api is down"})


class ThreadCursorFactory(factory.django.DjangoModelFactory[ThreadCursor]):
    class Meta:
        model = ThreadCursor

    trajectory = factory.SubFactory(TrajectoryFactory)


class ActionMessageFactory(factory.django.DjangoModelFactory[ActionMessage]):
    class Meta:
        model = ActionMessage

    action = factory.SubFactory(ActionRequestFactory)
    channel = "C0INCIDENTS"
