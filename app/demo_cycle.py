"""The learning loop end to end on the running service (`make demo-cycle`, after `make run`).

Every extract-json capital goes through the gateway with the real openai SDK: the held-out ones (one
prompt in ``SKILLGATE_CYCLE_HELDOUT_SHARDS``, by hash; never trained on) first, to measure the student
before, then the rest, whose failures the cycle replays. A cycle is started (or, when the failures
threshold already started one, followed) and runs on the service's Celery worker: replay on the teacher
-> SkillBook -> LoRA training with TRL on the ``gpu`` queue -> router -> admission by held-out replay,
which loads an admitted adapter into the running vLLM. Then the held-out calls go through the gateway
again and the two measurements are printed side by side, with the model that served the student leg.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import openai

from app.demo import CAPITALS, extract_json_call
from app.traffic import demo_client
from core.money import money_display
from routing.models import Invocation, TaskProfile
from training.models import Adapter, Cycle, TrainingRun
from training.services.cycle import cycle_start
from training.services.cycle.calls import split_of

PROFILE = "extract-json"
# vLLM batches concurrent requests: a few calls at once go faster than one by one even on 2 cores.
CONCURRENCY = 4


@dataclass(frozen=True)
class Summary:
    """What a batch of calls measured, from their ledger rows."""

    calls: int
    direct: float  # the student's own answer passed the verifier
    policy: float  # the answer the caller got passed (student, or the teacher after a failure)
    fallback: float
    cost_usd: Decimal
    student_models: Counter[str]

    def line(self) -> str:
        models = ", ".join(f"{name} x{count}" for name, count in self.student_models.most_common())
        return (
            f"{self.calls} calls: student direct pass {self.direct:.2f}, policy pass {self.policy:.2f}, "
            f"fallback {self.fallback:.2f}, cost {money_display(self.cost_usd)}; "
            f"student model: {models or '-'}"
        )


def change(before: Summary, after: Summary) -> str:
    """The held-out calls' measurements before and after the cycle, on one line."""
    return (
        f"held-out student direct pass {before.direct:.2f} -> {after.direct:.2f}, policy pass "
        f"{before.policy:.2f} -> {after.policy:.2f}, "
        f"cost {money_display(before.cost_usd)} -> {money_display(after.cost_usd)}"
    )


def summarize(calls: Sequence[Invocation]) -> Summary:
    n = max(len(calls), 1)
    student_legs = [[leg for leg in c.legs if leg["role"] == "student"] for c in calls]
    return Summary(
        calls=len(calls),
        direct=sum(any(leg["verdict"] == "pass" for leg in legs) for legs in student_legs) / n,
        policy=sum(c.verdict == Invocation.Verdict.PASS for c in calls) / n,
        fallback=sum(c.fallback for c in calls) / n,
        cost_usd=sum((c.cost_usd for c in calls), Decimal(0)),
        # "hosted_vllm/<adapter>": the model vLLM served, the base model's name or an adapter's
        student_models=Counter(leg["model"].split("/", 1)[-1] for legs in student_legs for leg in legs),
    )


def send(client: openai.OpenAI, bodies: Sequence[dict[str, Any]]) -> list[Invocation]:
    """Sends the calls (a few at a time) and returns their ledger rows."""

    def one(body: dict[str, Any]) -> str:
        raw = client.chat.completions.with_raw_response.create(**body)
        return raw.headers["x-skillgate-invocation"]

    with ThreadPoolExecutor(CONCURRENCY) as pool:
        ids = list(pool.map(one, bodies))
    # The server group-commits rows a few milliseconds after answering (LEDGER_WRITER "batched").
    deadline = time.monotonic() + 30
    rows = list(Invocation.objects.filter(pk__in=ids))
    while len(rows) < len(set(ids)) and time.monotonic() < deadline:
        time.sleep(0.05)
        rows = list(Invocation.objects.filter(pk__in=ids))
    return rows


def follow(cycle_id: int, timeout_s: float, poll_s: float = 5.0) -> Iterator[str]:
    """Yields a line whenever the cycle moves (stage, status, an eighth of its training run) until it
    ends."""
    deadline = time.monotonic() + timeout_s
    last: tuple[object, ...] = ()
    while time.monotonic() < deadline:
        cycle = Cycle.objects.select_related("training_run").get(pk=cycle_id)
        line = f"{cycle.stage} {cycle.status}"
        moved: tuple[object, ...] = (cycle.stage, cycle.status)
        run: TrainingRun | None = cycle.training_run
        if run is not None and cycle.stage == Cycle.Stage.ADAPTER:
            losses = [p["loss"] for p in run.progress if p.get("loss") is not None]
            line += f" (training {run.status}: step {run.step}/{run.total_steps}"
            line += f", loss {losses[-1]:.3f})" if losses else ")"
            moved += (run.status, run.step // max(run.total_steps // 8, 1))
        if moved != last:
            yield line
            last = moved
        if cycle.status not in Cycle.UNFINISHED:
            return
        time.sleep(poll_s)
    raise TimeoutError(f"cycle #{cycle_id} did not finish in {timeout_s:.0f} s")


def run_demo_cycle(base_url: str, *, timeout_s: float, say: Callable[[str], None]) -> bool:
    """The whole loop; True when an adapter was admitted and the held-out calls then pass more often."""
    profile = TaskProfile.objects.get(name=PROFILE)
    bodies = [extract_json_call(city, country) for city, country in CAPITALS]
    heldout = [b for b in bodies if split_of(b["messages"]) == "heldout"]
    train = [b for b in bodies if split_of(b["messages"]) == "train"]
    with demo_client(f"{base_url}/v1", name="demo-cycle") as client:
        say(f"{len(heldout)} held-out calls (never trained on) through the gateway...")
        before = summarize(send(client, heldout))
        say(f"before: {before.line()}")
        say(f"{len(train)} training calls through the gateway...")
        say(f"training traffic: {summarize(send(client, train)).line()}")
        cycle, created = cycle_start(profile_id=profile.pk, trigger=Cycle.Trigger.DEMO)
        say(f"cycle #{cycle.pk} " + ("started" if created else f"already running (trigger {cycle.trigger})"))
        for line in follow(cycle.pk, timeout_s):
            say(f"cycle #{cycle.pk}: {line}")
        cycle.refresh_from_db()
        if cycle.status != Cycle.Status.SUCCEEDED:
            say(f"cycle #{cycle.pk} {cycle.status}: {cycle.error}")
            return False
        admission = cycle.admission
        if admission is None:
            say(f"no admission: {cycle.stats.get('admission', {})}")
            return False
        say(
            f"admission #{admission.pk} ({admission.kind}): {admission.decision}, {admission.reason} "
            f"[active {admission.active_metrics}, candidate {admission.candidate_metrics}]"
        )
        active = Adapter.objects.filter(profile=profile, status=Adapter.Status.ACTIVE).first()
        say(f"active adapter: {active.name} (loaded into vLLM)" if active else "no active adapter")
        after = summarize(send(client, heldout))
        say(f"after:  {after.line()}")
        say(change(before, after))
        served = active is not None and after.student_models.get(active.name, 0) == after.calls
        return admission.decision == admission.Decision.ADMITTED and served and after.direct > before.direct
