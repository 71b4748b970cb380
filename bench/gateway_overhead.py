"""Gateway overhead: the same upstream reached directly, through Skillgate and through a LiteLLM proxy.

One run starts an OpenAI-protocol stub upstream (``tests.support.openai_stub``), Skillgate (uvicorn,
``app.asgi:application``, a fresh migrated SQLite database under var/bench/, or PostgreSQL with
``--database-url``) and a LiteLLM proxy (from var/bench-venv), each its own process with a single
worker. An open-loop load generator (its own process, asyncio + aiohttp) offers fixed request rates
to each target, non-streaming and streaming, and records latency percentiles, errors and the
CPU the server used; then a step search finds the highest rate each target sustains.

    .venv/bin/python -m bench.gateway_overhead            # full run, several minutes
    .venv/bin/python -m bench.gateway_overhead --quick    # smoke test, about a minute

See bench/README.md for the set-up of var/bench-venv and how to read the results.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import resource
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "var" / "bench"
BENCH_VENV = ROOT / "var" / "bench-venv"
RESULTS = ROOT / "bench" / "results" / "gateway_overhead.md"

STUB_MODEL = "bench-model"  # what the stub and the LiteLLM proxy are asked for
TEACHER_MODEL = f"openai/{STUB_MODEL}"  # the litellm model string of Skillgate's teacher row
PROMPT = "Reply with the word ok."
MAX_TOKENS = 16
EXPECTED = "ok"  # the stub's default answer
DONE = b"data: [DONE]\n\n"

DEFAULT_RATES = "50,100,200"
DEFAULT_STEPS = "5,10,20,30,50,75,100,150,200,300,400,600,800,1000"
SUSTAIN_FRACTION = 0.95
TARGET_ORDER = ("direct", "skillgate", "litellm-proxy")
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    pass


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def request_body(model: str, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": MAX_TOKENS,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


# --- CPU accounting from /proc ------------------------------------------------------------------


def group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of the live processes in process group ``pgid``."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


def cpu_snapshot(groups: dict[str, int]) -> dict[str, Any]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "groups": {name: group_cpu_s(pgid) for name, pgid in groups.items()},
        "self": own.ru_utime + own.ru_stime,
        "machine": machine_jiffies(),
    }


# --- the load generator (runs as its own process: ``python -m bench.gateway_overhead _load``) ----


def percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)

    def rank(p: float) -> float:
        index = max(0, min(len(ordered) - 1, int(-(-p * len(ordered) // 100)) - 1))
        return ordered[index]

    return {"p50": rank(50), "p95": rank(95), "p99": rank(99), "max": ordered[-1]}


@dataclass
class Sample:
    intended: float
    sent: float
    done: float
    ttfb: float | None
    ok: bool
    error: str
    overhead_ms: float | None


async def _one(
    session: Any, url: str, body: bytes, headers: dict[str, str], stream: bool, intended: float
) -> Sample:
    import aiohttp

    clock = time.perf_counter
    sent = clock()
    ttfb: float | None = None
    error = ""
    overhead: float | None = None
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            header = resp.headers.get("x-skillgate-overhead-ms")
            overhead = float(header) if header else None
            if stream:
                tail = b""
                bad = False
                async for chunk in resp.content.iter_any():
                    if ttfb is None:
                        ttfb = clock()
                    bad = bad or b'"error"' in chunk
                    tail = (tail + chunk)[-len(DONE) :]
                if resp.status != 200:
                    error = f"HTTP {resp.status}"
                elif bad:
                    error = "error event in stream"
                elif tail != DONE:
                    error = "stream ended without [DONE]"
            else:
                data = await resp.read()
                if resp.status != 200:
                    error = f"HTTP {resp.status}: {data[:120].decode(errors='replace')}"
                elif f'"{EXPECTED}"'.encode() not in data:
                    error = "answer without the stub's content"
    except TimeoutError:
        error = "client timeout"
    except aiohttp.ClientError as exc:
        error = f"{type(exc).__name__}: {str(exc)[:80]}"
    return Sample(intended, sent, clock(), ttfb, not error, error, overhead)


async def _generate(args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    stream = bool(args.stream)
    url = args.url.rstrip("/") + "/chat/completions"
    body = json.dumps(request_body(args.model, stream)).encode()
    headers = {"Content-Type": "application/json"}
    if os.environ.get("BENCH_AUTH"):
        headers["Authorization"] = f"Bearer {os.environ['BENCH_AUTH']}"
    groups = {name: int(pgid) for name, pgid in (item.split("=") for item in args.watch)}
    rate, warmup, duration = args.rate, args.warmup, args.duration
    count = max(1, round(rate * (warmup + duration)))
    connector = aiohttp.TCPConnector(limit=args.connections, keepalive_timeout=60)
    timeout = aiohttp.ClientTimeout(total=args.timeout)
    clock = time.perf_counter
    tasks: list[asyncio.Task[Sample]] = []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        start = clock() + 0.05
        window = (start + warmup, start + warmup + duration)
        before: dict[str, Any] | None = None
        after: dict[str, Any] | None = None

        async def snapshot_at(moment: float) -> dict[str, Any]:
            await asyncio.sleep(max(0.0, moment - clock()))
            return await asyncio.to_thread(cpu_snapshot, groups)

        first_snap = asyncio.create_task(snapshot_at(window[0]))
        last_snap = asyncio.create_task(snapshot_at(window[1]))
        for i in range(count):
            intended = start + i / rate
            delay = intended - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(session, url, body, headers, stream, intended)))
        samples = await asyncio.gather(*tasks)
        before, after = await first_snap, await last_snap
    usage = resource.getrusage(resource.RUSAGE_SELF)
    measured = [s for s in samples if s.intended >= window[0]]
    good = [s for s in measured if s.ok]
    completed_in_window = sum(1 for s in samples if s.ok and window[0] <= s.done <= window[1])
    errors = Counter(s.error for s in measured if not s.ok)
    warmup_errors = Counter(s.error for s in samples if s.intended < window[0] and not s.ok)
    busy = after["machine"][0] - before["machine"][0]
    total = after["machine"][1] - before["machine"][1]
    cpu = {name: after["groups"][name] - before["groups"][name] for name in groups}
    ours = sum(cpu.values()) + after["self"] - before["self"]
    overheads = [s.overhead_ms for s in good if s.overhead_ms is not None]
    return {
        "offered": rate,
        "duration": duration,
        "sent": len(measured),
        "ok": len(good),
        "errors": sum(errors.values()),
        "error_kinds": dict(errors),
        "warmup_errors": dict(warmup_errors),
        "achieved": completed_in_window / duration,
        "ttlb_ms": percentiles([(s.done - s.intended) * 1000 for s in good]),
        "ttfb_ms": percentiles([(s.ttfb - s.intended) * 1000 for s in good if s.ttfb is not None])
        if stream
        else None,
        "send_lag_ms": percentiles([(s.sent - s.intended) * 1000 for s in measured]),
        "skillgate_overhead_hdr_ms": percentiles(overheads),
        "cpu_s": cpu,
        "machine_busy_pct": 100.0 * busy / total if total else 0.0,
        # CPU used by processes that are not part of this benchmark (other work on the machine)
        "others_busy_pct": max(0.0, 100.0 * (busy / CLK_TCK - ours) / (total / CLK_TCK)) if total else 0.0,
        "generator_window_cpu_s": after["self"] - before["self"],
        "generator_cpu_s": usage.ru_utime + usage.ru_stime,
    }


def load_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="gateway_overhead _load")
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--stream", type=int, default=0)
    parser.add_argument("--rate", type=float, required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--warmup", type=float, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--watch", action="append", default=[], help="name=pgid, CPU counted in the window")
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(_generate(args))), flush=True)


# --- Skillgate's database (runs as its own process: ``python -m bench.gateway_overhead _seed``) --


def seed_main(argv: list[str]) -> None:
    """Migrate the (fresh) database, add a teacher and a student backend on the stub, make a key."""
    parser = argparse.ArgumentParser(prog="gateway_overhead _seed")
    parser.add_argument("--stub", required=True, help="the stub's base URL, .../v1")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "app.settings")
    import django

    django.setup()
    from decimal import Decimal

    from django.core.management import call_command

    from routing.models import Backend
    from routing.services import api_key_create

    call_command("migrate", verbosity=0, interactive=False)
    Backend.objects.create(
        name="bench-teacher",
        role=Backend.Role.TEACHER,
        model=TEACHER_MODEL,
        api_base=args.stub,
        input_cost_per_token=Decimal("0.000010"),
        output_cost_per_token=Decimal("0.000030"),
        timeout_s=30.0,
    )
    Backend.objects.create(
        name="bench-student",
        role=Backend.Role.STUDENT,
        model="openai/bench-student",
        api_base=args.stub,
        input_cost_per_token=Decimal("0.000001"),
        output_cost_per_token=Decimal("0.000003"),
        timeout_s=30.0,
    )
    _, raw = api_key_create(name="bench")
    print(json.dumps({"key": raw}), flush=True)


# --- child processes ----------------------------------------------------------------------------


class Children:
    """Every child runs in its own session (process group); ``stop_all`` ends the groups."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(
        self, name: str, argv: list[str], env: dict[str, str], *, capture: bool = False
    ) -> subprocess.Popen[bytes]:
        if capture:
            stdout: Any = subprocess.PIPE
        else:
            stdout = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed with the child
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=stdout,
            stderr=open(self.log_dir / f"{name}.log", "ab") if capture else subprocess.STDOUT,  # noqa: SIM115
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def stop(self, name: str, grace_s: float = 10.0) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                continue
            # the leader is gone; make sure nothing else of its group lingers
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            break
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

    def stop_all(self) -> None:
        for name in reversed(list(self.procs)):
            self.stop(name)


