"""`make demo-cycle`'s parts that run without the service: its task split, its measurement from the
ledger, and its refusal when nothing serves. (The whole loop needs the running service with its vLLM
student; its measured run is in the README.)"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from app.demo import CAPITALS, extract_json_call
from app.demo_cycle import follow, summarize
from bench.support.vllm import free_port
from routing.models import Invocation
from tests.factories import (
    AdapterFactory,
    CycleFactory,
    InvocationFactory,
    TaskProfileFactory,
    TrainingRunFactory,
)
from training.models import Cycle, TrainingRun
from training.services.cycle.calls import split_of


def leg(role: str, model: str, verdict: str) -> dict[str, str]:
    return {"role": role, "model": model, "verdict": verdict}


def test_the_capitals_hold_out_enough_calls_for_an_admission(settings) -> None:
    splits = [split_of(extract_json_call(city, country)["messages"]) for city, country in CAPITALS]
    assert len(set(CAPITALS)) == len(CAPITALS)
    assert splits.count("heldout") >= settings.SKILLGATE["CYCLE"]["ADMISSION_MIN_ITEMS"]
    assert splits.count("train") > 3 * splits.count("heldout")  # most calls teach


@pytest.mark.django_db
def test_summary_counts_the_student_own_passes_apart_from_what_the_caller_got() -> None:
    fail = Invocation.Verdict.FAIL
    calls = [
        # the adapter answered and passed
        InvocationFactory(legs=[leg("student", "hosted_vllm/extract-v1", "pass")], cost_usd=Decimal("0.1")),
        # the base student failed; the teacher's fallback passed
        InvocationFactory(
            legs=[leg("student", "hosted_vllm/base", "fail"), leg("teacher", "openai/big", "pass")],
            fallback=True,
            served_by=Invocation.Route.TEACHER,
            cost_usd=Decimal("1.0"),
        ),
        # both failed
        InvocationFactory(
            legs=[leg("student", "hosted_vllm/base", "fail"), leg("teacher", "openai/big", "fail")],
            fallback=True,
            verdict=fail,
            cost_usd=Decimal("1.0"),
        ),
        # routed straight to the teacher: no student leg
        InvocationFactory(legs=[leg("teacher", "openai/big", "pass")], cost_usd=Decimal("0.9")),
    ]
    summary = summarize(calls)
    assert summary.calls == 4
    assert summary.direct == 0.25
    assert summary.policy == 0.75
    assert summary.fallback == 0.5
    assert summary.cost_usd == Decimal("3.0")
    assert dict(summary.student_models) == {"extract-v1": 1, "base": 2}
    assert "student direct pass 0.25, policy pass 0.75" in summary.line()


def test_demo_cycle_refuses_to_start_when_nothing_serves() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(CommandError, match=f"does not answer at {url}.*make run"):
        call_command("demo_cycle", "--url", url)


@pytest.mark.django_db
def test_follow_reports_the_training_run_by_eighths_and_stops_when_the_cycle_ends() -> None:
    profile = TaskProfileFactory.create()
    adapter = AdapterFactory.create(profile=profile, version=1)
    run = TrainingRunFactory.create(
        adapter=adapter, status=TrainingRun.Status.RUNNING, step=5, total_steps=40, progress=[]
    )
    cycle = CycleFactory.create(
        profile=profile, stage=Cycle.Stage.ADAPTER, status=Cycle.Status.WAITING, training_run=run
    )
    lines = follow(cycle.pk, timeout_s=30, poll_s=0)
    assert next(lines) == "adapter waiting (training running: step 5/40)"
    run.step, run.progress = 10, [{"step": 7, "loss": 0.5}, {"step": 10, "loss": 0.25}]
    run.save()
    assert next(lines) == "adapter waiting (training running: step 10/40, loss 0.250)"
    Cycle.objects.filter(pk=cycle.pk).update(stage=Cycle.Stage.DONE, status=Cycle.Status.SUCCEEDED)
    assert next(lines) == "done succeeded"
    assert next(lines, None) is None
