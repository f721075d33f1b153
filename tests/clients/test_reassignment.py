"""Partition reassignment (KIP-455) on a four-node loopback cluster: three combined voters and
one broker-only node, Kafka's config keys (tests/clients/oxbow_cluster.py).

With an idempotent acks=all producer of each kind (librdkafka and Kafka's Java client) running
the whole time on a replication factor 2, min.insync.replicas 2 topic, every replica moves off
broker 1: half with Kafka's Java Admin client (throttles set by hand, the active controller
SIGKILLed in the middle of the move), half with `kafka-reassign-partitions` from Kafka's tools
jar (`--throttle`, `--list`, `--verify`, which clears the throttles), one partition growing to
replication factor 3. Then broker 1 is SIGKILLed and unregistered, and everything is read back:
acknowledged / lost / duplicated, and each producer's longest stall, are printed (never timed).

The same test runs against Apache Kafka 4.1.1:
    OXBOW_BROKER_BIN=tests/clients/reference/kafka_as_oxbow.py python -m pytest tests/clients/test_reassignment.py
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from oxbow_cluster import Cluster
from oxbow_harness import consume_all, require_broker_binary, wait_until
from test_quorum import kafka_clients_classpath

REPO = Path(__file__).resolve().parents[2]
JAVA = REPO / "tests" / "clients" / "java"
TOPIC = "moving"
# Where each partition starts (every one has a replica on broker 1 but partitions 4 and 5) and
# where it goes. Partition 2 grows to replication factor 3.
START = {0: [1, 2], 1: [2, 1], 2: [1, 3], 3: [3, 1], 4: [2, 3], 5: [3, 2]}
BY_ADMIN = {0: [4, 2], 1: [2, 4]}
BY_TOOL = {2: [3, 4, 2], 3: [3, 4]}
TARGET = {**START, **BY_ADMIN, **BY_TOOL}
# Bytes per second for the throttled copies: with the prefill they take several seconds, so the
# moves can be listed (and a controller killed) while they run.
THROTTLE = 1_000_000
REFERENCE = os.environ.get("OXBOW_BROKER_BIN", "").endswith("kafka_as_oxbow.py")


@pytest.fixture
def cluster(request, tmp_path):
    c = Cluster(
        require_broker_binary(),
        tmp_path,
        controllers=3,
        brokers=1,
        overrides={"replica.lag.time.max.ms": "10000", "offsets.topic.replication.factor": "3"},
    )
    request.node._oxbow_brokers = c.nodes
    c.start(timeout=180 if REFERENCE else 60)
    yield c
    c.close()


def java(cp: str, bootstrap: str, *args: str, timeout: float = 180):
    r = subprocess.run(["java", "-cp", cp, str(JAVA / "Reassign.java"), bootstrap, *args],
                       capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        pytest.fail(f"Reassign {' '.join(args)} failed:\n{r.stdout}\n{r.stderr[-3000:]}", pytrace=False)
    return json.loads(r.stdout.strip().splitlines()[-1])


def tool(cp: str, bootstrap: str, *args: str) -> str:
    """Kafka's kafka-reassign-partitions (its tools jar, unchanged)."""
    r = subprocess.run(["java", "-cp", cp, "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
                        "--bootstrap-server", bootstrap, *args], capture_output=True, text=True, timeout=180)
    if r.returncode != 0:
        pytest.fail(f"kafka-reassign-partitions {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-3000:]}",
                    pytrace=False)
    return r.stdout


def active_controller(cp: str, bootstrap: str) -> int:
    r = subprocess.run(["java", "-cp", cp, str(JAVA / "RaftVoters.java"), bootstrap, "describe"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])["leader"]


