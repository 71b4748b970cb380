"""Django, the database, the cache and Celery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dj_database_url

from core.env import env_bool, env_float, env_int, env_list, env_optional, env_str

BASE_DIR = Path(__file__).resolve().parent.parent.parent
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
    "app.admin_site.SkillgateAdminConfig",  # django.contrib.admin, its actions' selection checked
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "ninja",  # django-ninja: its Swagger UI static files, served locally (no CDN)
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
    # A call waits at most DB_POOL_TIMEOUT_S for a connection (psycopg's default is 30 s): while
    # PostgreSQL is down, callers get a prompt 503 instead of hanging (routing/api/app.py).
    DATABASES["default"]["OPTIONS"] = {
        "pool": {
            "min_size": 2,
            "max_size": env_int("DB_POOL_SIZE", 20),
            "timeout": env_float("DB_POOL_TIMEOUT_S", 5.0),
        }
    }
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
    "reset-key-budgets": {"task": "routing.tasks.api_keys_budget_reset", "schedule": 60.0},
    "expire-diagnostic-actions": {"task": "diagnostics.tasks.expire_actions", "schedule": 60.0},
    "purge-slack-events": {"task": "diagnostics.slack.tasks.purge_events", "schedule": 3600.0},
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
