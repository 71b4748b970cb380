"""One whole cycle with the real pieces: the tiny model served by vLLM (CPU) as the student, TRL/PEFT
training its LoRA, admission replaying the held-out calls against vLLM, the adapter loaded at run time,
and the next calls served by it with a higher pass rate. The teacher is the stub (the world's edge).

Slow (vLLM start-up, training): run alone with ``.venv/bin/pytest tests/training/test_cycle_tiny_model.py``.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.conf import settings
from django.test import override_settings

from bench.support import narrow_task
from bench.support.vllm import VllmServer, vllm_available
from routing.models import Backend, TaskProfile
from tests.factories import BackendFactory, TaskProfileFactory
from tests.support.cycle import drive, responder, system_text
from training.models import Adapter, Admission, Cycle
from training.services.adapters import training_run_execute
from training.services.cycle import cycle_stage_run, cycle_start, cycles_poll
from training.services.cycle.calls import split_of

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (run infra/install_ml.sh)"),
    pytest.mark.django_db(transaction=True),
]

ADVICE = {"patterns": ['Answer with {"city": "<word>"} only.'], "pitfalls": ["Never answer in prose."]}


@pytest.fixture(scope="module")
def server(vllm_server: VllmServer) -> VllmServer:
    """The session's shared vLLM (tests/support/vllm_shared.py) serving the tiny model as tiny-base."""
    from bench.support.tiny_model import tiny_model_dir

    assert (vllm_server.model_dir, vllm_server.served_name) == (tiny_model_dir(), "tiny-base")
    return vllm_server


def teacher(body):
    if system_text(body).startswith("You maintain a SkillBook"):
        return json.dumps(ADVICE)
    return json.dumps({"city": "disk"})


def direct_pass_rate(calls) -> float:
    passed = [any(g["role"] == "student" and g["verdict"] == "pass" for g in c.legs) for c in calls]
    return sum(passed) / len(passed)


def test_a_cycle_trains_admits_and_serves_an_adapter_that_raises_the_pass_rate(
    server, gateway_url, stub, api_key, tmp_path
):
    from bench.support.tiny_model import tiny_model_dir

    stub.responder = responder(student="unused", teacher=teacher)
    teacher_backend = BackendFactory.create(
        name="teacher",
        role=Backend.Role.TEACHER,
        model="openai/teacher-model",
        api_base=stub.base_url,
        input_cost_per_token=Decimal("0.000010"),
        output_cost_per_token=Decimal("0.000030"),
    )
    student_backend = BackendFactory.create(
        name="student",
        role=Backend.Role.STUDENT,
        model="hosted_vllm/tiny-base",
        api_base=server.base_url,
        input_cost_per_token=Decimal("0.000001"),
        output_cost_per_token=Decimal("0.000003"),
    )
    profile = TaskProfileFactory.create(
        name="city-json",
        policy=TaskProfile.Policy.STUDENT_WITH_FALLBACK,
        verifier=narrow_task.VERIFIER,
        max_tokens=16,
        teacher=teacher_backend,
        student=student_backend,
    )
    prompts = list({json.dumps(p): p for p in narrow_task.heldout_prompts(120, seed=7)}.values())[:60]
    heldout = [p for p in prompts if split_of(p) == "heldout"]
    training = {
        **settings.SKILLGATE["TRAINING"],
        "BASE_MODEL": str(tiny_model_dir()),
        "ADAPTER_DIR": tmp_path,
        "HYPERPARAMETERS": narrow_task.FAST,
    }
    cycle_conf = {
        **settings.SKILLGATE["CYCLE"],
        "HELDOUT_SHARDS": 4,
        "ADMISSION_MIN_ITEMS": 5,
        "SELF_REPAIR_TRIES": 0,
    }
    with override_settings(SKILLGATE={**settings.SKILLGATE, "TRAINING": training, "CYCLE": cycle_conf}):
        before = drive(gateway_url, api_key.raw, "city-json", prompts)
        assert len(heldout) >= 5 and direct_pass_rate(before) == 0.0  # random weights: never JSON

        cycle, _ = cycle_start(profile_id=profile.pk)
        while cycle.status in Cycle.UNFINISHED:
            if cycle.status == Cycle.Status.QUEUED:
                cycle_stage_run(cycle_id=cycle.pk, stage=cycle.stage)
            elif cycle.status == Cycle.Status.WAITING:  # the gpu worker's job, run here
                training_run_execute(run_id=cycle.training_run_id)
                cycles_poll()
            cycle.refresh_from_db()

        assert cycle.status == Cycle.Status.SUCCEEDED, cycle.error
        admission = cycle.admission
        assert admission is not None
        assert admission.decision == Admission.Decision.ADMITTED, admission.reason
        assert admission.kind == Admission.Kind.JOINT
        assert (
            admission.candidate_metrics["student_pass_rate"] > admission.active_metrics["student_pass_rate"]
        )
        adapter = Adapter.objects.get(pk=admission.candidate["adapter"])
        assert adapter.status == Adapter.Status.ACTIVE and adapter.name in server.models()
        profile.refresh_from_db()
        assert profile.student_adapter == adapter.name

        after = drive(gateway_url, api_key.raw, "city-json", heldout)

    assert all(
        g["model"] == f"hosted_vllm/{adapter.name}" for c in after for g in c.legs if g["role"] == "student"
    )
    assert direct_pass_rate(after) > 0.5
