"""The one-machine layout (infra/onebox) end to end, on this machine's PostgreSQL and Redis: run.sh
migrates and starts supervisord; every program runs; each queue has exactly one worker consuming it;
a key's budget holds across the web processes; a learning cycle runs its stages on the learning
worker and its training on the gpu worker (the tiny model); /metrics sums the web processes
(multiprocess mode) and the real Prometheus scrapes it. The upstream is the stub (the world's edge)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from celery import Celery
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from bench.support.narrow_task import FAST
from bench.support.openai_stub import OpenAIStub, Reply
from bench.support.tiny_model import tiny_model_dir
from bench.support.vllm import free_port
from tests.deploy.manifests import ROOT
from tests.support.cycle import CITIES, city_prompt, responder, student, teacher, user_text
from tests.support.wait import wait_until

pytestmark = pytest.mark.slow
POSTGRES = os.environ.get("SKILLGATE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432")
REDIS = os.environ.get("SKILLGATE_TEST_REDIS", "redis://127.0.0.1:6379")
PROGRAMS = {"web", "worker-default", "worker-diagnostics", "worker-learning", "worker-gpu", "beat"}
HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}


def _psql(sql: str, database: str = "postgres") -> str:
    done = subprocess.run(
        ["psql", f"{POSTGRES}/{database}", "-q", "-At", "-c", sql],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.strip()


def _respond(body: dict[str, Any]) -> Reply:
    """HELLO gets max_tokens words after a short delay (the budget test); the cycle's calls get a
    student that is wrong without a SkillBook and a teacher that answers and writes one."""
    if user_text(body) == "hi":
        return Reply(content=" ".join(["word"] * 50), delay_s=random.uniform(0.1, 0.5))
    return responder(student=student, teacher=teacher)(body)


def _seed(onebox: dict[str, Any], *args: str) -> dict[str, str]:
    """Runs tests/deploy/onebox_seed.py in the onebox's environment, against its database."""
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "tests.deploy.onebox_seed", *args],
        env=onebox["env"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return result


def _chat(base: str, key: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}", **headers},
        timeout=120,
    )


def _log(onebox: dict[str, Any], program: str) -> str:
    return "".join(p.read_text(errors="replace") for p in (onebox["var"] / "logs").glob(f"{program}-*.log"))


def _get(url: str, token: str = "") -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, ""


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIStub]:
    with OpenAIStub() as stub:
        stub.responder = _respond
        yield stub


