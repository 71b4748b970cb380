"""Private PostgreSQL and Redis servers for the tests that stop and restart them: each on a free port
in a temporary folder, never the machine's shared servers. PostgreSQL runs as the ``postgres`` user
when the tests run as root (it refuses to run as root)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.support.vllm import free_port
from tests.support.wait import wait_until

PG_BIN = Path(os.environ.get("SKILLGATE_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


def _as_postgres() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@dataclass
class PrivatePostgres:
    folder: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/skillgate"

    def _ctl(self, *args: str) -> None:
        command = [*_as_postgres(), str(PG_BIN / "pg_ctl"), "-D", str(self.folder / "data"), *args]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._ctl("-o", options, "-l", str(self.folder / "postgres.log"), "-w", "start")

    def stop(self) -> None:
        """Immediate: every connection is cut, as when the server dies."""
        self._ctl("-m", "immediate", "-w", "stop")


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """An initdb'd cluster (trust auth) with a ``skillgate`` database, started; stopped and deleted
    afterwards. Its folder is its own under the system's temp dir (the postgres user must reach it,
    and pytest's are private to the user running the tests)."""
    folder = Path(tempfile.mkdtemp(prefix="skillgate-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    init = [*_as_postgres(), str(PG_BIN / "initdb"), "-D", str(folder / "data"), "-U", "postgres"]
    subprocess.run([*init, "--auth=trust", "-E", "UTF8"], check=True, capture_output=True, timeout=120)
    server = PrivatePostgres(folder, free_port())
    server.start()
    try:
        createdb = [*_as_postgres(), str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(server.port)]
        subprocess.run(
            [*createdb, "-U", "postgres", "skillgate"], check=True, capture_output=True, timeout=60
        )
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class PrivateRedis:
    folder: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        command += ["--appendonly", "no", "--dir", str(self.folder)]
        log = (self.folder / "redis.log").open("ab")
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: _listening(self.port), timeout=30, interval=0.1, what="redis to listen")

    def stop(self) -> None:
        """SIGKILL: Redis dies with what it held (nothing is saved)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def keys(self) -> list[str]:
        import redis

        return [key.decode() for key in redis.Redis(port=self.port, socket_timeout=2).keys("*")]


@contextlib.contextmanager
def private_redis(tmp: Path) -> Iterator[PrivateRedis]:
    folder = tmp / "redis"
    folder.mkdir()
    server = PrivateRedis(folder, free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()
