"""Security between nodes: a 3-node cluster whose inter-broker listener is SASL_SSL (TLS with
hostname verification, then a SASL PLAIN login taken from the listener's JAAS line, as Kafka's
brokers log in) and whose CONTROLLER listener (the metadata quorum) is SSL, under the replication
fault test: an idempotent acks=all load, the leader of
partition 0 SIGKILLed, no acknowledged record lost. Followers can only reach their leaders on
the SASL_SSL listener (it is the only inter-broker endpoint), so a full ISR proves replication
runs over it. Clients use the PLAINTEXT listener.

Also `oxbow-broker format --add-scram` (kafka-storage's syntax): a SCRAM user created before the
first start logs in once the node has joined.
"""

from __future__ import annotations

import socket
import ssl
import subprocess

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

import security_certs
from oxbow_cluster import Cluster
from oxbow_harness import REFERENCE_KAFKA, Broker, free_port, require_broker_binary, wait_until
from test_replication import Load, consumed_values, create_replicated, full_isr, partitions

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
              'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')


def secured_overrides(certs) -> dict[str, str]:
    return {
        "replica.lag.time.max.ms": "5000",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        # Oxbow's controller listener is always mutual TLS; Kafka's is when told so.
        "listener.name.controller.ssl.client.auth": "required",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "server.keystore.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs / "ca.pem"),
    }


@pytest.fixture
def cluster(request, tmp_path):
    certs = security_certs.generate(tmp_path / "certs")
    c = Cluster(require_broker_binary(), tmp_path, 3, 0, secured_overrides(certs))
    for n in c.nodes:
        n.sasl_port = free_port(n.host)
        n.overrides["listeners"] = (f"PLAINTEXT://{n.host}:{n.port},SASL_SSL://{n.host}:{n.sasl_port},"
                                    f"CONTROLLER://{n.host}:{n.controller_port}")
    request.node._oxbow_brokers = c.nodes
    c.start()
    yield c
    c.close()


def tls_handshake(host: str, port: int, certs, client_cert: bool) -> str:
    """'ok', or why a TLS handshake with the CA's trust (and the client certificate) failed."""
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    if client_cert:
        ctx.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    try:
        with socket.create_connection((host, port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname=host) as tls:
                # TLS 1.3: a refused client certificate shows on the first read.
                tls.settimeout(2)
                tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                try:
                    tls.recv(1)
                except socket.timeout:
                    pass
        return "ok"
    except (ssl.SSLError, OSError) as e:
        return str(e)


def test_replication_over_sasl_ssl_loses_no_acknowledged_record_when_a_leader_is_killed(cluster):
    certs = cluster.root / "certs"
    # The quorum runs on mutual TLS: a client with the CA's certificate is served, one without
    # a certificate is refused.
    n = cluster.node(2)
    assert tls_handshake(n.host, n.controller_port, certs, True) == "ok"
    refused = tls_handshake(n.host, n.controller_port, certs, False)
    assert refused != "ok", "the controller listener served a client without a certificate"
    print(f"\ncontroller listener without a client certificate: {refused}")
    adm = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    create_replicated(adm, "secured")
    # A client of the SASL_SSL listener is told every broker's SASL_SSL endpoint.
    n1 = cluster.node(1)
    sasl = AdminClient({"bootstrap.servers": f"{n1.host}:{n1.sasl_port}", "security.protocol": "SASL_SSL",
                        "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
                        "ssl.ca.location": str(cluster.root / "certs" / "ca.pem")})
    md = sasl.list_topics(timeout=30)
    assert {b.id: b.port for b in md.brokers.values()} == {n.node_id: n.sasl_port for n in cluster.nodes}
    before = partitions(adm, "secured")
    victim = before[0][0]
    with Load(cluster.bootstrap(), "secured") as load:
        wait_until(lambda: len(load.acked) >= 3000, 60, "records acknowledged before the kill")
        cluster.node(victim).kill()
        survivors = [n for n in cluster.nodes if n.node_id != victim]
        sadm = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in survivors)})
        wait_until(lambda: partitions(sadm, "secured")[0][0] not in (-1, victim), 30, "partition 0 has a new leader")
        at_kill = len(load.acked)
        wait_until(lambda: len(load.acked) >= at_kill + 3000, 60, "records acknowledged after the kill")
    print(f"\nleader {victim} SIGKILLed: {len(load.acked)} acknowledged, {len(load.failed)} failed of {load.sent} sent")
    assert not load.failed, load.failed[:5]
    values = consumed_values(survivors[0], "secured")
    assert len(values) == len(set(values)), "duplicates (the producer is idempotent)"
    missing = set(load.acked) - set(values)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"
    # Back, it catches up over SASL_SSL and rejoins every ISR with the same records.
    cluster.node(victim).start()
    wait_until(lambda: full_isr(adm, "secured", [1, 2, 3]), 60, "the restarted broker rejoins every ISR")
    p = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
    for i in range(300):
        p.produce("secured", value=f"after-{i}".encode(), partition=i % 3)
    assert p.flush(30) == 0
    assert sorted(consumed_values(cluster.node(victim), "secured")) == sorted(values + [f"after-{i}" for i in range(300)])


def test_format_add_scram_creates_a_user_before_the_first_start(tmp_path):
    if REFERENCE_KAFKA:
        pytest.skip("oxbow-broker's own format subcommand (Kafka's is kafka-storage.sh format --add-scram)")
    port, sasl_port = free_port(), free_port()
    data = tmp_path / "data"
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "cluster.id": "scram-bootstrap-test",
    }
    binary = require_broker_binary()
    cmd = [str(binary), "format", "--override", f"log.dirs={data}"]
    for k, v in overrides.items():
        cmd += ["--override", f"{k}={v}"]
    cmd += ["--add-scram", "SCRAM-SHA-512=[name=alice,password=alice-secret]",
            "--add-scram", "SCRAM-SHA-512=[name=bob,iterations=8192,password=bob-secret]"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "SCRAM credentials for alice, bob" in out.stdout + out.stderr
    b = Broker(binary, port, data, tmp_path / "broker.log", overrides)
    b.start()
    try:
        adm = AdminClient({"bootstrap.servers": b.bootstrap})
        got = {}

        def described() -> bool:
            futures = adm.describe_user_scram_credentials(["alice", "bob"], request_timeout=10)
            try:
                d = {u: f.result(timeout=15) for u, f in futures.items()}
            except KafkaException:
                return False
            got.update({u: [(c.mechanism.name, c.iterations) for c in d[u].scram_credential_infos] for u in d})
            return True

        wait_until(described, 30, "the bootstrap credentials are committed")
        assert got == {"alice": [("SCRAM_SHA_512", 4096)], "bob": [("SCRAM_SHA_512", 8192)]}
        scram = AdminClient({"bootstrap.servers": f"127.0.0.1:{sasl_port}", "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bob", "sasl.password": "bob-secret"})
        assert scram.list_topics(timeout=30).brokers
        assert not (data / "bootstrap-scram.json").exists(), "the credentials file is removed once committed"
    finally:
        b.close()
