"""A call refused in its protocol's own terms, and writes sent to a demoted replica (issue 39, round eleven's
classes on other shapes than the cases'): a TLS name the certificate does not list (curl's wording, the
server's Certificate), gRPC status codes, nginx's upstream errors beside what the application answered,
PostgreSQL's read-only transactions and a Sentinel failover mapped to pod names."""

from __future__ import annotations

from diagnostics.agent.evidence.analyzers import ToolOutput
from tests.support.findings import listing, manifest, of_kind, pod_log, run_outputs


def test_a_tls_name_the_certificate_lacks_leads_to_the_servers_certificate():
    log = pod_log(
        "reporter-1",
        "bi",
        "curl: (60) SSL: no alternative certificate subject name matches target host name "
        "'warehouse.data.svc'\n",
    )
    events = listing(
        "event",
        "data",
        "LAST SEEN   TYPE     REASON    OBJECT                        MESSAGE\n"
        "5m   Normal   Issuing   certificate/warehouse-cert   Existing issued Secret is not up to date for "
        "spec: [spec.dnsNames]\n",
    )
    cert = manifest(
        "certificate",
        "warehouse-cert",
        "data",
        "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata:\n  name: warehouse-cert\n"
        "  namespace: data\nspec:\n  dnsNames:\n  - warehouse.example.com\n",
    )
    found, state = run_outputs(log, events, cert)
    assert of_kind(found, "tls_name_mismatch")
    assert any(lead.obj.kind == "certificate" and lead.obj.name == "warehouse-cert" for lead in state.leads)
    (cert_finding,) = of_kind(found, "certificate_lacks_name")
    assert "warehouse.example.com" in cert_finding.summary and "warehouse.data.svc" in cert_finding.summary


def test_a_certificate_that_lists_the_name_is_not_blamed():
    log = pod_log("reporter-1", "bi", "x509: certificate is valid for a.b.svc, not warehouse.data.svc\n")
    cert = manifest(
        "certificate",
        "warehouse-cert",
        "data",
        "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata:\n  name: warehouse-cert\n"
        "spec:\n  dnsNames:\n  - warehouse.data.svc\n",
    )
    found, _ = run_outputs(log, cert)
    assert not of_kind(found, "certificate_lacks_name")


def test_a_grpc_status_without_a_size_is_read_by_its_code_and_names_the_callee():
    pods = listing(
        "pod",
        "pay",
        "NAME   READY   STATUS   RESTARTS   AGE\nledger-7d9f8c6b5d-q2w3e   1/1   Running   0   2d\n",
    )
    log = pod_log(
        "checkout-1",
        "pay",
        'level=error msg="post failed" method=/ledger.v2.Ledger/Post err="rpc error: code = Unimplemented '
        'desc = unknown method Post for service ledger.v2.Ledger"\n',
    )
    found, _ = run_outputs(pods, log)
    (finding,) = of_kind(found, "grpc_status")
    assert "Unimplemented" in finding.summary and "does not implement the method" in finding.summary
    assert "answered by ledger" in finding.summary and finding.rank == 70


def test_an_nginx_upstream_timeout_is_a_504_beside_what_the_application_answered():
    app = pod_log("search-1", "web", '10.0.0.1 - - [07/Dec/2026:01:00:00 +0000] "GET /q HTTP/1.1" 200 90\n')
    proxy = pod_log(
        "ingress-nginx-controller-1",
        "ingress-nginx",
        "2026/12/07 01:00:01 [error] 7#7: *1 upstream timed out (110: Operation timed out) while reading "
        'response header from upstream, server: s.example.com, request: "GET /q?x=1 HTTP/2.0", upstream: '
        '"http://10.0.3.3:8080/q?x=1"\n',
    )
    found, _ = run_outputs(app, proxy)
    (finding,) = of_kind(found, "proxy_upstream_error")
    assert "answers 504" in finding.summary and "answered /q with 200" in finding.summary


def test_an_ingress_read_leads_to_its_controllers_pods():
    namespaces = ToolOutput(
        "kubectl_get_by_kind_in_cluster",
        {"kind": "namespace"},
        "NAME   STATUS\nweb   Active\ningress-nginx   Active\n",
    )
    ingress = manifest(
        "ingress",
        "site",
        "web",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: site\nspec:\n"
        "  ingressClassName: nginx\n",
    )
    _, state = run_outputs(namespaces, ingress)
    assert any(lead.obj.kind == "pod" and lead.obj.namespace == "ingress-nginx" for lead in state.leads)


def test_postgres_read_only_transactions_are_writes_to_a_standby():
    log = pod_log(
        "orders-1",
        "shop",
        "ERROR: cannot execute UPDATE in a read-only transaction\n"
        "ERROR: cannot execute INSERT in a read-only "
        "transaction\n",
    )
    found, _ = run_outputs(log)
    (finding,) = of_kind(found, "write_to_replica")
    assert (
        "postgres" in finding.summary
        and "read-only replica" in finding.summary
        and "2 lines" in finding.summary
    )


def test_a_sentinel_failover_is_mapped_to_the_pods_and_the_clients_address():
    pods = listing(
        "pod",
        "sess",
        "NAME   READY   STATUS   RESTARTS   AGE   IP   NODE\n"
        "web-5c-abcde   1/1   Running   0   1d   10.9.0.2   n1\n"
        "redis-a   2/2   Running   0   9d   10.9.0.7   n2\n"
        "redis-b   2/2   Running   0   9d   10.9.0.8   n3\n",
    )
    describe = ToolOutput(
        "kubectl_describe",
        {"kind": "pod", "name": "web-5c-abcde", "namespace": "sess"},
        "Name:         web-5c-abcde\nContainers:\n  web:\n    Environment:\n"
        "      SESSION_URL:  redis://redis-a.sess:6379\n",
    )
    client = pod_log("web-5c-abcde", "sess", "E READONLY You can't write against a read only replica.\n")
    sentinel = pod_log(
        "redis-b",
        "sess",
        "1:X 07 Dec 2026 01:00:00.000 # +switch-master sessions 10.9.0.7 6379 10.9.0.8 6379\n",
    )
    found, _ = run_outputs(pods, describe, client, sentinel)
    (finding,) = of_kind(found, "write_to_demoted_primary")
    assert "redis-a (SESSION_URL=redis://redis-a.sess:6379)" in finding.summary
    assert "promoted redis-b (10.9.0.8)" in finding.summary and finding.rank == 88
