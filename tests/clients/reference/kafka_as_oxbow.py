#!/usr/bin/env python3
"""Run Apache Kafka (KRaft, single combined node) behind oxbow-broker's CLI.

Purpose: check the client suite itself. A test that fails against real Kafka
is a test bug (or a documented Kafka difference), not an Oxbow bug.

    OXBOW_BROKER_BIN=tests/clients/reference/kafka_as_oxbow.py \
    KAFKA_LIBS=tests/java/target/kafka-ref/lib-4.1.1 \
    python -m pytest tests/clients -q

Accepts `--override key=value` like oxbow-broker, formats the storage on first
start, then execs the JVM (so SIGTERM/SIGKILL reach Kafka itself).
Known differences: Kafka's clean-shutdown marker is `.kafka_cleanshutdown`;
Kafka 4.x may enforce larger minimums for segment.bytes.
"""
import os
import socket
import sys
from pathlib import Path

here = Path(__file__).resolve()
libs = Path(os.environ.get("KAFKA_LIBS", here.parents[2] / "java/target/kafka-ref/lib-4.1.1"))
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
port = overrides["listeners"].rsplit(":", 1)[1]
state = log_dir.parent / (log_dir.name + ".kafka-ref")
state.mkdir(parents=True, exist_ok=True)
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
props["listeners"] = f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}"
props["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
conf = state / "server.properties"
conf.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

java = ["java", "-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", f"{libs}/*",
        f"-Dlog4j2.configurationFile={state / 'log4j2.properties'}"]
(state / "log4j2.properties").write_text(
    "rootLogger.level=WARN\nrootLogger.appenderRef.stdout.ref=STDOUT\n"
    "appender.stdout.type=Console\nappender.stdout.name=STDOUT\n"
    "appender.stdout.layout.type=PatternLayout\nappender.stdout.layout.pattern=[%d] %p %m (%c)%n\n")
if not (state / "metadata" / "meta.properties").exists():
    rc = os.spawnvp(os.P_WAIT, "java", java + ["kafka.tools.StorageTool", "format", "-t",
                    "q1Sh-9_ISia_zwGINzRvyQ", "-c", str(conf)])
    if rc != 0:
        sys.exit(f"kafka storage format failed: {rc}")
os.execvp("java", java + ["kafka.Kafka", str(conf)])
