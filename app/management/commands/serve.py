"""`manage.py serve`: bootstrap, then run web server, Celery worker (+beat) and the local student
together, send a little demo traffic, and stop everything on Ctrl-C."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path
from types import FrameType

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser
from django.urls import reverse

from app import conf
from app.supervisor import Supervisor, python
from app.traffic import send_demo_traffic
from training import conf as training_conf


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-student", action="store_true", help="do not start the local vLLM student")
        parser.add_argument("--no-demo", action="store_true", help="do not send demo traffic")
        parser.add_argument(
            "--no-prometheus", action="store_true", help="do not start Prometheus on the lab when installed"
        )

    def handle(self, *args: object, **opts: object) -> None:
        call_command("bootstrap", stdout=self.stdout)
        root = Path(settings.BASE_DIR)
        log_dir = settings.VAR_DIR / "logs"
        log_dir.mkdir(exist_ok=True)
        sup = Supervisor(log_dir)

        def on_term(signum: int, frame: FrameType | None) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, on_term)
        local = conf.get().local_student
        base = f"http://{opts['host']}:{opts['port']}"
        try:
            if not opts["no_student"] and Path(local.model_dir).is_dir():
                sup.start(
                    "student",
                    ["bash", str(root / "infra" / "vllm_serve.sh")],
                    {
                        "MODEL_DIR": local.model_dir,
                        "SERVED_NAME": local.served_name,
                        "PORT": str(local.port),
                    },
                    to_log=True,
                )
            elif not opts["no_student"]:
                self.stdout.write(f"[serve] no local model at {local.model_dir}: student not started")
            sup.start(
                "web",
                [  # app/serve.py: forwarded headers only from SKILLGATE_TRUSTED_PROXIES; header deadline
                    python(),
                    "-m",
                    "app.serve",
                    "--host",
                    str(opts["host"]),
                    "--port",
                    str(opts["port"]),
                    "--log-level",
                    "warning",
                ],
            )
            sup.start(
                "worker",
                [
                    python(),
                    "-m",
                    "celery",
                    "-A",
                    "app",
                    "worker",
                    "--beat",
                    "--loglevel",
                    "WARNING",
                    "--concurrency",
                    "1",
                    # One dev worker takes both queues; a training run then holds it until done.
                    # Production runs the gpu queue on its own worker (prefetch 1, one task per child).
                    "--queues",
                    f"{settings.CELERY_TASK_DEFAULT_QUEUE},{training_conf.get().training.queue}",
                ],
                to_log=True,
            )
            if not opts["no_prometheus"] and shutil.which("prometheus"):
                # A real Prometheus on the local lab (its rules: infra/prometheus/lab-rules.yml); the
                # agent's `prometheus` toolset reads it when SKILLGATE_PROMETHEUS_URL points there.
                lab_prometheus = [python(), "manage.py", "lab_prometheus", "--incidents", base]
                sup.start("prometheus", lab_prometheus, to_log=True)
            sup.wait_http("web", f"{base}/readyz", 60)
            if "student" in sup.children:
                self.stdout.write("[serve] waiting for the local student (vLLM on CPU, ~30-60 s)...")
                sup.wait_http("student", f"http://127.0.0.1:{local.port}/v1/models", 300)
            dashboard = base + reverse("web:overview")
            self.stdout.write(f"[serve] Skillgate is up: {base}/v1 (OpenAI API), {dashboard} (dashboard)")
            if not opts["no_demo"] and "student" in sup.children:
                for line in send_demo_traffic(f"{base}/v1"):
                    self.stdout.write(f"[demo] {line}")
            self.stdout.write("[serve] running; Ctrl-C stops everything")
            while (name := sup.dead()) is None:
                time.sleep(0.5)
            self.stderr.write(f"[serve] {name} exited; stopping")
        except KeyboardInterrupt:
            self.stdout.write("[serve] stopping")
        finally:
            sup.stop_all()
