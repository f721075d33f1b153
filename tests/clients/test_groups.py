"""Consumer groups through librdkafka (confluent-kafka): subscribe, commit, resume after
the group restarts, committed offsets across a broker SIGKILL, rebalance when a member
leaves (timed), and the admin view of groups. The resume and leave tests run under both
group protocols: classic (JoinGroup/SyncGroup) and consumer (KIP-848, `group.protocol=consumer`).
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType, Producer, TopicPartition

from oxbow_harness import admin_client, create_topic, wait_until

PARTITIONS = 4

# Broker settings of the consumer protocol tests: the coordinator sets members' session timeout
# and heartbeat interval (KIP-848), matched to the classic members' client settings below.
CONSUMER_PROTOCOL_BROKER = {
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


def produce(broker, topic: str, per_partition: int, start: int) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(start, start + per_partition):
        for part in range(PARTITIONS):
            p.produce(topic, key=f"k{i}".encode(), value=f"{part}-{i}".encode(), partition=part)
    assert p.flush(30) == 0


def group_consumer(broker, group: str, protocol: str = "classic", **extra) -> Consumer:
    conf = {
        "bootstrap.servers": broker.bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
    }
    if protocol == "classic":
        # Under the consumer protocol the broker sets these (CONSUMER_PROTOCOL_BROKER).
        conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
    conf.update(extra)
    return Consumer(conf)


class Owned:
    """What each member owns, from its rebalance callbacks: eager (classic) assignments
    replace, incremental (consumer protocol) ones add and revoke."""

    def __init__(self, protocol: str, *names: str):
        self.incremental = protocol == "consumer"
        self.parts: dict[str, set[int]] = {n: set() for n in names}

    def callbacks(self, name: str) -> dict:
        def on_assign(consumer, partitions):
            if not self.incremental:
                self.parts[name] = set()
            self.parts[name] |= {p.partition for p in partitions}

        def on_revoke(consumer, partitions):
            self.parts[name] -= {p.partition for p in partitions}

        return {"on_assign": on_assign, "on_revoke": on_revoke}

    def __getitem__(self, name: str) -> list[int]:
        return sorted(self.parts[name])


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


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_subscribe_commit_and_resume(broker_factory, protocol):
    broker = broker_factory(CONSUMER_PROTOCOL_BROKER)
    topic = "rd-groups-resume"
    create_topic(broker, topic, PARTITIONS)
    a, b = group_consumer(broker, "rd-resume", protocol), group_consumer(broker, "rd-resume", protocol)
    a.subscribe([topic])
    b.subscribe([topic])
    # Records go in once the two members share the partitions: nothing is committed yet, so a
    # partition moving mid-way would be read again from the start by its new owner.
    wait_until(lambda: (a.poll(0.05), b.poll(0.05)) and len(a.assignment()) == 2 and len(b.assignment()) == 2,
               60, "two partitions each")
    produce(broker, topic, 100, 0)
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
    c = group_consumer(broker, "rd-resume", protocol)
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


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_rebalance_when_a_member_leaves(broker_factory, protocol):
    """Time from a member leaving (close -> LeaveGroup, or a leave heartbeat) to the remaining
    member owning every partition and consuming a record from one the leaver owned."""
    broker = broker_factory(CONSUMER_PROTOCOL_BROKER)
    topic = "rd-groups-leave"
    create_topic(broker, topic, PARTITIONS)
    assigned = Owned(protocol, "a", "b")
    a, b = group_consumer(broker, "rd-leave", protocol), group_consumer(broker, "rd-leave", protocol)
    a.subscribe([topic], **assigned.callbacks("a"))
    b.subscribe([topic], **assigned.callbacks("b"))
    wait_until(lambda: (a.poll(0.05), b.poll(0.05)) and sorted(assigned["a"] + assigned["b"]) == list(range(PARTITIONS))
               and assigned["a"] and assigned["b"], 60, "both members assigned")
    leaver_owned = assigned["b"]
    # The group runs the protocol asked for, as the admin API reports it.
    admin = admin_client(broker)
    listed = [g for g in admin.list_consumer_groups(request_timeout=10).result().valid if g.group_id == "rd-leave"]
    assert [g.type for g in listed] == [ConsumerGroupType.CONSUMER if protocol == "consumer" else ConsumerGroupType.CLASSIC]
    d = admin.describe_consumer_groups(["rd-leave"])["rd-leave"].result()
    assert d.partition_assignor == ("uniform" if protocol == "consumer" else "range")
    assert sorted(tp.partition for m in d.members for tp in m.assignment.topic_partitions) == list(range(PARTITIONS))
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
    print(f"{protocol} protocol: member left: partitions reassigned after {reassigned * 1000:.0f} ms, "
          f"consuming again after {consuming * 1000:.0f} ms")


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_rebalance_when_a_member_joins(broker_factory, protocol):
    """Time from a second member subscribing to both members owning two partitions each and
    the new one consuming a record from a partition it took over."""
    broker = broker_factory(CONSUMER_PROTOCOL_BROKER)
    topic = "rd-groups-join"
    create_topic(broker, topic, PARTITIONS)
    owned = Owned(protocol, "a", "b")
    a = group_consumer(broker, "rd-join", protocol)
    a.subscribe([topic], **owned.callbacks("a"))
    wait_until(lambda: a.poll(0.05) is None and owned["a"] == list(range(PARTITIONS)), 60, "a owns everything")
    b = group_consumer(broker, "rd-join", protocol)
    t0 = time.monotonic()
    b.subscribe([topic], **owned.callbacks("b"))
    wait_until(lambda: (a.poll(0.01), b.poll(0.01)) and len(owned["a"]) == 2 and len(owned["b"]) == 2
               and sorted(owned["a"] + owned["b"]) == list(range(PARTITIONS)), 60, "two partitions each")
    rebalanced = time.monotonic() - t0
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce(topic, value=b"after-join", partition=owned["b"][0])
    p.flush(10)
    deadline = time.monotonic() + 30
    got = None
    while got is None and time.monotonic() < deadline:
        a.poll(0.01)
        m = b.poll(0.01)
        if m is not None:
            assert not m.error(), m.error()
            got = m
    consuming = time.monotonic() - t0
    a.close()
    b.close()
    assert got is not None and got.value() == b"after-join"
    print(f"{protocol} protocol: member joined: two partitions each after {rebalanced * 1000:.0f} ms, "
          f"the new member consuming after {consuming * 1000:.0f} ms")


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


STATIC_RUNS = 20


def test_static_members_subscribing_together_get_one_assignment_each(broker_factory):
    """Two static members (group.instance.id) subscribe to a new group at the same moment, with
    group.initial.rebalance.delay.ms=0, STATIC_RUNS times. A generation that holds both members
    is final: no run rebalances it again, so at most one member is revoked, and only when it was
    alone in the first generation (the other's join arrived after that generation's assignment).

    With no initial delay, a join that arrives after the first member's assignment takes effect
    later in both Oxbow and Kafka; Kafka 4.1.1 shows such a run 2 to 3 times in 20 here
    (docs/compatibility.md). The count of runs with none is printed."""
    broker = broker_factory({"group.initial.rebalance.delay.ms": "0"})
    topic = "rd-static-together"
    create_topic(broker, topic, PARTITIONS)
    failures, clean = [], 0
    for run in range(STATIC_RUNS):
        group = f"rd-static-{run}"
        events: dict[str, list[tuple[str, list[int]]]] = {"a": [], "b": []}

        def callbacks(name):
            def on_assign(consumer, partitions):
                events[name].append(("assign", sorted(p.partition for p in partitions)))

            def on_revoke(consumer, partitions):
                events[name].append(("revoke", sorted(p.partition for p in partitions)))

            return {"on_assign": on_assign, "on_revoke": on_revoke}

        members = {n: group_consumer(broker, group, **{"group.instance.id": f"{group}-{n}"}) for n in ("a", "b")}
        for n, c in members.items():
            c.subscribe([topic], **callbacks(n))

        def settled() -> bool:
            for c in members.values():
                c.poll(0.05)
            owned = [set(c.assignment() and [tp.partition for tp in c.assignment()]) for c in members.values()]
            return all(owned) and not (owned[0] & owned[1]) and owned[0] | owned[1] == set(range(PARTITIONS))

        wait_until(settled, 60, f"run {run}: both members assigned, partitions shared")
        # What happened up to here (closing revokes everything).
        seen = {n: list(e) for n, e in events.items()}
        for c in members.values():
            c.close()
        assigns = {n: [p for kind, p in e if kind == "assign"] for n, e in seen.items()}
        revoked = [n for n, e in seen.items() if any(kind == "revoke" and p for kind, p in e)]
        if not revoked and all(len(a) == 1 for a in assigns.values()):
            clean += 1
        elif len(revoked) > 1 or any(len(a) > 2 for a in assigns.values()) or any(
            assigns[n][0] != list(range(PARTITIONS)) or len(assigns[n]) != 2 for n in revoked
        ):
            failures.append((run, seen))
    print(f"static members joining together: {clean} of {STATIC_RUNS} runs with one assignment each, no revoke")
    assert not failures, f"a generation holding both members was rebalanced again: {failures}"


def test_async_commits_after_every_message_leave_the_last_committed(broker):
    """A consumer committing asynchronously after each message (many commits in flight on one
    connection) then reading committed() gets the last commit: commits take effect in order."""
    topic = "rd-async-commits"
    create_topic(broker, topic, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(200):
        p.produce(topic, value=f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0
    c = group_consumer(broker, "rd-async-commits")
    c.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 200 and time.monotonic() < deadline:
        m = c.poll(0.1)
        if m is None or m.error():
            continue
        seen += 1
        c.commit(message=m, asynchronous=True)
    assert seen == 200
    committed = c.committed([TopicPartition(topic, 0)], timeout=10)
    c.close()
    assert committed[0].offset == 200, committed
