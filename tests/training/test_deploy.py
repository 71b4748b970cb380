"""Adapters served by a real vLLM (CPU) at run time: trained with TRL, loaded with
/v1/load_lora_adapter, made the profile's student through the gateway, rolled back, unloaded after
the grace period. On the session's shared vLLM server (start-up 40-100 s on 2 busy cores). Run alone with

    .venv/bin/pytest tests/training/test_deploy.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.support import narrow_task
from bench.support.openai_stub import Reply
from bench.support.vllm import VllmServer, vllm_available
from routing.models import Backend, Invocation, TaskProfile
from tests.factories import AdapterFactory, TaskProfileFactory, TrainingRunFactory
from training.deploy import DeployError
from training.models import Adapter, TrainingRun
from training.services import adapters as services

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (run infra/install_ml.sh)"),
]

TEACHER_ANSWER = '{"city": "teacher"}'


@pytest.fixture(scope="module")
def base() -> Path:
    from bench.support.tiny_model import tiny_model_dir

    return tiny_model_dir()


@pytest.fixture(scope="module")
def trained(base: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """v1 learned the task (JSON with "city"); v2 continues v1 on a wrong key, so it fails the verifier."""
    from training.trainer.config import Hyperparameters
    from training.trainer.datasets import Example
    from training.trainer.sft import train_sft

    root = tmp_path_factory.mktemp("adapters")
    hp = Hyperparameters.from_dict(narrow_task.FAST)
    train_sft(
        base_model_dir=base,
        output_dir=root / "v1",
        examples=narrow_task.examples(32),
        system_prompt=narrow_task.SYSTEM,
        hyperparameters=hp,
    )
    wrong = [Example(e.messages, json.dumps({"town": "disk"})) for e in narrow_task.examples(32)]
    train_sft(
        base_model_dir=base,
        output_dir=root / "v2",
        examples=wrong,
        system_prompt=narrow_task.SYSTEM,
        hyperparameters=hp,
        parent_adapter_dir=root / "v1",
    )
    return {"v1": root / "v1", "v2": root / "v2"}


@pytest.fixture(scope="module")
def server(vllm_server: VllmServer, base: Path) -> VllmServer:
    """The session's shared vLLM (tests/support/vllm_shared.py) serving ``base`` as tiny-base."""
    assert (vllm_server.model_dir, vllm_server.served_name) == (base, "tiny-base")
    return vllm_server


def make_adapter(profile: TaskProfile, version: int, path: Path, base: Path) -> Adapter:
    adapter = AdapterFactory.create(profile=profile, version=version, path=str(path), base_model=str(base))
    TrainingRunFactory.create(adapter=adapter, status=TrainingRun.Status.SUCCEEDED)
    return adapter


def ask(gateway_url: str, api_key: Any) -> tuple[Any, Invocation]:
    import openai

    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=api_key.raw, max_retries=0)
    before = set(Invocation.objects.values_list("pk", flat=True))
    raw = client.chat.completions.with_raw_response.create(
        model="auto",
        messages=narrow_task.heldout_prompts(1)[0],
        max_tokens=16,
        temperature=0,
        metadata={"task": "city-json"},
    )
    (row,) = Invocation.objects.exclude(pk__in=before)
    return raw, row


