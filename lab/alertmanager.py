"""A real Alertmanager (Debian's ``prometheus-alertmanager``) between the lab's Prometheus and the
incidents webhook.

The lab's Prometheus evaluates ``infra/prometheus/lab-rules.yml`` and sends firing alerts here;
``webhook_config`` routes every alert on its own (``group_by: ['...']``) to one receiver whose
``webhook_configs`` entry posts Alertmanager's webhook payload to ``POST /api/incidents`` with a Bearer
API key read from a file (``http_config.authorization.credentials_file``). ``incidents_key_issue``
(diagnostics/services/webhook_keys.py) makes that key: scope ``incidents:write`` only, owned by a user
who may open incidents and nothing else.
Everything is generated under the lab's folder (``var/lab/alertmanager`` by default).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

from lab.config import LabConfig
from lab.daemon import ReadyDaemon

DEFAULT_PORT_OFFSET = 93  # the lab's Alertmanager listens on port_base + 93 unless told otherwise
RECEIVER = "skillgate-incidents"
KEY_OWNER = "lab-alertmanager"  # the user (and key name) the webhook posts as
TOKEN_FILE = "incidents.token"


def binary() -> str | None:
    """Debian's /usr/bin/prometheus-alertmanager (upstream calls it alertmanager), or None."""
    return shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def incidents_url(base_url: str, environment: str) -> str:
    """The webhook URL: ``POST /api/incidents`` of the service at ``base_url``, diagnosing in
    ``environment`` (the payload cannot name one; the API reads it from the query string)."""
    return f"{base_url.rstrip('/')}/api/incidents?environment={quote(environment, safe='')}"


def webhook_config(url: str, *, credentials_file: Path, group_wait_s: float = 10.0) -> dict[str, Any]:
    """An alertmanager.yml: each alert alone, posted once to ``url`` with the key in ``credentials_file``.

    Resolved alerts are not sent (they would open nothing); a still-firing alert is re-sent after a day.
    """
    return {
        "route": {
            "receiver": RECEIVER,
            "group_by": ["..."],
            "group_wait": f"{group_wait_s:g}s",
            "group_interval": "5m",
            "repeat_interval": "24h",
        },
        "receivers": [
            {
                "name": RECEIVER,
                "webhook_configs": [
                    {
                        "url": url,
                        "send_resolved": False,
                        "http_config": {
                            "authorization": {"type": "Bearer", "credentials_file": str(credentials_file)}
                        },
                    }
                ],
            }
        ],
    }


@dataclass
class AlertmanagerServer(ReadyDaemon):
    """``prometheus-alertmanager`` on ``config`` (a webhook_config dict), with its data under ``workdir``;
    ``token`` is written (mode 0600) to the credentials file the config names before it starts."""

    name = "alertmanager"
    install_hint = "Debian: apt-get install -y prometheus-alertmanager"
    token: str = field(default="", repr=False)

    @property
    def token_path(self) -> Path:
        return self.workdir / TOKEN_FILE

    @property
    def address(self) -> str:
        """host:port, as Prometheus' alerting configuration names it."""
        return f"{self.host}:{self.port}"

    def program(self) -> str | None:
        return binary()

    def arguments(self) -> list[str]:
        return [
            f"--config.file={self.config_path}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address={self.address}",
            "--cluster.listen-address=",  # one instance: no gossip port
        ]

    def start(self) -> Self:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.token_path.touch(mode=0o600)
        self.token_path.chmod(0o600)
        self.token_path.write_text(self.token)
        return super().start()


def for_lab(
    config: LabConfig, *, url: str, token: str, port: int | None = None, group_wait_s: float = 10.0
) -> AlertmanagerServer:
    """The Alertmanager of a lab: posts each firing alert to ``url`` (``incidents_url``) with ``token``."""
    workdir = config.root / "alertmanager"
    return AlertmanagerServer(
        webhook_config(url, credentials_file=workdir / TOKEN_FILE, group_wait_s=group_wait_s),
        workdir,
        port=port or config.port_base + DEFAULT_PORT_OFFSET,
        token=token,
    )