def run_captured(children: Children, name: str, argv: list[str], env: dict[str, str], timeout: float) -> str:
    proc = children.start(name, argv, env, capture=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(
            f"{name} did not finish within {timeout:.0f}s; see {children.log_dir}/{name}.log"
        ) from None
    finally:
        children.stop(name, grace_s=2.0)
    if proc.returncode != 0:
        tail = (children.log_dir / f"{name}.log").read_text(errors="replace")[-2000:]
        raise BenchError(f"{name} exited with {proc.returncode}:\n{tail}")
    return out.decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    drop = (
        "DATABASE_URL",
        "CACHE_URL",
        "CELERY_",
        "SKILLGATE_",
        "LITELLM_",
        "DJANGO_",
        "PYTHONPATH",
        "VIRTUAL_ENV",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


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
    notes: list[str] = field(default_factory=list)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.auth}"} if self.auth else {}


def start_stub(children: Children) -> Target:
    port = free_port()
    argv = [sys.executable, "-m", "tests.support.openai_stub", "--port", str(port)]
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


def start_skillgate(
    children: Children, stub: Target, database_url: str | None, max_in_flight: int = 0
) -> tuple[Target, str]:
    if database_url:
        db_url = fresh_postgres(database_url)
        shown = urlunsplit(urlsplit(db_url)._replace(netloc=urlsplit(db_url).netloc.split("@")[-1]))
        db_label = f"PostgreSQL ({shown}, dropped and re-created, psycopg pool as in app/settings.py)"
    else:
        path = WORK / "skillgate.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        db_url = f"sqlite:///{path}"
        db_label = f"SQLite ({path.relative_to(ROOT)}, fresh, WAL as in app/settings.py)"
    env = clean_env(
        DATABASE_URL=db_url,
        SKILLGATE_VAR_DIR=str(WORK / "skillgate-var"),
        SECRET_KEY="bench-only-secret-key-" + os.urandom(8).hex(),
        LOG_LEVEL="WARNING",
        DEBUG="false",
        DJANGO_SETTINGS_MODULE="app.settings",
        SKILLGATE_MAX_IN_FLIGHT=str(max_in_flight),
    )
    seeded = run_captured(
        children,
        "seed",
        [sys.executable, "-m", "bench.gateway_overhead", "_seed", "--stub", stub.base_url],
        env,
        180,
    )
    key = json.loads(seeded.strip().splitlines()[-1])["key"]
    port = free_port()
    argv = [
        sys.executable, "-m", "uvicorn", "app.asgi:application",
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
        "--log-level", "warning", "--no-access-log", "--lifespan", "off",
    ]  # fmt: skip
    proc = children.start("skillgate", argv, env)
    base = f"http://127.0.0.1:{port}/v1"
    wait_http(f"http://127.0.0.1:{port}/healthz", proc, "skillgate", 60, {})
    return Target("skillgate", base, "auto", proc.pid, auth=key), db_label


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
    argv = [
        str(litellm_bin()), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
        "--num_workers", "1",
    ]  # fmt: skip
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
        if target.name == "skillgate" and resp.headers.get("x-skillgate-served-by") != "teacher":
            raise BenchError(f"skillgate: not served by the teacher: {dict(resp.headers)}")
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


@dataclass
class Settings:
    duration: float
    warmup: float
    timeout: float


def settle(groups: dict[str, int], limit_s: float = 30.0) -> None:
    """Wait until the servers are idle (after an overloaded point, backlogs drain first)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = sum(group_cpu_s(pgid) for pgid in groups.values())
        time.sleep(0.5)
        if sum(group_cpu_s(pgid) for pgid in groups.values()) - before < 0.05:
            return


def run_point(
    children: Children, target: Target, groups: dict[str, int], stream: bool, rate: float, cfg: Settings
) -> dict[str, Any]:
    settle(groups)
    argv = [
        sys.executable, "-m", "bench.gateway_overhead", "_load",
        "--url", target.base_url, "--model", target.model, "--stream", str(int(stream)),
        "--rate", str(rate), "--duration", str(cfg.duration), "--warmup", str(cfg.warmup),
        "--timeout", str(cfg.timeout),
    ]  # fmt: skip
    for name, pgid in groups.items():
        argv += ["--watch", f"{name}={pgid}"]
    env = clean_env(BENCH_AUTH=target.auth)
    out = run_captured(children, "loadgen", argv, env, cfg.warmup + cfg.duration + cfg.timeout + 60)
    result = json.loads(out.strip().splitlines()[-1])
    result.update(target=target.name, mode="stream" if stream else "json", rate=rate)
    result["passed"] = result["errors"] == 0 and result["achieved"] >= SUSTAIN_FRACTION * rate
    ttlb = result["ttlb_ms"] or {}
    log(
        f"{target.name:13s} {result['mode']:6s} {rate:6.0f} RPS: achieved {result['achieved']:7.1f}, "
        f"errors {result['errors']}, P50 {ttlb.get('p50', float('nan')):7.2f} ms, "
        f"P99 {ttlb.get('p99', float('nan')):8.2f} ms, "
        f"server CPU {result['cpu_s'].get(target.name, 0):.2f}s, "
        f"machine {result['machine_busy_pct']:.0f}% busy (others {result['others_busy_pct']:.0f}%)"
        + ("" if result["passed"] else "  -> NOT sustained")
    )
    return result


def capacity_search(
    children: Children,
    target: Target,
    groups: dict[str, int],
    stream: bool,
    steps: list[float],
    cfg: Settings,
    known: dict[tuple[str, str, float], dict[str, Any]],
) -> dict[str, Any]:
    """The highest step sustained, starting from what the fixed rates already showed.

    Upwards from the highest rate known to pass until one fails, or, when none passed yet,
    downwards from the lowest failure until one passes.
    """
    mode = "stream" if stream else "json"

    def at(rate: float) -> dict[str, Any]:
        if (target.name, mode, rate) not in known:
            known[(target.name, mode, rate)] = run_point(children, target, groups, stream, rate, cfg)
        return known[(target.name, mode, rate)]

    rates = sorted({*steps, *(r for (name, m, r) in known if name == target.name and m == mode)})
    tried = {r: known[(target.name, mode, r)] for r in rates if (target.name, mode, r) in known}
    best_rate = max((r for r, res in tried.items() if res["passed"]), default=None)
    fail_rate = min(
        (r for r, res in tried.items() if not res["passed"] and r > (best_rate or 0)), default=None
    )
    best = tried[best_rate] if best_rate is not None else None
    failed = tried[fail_rate] if fail_rate is not None else None
    if best is None:
        for rate in reversed([r for r in rates if fail_rate is None or r < fail_rate]):
            result = at(rate)
            if result["passed"]:
                best = result
                break
            failed = result
    else:
        for rate in [r for r in rates if r > best["rate"] and (fail_rate is None or r < fail_rate)]:
            result = at(rate)
            if not result["passed"]:
                failed = result
                break
            best = result
    return {"target": target.name, "mode": mode, "best": best, "failed": failed, "cap": rates[-1]}


# --- report -------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _triple(stats: dict[str, float] | None, base: dict[str, float] | None, keys: tuple[str, ...]) -> str:
    if not stats or not base:
        return "–"
    return " / ".join(
        f"{stats[k] - base[k]:+.1f}" if abs(stats[k] - base[k]) >= 10 else f"{stats[k] - base[k]:+.2f}"
        for k in keys
    )


def _row(result: dict[str, Any], base: dict[str, Any] | None, rate_label: str) -> str:
    ttlb, ttfb = result.get("ttlb_ms"), result.get("ttfb_ms")
    direct = base is not None and result["target"] == "direct"
    added = "(baseline)" if direct else _triple(ttlb, base and base.get("ttlb_ms"), ("p50", "p95", "p99"))
    if result["mode"] == "stream":
        first = f"{_ms(ttfb and ttfb['p50'])} / {_ms(ttfb and ttfb['p99'])}" if ttfb else "–"
        added_first = "(baseline)" if direct else _triple(ttfb, base and base.get("ttfb_ms"), ("p50", "p99"))
    else:
        first = added_first = "–"
    answered = result["achieved"] * result["duration"] or result["offered"] * result["duration"]
    cpu = result["cpu_s"].get(result["target"], 0.0) * 1000 / answered
    errors = str(result["errors"])
    if result["errors"]:
        errors += " (" + "; ".join(f"{n}× {kind}" for kind, n in result["error_kinds"].items()) + ")"
    return (
        f"| {result['target']} | {result['mode']} | {rate_label} | {result['achieved']:.1f}"
        f"{'' if result['passed'] else ' ✗'} | {errors} | "
        f"{_ms(ttlb and ttlb['p50'])} | {_ms(ttlb and ttlb['p95'])} | {_ms(ttlb and ttlb['p99'])} | "
        f"{added} | "
        f"{first} | {added_first} | {cpu:.2f} | {result['machine_busy_pct']:.0f} "
        f"({result['others_busy_pct']:.0f}) |"
    )


HEADER = (
    "| target | mode | offered RPS | achieved RPS | errors | P50 ms | P95 ms | P99 ms "
    "| added P50 / P95 / P99 ms | TTFB P50 / P99 ms | added TTFB P50 / P99 ms "
    "| server CPU ms/req | machine CPU % (others) |\n"
    "|---|---|---:|---:|---|---:|---:|---:|---|---|---|---:|---:|"
)


def render_table(
    fixed: list[dict[str, Any]], searches: list[dict[str, Any]], known: dict[tuple[str, str, float], Any]
) -> str:
    rows = [HEADER]
    order = {name: i for i, name in enumerate(TARGET_ORDER)}
    for mode in ("json", "stream"):
        points = sorted(
            (r for r in fixed if r["mode"] == mode), key=lambda r: (r["rate"], order[r["target"]])
        )
        for result in points:
            base = known.get(("direct", mode, result["rate"]))
            rows.append(_row(result, base, f"{result['rate']:.0f}"))
        for search in sorted((s for s in searches if s["mode"] == mode), key=lambda s: order[s["target"]]):
            best = search["best"]
            if best is None:
                first = search["failed"]
                label = f"**max < {first['rate']:.0f}**"
                rows.append(_row(first, known.get(("direct", mode, first["rate"])), label))
                continue
            label = f"**max {best['rate']:.0f}**" if search["failed"] else f"**max ≥ {best['rate']:.0f}**"
            rows.append(_row(best, known.get(("direct", mode, best["rate"])), label))
    return "\n".join(rows)


def search_log(searches: list[dict[str, Any]], known: dict[tuple[str, str, float], Any]) -> list[str]:
    lines = []
    for search in searches:
        steps = sorted(
            (
                r
                for (name, mode, _), r in known.items()
                if name == search["target"] and mode == search["mode"]
            ),
            key=lambda r: r["rate"],
        )
        parts = []
        for r in steps:
            verdict = "ok" if r["passed"] else "FAIL"
            p99 = (r["ttlb_ms"] or {}).get("p99")
            parts.append(
                f"{r['rate']:.0f}: {verdict} (achieved {r['achieved']:.1f}, {r['errors']} errors, "
                f"P99 {_ms(p99)} ms)"
            )
        lines.append(f"- {search['target']} / {search['mode']}: " + "; ".join(parts))
    return lines


def _version(python: Path, module: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({module!r}))"
    try:
        return subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return "n/a"


def environment_lines(db_label: str, with_proxy: bool) -> list[str]:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    with open("/proc/meminfo") as fh:
        mem_gib = int(fh.readline().split()[1]) / 1024 / 1024
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "routing", "app"], cwd=ROOT, capture_output=True, text=True
    )
    py = Path(sys.executable)
    versions = ", ".join(
        f"{m} {_version(py, m)}"
        for m in ("django", "uvicorn", "uvloop", "httptools", "litellm", "aiohttp", "httpx")
    )
    lines = [
        f"- Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {cpu}, {os.cpu_count()} CPUs, {mem_gib:.0f} GiB RAM, {platform.platform()}",
        f"- Code: commit {commit.stdout.strip() or '?'}"
        + (" (routing/ or app/ modified)" if dirty.stdout.strip() else " (routing/ and app/ clean)"),
        f"- Python {platform.python_version()}; gateway venv: {versions}",
        f"- Skillgate database: {db_label}",
        f"- Niceness of the benchmark's processes: {os.nice(0)}",
    ]
    if with_proxy:
        bench_py = BENCH_VENV / "bin" / "python"
        proxy_versions = ", ".join(
            f"{m} {_version(bench_py, m)}" for m in ("litellm", "fastapi", "uvicorn", "uvloop")
        )
        lines.append(f"- LiteLLM proxy venv (var/bench-venv): {proxy_versions}")
    return lines


def write_report(
    path: Path,
    args: argparse.Namespace,
    cfg: Settings,
    env_lines: list[str],
    table: str,
    searches: list[str],
    errors: list[str],
) -> None:
    command = ".venv/bin/python -m bench.gateway_overhead " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    text = "\n".join(
        [
            "# Gateway overhead: direct vs Skillgate vs LiteLLM proxy",
            "",
            *env_lines,
            f"- Command: `{command.strip()}`",
            f"- Per point: {cfg.warmup:g} s warm-up (discarded), then {cfg.duration:g} s measured; "
            f"client timeout {cfg.timeout:g} s; rates {args.rates}; search steps {args.search_steps}",
            "",
            "Method: one stub upstream (`tests/support/openai_stub.py`, aiohttp, answers `ok` at once), one "
            "Skillgate (`uvicorn app.asgi:application`, one worker process, model `auto`, default profile, "
            "so every call goes to the teacher row on the stub and writes its ledger row), one LiteLLM proxy "
            "(`litellm --config`, `--num_workers 1`, no database, no master key, logging off, "
            "LITELLM_OFFLINE_MODE=true). Each server is a single process; all of them, and the load "
            "generator, share the machine's CPUs. The generator is open-loop (requests start on a fixed "
            "schedule, whatever earlier requests are doing; asyncio + aiohttp, one connection pool) and "
            "times each request from its scheduled start, so queueing in any process shows up as latency. "
            "Latency is time to last byte; TTFB is time to the first body byte of a stream. "
            "`added` = percentile of the target minus the same percentile of `direct` at the same rate. "
            "A rate is sustained when it has no errors and the completions within the measured window are "
            f"at least {SUSTAIN_FRACTION:.0%} of the offered rate (✗ after the achieved rate: not sustained, "
            "so its latencies are those of a growing queue); **max** rows are the highest sustained "
            "step of the search (the next step failed; ≥ means the last step passed). CPU ms/req is the "
            "server process's user+system CPU in the measured window divided by the requests answered in "
            "it (on an overloaded point this includes work on requests the client gave up on); "
            "machine CPU % is the whole machine's (100% = all CPUs busy), and in brackets the part used by "
            "processes outside this benchmark (other work sharing the machine).",
            "",
            table,
            "",
            "Capacity search steps:",
            "",
            *searches,
            "",
            "Errors seen: " + ("none." if not errors else ""),
            *errors,
            "",
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# --- main ---------------------------------------------------------------------------------------


def parse_rates(text: str) -> list[float]:
    rates = sorted({float(item) for item in text.split(",") if item.strip()})
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError("rates must be positive numbers, comma separated")
    return rates


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rates", default=None, help=f"fixed request rates, RPS (default {DEFAULT_RATES})")
    parser.add_argument(
        "--duration", type=float, default=None, help="measured seconds per point (default 10)"
    )
    parser.add_argument("--warmup", type=float, default=None, help="discarded seconds per point (default 3)")
    parser.add_argument(
        "--search-steps", default=None, help=f"capacity search rates (default {DEFAULT_STEPS})"
    )
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="client timeout per request, s (default 10)"
    )
    parser.add_argument("--skip-proxy", action="store_true", help="do not start or measure the LiteLLM proxy")
    parser.add_argument(
        "--max-in-flight", type=int, default=0, help="Skillgate's SKILLGATE_MAX_IN_FLIGHT (0: no limit)"
    )
    parser.add_argument("--skip-search", action="store_true", help="only the fixed rates, no capacity search")
    parser.add_argument(
        "--database-url",
        default=None,
        help="PostgreSQL URL of a throw-away database (name containing 'bench')",
    )
    parser.add_argument("--quick", action="store_true", help="short smoke run: 2 s points, low rates")
    parser.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness increment for this run and its children; negative (root only) shields the "
        "measurement from other work on a shared machine (default 0)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help="markdown results file")
    args = parser.parse_args(argv)
    args.rates = args.rates or ("20,50" if args.quick else DEFAULT_RATES)
    args.search_steps = args.search_steps or ("10,20,50,100" if args.quick else DEFAULT_STEPS)
    args.duration = args.duration or (2.0 if args.quick else 10.0)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 3.0)
    return args


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def managed_children() -> Iterator[Children]:
    (WORK / "logs").mkdir(parents=True, exist_ok=True)
    for old_log in (WORK / "logs").glob("*.log"):
        old_log.unlink()
    children = Children(WORK / "logs")
    # SIGINT too: a shell starts background jobs with SIGINT ignored, and Ctrl-C must still clean up.
    previous = {
        sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        yield children
    finally:
        for sig in previous:  # a second Ctrl-C must not skip the clean-up
            signal.signal(sig, signal.SIG_IGN)
        children.stop_all()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        log("all child processes stopped")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    rates, steps = parse_rates(args.rates), parse_rates(args.search_steps)
    cfg = Settings(duration=args.duration, warmup=args.warmup, timeout=args.timeout)
    WORK.mkdir(parents=True, exist_ok=True)
    if args.nice:
        try:
            os.nice(args.nice)
        except PermissionError:
            raise BenchError(f"--nice {args.nice} needs root") from None
    with managed_children() as children:
        stub = start_stub(children)
        log(f"stub upstream at {stub.base_url}")
        skillgate, db_label = start_skillgate(children, stub, args.database_url, args.max_in_flight)
        log(f"skillgate at {skillgate.base_url} on {db_label}")
        targets = [stub, skillgate]
        if not args.skip_proxy:
            targets.append(start_litellm_proxy(children, stub))
            log(f"litellm proxy at {targets[-1].base_url}")
        for target in targets:
            sanity_check(target)
        groups = {t.name: t.pgid for t in targets}
        known: dict[tuple[str, str, float], dict[str, Any]] = {}
        fixed: list[dict[str, Any]] = []
        for stream in (False, True):
            for rate in rates:
                for target in targets:
                    result = run_point(children, target, groups, stream, rate, cfg)
                    known[(target.name, result["mode"], rate)] = result
                    fixed.append(result)
        searches = []
        if not args.skip_search:
            for stream in (False, True):
                for target in targets:
                    searches.append(capacity_search(children, target, groups, stream, steps, cfg, known))
            # the direct baseline at each target's highest sustained rate, for its "added" latency
            for search in searches:
                if (
                    search["best"] is not None
                    and ("direct", search["mode"], search["best"]["rate"]) not in known
                ):
                    rate, stream = search["best"]["rate"], search["mode"] == "stream"
                    known[("direct", search["mode"], rate)] = run_point(
                        children, stub, groups, stream, rate, cfg
                    )
        env_lines = environment_lines(db_label, not args.skip_proxy)
    table = render_table(fixed, searches, known)
    errors = [
        f"- {r['target']} / {r['mode']} / {r['rate']:.0f} RPS: "
        + "; ".join(
            [f"{n}× {kind}" for kind, n in r["error_kinds"].items()]
            + [f"{n}× {kind} during warm-up" for kind, n in r["warmup_errors"].items()]
        )
        for r in sorted(known.values(), key=lambda r: (r["target"], r["mode"], r["rate"]))
        if r["errors"] or r["warmup_errors"]
    ]
    write_report(args.output, args, cfg, env_lines, table, search_log(searches, known), errors)
    (WORK / "results.json").write_text(json.dumps([{**r} for r in known.values()], indent=1))
    print(table)
    log(f"wrote {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_load":
        load_main(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "_seed":
        seed_main(sys.argv[2:])
    else:
        try:
            sys.exit(main(sys.argv[1:]))
        except BenchError as exc:
            log(f"error: {exc}")
            sys.exit(1)
        except KeyboardInterrupt:
            log("interrupted")
            sys.exit(130)
