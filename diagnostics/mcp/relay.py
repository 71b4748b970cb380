"""A bounded stdout relay between the ``mcp`` SDK's stdio client and an MCP server it starts.

``python diagnostics/mcp/relay.py <cap> -- <command> [args...]`` (or ``python -m diagnostics.mcp.relay``)
starts the server with the relay's own stdin (the SDK writes to it directly, nothing is copied) and its
stdout on a pipe the relay reads in chunks and passes on at once. It counts the bytes of the line being
written: when one line passes ``cap`` bytes, the relay kills the server, writes
``too_large: <n> bytes in one message, over <cap>`` on its stderr and exits with :data:`TOO_LARGE_EXIT`,
so the SDK (whose reader buffers a whole line without limit) never holds more than ``cap`` bytes of it.
Otherwise it exits with the server's exit status when the server closes its stdout.

Standard library only, and nothing from the project, so it runs as ``python -I <file>`` from any working
directory; it stays in the server's process group, so the SDK's shutdown (SIGTERM, then SIGKILL to the
group) ends both.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

TOO_LARGE_EXIT = 75
TOO_LARGE = "too_large"
CHUNK = 64 * 1024


def _count(line: int, chunk: bytes, cap: int) -> int:
    """The bytes of the unfinished line after ``chunk`` (``line`` of it came before), or more than
    ``cap`` as soon as any line in it passes ``cap``."""
    start = 0
    while (end := chunk.find(b"\n", start)) >= 0:
        if line + end - start > cap:
            return cap + 1
        line, start = 0, end + 1
    return line + len(chunk) - start


def relay(cap: int, command: list[str]) -> int:
    server = subprocess.Popen(command, stdin=0, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
    os.close(0)  # only the server reads the SDK's requests

    def stop(signum: int, _frame: object) -> None:
        server.kill()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    assert server.stdout is not None
    source = server.stdout.fileno()
    line = 0  # bytes of the line being passed on
    while chunk := os.read(source, CHUNK):
        line = _count(line, chunk, cap)
        if line > cap:
            server.kill()
            os.write(2, f"{TOO_LARGE}: over {cap} bytes in one message\n".encode())
            return TOO_LARGE_EXIT
        view = memoryview(chunk)
        while view:
            view = view[os.write(1, view) :]
    return server.wait()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        os.write(2, b"usage: relay.py <cap bytes> -- <command> [args...]\n")
        return 2
    return relay(int(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
