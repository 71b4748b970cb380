"""The one-machine layout (infra/onebox): a key's budget holds across its web processes (each on its own
SO_REUSEPORT socket), the ledger's spend within it and nothing left reserved. The upstream is the stub."""

from __future__ import annotations

import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from tests.deploy.onebox import HELLO, chat, psql, seed
from tests.support.wait import wait_until

pytestmark = pytest.mark.slow


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
        rows = psql(f"SELECT id FROM routing_invocation WHERE api_key_id = {key}", db).split()
        return set(rows) == answered

    wait_until(committed, timeout=30, interval=0.5, what="every answered call in the ledger")
    spent = Decimal(psql(f"SELECT sum(cost_usd) FROM routing_invocation WHERE api_key_id = {key}", db))
    assert 0 < spent <= budget
    # Once the leases go back (idle), the key's spend is the ledger's and nothing stays reserved.
    state = wait_until(
        lambda: (
            (s := psql(f"SELECT spent_usd, reserved_usd FROM routing_apikey WHERE id = {key}", db))
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
    first = chat(base, seeded["key"], HELLO)
    assert first.status_code == 200, first.text
    row = first.headers["x-skillgate-invocation"]
    cost = wait_until(
        lambda: psql(f"SELECT cost_usd FROM routing_invocation WHERE id = '{row}'", onebox["database"]),
        timeout=30,
        interval=0.5,
        what="the first call's ledger row",
    )
    budget = Decimal(cost) * 10  # about ten calls' worth, for sixty calls
    # Each web process listens on its own SO_REUSEPORT socket and the kernel spreads connections over
    # them by hash: a burst is repeated (a new key each time) until both processes answered some of its
    # calls, each process's own call counter says (the odds of three one-sided bursts are ~1e-6).
    for _ in range(3):
        key = seed(onebox, "--budget", str(budget))
        before = _calls_by_process(folder)
        with ThreadPoolExecutor(max_workers=24) as pool:
            responses = list(pool.map(lambda _, raw=key["key"]: chat(base, raw, HELLO), range(60)))
        statuses = [r.status_code for r in responses]
        assert set(statuses) == {200, 402}, statuses  # the edge was reached, and only refusals past it
        _spend_within_budget(onebox, budget, responses, key["id"])
        after = _calls_by_process(folder)
        served = {p for p, n in after.items() if n > before.get(p, 0)}
        if len(served) == 2:
            break
    assert len(served) == 2, (before, after)
