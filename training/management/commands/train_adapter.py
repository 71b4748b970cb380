"""`manage.py train_adapter --profile NAME`: train the profile's next adapter (SFT, optionally GRPO).

Data: the profile's train-split demonstrations, or a JSON-lines file of {"messages": [...], "completion":
"..."} with --examples. By default it trains in this process and prints time per step and peak memory;
--queue sends it to the `gpu` Celery queue instead. --activate loads the result into the student's vLLM
and routes the profile to it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from routing.models import TaskProfile
from training.models import Demonstration
from training.services import adapters as services
from training.trainer.datasets import Example


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--profile", required=True, help="task profile name")
        parser.add_argument("--examples", type=Path, help="JSON-lines file of messages/completion pairs")
        parser.add_argument("--limit", type=int, default=0, help="use at most this many demonstrations")
        parser.add_argument("--steps", type=int, help="SFT steps (overrides the profile's settings)")
        parser.add_argument("--grpo", action="store_true", help="GRPO with the profile's verifier after SFT")
        parser.add_argument("--grpo-steps", type=int)
        parser.add_argument(
            "--set", action="append", default=[], metavar="NAME=JSON", help="a hyper-parameter"
        )
        parser.add_argument("--queue", action="store_true", help="enqueue on the gpu queue instead")
        parser.add_argument("--activate", action="store_true", help="load into vLLM and route the profile")

    def handle(self, *args: Any, **opts: Any) -> None:
        profile = TaskProfile.objects.filter(name=opts["profile"]).first()
        if profile is None:
            raise CommandError(f"no task profile {opts['profile']!r}")
        examples: list[Example] = []
        if opts["examples"]:
            lines = opts["examples"].read_text().splitlines()
            examples = [Example.from_dict(json.loads(line)) for line in lines if line.strip()]
        demos = Demonstration.objects.filter(profile=profile, split=Demonstration.Split.TRAIN).order_by("pk")
        ids = list(demos.values_list("pk", flat=True))
        if opts["limit"]:
            ids, examples = ids[: opts["limit"]], examples[: opts["limit"]]
        overrides: dict[str, Any] = {}
        for item in opts["set"]:
            name, _, value = item.partition("=")
            overrides[name] = json.loads(value)
        if opts["steps"] is not None:
            overrides["sft_steps"] = opts["steps"]
        if opts["grpo_steps"] is not None:
            overrides["grpo_steps"] = opts["grpo_steps"]
        try:
            run = services.training_run_start(
                profile_id=profile.pk,
                demonstration_ids=[] if examples else ids,
                examples=examples,
                grpo=opts["grpo"],
                hyperparameters=overrides,
                enqueue=opts["queue"],
            )
        except services.TrainingError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"run #{run.pk}: adapter {run.adapter.name} on {run.adapter.base_model}, "
            f"{len(run.examples)} examples, {run.total_steps} steps"
        )
        if opts["queue"]:
            self.stdout.write(f"queued on {services.training_queue()}")
            return
        run = services.training_run_execute(run_id=run.pk)
        m = run.metrics
        self.stdout.write(
            f"{run.status}: SFT {m.get('sft_steps')} steps, {m.get('sft_s_per_step')} s/step "
            f"(whole phase with loading {m.get('sft_runtime_s')} s, "
            f"loss {m.get('sft_first_loss')} -> {m.get('sft_final_loss')}); "
            + (
                f"GRPO {m.get('grpo_steps')} steps, {m.get('grpo_s_per_step')} s/step, "
                f"mean reward {m.get('grpo_mean_reward')}; "
                if "grpo_steps" in m
                else ""
            )
            + f"peak RSS {m.get('peak_rss_mb')} MB; adapter at {run.adapter.path}"
        )
        if opts["activate"]:
            adapter = services.adapter_activate(adapter_id=run.adapter_id)
            self.stdout.write(f"active: {adapter.name}")
