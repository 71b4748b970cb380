"""The MERA cycle bench's run (bench/mera_cycle.py parses the arguments and sets the environment the
settings read, then imports this module, which sets Django up with them): the database, the student on
vLLM, the teacher, the gateway, then per cycle train traffic, a cycle through the stage services and the
held-out tasks."""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import openai
import uvicorn
from django.core.management import call_command

import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
from app.demo import PROFILES
from app.demo_cycle import summarize
from bench import bfcl_cycle
from bench.mera_report import BFCL_HEADER, HEADER, bfcl_categories, bfcl_row, report, row
from bench.mera_tasks import Task, code_tasks, narrow_tasks, structured_tasks, stub_teacher
from bench.support import narrow_task
from bench.support.openai_stub import OpenAIStub
from bench.support.vllm import VllmServer, free_port
from routing.models import Backend, Invocation, TaskProfile
from routing.services import api_key_create
from training.models import Cycle, TrainingSettings
from training.services.adapters import training_run_execute
from training.services.cycle import cycle_stage_run, cycle_start, cycles_poll
from training.services.cycle.calls import split_of


def start_gateway() -> tuple[str, Any]:
    port = free_port()
    config = uvicorn.Config("app.asgi:application", host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the gateway did not start")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}", server


def send(client: Any, tasks: list[Task], model: str) -> list[Any]:
    before = set(Invocation.objects.values_list("pk", flat=True))
    for task in tasks:
        client.chat.completions.create(
            model=model, messages=task.messages, temperature=0, extra_body={"metadata": task.metadata}
        )
    return list(Invocation.objects.exclude(pk__in=before))


def measure(calls: list[Any], teacher: dict[str, float]) -> dict[str, float]:
    s = summarize(calls)
    cost_rel = float(s.cost_usd) / teacher["cost"] if teacher["cost"] else float("nan")
    return {"direct": s.direct, "policy": s.policy, "fallback": s.fallback, "cost_rel": cost_rel}


def run_cycle(profile_id: int) -> Any:
    """One cycle through the stage services, as the Celery worker runs them; training in-process."""
    cycle, _ = cycle_start(profile_id=profile_id, trigger=Cycle.Trigger.BENCH)
    while True:
        cycle.refresh_from_db()
        if cycle.status == Cycle.Status.QUEUED:
            cycle_stage_run(cycle_id=cycle.pk, stage=cycle.stage)
        elif cycle.status == Cycle.Status.WAITING:
            assert cycle.training_run_id is not None
            try:
                training_run_execute(run_id=cycle.training_run_id)
            except Exception as exc:  # recorded on the run; the cycle goes on without the adapter
                print(f"  training failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            cycles_poll()
        else:
            return cycle


def run(args: argparse.Namespace, run_dir: Path, base_model: Path) -> None:
    """The bench, on the database and settings bench.mera_cycle.configure() chose."""
    call_command("migrate", verbosity=0)
    pairs: list[Any] = []
    if args.task == "bfcl":
        categories = tuple(args.bfcl_categories.split(",")) if args.bfcl_categories else None
        pairs = bfcl_cycle.tasks(categories, args.bfcl_per_category)
        tasks = [Task(body["messages"], body["metadata"], "") for _, body in pairs]
    elif args.task == "code":
        tasks = code_tasks(args.code_tasks)
    else:
        tasks = structured_tasks() if args.task == "structured" else narrow_tasks()
    heldout = [t for t in tasks if split_of(t.messages) == "heldout"]
    train = [t for t in tasks if split_of(t.messages) == "train"]
    heldout_pairs = [p for p in pairs if split_of(p[1]["messages"]) == "heldout"]
    train_pairs = [p for p in pairs if split_of(p[1]["messages"]) == "train"]
    print(f"{len(train)} train tasks in {args.cycles} batches, {len(heldout)} held out", file=sys.stderr)
    stub = None
    if args.teacher == "stub" and not args.teacher_url:
        stub = (
            OpenAIStub(responder=bfcl_cycle.stub_responder(pairs)).start() if pairs else stub_teacher(tasks)
        )
    served = f"{args.student}-student"
    env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    if args.task == "bfcl":  # tool calls come back as tool_calls, parsed from <tool_call> blocks
        env["EXTRA_ARGS"] = "--enable-auto-tool-choice --tool-call-parser hermes"
        env["MAX_MODEL_LEN"] = "2048" if args.student == "tiny" else "4096"
    vllm = VllmServer(base_model, served, log_dir=run_dir, env=env, startup_timeout=900)
    started = time.monotonic()
    vllm.start()
    print(f"vLLM up in {time.monotonic() - started:.0f} s", file=sys.stderr)
    try:
        if args.teacher_url or stub is not None:
            teacher_url = args.teacher_url or (stub.base_url if stub is not None else "")
            teacher_model, samples = args.teacher_model, 1
        elif pairs:  # BFCL: the base model at best-of-n, filtered by BFCL's checker (bench/bfcl_cycle.py)
            items = {bfcl_cycle.key(body["messages"]): item for item, body in pairs}
            stub = bfcl_cycle.BfclTeacher(vllm.base_url, served, items, samples=args.samples).start()
            teacher_url, teacher_model, samples = stub.base_url, args.teacher_model, 1
        else:  # the demo teacher: the base model, best-of-n filtered by the verifier
            teacher_model, teacher_url, samples = served, vllm.base_url, args.samples
        Backend.objects.create(
            name="teacher",
            role="teacher",
            model=f"{'hosted_vllm' if samples > 1 else 'openai'}/{teacher_model}",
            api_base=teacher_url,
            api_key_env="SKILLGATE_TEACHER_API_KEY",
            samples=samples,
            input_cost_per_token=Decimal("0.0000005"),
            output_cost_per_token=Decimal("0.000001"),
        )
        Backend.objects.create(
            name="student",
            role="student",
            model=f"hosted_vllm/{served}",
            api_base=vllm.base_url,
            **(
                {"min_votes": args.student_votes[0], "samples": args.student_votes[1]}
                if args.student_votes
                else {}
            ),
            input_cost_per_token=Decimal("0.00000005"),
            output_cost_per_token=Decimal("0.0000001"),
        )
        narrow = {"policy": "student_with_fallback", "verifier": narrow_task.VERIFIER, "max_tokens": 16}
        name, fields = {
            "structured": ("extract-json", PROFILES["extract-json"]),
            "narrow": ("city-json", narrow),
            "code": ("python-code", PROFILES["python-code"]),
            "bfcl": (
                bfcl_cycle.PROFILE,
                {
                    **bfcl_cycle.profile_fields(args.bfcl_verifier),
                    "policy_params": {"teacher_sample_rate": args.sample_rate},
                },
            ),
        }[args.task]
        profile = TaskProfile.objects.create(name=name, **fields)
        if args.grpo:
            TrainingSettings.objects.create(profile=profile, grpo=True)
        gateway_url, server = start_gateway()
        # The benchmark's own calls bring their tests (code tasks): it is the operator's trusted tooling.
        _, key = api_key_create(name="bench", scopes=["llm", "verifiers:call"], trusted_for_training=True)
        client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=key, max_retries=0, timeout=600)
        if args.task == "bfcl":
            header, lines, extra = bfcl_loop(args, client, profile.pk, train_pairs, heldout_pairs)
            server.should_exit = True
            report(args, base_model, len(train), len(heldout), header, lines, extra)
            return
        teacher_calls = send(client, heldout, "teacher")
        teacher = {
            "pass": sum(c.verdict == "pass" for c in teacher_calls) / max(len(teacher_calls), 1),
            "cost": float(sum((c.cost_usd for c in teacher_calls), Decimal(0))),
        }
        header = HEADER
        lines = [row(0, None, measure(send(client, heldout, "auto"), teacher), teacher)]
        print(header + "\n" + lines[0], file=sys.stderr)
        batches = [train[i :: args.cycles] for i in range(args.cycles)]
        for k, batch in enumerate(batches, start=1):
            send(client, batch, "auto")
            cycle = run_cycle(profile.pk)
            lines.append(row(k, cycle, measure(send(client, heldout, "auto"), teacher), teacher))
            print(lines[-1], file=sys.stderr)
        server.should_exit = True
    finally:
        vllm.stop()
        if stub is not None:
            stub.stop()
    report(args, base_model, len(train), len(heldout), header, lines)
    shutil.rmtree(run_dir / "adapters", ignore_errors=True)


def bfcl_loop(
    args: argparse.Namespace, client: Any, profile_id: int, train: list[Any], heldout: list[Any]
) -> tuple[str, list[str], str]:
    """The BFCL bench: teacher alone once, then per cycle a train batch, a cycle, and the held-out items
    through the policy and through the student alone."""

    def send(pairs: list[Any], model: str) -> list[dict[str, Any]]:
        return bfcl_cycle.send(client, pairs, model, args.bfcl_verifier)

    teacher_answers = send(heldout, "teacher")
    teacher = bfcl_cycle.summary(teacher_answers)
    answers = send(heldout, "student")
    direct = first = bfcl_cycle.summary(answers)
    policy = bfcl_cycle.summary(send(heldout, "auto"))
    perfect = bfcl_cycle.perfect_router(answers, teacher_answers)
    lines = [bfcl_row(0, None, direct, policy, teacher, perfect)]
    print(BFCL_HEADER + "\n" + lines[0], file=sys.stderr)
    for k, batch in enumerate((train[i :: args.cycles] for i in range(args.cycles)), start=1):
        sampled = bfcl_cycle.run_samples(send(batch, "auto"))
        print(f"  cycle {k}: {sampled} background teacher samples on the train batch", file=sys.stderr)
        cycle = run_cycle(profile_id)
        answers = send(heldout, "student")
        direct = bfcl_cycle.summary(answers)
        policy = bfcl_cycle.summary(send(heldout, "auto"))
        perfect = bfcl_cycle.perfect_router(answers, teacher_answers)
        lines.append(bfcl_row(k, cycle, direct, policy, teacher, perfect))
        print(lines[-1], file=sys.stderr)
    return BFCL_HEADER, lines, "Per category, held-out:\n\n" + bfcl_categories(first, direct, policy, teacher)
