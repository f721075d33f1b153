"""A monitoring tool Kafka users run, unchanged, against Oxbow: kafkatop (PyPI), a top-like view of
consumer lag. Like the lag checkers and UIs of its kind (Burrow, kafka-ui, AKHQ), it reads
everything through the admin APIs: ListGroups, DescribeGroups, OffsetFetch, ListOffsets at
read_committed (the last stable offset), Metadata. Its JSON and text outputs are checked against
the workload, so a wrong lag, state or partition count fails here.

Runs against Apache Kafka too (run-all's reference runner step), which keeps the expectations
honest: Kafka gives the same answers."""

import json
import subprocess
import sys

from confluent_kafka import Consumer, Producer, TopicPartition

from oxbow_harness import Broker, consume, create_topic, wait_until

TOPIC = "watched"
PER_PARTITION = 100


def kafkatop(b: Broker, *args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "kafkatop", "--kafka-broker", b.bootstrap, *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"kafkatop {' '.join(args)} exited {r.returncode}: {r.stderr}{r.stdout}"
    return r.stdout


def commit(b: Broker, group: str, offsets: list[int]) -> None:
    """Commits `offsets` (one per partition) for `group` without joining it: a simple group, Empty."""
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in enumerate(offsets)], asynchronous=False)
    c.close()


def test_kafkatop_reports_each_groups_lag_state_and_the_topics_partitions(broker):
    b = broker
    create_topic(b, TOPIC, 3)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(3 * PER_PARTITION):
        p.produce(TOPIC, value=b"v" * 50, partition=i % 3)
    assert p.flush(30) == 0
    # An open transaction on partition 2: its 5 records are past the last stable offset (100),
    # which is what read_committed lag is measured against.
    txn = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "monitoring-open-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for _ in range(5):
        txn.produce(TOPIC, value=b"t", partition=2)
    assert txn.flush(30) == 0

    # "caught-up" read everything and left (its close commits); "behind" committed 40, 50, 60
    # without ever joining; "live" is in the group now, with 10 committed on each partition.
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "caught-up", "auto.offset.reset": "earliest"})
    assert consume(c, TOPIC, 3 * PER_PARTITION, timeout=60) == 3 * PER_PARTITION
    c.close()
    commit(b, "behind", [40, 50, 60])
    live = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "live", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})
    try:
        live.subscribe([TOPIC])

        def assigned() -> bool:
            live.poll(0.2)  # joins, and fetches: what it reads is never committed
            return len(live.assignment()) == 3

        wait_until(assigned, 60, "the live group's member assigned all three partitions")
        live.commit(offsets=[TopicPartition(TOPIC, p, 10) for p in range(3)], asynchronous=False)

        # Without --all, only groups with members.
        lag = {"partitions": 3, "lag_max": 90, "lag_min": 90}
        assert json.loads(kafkatop(b, "--summary-json")) == {
            "live": {"state": "ConsumerGroupState.STABLE", "topics": {TOPIC: lag}}}
        assert json.loads(kafkatop(b, "--summary-json", "--all")) == {
            "behind": {"state": "ConsumerGroupState.EMPTY",
                       "topics": {TOPIC: {"partitions": 3, "lag_max": 60, "lag_min": 40}}},
            "caught-up": {"state": "ConsumerGroupState.EMPTY",
                          "topics": {TOPIC: {"partitions": 3, "lag_max": 0, "lag_min": 0}}},
            "live": {"state": "ConsumerGroupState.STABLE", "topics": {TOPIC: lag}},
        }

        # The text view: group, topic, partitions with offsets / the topic's, state, lag min, max, median.
        rows = [line.split() for line in kafkatop(b, "--text", "--poll-iterations", "0", "--all").splitlines()]
        assert ["behind", TOPIC, "3/3", "ConsumerGroupState.EMPTY", "40.0", "60.0", "50.0"] in rows
        assert ["live", TOPIC, "3/3", "ConsumerGroupState.STABLE", "90.0", "90.0", "90.0"] in rows

        # Health over one second: "live" lags and consumed nothing in it.
        status = json.loads(kafkatop(b, "--status", "--poll-period", "1"))
        assert list(status) == [f"live-{TOPIC}"]
        assert status[f"live-{TOPIC}"]["rate"] == {"status": "ERROR", "reason": "Lag detected but not event consumption"}
    finally:
        live.close()
        txn.abort_transaction(30)

    info = json.loads(kafkatop(b, "--topicinfo-parts"))
    [(node, broker_info)] = info["brokers"].items()
    assert broker_info == {"id": int(node), "host": "127.0.0.1", "port": b.port}
    assert info["topics"][TOPIC] == {
        "name": TOPIC, "partitions": 3,
        "partinfo": [{"id": i, "leader": int(node), "replicas": [int(node)], "nisrs": 1} for i in range(3)]}
    assert info["cluster_id"]
