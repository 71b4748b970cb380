"""The service's own typed settings: /metrics and the local student ``manage.py serve`` starts
(``app.conf.get()``; the machinery is core/conf.py, the other apps' settings their own ``conf``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from core.conf import cached, load, setting


@dataclass(frozen=True)
class Metrics:
    """GET /metrics in Prometheus text format (app/observability/)."""

    SECTION: ClassVar[str] = "SKILLGATE.METRICS"
    enabled: bool = setting("ENABLED", env="SKILLGATE_METRICS_ENABLED", default=True, doc="Off: a 404.")
    token: str = setting(
        "TOKEN",
        env="SKILLGATE_METRICS_TOKEN",
        default="",
        doc='When set, /metrics answers only "Authorization: Bearer <token>" (a 401 otherwise). Set it '
        "wherever /metrics is reachable from outside the network Prometheus scrapes from.",
    )
    multiproc_dir: str = setting(
        "MULTIPROC_DIR",
        env="PROMETHEUS_MULTIPROC_DIR",
        default="",
        doc="Several server processes on one machine: each writes its call metrics to files in this "
        "folder and any of them answers with the sum (prometheus-client reads the variable itself: set "
        "it in every process's environment, to an empty folder made before they start).",
    )
    broker_timeout_s: float = setting(
        "BROKER_TIMEOUT_S",
        env="SKILLGATE_METRICS_BROKER_TIMEOUT_S",
        default=2.0,
        gt=0,
        doc="The scrape reads the queue depths from the broker; it gives up on the broker after this.",
    )


@dataclass(frozen=True)
class LocalStudent:
    """The local student server ``manage.py serve`` starts (vLLM on CPU, the demo model)."""

    SECTION: ClassVar[str] = "SKILLGATE.LOCAL_STUDENT"
    model_dir: str = setting(
        "MODEL_DIR",
        env="SKILLGATE_DEMO_MODEL_DIR",
        default_doc="VAR_DIR/models/smollm2-135m-instruct",
        doc="The demo model's folder.",
    )
    served_name: str = setting(
        "SERVED_NAME", default="smollm2-135m-instruct", nonempty=True, doc="The name vLLM serves it under."
    )
    port: int = setting(
        "PORT",
        env="SKILLGATE_STUDENT_PORT",
        default=8001,
        ge=1,
        le=65535,
        doc="Its port (the student backend's default API base is http://127.0.0.1:PORT/v1).",
    )


GROUPS: tuple[type, ...] = (Metrics, LocalStudent)


@dataclass(frozen=True)
class Service:
    metrics: Metrics
    local_student: LocalStudent


def build() -> Service:
    """Every group from django's settings, checked (raises ImproperlyConfigured naming a bad one)."""
    return Service(metrics=load(Metrics), local_student=load(LocalStudent))


get = cached(build)


def check() -> None:
    """Start-up: built and checked now (``SkillgateConfig.ready()``)."""
    build()
