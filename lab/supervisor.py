"""supervisord for the lab: its config, and two XML-RPC clients over its own unix socket.

`SupervisorReader` is what a read toolset may hold. It keeps only the socket path, builds a
ServerProxy inside each call and drops it, and refuses any method off its read allow-list, so no
object able to start, stop or signal a process is reachable from it. `SupervisorControl` is the
full client, for the lab itself and the write toolset.
"""

from __future__ import annotations

import shlex
import sys
import xmlrpc.client
from typing import Any

from supervisor.xmlrpc import SupervisorTransport

from lab.config import REPO_ROOT, LabConfig

READ_METHODS = frozenset(
    {
        "supervisor.getState",
        "supervisor.getPID",
        "supervisor.getIdentification",
        "supervisor.getSupervisorVersion",
        "supervisor.getAllProcessInfo",
        "supervisor.getProcessInfo",
        "supervisor.getAllConfigInfo",
        "supervisor.readLog",
        "supervisor.tailProcessStdoutLog",
    }
)


def _proxy(socket_path: str) -> xmlrpc.client.ServerProxy:
    transport = SupervisorTransport(None, None, f"unix://{socket_path}")
    return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport, allow_none=True)


class SupervisorReader:
    """Read-only supervisord client: process states, the main log, process logs."""

    __slots__ = ("_socket",)

    def __init__(self, socket_path: str) -> None:
        self._socket = socket_path

    def _call(self, method: str, *args: Any) -> Any:
        if method not in READ_METHODS:
            raise PermissionError(f"{method} is not a read method")
        proxy = _proxy(self._socket)
        try:
            return getattr(proxy, method)(*args)
        finally:
            proxy("close")()

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("supervisor.getState")
        return result

    def processes(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("supervisor.getAllProcessInfo")
        return result

    def process(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call("supervisor.getProcessInfo", name)
        return result

    def main_log(self, nbytes: int) -> str:
        """The last `nbytes` of supervisord's own log: spawned / exited / gave up events."""
        result: str = self._call("supervisor.readLog", -nbytes, 0)
        return result

    def tail(self, name: str, nbytes: int) -> str:
        text, _offset, _overflow = self._call("supervisor.tailProcessStdoutLog", name, 0, nbytes)
        return str(text)


class SupervisorControl:
    """Full client of the lab's supervisord (start, stop, signal, reload, shutdown)."""

    def __init__(self, socket_path: str) -> None:
        self._socket = socket_path

    def call(self, method: str, *args: Any) -> Any:
        proxy = _proxy(self._socket)
        try:
            return getattr(proxy, method)(*args)
        finally:
            proxy("close")()

    def reader(self) -> SupervisorReader:
        return SupervisorReader(self._socket)


def program(name: str, command: list[str], *, priority: int, extra: dict[str, str] | None = None) -> str:
    options = {
        "command": " ".join(shlex.quote(part) for part in command),
        "directory": str(REPO_ROOT),
        "priority": str(priority),
        "autostart": "true",
        "autorestart": "true",
        "startsecs": "1",
        "startretries": "3",
        "exitcodes": "0",
        "stopsignal": "TERM",
        "stopwaitsecs": "5",
        "stopasgroup": "true",
        "killasgroup": "true",
        "redirect_stderr": "true",
        "stdout_logfile_maxbytes": "1MB",
        "stdout_logfile_backups": "2",
        "environment": f'PYTHONPATH="{REPO_ROOT}",PYTHONUNBUFFERED="1",MALLOC_ARENA_MAX="2"',
    }
    options.update(extra or {})
    lines = [f"[program:{name}]"] + [f"{key}={value.replace('%', '%%')}" for key, value in options.items()]
    # process_num expansions must survive the escaping above.
    return (
        "\n".join(lines)
        .replace("%%(process_num)", "%(process_num)")
        .replace("%%(program_name)", "%(program_name)")
    )


def render_conf(config: LabConfig, *, workers: int) -> str:
    py = sys.executable
    logs = config.logs_dir
    redis = config.redis_binary()
    if redis:
        store_cmd = [
            redis,
            "--port",
            str(config.store_port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(config.data_dir),
            "--logfile",
            "",
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
        ]
    else:
        store_cmd = [py, "-m", "lab.services.store", "--port", str(config.store_port)]
    cfg = config.config_path
    sections = [
        "\n".join(
            [
                "[unix_http_server]",
                f"file={config.socket_path}",
                "chmod=0700",
                "",
                "[supervisord]",
                f"logfile={logs / 'supervisord.log'}",
                "logfile_maxbytes=1MB",
                "logfile_backups=2",
                "loglevel=info",
                f"pidfile={config.pidfile}",
                f"childlogdir={logs}",
                f"directory={REPO_ROOT}",
                "identifier=skillgate-lab",
                "nodaemon=false",
                "minfds=1024",
                "",
                "[rpcinterface:supervisor]",
                "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
                "",
                "[supervisorctl]",
                f"serverurl=unix://{config.socket_path}",
            ]
        ),
        program("store", store_cmd, priority=10, extra={"stdout_logfile": str(logs / "store.log")}),
        program(
            "api",
            [
                py,
                "-m",
                "lab.services.api",
                "--config",
                str(cfg("api")),
                "--release",
                str(config.releases_dir / "api" / "current"),
                "--port",
                str(config.api_port),
            ],
            priority=20,
            extra={"stdout_logfile": str(logs / "api.log")},
        ),
        program(
            "web",
            [
                py,
                "-m",
                "lab.services.web",
                "--config",
                str(cfg("web")),
                "--port",
                str(config.web_port),
            ],
            priority=30,
            extra={"stdout_logfile": str(logs / "web.log")},
        ),
        program(
            "loadgen",
            [py, "-m", "lab.services.loadgen", "--config", str(cfg("loadgen"))],
            priority=50,
            extra={"stdout_logfile": str(logs / "loadgen.log")},
        ),
    ]
    if workers > 0:
        sections.append(
            program(
                "worker",
                [
                    py,
                    "-m",
                    "lab.services.worker",
                    "--config",
                    str(cfg("worker")),
                    "--index",
                    "%(process_num)d",
                    "--port-base",
                    str(config.worker_port_base),
                ],
                priority=40,
                extra={
                    "numprocs": str(workers),
                    "process_name": "%(program_name)s_%(process_num)d",
                    "stdout_logfile": str(logs / "%(program_name)s_%(process_num)d.log"),
                },
            )
        )
    return "\n\n".join(sections) + "\n"
