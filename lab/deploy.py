"""Versioned releases of the lab's API: releases/api/<version>/handlers.py, a `current` symlink
and a deploy log (one JSON line per deploy or rollback)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from lab.config import LabConfig
from lab.releases import KNOWN_GOOD, TEMPLATES

DEPLOYABLE = ("api",)


class DeployError(Exception):
    pass


def service_dir(config: LabConfig, service: str) -> Path:
    if service not in DEPLOYABLE:
        raise DeployError(f"{service} has no releases")
    return config.releases_dir / service


def install_releases(config: LabConfig) -> None:
    """Write every release folder (idempotent) and point `current` at the known-good one if unset."""
    root = service_dir(config, "api")
    for version, template in TEMPLATES.items():
        folder = root / version
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template, folder / "handlers.py")
        (folder / "release.json").write_text(json.dumps({"service": "api", "version": version}) + "\n")
    if not (root / "current").is_symlink():
        switch(config, "api", KNOWN_GOOD, actor="lab up")


def current(config: LabConfig, service: str) -> str:
    return os.readlink(service_dir(config, service) / "current")


def releases(config: LabConfig, service: str) -> list[str]:
    root = service_dir(config, service)
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink())


def history(config: LabConfig, service: str) -> list[dict[str, Any]]:
    log = service_dir(config, service) / "deploys.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def switch(config: LabConfig, service: str, version: str, *, actor: str) -> str:
    """Point `current` at `version` atomically and log it; return the previous version."""
    root = service_dir(config, service)
    if not (root / version).is_dir():
        raise DeployError(f"no release {version} of {service}")
    link = root / "current"
    previous = os.readlink(link) if link.is_symlink() else ""
    tmp = root / ".current.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(version)
    os.replace(tmp, link)
    entry = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "version": version,
        "previous": previous,
        "by": actor,
    }
    with (root / "deploys.log").open("a") as log:
        log.write(json.dumps(entry) + "\n")
    return previous


def previous_release(config: LabConfig, service: str) -> str:
    """The release that was live before the current one was deployed."""
    now = current(config, service)
    for entry in reversed(history(config, service)):
        if entry["version"] == now and entry.get("previous") and entry["previous"] != now:
            return str(entry["previous"])
    raise DeployError(f"no release of {service} before {now} to roll back to")
