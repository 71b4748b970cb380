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
This module parses the arguments and sets the environment; the run itself is bench/mera_run.py.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from bench.support.tiny_model import tiny_model_dir

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
    base_model = tiny_model_dir() if args.student == "tiny" else SMOLLM2
    configure(args, run_dir, base_model)
    # Imported only now: importing bench.mera_run sets Django up, and the settings read the environment
    # configure() just set (this run's database, base model, adapter directory, hyperparameters).
    from bench.mera_run import run

    run(args, run_dir, base_model)


if __name__ == "__main__":
    main()
