"""Build the tiny test model and LoRA adapters once, in a cache folder shared by test sessions.

Folders are keyed by ``bench.tiny_model.TINY_MODEL_VERSION`` and the build arguments, and are built
in a temporary folder and renamed into place, so concurrent sessions never see a half-written model.
Plain helpers; the fixtures that use them live next to the tests.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.tiny_model import TINY_MODEL_VERSION, build_tiny_lora, build_tiny_model

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE_ROOT = REPO_ROOT / "var" / "test-cache"
MARKER = ".complete"


def _cache_root(cache_root: Path | None) -> Path:
    root = Path(cache_root or os.environ.get("SKILLGATE_TEST_CACHE") or DEFAULT_CACHE_ROOT)
    root.mkdir(parents=True, exist_ok=True)
    return root


def _build_once(target: Path, build: Callable[[Path], object]) -> Path:
    """Run ``build(tmp)`` and move ``tmp`` to ``target`` unless ``target`` is already complete."""
    if (target / MARKER).exists():
        return target
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        (tmp / MARKER).write_text("ok\n")
        if target.exists() and not (target / MARKER).exists():
            shutil.rmtree(target, ignore_errors=True)  # left over from an interrupted build
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / MARKER).exists():  # lost a race to another session: theirs is fine
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def tiny_model_dir(cache_root: Path | None = None, *, seed: int = 0) -> Path:
    """The tiny Qwen2 model (see ``bench.tiny_model``), built on first use (~8 s)."""
    target = _cache_root(cache_root) / f"{TINY_MODEL_VERSION}-seed{seed}"
    return _build_once(target, lambda tmp: build_tiny_model(tmp, seed=seed))


def tiny_lora_dir(
    cache_root: Path | None = None,
    *,
    name: str = "lora",
    rank: int = 8,
    seed: int = 0,
    reply: str | None = None,
) -> Path:
    """A LoRA adapter for :func:`tiny_model_dir`; with ``reply`` trained to answer with that text (~3 s)."""
    base = tiny_model_dir(cache_root, seed=0)
    key = hashlib.sha256(f"{TINY_MODEL_VERSION}|{rank}|{seed}|{reply!r}".encode()).hexdigest()[:10]
    target = base.parent / f"{TINY_MODEL_VERSION}-{name}-r{rank}-{key}"
    return _build_once(target, lambda tmp: build_tiny_lora(base, tmp, rank=rank, seed=seed, reply=reply))
