"""Fixtures of the MCP tests: real third-party MCP servers from the registries (the reference filesystem
and everything servers from npm, pinned in tests/clients/package.json; mcp-server-git from PyPI, pinned
in constraints.txt), the hostile upstream of tests/support/mcp_upstream.py, registered servers, and users
in the incident roles."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from django.conf import settings
from django.contrib.auth.models import User

from app import serve as app_serve
from bench.support.vllm import free_port
from diagnostics.mcp.servers import SyncReport, mcp_server_accept, mcp_server_register, mcp_server_sync
from diagnostics.models import McpServer
from tests.support.fake_environment import incident_user
from tests.support.wait import wait_until

BIN = Path(settings.BASE_DIR) / "tests" / "clients" / "node_modules" / ".bin"
PYTHON_BIN = Path(sys.executable).parent


def node_server(name: str) -> str:
    path = BIN / name
    if shutil.which("node") is None or not path.exists():
        pytest.skip(f"{path} is missing: run `npm ci --prefix tests/clients`")
    return str(path)


def git_server() -> str:
    path = PYTHON_BIN / "mcp-server-git"
    if not path.exists():
        pytest.skip("mcp-server-git is not installed (pip install -c constraints.txt -e .[dev])")
    return str(path)


def upstream_command() -> list[str]:
    return [sys.executable, "-m", "tests.support.mcp_upstream"]


@pytest.fixture(autouse=True)
def local_upstreams(settings: Any) -> None:
    """The test upstreams listen on 127.0.0.1: the URL policy allows loopback here (never by default)."""
    settings.MCP_URL_ALLOW_PRIVATE = True


def connect(server: McpServer) -> SyncReport:
    """Lists and classifies ``server``'s tools, and accepts every new one's classification as an operator
    would on the MCP page (first sight waits for that)."""
    report = mcp_server_sync(server=server)
    assert report.error == "", report.error
    mcp_server_accept(server=server, by=None, note="accepted by the test")
    server.refresh_from_db()
    return report


def slow_server(tmp_path: Path, monkeypatch: Any, name: str, *, flip: bool = False) -> McpServer:
    """A stdio upstream whose every listing after the first takes 3 s (with ``flip``, its ``status``
    tool's description changes at every listing), listed once."""
    monkeypatch.setenv("MCP_TEST_STATE", str(tmp_path / "state"))
    secret_env = {"UPSTREAM_STATE": "MCP_TEST_STATE"}
    if flip:
        monkeypatch.setenv("MCP_TEST_FLIP", "1")
        secret_env["UPSTREAM_FLIP"] = "MCP_TEST_FLIP"
    monkeypatch.setenv("MCP_TEST_DELAY", "3")
    monkeypatch.setenv("MCP_TEST_LOG", str(tmp_path / "touch.log"))
    secret_env |= {"UPSTREAM_LIST_DELAY_S": "MCP_TEST_DELAY", "UPSTREAM_LOG": "MCP_TEST_LOG"}
    server = mcp_server_register(
        by=None,
        name=name,
        environment="fake",
        transport="stdio",
        command=upstream_command(),
        secret_env=secret_env,
        timeout_s=20,
    )
    connect(server)  # the first listing: fast
    return server


@pytest.fixture
def requester(db: None) -> User:
    return incident_user("requester", approver=True, operator=True)


@pytest.fixture
def approver(db: None) -> User:
    return incident_user("approver", approver=True)


@pytest.fixture
def operator(db: None) -> User:
    user = incident_user("mcp-operator", operator=True)
    from django.contrib.auth.models import Permission

    user.user_permissions.add(*Permission.objects.filter(codename__in=["change_mcpserver", "view_mcpserver"]))
    return User.objects.get(pk=user.pk)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "srv"
    root.mkdir()
    (root / "api.log").write_text("starting api\nERROR: environment variable DATABASE_URL is not set\n")
    return root


@pytest.fixture
def fs_server(db: None, files: Path) -> McpServer:
    """The reference filesystem server (npm) over stdio, rooted at ``files``, for the fake environment."""
    server = mcp_server_register(
        by=None,
        name="fs",
        environment="fake",
        transport=McpServer.Transport.STDIO,
        command=[node_server("mcp-server-filesystem"), str(files)],
    )
    report = connect(server)
    assert report.added
    return server


@pytest.fixture
def hostile(db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> McpServer:
    """The hostile upstream over stdio; its write tool's runs land in ``tmp_path / 'touch.log'``."""
    monkeypatch.setenv("MCP_TEST_UPSTREAM_LOG", str(tmp_path / "touch.log"))
    monkeypatch.setenv("MCP_TEST_ANNOTATIONS", str(tmp_path / "annotations.json"))
    server = mcp_server_register(
        by=None,
        name="upstream",
        environment="fake",
        transport=McpServer.Transport.STDIO,
        command=upstream_command(),
        secret_env={"UPSTREAM_LOG": "MCP_TEST_UPSTREAM_LOG", "UPSTREAM_ANNOTATIONS": "MCP_TEST_ANNOTATIONS"},
        timeout_s=8,
    )
    return server


def serve(command: list[str], env: dict[str, str], port: int) -> Iterator[str]:
    """A server process listening on ``port`` until the test ends; yields its base URL."""
    process = subprocess.Popen(
        command,
        env={**os.environ, **env},
        cwd=settings.BASE_DIR,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import socket

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_until(
            listening,
            timeout=30,
            what=f"{command[0]} to listen",
            abort=lambda: None if process.poll() is None else "it exited",
        )
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def everything_url() -> Iterator[str]:
    """The reference "everything" server (npm) over Streamable HTTP."""
    port = free_port()
    yield from (
        u + "/mcp"
        for u in serve([node_server("mcp-server-everything"), "streamableHttp"], {"PORT": str(port)}, port)
    )


def _hostile_http(tmp_path: Path, **extra: str) -> Iterator[str]:
    port = free_port()
    env = {
        "UPSTREAM_TOKEN": "tok-upstream-secret",
        "UPSTREAM_URL": f"http://127.0.0.1:{port}/mcp",
        "UPSTREAM_LOG": str(tmp_path / "touch-http.log"),
        **extra,
    }
    yield from (u + "/mcp" for u in serve([*upstream_command(), "--http", str(port)], env, port))


@pytest.fixture
def hostile_http(tmp_path: Path) -> Iterator[str]:
    """The hostile upstream over Streamable HTTP (event-stream answers), wanting
    ``Bearer tok-upstream-secret``."""
    yield from _hostile_http(tmp_path)


@pytest.fixture
def hostile_http_json(tmp_path: Path) -> Iterator[str]:
    """The same, answering with plain JSON bodies."""
    yield from _hostile_http(tmp_path, UPSTREAM_JSON="1")


@pytest.fixture
def second_server() -> Iterator[str]:
    """Another server on its own event loop, as another of app/serve.py's processes would be (its own
    session managers; the sessions shared through the cache, as Redis shares them between processes)."""
    sock = app_serve.listening_socket("127.0.0.1", 0, backlog=64)
    server = uvicorn.Server(app_serve.config(log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=30, what="the second server")
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(10)
    sock.close()
