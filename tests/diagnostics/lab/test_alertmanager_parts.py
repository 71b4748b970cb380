"""The Alertmanager wiring's parts, checked by the real tools where they are installed: the generated
alertmanager.yml (``amtool check-config``), Prometheus' alerting block (``promtool check config``), the
webhook URL, the webhook's key (scope and owner's permission), and a daemon that dies at start."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from bench.support.vllm import free_port
from diagnostics.services.webhook_keys import incidents_key_issue
from lab import alertmanager
from lab.config import LabConfig
from lab.daemon import DaemonUnavailable
from lab.prometheus import RULES, for_lab, lab_targets, scrape_config
from routing.access.keys import hash_key
from routing.models import ApiKey


def test_the_webhook_url_carries_the_environment_through_the_query_string() -> None:
    url = alertmanager.incidents_url("http://127.0.0.1:8000/", "local+prometheus")
    parts = urlsplit(url)
    assert (parts.netloc, parts.path) == ("127.0.0.1:8000", "/api/incidents")
    assert parse_qs(parts.query) == {"environment": ["local+prometheus"]}  # '+' is not a space


@pytest.mark.skipif(
    shutil.which("amtool") is None, reason="amtool is not installed (Debian: prometheus-alertmanager)"
)
def test_the_generated_alertmanager_config_is_valid_and_posts_each_alert_with_the_key(tmp_path: Path) -> None:
    config = LabConfig(root=tmp_path, port_base=18300)
    server = alertmanager.for_lab(config, url="http://127.0.0.1:8000/api/incidents", token="sg-secret")
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(server.config))
    done = subprocess.run(["amtool", "check-config", str(path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    route, [receiver] = server.config["route"], server.config["receivers"]
    assert route["group_by"] == ["..."] and route["receiver"] == receiver["name"]
    [hook] = receiver["webhook_configs"]
    assert hook["http_config"]["authorization"] == {
        "type": "Bearer",
        "credentials_file": str(tmp_path / "alertmanager" / alertmanager.TOKEN_FILE),
    }
    assert "sg-secret" not in path.read_text()  # the key lives in its own file, not in the config
    assert server.address == "127.0.0.1:18393"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian: prometheus)")
def test_the_lab_prometheus_sends_its_alerts_to_the_alertmanager(tmp_path: Path) -> None:
    config = LabConfig(root=tmp_path, port_base=18300)
    server = for_lab(config, alertmanager="127.0.0.1:18393")
    assert server.config["alerting"] == {
        "alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:18393"]}]}]
    }
    assert "alerting" not in scrape_config(lab_targets(config), rules=[RULES])
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(server.config))
    done = subprocess.run(
        ["promtool", "check", "config", str(path)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.django_db
def test_the_webhook_key_may_only_open_incidents_and_replaces_the_previous_one() -> None:
    first = incidents_key_issue(alertmanager.KEY_OWNER)
    second = incidents_key_issue(alertmanager.KEY_OWNER)
    keys = ApiKey.objects.filter(name=alertmanager.KEY_OWNER).order_by("pk")
    assert [k.key_hash for k in keys] == [hash_key(first), hash_key(second)]
    old, new = keys
    assert old.revoked_at is not None and new.revoked_at is None
    assert new.scopes == ["incidents:write"]
    owner = new.owner
    assert owner is not None
    assert not owner.has_usable_password() and not owner.is_staff
    assert owner.get_all_permissions() == {"diagnostics.add_incident"}


@pytest.mark.skipif(alertmanager.binary() is None, reason="alertmanager is not installed")
def test_a_daemon_that_dies_at_start_says_why(tmp_path: Path) -> None:
    server = alertmanager.AlertmanagerServer({"route": {"receiver": "nobody"}}, tmp_path, port=free_port())
    with pytest.raises(DaemonUnavailable, match=r"(?s)alertmanager exited with 1: .*undefined receiver"):
        server.start()
    assert not server.running()
    assert (tmp_path / alertmanager.TOKEN_FILE).stat().st_mode & 0o777 == 0o600
