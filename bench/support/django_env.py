"""Importing this module sets Django up, once, for a benchmark script that then imports the project's
modules (the apps' models load only after ``django.setup()``). A script imports it first of its project
imports, at the top::

    import bench.support.django_env  # noqa: F401  sets Django up before the app imports below
    from routing.models import Backend

(isort puts ``import x`` lines before ``from x import y`` lines of the same section, so it stays first.)
The settings are ``DJANGO_SETTINGS_MODULE``'s, ``app.settings`` when unset. A process that already set
Django up (pytest-django with tests.settings, a script that configured its own environment first) is
left as it is. Pure-Python tools and the tests' helpers in bench.support do not import this.
"""

from __future__ import annotations

import os

import django
from django.apps import apps

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "app.settings")
if not apps.ready:
    django.setup()
