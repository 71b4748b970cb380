"""The one-machine layout (infra/onebox): a learning cycle started over the API runs its stages on the
learning worker and its training (the tiny model) on the gpu worker, with beat's poll in between."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.deploy.onebox import chat, log_of, psql
from tests.support.cycle import CITIES, city_prompt
from tests.support.wait import wait_until

pytestmark = pytest.mark.slow


def test_a_learning_cycle_runs_across_the_learning_and_gpu_workers(
    onebox: dict[str, Any], seeded: dict[str, str]
) -> None:
    base, db = onebox["base"], onebox["database"]
    task = {"X-Skillgate-Task": "extract"}
    calls = [
        chat(base, seeded["key"], {"model": "auto", "messages": city_prompt(*c), "temperature": 0}, **task)
        for c in CITIES
    ]
    assert all(c.status_code == 200 and c.headers["x-skillgate-fallback"] == "true" for c in calls)
    auth = {"Authorization": f"Bearer {seeded['learning']}"}
    started = httpx.post(f"{base}/api/cycles", json={"profile": "extract"}, headers=auth, timeout=60)
    assert started.status_code == 201, started.text
    cycle_id = started.json()["cycle"]["id"]
    cycle: dict[str, Any] = {}

    def finished() -> bool:
        cycle.update(httpx.get(f"{base}/api/cycles/{cycle_id}", headers=auth, timeout=60).json()["cycle"])
        return cycle["status"] in ("succeeded", "failed")

    # Stages on the learning worker, the training run on the gpu worker, beat's poll (30 s) between.
    wait_until(finished, timeout=900, interval=3, what="the cycle to finish")
    assert cycle["status"] == "succeeded", cycle["error"]
    run = cycle["stats"]["adapter"]["training_run"]
    assert psql(f"SELECT status FROM training_trainingrun WHERE id = {run}", db) == "succeeded"
    # The stub student cannot load adapters: the trained one is refused, the SkillBook admitted alone.
    assert "load_error" in cycle["stats"]["adapter"]
    assert cycle["admission"]["decision"] == "admitted", cycle["admission"]["reason"]
    stage, train = "Task training.tasks.cycle.cycle_stage[", "Task training.tasks.adapters.adapter_train["
    assert stage in log_of(onebox, "worker-learning") and train not in log_of(onebox, "worker-learning")
    assert train in log_of(onebox, "worker-gpu") and stage not in log_of(onebox, "worker-gpu")
