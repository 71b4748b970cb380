"""The test run's settings: the service's own (app/settings/), with each pytest-xdist worker given its
own queue, cache keys, ledger journal, adapters and artifacts, so that workers running side by side
never take each other's messages or files. The test database gets its ``_gwN`` suffix from pytest-django.

Set in the environment, before the service's settings read it, so that the servers and Celery workers a
test starts as subprocesses (they inherit the environment) are on the same worker's queue and folders.
"""

import os
from pathlib import Path

_root = Path(__file__).resolve().parents[1]
# Two test runs at once on one machine (a developer's and CI's, or CI's two suites side by side) never
# share a test database, a worker's folders or its artifacts.
_run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:8] or str(os.getpid())
if "TEST_DATABASE_NAME" not in os.environ:
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        os.environ["TEST_DATABASE_NAME"] = f"test_skillgate_{_run}"
    else:
        os.environ["TEST_DATABASE_NAME"] = str(_root / "var" / f"test-{_run}.sqlite3")

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
# Once per worker: the processes a test starts inherit the result (and may override a folder of it).
if _worker and os.environ.get("SKILLGATE_TEST_WORKER") != _worker:
    os.environ["SKILLGATE_TEST_WORKER"] = _worker
    _mine = _root / "var" / "test-workers" / f"{_worker}-{_run}"
    os.environ["CELERY_DEFAULT_QUEUE"] = f"{os.environ.get('CELERY_DEFAULT_QUEUE', 'default')}_{_worker}"
    os.environ["CACHE_KEY_PREFIX"] = f"{os.environ.get('CACHE_KEY_PREFIX', 'skillgate')}_{_worker}"
    os.environ["SKILLGATE_LEDGER_JOURNAL_DIR"] = str(_mine / "journal")
    os.environ["SKILLGATE_ADAPTER_DIR"] = str(_mine / "adapters")
    _artifacts = os.environ.get("SKILLGATE_TEST_ARTIFACTS", str(_root / "var" / "test-artifacts"))
    os.environ["SKILLGATE_TEST_ARTIFACTS"] = str(Path(_artifacts) / f"{_worker}-{_run}")

from app.settings import *  # noqa: E402, F403
