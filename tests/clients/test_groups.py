"""Consumer groups through librdkafka (confluent-kafka): subscribe, commit, resume after
the group restarts, committed offsets across a broker SIGKILL, rebalance when a member
leaves (timed), and the admin view of groups.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, ConsumerGroupState, Producer, TopicPartition

from oxbow_harness import admin_client, create_topic, wait_until

PARTITIONS = 4


def produce(broker, topic: str, per_partition: int, start: int) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(start, start + per_partition):
        for part in range(PARTITIONS):
            p.produce(topic, key=f"k{i}".encode(), value=f"{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0


def group_consumer(broker, group: str, **extra) -> Consumer:
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
        "heartbeat.interval.ms": 500,
        "fetch.wait.max.ms": 100,
    }
    conf.update(extra)
    return Consumer(conf)


def poll_values(consumers: list[Consumer], want: int, timeout: float = 60.0) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record until `want` arrived; fails on errors."""
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for c in consumers:
            m = c.poll(0.1)
            if m is None:
                continue
            assert not m.error(), m.error()
            got.append((m.partition(), m.offset(), m.value()))
    assert len(got) >= want, f"consumed {len(got)} of {want}"
    return got


def test_subscribe_commit_and_resume(broker):
    topic = "rd-groups-resume"
    create_topic(broker, topic, PARTITIONS)
    produce(broker, topic, 100, 0)
    a, b = group_consumer(broker, "rd-resume"), group_consumer(broker, "rd-resume")
    a.subscribe([topic])
    b.subscribe([topic])
    first = poll_values([a, b], 4 * 100)
    assert sorted((p, o) for p, o, _ in first) == [(p, o) for p in range(PARTITIONS) for o in range(100)]
    # Each member commits what it consumed, then both leave the group (LeaveGroup).
    for c in (a, b):
        c.commit(asynchronous=False)
        for tp in c.committed(c.assignment(), timeout=10):
            assert tp.offset == 100, tp
    assert {tp.partition for c in (a, b) for tp in c.assignment()} == set(range(PARTITIONS))
    a.close()
    b.close()

    produce(broker, topic, 50, 100)
    c = group_consumer(broker, "rd-resume")
    c.subscribe([topic])
    second = poll_values([c], 4 * 50)
    time.sleep(1)
    extra = poll_values([c], 0, timeout=0.5)
    c.close()
    offsets = sorted((p, o) for p, o, _ in second + extra)
    assert offsets == [(p, o) for p in range(PARTITIONS) for o in range(100, 150)], "resumed exactly at the commits"


def test_committed_offsets_survive_broker_sigkill(broker):
    topic = "rd-groups-durable"
    create_topic(broker, topic, PARTITIONS)
    produce(broker, topic, 10, 0)
    c = group_consumer(broker, "rd-durable")
    c.subscribe([topic])
    poll_values([c], 4 * 10)
    commits = [TopicPartition(topic, p, 3 + p) for p in range(PARTITIONS)]
    c.commit(offsets=commits, asynchronous=False)
    c.close()
    broker.kill()
    broker.start()
    d = group_consumer(broker, "rd-durable")
    stored = d.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    d.close()
    assert [(t.partition, t.offset) for t in stored] == [(p, 3 + p) for p in range(PARTITIONS)]


