"""The one-machine layout's tests (tests/deploy/test_onebox_*.py): its database and settings, the stub
upstream's answers, and the calls the tests make to it. Its fixtures are in tests/deploy/conftest.py."""

from __future__ import annotations

import json
import os
import random
import subprocess
import urllib.error
import urllib.request
from typing import Any

import httpx

from bench.support.openai_stub import Reply
from tests.deploy.manifests import ROOT
from tests.support.cycle import responder, student, teacher, user_text

POSTGRES = os.environ.get("SKILLGATE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432")
REDIS = os.environ.get("SKILLGATE_TEST_REDIS", "redis://127.0.0.1:6379")
PROGRAMS = {"web", "worker-default", "worker-diagnostics", "worker-learning", "worker-gpu", "beat"}
HELLO = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}


def psql(sql: str, database: str = "postgres") -> str:
    done = subprocess.run(
        ["psql", f"{POSTGRES}/{database}", "-q", "-At", "-c", sql],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.strip()


def respond(body: dict[str, Any]) -> Reply:
    """HELLO gets max_tokens words after a short delay (the budget test); the cycle's calls get a
    student that is wrong without a SkillBook and a teacher that answers and writes one."""
    if user_text(body) == "hi":
        return Reply(content=" ".join(["word"] * 50), delay_s=random.uniform(0.1, 0.5))
    return responder(student=student, teacher=teacher)(body)


def seed(onebox: dict[str, Any], *args: str) -> dict[str, str]:
    """Runs tests/deploy/onebox_seed.py in the onebox's environment, against its database."""
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-m", "tests.deploy.onebox_seed", *args],
        env=onebox["env"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return result


def chat(base: str, key: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}", **headers},
        timeout=120,
    )


def log_of(onebox: dict[str, Any], program: str) -> str:
    return "".join(p.read_text(errors="replace") for p in (onebox["var"] / "logs").glob(f"{program}-*.log"))


def http_get(url: str, token: str = "") -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, ""
