"""replay_export and router_eval, end to end through manage.py."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import call_command
from django.utils import timezone

from bench.router_data.plot import plot_report
from bench.router_data.synthetic import generate
from routing.router.learning.calibration import Target
from routing.router.learning.evaluate import evaluate_replay
from routing.router.learning.features import hashing_spec, make_featurizer
from routing.router.learning.records import read_jsonl, write_jsonl
from tests.factories import InvocationFactory, TaskProfileFactory

LEGS = [
    {"role": "student", "verdict": "fail", "cost_usd": "0.001", "latency_ms": 100, "verify_ms": 1},
    {"role": "teacher", "verdict": "pass", "cost_usd": "0.02", "latency_ms": 900, "verify_ms": 1},
]


@pytest.mark.django_db
def test_replay_export_streams_the_ledger(tmp_path):
    code = TaskProfileFactory.create(name="code", verifier={"kind": "python_tests"})
    other = TaskProfileFactory.create(name="other")
    old = timezone.now() - dt.timedelta(days=10)
    InvocationFactory.create(profile=code, legs=LEGS, created_at=old)
    InvocationFactory.create_batch(3, profile=code, legs=LEGS)
    InvocationFactory.create(profile=other, legs=LEGS[:1])
    out = tmp_path / "replay.jsonl"
    call_command("replay_export", out=str(out), stderr=io.StringIO())
    assert len(list(read_jsonl(out))) == 5
    since = (timezone.now() - dt.timedelta(days=1)).date().isoformat()
    call_command("replay_export", out=str(out), profile="code", since=since, stderr=io.StringIO())
    records = list(read_jsonl(out))
    assert len(records) == 3 and {r.profile for r in records} == {"code"}
    assert all(r.needs_teacher for r in records)
    call_command("replay_export", out=str(out), complete_only=True, stderr=io.StringIO())
    assert len(list(read_jsonl(out))) == 4


def test_router_eval_prints_the_table_and_saves_the_router(tmp_path):
    replay = tmp_path / "replay.jsonl"
    write_jsonl(generate(700, regime="weak_verifier", seed=8), replay)
    stdout = io.StringIO()
    report = tmp_path / "report.json"
    call_command(
        "router_eval",
        replay=str(replay),
        target=0.95,
        relative=True,
        features="hashing",
        json=str(report),
        stdout=stdout,
    )
    text = stdout.getvalue()
    for name in ["learned (MERA)", "always-teacher", "cascade", "random @", "prompt-only", "oracle", "APGR"]:
        assert name in text
    assert "0.95x always-teacher" in text
    saved = json.loads(report.read_text())
    assert saved["router"]["threshold"] == pytest.approx(saved["router"]["calibration"]["threshold"])


def test_the_bench_draws_the_cost_quality_curves(tmp_path):
    """bench.router_data.plot (matplotlib: the bench extra) on the same kind of report."""
    records = generate(700, regime="weak_verifier", seed=8)
    report = evaluate_replay(records, featurizer=make_featurizer(hashing_spec()), target=Target(0.95, True))
    png = plot_report(report, tmp_path / "curves.png")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.django_db
def test_replay_export_to_stdout():
    InvocationFactory.create(legs=LEGS)
    stdout = io.StringIO()
    call_command("replay_export", out="-", stdout=stdout, stderr=io.StringIO())
    lines = stdout.getvalue().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["student"]["verdict"] == "fail"
