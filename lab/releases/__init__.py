"""Release templates of the lab's API. `lab up` copies each into var/lab/releases/api/<version>/
handlers.py and points the `current` symlink at v1; the bad-deploy fault switches it to v2."""

from __future__ import annotations

from pathlib import Path

TEMPLATES: dict[str, Path] = {
    "v1": Path(__file__).with_name("api_v1.py"),
    "v2": Path(__file__).with_name("api_v2.py"),
}
KNOWN_GOOD = "v1"
