"""One web process on its own SO_REUSEPORT listening socket: ``python -m app.serve --port 8000``.

Several such processes on one port (infra/onebox: supervisord's ``numprocs``) each get a socket of their
own, and the kernel spreads new connections over them by hash. ``uvicorn --workers N`` shares one socket
instead, and asyncio accepts a whole backlog per wake-up, so one busy process takes a burst's
connections while the others idle. Otherwise this is uvicorn as its CLI runs it: SIGTERM drains the
open requests for up to ``--timeout-graceful-shutdown`` seconds (the ledger writer commits meanwhile).
"""

from __future__ import annotations

import argparse
import socket
from collections.abc import Sequence

import uvicorn


def listening_socket(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    return sock


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app.serve", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--backlog", type=int, default=2048)
    parser.add_argument("--timeout-graceful-shutdown", type=int, default=25)
    args = parser.parse_args(argv)
    config = uvicorn.Config(
        "app.asgi:application",
        access_log=False,
        backlog=args.backlog,
        timeout_graceful_shutdown=args.timeout_graceful_shutdown,
    )
    uvicorn.Server(config).run(sockets=[listening_socket(args.host, args.port, args.backlog)])


if __name__ == "__main__":
    main()
