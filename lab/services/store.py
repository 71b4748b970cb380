"""A tiny Redis-protocol store, used by the lab only when no `redis-server` binary is on PATH.

It speaks enough RESP2 for the lab (strings, counters, lists, INFO) and keeps everything in memory,
like a redis-server started with persistence off.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import deque
from typing import Any

from lab.services.common import encode_command, setup_logging

log = setup_logging("store")


class Store:
    def __init__(self) -> None:
        self.strings: dict[str, str] = {}
        self.lists: dict[str, deque[str]] = {}
        self.started = time.time()
        self.commands = 0
        self.clients = 0

    def execute(self, args: list[str]) -> Any:
        self.commands += 1
        name, rest = args[0].upper(), args[1:]
        handler = getattr(self, f"cmd_{name.lower()}", None)
        if handler is None:
            return Error(f"ERR unknown command '{args[0]}'")
        try:
            return handler(*rest)
        except TypeError:
            return Error(f"ERR wrong number of arguments for '{args[0].lower()}' command")

    def cmd_ping(self, *args: str) -> Any:
        return Simple("PONG") if not args else args[0]

    def cmd_get(self, key: str) -> Any:
        return self.strings.get(key)

    def cmd_set(self, key: str, value: str, *_options: str) -> Any:
        self.strings[key] = value
        return Simple("OK")

    def cmd_del(self, *keys: str) -> int:
        removed = 0
        for key in keys:
            removed += int(self.strings.pop(key, None) is not None or self.lists.pop(key, None) is not None)
        return removed

    def cmd_incr(self, key: str) -> int:
        value = int(self.strings.get(key, "0")) + 1
        self.strings[key] = str(value)
        return value

    def cmd_lpush(self, key: str, *values: str) -> int:
        items = self.lists.setdefault(key, deque())
        for value in values:
            items.appendleft(value)
        return len(items)

    def cmd_rpop(self, key: str) -> Any:
        items = self.lists.get(key)
        return items.pop() if items else None

    def cmd_llen(self, key: str) -> int:
        return len(self.lists.get(key, ()))

    def cmd_dbsize(self) -> int:
        return len(self.strings) + len(self.lists)

    def cmd_flushall(self) -> Any:
        self.strings.clear()
        self.lists.clear()
        return Simple("OK")

    def cmd_info(self, *_section: str) -> str:
        return "\r\n".join(
            [
                "# Server",
                "redis_version:0.0.0-skillgate-lab",
                f"uptime_in_seconds:{int(time.time() - self.started)}",
                "# Clients",
                f"connected_clients:{self.clients}",
                "# Stats",
                f"total_commands_processed:{self.commands}",
                "# Keyspace",
                f"db0:keys={self.cmd_dbsize()},expires=0",
            ]
        )


class Simple(str):
    pass


class Error(str):
    pass


def encode_reply(value: Any) -> bytes:
    if isinstance(value, Error):
        return f"-{value}\r\n".encode()
    if isinstance(value, Simple):
        return f"+{value}\r\n".encode()
    if isinstance(value, int):
        return f":{value}\r\n".encode()
    if value is None:
        return b"$-1\r\n"
    if isinstance(value, list):
        return encode_command(value)
    data = str(value).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


async def read_command(reader: asyncio.StreamReader) -> list[str] | None:
    line = await reader.readline()
    if not line:
        return None
    if not line.startswith(b"*"):
        return line.decode().split()  # inline command (redis-cli, telnet)
    args = []
    for _ in range(int(line[1:-2])):
        size = int((await reader.readline())[1:-2])
        args.append((await reader.readexactly(size + 2))[:-2].decode())
    return args


async def main(port: int) -> None:
    store = Store()

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        store.clients += 1
        try:
            while (args := await read_command(reader)) is not None:
                if not args:
                    continue
                writer.write(encode_reply(store.execute(args)))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            store.clients -= 1
            writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", port)
    log.info("Ready to accept connections tcp on 127.0.0.1:%d", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(main(parser.parse_args().port))
