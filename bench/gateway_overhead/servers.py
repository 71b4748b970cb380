"""The benchmark's servers, each a child process in its own session (bench/gateway_overhead/children.py):
the stub upstream, the floors (bench/gateway_overhead/floor.py: uvicorn + httpx; floor_aiohttp.py: the
production server, ``python -m app.serve``, + aiohttp), Skillgate (``python -m app.serve``, on a fresh
database it seeds with ``python -m bench.gateway_overhead.seed``, reached as two targets: its full and its
cheapest configuration) and the LiteLLM proxy."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.gateway_overhead.children import (
    Children,
    clean_env,
    free_port,
    managed_children,
    pinned,
    run_captured,
)
from bench.gateway_overhead.common import (
    BENCH_VENV,
    EXPECTED,
    ROOT,
    STUB_MODEL,
    TEACHER_MODEL,
    WORK,
    BenchError,
    log,
    request_body,
)

__all__ = ["Children", "Target", "clean_env", "managed_children", "run_captured"]


def wait_http(
    url: str, proc: subprocess.Popen[bytes], name: str, timeout_s: float, headers: dict[str, str]
) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(
                f"{name} exited with {proc.returncode} while starting; see var/bench/logs/{name}.log"
            )
        try:
            if httpx.get(url, headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.2)
    raise BenchError(f"{name} did not answer {url} within {timeout_s:.0f}s ({last})")


@dataclass
class Target:
    name: str
    base_url: str  # .../v1
    model: str
    pgid: int
    auth: str = ""
    extra_headers: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def headers(self) -> dict[str, str]:
        auth = {"Authorization": f"Bearer {self.auth}"} if self.auth else {}
        return {**auth, **self.extra_headers}


def start_stub(children: Children) -> Target:
    port = free_port()
    argv = pinned("rest", [sys.executable, "-m", "bench.support.openai_stub", "--port", str(port)])
    proc = children.start("stub", argv, clean_env())
    base = f"http://127.0.0.1:{port}/v1"
    wait_http(f"{base}/models", proc, "stub", 30, {})
    return Target("direct", base, STUB_MODEL, proc.pid)


def fresh_postgres(url: str) -> str:
    """Drop and re-create the database named in ``url``; only a name with 'bench' in it."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if "bench" not in name:
        raise BenchError(
            f"--database-url must name a throw-away database with 'bench' in its name, not {name!r}"
        )
    admin = urlunsplit((parts.scheme.replace("postgresql", "postgres"), parts.netloc, "/postgres", "", ""))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return url


def uvicorn_argv(app: str, port: int, workers: int) -> list[str]:
    return pinned("gateway", [
        sys.executable, "-m", "uvicorn", app,
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
        "--log-level", "warning", "--no-access-log",
    ])  # fmt: skip


def serve_argv(app: str, port: int, workers: int) -> list[str]:
    """The production form (docs/operations/deploy.md): ``workers`` processes of ``python -m app.serve``,
    each on its own SO_REUSEPORT socket of one port, in one process group (its CPU is counted whole)."""
    one = [sys.executable, "-m", "app.serve", "--app", app, "--port", str(port), "--log-level", "warning"]
    if workers == 1:
        return pinned("gateway", one)
    line = shlex.join(pinned("gateway", one))
    return ["sh", "-c", f"for i in $(seq {workers}); do {line} & done; wait"]


def start_floor(children: Children, stub: Target, workers: int) -> Target:
    """Today's floor, as issue 42 measured it: plain uvicorn (``--workers``) + httpx."""
    port = free_port()
    argv = [*uvicorn_argv("bench.gateway_overhead.floor:app", port, workers), "--lifespan", "off"]
    proc = children.start("floor", argv, clean_env(FLOOR_UPSTREAM=stub.base_url))
    base = f"http://127.0.0.1:{port}/v1"
    wait_http_post(f"{base}/chat/completions", proc, "floor", 30)
    return Target("floor", base, STUB_MODEL, proc.pid)


