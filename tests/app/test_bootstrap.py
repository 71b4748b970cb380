"""`bootstrap` syncs the backends from the environment: a teacher configured by environment is
what the gateway calls, priced from litellm's map."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import httpx
import openai

from bench.support.vllm import free_port
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]


def wait_healthy(url: str) -> None:
    def healthy() -> bool:
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(healthy, timeout=60, interval=0.2, what=f"{url} to answer 200")


def test_teacher_configured_by_environment_answers_calls(tmp_path, stub):
    port = free_port()
    env = {
        "PATH": "/usr/bin:/bin",
        "SKILLGATE_VAR_DIR": str(tmp_path / "var"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "SKILLGATE_TEACHER_MODEL": "openai/gpt-4o-mini",
        "SKILLGATE_TEACHER_API_BASE": stub.base_url,
        "SKILLGATE_TEACHER_API_KEY": "sk-test-provider-key",
    }
    out = subprocess.run(
        [sys.executable, "manage.py", "bootstrap"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    key = next(line.split()[3] for line in out.splitlines() if line.startswith("Demo API key:"))
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "app.asgi:application",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}/healthz")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": "hello"}]
        )
    finally:
        server.terminate()
        server.wait(20)
    assert raw.headers["x-skillgate-served-by"] == "teacher"
    assert Decimal(raw.headers["x-skillgate-cost-usd"]) > 0  # gpt-4o-mini's price from litellm's map
    assert stub.requests[-1]["model"] == "gpt-4o-mini"
    # The provider key is read from the environment at call time and sent to the provider.
    assert stub.authorizations[-1] == "Bearer sk-test-provider-key"
