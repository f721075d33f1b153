"""TLS and SASL through librdkafka (confluent-kafka 2.16) on one broker with four listeners:

    PLAINTEXT        the harness port: topics, SCRAM users and reference reads
    SASL_SSL         PLAIN (users from the listener's JAAS line), SCRAM-SHA-256 and SCRAM-SHA-512
    SSL              mutual TLS (listener.name.ssl.ssl.client.auth=required)
    SASL_PLAINTEXT   PLAIN without TLS

Certificates come fresh from security_certs.py (a test CA, the broker's PEM keystore, a client
certificate, and a client certificate from a foreign CA). Every client verifies the broker
certificate against ca.pem with hostname (IP SAN) verification on.

Checked: records produced over each secured listener read back exactly (offsets, keys, values)
and metadata on each listener advertising that listener's own port; SCRAM credentials created,
described, refused (too few iterations), deleted; and every refusal as librdkafka reports it:

* wrong password / unknown user (PLAIN and SCRAM): error_cb gets _AUTHENTICATION ("SASL
  authentication error: Authentication failed: ..."), metadata fails with _TRANSPORT.
* SSL listener without a client certificate, or with the foreign CA's: the broker ends the
  TLS 1.3 handshake with an alert after librdkafka considers it done, so error_cb gets
  _TRANSPORT ("Receive failed: ... ssl/tls alert bad certificate: SSL alert number 42" from
  Kafka 4.1.1) in state APIVERSION_QUERY.
* a clear-text client on the SSL or SASL_SSL port: the broker closes the connection; librdkafka
  only logs the disconnect, error_cb gets _ALL_BROKERS_DOWN, metadata fails with _TRANSPORT.
* a client that does not trust the broker's CA: _SSL ("certificate verify failed").

Failing clients are bounded: they are polled until the expected error arrives (at most
REFUSAL_TIMEOUT_S) and must have delivered no record.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

import security_certs
from oxbow_harness import (
    REFERENCE_KAFKA,
    Broker,
    DeliveryLog,
    admin_client,
    consume_all,
    create_topic,
    flush_all,
    free_port,
    produce_one,
    require_broker_binary,
    wait_until,
)

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret" user_alice="alice-secret";')
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
PARTITIONS = 3
RECORDS = 300
REFUSAL_TIMEOUT_S = 20.0
#: SCRAM users created over PLAINTEXT (the PLAIN users live in the JAAS lines above).
SCRAM_USERS = {
    "carol": (ScramMechanism.SCRAM_SHA_512, 8192, "carol-scram-secret"),
    "bob": (ScramMechanism.SCRAM_SHA_256, 4096, "bob-scram-secret"),
}
MECHANISM_NAME = {ScramMechanism.SCRAM_SHA_256: "SCRAM-SHA-256", ScramMechanism.SCRAM_SHA_512: "SCRAM-SHA-512"}


@dataclass
class SecureBroker:
    broker: Broker
    certs: Path
    sasl_ssl: int
    ssl: int
    sasl_plaintext: int
    #: A topic on PARTITIONS partitions holding records, for the refused clients to aim at.
    topic: str = "secured-records"

    def tls(self) -> dict:
        return {"ssl.ca.location": str(self.certs / "ca.pem"), "ssl.endpoint.identification.algorithm": "https"}

    def sasl_ssl_conf(self, mechanism: str, user: str, password: str) -> dict:
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_ssl}", "security.protocol": "SASL_SSL",
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password, **self.tls()}

    def sasl_plaintext_conf(self, user: str, password: str) -> dict:
        return {"bootstrap.servers": f"127.0.0.1:{self.sasl_plaintext}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password}

    def ssl_conf(self, client: str | None) -> dict:
        """SSL listener; `client` names the key pair presented (client, foreign-client) or None."""
        conf = {"bootstrap.servers": f"127.0.0.1:{self.ssl}", "security.protocol": "SSL", **self.tls()}
        if client is not None:
            conf["ssl.certificate.location"] = str(self.certs / f"{client}.crt")
            conf["ssl.key.location"] = str(self.certs / f"{client}.key")
        return conf


def security_overrides(port: int, certs: Path, sasl_ssl: int, ssl: int, sasl_plaintext: int) -> dict[str, str]:
    """Kafka's server.properties keys for the four listeners. Kafka 4.1.1 refuses to start
    without a JAAS line for every enabled mechanism on every SASL listener, SCRAM included
    ("Could not find a 'KafkaServer' or 'sasl_ssl.KafkaServer' entry in the JAAS configuration")."""
    o = {
        "listeners": (f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_ssl},"
                      f"SSL://127.0.0.1:{ssl},SASL_PLAINTEXT://127.0.0.1:{sasl_plaintext}"),
        "listener.security.protocol.map": ("PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,"
                                           "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"),
        "inter.broker.listener.name": "PLAINTEXT",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "server.keystore.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs / "ca.pem"),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    }
    for listener in ("sasl_ssl", "sasl_plaintext"):
        o[f"listener.name.{listener}.plain.sasl.jaas.config"] = PLAIN_JAAS
        o[f"listener.name.{listener}.scram-sha-256.sasl.jaas.config"] = SCRAM_JAAS
        o[f"listener.name.{listener}.scram-sha-512.sasl.jaas.config"] = SCRAM_JAAS
    return o


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """One broker for the module, with SCRAM_USERS created and a topic of records."""
    root = tmp_path_factory.mktemp("security")
    certs = security_certs.generate(root / "certs")
    port, sasl_ssl, ssl, sasl_plaintext = free_port(), free_port(), free_port(), free_port()
    broker = Broker(
        binary=require_broker_binary(),
        port=port,
        data_dir=root / "broker-data",
        log_path=root / "broker.log",
        overrides=security_overrides(port, certs, sasl_ssl, ssl, sasl_plaintext),
    )
    sb = SecureBroker(broker, certs, sasl_ssl, ssl, sasl_plaintext)
    try:
        broker.start()
        for p in (sasl_ssl, ssl, sasl_plaintext):
            wait_until(lambda: tcp_open(p), 30, f"listener 127.0.0.1:{p} accepting")
        upsert_scram(broker, SCRAM_USERS)
        create_topic(broker, sb.topic, PARTITIONS)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(30):
            produce_one(producer, topic=sb.topic, partition=i % PARTITIONS, value=f"secret-{i}".encode())
        flush_all(producer)
        yield sb
    finally:
        broker.close()


@pytest.fixture(autouse=True)
def _attach_log(request, secure):
    # conftest.py attaches the log tail of these brokers to a failing test's report.
    request.node._oxbow_brokers = [secure.broker]


def tcp_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def upsert_scram(broker: Broker, users: dict) -> None:
    admin = admin_client(broker)
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, iterations), password.encode())
        for user, (mech, iterations, password) in users.items()
    ], request_timeout=30)
    for user, f in futures.items():
        assert f.result(timeout=40) is None, user


class LogLines(logging.Handler):
    """librdkafka's log lines (served on poll), kept to print what a refused client saw."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def client_logger() -> tuple[logging.Logger, LogLines]:
    logger = logging.getLogger(f"rdkafka-{uuid.uuid4().hex}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)  # librdkafka logs a peer's disconnect at INFO
    handler = LogLines()
    logger.addHandler(handler)
    return logger, handler


# --------------------------------------------------------------------------
# Accepted clients
# --------------------------------------------------------------------------


def round_trip(sb: SecureBroker, conf: dict, listener_port: int, tag: str) -> None:
    """RECORDS records produced and read back through `conf`; metadata must advertise
    `listener_port` (the listener the client came in on), and a PLAINTEXT read must agree."""
    topic = f"sec-{tag}-{uuid.uuid4().hex[:8]}"
    create_topic(sb.broker, topic, PARTITIONS)
    producer = Producer({**conf, "linger.ms": 5, "socket.timeout.ms": 10000})
    md = producer.list_topics(topic, timeout=15)
    assert {b.port for b in md.brokers.values()} == {listener_port}, \
        f"{tag}: metadata advertises {[(b.host, b.port) for b in md.brokers.values()]}"
    assert len(md.topics[topic].partitions) == PARTITIONS
    log = DeliveryLog(lambda m: m.key().decode())
    for i in range(RECORDS):
        produce_one(producer, topic=topic, key=f"k{i}".encode(), value=f"{tag}-v{i}".encode(), on_delivery=log)
    flush_all(producer)
    assert log.failed == {}, f"{tag}: failed deliveries {list(log.failed.items())[:5]}"
    assert len(log.ok) == RECORDS
    for p in range(PARTITIONS):
        offsets = sorted(o for part, o in log.ok.values() if part == p)
        assert offsets == list(range(len(offsets))), f"{tag}: partition {p} offsets {offsets[:10]}..."

    secured = consume_all(sb.broker, topic, range(PARTITIONS), timeout=60, **conf)
    plain = consume_all(sb.broker, topic, range(PARTITIONS), timeout=60)
    got = {(r.partition, r.offset): (r.key.decode(), r.value.decode()) for rs in secured.values() for r in rs}
    want = {log.ok[f"k{i}"]: (f"k{i}", f"{tag}-v{i}") for i in range(RECORDS)}
    assert got == want
    assert {(r.partition, r.offset): (r.key.decode(), r.value.decode()) for rs in plain.values() for r in rs} == want
    print(f"{tag}: {RECORDS} records produced and read back over 127.0.0.1:{listener_port}")


def test_sasl_ssl_plain_round_trip(secure):
    round_trip(secure, secure.sasl_ssl_conf("PLAIN", "alice", "alice-secret"), secure.sasl_ssl, "plain")


@pytest.mark.parametrize("user", ["carol", "bob"])
def test_sasl_ssl_scram_round_trip(secure, user):
    mech, _, password = SCRAM_USERS[user]
    conf = secure.sasl_ssl_conf(MECHANISM_NAME[mech], user, password)
    await_login(conf, f"{user} ({MECHANISM_NAME[mech]})")
    round_trip(secure, conf, secure.sasl_ssl, MECHANISM_NAME[mech].lower())


@pytest.mark.parametrize("user", ["carol", "bob"])
def test_kcat_scram_login(secure, user):
    """Debian's kcat (librdkafka 2.0.2) repeats its own nonce in front of the server's in the
    final SCRAM message and signs what it sent. Apache Kafka 4.1.1 refuses that login; Oxbow
    accepts a final nonce that ends with the server's, so Debian's kcat can log in (a known
    difference, docs/compatibility.md). A wrong password is refused by both."""
    import subprocess
    mech, _, password = SCRAM_USERS[user]
    await_login(secure.sasl_ssl_conf(MECHANISM_NAME[mech], user, password), user)
    cmd = ["kcat", "-b", f"127.0.0.1:{secure.sasl_ssl}", "-X", "security.protocol=SASL_SSL",
           "-X", f"sasl.mechanisms={MECHANISM_NAME[mech]}", "-X", f"sasl.username={user}",
           "-X", f"sasl.password={password}", "-X", f"ssl.ca.location={secure.certs / 'ca.pem'}"]
    p = subprocess.run([*cmd, "-C", "-t", secure.topic, "-o", "beginning", "-e", "-q", "-m", "20"],
                       capture_output=True, text=True, timeout=60)
    if REFERENCE_KAFKA:
        assert p.returncode != 0 and p.stdout == "", p.stderr[-800:]
    else:
        assert p.returncode == 0, p.stderr[-800:]
        assert sorted(p.stdout.split()) == sorted(f"secret-{i}" for i in range(30))
    wrong = subprocess.run([*cmd[:9], "-X", "sasl.password=wrong", *cmd[11:], "-L", "-m", "10"],
                           capture_output=True, text=True, timeout=60)
    assert wrong.returncode != 0 and "Authentication failed" in wrong.stderr, wrong.stderr[-800:]


def test_sasl_plaintext_plain_round_trip(secure):
    round_trip(secure, secure.sasl_plaintext_conf("admin", "admin-secret"), secure.sasl_plaintext, "sasl-plaintext")


def test_mtls_round_trip(secure):
    round_trip(secure, secure.ssl_conf("client"), secure.ssl, "mtls")


def await_login(conf: dict, what: str, timeout: float = 30.0) -> None:
    """Bounded retry until `conf` gets metadata (a new SCRAM credential reaches the listener
    through the metadata log, so the first logins may still be refused)."""
    deadline = time.monotonic() + timeout
    attempts: list[str] = []
    while True:
        errors: list[KafkaError] = []
        producer = Producer({**conf, "error_cb": errors.append, "socket.timeout.ms": 5000})
        try:
            producer.list_topics(timeout=5)
            return
        except KafkaException as e:
            producer.poll(0)
            attempts.append(f"{e.args[0]}; client errors {[str(x) for x in errors[:2]]}")
        if time.monotonic() >= deadline:
            pytest.fail(f"{what}: no login within {timeout:.0f}s: {attempts[-3:]}", pytrace=False)
        time.sleep(0.5)


# --------------------------------------------------------------------------
# Refused clients
# --------------------------------------------------------------------------


@dataclass
class Refusal:
    errors: list[KafkaError]   # error_cb, in order
    metadata_error: KafkaError  # what list_topics() raised
    log: list[str]              # librdkafka's log lines

    def codes(self) -> set[int]:
        return {e.code() for e in self.errors}

    def first(self, code: int) -> KafkaError:
        return next(e for e in self.errors if e.code() == code)


def refused(sb: SecureBroker, conf: dict, want: int, what: str) -> Refusal:
    """A consumer with `conf` assigned to every partition of the topic that holds records:
    polled until error_cb reports `want` (at most REFUSAL_TIMEOUT_S). It must get no record,
    and a metadata request must then fail. Prints what librdkafka reported."""
    errors: list[KafkaError] = []
    logger, lines = client_logger()
    consumer = Consumer({
        **conf,
        "group.id": f"refused-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "socket.timeout.ms": 5000,
        "error_cb": errors.append,
        "logger": logger,
    })
    records = []
    try:
        consumer.assign([TopicPartition(sb.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + REFUSAL_TIMEOUT_S
        while want not in {e.code() for e in errors} and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                if msg.error() is None:
                    records.append((msg.partition(), msg.offset(), msg.value()))
                else:
                    errors.append(msg.error())
        with pytest.raises(KafkaException) as raised:
            consumer.list_topics(sb.topic, timeout=5)
        consumer.poll(0)
    finally:
        consumer.close()
    result = Refusal(errors, raised.value.args[0], lines.lines)
    print(f"--- {what}")
    for e in errors[:3]:
        print(f"    error_cb {e.name()} ({e.code()}): {e.str()}")
    print(f"    list_topics: {result.metadata_error.name()} ({result.metadata_error.code()}): "
          f"{result.metadata_error.str()}")
    for line in [l for l in lines.lines if "FAIL" in l or "Disconnected" in l][:2]:
        print(f"    log: {line}")
    assert records == [], f"{what}: a refused client received records {records[:5]}"
    assert want in result.codes(), \
        f"{what}: expected {KafkaError(want).name()} from error_cb within {REFUSAL_TIMEOUT_S:.0f}s, got " \
        f"{[(e.name(), e.str()) for e in errors[:5]]}"
    assert result.metadata_error.code() == KafkaError._TRANSPORT, f"{what}: {result.metadata_error}"
    return result


@pytest.mark.parametrize("mechanism,user,password", [
    ("PLAIN", "alice", "wrong-secret"),
    ("PLAIN", "mallory", "alice-secret"),
    ("SCRAM-SHA-512", "carol", "wrong-secret"),
    ("SCRAM-SHA-512", "mallory", "carol-scram-secret"),
    # carol's credential exists for SCRAM-SHA-512 only.
    ("SCRAM-SHA-256", "carol", "carol-scram-secret"),
], ids=["plain-wrong-password", "plain-unknown-user", "scram-wrong-password", "scram-unknown-user",
        "scram-other-mechanism"])
def test_sasl_bad_credentials_refused(secure, mechanism, user, password):
    r = refused(secure, secure.sasl_ssl_conf(mechanism, user, password), KafkaError._AUTHENTICATION,
                f"SASL_SSL {mechanism} {user}/{password}")
    msg = r.first(KafkaError._AUTHENTICATION).str()
    assert "SASL authentication error" in msg and "Authentication failed" in msg, msg


def test_sasl_plaintext_wrong_password_refused(secure):
    r = refused(secure, secure.sasl_plaintext_conf("alice", "wrong-secret"), KafkaError._AUTHENTICATION,
                "SASL_PLAINTEXT PLAIN alice/wrong-secret")
    assert "Authentication failed" in r.first(KafkaError._AUTHENTICATION).str()


@pytest.mark.parametrize("client", [None, "foreign-client"], ids=["no-client-cert", "foreign-ca-cert"])
def test_mtls_refuses_client(secure, client):
    r = refused(secure, secure.ssl_conf(client), KafkaError._TRANSPORT, f"SSL listener, client cert {client}")
    msg = r.first(KafkaError._TRANSPORT).str()
    # TLS 1.3: the client finishes its side of the handshake first; the broker's verdict is an
    # alert read by the first receive (Kafka 4.1.1: "ssl/tls alert bad certificate: SSL alert
    # number 42").
    assert "alert" in msg, msg


def test_client_refuses_untrusted_broker(secure):
    """The clients' own verification is on: trusting only the foreign CA, the handshake fails."""
    conf = {**secure.sasl_ssl_conf("PLAIN", "alice", "alice-secret"),
            "ssl.ca.location": str(secure.certs / "foreign-ca.pem")}
    r = refused(secure, conf, KafkaError._SSL, "SASL_SSL client trusting the foreign CA")
    assert "certificate verify failed" in r.first(KafkaError._SSL).str()


@pytest.mark.parametrize("listener", ["ssl", "sasl_ssl"])
def test_cleartext_client_on_tls_port(secure, listener):
    port = getattr(secure, listener)
    r = refused(secure, {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "PLAINTEXT"},
                KafkaError._ALL_BROKERS_DOWN, f"PLAINTEXT client on the {listener.upper()} port")
    # librdkafka reports the broker closing the connection only in its log, never as _AUTHENTICATION.
    assert KafkaError._AUTHENTICATION not in r.codes()


# --------------------------------------------------------------------------
# SCRAM credential administration
# --------------------------------------------------------------------------


def test_describe_scram_credentials(secure):
    admin = admin_client(secure.broker)
    futures = admin.describe_user_scram_credentials(list(SCRAM_USERS), request_timeout=30)
    for user, (mech, iterations, _) in SCRAM_USERS.items():
        desc = futures[user].result(timeout=40)
        got = [(i.mechanism, i.iterations) for i in desc.scram_credential_infos]
        print(f"{user}: {[(MECHANISM_NAME[m], n) for m, n in got]}")
        assert desc.user == user
        assert got == [(mech, iterations)]
    # Every user, no filter.
    everyone = admin.describe_user_scram_credentials(request_timeout=30).result(timeout=40)
    assert set(SCRAM_USERS) <= set(everyone)
    with pytest.raises(KafkaException) as raised:
        admin.describe_user_scram_credentials(["nobody"], request_timeout=30)["nobody"].result(timeout=40)
    err = raised.value.args[0]
    print(f"describe nobody: {err.name()}: {err.str()}")
    assert err.code() == KafkaError.RESOURCE_NOT_FOUND


def test_scram_too_few_iterations_refused(secure):
    admin = admin_client(secure.broker)
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("eve", info, b"eve-secret")], request_timeout=30)
    with pytest.raises(KafkaException) as raised:
        futures["eve"].result(timeout=40)
    err = raised.value.args[0]
    print(f"1000 iterations: {err.name()}: {err.str()}")
    assert err.code() == KafkaError.UNACCEPTABLE_CREDENTIAL


def test_deleted_scram_user_refused(secure):
    user, password = "dave", "dave-scram-secret"
    upsert_scram(secure.broker, {user: (ScramMechanism.SCRAM_SHA_256, 4096, password)})
    conf = secure.sasl_ssl_conf("SCRAM-SHA-256", user, password)
    await_login(conf, user)

    admin = admin_client(secure.broker)
    deletion = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)
    assert admin.alter_user_scram_credentials([deletion], request_timeout=30)[user].result(timeout=40) is None

    def described_gone() -> bool:
        try:
            admin.describe_user_scram_credentials([user], request_timeout=30)[user].result(timeout=40)
            return False
        except KafkaException as e:
            assert e.args[0].code() == KafkaError.RESOURCE_NOT_FOUND, e
            return True

    wait_until(described_gone, 30, f"{user} gone from DescribeUserScramCredentials", 0.5)

    # The deletion reaches the listener through the metadata log: bounded retry until a new
    # client is refused, then the full refusal.
    def login_refused() -> bool:
        errors: list[KafkaError] = []
        p = Producer({**conf, "error_cb": errors.append, "socket.timeout.ms": 5000})
        try:
            p.list_topics(timeout=3)
            return False
        except KafkaException:
            p.poll(0)
            return KafkaError._AUTHENTICATION in {e.code() for e in errors}

    wait_until(login_refused, 30, f"{user}'s login refused after deletion", 0.5)
    refused(secure, conf, KafkaError._AUTHENTICATION, f"deleted SCRAM user {user}")

    with pytest.raises(KafkaException) as raised:
        admin.alter_user_scram_credentials([deletion], request_timeout=30)[user].result(timeout=40)
    err = raised.value.args[0]
    print(f"delete again: {err.name()}: {err.str()}")
    assert err.code() == KafkaError.RESOURCE_NOT_FOUND


def _closed_by_broker(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True once the broker closes the connection (EOF or reset); drains what it sends first."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


@pytest.mark.parametrize("listener", ["ssl", "sasl_ssl"])
def test_garbage_and_truncated_tls_records_close_only_their_connection(secure, listener):
    """Random bytes, a TLS record header announcing 16 KiB followed by nothing, a truncated
    ClientHello and a Kafka frame in clear text: each connection is closed (no hang, no crash),
    and a connection opened before them still works afterwards."""
    import random

    port = getattr(secure, listener)
    conf = secure.sasl_ssl_conf("PLAIN", "alice", "alice-secret") if listener == "sasl_ssl" else secure.ssl_conf("client")
    bystander = admin_client_conf(conf)
    assert secure.topic in bystander.list_topics(timeout=30).topics
    rng = random.Random(0x7153)
    handshake = bytes([0x16, 0x03, 0x01, 0x00, 0xC8, 0x01, 0x00, 0x00, 0xC4, 0x03, 0x03])
    payloads = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))) for _ in range(40)]
    payloads += [bytes([0x16, 0x03, 0x03, 0x40, 0x00]), handshake, handshake + bytes(rng.randrange(256) for _ in range(60)),
                 bytes([0, 0, 0, 20, 0, 18, 0, 3, 0, 0, 0, 1]) + b"\0" * 12]
    for i, payload in enumerate(payloads):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            try:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR) if i % 2 else None
            except OSError:
                pass
            assert _closed_by_broker(s, timeout=15), f"payload {i} ({payload[:16]!r}...) left the connection open"
    md = bystander.list_topics(timeout=30)
    assert secure.topic in md.topics and len(md.topics[secure.topic].partitions) == PARTITIONS


def admin_client_conf(conf: dict):
    from confluent_kafka.admin import AdminClient

    return AdminClient(conf)
