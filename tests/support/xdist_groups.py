"""The pytest-xdist scheduler of ``--dist loadgroup`` in this suite (tests/conftest.py returns it): the
slow suite runs on two workers (make test-slow, make test-services), since most of its time is spent
waiting on the servers, workers and browsers it starts.

Each work unit goes to one worker whole: a test module (its module fixtures, a lab, a browser, a server,
are set up once), the modules of the package-scoped one-machine layout together, and the CPU-heavy ones
(vLLM start-ups, training) together, one after the other on the session's shared vLLM server
(tests/support/vllm_shared.py). Units with more tests are handed out first.

Why not xdist's own loadgroup: with pytest 9 its ``xdist_group`` marks do nothing (pytest-xdist 3.8 puts
the group in ``item._nodeid``, which pytest 9 no longer reads), and it, like loadscope, keys the work by
node id, so schemathesis's tests, one per API operation under one shared node id, ran only the first
operation. Here the units are named from the node ids' paths, and a repeated node id is kept apart.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from xdist.scheduler import LoadScopeScheduling

# Path prefixes of the units that span several modules; every other module is a unit of its own.
GROUPS = {
    "tests/deploy/test_onebox_": "onebox",
    "tests/routing/test_vllm_student.py": "ml",
    "tests/routing/test_student_replicas_vllm.py": "ml",
    "tests/training/test_deploy.py": "ml",
    "tests/training/test_cycle_tiny_model.py": "ml",
    "tests/training/test_ddp.py": "ml",
}
REPEAT = "#repeat-"  # marks the second and later tests under one node id (never in a real node id)


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its group, or its module's path."""
    path = nodeid.split(REPEAT, 1)[0].split("::", 1)[0]
    return next((group for prefix, group in GROUPS.items() if path.startswith(prefix)), path)


def distinct(collection: Sequence[str]) -> list[str]:
    """The collection with a repeated node id made distinct (``<id>#repeat-2``, ...), in place."""
    seen: Counter[str] = Counter()
    out = []
    for nodeid in collection:
        seen[nodeid] += 1
        out.append(nodeid if seen[nodeid] == 1 else f"{nodeid}{REPEAT}{seen[nodeid]}")
    return out


class GroupScheduling(LoadScopeScheduling):
    """xdist's loadscope, with the units of :func:`unit_of` and repeated node ids kept apart."""

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        super().add_node_collection(node, distinct(collection))

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)
