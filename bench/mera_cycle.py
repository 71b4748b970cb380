"""The MERA learning cycle, N times on one profile's task set, measured on held-out tasks.

Everything real except the teacher by default: a fresh SQLite database, the gateway (uvicorn, model
``auto``, student first with the teacher on a failed verification), the student served by vLLM (CPU
build) with runtime LoRA loading, the cycle's stages (replay -> SkillBook -> adapter -> router ->
admission, the same services the Celery tasks call, run here in-process one after another) and TRL/PEFT
training in this process. The teacher is, by ``--teacher``: ``best-of-n`` (the demo teacher with no
provider: the student's own base model on the same vLLM, asked for n sampled answers of which the
gateway serves the first that passes the verifier), ``stub`` (a local OpenAI-protocol stub that answers
every structured task correctly and distills a fixed piece of advice; no code tasks) or ``--teacher-url``
(any OpenAI-compatible server, e.g. a provider).

Per cycle: fresh train traffic goes through the gateway, a cycle runs, then the held-out tasks (one
hash shard, never trained on) go through the gateway. Row 0 is before any cycle. Columns: the
student's direct pass rate (its own answer verified), the policy's pass rate (student, teacher on a
failed verification), the teacher alone, cost relative to sending every held-out call to the teacher,
the fallback rate, the admission decision and the wall time of each stage.

    .venv/bin/python -m bench.mera_cycle --quick            # tiny model, narrow task, stub teacher, ~3 min
    .venv/bin/python -m bench.mera_cycle --student smollm2 --cycles 3   # SmolLM2-135M, best-of-4 teacher
    .venv/bin/python -m bench.mera_cycle --task code --teacher-url URL --teacher-model M   # he_mbpp
    .venv/bin/python -m bench.mera_cycle --task bfcl --student tiny --cycles 2 --bfcl-per-category 8
    .venv/bin/python -m bench.mera_cycle --task bfcl --cycles 3 [--grpo]   # BFCL on SmolLM2-135M

With ``--task bfcl`` (bench/bfcl_cycle.py) the calls are BFCL v4 items with their function docs as
``tools`` under a ``tool_args`` profile (the weak live verifier), and every held-out answer is judged
twice: live and by BFCL's checker; the student's direct correctness comes from ``model="student"``
calls (its admitted adapter included). ``--bfcl-verifier values`` gives the profile the stronger live
check (grounded values, routing/verifiers/tool_grounding.py). ``--grpo`` turns GRPO on for the profile
(after SFT, each call's own verifier as reward).

Output: the markdown table on stdout and in bench/results/mera_cycle.md; logs under var/bench/mera_cycle/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.mera_report import BFCL_HEADER, HEADER, bfcl_categories, bfcl_row, report, row
from bench.mera_tasks import Task, code_tasks, narrow_tasks, structured_tasks, stub_teacher

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "var" / "bench" / "mera_cycle"
SMOLLM2 = ROOT / "var" / "models" / "smollm2-135m-instruct"


def configure(args: argparse.Namespace, run_dir: Path, base_model: Path) -> None:
    """The environment the settings read; set before Django starts."""
    hyper = json.loads(args.hyperparameters) if args.hyperparameters else {}
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "app.settings",
            "DATABASE_URL": f"sqlite:///{run_dir / 'db.sqlite3'}",
            "CELERY_BROKER_URL": "memory://",  # stages and training run in this process
            "SKILLGATE_TRAINING_BASE_MODEL": str(base_model),
            "SKILLGATE_ADAPTER_DIR": str(run_dir / "adapters"),
            "SKILLGATE_TRAINING_HYPERPARAMETERS": json.dumps(hyper),
            "SKILLGATE_CYCLE_HELDOUT_SHARDS": str(args.heldout_shards),
            "SKILLGATE_ADMISSION_MIN_ITEMS": str(args.min_heldout),
            "SKILLGATE_ADMISSION_CONCURRENCY": "8",
            "SKILLGATE_CYCLE_SELF_REPAIR_TRIES": str(args.self_repair),
            "SKILLGATE_CYCLE_AUTO_FAILURES": "0",
            "SKILLGATE_ROUTER_FEATURES": "hashing",
            "LOG_LEVEL": "WARNING",
        }
    )


def start_gateway() -> tuple[str, Any]:
    import uvicorn

    from bench.support.vllm import free_port

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
    from routing.models import Invocation

    before = set(Invocation.objects.values_list("pk", flat=True))
    for task in tasks:
        client.chat.completions.create(
            model=model, messages=task.messages, temperature=0, extra_body={"metadata": task.metadata}
        )
    return list(Invocation.objects.exclude(pk__in=before))


def measure(calls: list[Any], teacher: dict[str, float]) -> dict[str, float]:
    from app.demo_cycle import summarize

    s = summarize(calls)
    cost_rel = float(s.cost_usd) / teacher["cost"] if teacher["cost"] else float("nan")
    return {"direct": s.direct, "policy": s.policy, "fallback": s.fallback, "cost_rel": cost_rel}


def run_cycle(profile_id: int) -> Any:
    """One cycle through the stage services, as the Celery worker runs them; training in-process."""
    from training.models import Cycle
    from training.services.adapters import training_run_execute
    from training.services.cycle import cycle_stage_run, cycle_start, cycles_poll

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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny model, narrow task, 2 cycles, stub teacher"
    )
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--task", choices=["structured", "narrow", "code", "bfcl"], default="structured")
    parser.add_argument("--bfcl-categories", help="comma-separated BFCL categories (default: all five)")
    parser.add_argument("--bfcl-per-category", type=int, default=20, help="first N items of each category")
    parser.add_argument(
        "--bfcl-verifier",
        choices=["schema", "values"],
        default="schema",
        help="the tool-call profile's live verifier: schema (the weak check) or values (grounded values)",
    )
    parser.add_argument("--grpo", action="store_true", help="GRPO after SFT (the profile's training setting)")
    parser.add_argument(
        "--sample-rate",
        type=float,
        default=0.0,
        help="bfcl: share of student-served train calls sampled on the teacher in the background (labels)",
    )
    parser.add_argument("--student", choices=["tiny", "smollm2"], default="smollm2")
    parser.add_argument("--code-tasks", type=int, default=120, help="he_mbpp tasks used with --task code")
    parser.add_argument(
        "--teacher", choices=["best-of-n", "stub"], help="default: stub with --quick, else best-of-n"
    )
    parser.add_argument("--samples", type=int, default=4, help="n of the best-of-n teacher")
    parser.add_argument("--teacher-url", help="an OpenAI-compatible teacher instead")
    parser.add_argument("--teacher-model", default="teacher", help="its model name (with --teacher-url)")
    parser.add_argument("--hyperparameters", help='training overrides as JSON, e.g. {"sft_steps": 40}')
    parser.add_argument("--heldout-shards", type=int, default=4, help="one prompt in N is held out")
    parser.add_argument("--min-heldout", type=int, default=8)
    parser.add_argument("--self-repair", type=int, default=0, help="sampled student retries per failure")
    parser.add_argument(
        "--student-votes",
        metavar="M/K",
        help="self-consistency: the student answers K samples and passes when M of them pass and agree",
    )
    args = parser.parse_args()
    if args.student_votes:
        votes, _, samples = args.student_votes.partition("/")
        if not (votes.isdigit() and samples.isdigit() and 1 <= int(votes) <= int(samples)):
            parser.error(f"--student-votes must be M/K with 1 <= M <= K; got {args.student_votes!r}")
        args.student_votes = (int(votes), int(samples))
    if args.quick:
        args.student, args.cycles, args.task = "tiny", min(args.cycles, 2), "narrow"
        args.hyperparameters = args.hyperparameters or json.dumps(
            {"sft_steps": 60, "learning_rate": 1e-2, "batch_size": 4}
        )
    args.teacher = args.teacher or ("stub" if args.quick else "best-of-n")
    if args.task == "code" and args.teacher == "stub" and not args.teacher_url:
        parser.error("the stub teacher has no code answers: use --teacher best-of-n or --teacher-url")
    run_dir = WORK / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True)
    sys.path.insert(0, str(ROOT))
    from bench.support.tiny_model import tiny_model_dir

    base_model = tiny_model_dir() if args.student == "tiny" else SMOLLM2
    configure(args, run_dir, base_model)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import openai

    from bench import bfcl_cycle
    from bench.support.vllm import VllmServer
    from routing.models import Backend, TaskProfile
    from routing.services import api_key_create
    from training.services.cycle.calls import split_of

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
        from bench.support.openai_stub import OpenAIStub

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
        from app.demo import PROFILES
        from bench.support import narrow_task

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
            from training.models import TrainingSettings

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
    from bench import bfcl_cycle

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


if __name__ == "__main__":
    main()