def test_rebalance_when_a_member_leaves(broker_factory):
    """Time from a member leaving (close -> LeaveGroup) to the remaining member owning
    every partition and consuming a record from one the leaver owned."""
    broker = broker_factory({"group.initial.rebalance.delay.ms": "0"})
    topic = "rd-groups-leave"
    create_topic(broker, topic, PARTITIONS)
    assigned: dict[str, list[int]] = {"a": [], "b": []}

    def on_assign(name):
        def cb(consumer, partitions):
            assigned[name] = sorted(p.partition for p in partitions)
        return cb

    a, b = group_consumer(broker, "rd-leave"), group_consumer(broker, "rd-leave")
    a.subscribe([topic], on_assign=on_assign("a"))
    b.subscribe([topic], on_assign=on_assign("b"))
    wait_until(lambda: (a.poll(0.05), b.poll(0.05)) and sorted(assigned["a"] + assigned["b"]) == list(range(PARTITIONS))
               and assigned["a"] and assigned["b"], 60, "both members assigned")
    leaver_owned = assigned["b"]
    t0 = time.monotonic()
    b.close()
    wait_until(lambda: a.poll(0.01) is None and assigned["a"] == list(range(PARTITIONS)), 60, "a owns everything")
    reassigned = time.monotonic() - t0
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic, value=b"after-leave", partition=leaver_owned[0])
    p.flush(10)
    got = poll_values([a], 1)
    consuming = time.monotonic() - t0
    a.close()
    assert got[0][0] == leaver_owned[0] and got[0][2] == b"after-leave"
    print(f"member left: partitions reassigned after {reassigned * 1000:.0f} ms, consuming again after {consuming * 1000:.0f} ms")


def test_admin_lists_and_describes_groups(broker):
    topic = "rd-groups-admin"
    create_topic(broker, topic, PARTITIONS)
    c = group_consumer(broker, "rd-admin", **{"client.id": "admin-probe"})
    c.subscribe([topic])
    wait_until(lambda: c.poll(0.05) is None and len(c.assignment()) == PARTITIONS, 60, "assignment")
    admin = admin_client(broker)
    listed = admin.list_consumer_groups(request_timeout=10).result()
    assert [(g.group_id, g.state) for g in listed.valid if g.group_id == "rd-admin"] == [
        ("rd-admin", ConsumerGroupState.STABLE)
    ]
    d = admin.describe_consumer_groups(["rd-admin"])["rd-admin"].result()
    assert d.state == ConsumerGroupState.STABLE
    assert d.partition_assignor == "range"
    assert len(d.members) == 1 and d.members[0].client_id == "admin-probe"
    assert sorted(tp.partition for tp in d.members[0].assignment.topic_partitions) == list(range(PARTITIONS))
    c.close()
    wait_until(lambda: admin.describe_consumer_groups(["rd-admin"])["rd-admin"].result().state
               == ConsumerGroupState.EMPTY, 30, "empty after the member left")
    assert admin.delete_consumer_groups(["rd-admin"])["rd-admin"].result() is None
    listed = admin.list_consumer_groups(request_timeout=10).result()
    assert "rd-admin" not in [g.group_id for g in listed.valid]


def java_partition_for(group: str, partitions: int) -> int:
    """Kafka's coordinator partition: Utils.abs(group.hashCode()) % partitions, where
    String.hashCode runs over UTF-16 code units with 32-bit overflow."""
    units = group.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def test_consumer_offsets_is_compacted_and_reloads(broker_factory):
    """Hundreds of commits of one group end as a few records in its __consumer_offsets
    partition, and the last commit is what a restarted broker serves."""
    broker = broker_factory({
        "offsets.topic.num.partitions": "3",
        "offsets.topic.segment.bytes": "2048",
        "log.cleaner.backoff.ms": "300",
    })
    topic = "rd-groups-compacted"
    create_topic(broker, topic, 1)
    c = group_consumer(broker, "rd-compacted")
    for i in range(300):
        c.commit(offsets=[TopicPartition(topic, 0, i)], asynchronous=False)
    part = java_partition_for("rd-compacted", 3)

    def records_in_partition() -> int:
        r = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "rd-compacted-reader",
                      "enable.partition.eof": True, "enable.auto.commit": False})
        r.assign([TopicPartition("__consumer_offsets", part, 0)])
        n, deadline = 0, time.monotonic() + 30
        while time.monotonic() < deadline:
            m = r.poll(0.5)
            if m is None:
                continue
            if m.error():
                break
            n += 1
        r.close()
        return n

    # 300 commit records were written; compaction leaves the latest one plus the active segment.
    wait_until(lambda: records_in_partition() <= 50, 60, "__consumer_offsets compacted")
    c.close()
    broker.kill()
    broker.start()
    d = group_consumer(broker, "rd-compacted")
    stored = d.committed([TopicPartition(topic, 0)], timeout=30)
    d.close()
    assert stored[0].offset == 299
