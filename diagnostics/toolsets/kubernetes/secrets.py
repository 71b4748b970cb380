"""Secrets, redacted at the toolset's boundary: what the read toolset returns of a Secret, in a listing, a
describe and its YAML alike, is its name, type, labels and annotations (never
``kubectl.kubernetes.io/last-applied-configuration``, which holds the whole object as applied, values
included), each key's name and size, and for a ``kubernetes.io/tls`` Secret the metadata of the certificate in
``tls.crt`` (subject, issuer, DNS names, notBefore, notAfter), parsed here. No value of ``data`` or
``stringData`` leaves this module, ``tls.key`` is never decoded, and a ``tls.crt`` that is too large, not
base64 or not a certificate is "unreadable (why)", never an exception.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cryptography import x509
from kubernetes import client as k8s

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
TLS_TYPE = "kubernetes.io/tls"
MAX_CRT = 65_536  # base64 characters of a tls.crt that are parsed (a chain is a few KiB)
MAX_TEXT = 300  # characters of a subject or issuer shown
MAX_NAMES = 20  # DNS names shown
_BEGIN, _END = b"-----BEGIN CERTIFICATE-----", b"-----END CERTIFICATE-----"


def _size(value: object) -> int:
    """The decoded size of a base64 value (without decoding it)."""
    if not isinstance(value, str):
        return 0
    compact = value.strip()
    return max(len(compact) * 3 // 4 - (len(compact) - len(compact.rstrip("="))), 0)


def _line(text: str) -> str:
    return " ".join(text.split())[:MAX_TEXT]


def certificate_of(data: dict[str, Any] | None) -> dict[str, Any]:
    """The metadata of the first certificate in ``data["tls.crt"]`` (base64 of PEM); else
    ``{"unreadable": why}``."""
    value = (data or {}).get("tls.crt")
    if not isinstance(value, str) or not value.strip():
        return {"unreadable": "no tls.crt"}
    if len(value) > MAX_CRT:
        return {"unreadable": f"tls.crt is {len(value)} base64 characters, over the {MAX_CRT} read"}
    try:
        pem = base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        return {"unreadable": "tls.crt is not base64"}
    start = pem.find(_BEGIN)
    end = pem.find(_END, start + 1) if start >= 0 else -1
    if end < 0:
        return {"unreadable": "tls.crt holds no PEM certificate"}
    try:
        cert = x509.load_pem_x509_certificate(pem[start : end + len(_END)])
        found: dict[str, Any] = {
            "subject": _line(cert.subject.rfc4514_string()),
            "issuer": _line(cert.issuer.rfc4514_string()),
            "notBefore": cert.not_valid_before_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "notAfter": cert.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    except (ValueError, TypeError, UnicodeError) as exc:
        return {"unreadable": f"tls.crt is not a readable X.509 certificate ({type(exc).__name__})"}
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        found["dnsNames"] = [_line(str(n)) for n in names.get_values_for_type(x509.DNSName)][:MAX_NAMES]
    except (x509.ExtensionNotFound, x509.DuplicateExtension, ValueError, TypeError, UnicodeError):
        found["dnsNames"] = []  # none, or malformed extensions: the dates still hold
    return found


def _annotations(meta: dict[str, Any]) -> None:
    notes = meta.get("annotations")
    if isinstance(notes, dict):
        notes.pop(LAST_APPLIED, None)
        if not notes:
            meta.pop("annotations")


def redacted(secret: Any, api: k8s.ApiClient) -> dict[str, Any]:
    """The Secret as its YAML shows it, values withheld: ``data`` and ``stringData`` map each key to
    ``<redacted: N bytes>``; a TLS Secret gains ``certificate`` (read from tls.crt by this toolset)."""
    raw = api.sanitize_for_serialization(secret)
    meta = raw.get("metadata") or {}
    meta.pop("managedFields", None)
    _annotations(meta)
    data = raw.pop("data", None) or {}
    string_data = raw.pop("stringData", None) or {}
    out: dict[str, Any] = {k: v for k, v in raw.items() if k not in ("data", "stringData")}
    out["data"] = {str(k): f"<redacted: {_size(v)} bytes>" for k, v in data.items()}
    if string_data:
        out["stringData"] = {str(k): "<redacted>" for k in string_data}
    if raw.get("type") == TLS_TYPE or "tls.crt" in data:
        out["certificate"] = certificate_of(data)  # computed here from tls.crt: the values stay withheld
    return out


def row(secret: Any) -> list[str]:
    """NAME, TYPE, DATA (the number of keys) of ``kubectl get secrets``; AGE is the caller's."""
    return [secret.metadata.name, secret.type or "Opaque", str(len(secret.data or {}))]


def _labels(values: dict[str, str] | None) -> str:
    if not values:
        return "<none>"
    return ("\n" + " " * 14).join(f"{k}={_line(str(v))}" for k, v in sorted(values.items()))


def describe(secret: Any) -> list[str]:
    """``kubectl describe secret``: key names and sizes, no value; a TLS Secret's certificate metadata."""
    meta = secret.metadata
    notes = {k: v for k, v in (meta.annotations or {}).items() if k != LAST_APPLIED}
    data = secret.data or {}
    out = [
        f"Name:         {meta.name}",
        f"Namespace:    {meta.namespace or ''}",
        f"Labels:       {_labels(meta.labels)}",
        f"Annotations:  {_labels(notes)}",
        "",
        f"Type:  {secret.type or 'Opaque'}",
        "",
        "Data",
        "====",
        *[f"{key}:  {_size(value)} bytes" for key, value in sorted(data.items())],
    ]
    if secret.type == TLS_TYPE or "tls.crt" in data:
        cert = certificate_of(data)
        out += ["", "Certificate (read from tls.crt):"]
        if "unreadable" in cert:
            out.append(f"  unreadable ({cert['unreadable']})")
        else:
            out += [
                f"  Subject:     {cert['subject']}",
                f"  Issuer:      {cert['issuer']}",
                f"  DNS Names:   {', '.join(cert['dnsNames']) or '<none>'}",
                f"  Not Before:  {cert['notBefore']}",
                f"  Not After:   {cert['notAfter']}",
            ]
    return out
