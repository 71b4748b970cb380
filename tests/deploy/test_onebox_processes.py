"""The one-machine layout (infra/onebox) on this machine's PostgreSQL and Redis: run.sh migrates and starts
supervisord; every program runs, and each queue has exactly one worker consuming it (the gpu worker one
task at a time). The onebox is tests/deploy/conftest.py's, shared by tests/deploy/test_onebox_*.py."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from celery import Celery

from tests.deploy.manifests import ROOT
from tests.deploy.onebox import PROGRAMS
from tests.support.wait import wait_until

pytestmark = pytest.mark.slow


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


def test_each_queue_has_exactly_one_worker(onebox: dict[str, Any]) -> None:
    # Celery's Settings.broker_url prefers the CELERY_BROKER_URL environment variable to the broker
    # argument, so ``Celery(broker=...)`` in a test process whose environment names another broker
    # (.ci/run's) inspects that one and hears no worker; the read and write URLs win over it. Not the
    # current app: the project's shared tasks would then be sent to the onebox's broker by every later
    # test of this process (test_adapters, test_evolver_worker: their workers never got their message).
    url = onebox["env"]["CELERY_BROKER_URL"]
    app = Celery(broker=url, set_as_current=False)
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
