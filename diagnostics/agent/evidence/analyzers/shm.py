"""Which "No space left on device" is shared memory (``/dev/shm``), not a disk (``shared_memory.py``)."""

from __future__ import annotations

from diagnostics.agent import rx

_SHM = rx.compile(r"(?i)shared memory|/dev/shm|\bshm_|\bshm\b")


def shm_line(line: str) -> bool:
    return bool(_SHM.search(line))
