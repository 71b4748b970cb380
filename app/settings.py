"""Settings, all from the environment through typed helpers (core/env.py).

Every knob is declared here, once, with its default and a comment; the code reads ``settings.X``
(or ``settings.SKILLGATE[...]``) and never the environment. With nothing set, the service runs on an
embedded default: SQLite in the project folder and a file-based Celery transport under var/, so a
newcomer needs no server at all. Importing this module writes no file: the folders under var/ and a
generated secret key are made at start-up (``app.apps.SkillgateConfig.ready``).
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from core.env import env_bool, env_float, env_int, env_list, env_optional, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
# Everything the service writes (secret key, broker folders, static files, models, adapters); made at
# start-up.
VAR_DIR = Path(env_str("SKILLGATE_VAR_DIR", str(BASE_DIR / "var")))
# The evaluation data (HumanEval+MBPP tasks, recorded incidents) the repository carries (eval/README.md).
EVAL_DIR = Path(env_str("SKILLGATE_EVAL_DIR", str(BASE_DIR / "eval")))


# Where a generated key is kept when SECRET_KEY is not set: read here when it exists; otherwise start-up
# (app/apps.py) generates it, writes it there and sets SECRET_KEY, so a newcomer needs to set nothing.
SECRET_KEY_FILE = VAR_DIR / "secret_key"
SECRET_KEY = env_optional("SECRET_KEY") or (
    SECRET_KEY_FILE.read_text().strip() if SECRET_KEY_FILE.is_file() else ""
)
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "app",
    "routing",
    "training",
    "diagnostics",
    "diagnostics.slack",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # The dashboard's static files (htmx from django-htmx, its stylesheet), found without collectstatic.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "app.urls"
ASGI_APPLICATION = "app.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        conn_max_age=0,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL and IMMEDIATE transactions let concurrent requests queue instead of failing with
    # "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not :memory:, so the live server thread in tests sees the same test database.
    DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME", str(VAR_DIR / "test.sqlite3"))}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    DATABASES["default"]["OPTIONS"] = {"pool": {"min_size": 2, "max_size": env_int("DB_POOL_SIZE", 20)}}
    # Lets concurrent test runs on one server (CI and a developer, say) use separate databases.
    if _test_db := env_optional("TEST_DATABASE_NAME"):
        DATABASES["default"]["TEST"] = {"NAME": _test_db}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_cache_url = env_optional("CACHE_URL")
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": _cache_url,
            "KEY_PREFIX": env_str("CACHE_KEY_PREFIX", "skillgate"),
        }
        if _cache_url
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "skillgate"}
    )
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"  # made at start-up
WHITENOISE_USE_FINDERS = True
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "LiteLLM": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
    },
}

# --- Celery -------------------------------------------------------------------------------------
_broker_dir = VAR_DIR / "broker"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    # Start-up (app/apps.py) makes these folders before the web process or a worker sends or reads.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
# Separate names let several installations (or test runs) share one broker.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_DEFAULT_QUEUE", "default")
CELERY_BEAT_SCHEDULE = {
    "release-stale-reservations": {
        "task": "routing.tasks.release_stale_reservations",
        "schedule": 60.0,
    },
    "expire-diagnostic-actions": {"task": "diagnostics.tasks.expire_actions", "schedule": 60.0},
    "purge-slack-events": {"task": "diagnostics.slack.tasks.purge_events", "schedule": 3600.0},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

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
    # Calls in flight per server process before new ones get a 503 (routing/inflight.py); 0: no limit.
    "MAX_IN_FLIGHT": env_int("SKILLGATE_MAX_IN_FLIGHT", 0),
    # Output cap used when a call gives no max_tokens; it also bounds the budget reservation.
    "DEFAULT_MAX_TOKENS": env_int("SKILLGATE_DEFAULT_MAX_TOKENS", 1024),
    "UPSTREAM_TIMEOUT_S": env_float("SKILLGATE_UPSTREAM_TIMEOUT_S", 120.0),
    # A reservation not settled within this time (a crashed worker) is released by Celery beat.
    "RESERVATION_TTL_S": env_int("SKILLGATE_RESERVATION_TTL_S", 900),
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
    },
    # Learned router (routing/router_versions/config.py reads these; a profile's policy_params override
    # the target, target_relative and the sampling rates, routing/router_versions/config.py).
    "ROUTER": {
        # "auto" (MiniLM when installed, else hashed n-grams), "minilm" or "hashing".
        "FEATURES": env_str("SKILLGATE_ROUTER_FEATURES", "auto"),
        # Where the MiniLM embedding assets are built and read (routing/router_learning/embedding.py).
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

# --- Training (adapters) ------------------------------------------------------------------------
# Training runs on its own queue, one task per worker child, prefetch 1: `gpu` unless the default
# queue is renamed (then "<default>-gpu", so parallel test runs and installations stay apart).
_GPU_QUEUE_DEFAULT = "gpu" if CELERY_TASK_DEFAULT_QUEUE == "default" else f"{CELERY_TASK_DEFAULT_QUEUE}-gpu"
_GPU_QUEUE = env_str("CELERY_GPU_QUEUE", _GPU_QUEUE_DEFAULT)
CELERY_TASK_ROUTES = {"training.tasks.adapters.adapter_train": {"queue": _GPU_QUEUE}}
CELERY_BEAT_SCHEDULE["recover-training-runs"] = {
    "task": "training.tasks.adapters.training_runs_recover",
    "schedule": 60.0,
}
CELERY_BEAT_SCHEDULE["unload-retired-adapters"] = {
    "task": "training.tasks.adapters.adapters_unload_retired",
    "schedule": 300.0,
}
SKILLGATE["TRAINING"] = {
    "QUEUE": _GPU_QUEUE,
    # The student's base model (must be the model vLLM serves) and where adapters are written.
    "BASE_MODEL": env_str("SKILLGATE_TRAINING_BASE_MODEL", SKILLGATE["LOCAL_STUDENT"]["MODEL_DIR"]),
    "ADAPTER_DIR": Path(env_str("SKILLGATE_ADAPTER_DIR", str(VAR_DIR / "adapters"))),
    # Celery limits of one training task: SoftTimeLimitExceeded marks the run failed; the hard limit
    # kills the child, and the recovery below then handles the run.
    "SOFT_TIME_LIMIT_S": env_int("SKILLGATE_TRAINING_SOFT_TIME_LIMIT_S", 3600),
    "TIME_LIMIT_S": env_int("SKILLGATE_TRAINING_TIME_LIMIT_S", 3900),
    # A running run writes a heartbeat this often; beat recovers runs silent for STALE_AFTER_S
    # (requeued while attempts < MAX_ATTEMPTS, failed after).
    "HEARTBEAT_S": env_float("SKILLGATE_TRAINING_HEARTBEAT_S", 10.0),
    "STALE_AFTER_S": env_int("SKILLGATE_TRAINING_STALE_AFTER_S", 120),
    "MAX_ATTEMPTS": env_int("SKILLGATE_TRAINING_MAX_ATTEMPTS", 2),
    "PROGRESS_INTERVAL_S": env_float("SKILLGATE_TRAINING_PROGRESS_INTERVAL_S", 2.0),
    # Overrides of training.trainer.Hyperparameters for every profile (JSON); per profile in the admin.
    "HYPERPARAMETERS": json.loads(env_str("SKILLGATE_TRAINING_HYPERPARAMETERS", "{}")),
    # A replaced adapter stays loaded in vLLM this long, so calls that started with its name finish
    # (and rollback is instant); longer than any upstream call can take.
    "UNLOAD_GRACE_S": env_int(
        "SKILLGATE_ADAPTER_UNLOAD_GRACE_S", int(2 * SKILLGATE["UPSTREAM_TIMEOUT_S"]) + 60
    ),
}

# --- Slack bot ----------------------------------------------------------------------------------
# Off (its endpoint answers 404) until both the bot token and the signing secret are set.
SLACK_BOT_TOKEN = env_optional("SLACK_BOT_TOKEN") or ""
SLACK_SIGNING_SECRET = env_optional("SLACK_SIGNING_SECRET") or ""
if bool(SLACK_BOT_TOKEN) != bool(SLACK_SIGNING_SECRET):
    raise ImproperlyConfigured("Set both SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET, or neither.")
# The Web API base URL; only a test or a proxy changes it.
SLACK_API_URL = env_str("SLACK_API_URL", "https://slack.com/api/")
SLACK_COMMAND = env_str("SLACK_COMMAND", "/sre")
# On: only Slack members linked to a user who may open incidents (operator role) start diagnoses.
SLACK_OPEN_NEEDS_ROLE = env_bool("SLACK_OPEN_NEEDS_ROLE", False)

# --- Diagnosis agents (diagnostics/agent/config.py reads these) --------------------------------
# The agent calls models only through the gateway, with this key (scopes llm and verifiers:call);
# without one, the analyzers-only planner runs.
SKILLGATE_GATEWAY_URL = env_str("SKILLGATE_GATEWAY_URL", "http://127.0.0.1:8000/v1")
DIAGNOSTICS_AGENT_API_KEY = env_optional("SKILLGATE_AGENT_API_KEY") or ""
# The gateway task profiles of the Observer's decisions and of the judge that grades diagnoses.
DIAGNOSTICS_OBSERVER_PROFILE = env_str("SKILLGATE_DIAGNOSTICS_OBSERVER_PROFILE", "sre-observer")
DIAGNOSTICS_JUDGE_PROFILE = env_str("SKILLGATE_DIAGNOSTICS_JUDGE_PROFILE", "sre-judge")
# Observer decisions per diagnosis, the output cap of one (a JSON object), and its timeout.
DIAGNOSTICS_MAX_ITERATIONS = env_int("SKILLGATE_DIAGNOSTICS_MAX_ITERATIONS", 12)
DIAGNOSTICS_OBSERVER_MAX_TOKENS = env_int("SKILLGATE_DIAGNOSTICS_OBSERVER_MAX_TOKENS", 900)
DIAGNOSTICS_LLM_TIMEOUT_S = env_float("SKILLGATE_DIAGNOSTICS_LLM_TIMEOUT_S", 120.0)
# Tool calls the analyzers-only planner may make in one diagnosis.
DIAGNOSTICS_MAX_PROBES = env_int("SKILLGATE_DIAGNOSTICS_MAX_PROBES", 40)
# Token budgets: what one Observer prompt may hold (findings, step summaries), and one step's summary.
DIAGNOSTICS_CONTEXT_TOKENS = env_int("SKILLGATE_DIAGNOSTICS_CONTEXT_TOKENS", 6000)
DIAGNOSTICS_SUMMARY_TOKENS = env_int("SKILLGATE_DIAGNOSTICS_SUMMARY_TOKENS", 300)
# An ActionRequest not decided within this time expires (Celery beat).
DIAGNOSTICS_ACTION_TTL_S = env_int("SKILLGATE_DIAGNOSTICS_ACTION_TTL_S", 3600)
# The environment a new incident is diagnosed in when it names none: replay, local, kubernetes, prometheus.
DIAGNOSTICS_DEFAULT_ENVIRONMENT = env_str("SKILLGATE_DIAGNOSTICS_DEFAULT_ENVIRONMENT", "local")
# How much raw tool output a Step keeps (the rest is cut, and marked as cut).
DIAGNOSTICS_STEP_RESULT_CHARS = env_int("SKILLGATE_DIAGNOSTICS_STEP_RESULT_CHARS", 8000)
# Queue of the diagnosis, execution and Slack tasks; empty for Celery's default queue.
DIAGNOSTICS_QUEUE = env_str("SKILLGATE_DIAGNOSTICS_QUEUE", "")
# Extra environments, {"name": "dotted.module"} (JSON), over the built-in ones
# (diagnostics/toolsets/registry.py).
DIAGNOSTICS_ENVIRONMENT_MODULES: dict[str, str] = json.loads(
    env_str("SKILLGATE_DIAGNOSTICS_ENVIRONMENT_MODULES", "{}")
)
# The recorded incidents the `replay` environment serves (a case is a folder under it).
DIAGNOSTICS_REPLAY_ROOT = Path(
    env_str("SKILLGATE_DIAGNOSTICS_REPLAY_ROOT", str(EVAL_DIR / "holmesgpt" / "cases"))
)
# Analyzer thresholds (diagnostics/agent/analyzers/): CPU throttling share; p99 latency (s); error rate
# (share of requests); disk use, CPU use and a pod's CPU above its peers' (percent); a deploy this
# recent (s) is a suspect; queue depth.
DIAGNOSTICS_THROTTLING_THRESHOLD = env_float("SKILLGATE_DIAGNOSTICS_THROTTLING_THRESHOLD", 0.25)
DIAGNOSTICS_LATENCY_THRESHOLD_S = env_float("SKILLGATE_DIAGNOSTICS_LATENCY_THRESHOLD_S", 1.0)
DIAGNOSTICS_ERROR_RATE_THRESHOLD = env_float("SKILLGATE_DIAGNOSTICS_ERROR_RATE_THRESHOLD", 0.05)
DIAGNOSTICS_DISK_THRESHOLD_PERCENT = env_float("SKILLGATE_DIAGNOSTICS_DISK_THRESHOLD_PERCENT", 90.0)
DIAGNOSTICS_CPU_THRESHOLD_PERCENT = env_float("SKILLGATE_DIAGNOSTICS_CPU_THRESHOLD_PERCENT", 50.0)
DIAGNOSTICS_CPU_OUTLIER_PERCENT = env_float("SKILLGATE_DIAGNOSTICS_CPU_OUTLIER_PERCENT", 15.0)
DIAGNOSTICS_RECENT_DEPLOY_S = env_float("SKILLGATE_DIAGNOSTICS_RECENT_DEPLOY_S", 3600.0)
DIAGNOSTICS_QUEUE_DEPTH_THRESHOLD = env_float("SKILLGATE_DIAGNOSTICS_QUEUE_DEPTH_THRESHOLD", 10.0)

# Environments behind the toolsets, each off until configured (design.md section 4).
# `prometheus`: the HTTP API's base URL, an optional bearer token, the timeout of one query.
DIAGNOSTICS_PROMETHEUS_URL = env_optional("SKILLGATE_PROMETHEUS_URL")
DIAGNOSTICS_PROMETHEUS_TOKEN = env_optional("SKILLGATE_PROMETHEUS_TOKEN")
DIAGNOSTICS_PROMETHEUS_TIMEOUT_S = env_float("SKILLGATE_PROMETHEUS_TIMEOUT_S", 10.0)
# `kubernetes`: separate read-only and write kubeconfigs, a context, the namespaces writes may touch
# (comma-separated; empty: any) and how long a health check waits for a rollout.
DIAGNOSTICS_K8S_READ_KUBECONFIG = env_optional("SKILLGATE_K8S_READ_KUBECONFIG")
DIAGNOSTICS_K8S_WRITE_KUBECONFIG = env_optional("SKILLGATE_K8S_WRITE_KUBECONFIG")
DIAGNOSTICS_K8S_CONTEXT = env_optional("SKILLGATE_K8S_CONTEXT")
DIAGNOSTICS_K8S_WRITE_NAMESPACES = env_list("SKILLGATE_K8S_WRITE_NAMESPACES", [])
DIAGNOSTICS_K8S_HEALTH_TIMEOUT_S = env_float("SKILLGATE_K8S_HEALTH_TIMEOUT_S", 120.0)
# `local`: the lab (a development and demo tool, diagnostics/lab/): its folder, first port (store, api,
# web at base, +1, +2; worker i's metrics at base+10+i), store (auto | redis | python), redis-server to
# run (empty: found on PATH), workers, spool quota, worker memory, load generator rate, and what its
# health check calls healthy.
DIAGNOSTICS_LAB_DIR = Path(env_str("SKILLGATE_LAB_DIR", str(BASE_DIR / "var" / "lab")))
DIAGNOSTICS_LAB_PORT_BASE = env_int("SKILLGATE_LAB_PORT_BASE", 18300)
DIAGNOSTICS_LAB_STORE = env_str("SKILLGATE_LAB_STORE", "auto")
DIAGNOSTICS_LAB_REDIS_SERVER = env_str("SKILLGATE_LAB_REDIS_SERVER", "")
DIAGNOSTICS_LAB_WORKERS = env_int("SKILLGATE_LAB_WORKERS", 2)
DIAGNOSTICS_LAB_SPOOL_QUOTA_BYTES = env_int("SKILLGATE_LAB_SPOOL_QUOTA_BYTES", 4 * 1024 * 1024)
DIAGNOSTICS_LAB_WORKER_MEMORY_MB = env_int("SKILLGATE_LAB_WORKER_MEMORY_MB", 256)
DIAGNOSTICS_LAB_LOADGEN_RATE = env_float("SKILLGATE_LAB_LOADGEN_RATE", 4.0)
DIAGNOSTICS_LAB_HEALTH_TIMEOUT_S = env_float("SKILLGATE_LAB_HEALTH_TIMEOUT_S", 20.0)
DIAGNOSTICS_LAB_ERROR_RATE_MAX = env_float("SKILLGATE_LAB_ERROR_RATE_MAX", 0.05)
DIAGNOSTICS_LAB_LATENCY_MAX_MS = env_float("SKILLGATE_LAB_LATENCY_MAX_MS", 100.0)
DIAGNOSTICS_LAB_CPU_MAX_PERCENT = env_float("SKILLGATE_LAB_CPU_MAX_PERCENT", 25.0)

# --- Learning cycle (replay -> SkillBook -> adapter -> router -> admission) ---------------------
CELERY_BEAT_SCHEDULE["poll-cycles"] = {"task": "training.tasks.cycle.cycles_poll", "schedule": 30.0}
CELERY_BEAT_SCHEDULE["autostart-cycles"] = {"task": "training.tasks.cycle.cycles_autostart", "schedule": 60.0}
if (_cycle_every := env_int("SKILLGATE_CYCLE_SCHEDULE_S", 0)) > 0:
    CELERY_BEAT_SCHEDULE["scheduled-cycles"] = {
        "task": "training.tasks.cycle.cycles_scheduled",
        "schedule": float(_cycle_every),
    }
SKILLGATE["CYCLE"] = {
    # Queue of the cycle's stage tasks; empty for Celery's default queue.
    "QUEUE": env_str("SKILLGATE_CYCLE_QUEUE", ""),
    # A profile that gathers this many failed student calls since its last cycle starts one (0: off).
    "AUTO_FAILURES": env_int("SKILLGATE_CYCLE_AUTO_FAILURES", 50),
    # Failed calls replayed per cycle; sampled student retries per call (0: no self-repair pairs).
    "REPLAY_LIMIT": env_int("SKILLGATE_CYCLE_REPLAY_LIMIT", 200),
    "SELF_REPAIR_TRIES": env_int("SKILLGATE_CYCLE_SELF_REPAIR_TRIES", 1),
    "SELF_REPAIR_TEMPERATURE": env_float("SKILLGATE_CYCLE_SELF_REPAIR_TEMPERATURE", 0.8),
    # One prompt in HELDOUT_SHARDS (by hash) is held out for admission and never trained on.
    "HELDOUT_SHARDS": env_int("SKILLGATE_CYCLE_HELDOUT_SHARDS", 5),
    "SKILLBOOK_MAX_CHARS": env_int("SKILLGATE_SKILLBOOK_MAX_CHARS", 1200),
    "SKILLBOOK_WINDOW": env_int("SKILLGATE_SKILLBOOK_WINDOW", 500),
    # The adapter stage (off: cycles improve the SkillBook only); train even when replay added nothing.
    "TRAIN_ADAPTER": env_bool("SKILLGATE_CYCLE_TRAIN_ADAPTER", True),
    "TRAIN_WITHOUT_NEW": env_bool("SKILLGATE_CYCLE_TRAIN_WITHOUT_NEW", False),
    # Admission: McNemar level, held-out items needed and used, parallel calls.
    "ADMISSION_ALPHA": env_float("SKILLGATE_ADMISSION_ALPHA", 0.05),
    "ADMISSION_MIN_ITEMS": env_int("SKILLGATE_ADMISSION_MIN_ITEMS", 10),
    "ADMISSION_MAX_ITEMS": env_int("SKILLGATE_ADMISSION_MAX_ITEMS", 200),
    "ADMISSION_CONCURRENCY": env_int("SKILLGATE_ADMISSION_CONCURRENCY", 4),
    # A stage held longer than this by a worker that died is queued again, up to STAGE_MAX_ATTEMPTS.
    "STAGE_TIMEOUT_S": env_int("SKILLGATE_CYCLE_STAGE_TIMEOUT_S", 3600),
    "STAGE_MAX_ATTEMPTS": env_int("SKILLGATE_CYCLE_STAGE_MAX_ATTEMPTS", 3),
}

# --- AOI Evolver (failed diagnoses -> corrective plans -> diagnostic skills) ---------------------
# The sweep gives graded failures a job, exports successful diagnoses as demonstrations and sends a
# changed skill set to replay admission (0: off).
if (_evolver_every := env_int("SKILLGATE_EVOLVER_SWEEP_S", 300)) > 0:
    CELERY_BEAT_SCHEDULE["evolver-sweep"] = {
        "task": "training.tasks.evolver.evolver_sweep",
        "schedule": float(_evolver_every),
    }
SKILLGATE["EVOLVER"] = {
    # The teacher's task profile for corrective plans; the queue of the Evolver's tasks (empty: default).
    "PROFILE": env_str("SKILLGATE_EVOLVER_PROFILE", "sre-evolver"),
    "QUEUE": env_str("SKILLGATE_EVOLVER_QUEUE", ""),
    "MAX_SKILLBOOK_CHARS": env_int("SKILLGATE_EVOLVER_MAX_SKILLBOOK_CHARS", 4000),
    # Held-out cases replayed for admission (empty: the shared holmesgpt cases) and a name filter.
    "HELDOUT_CASES": env_str("SKILLGATE_EVOLVER_HELDOUT_CASES", ""),
    "HELDOUT_FILTER": env_str("SKILLGATE_EVOLVER_HELDOUT_FILTER", ""),
    "STALE_AFTER_S": env_int("SKILLGATE_EVOLVER_STALE_AFTER_S", 600),
    "MAX_ATTEMPTS": env_int("SKILLGATE_EVOLVER_MAX_ATTEMPTS", 3),
}

# --- Security: edge limits, login throttling, TLS, ledger retention (design.md section 8) ---------
# Request bodies: SKILLGATE MAX_BODY_BYTES (above) is enforced in front of Django (app/edge.py, a 413);
# JSON bodies nesting deeper than this are a 400 (routing/json_body.py), never json.loads recursion.
SKILLGATE["MAX_JSON_DEPTH"] = env_int("SKILLGATE_MAX_JSON_DEPTH", 64)
# Django's own cap on request.body (2.5 MB by default) would refuse a body the edge let through with an
# HTML 400; one limit, one answer.
DATA_UPLOAD_MAX_MEMORY_SIZE = SKILLGATE["MAX_BODY_BYTES"]
# Ledger bodies (prompts and answers in Invocation.request/response): blanked by Celery beat once older
# than LEDGER_RETENTION_DAYS (0: kept forever); the row, its costs, tokens and verdict stay. With
# LEDGER_STORE_BODIES off, only a SHA-256 and the message count are written (no replay or learning
# from those calls: the cycle, the router's training data and background samples skip them).
SKILLGATE["LEDGER_RETENTION_DAYS"] = env_int("SKILLGATE_LEDGER_RETENTION_DAYS", 30)
SKILLGATE["LEDGER_STORE_BODIES"] = env_bool("SKILLGATE_LEDGER_STORE_BODIES", True)
SKILLGATE["LEDGER_PURGE_BATCH"] = env_int("SKILLGATE_LEDGER_PURGE_BATCH", 500)
CELERY_BEAT_SCHEDULE["purge-ledger-bodies"] = {
    "task": "routing.tasks.ledger_bodies_purge",
    "schedule": float(env_int("SKILLGATE_LEDGER_PURGE_EVERY_S", 3600)),
}

# Login throttling (django-axes): AXES_FAILURE_LIMIT failed logins of one username from one IP lock that
# pair out for AXES_COOLOFF_MINUTES, even with the right password; a success resets the count. Axes
# reads the client IP from REMOTE_ADDR: behind a reverse proxy every client shares the proxy's address.
INSTALLED_APPS.append("axes")
MIDDLEWARE.append("axes.middleware.AxesMiddleware")  # last, as axes asks
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out login before any check
    "django.contrib.auth.backends.ModelBackend",
]
AXES_ENABLED = env_bool("AXES_ENABLED", True)
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("AXES_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"  # a 429, in the login page's layout

# TLS. All off by default, for the local demo over plain HTTP; behind TLS set:
#   SESSION_COOKIE_SECURE=1 CSRF_COOKIE_SECURE=1   cookies only over HTTPS
#   SECURE_HSTS_SECONDS=31536000                    Strict-Transport-Security (start low, e.g. 3600)
#   SECURE_HSTS_INCLUDE_SUBDOMAINS=1                HSTS for every subdomain too
#   SECURE_SSL_REDIRECT=1                           http:// dashboard requests redirect to https://
#   SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO  a TLS-terminating proxy says so in this header
#                                                   ("HEADER" means the value https; or "HEADER,value")
# Only set SECURE_PROXY_SSL_HEADER when the proxy always sets (or strips) that header. The redirect and
# HSTS come from SecurityMiddleware, so they apply to the dashboard and /api/, not to /v1/ or /slack/
# (served without the browser middleware, app/asgi.py): terminate TLS in front of those.
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
if _proxy_ssl_header := env_optional("SECURE_PROXY_SSL_HEADER"):
    _header, _, _value = _proxy_ssl_header.partition(",")
    SECURE_PROXY_SSL_HEADER = (_header.strip(), _value.strip() or "https")
