#!/usr/bin/env python3
"""Run Apache Kafka (KRaft, single combined node) behind oxbow-broker's CLI.

Purpose: check the client suite itself. A test that fails against real Kafka
is a test bug (or a documented Kafka difference), not an Oxbow bug.

    OXBOW_BROKER_BIN=tests/clients/reference/kafka_as_oxbow.py python -m pytest tests/clients -q

The first start fetches Kafka's jars from Maven Central into ~/.cache/oxbow (or
$KAFKA_LIBS) with `mvn`.

Accepts `--override key=value` like oxbow-broker, formats the storage on first
start, then execs the JVM (so SIGTERM/SIGKILL reach Kafka itself). Given
`controller.quorum.voters` (tests/clients/oxbow_cluster.py does), it runs one node of
a multi-node Kafka cluster with the harness's node id, roles, voters and listeners.
A single node keeps every listener of the `listeners` override (SSL, SASL_SSL, ... next to
PLAINTEXT; tests/clients/test_security.py) and advertises them all.
Known differences: Kafka's clean-shutdown marker is `.kafka_cleanshutdown`;
Kafka 4.x may enforce larger minimums for segment.bytes.
"""
import os
import socket
import sys
from pathlib import Path

here = Path(__file__).resolve()
KAFKA_VERSION = "4.1.1"
libs = Path(os.environ.get("KAFKA_LIBS", Path.home() / ".cache" / "oxbow" / f"kafka-{KAFKA_VERSION}-libs"))


def fetch_libs() -> None:
    """Apache Kafka's broker jars from Maven Central, once (several nodes may start at once).

    kafka_2.13 brings slf4j-api 1.7 and log4j 2 but no slf4j binding: log4j-slf4j-impl routes
    the broker's logging to log4j 2 (the reload4j binding alone, without reload4j, makes
    `kafka.tools.StorageTool` die with NoClassDefFoundError: org/apache/log4j/Level).
    """
    import fcntl
    import subprocess

    libs.mkdir(parents=True, exist_ok=True)
    with open(libs / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (libs / ".complete").exists():
            return
        pom = libs / "pom.xml"
        pom.write_text(f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.oxbow</groupId><artifactId>kafka-ref</artifactId><version>0</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{KAFKA_VERSION}</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
""")
        subprocess.run(["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={libs}",
                        "-DincludeScope=runtime"], check=True, stdout=sys.stderr)
        (libs / ".complete").touch()


overrides = {}
args = sys.argv[1:]
while args:
    if args[0] == "--override" and len(args) > 1:
        k, _, v = args[1].partition("=")
        overrides[k] = v
        args = args[2:]
    else:
        sys.exit(f"unexpected argument {args[0]!r}")

log_dir = Path(overrides["log.dirs"])
state = log_dir.parent / (log_dir.name + ".kafka-ref")
state.mkdir(parents=True, exist_ok=True)
# Oxbow-only keys (the HTTP health listener, ...) mean nothing to Kafka.
overrides = {k: v for k, v in overrides.items() if not k.startswith("oxbow.")}

if "controller.quorum.voters" in overrides:
    # A node of a multi-node cluster (tests/clients/oxbow_cluster.py): node id, roles, voters
    # and listeners (PLAINTEXT and, on controllers, CONTROLLER) come from the harness, as for
    # Oxbow; Kafka needs its cluster id as 22 characters of base64.
    import base64
    import hashlib

    props = {
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "group.initial.rebalance.delay.ms": "0",
        "metadata.log.dir": str(state / "metadata"),
    }
    props.update(overrides)
    raw_id = props.pop("cluster.id", "oxbow-test-cluster")
    cluster_id = base64.urlsafe_b64encode(hashlib.md5(raw_id.encode()).digest()).decode().rstrip("=")
    # Every client listener is advertised (a secured inter-broker listener among them).
    client = [l for l in props["listeners"].split(",") if l and not l.startswith("CONTROLLER://")]
    if client:
        props["advertised.listeners"] = ",".join(client)
else:
    # The harness's PLAINTEXT listener, plus any others the `listeners` override names
    # (SSL, SASL_SSL, ...): all are kept and advertised, CONTROLLER is appended, and a given
    # listener.security.protocol.map gets CONTROLLER:PLAINTEXT added.
    given = [l.strip() for l in overrides["listeners"].split(",") if l.strip()]
    given = [l for l in given if not l.startswith("CONTROLLER://")]
    port = next(l for l in given if l.startswith("PLAINTEXT://")).rsplit(":", 1)[1]
    cport_file = state / "controller.port"
    if not cport_file.exists():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            cport_file.write_text(str(s.getsockname()[1]))
    cport = cport_file.read_text().strip()

    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{cport}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "metadata.log.dir": str(state / "metadata"),
    }
    props.update(overrides)
    props["listeners"] = ",".join(given + [f"CONTROLLER://127.0.0.1:{cport}"])
    props["advertised.listeners"] = ",".join(given)
    protocols = [m for m in props["listener.security.protocol.map"].split(",") if m.strip()]
    if not any(m.strip().startswith("CONTROLLER:") for m in protocols):
        protocols.append("CONTROLLER:PLAINTEXT")
    props["listener.security.protocol.map"] = ",".join(protocols)
    cluster_id = "q1Sh-9_ISia_zwGINzRvyQ"
conf = state / "server.properties"
conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

fetch_libs()
java = ["java", "-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", f"{libs}/*",
        f"-Dlog4j2.configurationFile={state / 'log4j2.properties'}"]
(state / "log4j2.properties").write_text(
    "rootLogger.level=WARN\nrootLogger.appenderRef.stdout.ref=STDOUT\n"
    "appender.stdout.type=Console\nappender.stdout.name=STDOUT\n"
    "appender.stdout.layout.type=PatternLayout\nappender.stdout.layout.pattern=[%d] %p %m (%c)%n\n")
if not (state / "metadata" / "meta.properties").exists():
    rc = os.spawnvp(os.P_WAIT, "java", java + ["kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                    "-c", str(conf)])
    if rc != 0:
        sys.exit(f"kafka storage format failed: {rc}")
os.execvp("java", java + ["kafka.Kafka", str(conf)])
