"""Certificates held where no cert-manager Certificate prints a ``notAfter``: a Secret's ``tls.crt`` (a
``kubernetes.io/tls`` Secret, as an Ingress's ``tls`` entries name it) and the metrics exporters publish.

- A Secret's ``data.tls.crt`` is base64 of PEM: the first certificate (the leaf) is parsed with the
  ``cryptography`` package when it is installed (its ``notAfter`` and its DNS names); without it the
  Secret's expiry stays unknown, never guessed. A Secret's data is hostile: a read over ``MAX_TEXT``, a
  ``tls.crt`` over ``MAX_CRT``, not base64, or with no parsable PEM certificate is "unreadable" with why
  (``secret_certs``), never a crash, and a document nested past the parser's depth is no document. The
  kubernetes read toolset withholds every value and gives a TLS Secret's ``certificate`` (subject, DNS
  names, notAfter, or ``unreadable``) instead, parsed on its side from ``tls.crt`` (``read_summary``).
- cert-manager's ``certmanager_certificate_expiration_timestamp_seconds{name, namespace}`` and the
  blackbox exporter's ``probe_ssl_earliest_cert_expiry{instance}`` are Unix seconds of the expiry, in a
  Prometheus API result (JSON) or the text exposition format.
"""

from __future__ import annotations

import base64
import binascii
import math
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
TLS_TYPE = "kubernetes.io/tls"
MAX_TEXT = 500_000  # characters of one read parsed for Secrets
MAX_CRT = 65_536  # base64 characters of one tls.crt (a chain is a few KiB)
MAX_SECRETS = 500  # Secrets of one listing
_PEM = rx.compile(r"-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----")


@dataclass(frozen=True)
class Held:
    """One certificate a Secret or a metric shows: whose it is, when it expires, the hosts it covers."""

    label: str
    not_after: datetime
    hosts: tuple[str, ...] = ()
    # A metric's own labels: cert-manager's Certificate (name, namespace), a probe's target (instance).
    name: str = ""
    namespace: str = ""
    metric: str = ""


def parse_pem(pem: str) -> tuple[datetime, tuple[str, ...]] | None:
    """(notAfter, DNS names) of the first certificate in ``pem``; None unparsable or no ``cryptography``."""
    if x509 is None or (match := _PEM.search(pem)) is None:
        return None
    try:
        cert = x509.load_pem_x509_certificate(match.group(0).encode())
        not_after = cert.not_valid_after_utc
    except ValueError:
        return None
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        hosts = tuple(str(h) for h in names.get_values_for_type(x509.DNSName))
    except (x509.ExtensionNotFound, ValueError):  # none, or malformed extensions: the expiry still holds
        hosts = ()
    return not_after, hosts


@dataclass(frozen=True)
class SecretCert:
    """A TLS Secret as one read shows it: its certificate's expiry and hosts, or why they could not be read
    (``problem``), and the cert-manager Certificate that writes it (its annotation), if any."""

    namespace: str
    name: str
    not_after: datetime | None
    hosts: tuple[str, ...] = ()
    problem: str = ""
    certificate: str = ""


def read_crt(value: object) -> tuple[datetime | None, tuple[str, ...], str]:
    """(notAfter, hosts, "") of a Secret's ``data.tls.crt`` (base64 of PEM); (None, (), why) when it cannot
    be read: not a string, empty, over ``MAX_CRT``, not base64, no PEM certificate in it."""
    if not isinstance(value, str):
        return None, (), "tls.crt is not a string"
    compact = "".join(value.split())
    if not compact:
        return None, (), "tls.crt is empty"
    if len(compact) > MAX_CRT:
        return None, (), f"tls.crt is {len(compact)} characters, over the {MAX_CRT} read"
    try:
        pem = base64.b64decode(compact, validate=True).decode("ascii", "replace")
    except (binascii.Error, ValueError):
        return None, (), "tls.crt is not base64"
    if x509 is None:  # pragma: no cover - installed in the project's environment
        return None, (), "the cryptography package is not installed"
    parsed = parse_pem(pem)
    if parsed is None:
        return None, (), "tls.crt holds no readable PEM certificate"
    return parsed[0], parsed[1], ""