def start_floor_aiohttp(children: Children, stub: Target, workers: int) -> Target:
    """The second floor: the server Skillgate runs on (app/serve.py) + aiohttp's pooled client."""
    port = free_port()
    argv = serve_argv("bench.gateway_overhead.floor_aiohttp:app", port, workers)
    proc = children.start("floor-aiohttp", argv, clean_env(FLOOR_UPSTREAM=stub.base_url))
    base = f"http://127.0.0.1:{port}/v1"
    wait_http_post(f"{base}/chat/completions", proc, "floor-aiohttp", 30)
    return Target("floor-aiohttp", base, STUB_MODEL, proc.pid)


def wait_http_post(url: str, proc: subprocess.Popen[bytes], name: str, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{name} exited with {proc.returncode}; see var/bench/logs/{name}.log")
        try:
            if httpx.post(url, json=request_body(STUB_MODEL, False), timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise BenchError(f"{name} did not answer {url} within {timeout_s:.0f}s")


def start_skillgate(
    children: Children,
    stub: Target,
    database_url: str | None,
    max_in_flight: int = 0,
    workers: int = 1,
    **extra_env: str,
) -> tuple[list[Target], str, dict[str, Any]]:
    env, seed, db_label = seed_skillgate(children, stub, database_url, max_in_flight, **extra_env)
    return serve_skillgate(children, env, seed, workers), db_label, seed["router"]


def seed_skillgate(
    children: Children, stub: Target, database_url: str | None, max_in_flight: int = 0, **extra_env: str
) -> tuple[dict[str, str], dict[str, Any], str]:
    """A fresh database, seeded: (the servers' environment, the seed's keys and router, its label)."""
    if database_url:
        db_url = fresh_postgres(database_url)
        shown = urlunsplit(urlsplit(db_url)._replace(netloc=urlsplit(db_url).netloc.split("@")[-1]))
        db_label = f"PostgreSQL ({shown}, dropped and re-created, psycopg pool as in app/settings/base.py)"
    else:
        path = WORK / "skillgate.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        db_url = f"sqlite:///{path}"
        shown_path = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        db_label = f"SQLite ({shown_path}, fresh, WAL as in app/settings/base.py)"
    env = clean_env(
        DATABASE_URL=db_url,
        SKILLGATE_VAR_DIR=str(WORK / "skillgate-var"),
        SECRET_KEY="bench-only-secret-key-" + os.urandom(8).hex(),
        LOG_LEVEL="WARNING",
        DEBUG="false",
        DJANGO_SETTINGS_MODULE="app.settings",
        SKILLGATE_MAX_IN_FLIGHT=str(max_in_flight),
        # Ledger rows group-committed off the request path behind the journal (the production default).
        SKILLGATE_LEDGER_WRITER="batched",
        **extra_env,
    )
    seeded = run_captured(
        children,
        "seed",
        [sys.executable, "-m", "bench.gateway_overhead.seed", "--stub", stub.base_url],
        env,
        180,
    )
    return env, json.loads(seeded.strip().splitlines()[-1]), db_label


def serve_skillgate(
    children: Children,
    env: dict[str, str],
    seed: dict[str, Any],
    workers: int = 1,
    argv_of: Any = serve_argv,
    suffix: str = "",
) -> list[Target]:
    """Skillgate on the seeded database, served by ``argv_of(app, port, workers)`` (the production
    server unless a comparison says otherwise): its full and its cheapest configuration."""
    port = free_port()
    # The lifespan runs the ledger writer (started with the process, drained at SIGTERM).
    proc = children.start("skillgate" + suffix, argv_of("app.asgi:application", port, workers), env)
    base = f"http://127.0.0.1:{port}/v1"
    wait_http(f"http://127.0.0.1:{port}/healthz", proc, "skillgate" + suffix, 60, {})
    full = Target(
        "skillgate-full" + suffix, base, "auto", proc.pid, auth=seed["full"],
        extra_headers={"X-Skillgate-Task": seed["profile"]},
    )  # fmt: skip
    cheap = Target("skillgate-cheap" + suffix, base, "auto", proc.pid, auth=seed["cheap"])
    return [full, cheap]


def litellm_bin() -> Path:
    return BENCH_VENV / "bin" / "litellm"


def start_litellm_proxy(children: Children, stub: Target) -> Target:
    if not litellm_bin().exists():
        raise BenchError(
            f"{litellm_bin()} is missing: create var/bench-venv as bench/README.md says, or pass --skip-proxy"
        )
    config = WORK / "litellm-proxy.yaml"
    # YAML is a superset of JSON, so the config is written as JSON.
    config.write_text(
        json.dumps(
            {
                "model_list": [
                    {
                        "model_name": STUB_MODEL,
                        "litellm_params": {
                            "model": TEACHER_MODEL,
                            "api_base": stub.base_url,
                            "api_key": "none",
                        },
                    }
                ],
                "litellm_settings": {
                    "drop_params": True,
                    "set_verbose": False,
                    "turn_off_message_logging": True,
                    "callbacks": [],
                    "success_callback": [],
                    "failure_callback": [],
                },
                "general_settings": {"disable_spend_logs": True, "disable_error_logs": True},
            },
            indent=2,
        )
    )
    port = free_port()
    env = clean_env(
        LITELLM_OFFLINE_MODE="true",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_LOG="ERROR",
        LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY="true",  # "master key off", as asked
        LITELLM_MODE="PRODUCTION",
        DISABLE_ADMIN_UI="true",
        NO_DOCS="true",
        PATH=f"{BENCH_VENV / 'bin'}:{os.environ.get('PATH', '')}",
    )
    argv = pinned("gateway", [
        str(litellm_bin()), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
        "--num_workers", "1",
    ])  # fmt: skip
    proc = children.start("litellm-proxy", argv, env)
    wait_http(f"http://127.0.0.1:{port}/health/liveliness", proc, "litellm-proxy", 180, {})
    return Target("litellm-proxy", f"http://127.0.0.1:{port}/v1", STUB_MODEL, proc.pid)


# --- checks and measurements --------------------------------------------------------------------


def sanity_check(target: Target) -> None:
    """One real request of each kind; the answer must carry the stub's content and usage."""
    import httpx

    url = f"{target.base_url}/chat/completions"
    with httpx.Client(timeout=60) as client:
        resp = client.post(url, json=request_body(target.model, False), headers=target.headers())
        if resp.status_code != 200:
            raise BenchError(f"{target.name}: HTTP {resp.status_code}: {resp.text[:300]}")
        data = resp.json()
        content = data["choices"][0]["message"]["content"]
        usage = data.get("usage") or {}
        if content != EXPECTED or not usage.get("total_tokens"):
            raise BenchError(f"{target.name}: unexpected answer {content!r} / usage {usage!r}")
        served = (resp.headers.get("x-skillgate-served-by"), resp.headers.get("x-skillgate-verdict"))
        expected = {"skillgate-full": ("student", "pass"), "skillgate-cheap": ("teacher", "unverified")}
        kind = target.name.split("@")[0]  # "skillgate-full@granian": the same configuration, another server
        if kind in expected and served != expected[kind]:
            raise BenchError(f"{target.name}: served/verdict {served}, not {expected[kind]}")
        pieces: list[str] = []
        usage = {}
        events: list[str] = []
        with client.stream(
            "POST", url, json=request_body(target.model, True), headers=target.headers()
        ) as sresp:
            if sresp.status_code != 200:
                raise BenchError(f"{target.name}: stream HTTP {sresp.status_code}: {sresp.read()[:300]!r}")
            for line in sresp.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if line[6:] == "[DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise BenchError(f"{target.name}: error event in stream: {chunk}")
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or []:
                    pieces.append((choice.get("delta") or {}).get("content") or "")
        streamed = "".join(pieces).strip()
        if streamed != EXPECTED or not usage.get("total_tokens") or events[-1:] != ["[DONE]"]:
            raise BenchError(
                f"{target.name}: bad stream: content {streamed!r}, usage {usage!r}, end {events[-1:]}"
            )
        # a few more calls so that lazy imports and connection pools are warm before measuring
        for _ in range(20):
            client.post(
                url, json=request_body(target.model, False), headers=target.headers()
            ).raise_for_status()
    log(f"sanity check passed: {target.name} answered {content!r} (JSON) and {streamed!r} (SSE) with usage")
