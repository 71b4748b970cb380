"""The worker's spool folder: a small folder with a quota (see services/worker.py for how the
quota is enforced without root)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def spool_usage(spool: Path) -> int:
    if not spool.is_dir():
        return 0
    total = 0
    with os.scandir(spool) as entries:
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):  # pruned by another worker meanwhile
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


def largest_files(spool: Path, limit: int = 10) -> list[tuple[str, int]]:
    if not spool.is_dir():
        return []
    sizes = []
    for path in spool.iterdir():
        with contextlib.suppress(FileNotFoundError):
            if path.is_file() and not path.is_symlink():
                sizes.append((path.name, path.stat().st_size))
    return sorted(sizes, key=lambda item: -item[1])[:limit]


def clear_spool(spool: Path) -> tuple[int, int]:
    """Delete every regular file in the spool folder; return (files, bytes) freed."""
    files = freed = 0
    if not spool.is_dir():
        return 0, 0
    for path in spool.iterdir():
        with contextlib.suppress(FileNotFoundError):
            if path.is_file() and not path.is_symlink():
                size = path.stat().st_size
                path.unlink()
                freed += size
                files += 1
    return files, freed
