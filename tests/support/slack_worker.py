"""The Celery app for the worker of the end-to-end Slack test: the project's app, plus the fake
environment of the diagnostics tests (registered here, in the worker) as the default environment.

Run as ``celery -A tests.support.slack_worker worker`` (tests/slack/test_worker.py does).
"""

import django
from django.conf import settings

from app.celery import celery_app
from core.conf import forget

django.setup()

import tests.support.fake_environment  # noqa: E402, F401  (registers the "fake" environment)

settings.DIAGNOSTICS_DEFAULT_ENVIRONMENT = "fake"
forget()  # the typed settings (diagnostics.conf) are built again with it

__all__ = ["celery_app"]
