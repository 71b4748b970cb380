"""Steady synthetic traffic through the web front (page views and job submissions), so the
services' metrics and logs show what users would see."""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections import Counter

from lab.services.common import ConfigError, load_json_config, setup_logging

REQUIRED = {"web_url": (str,), "rate_per_s": (int, float), "job_every": (int,)}


def hit(url: str, body: bytes | None) -> str:
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            response.read()
            return str(response.status)
    except urllib.error.HTTPError as exc:
        return str(exc.code)
    except (urllib.error.URLError, OSError):
        return "unreachable"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    args = parser.parse_args()
    log = setup_logging("loadgen")
    try:
        config = load_json_config(args.config, REQUIRED)
    except ConfigError as exc:
        log.critical("FATAL config error, exiting: %s", exc)
        sys.exit(2)
    base = config["web_url"].rstrip("/")
    interval = 1.0 / max(float(config["rate_per_s"]), 0.1)
    outcomes: Counter[str] = Counter()
    last_report = time.monotonic()
    n = 0
    log.info("sending %.1f requests/s to %s", 1 / interval, base)
    while True:
        n += 1
        if n % int(config["job_every"]) == 0:
            outcomes[hit(base + "/jobs", json.dumps({"n": n}).encode())] += 1
        else:
            outcomes[hit(base + "/", None)] += 1
        if time.monotonic() - last_report >= 10:
            log.info("last 10s: %s", ", ".join(f"{k}={v}" for k, v in sorted(outcomes.items())))
            outcomes.clear()
            last_report = time.monotonic()
        time.sleep(interval)


if __name__ == "__main__":
    main()