@pytest.fixture(scope="module")
def onebox(tmp_path_factory: pytest.TempPathFactory, upstream: OpenAIStub) -> Iterator[dict[str, Any]]:
    if not (shutil.which("psql") and shutil.which("redis-cli")):
        pytest.skip("needs PostgreSQL and Redis clients (and servers) on this machine")
    tag = f"ob{os.getpid()}"
    database = f"skillgate_{tag}"
    _psql(f"CREATE DATABASE {database}")
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
            lambda: box.poll() is not None or _get(f"{base}/readyz")[0] == 200,
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
        _psql(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def test_every_program_runs_under_the_supervisor(onebox: dict[str, Any]) -> None:
    def status() -> dict[str, str]:
        done = subprocess.run(
            [
                str(ROOT / ".venv" / "bin" / "python"),
                "-m",
                "supervisor.supervisorctl",
                "-c",
                str(ROOT / "infra" / "onebox" / "supervisord.conf"),
                "status",
            ],
            env=onebox["env"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return {line.split()[0]: line.split()[1] for line in done.stdout.splitlines() if line.strip()}

    running = wait_until(
        lambda: (
            (s := status())
            and {n.split(":")[0] for n in s} == PROGRAMS
            and set(s.values()) == {"RUNNING"}
            and s
        ),
        timeout=120,
        interval=1,
        what="every program RUNNING",
    )
    assert sorted(n for n in running if n.startswith("web:")) == ["web:web-0", "web:web-1"]  # WEB_PROCESSES


@pytest.fixture(scope="module")
def seeded(onebox: dict[str, Any], upstream: OpenAIStub) -> dict[str, str]:
    return _seed(onebox, upstream.base_url)


def test_each_queue_has_exactly_one_worker(onebox: dict[str, Any]) -> None:
    # Celery's Settings.broker_url prefers the CELERY_BROKER_URL environment variable to the broker
    # argument, so ``Celery(broker=...)`` in a test process whose environment names another broker
    # (.ci/run's) inspects that one and hears no worker; the read and write URLs win over it.
    url = onebox["env"]["CELERY_BROKER_URL"]
    app = Celery(broker=url)
    app.conf.broker_read_url = app.conf.broker_write_url = url
    expected = set(onebox["queues"].values())

    def consumers() -> dict[str, list[str]] | None:
        replies = app.control.inspect(timeout=10).active_queues() or {}
        by_queue: dict[str, list[str]] = {}
        for worker, queues in replies.items():
            for queue in queues:
                by_queue.setdefault(queue["name"], []).append(worker)
        return by_queue if expected <= set(by_queue) else None

    by_queue = wait_until(consumers, timeout=300, interval=2, what="every worker consuming its queue")
    assert by_queue is not None
    assert {q: len(by_queue[q]) for q in expected} == dict.fromkeys(expected, 1)
    gpu = by_queue[onebox["queues"]["CELERY_GPU_QUEUE"]][0]
    stats = app.control.inspect(timeout=10, destination=[gpu]).stats() or {}
    assert stats[gpu]["pool"]["max-concurrency"] == 1
    assert stats[gpu]["prefetch_count"] == 1


def _calls_by_process(folder: Path) -> dict[str, float]:
    """skillgate_calls_total of each process, read from its own multiprocess file (counter_<pid>.db)."""
    counts = {}
    for path in folder.glob("counter_*.db"):
        with tempfile.TemporaryDirectory() as alone:
            shutil.copy(path, alone)
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=alone)
            counts[path.stem] = sum(
                sample.value
                for metric in registry.collect()
                for sample in metric.samples
                if sample.name == "skillgate_calls_total"
            )
    return {process: n for process, n in counts.items() if n}


def _spend_within_budget(
    onebox: dict[str, Any], budget: Decimal, responses: list[httpx.Response], key: str
) -> None:
    db = onebox["database"]
    answered = {r.headers["x-skillgate-invocation"] for r in responses if r.status_code == 200}

    def committed() -> bool:
        rows = _psql(f"SELECT id FROM routing_invocation WHERE api_key_id = {key}", db).split()
        return set(rows) == answered

    wait_until(committed, timeout=30, interval=0.5, what="every answered call in the ledger")
    spent = Decimal(_psql(f"SELECT sum(cost_usd) FROM routing_invocation WHERE api_key_id = {key}", db))
    assert 0 < spent <= budget
    # Once the leases go back (idle), the key's spend is the ledger's and nothing stays reserved.
    state = wait_until(
        lambda: (
            (s := _psql(f"SELECT spent_usd, reserved_usd FROM routing_apikey WHERE id = {key}", db))
            and Decimal(s.split("|")[1]) == 0
            and s
        ),
        timeout=60,
        interval=1,
        what="the leases returned",
    )
    assert Decimal(state.split("|")[0]) == spent


def test_a_budget_holds_across_the_web_processes(onebox: dict[str, Any], seeded: dict[str, str]) -> None:
    base, folder = onebox["base"], onebox["var"] / "prometheus"
    first = _chat(base, seeded["key"], HELLO)
    assert first.status_code == 200, first.text
    row = first.headers["x-skillgate-invocation"]
    cost = wait_until(
        lambda: _psql(f"SELECT cost_usd FROM routing_invocation WHERE id = '{row}'", onebox["database"]),
        timeout=30,
        interval=0.5,
        what="the first call's ledger row",
    )
    budget = Decimal(cost) * 10  # about ten calls' worth, for sixty calls
    # Each web process listens on its own SO_REUSEPORT socket and the kernel spreads connections over
    # them by hash: a burst is repeated (a new key each time) until both processes answered some of its
    # calls, each process's own call counter says (the odds of three one-sided bursts are ~1e-6).
    for _ in range(3):
        key = _seed(onebox, "--budget", str(budget))
        before = _calls_by_process(folder)
        with ThreadPoolExecutor(max_workers=24) as pool:
            responses = list(pool.map(lambda _, raw=key["key"]: _chat(base, raw, HELLO), range(60)))
        statuses = [r.status_code for r in responses]
        assert set(statuses) == {200, 402}, statuses  # the edge was reached, and only refusals past it
        _spend_within_budget(onebox, budget, responses, key["id"])
        after = _calls_by_process(folder)
        served = {p for p, n in after.items() if n > before.get(p, 0)}
        if len(served) == 2:
            break
    assert len(served) == 2, (before, after)


def test_a_learning_cycle_runs_across_the_learning_and_gpu_workers(
    onebox: dict[str, Any], seeded: dict[str, str]
) -> None:
    base, db = onebox["base"], onebox["database"]
    task = {"X-Skillgate-Task": "extract"}
    calls = [
        _chat(base, seeded["key"], {"model": "auto", "messages": city_prompt(*c), "temperature": 0}, **task)
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
    assert _psql(f"SELECT status FROM training_trainingrun WHERE id = {run}", db) == "succeeded"
    # The stub student cannot load adapters: the trained one is refused, the SkillBook admitted alone.
    assert "load_error" in cycle["stats"]["adapter"]
    assert cycle["admission"]["decision"] == "admitted", cycle["admission"]["reason"]
    stage, train = "Task training.tasks.cycle.cycle_stage[", "Task training.tasks.adapters.adapter_train["
    assert stage in _log(onebox, "worker-learning") and train not in _log(onebox, "worker-learning")
    assert train in _log(onebox, "worker-gpu") and stage not in _log(onebox, "worker-gpu")


# What /metrics reads besides the processes' own counters (app/observability/views.py).
SOURCES = {"database", "broker", "replicas"}


def test_the_real_prometheus_scrapes_metrics(
    onebox: dict[str, Any], seeded: dict[str, str], tmp_path: Path
) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed")
    status, text = _get(f"{onebox['base']}/metrics")
    assert status == 401
    status, text = _get(f"{onebox['base']}/metrics", onebox["token"])
    assert status == 200 and "skillgate_collector_up" in text
    assert list((onebox["var"] / "prometheus").glob("*.db")), "multiprocess mode: the web processes' files"

    token_file = tmp_path / "token"
    token_file.write_text(onebox["token"])
    port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "skillgate",
                        "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
                        "static_configs": [{"targets": [onebox["base"].removeprefix("http://")]}],
                    }
                ],
            }
        )
    )
    prometheus = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    api = f"http://127.0.0.1:{port}/api/v1/query?query="

    def query(promql: str) -> list[dict[str, Any]]:
        code, body = _get(api + urllib.parse.quote(promql))
        return json.loads(body)["data"]["result"] if code == 200 else []

    try:
        up = wait_until(lambda: query('up{job="skillgate"} == 1'), timeout=60, interval=1, what="a scrape")
        assert up

        def every_source_up() -> list[dict[str, Any]]:
            result = query("skillgate_collector_up == 1")
            return result if len(result) == len(SOURCES) else []

        sources = wait_until(
            every_source_up,
            timeout=30,
            interval=1,
            what="every source up",
        )
        assert {s["metric"]["collector"] for s in sources} == SOURCES
        depths = {s["metric"]["queue"] for s in query("skillgate_queue_depth")}
        assert depths == set(onebox["queues"].values())
        assert query("skillgate_training_runs")

        # Every call counted once, whichever web process answered it: the scrape sums their files.
        def calls() -> float:
            result = query("sum(skillgate_calls_total)")
            return float(result[0]["value"][1]) if result else 0.0

        # One call first, so the counter exists whatever ran before this test, and it is counted.
        first = calls()
        assert _chat(onebox["base"], seeded["key"], HELLO).status_code == 200
        before = wait_until(
            lambda: (total := calls()) >= first + 1 and total, timeout=30, interval=1, what="the calls so far"
        )
        with ThreadPoolExecutor(max_workers=8) as pool:
            answered = list(pool.map(lambda _: _chat(onebox["base"], seeded["key"], HELLO), range(20)))
        assert [r.status_code for r in answered] == [200] * 20
        wait_until(lambda: calls() == before + 20, timeout=30, interval=1, what="twenty more calls counted")
    finally:
        os.killpg(prometheus.pid, signal.SIGTERM)
        prometheus.wait(30)
