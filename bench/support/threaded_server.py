"""An aiohttp application served from a background thread, for the local stand-ins of outside services
(the OpenAI-protocol upstream, the Slack Web API)."""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from typing import Self

from aiohttp import web


class ThreadedServer(ABC):
    """Subclasses provide ``host``, ``port`` (0: any free port, set once started) and ``app()``."""

    host: str
    port: int
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None

    @abstractmethod
    def app(self) -> web.Application:
        """The application this server serves (each stand-in defines its routes)."""

    def start(self) -> Self:
        started = threading.Event()

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            runner = web.AppRunner(self.app(), access_log=None)
            loop.run_until_complete(runner.setup())
            site = web.TCPSite(runner, self.host, self.port)
            loop.run_until_complete(site.start())
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            started.set()
            loop.run_forever()
            loop.run_until_complete(runner.cleanup())
            loop.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
