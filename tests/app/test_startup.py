"""Importing the settings writes nothing; start-up (Django's setup) makes var/ and one secret key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, var_dir: Path, **env: str) -> str:
    environment = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "CELERY_BROKER_URL")}
    environment |= {"SKILLGATE_VAR_DIR": str(var_dir), "DJANGO_SETTINGS_MODULE": "app.settings", **env}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_the_settings_writes_no_file(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    run_python("import app.settings", var_dir)
    assert not var_dir.exists()


def test_start_up_makes_the_folders_and_keeps_one_generated_secret_key(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    show_key = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"
    first = run_python(show_key, var_dir)
    assert len(first) > 40
    assert {p.name for p in var_dir.iterdir()} >= {"secret_key", "static", "broker"}
    assert {p.name for p in (var_dir / "broker").iterdir()} == {"queue", "processed", "control"}
    assert (var_dir / "secret_key").stat().st_mode & 0o777 == 0o600
    assert run_python(show_key, var_dir) == first  # the next process reads the same key


def test_a_configured_secret_key_is_used_and_nothing_is_generated(tmp_path: Path) -> None:
    var_dir = tmp_path / "var"
    code = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"
    assert run_python(code, var_dir, SECRET_KEY="configured-" + "x" * 50) == "configured-" + "x" * 50
    assert not (var_dir / "secret_key").exists()


def test_the_web_process_freezes_its_imports_and_collects_young_objects_rarely(tmp_path: Path) -> None:
    """app.asgi (what every web process loads) leaves the import graph out of the cyclic GC's sight and
    raises the young generation's threshold: at 256 calls in flight, CPython's 700 made the GC's CPU per
    call grow with the connections (issue 42)."""
    shown = run_python(
        "import gc, app.asgi; print(*gc.get_threshold(), gc.get_freeze_count())", tmp_path / "var"
    )
    young, middle, old, frozen = (int(n) for n in shown.split()[-4:])
    assert (young, middle, old) == (50_000, 10, 10)
    assert frozen > 100_000  # Django, litellm, scikit-learn: hundreds of thousands of objects
