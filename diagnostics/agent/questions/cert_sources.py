"""Certificates held where no cert-manager Certificate prints a ``notAfter``: a Secret's ``tls.crt`` (a
``kubernetes.io/tls`` Secret, as an Ingress's ``tls`` entries name it) and the metrics exporters publish.

- A Secret's ``data.tls.crt`` is base64 of PEM: the first certificate (the leaf) is parsed with the
  ``cryptography`` package when it is installed (its ``notAfter`` and its DNS names); without it the
  Secret's expiry stays unknown, never guessed.
- cert-manager's ``certmanager_certificate_expiration_timestamp_seconds{name, namespace}`` and the
  blackbox exporter's ``probe_ssl_earliest_cert_expiry{instance}`` are Unix seconds of the expiry, in a
  Prometheus API result (JSON) or the text exposition format.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from diagnostics.agent import rx
from diagnostics.agent.evidence.analyzers.base import json_payloads

try:  # optional: without it a Secret's certificate is not read (its expiry is unknown)
    from cryptography import x509
except ImportError:  # pragma: no cover - the package is installed in the project's environment
    x509 = None  # type: ignore[assignment]

EXPIRY_METRICS = ("certmanager_certificate_expiration_timestamp_seconds", "probe_ssl_earliest_cert_expiry")
_EXPOSITION = rx.compile(
    r"(?m)^(certmanager_certificate_expiration_timestamp_seconds|probe_ssl_earliest_cert_expiry)"
    r"\{([^}]*)\}\s+([0-9.eE+]+)"
)
_LABEL = rx.compile(r"(\w+)=\"([^\"]*)\"")
_PEM = rx.compile(r"-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----")


@dataclass(frozen=True)
class Held:
    """One certificate a Secret or a metric shows: whose it is, when it expires, the hosts it covers."""

    label: str
    not_after: datetime
    hosts: tuple[str, ...] = ()


def parse_pem(pem: str) -> tuple[datetime, tuple[str, ...]] | None:
    """(notAfter, DNS names) of the first certificate in ``pem``; None unparsable or no ``cryptography``."""
    if x509 is None or (match := _PEM.search(pem)) is None:
        return None
    try:
        cert = x509.load_pem_x509_certificate(match.group(0).encode())
    except ValueError:
        return None
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        hosts = tuple(names.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        hosts = ()
    return cert.not_valid_after_utc, hosts


def _documents(text: str) -> list[Any]:
    stripped = text.strip()
    if stripped.startswith("{"):
        return json_payloads(stripped)
    if "tls.crt" not in text or len(text) > 500_000:
        return []
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError:
        return []


def _secrets(doc: Any) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        return []
    if isinstance(doc.get("items"), list):
        return [s for item in doc["items"] for s in _secrets(item)]
    return [doc] if isinstance(doc.get("data"), dict) and "tls.crt" in doc["data"] else []


def from_secrets(text: str) -> list[Held]:
    """The certificate of each Secret in ``text`` (YAML or JSON, one or a list) whose ``tls.crt`` parses."""
    held: list[Held] = []
    for doc in _documents(text):
        for secret in _secrets(doc):
            meta: dict[str, Any] = secret["metadata"] if isinstance(secret.get("metadata"), dict) else {}
            name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "")
            try:
                pem = base64.b64decode(str(secret["data"]["tls.crt"]), validate=False).decode(
                    "ascii", "replace"
                )
            except (binascii.Error, ValueError):
                continue
            parsed = parse_pem(pem)
            if parsed is not None:
                where = f" (namespace {namespace})" if namespace else ""
                held.append(Held(f"{name or 'a TLS Secret'}{where}", parsed[0], parsed[1]))
    return held


def _held_of(metric: str, labels: dict[str, str], value: float) -> Held | None:
    if value <= 0:
        return None
    moment = datetime.fromtimestamp(value, UTC)
    if metric == EXPIRY_METRICS[0]:
        name, namespace = labels.get("name") or labels.get("certificate", ""), labels.get("namespace", "")
        where = f" (namespace {namespace})" if namespace else ""
        return Held(f"{name}{where}", moment) if name else None
    target = labels.get("instance") or labels.get("target") or ""
    host = rx.sub(r"^\w+://|[:/].*$", "", target)
    return Held(target, moment, (host,) if host else ()) if target else None


def from_metrics(text: str) -> list[Held]:
    """The certificates an expiry metric in ``text`` names (the Prometheus API's JSON, or the exposition)."""
    held: list[Held] = []
    for payload in json_payloads(text) if '"result"' in text else []:
        data = payload.get("data") if isinstance(payload, dict) else None
        for series in (data.get("result") or []) if isinstance(data, dict) else []:
            metric = series.get("metric") if isinstance(series, dict) else None
            value = series.get("value") if isinstance(series, dict) else None
            if not isinstance(metric, dict) or metric.get("__name__") not in EXPIRY_METRICS:
                continue
            try:
                seconds = float(value[1]) if isinstance(value, list) and len(value) == 2 else 0.0
            except (TypeError, ValueError):
                continue
            labels = {str(k): str(v) for k, v in metric.items()}
            if (found := _held_of(str(metric["__name__"]), labels, seconds)) is not None:
                held.append(found)
    for name, labels, value in _EXPOSITION.findall(text):
        try:
            seconds = float(value)
        except ValueError:
            continue
        if (found := _held_of(name, dict(_LABEL.findall(labels)), seconds)) is not None:
            held.append(found)
    return held


def held_in(text: str) -> list[Held]:
    """Every certificate ``text`` holds in a TLS Secret or names in an expiry metric."""
    found = from_secrets(text) if "tls.crt" in text else []
    if any(metric in text for metric in EXPIRY_METRICS):
        found += from_metrics(text)
    return found
