"""kill -9 of a real Celery worker in the middle of a background teacher sample (its upstream call
hangs): a new worker with the sweeper requeues it, it runs to the end once, and the day's sample
spend keeps the killed attempt's worst case (never less than what was spent)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from bench.support.openai_stub import Reply
from routing.models import Invocation, SampleSpend, TaskProfile
from routing.tasks import sample_leg
from tests.factories import InvocationFactory, TaskProfileFactory
from tests.faults.workers import STALE_AFTER_S, Stopwatch, fault_worker, kill9

# Real workers started, killed and started again: tens of seconds each (make test-slow runs them).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SCHEMA = {"type": "object", "properties": {"total": {"type": "number"}}, "required": ["total"]}


def test_a_sample_whose_worker_is_killed_mid_call_is_requeued_and_done_once(
    folder, queue, backends, api_key, stub, request
):
    profile = TaskProfileFactory.create(
        name="totals",
        policy=TaskProfile.Policy.LEARNED,
        verifier={"kind": "json_schema", "schema": SCHEMA},
        max_tokens=100,
        policy_params={"teacher_sample_rate": 1.0, "sample_daily_usd": "10"},
    )
    call = InvocationFactory.create(
        api_key=api_key.key,
        profile=profile,
        request={
            "model": "auto",
            "messages": [{"role": "user", "content": "What is the total of receipt 7?"}],
        },
        response={"message": {"role": "assistant", "content": '{"total": 12.5}'}, "finish_reason": "stop"},
        sample_state=Invocation.SampleState.QUEUED,
    )
    # The first teacher call hangs (the worker is killed during it); later ones answer at once.
    stub.responder = lambda body: Reply(
        content=json.dumps({"total": 12.5}), delay_s=60 if len(stub.requests) == 1 else 0
    )

    with fault_worker("sample-killed", folder, queue) as first:
        sample_leg.apply_async((str(call.pk),), queue=queue)
        first.wait_until("the sample's teacher call", lambda: len(stub.requests) == 1, 60)
        kill9(first)
    call.refresh_from_db()
    assert (call.sample_state, call.sample_attempts) == ("running", 1)

    watch = Stopwatch(request.node.name)
    with fault_worker(
        "sample-sweeper", folder, queue, beat=True, sweeps=("sweep-teacher-samples",)
    ) as second:
        second.wait_until(
            "the sample to be done", lambda: Invocation.objects.get(pk=call.pk).sample_state == "done", 60
        )
        watch.record("teacher sample rerun after kill -9", stale_after_s=STALE_AFTER_S)

    call.refresh_from_db()
    assert call.sample_attempts == 2 and len(stub.requests) == 2
    background = [leg for leg in call.legs if leg.get("background")]
    assert len(background) == 1 and background[0]["role"] == "teacher"
    assert call.legs[0]["correct"] is True  # the student's answer matched the teacher's
    spend = SampleSpend.objects.get(profile=profile)
    assert spend.calls == 2  # the killed attempt reserved too, and was never settled
    assert spend.spent_usd > Decimal(background[0]["cost_usd"])  # its worst case stays spent
    assert spend.spent_usd <= Decimal("10")
