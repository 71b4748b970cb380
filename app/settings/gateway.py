"""The gateway: backends, limits, the learned router, the sandbox of code verifiers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from app.settings.base import BASE_DIR, CELERY_BEAT_SCHEDULE, VAR_DIR
from core.env import env_bool, env_float, env_int, env_list, env_optional, env_str


def _env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env_str(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}; got {value!r}.")
    return value


# --- Gateway ------------------------------------------------------------------------------------
# With no provider configured, both backends are the bundled SmolLM2-135M-Instruct served locally
# by vLLM; demo prices (USD per token) make the teacher 10x the student, as a hosted model would be.
_DEMO_MODEL = "smollm2-135m-instruct"
_LOCAL_VLLM = f"http://127.0.0.1:{env_int('SKILLGATE_STUDENT_PORT', 8001)}/v1"
_DEMO_TEACHER_PRICES = ("0.0000005", "0.000001")
_teacher_model = env_str("SKILLGATE_TEACHER_MODEL", f"hosted_vllm/{_DEMO_MODEL}")
_teacher_is_provider = env_optional("SKILLGATE_TEACHER_MODEL") is not None
SKILLGATE: dict[str, Any] = {
    # Request bodies above this size are refused with 413 before they are parsed.
    "MAX_BODY_BYTES": env_int("SKILLGATE_MAX_BODY_BYTES", 4 * 1024 * 1024),
    # Calls in flight per server process before new ones get a 503 (routing/api/inflight.py); 0: no limit.
    "MAX_IN_FLIGHT": env_int("SKILLGATE_MAX_IN_FLIGHT", 0),
    # Output cap used when a call gives no max_tokens; it also bounds the budget reservation.
    "DEFAULT_MAX_TOKENS": env_int("SKILLGATE_DEFAULT_MAX_TOKENS", 1024),
    "UPSTREAM_TIMEOUT_S": env_float("SKILLGATE_UPSTREAM_TIMEOUT_S", 120.0),
    # Backends that speak OpenAI's protocol natively (openai/..., hosted_vllm/...) are called by the
    # gateway's own pooled HTTP client (routing/call/openai_client.py), not litellm; false: all via litellm.
    "DIRECT_CLIENT": env_bool("SKILLGATE_DIRECT_CLIENT", True),
    # POST /v1/embeddings with model "auto" goes to the backend of this name (routing/call/embeddings.py); a
    # call may also name any active backend itself. Empty: "auto" is refused (503, no_backend).
    "EMBEDDING_BACKEND": env_str("SKILLGATE_EMBEDDING_BACKEND", ""),
    # That client's connection pool, per server process (per event loop): the openai SDK's limits; idle
    # connections are dropped before the usual 5 s keep-alive of uvicorn (so vLLM) closes them.
    "UPSTREAM_MAX_CONNECTIONS": env_int("SKILLGATE_UPSTREAM_MAX_CONNECTIONS", 1000),
    "UPSTREAM_MAX_KEEPALIVE": env_int("SKILLGATE_UPSTREAM_MAX_KEEPALIVE", 100),
    "UPSTREAM_KEEPALIVE_S": env_float("SKILLGATE_UPSTREAM_KEEPALIVE_S", 4.0),
    # A reservation not settled within this time (a crashed worker) is released by Celery beat; a call
    # held on a lease for longer is dropped from it the same way.
    "RESERVATION_TTL_S": env_int("SKILLGATE_RESERVATION_TTL_S", 900),
    # Budgets (routing/budgets/holds.py). "lease": each server process holds a slice of a key's budget and
    # reserves calls against it in memory; "reservation": a conditional UPDATE and a row per call.
    "BUDGET_MODE": _env_choice("SKILLGATE_BUDGET_MODE", "lease", ("lease", "reservation")),
    # A lease asks for this share of what is left of the budget, at most BUDGET_LEASE_MAX_USD, at least
    # the call's worst case.
    "BUDGET_LEASE_FRACTION": env_float("SKILLGATE_BUDGET_LEASE_FRACTION", 0.1),
    "BUDGET_LEASE_MAX_USD": env_float("SKILLGATE_BUDGET_LEASE_MAX_USD", 1.0),
    # A lease row is renewed while its process lives (every TTL/4) and is past expires_at after TTL.
    "BUDGET_LEASE_TTL_S": env_int("SKILLGATE_BUDGET_LEASE_TTL_S", 60),
    # A lease with no call in flight for this long goes back to the key.
    "BUDGET_LEASE_IDLE_S": env_float("SKILLGATE_BUDGET_LEASE_IDLE_S", 10.0),
    # An expired lease of another machine is released by beat only after this long (its journal, on that
    # machine, may hold spend; that spend is then written off); 0: never, that machine's recovery does it.
    "BUDGET_LEASE_ABANDON_S": env_int("SKILLGATE_BUDGET_LEASE_ABANDON_S", 0),
    # The ledger (routing/ledger/writer.py). "sync": each call's row is committed before its response;
    # "batched": journaled before the response, group-committed by a writer thread every LEDGER_FLUSH_MS
    # (at once past LEDGER_BATCH_MAX rows), off the request path. The test suite, which reads rows right
    # after a response, runs "sync" (tests/conftest.py).
    "LEDGER_WRITER": _env_choice("SKILLGATE_LEDGER_WRITER", "batched", ("sync", "batched")),
    "LEDGER_FLUSH_MS": env_float("SKILLGATE_LEDGER_FLUSH_MS", 20.0),
    "LEDGER_BATCH_MAX": env_int("SKILLGATE_LEDGER_BATCH_MAX", 500),
    # Where each server process keeps its journal (one folder per database); segments rotate past
    # LEDGER_JOURNAL_ROTATE_BYTES. FSYNC: "batch" (before each group commit: an OS crash loses at most
    # the calls of the last window), "always" (each line, before the response), "off".
    "LEDGER_JOURNAL_DIR": Path(env_str("SKILLGATE_LEDGER_JOURNAL_DIR", str(VAR_DIR / "journal"))),
    "LEDGER_JOURNAL_ROTATE_BYTES": env_int("SKILLGATE_LEDGER_JOURNAL_ROTATE_BYTES", 16 * 1024 * 1024),
    "LEDGER_JOURNAL_FSYNC": _env_choice(
        "SKILLGATE_LEDGER_JOURNAL_FSYNC", "batch", ("batch", "always", "off")
    ),
    # Requests-per-minute limits (routing/access/ratelimit.py): with Redis (CACHE_URL) a process takes tokens
    # from the key's shared bucket in batches of BATCH_S of its rate and keeps an unspent batch BATCH_TTL_S;
    # Redis silent for REDIS_TIMEOUT_S: per-process buckets for REDIS_RETRY_S, then Redis is asked again.
    "RATE_LIMIT": {
        "BATCH_S": env_float("SKILLGATE_RATE_LIMIT_BATCH_S", 0.1),
        "BATCH_TTL_S": env_float("SKILLGATE_RATE_LIMIT_BATCH_TTL_S", 1.0),
        "REDIS_TIMEOUT_S": env_float("SKILLGATE_RATE_LIMIT_REDIS_TIMEOUT_S", 0.25),
        "REDIS_RETRY_S": env_float("SKILLGATE_RATE_LIMIT_REDIS_RETRY_S", 5.0),
    },
    # Each server process keeps API keys, task profiles and backends this long (0: read every call);
    # changes made in the same process apply at once, other processes see them within this time.
    "LOOKUP_CACHE_TTL_S": env_float("SKILLGATE_LOOKUP_CACHE_TTL_S", 5.0),
    # Code verifiers (python_tests) run untrusted code under bubblewrap, as uid 65534 when the gateway
    # is root (routing/verifiers/bwrap.py). Where it cannot run they fail every answer ("sandbox
    # unavailable: ..."). SANDBOX_ALLOW_UNSAFE, for development only, runs that code in a plain
    # subprocess instead (no isolation at all), with a WARNING logged each time. SANDBOX_PYTHON: the
    # interpreter run inside (its standard library only); empty: the gateway's own when uid 65534 can
    # read it, else the system's python3.X of the same version. SANDBOX_BWRAP: the bwrap executable.
    "SANDBOX_ALLOW_UNSAFE": env_bool("SKILLGATE_SANDBOX_ALLOW_UNSAFE", False),
    "SANDBOX_PYTHON": env_str("SKILLGATE_SANDBOX_PYTHON", ""),
    "SANDBOX_BWRAP": env_str("SKILLGATE_SANDBOX_BWRAP", "bwrap"),
    # Verifiers run in this many threads per server process, off the event loop; one that finds no
    # free worker within VERIFIER_QUEUE_WAIT_S fails (routing/verifiers/pool.py).
    "VERIFIER_WORKERS": env_int("SKILLGATE_VERIFIER_WORKERS", 4),
    "VERIFIER_QUEUE_WAIT_S": env_float("SKILLGATE_VERIFIER_QUEUE_WAIT_S", 30.0),
    "TEACHER": {
        "MODEL": _teacher_model,
        "API_BASE": env_optional("SKILLGATE_TEACHER_API_BASE")
        or ("" if _teacher_is_provider else _LOCAL_VLLM),
        "API_KEY_ENV": "SKILLGATE_TEACHER_API_KEY",
        # A provider's model is priced from litellm's price map unless a price is set here.
        "INPUT_COST": env_optional("SKILLGATE_TEACHER_INPUT_COST_PER_TOKEN")
        or (None if _teacher_is_provider else _DEMO_TEACHER_PRICES[0]),
        "OUTPUT_COST": env_optional("SKILLGATE_TEACHER_OUTPUT_COST_PER_TOKEN")
        or (None if _teacher_is_provider else _DEMO_TEACHER_PRICES[1]),
        # With no provider, the demo teacher is the student's base model asked for several answers,
        # the first that passes the profile's verifier winning (best-of-n): slower, dearer, more accurate.
        "SAMPLES": env_int("SKILLGATE_TEACHER_SAMPLES", 1 if _teacher_is_provider else 4),
    },
    "STUDENT": {
        "MODEL": env_str("SKILLGATE_STUDENT_MODEL", f"hosted_vllm/{_DEMO_MODEL}"),
        "API_BASE": env_str("SKILLGATE_STUDENT_API_BASE", _LOCAL_VLLM),
        "API_KEY_ENV": "SKILLGATE_STUDENT_API_KEY",
        "INPUT_COST": env_str("SKILLGATE_STUDENT_INPUT_COST_PER_TOKEN", "0.00000005"),
        "OUTPUT_COST": env_str("SKILLGATE_STUDENT_OUTPUT_COST_PER_TOKEN", "0.0000001"),
        # Several vLLM servers of one student, comma-separated base URLs; "dns+http://name:port/v1" is
        # every address of the name (a headless Service). Empty: API_BASE alone (routing/call/replicas.py).
        "REPLICAS": env_list("SKILLGATE_STUDENT_REPLICAS", []),
    },
    # Learned router (routing/router/versions/config.py reads these; a profile's policy_params override
    # the target, target_relative and the sampling rates, routing/router/versions/config.py).
    "ROUTER": {
        # "auto" (MiniLM when installed, else hashed n-grams), "minilm" or "hashing".
        "FEATURES": env_str("SKILLGATE_ROUTER_FEATURES", "auto"),
        # Where the MiniLM embedding assets are built and read (routing/router/learning/embedding.py).
        "MINILM_DIR": Path(env_str("SKILLGATE_MINILM_DIR", str(BASE_DIR / "var" / "models" / "minilm-onnx"))),
        # Pass rate calibration and admission aim for: relative to always-teacher (0.98 of its pass rate)
        # or absolute; calibration asks it of a one-sided lower confidence bound TARGET_Z deviations down.
        "TARGET": env_float("SKILLGATE_ROUTER_TARGET", 0.98),
        "TARGET_RELATIVE": env_bool("SKILLGATE_ROUTER_TARGET_RELATIVE", True),
        "TARGET_Z": env_float("SKILLGATE_ROUTER_TARGET_Z", 1.0),
        # Training reads the profile's newest ledger rows, at most this many.
        "MAX_TRAINING_CALLS": env_int("SKILLGATE_ROUTER_MAX_TRAINING_CALLS", 50000),
        # Admission refuses to judge a version on fewer complete held-out calls.
        "MIN_HELDOUT_CALLS": env_int("SKILLGATE_ROUTER_MIN_HELDOUT_CALLS", 20),
        # A version still 'training' after this long is a crashed job.
        "TRAINING_STALE_S": env_int("SKILLGATE_ROUTER_TRAINING_STALE_S", 3600),
        # Celery beat: retrain profiles with new calls; compare live numbers with calibration.
        "RETRAIN_EVERY_S": env_int("SKILLGATE_ROUTER_RETRAIN_EVERY_S", 6 * 3600),
        "DRIFT_CHECK_EVERY_S": env_int("SKILLGATE_ROUTER_DRIFT_CHECK_EVERY_S", 3600),
        # Drift: judged on at least DRIFT_MIN_CALLS live calls; flagged when the teacher share is this
        # far from the predicted one, or the live pass rate this far below the predicted one.
        "DRIFT_MIN_CALLS": env_int("SKILLGATE_ROUTER_DRIFT_MIN_CALLS", 50),
        "DRIFT_SHARE_MARGIN": env_float("SKILLGATE_ROUTER_DRIFT_SHARE_MARGIN", 0.10),
        "DRIFT_PASS_MARGIN": env_float("SKILLGATE_ROUTER_DRIFT_PASS_MARGIN", 0.05),
        # Background sampling: shares of student-passed calls re-run on the teacher and of
        # teacher-routed calls re-run on the student, within SAMPLE_DAILY_USD per profile and UTC day.
        "TEACHER_SAMPLE_RATE": env_float("SKILLGATE_TEACHER_SAMPLE_RATE", 0.05),
        "STUDENT_SAMPLE_RATE": env_float("SKILLGATE_STUDENT_SAMPLE_RATE", 0.05),
        "SAMPLE_DAILY_USD": env_float("SKILLGATE_SAMPLE_DAILY_USD", 1.0),
    },
    # The local student server that `manage.py serve` starts (vLLM on CPU, the demo model).
    "LOCAL_STUDENT": {
        "MODEL_DIR": env_str("SKILLGATE_DEMO_MODEL_DIR", str(VAR_DIR / "models" / _DEMO_MODEL)),
        "SERVED_NAME": _DEMO_MODEL,
        "PORT": env_int("SKILLGATE_STUDENT_PORT", 8001),
    },
}

CELERY_BEAT_SCHEDULE["router-retrain"] = {
    "task": "routing.tasks.router_retrain_due",
    "schedule": float(SKILLGATE["ROUTER"]["RETRAIN_EVERY_S"]),
}
CELERY_BEAT_SCHEDULE["router-drift-check"] = {
    "task": "routing.tasks.router_drift_check_all",
    "schedule": float(SKILLGATE["ROUTER"]["DRIFT_CHECK_EVERY_S"]),
}

# The gateway's litellm runs offline, pricing from its bundled cost map (never fetched at import). Set
# here, before anything imports litellm (which reads them at import), unless the environment says
# otherwise.
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# A gateway key for the command-line clients that call this service over HTTP (replay_record's --key).
SKILLGATE_API_KEY = env_optional("SKILLGATE_API_KEY") or ""