def layout(adm: AdminClient) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas in order, sorted ISR)."""
    md = adm.list_topics(TOPIC, timeout=10).topics[TOPIC]
    return {p: (x.leader, list(x.replicas), sorted(x.isrs)) for p, x in md.partitions.items()}


def settled(adm: AdminClient, want: dict[int, list[int]]) -> bool:
    try:
        now = layout(adm)
    except Exception:  # noqa: BLE001 - retried until the deadline
        return False
    return all(sorted(now[p][1]) == sorted(r) and now[p][2] == sorted(r) and now[p][0] in r for p, r in want.items())


class RdkafkaLoad:
    """librdkafka's idempotent acks=all producer in a thread; remembers what was acknowledged and
    the longest time without an acknowledgement while records were outstanding."""

    def __init__(self, bootstrap: str) -> None:
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                           "linger.ms": 5, "message.timeout.ms": 300000})
        self.acked: list[str] = []
        self.failed: list[str] = []
        self.sent = 0
        self.last_ack = time.monotonic()
        self.longest_stall = 0.0
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def _done(self, err, msg) -> None:
        now = time.monotonic()
        self.longest_stall = max(self.longest_stall, now - self.last_ack)
        self.last_ack = now
        (self.failed if err is not None else self.acked).append(str(err) if err else msg.value().decode())

    def run(self) -> None:
        while not self.stop.is_set():
            for _ in range(50):
                v = f"c{self.sent}"
                self.p.produce(TOPIC, key=v.encode(), value=v.encode(), on_delivery=self._done)
                self.sent += 1
            self.p.poll(0.005)
            if len(self.p) > 0:
                self.longest_stall = max(self.longest_stall, time.monotonic() - self.last_ack)
        self.p.flush(300)


class JavaLoad:
    """Kafka's Java producer (idempotent, acks=all by default) in a child JVM."""

    def __init__(self, cp: str, bootstrap: str, workdir: Path) -> None:
        self.acked_file, self.stop_file = workdir / "java-acked.txt", workdir / "java-stop"
        self.proc = subprocess.Popen(["java", "-cp", cp, str(JAVA / "Produce.java"), bootstrap, TOPIC, "j",
                                      str(self.acked_file), str(self.stop_file)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(self) -> tuple[dict, list[str]]:
        self.stop_file.touch()
        out, err = self.proc.communicate(timeout=360)
        assert self.proc.returncode == 0, err[-3000:]
        return json.loads(out.strip().splitlines()[-1]), self.acked_file.read_text().split()


def prefill(bootstrap: str) -> None:
    """About 4 MB per partition, so that throttled copies take a while."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 1 << 20})
    blob = b"x" * 10_000
    for i in range(2400):
        p.produce(TOPIC, key=f"f{i}".encode(), value=blob, partition=i % 6)
        if i % 200 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def test_replicas_move_off_a_broker_under_load_and_survive_its_loss(cluster, tmp_path):
    cp = kafka_clients_classpath(tmp_path)
    bootstrap = cluster.bootstrap()
    adm = AdminClient({"bootstrap.servers": bootstrap})
    fut = adm.create_topics([NewTopic(TOPIC, num_partitions=6, replica_assignment=[START[p] for p in range(6)],
                                      config={"min.insync.replicas": "2"})])
    fut[TOPIC].result(timeout=60)
    wait_until(lambda: settled(adm, START), 60, "every partition has its two replicas in sync")
    prefill(bootstrap)

    rdkafka = RdkafkaLoad(bootstrap)
    rdkafka.t.start()
    jload = JavaLoad(cp, bootstrap, tmp_path)
    wait_until(lambda: len(rdkafka.acked) >= 2000, 90, "the librdkafka producer is acknowledged")

    # --- 1. Kafka's Java Admin client: throttles by hand, then the moves of partitions 0 and 1.
    assert java(cp, bootstrap, "throttle", str(THROTTLE), "1", "2", "3", "4") == {"error": None}
    leaders = ",".join(f"{p}:{b}" for p in BY_ADMIN for b in START[p])
    followers = ",".join(f"{p}:{b}" for p, r in BY_ADMIN.items() for b in r if b not in START[p])
    assert java(cp, bootstrap, "topic-throttle", TOPIC, leaders, followers) == {"error": None}
    configs = java(cp, bootstrap, "configs", "4")
    assert configs["leader.replication.throttled.rate"] == {"value": str(THROTTLE), "source": "DYNAMIC_BROKER_CONFIG"}, configs
    # The active controller dies in the middle of the move; it comes back, the move completes.
    victim = active_controller(cp, bootstrap)
    moves = [f"{p}={','.join(map(str, r))}" for p, r in BY_ADMIN.items()]
    result = java(cp, bootstrap, "move", TOPIC, *moves)
    t0 = time.monotonic()
    cluster.node(victim).kill()
    assert result["moved"] == {f"{TOPIC}-{p}": {"error": None} for p in BY_ADMIN}, result
    listed = result["listed"]
    print(f"\nmoves in flight (Java Admin listPartitionReassignments): {listed}")
    for p, r in BY_ADMIN.items():
        want_replicas = r + sorted(set(START[p]) - set(r))
        assert listed.get(f"{TOPIC}-{p}") == {"replicas": want_replicas, "adding": [4], "removing": [1]}, listed
    print(f"active controller {victim} SIGKILLed with {len(listed)} moves in flight")
    time.sleep(2)
    cluster.node(victim).start(timeout=180 if REFERENCE else 60)
    wait_until(lambda: settled(adm, BY_ADMIN), 240, "the Java Admin moves complete")
    print(f"Java Admin moves complete {time.monotonic() - t0:.1f}s after the controller kill")
    wait_until(lambda: java(cp, bootstrap, "list") == {}, 60, "no move listed any more")
    # Throttles by hand are cleared by hand (kafka-reassign-partitions --verify does it for its own).
    assert java(cp, bootstrap, "topic-throttle", TOPIC, "-", "-") == {"error": None}
    assert java(cp, bootstrap, "throttle", "-1", "1", "2", "3", "4") == {"error": None}

    # --- 2. kafka-reassign-partitions, unchanged: --execute --throttle, --list, --verify.
    plan = tmp_path / "reassign.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": TOPIC, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)} for p, r in BY_TOOL.items()]}))
    out = tool(cp, bootstrap, "--reassignment-json-file", str(plan), "--execute", "--throttle", str(THROTTLE))
    print(out)
    assert "Successfully started partition reassignment" in out, out
    assert f"The inter-broker throttle limit was set to {THROTTLE} B/s" in out, out
    out = tool(cp, bootstrap, "--list")
    print(out)
    assert "Current partition reassignments:" in out or "No partition reassignments found." in out, out
    deadline = time.monotonic() + 240
    while True:
        out = tool(cp, bootstrap, "--reassignment-json-file", str(plan), "--verify")
        if "still in progress" not in out:
            break
        assert time.monotonic() < deadline, f"kafka-reassign-partitions --verify never completed:\n{out}"
        time.sleep(1)
    print(out)
    for p in BY_TOOL:
        assert f"Reassignment of partition {TOPIC}-{p} is completed." in out, out
    assert "Clearing broker-level throttles" in out and "Clearing topic-level throttles" in out, out
    wait_until(lambda: settled(adm, TARGET), 120, "every partition on its targets with a full ISR")

    # The throttles are gone everywhere (--verify cleared them).
    for b in (1, 2, 3, 4):
        c = java(cp, bootstrap, "configs", str(b))
        for key, entry in c.items():
            assert entry is None or entry["source"] != "DYNAMIC_BROKER_CONFIG", (b, key, entry)
    topic_cfg = adm.describe_configs([ConfigResource("topic", TOPIC)])
    entries = list(topic_cfg.values())[0].result(timeout=30)
    for key in ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas"):
        assert entries[key].value in ("", None) and entries[key].is_default, (key, entries[key])

    now = layout(adm)
    print("layout after the moves: " + ", ".join(f"{p}: replicas {r} isr {i} leader {l}" for p, (l, r, i) in sorted(now.items())))
    assert all(1 not in r for _, r, _ in now.values()), now
    assert len(now[2][1]) == 3, "partition 2 grew to replication factor 3"

    # --- 3. Broker 1 holds nothing: SIGKILL it, unregister it, read everything back.
    survivors = [n for n in cluster.brokers if n.node_id != 1]
    cluster.node(1).kill()
    at_kill = len(rdkafka.acked)
    wait_until(lambda: len(rdkafka.acked) >= at_kill + 2000, 90, "records acknowledged after broker 1 died")
    rdkafka.stop.set()
    rdkafka.t.join(360)
    jstats, jacked = jload.finish()
    errors = java(cp, survivors[0].bootstrap, "errors", TOPIC)
    # Broker 1 stays registered (fenced) until it is unregistered; then DescribeCluster, fenced
    # brokers included, no longer lists it.
    wait_until(lambda: java(cp, survivors[0].bootstrap, "brokers").get("1") is True, 60, "broker 1 listed as fenced")
    unregistered = java(cp, survivors[0].bootstrap, "unregister", "1")
    assert unregistered == {"error": None}, unregistered
    listed = java(cp, survivors[0].bootstrap, "brokers")
    assert listed == {"2": False, "3": False, "4": False}, listed

    got = consume_all(survivors[0], TOPIC, partitions=range(6))
    values = [r.value.decode() for recs in got.values() for r in recs if not r.key.startswith(b"f")]
    for name, acked, stall in (("librdkafka", rdkafka.acked, rdkafka.longest_stall),
                               ("java", jacked, jstats["longest_stall_ms"] / 1000)):
        prefix = "c" if name == "librdkafka" else "j"
        mine = [v for v in values if v.startswith(prefix)]
        lost = set(acked) - set(mine)
        dup = len(mine) - len(set(mine))
        print(f"{name}: acknowledged {len(acked)} / lost {len(lost)} / duplicated {dup}; longest stall {stall:.2f}s")
        assert not lost, f"{name}: {len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
        assert dup == 0, f"{name}: {dup} duplicates (the producer is idempotent)"
    assert not rdkafka.failed, rdkafka.failed[:5]
    assert jstats["failed"] == 0, jstats

    # --- 4. Every refusal answered with Kafka's error (and message).
    print("refusals: " + json.dumps(errors, indent=1))
    expect = {
        "unknown broker": ("InvalidReplicaAssignmentException",
                           "The manual partition assignment includes broker 99, but no such broker is registered."),
        "duplicate replica": ("InvalidReplicaAssignmentException",
                              "The manual partition assignment includes the broker 3 more than once."),
        "unknown topic": ("UnknownTopicOrPartitionException", "Unable to find a topic named no-such-topic."),
        "unknown partition": ("UnknownTopicOrPartitionException", f"Unable to find partition {TOPIC}:999."),
        "cancel with nothing in flight": ("NoReassignmentInProgressException", "No partition reassignment is in progress."),
        "replication factor change refused (KIP-860)": ("InvalidReplicationFactorException",
                                                        "The replication factor is changed from 2 to 3"),
        "unregister an unknown broker": ("BrokerIdNotRegisteredException", "Broker ID 99 is not currently registered"),
    }
    assert {k: (v["error"], v.get("message")) for k, v in errors.items()} == expect
