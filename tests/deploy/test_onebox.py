"""The one-machine layout (infra/onebox) end to end, on this machine's PostgreSQL and Redis: run.sh
migrates and starts supervisord; every program runs; each queue has exactly one worker consuming it;
/metrics answers from the web processes (multiprocess mode) and the real Prometheus scrapes it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from tests.deploy.manifests import ROOT
from tests.support.vllm import free_port
from tests.support.wait import wait_until

pytestmark = pytest.mark.slow
POSTGRES = os.environ.get("SKILLGATE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432")
REDIS = os.environ.get("SKILLGATE_TEST_REDIS", "redis://127.0.0.1:6379")
PROGRAMS = {"web", "worker-default", "worker-diagnostics", "worker-learning", "worker-gpu", "beat"}


def _psql(sql: str) -> None:
    subprocess.run(
        ["psql", f"{POSTGRES}/postgres", "-q", "-c", sql], check=True, capture_output=True, timeout=60
    )


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
def onebox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
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
        **queues,
    }
    env_file = var / "env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
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
        }
    finally:
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
        lambda: (s := status()) and set(s) == PROGRAMS and set(s.values()) == {"RUNNING"} and s,
        timeout=120,
        interval=1,
        what="every program RUNNING",
    )
    assert running


@pytest.mark.xfail(
    reason="open defect (issue 17): with the suite's PostgreSQL + Redis environment (.ci/run) no worker "
    "answers Celery's inspect within 300 s, though every program is RUNNING; it passed on the embedded "
    "broker settings it was written with. Not yet understood.",
    strict=False,
)
def test_each_queue_has_exactly_one_worker(onebox: dict[str, Any]) -> None:
    app = Celery(broker=onebox["env"]["CELERY_BROKER_URL"])
    expected = set(onebox["queues"].values())

    def consumers() -> dict[str, list[str]] | None:
        replies = app.control.inspect(timeout=10).active_queues() or {}  # a loaded 2-core machine
        by_queue: dict[str, list[str]] = {}
        for worker, queues in replies.items():
            for queue in queues:
                by_queue.setdefault(queue["name"], []).append(worker)
        return by_queue if expected <= set(by_queue) else None

    by_queue = wait_until(consumers, timeout=300, interval=2, what="every worker consuming its queue")
    assert by_queue is not None
    assert {q: len(by_queue[q]) for q in expected} == dict.fromkeys(expected, 1)
    gpu = by_queue[onebox["queues"]["CELERY_GPU_QUEUE"]][0]
    stats = app.control.inspect(timeout=3, destination=[gpu]).stats() or {}
    assert stats[gpu]["pool"]["max-concurrency"] == 1
    assert stats[gpu]["prefetch_count"] == 1


def test_the_real_prometheus_scrapes_metrics(onebox: dict[str, Any], tmp_path: Path) -> None:
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

        def both_up() -> list[dict[str, Any]]:
            result = query("skillgate_collector_up == 1")
            return result if len(result) == 2 else []

        sources = wait_until(
            both_up,
            timeout=30,
            interval=1,
            what="both sources up",
        )
        assert {s["metric"]["collector"] for s in sources} == {"database", "broker"}
        depths = {s["metric"]["queue"] for s in query("skillgate_queue_depth")}
        assert depths == set(onebox["queues"].values())
        assert query("skillgate_training_runs")
    finally:
        os.killpg(prometheus.pid, signal.SIGTERM)
        prometheus.wait(30)