def read_summary(summary: dict[str, Any]) -> tuple[datetime | None, tuple[str, ...], str]:
    """(notAfter, hosts, "") of the ``certificate`` the kubernetes read toolset puts on a TLS Secret it
    redacts (it parses ``tls.crt`` itself, withholding the values); (None, (), why) where unreadable."""
    if summary.get("unreadable"):
        return None, (), str(summary["unreadable"])[:200]
    value = summary.get("notAfter")
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        return None, (), "the certificate shows no readable notAfter"
    names = summary.get("dnsNames")
    hosts = tuple(str(n)[:253] for n in names[:20]) if isinstance(names, list) else ()
    return when, hosts, ""


def _payloads(text: str) -> list[Any]:
    """The JSON objects in ``text``; none when it nests past the parser's depth (a hostile read)."""
    try:
        return json_payloads(text)
    except RecursionError:
        return []


def _documents(text: str) -> list[Any]:
    stripped = text.strip()
    if len(stripped) > MAX_TEXT or ("tls.crt" not in text and TLS_TYPE not in text):
        return []
    try:
        if stripped.startswith("{"):
            return _payloads(stripped)
        return [d for d in yaml.safe_load_all(stripped) if d is not None]
    except (yaml.YAMLError, RecursionError, ValueError):
        return []


def _part(doc: dict[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def _is_tls(doc: Any) -> bool:
    if not isinstance(doc, dict) or doc.get("kind") not in (None, "Secret"):
        return False
    data = doc.get("data")
    return doc.get("type") == TLS_TYPE or (isinstance(data, dict) and "tls.crt" in data)


def _secrets(doc: Any) -> list[dict[str, Any]]:
    """The TLS Secrets of one document: itself, or the items of a list (one level, at most MAX_SECRETS)."""
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):
        return [s for s in doc["items"][:MAX_SECRETS] if _is_tls(s)]
    return [doc] if _is_tls(doc) else []


def secret_certs(text: str, namespace: str = "") -> list[SecretCert]:
    """Each TLS Secret in ``text`` (YAML or JSON, one or a list): its certificate, or why it is unreadable."""
    found: list[SecretCert] = []
    for doc in _documents(text):
        for secret in _secrets(doc):
            meta: dict[str, Any] = _part(secret, "metadata")
            notes, data = _part(meta, "annotations"), _part(secret, "data")
            if summary := _part(secret, "certificate"):  # the kubernetes toolset's reading (values withheld)
                not_after, hosts, problem = read_summary(summary)
            elif "tls.crt" in data:
                not_after, hosts, problem = read_crt(data["tls.crt"])
            else:
                not_after, hosts, problem = None, (), "the read shows no tls.crt (its data was not shown)"
            found.append(
                SecretCert(
                    str(meta.get("namespace") or namespace)[:253],
                    str(meta.get("name") or "")[:253],
                    not_after,
                    hosts[:20],
                    problem,
                    str(notes.get("cert-manager.io/certificate-name") or "")[:253],
                )
            )
    return found


def from_secrets(text: str) -> list[Held]:
    """The certificate of each Secret in ``text`` (YAML or JSON, one or a list) whose ``tls.crt`` parses."""
    held: list[Held] = []
    for secret in secret_certs(text):
        if secret.not_after is not None:
            where = f" (namespace {secret.namespace})" if secret.namespace else ""
            held.append(Held(f"{secret.name or 'a TLS Secret'}{where}", secret.not_after, secret.hosts))
    return held


def _held_of(metric: str, labels: dict[str, str], value: float) -> Held | None:
    if not math.isfinite(value) or value <= 0:
        return None
    try:
        moment = datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):  # past the calendar: no expiry a certificate can have
        return None
    if metric == EXPIRY_METRICS[0]:
        name, namespace = labels.get("name") or labels.get("certificate", ""), labels.get("namespace", "")
        where = f" (namespace {namespace})" if namespace else ""
        return Held(f"{name}{where}", moment, (), name, namespace, metric) if name else None
    target = labels.get("instance") or labels.get("target") or ""
    host = rx.sub(r"^\w+://|[:/].*$", "", target)
    return Held(target, moment, (host,) if host else (), target, "", metric) if target else None


def from_metrics(text: str) -> list[Held]:
    """The certificates an expiry metric in ``text`` names (the Prometheus API's JSON, or the exposition)."""
    held: list[Held] = []
    for payload in _payloads(text) if '"result"' in text and len(text) <= MAX_TEXT else []:
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
