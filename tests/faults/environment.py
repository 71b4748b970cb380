"""The "fault" diagnosis environment of the fault tests: the fake environment's tiny system
(tests/support/fake_environment.py), observable and stoppable from another process.

Its options name a folder shared by the test and the worker (``{"dir": ...}``):

- every tool call writes ``probe-<n>`` there, then waits while ``hold-probe`` exists (the test kills
  the worker meanwhile); with ``{"poison": true}`` a tool call kills its own process instead, the way
  a task that crashes its worker would;
- every action run appends one line to ``runs.log`` (flushed to disk at once: what a worker killed
  right after still ran), then waits while ``hold-action`` exists;
- the health of the target is ``healthy`` existing in the folder.

The worker loads it through SKILLGATE_DIAGNOSTICS_ENVIRONMENT_MODULES; the test process imports it.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from diagnostics.toolsets.base import ActionResult, HealthResult, ReadToolset, ToolResult, WriteToolset
from diagnostics.toolsets.registry import Environment, register_environment
from tests.support.fake_environment import FakeRead, FakeWrite

HOLD_LIMIT_S = 120.0


def _hold(gate: Path) -> None:
    deadline = time.monotonic() + HOLD_LIMIT_S
    while gate.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def _append(path: Path, line: str) -> None:
    with path.open("a") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


class FaultRead(FakeRead):
    name = "fault"

    def __init__(self, folder: Path, poison: bool) -> None:
        self.folder, self.poison = folder, poison

    def call(self, tool: str, params: dict[str, Any]) -> ToolResult:
        _append(self.folder / "probes.log", f"{os.getpid()} {tool}")
        if self.poison:
            os.kill(os.getpid(), signal.SIGKILL)
        _hold(self.folder / "hold-probe")
        return super().call(tool, params)


class FaultWrite(FakeWrite):
    name = "fault"

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def run(self, action: str, args: dict[str, Any]) -> ActionResult:
        _append(self.folder / "runs.log", json.dumps({"pid": os.getpid(), "action": action, "args": args}))
        _hold(self.folder / "hold-action")
        return ActionResult(action, args, True, f"{action} {args} done")

    def health(self, target: str) -> HealthResult:
        healthy = (self.folder / "healthy").exists()
        return HealthResult(healthy, f"{target} {'answers 200' if healthy else 'is down'}")


@register_environment
class FaultEnvironment(Environment):
    name = "fault"

    def _folder(self) -> Path:
        return Path(str(self.options["dir"]))

    def read_toolsets(self) -> list[ReadToolset]:
        return [FaultRead(self._folder(), bool(self.options.get("poison")))]

    def write_toolsets(self) -> list[WriteToolset]:
        return [FaultWrite(self._folder())]
