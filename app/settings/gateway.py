"""The gateway: backends, limits, the learned router, the sandbox of code verifiers."""

from __future__ import annotations

import os
from typing import Any

from app.conf import LocalStudent
from app.settings.base import BASE_DIR, CELERY_BEAT_SCHEDULE, VAR_DIR
from core.conf import from_env
from core.env import env_optional
from routing import conf as _conf

# --- Gateway ------------------------------------------------------------------------------------
# With no provider configured, both backends are the bundled SmolLM2-135M-Instruct served locally
# by vLLM; demo prices (USD per token) make the teacher 10x the student, as a hosted model would be.
_DEMO_MODEL = "smollm2-135m-instruct"
_LOCAL_STUDENT = from_env(LocalStudent, MODEL_DIR=str(VAR_DIR / "models" / _DEMO_MODEL))
_LOCAL_VLLM = f"http://127.0.0.1:{_LOCAL_STUDENT['PORT']}/v1"
_DEMO_TEACHER_PRICES = ("0.0000005", "0.000001")
_teacher_is_provider = env_optional("SKILLGATE_TEACHER_MODEL") is not None
# Every key is declared once, with its variable, default, range and meaning, in routing/conf/ (the
# settings reference is generated from there); a value out of range stops start-up (routing's ready()).
SKILLGATE: dict[str, Any] = {
    **from_env(_conf.Limits),
    **from_env(_conf.Upstream),
    **from_env(_conf.Budgets),
    **from_env(_conf.Ledger, LEDGER_JOURNAL_DIR=VAR_DIR / "journal"),
    **from_env(_conf.Verifiers),
    "RATE_LIMIT": from_env(_conf.RateLimit),
    "TEACHER": from_env(
        _conf.TeacherBackend,
        MODEL=f"hosted_vllm/{_DEMO_MODEL}",
        API_BASE="" if _teacher_is_provider else _LOCAL_VLLM,
        INPUT_COST=None if _teacher_is_provider else _DEMO_TEACHER_PRICES[0],
        OUTPUT_COST=None if _teacher_is_provider else _DEMO_TEACHER_PRICES[1],
        # With no provider, the demo teacher is the student's base model asked for several answers,
        # the first that passes the profile's verifier winning (best-of-n): slower, dearer, more accurate.
        SAMPLES=1 if _teacher_is_provider else 4,
    ),
    "STUDENT": from_env(_conf.StudentBackend, API_BASE=_LOCAL_VLLM),
    "ROUTER": from_env(_conf.Router, MINILM_DIR=BASE_DIR / "var" / "models" / "minilm-onnx"),
    # The local student server that `manage.py serve` starts (vLLM on CPU, the demo model).
    "LOCAL_STUDENT": _LOCAL_STUDENT,
}

CELERY_BEAT_SCHEDULE["router-retrain"] = {
    "task": "routing.tasks.router_retrain_due",
    "schedule": float(SKILLGATE["ROUTER"]["RETRAIN_EVERY_S"]),
}
CELERY_BEAT_SCHEDULE["purge-ledger-bodies"] = {
    "task": "routing.tasks.ledger_bodies_purge",
    "schedule": float(SKILLGATE["LEDGER_PURGE_EVERY_S"]),
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
