"""Observability: the Prometheus endpoint /metrics (app/observability)."""

from __future__ import annotations

from app.settings.gateway import SKILLGATE
from core.env import env_bool, env_float, env_int, env_optional

SKILLGATE["METRICS"] = {
    # GET /metrics in Prometheus text format; off: a 404.
    "ENABLED": env_bool("SKILLGATE_METRICS_ENABLED", True),
    # When set, /metrics answers only "Authorization: Bearer <token>" (a 401 otherwise). Set it wherever
    # /metrics is reachable from outside the network Prometheus scrapes from: key names and budgets are in it.
    "TOKEN": env_optional("SKILLGATE_METRICS_TOKEN") or "",
    # Several server processes on one machine (uvicorn --workers, or N web processes): each writes its call
    # metrics to files in this folder and any of them answers /metrics with the sum (prometheus-client's
    # multiprocess mode). prometheus-client reads the variable itself, when it is imported: set it in the
    # environment of every process, to an empty folder made before they start (infra/onebox does).
    "MULTIPROC_DIR": env_optional("PROMETHEUS_MULTIPROC_DIR") or "",
    # At most this many label sets (endpoint, profile, route, backend, verdict) per process; calls past it
    # are counted under the value "_other", so no caller can grow the series without bound.
    "MAX_LABEL_SETS": env_int("SKILLGATE_METRICS_MAX_LABEL_SETS", 2000),
    # The scrape reads the queue depths from the broker; it gives up on the broker after this long.
    "BROKER_TIMEOUT_S": env_float("SKILLGATE_METRICS_BROKER_TIMEOUT_S", 2.0),
}