@pytest.mark.django_db(transaction=True)
def test_train_load_activate_serve_rollback_unload(
    server: VllmServer,
    trained: dict[str, Path],
    base: Path,
    gateway_url: str,
    backends: dict[str, Backend],
    api_key: Any,
    stub: Any,
) -> None:
    stub.responder = lambda body: Reply(content=TEACHER_ANSWER)
    Backend.objects.filter(name="student").update(model="hosted_vllm/tiny-base", api_base=server.base_url)
    # The adapter was trained with this text in front; the gateway prepends it as the SkillBook.
    profile = TaskProfileFactory.create(
        name="city-json", verifier=narrow_task.VERIFIER, skillbook_text=narrow_task.SYSTEM
    )
    v1 = make_adapter(profile, 1, trained["v1"], base)
    v2 = make_adapter(profile, 2, trained["v2"], base)

    # The base model fails the schema: the teacher answers.
    raw, row = ask(gateway_url, api_key)
    assert raw.headers["x-skillgate-fallback"] == "true"
    assert row.legs[0]["model"] == "hosted_vllm/tiny-base" and row.legs[0]["verdict"] == "fail"

    # Activate v1: loaded into the running vLLM, then the profile's student calls go to it.
    v1 = services.adapter_activate(adapter_id=v1.pk)
    assert v1.status == Adapter.Status.ACTIVE and v1.is_loaded
    assert v1.name in server.models()
    assert TaskProfile.objects.get(pk=profile.pk).student_adapter == v1.name
    raw, row = ask(gateway_url, api_key)
    assert raw.headers["x-skillgate-served-by"] == "student"
    assert raw.headers["x-skillgate-verdict"] == "pass"
    assert "city" in json.loads(raw.parse().choices[0].message.content)
    (leg,) = row.legs
    assert (leg["model"], leg["verdict"]) == (f"hosted_vllm/{v1.name}", "pass")

    # v2 (a bad candidate) activated: v1 is retired but stays loaded for calls that already read it.
    services.adapter_activate(adapter_id=v2.pk)
    assert set(server.models()) >= {v1.name, v2.name}
    assert Adapter.objects.get(pk=v1.pk).status == Adapter.Status.RETIRED
    raw, row = ask(gateway_url, api_key)
    assert row.legs[0]["model"] == f"hosted_vllm/{v2.name}" and row.legs[0]["verdict"] == "fail"
    assert raw.headers["x-skillgate-fallback"] == "true"

    # Rollback: v1 serves again at once; v2 is retired and never a rollback target again.
    restored = services.adapter_rollback(profile_id=profile.pk)
    assert restored is not None and restored.pk == v1.pk and restored.status == Adapter.Status.ACTIVE
    v2.refresh_from_db()
    assert v2.status == Adapter.Status.RETIRED and v2.rolled_back_at is not None
    raw, row = ask(gateway_url, api_key)
    assert raw.headers["x-skillgate-served-by"] == "student"
    assert row.legs[0]["model"] == f"hosted_vllm/{v1.name}" and row.legs[0]["verdict"] == "pass"

    # Unloading waits out the grace period, then removes only the retired adapter.
    assert services.adapters_unload_retired(grace_s=3600) == []
    assert v2.name in server.models()
    assert services.adapters_unload_retired(grace_s=0) == [v2.name]
    assert v2.name not in server.models() and v1.name in server.models()
    assert services.adapters_unload_retired(grace_s=0) == []  # already unloaded

    # Rolling back the first adapter returns the profile to the base model.
    assert services.adapter_rollback(profile_id=profile.pk) is None
    assert TaskProfile.objects.get(pk=profile.pk).student_adapter == ""
    with pytest.raises(DeployError, match="no active adapter"):
        services.adapter_rollback(profile_id=profile.pk)


@pytest.mark.django_db(transaction=True)
def test_an_adapter_vllm_cannot_load_is_not_activated(
    server: VllmServer, base: Path, backends: dict[str, Backend], tmp_path: Path
) -> None:
    Backend.objects.filter(name="student").update(model="hosted_vllm/tiny-base", api_base=server.base_url)
    profile = TaskProfileFactory.create(name="city-json", verifier=narrow_task.VERIFIER)
    missing = make_adapter(profile, 1, tmp_path / "missing", base)
    with pytest.raises(DeployError, match="refused"):
        services.adapter_activate(adapter_id=missing.pk)
    missing.refresh_from_db()
    assert missing.status == Adapter.Status.CANDIDATE and not missing.is_loaded
    assert TaskProfile.objects.get(pk=profile.pk).student_adapter == ""
    assert missing.name not in server.models()
    # An adapter without a successful training run is refused before vLLM is asked.
    untrained = AdapterFactory.create(profile=profile, version=2, path=str(tmp_path), base_model=str(base))
    with pytest.raises(DeployError, match="no successful training run"):
        services.adapter_activate(adapter_id=untrained.pk)
