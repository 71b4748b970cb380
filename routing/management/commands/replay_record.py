"""Record a real replay file: the HumanEval+MBPP tasks through the gateway on the student AND the teacher.

    manage.py replay_record --out var/he_mbpp_replay.jsonl --key sg-... [--url http://127.0.0.1:8000]
                            [--split eval|train|all] [--limit 50] [--profile code]
                            [--student student] [--teacher teacher] [--concurrency 4]

Each task (``EVAL_DIR/he_mbpp.jsonl``: prompt, entry point, tests) becomes one call naming the
profile and carrying a ``python_tests`` verifier with the task's tests. It is sent twice, with the
model set to the student's and then the teacher's backend name (the gateway runs exactly that
backend and verifies its answer in the sandbox). The executed tests are the ground truth, so
``correct`` is the verdict. Cost comes from the gateway (``x-skillgate-cost-usd``); latency is the
call's wall time as the client sees it (generation + verification). The output is the replay
format of ``router_eval`` and ``replay_export``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing.models import TaskProfile
from routing.router.learning.code_calls import load_tasks, task_call
from routing.router.learning.records import Outcome, ReplayRecord, write_jsonl


class Recorder:
    def __init__(self, *, url: str, key: str, profile: str, timeout_s: float) -> None:
        self.client = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {key}", "X-Skillgate-Task": profile},
            timeout=timeout_s,
        )
        self.profile = profile

    def outcome(self, call: dict[str, Any], model: str) -> Outcome:
        started = time.perf_counter()
        try:
            response = self.client.post(
                "/v1/chat/completions", json={"model": model, "temperature": 0, **call}
            )
        except httpx.HTTPError:
            return Outcome("error", None, 0.0, (time.perf_counter() - started) * 1000)
        latency = (time.perf_counter() - started) * 1000
        if response.status_code in (401, 403, 404):
            raise CommandError(
                f"the gateway refused the call ({response.status_code}): {response.text[:300]}"
            )
        if response.status_code == 400:
            raise CommandError(f"the gateway rejected the call: {response.text[:300]}")
        verdict = response.headers.get("x-skillgate-verdict", "error") if response.is_success else "error"
        cost = float(response.headers.get("x-skillgate-cost-usd") or 0.0)
        correct = {"pass": True, "fail": False}.get(verdict)
        return Outcome(verdict, correct, cost, latency)

    def record(self, task: dict[str, Any], student: str, teacher: str) -> ReplayRecord:
        call = task_call(task, self.profile)
        return ReplayRecord(
            id=str(task["task_id"]),
            task_id=str(task["task_id"]),
            profile=self.profile,
            request={"messages": call["messages"], "tools": []},
            has_verifier=True,
            turn_index=0,
            skillbook_matched=False,
            student=self.outcome(call, student),
            teacher=self.outcome(call, teacher),
            meta={"origin": "he_mbpp", "split": task.get("split"), "source": task.get("_src")},
        )


class Command(BaseCommand):
    help = "Run the HumanEval+MBPP tasks on the student and the teacher through the gateway; write a replay."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, help="JSONL replay file to write.")
        parser.add_argument("--url", default="http://127.0.0.1:8000", help="The gateway's base URL.")
        parser.add_argument("--key", help="Gateway API key (default: $SKILLGATE_API_KEY).")
        parser.add_argument("--tasks", help="Task file (default: EVAL_DIR/he_mbpp.jsonl).")
        parser.add_argument("--split", choices=["train", "eval", "all"], default="all")
        parser.add_argument("--limit", type=int, help="At most this many tasks.")
        parser.add_argument("--profile", default="code", help="Task profile the calls name.")
        parser.add_argument("--student", default="student", help="Student backend name.")
        parser.add_argument("--teacher", default="teacher", help="Teacher backend name.")
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument("--timeout-s", type=float, default=300.0)

    def handle(self, *args: Any, **options: Any) -> None:
        key = options["key"] or settings.SKILLGATE_API_KEY
        if not key:
            raise CommandError("give --key or set SKILLGATE_API_KEY")
        path = Path(options["tasks"]) if options["tasks"] else Path(settings.EVAL_DIR) / "he_mbpp.jsonl"
        if not path.exists():
            raise CommandError(f"no task file at {path}")
        tasks = load_tasks(path, options["split"], options["limit"])
        # A gateway on this database needs the profile the calls name; each call brings its tests, so
        # the profile accepts per-call verifiers (the key must hold the verifiers:call scope).
        TaskProfile.objects.get_or_create(
            name=options["profile"],
            defaults={
                "description": "Python tasks verified by their tests (python_tests in each call).",
                "allow_call_verifier": True,
            },
        )
        recorder = Recorder(
            url=options["url"], key=key, profile=options["profile"], timeout_s=options["timeout_s"]
        )

        def records() -> Iterator[ReplayRecord]:
            with ThreadPoolExecutor(max_workers=max(1, options["concurrency"])) as pool:
                yield from pool.map(
                    lambda t: recorder.record(t, options["student"], options["teacher"]), tasks
                )

        written: list[ReplayRecord] = []

        def tally() -> Iterator[ReplayRecord]:
            for record in records():
                written.append(record)
                yield record

        count = write_jsonl(tally(), options["out"])
        student_pass = sum(1 for r in written if r.student and r.student.ok)
        teacher_pass = sum(1 for r in written if r.teacher and r.teacher.ok)
        self.stdout.write(
            f"wrote {count} records to {options['out']}: student passes {student_pass}, "
            f"teacher passes {teacher_pass}, needs the teacher {sum(1 for r in written if r.needs_teacher)}\n"
        )
