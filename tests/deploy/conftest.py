"""Fixtures of the deploy tests: the one-machine layout (infra/onebox) started once for the test files
that use it (tests/deploy/test_onebox_*.py), its stub upstream and its seeded keys."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from bench.support.narrow_task import FAST
from bench.support.openai_stub import OpenAIStub
from bench.support.tiny_model import tiny_model_dir
from bench.support.vllm import free_port
from tests.deploy.manifests import ROOT
from tests.deploy.onebox import POSTGRES, REDIS, http_get, psql, respond, seed
from tests.support.wait import wait_until


@pytest.fixture(scope="package")
def upstream() -> Iterator[OpenAIStub]:
    with OpenAIStub() as stub:
        stub.responder = respond
        yield stub


@pytest.fixture(scope="package")
def onebox(tmp_path_factory: pytest.TempPathFactory, upstream: OpenAIStub) -> Iterator[dict[str, Any]]:
    if not (shutil.which("psql") and shutil.which("redis-cli")):
        pytest.skip("needs PostgreSQL and Redis clients (and servers) on this machine")
    tag = f"ob{os.getpid()}"
    database = f"skillgate_{tag}"
    psql(f"CREATE DATABASE {database}")
    var = tmp_path_factory.mktemp("onebox")
    port = free_port()
    token = uuid.uuid4().hex
    queues = {
        "CELERY_DEFAULT_QUEUE": f"{tag}-default",
        "CELERY_GPU_QUEUE": f"{tag}-gpu",
        "SKILLGATE_DIAGNOSTICS_QUEUE": f"{tag}-diagnostics",
        "SKILLGATE_CYCLE_QUEUE": f"{tag}-learning",
        "SKILLGATE_EVOLVER_QUEUE": f"{tag}-learning",
    }
    env = {
        "SECRET_KEY": uuid.uuid4().hex * 2,
        "DATABASE_URL": f"{POSTGRES}/{database}",
        "CELERY_BROKER_URL": f"{REDIS}/14",
        "CACHE_URL": f"{REDIS}/15",
        "CACHE_KEY_PREFIX": tag,
        "SKILLGATE_VAR_DIR": str(var),
        "SKILLGATE_LEDGER_WRITER": "batched",
        "PROMETHEUS_MULTIPROC_DIR": str(var / "prometheus"),
        "SKILLGATE_METRICS_TOKEN": token,
        "WEB_PROCESSES": "2",
        "WEB_PORT": str(port),
        "DJANGO_SETTINGS_MODULE": "app.settings",
        # The cycle: a small held-out share, no self-repair retries, started over the API only; its
        # adapter stage trains the tiny model on the gpu worker for a few steps.
        "SKILLGATE_CYCLE_HELDOUT_SHARDS": "2",
        "SKILLGATE_ADMISSION_MIN_ITEMS": "5",
        "SKILLGATE_CYCLE_SELF_REPAIR_TRIES": "0",
        "SKILLGATE_CYCLE_AUTO_FAILURES": "0",
        "SKILLGATE_EVOLVER_SWEEP_S": "0",
        "SKILLGATE_TRAINING_BASE_MODEL": str(tiny_model_dir()),
        "SKILLGATE_TRAINING_HYPERPARAMETERS": json.dumps({**FAST, "sft_steps": 4}),
        "SKILLGATE_ADAPTER_DIR": str(var / "adapters"),
        "SKILLGATE_BUDGET_LEASE_FRACTION": "0.25",
        **queues,
    }
    env_file = var / "env"
    env_file.write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()))  # run.sh sources it
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("SKILLGATE_", "CELERY_", "PROMETHEUS_"))
    }
    clean.pop("DATABASE_URL", None)
    clean.pop("TEST_DATABASE_NAME", None)
    box = subprocess.Popen(
        ["bash", str(ROOT / "infra" / "onebox" / "run.sh"), str(env_file)],
        env=clean,
        cwd=ROOT,
        start_new_session=True,
        stdout=open(var / "run.log", "wb"),  # noqa: SIM115 (the child owns it)
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: box.poll() is not None or http_get(f"{base}/readyz")[0] == 200,
            timeout=240,
            interval=1,
            what="the web processes",
        )
        assert box.poll() is None, (var / "run.log").read_text()[-3000:]
        yield {
            "base": base,
            "token": token,
            "env": {**clean, **env},
            "var": var,
            "queues": queues,
            "box": box,
            "database": database,
        }
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have exited already (a failed start)
            os.killpg(box.pid, signal.SIGTERM)
        try:
            box.wait(150)
        except subprocess.TimeoutExpired:
            os.killpg(box.pid, signal.SIGKILL)
        time.sleep(1)
        psql(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


@pytest.fixture(scope="package")
def seeded(onebox: dict[str, Any], upstream: OpenAIStub) -> dict[str, str]:
    return seed(onebox, upstream.base_url)
