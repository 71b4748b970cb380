"""GRPO in the cycle: a profile setting turns it on, and each example's reward is the verifier of the
call it came from (the profile's or the call's own: tests, a pattern, the declared tools), with the
tiny model really trained by TRL and PEFT."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.support import narrow_task
from tests.factories import DemonstrationFactory, TaskProfileFactory, TrainingSettingsFactory
from tests.training.test_adapters import training_conf  # noqa: F401 (fixture)
from training.models import TrainingRun
from training.services import adapters as services
from training.trainer.datasets import Example

pytest.importorskip("trl", reason="needs the ml extra (infra/install_ml.sh)")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]


def hermes(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def per_call(pattern: str) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": f"Say something matching {pattern}"}],
        "metadata": {"verifier": {"kind": "regex", "pattern": pattern}},
    }


@pytest.mark.django_db
def test_each_examples_reward_is_the_verifier_of_its_own_call() -> None:
    profile = TaskProfileFactory.create(
        name="mixed", verifier={"kind": "tool_args"}, allow_call_verifier=True
    )
    tool_call = {"messages": [{"role": "user", "content": "Weather in Oslo?"}], "tools": TOOLS}
    examples = [
        Example(per_call("^alpha")["messages"], "alpha", request=per_call("^alpha")),
        Example(per_call("^beta")["messages"], "beta", request=per_call("^beta")),
        Example(tool_call["messages"], hermes("get_weather", {"city": "Oslo"}), request=tool_call),
    ]

    alpha, beta, tools = services.call_verifiers(profile, examples)

    assert alpha("alpha one") and not alpha("beta one")
    assert beta("beta one") and not beta("alpha one")
    assert tools(hermes("get_weather", {"city": "Oslo", "days": 2}))
    assert not tools(hermes("get_weather", {"days": "two"}))  # schema-invalid arguments
    assert not tools(hermes("get_time", {"city": "Oslo"}))  # an undeclared function


@pytest.mark.django_db
def test_grpo_is_refused_for_an_example_nothing_can_verify() -> None:
    profile = TaskProfileFactory.create(name="free", verifier={})
    examples = [
        Example(per_call("^a")["messages"], "a", request=per_call("^a")),
        Example([{"role": "user", "content": "hi"}], "hello"),
    ]
    with pytest.raises(services.TrainingError, match="example 2 of profile 'free' has none"):
        services.call_verifiers(profile, examples)


NEVER = {"kind": "regex", "pattern": "^never-written$", "mode": "fullmatch"}
ALWAYS = {"kind": "regex", "pattern": "(?s).*", "mode": "search"}


@pytest.mark.django_db
def test_a_profile_with_grpo_on_trains_sft_then_grpo_rewarded_by_each_calls_verifier(
    training_conf: dict[str, Any],  # noqa: F811
) -> None:
    """The profile's own verifier passes nothing; every call's own verifier passes everything. A mean
    GRPO reward of 1.0 shows the reward came from the calls' verifiers (0.0 from the profile's)."""
    profile = TaskProfileFactory.create(name="per-call", verifier=NEVER, allow_call_verifier=True)
    settings_row = TrainingSettingsFactory.create(
        profile=profile, grpo=True, hyperparameters={"sft_steps": 4}
    )
    ids = [
        DemonstrationFactory.create(
            profile=profile,
            messages=example.messages,
            completion=example.completion,
            request={"messages": example.messages, "metadata": {"verifier": ALWAYS}},
        ).pk
        for example in narrow_task.examples(8)
    ]
    run = services.training_run_start(
        profile_id=profile.pk, demonstration_ids=ids, grpo=settings_row.grpo, enqueue=False
    )
    assert (
        run.kind == TrainingRun.Kind.SFT_GRPO and run.examples[0]["request"]["metadata"]["verifier"] == ALWAYS
    )

    run = services.training_run_execute(run_id=run.pk)

    assert run.status == TrainingRun.Status.SUCCEEDED, run.error
    assert run.metrics["grpo_steps"] == narrow_task.FAST["grpo_steps"]
    assert {p["phase"] for p in run.progress} == {"sft", "grpo"}
    assert run.metrics["grpo_mean_reward"] == 1.0
    assert Path(run.adapter.path, "adapter_model.safetensors").exists()


@pytest.mark.django_db
def test_where_answers_are_labelled_the_reward_also_asks_agreement_with_the_verified_answer() -> None:
    """A weak verifier (the tool_args schema check) passes any well-formed call, so every sample would
    get the same reward; on a profile that labels its answers with teacher samples, a completion must
    also agree with the example's verified answer, by the rule the live labels use."""
    labelled = TaskProfileFactory.create(
        name="labelled", verifier={"kind": "tool_args"}, policy_params={"teacher_sample_rate": 0.5}
    )
    request = {"messages": [{"role": "user", "content": "Weather in Oslo for 2 days?"}], "tools": TOOLS}
    verified = hermes("get_weather", {"city": "Oslo", "days": 2})
    example = Example(request["messages"], verified, request=request)

    (reward,) = services.call_verifiers(labelled, [example])

    assert reward(verified)
    assert not reward(hermes("get_weather", {"city": "Oslo", "days": 3}))  # schema-valid, wrong value
    assert not reward(hermes("get_weather", {"days": "two"}))  # and the verifier still decides first
    unlabelled = TaskProfileFactory.create(
        name="unlabelled", verifier={"kind": "tool_args"}, policy_params={"teacher_sample_rate": 0}
    )
    (reward,) = services.call_verifiers(unlabelled, [example])
    assert reward(hermes("get_weather", {"city": "Oslo", "days": 3}))  # the verifier's verdict alone
