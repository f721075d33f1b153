"""Replicated partitions on a 3-node cluster (tests/clients/oxbow_cluster.py), driven by
librdkafka: followers fetch from leaders, the ISR and high watermark follow them, acks=all waits
for the ISR, and a leader that dies or is fenced is replaced from the ISR without losing an
acknowledged record.

Timings are printed (run with -s to see them), never asserted.
"""

from __future__ import annotations

import signal
import threading
import time

import pytest
from confluent_kafka import Consumer, ElectionType, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oxbow_cluster import Cluster
from oxbow_harness import consume_all, read_batches, require_broker_binary, scrape, segment_files, wait_until


@pytest.fixture
def cluster(request, tmp_path):
    c = Cluster(require_broker_binary(), tmp_path, 3, 0, {"replica.lag.time.max.ms": "5000"})
    request.node._oxbow_brokers = c.nodes
    c.start()
    yield c
    c.close()


def partitions(adm: AdminClient, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, ISR) as the metadata shows it."""
    md = adm.list_topics(topic, timeout=10).topics[topic]
    return {p: (md.partitions[p].leader, sorted(md.partitions[p].replicas), sorted(md.partitions[p].isrs)) for p in md.partitions}


def full_isr(adm: AdminClient, topic: str, members: list[int]) -> bool:
    try:
        return all(isr == members for _, _, isr in partitions(adm, topic).values())
    except KafkaException:
        return False


def describe(read) -> str:
    """What `read` returns, or why it could not (for failure messages)."""
    try:
        return str(read())
    except Exception as e:  # noqa: BLE001 - a failure message must not fail itself
        return f"unknown ({e})"


def create_replicated(adm: AdminClient, topic: str, n: int = 3) -> None:
    fut = adm.create_topics([NewTopic(topic, n, 3, config={"min.insync.replicas": "2"})], operation_timeout=30)
    fut[topic].result(timeout=40)
    wait_until(lambda: full_isr(adm, topic, [1, 2, 3]), 30, "every partition has 3 in-sync replicas")


class Load:
    """An idempotent acks=all producer sending numbered records in a thread; remembers which
    ones were acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                           "linger.ms": 2, "message.timeout.ms": 60000})
        self.topic = topic
        self.acked: list[str] = []
        self.failed: list[str] = []
        self.sent = 0
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run)

    def _done(self, err, msg) -> None:
        (self.failed if err is not None else self.acked).append(msg.value().decode() if err is None else str(err))

    def run(self) -> None:
        while not self.stop.is_set():
            for _ in range(100):
                self.p.produce(self.topic, key=str(self.sent).encode(), value=f"r{self.sent}".encode(), on_delivery=self._done)
                self.sent += 1
            self.p.poll(0)
            time.sleep(0.005)
        self.p.flush(60)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.t.join(90)


def isr_changes(node) -> tuple[float, float]:
    """(ISR expands, ISR shrinks) the node counted as a leader, from its GET /metrics."""
    types, _, series = scrape(f"http://{node.host}:{node.http_port}/metrics")
    assert types["oxbow_broker_isr_expands_total"] == types["oxbow_broker_isr_shrinks_total"] == "counter"
    return series["oxbow_broker_isr_expands_total"], series["oxbow_broker_isr_shrinks_total"]


def consumed_values(node, topic: str, n: int = 3) -> list[str]:
    got = consume_all(node, topic, partitions=range(n))
    return [r.value.decode() for recs in got.values() for r in recs]


def test_leader_sigkilled_under_acks_all_load_loses_no_acknowledged_record(cluster):
    adm = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    create_replicated(adm, "repl")
    before = partitions(adm, "repl")
    victim = before[0][0]
    with Load(cluster.bootstrap(), "repl") as load:
        wait_until(lambda: len(load.acked) >= 3000, 60, "records acknowledged before the kill")
        t0 = time.monotonic()
        cluster.node(victim).kill()
        survivors = [n for n in cluster.nodes if n.node_id != victim]
        sadm = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in survivors)})
        wait_until(lambda: partitions(sadm, "repl")[0][0] not in (-1, victim), 30, "partition 0 has a new leader")
        moved = time.monotonic() - t0
        at_kill = len(load.acked)
        wait_until(lambda: len(load.acked) >= at_kill + 3000, 60, "records acknowledged after the kill")
    after = partitions(sadm, "repl")
    print(f"\nleader {victim} of partition 0 SIGKILLed; new leader {after[0][0]} after {moved:.2f}s; "
          f"{len(load.acked)} acknowledged, {len(load.failed)} failed of {load.sent} sent")
    assert not load.failed, load.failed[:5]
    for p, (leader, _, isr) in after.items():
        assert leader in before[p][2] and leader != victim, f"partition {p}: new leader {leader} was not in the ISR {before[p][2]}"
        assert victim not in isr, f"partition {p}: the dead broker is still in the ISR {isr}"
    values = consumed_values(survivors[0], "repl")
    assert len(values) == len(set(values)), "duplicates (the producer is idempotent)"
    missing = set(load.acked) - set(values)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:5]}"

    # The killed broker comes back, catches up, rejoins every ISR; given back its preferred
    # leaderships it serves everything itself.
    shrinks = sum(isr_changes(n)[1] for n in survivors)
    cluster.node(victim).start()
    wait_until(lambda: full_isr(adm, "repl", [1, 2, 3]), 60, "the restarted broker rejoins every ISR")
    # Each partition's leader (a survivor, none restarted) took it back in: an accepted expand
    # each, counted on the leaders' /metrics (Kafka's IsrExpandsPerSec). The shrinks before it
    # depend on whether the leaders or the controller (fencing the dead broker) removed it.
    expands = sum(isr_changes(n)[0] for n in survivors)
    print(f"ISR expands on the survivors: {expands}; shrinks before the restart: {shrinks}")
    assert expands >= len(before), f"{expands} ISR expands counted for {len(before)} partitions rejoined"
    result = adm.elect_leaders(ElectionType.PREFERRED, [TopicPartition("repl", p) for p in before]).result(timeout=40)
    assert all(e is None or e.name() == "ELECTION_NOT_NEEDED" for e in result.values()), result
    wait_until(lambda: partitions(adm, "repl")[0][0] == victim, 30, "preferred leader restored")
    back = consumed_values(cluster.node(victim), "repl")
    assert sorted(back) == sorted(values), "the restarted broker's copy differs"


def test_fsync_per_batch_at_rf3_loses_nothing_when_a_leader_dies_and_every_write_becomes_visible(cluster):
    """flush.messages=1 on an RF 3 topic of 16 partitions: the produce path appends every
    partition of a request, then fsyncs them together outside the partitions' locks, and holds
    the high watermark below each write until its fsync is done. Under an idempotent acks=all
    load, with one leader SIGKILLed: nothing acknowledged is lost or doubled, everything
    acknowledged becomes readable (no high watermark left waiting for a flush), and the surviving
    brokers counted flushes (as leaders on the produce path, as followers in their appends)."""
    adm = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    topic = "fsynced"
    fut = adm.create_topics([NewTopic(topic, 16, 3, config={"min.insync.replicas": "2", "flush.messages": "1"})],
                            operation_timeout=30)
    fut[topic].result(timeout=40)
    wait_until(lambda: full_isr(adm, topic, [1, 2, 3]), 30, "every partition has 3 in-sync replicas")
    flushes_before = {n.node_id: flushes(n) for n in cluster.nodes}
    victim = partitions(adm, topic)[0][0]
    with Load(cluster.bootstrap(), topic) as load:
        wait_until(lambda: len(load.acked) >= 3000, 60, "records acknowledged before the kill")
        cluster.node(victim).kill()
        survivors = [n for n in cluster.nodes if n.node_id != victim]
        sadm = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in survivors)})
        wait_until(lambda: partitions(sadm, topic)[0][0] not in (-1, victim), 30, "partition 0 has a new leader")
        at_kill = len(load.acked)
        wait_until(lambda: len(load.acked) >= at_kill + 3000, 60, "records acknowledged after the kill")
    print(f"\n{len(load.acked)} acknowledged, {len(load.failed)} failed of {load.sent} sent")
    assert not load.failed, load.failed[:5]
    values = consumed_values(survivors[0], topic, 16)
    assert len(values) == len(set(values)), "duplicates (the producer is idempotent)"
    missing = set(load.acked) - set(values)
    assert not missing, f"{len(missing)} acknowledged records lost or not readable, e.g. {sorted(missing)[:5]}"
    flushed = {n.node_id: flushes(n) - flushes_before[n.node_id] for n in survivors}
    print(f"log flushes on the survivors during the load: {flushed}")
    assert all(f > 0 for f in flushed.values()), flushed


def flushes(node) -> float:
    """The log flushes the node counted (oxbow_log_flushes_total on its GET /metrics)."""
    _, _, series = scrape(f"http://{node.host}:{node.http_port}/metrics")
    return series["oxbow_log_flushes_total"]


def test_fenced_leader_is_replaced_from_the_isr_and_rejoins_when_back(cluster):
    adm = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    create_replicated(adm, "fenced", n=6)
    p = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
    for i in range(600):
        p.produce("fenced", value=f"a{i}".encode(), partition=i % 6)
    assert p.flush(30) == 0
    before = partitions(adm, "fenced")
    stopped = cluster.node(2)
    led = [q for q, (leader, _, _) in before.items() if leader == 2]
    assert led, before
    others = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in cluster.nodes if n is not stopped)})
    stopped.proc.send_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        wait_until(lambda: all(partitions(others, "fenced")[q][0] not in (-1, 2) for q in led), 30,
                   "the fenced broker's partitions get new leaders")
        fenced = time.monotonic() - t0
        during = partitions(others, "fenced")
        for q, (leader, _, isr) in during.items():
            assert 2 not in isr and leader in (1, 3), f"partition {q}: leader {leader}, ISR {isr}"
        # A new producer (the first one's requests to the stopped broker would hang until its
        # request timeout, as with Kafka): acks=all with min.insync.replicas=2 on 2 replicas.
        p2 = Producer({"bootstrap.servers": ",".join(n.bootstrap for n in cluster.nodes if n is not stopped), "acks": "all"})
        for i in range(600):
            p2.produce("fenced", value=f"b{i}".encode(), partition=i % 6)
        assert p2.flush(30) == 0, "acks=all on the two remaining in-sync replicas"
    finally:
        stopped.proc.send_signal(signal.SIGCONT)
    t1 = time.monotonic()
    wait_until(lambda: full_isr(adm, "fenced", [1, 2, 3]), 60, "broker 2 rejoins every ISR")
    print(f"\nbroker 2 SIGSTOPped: its {len(led)} partitions led by others {fenced:.2f}s later; "
          f"back in every ISR {time.monotonic() - t1:.2f}s after SIGCONT")
    values = consumed_values(cluster.node(1), "fenced", n=6)
    assert sorted(values) == sorted([f"a{i}" for i in range(600)] + [f"b{i}" for i in range(600)])


def test_rolling_restart_of_every_broker_keeps_replicas_in_sync_and_records(cluster):
    """Each broker in turn: SIGTERM (controlled shutdown: its leaderships move), start, wait until
    it is back in every ISR (what the operator waits for). Leadership moves twice without writes
    in between, so followers meet epochs their leader never wrote."""
    adm = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    create_replicated(adm, "rolled", n=6)
    p = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "enable.idempotence": True})
    for i in range(3000):
        p.produce("rolled", value=f"a{i}".encode(), partition=i % 6)
    assert p.flush(30) == 0
    times = []
    for n in cluster.nodes:
        t0 = time.monotonic()
        n.stop()
        n.start()
        wait_until(lambda: full_isr(adm, "rolled", [1, 2, 3]), 60, f"broker {n.node_id} back in every ISR")
        times.append(round(time.monotonic() - t0, 2))
    print(f"\nrestart to back in every ISR, per broker: {times} s")
    p = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "enable.idempotence": True})
    for i in range(3000):
        p.produce("rolled", value=f"b{i}".encode(), partition=i % 6)
    assert p.flush(30) == 0
    values = consumed_values(cluster.nodes[0], "rolled", n=6)
    assert sorted(values) == sorted([f"a{i}" for i in range(3000)] + [f"b{i}" for i in range(3000)])
    # Every replica holds the same records: move each partition's leadership around once more.
    for n in cluster.nodes:
        n.stop()
        n.start()
        wait_until(lambda: full_isr(adm, "rolled", [1, 2, 3]), 60, f"broker {n.node_id} back in every ISR")
    assert sorted(consumed_values(cluster.nodes[1], "rolled", n=6)) == sorted(values)


def checkpointed(node, file: str, topic: str, partition: int) -> int:
    """A partition's offset in one of `node`'s checkpoint files (written at shutdown too)."""
    lines = (node.data_dir / file).read_text().splitlines()
    found = [int(l.rsplit(" ", 2)[2]) for l in lines[2:] if l.rsplit(" ", 2)[:2] == [topic, str(partition)]]
    assert len(found) == 1, lines
    return found[0]


def test_deleted_records_stay_deleted_on_every_replica_and_a_replica_left_behind_restarts_at_the_log_start(cluster):
    """DeleteRecords moves every replica's log start (followers take the leader's from their
    fetches), so deleted records do not come back when a follower leads. A replica that was away
    while the leader's log start passed its log end cannot fetch where it ends: it starts again at
    the leader's log start and rejoins the ISR."""
    adm = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    fut = adm.create_topics([NewTopic("trimmed", 1, 3, config={"min.insync.replicas": "2"})], operation_timeout=30)
    fut["trimmed"].result(timeout=40)
    wait_until(lambda: full_isr(adm, "trimmed", [1, 2, 3]), 30, "3 in-sync replicas")
    p = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all", "enable.idempotence": True})

    def produce(prefix: str, n: int) -> None:
        for i in range(n):
            p.produce("trimmed", value=f"{prefix}{i}".encode(), partition=0)
        assert p.flush(30) == 0

    def delete_before(offset: int) -> int:
        res = adm.delete_records([TopicPartition("trimmed", 0, offset)], operation_timeout=30)
        return next(iter(res.values())).result(timeout=40).low_watermark

    produce("a", 100)
    # (Consuming now also creates __consumer_offsets while the metadata quorum is whole: at the
    # end two of the three nodes, controllers too, are stopped.)
    assert [r.offset for r in consume_all(cluster.nodes[0], "trimmed", [0])[0]] == list(range(100))
    assert delete_before(40) == 40
    leader = partitions(adm, "trimmed")[0][0]
    away, other = [n for n in cluster.nodes if n.node_id != leader]
    away.stop()
    # DeleteRecords answered once every in-sync replica's log started at 40 (Kafka's low
    # watermark), so the follower stopped just after it had moved its own.
    assert checkpointed(away, "log-start-offset-checkpoint", "trimmed", 0) == 40
    wait_until(lambda: partitions(adm, "trimmed")[0][2] == sorted([leader, other.node_id]), 30,
               f"broker {away.node_id} out of the ISR")
    produce("b", 100)
    assert delete_before(150) == 150
    produce("c", 10)  # acknowledged by the follower in the ISR: it fetched after the deletion
    away.start()
    wait_until(lambda: full_isr(adm, "trimmed", [1, 2, 3]), 60, f"broker {away.node_id} back in the ISR")

    # The replica that was away leads (the others stop: controlled shutdown hands it the
    # partition): the deleted records stay deleted, the rest is there.
    other.stop()
    cluster.node(leader).stop()
    wait_until(lambda: partitions(AdminClient({"bootstrap.servers": away.bootstrap}), "trimmed")[0][0] == away.node_id,
               30, f"broker {away.node_id} leads")
    got = consume_all(away, "trimmed", [0])[0]
    assert [r.offset for r in got] == list(range(150, 210))
    assert [r.value.decode() for r in got] == [f"b{i}" for i in range(50, 100)] + [f"c{i}" for i in range(10)]
    away.stop()
    # Every replica kept the log start (the one that stayed in sync took it from its fetches)
    # and checkpointed the high watermark it restarts from: the last leader all of it; a
    # follower learns the leader's from its next fetch, so one stopped right after the "c"
    # records may hold the one before them.
    assert {n.node_id: checkpointed(n, "log-start-offset-checkpoint", "trimmed", 0) for n in cluster.nodes} == \
        {1: 150, 2: 150, 3: 150}
    hws = {n.node_id: checkpointed(n, "replication-offset-checkpoint", "trimmed", 0) for n in cluster.nodes}
    assert hws[away.node_id] == 210 and all(h in (200, 210) for h in hws.values()), hws


def test_commits_waiting_for_a_stopped_follower_do_not_hold_up_the_groups_of_their_partition(tmp_path, request):
    """One `__consumer_offsets` partition (so every group shares one coordinator shard) on three
    replicas, one follower SIGSTOPped and kept in the ISR (long lag and session timeouts). Four
    groups commit at once: all four commits are appended while none is acknowledged (the shard
    is not locked across a wait for the ISR, as Kafka's coordinator runtime is not). Meanwhile a
    non-stable OffsetFetch (require_stable=false) answers from what the ISR has; a stable one
    waits, as Kafka's, and shows the new offset once the follower runs again."""
    c = Cluster(require_broker_binary(), tmp_path, 3, 0, {
        "offsets.topic.num.partitions": "1",
        "offsets.topic.replication.factor": "3",
        "offsets.commit.timeout.ms": "120000",
        "replica.lag.time.max.ms": "120000",
        "broker.session.timeout.ms": "120000",
    })
    request.node._oxbow_brokers = c.nodes
    c.start()
    try:
        adm = AdminClient({"bootstrap.servers": c.bootstrap()})
        create_replicated(adm, "committed", n=1)
        tp = [TopicPartition("committed", 0)]
        groups = [f"group-{i}" for i in range(4)]
        results: list = []

        def consumer(group: str, bootstrap: str, **extra) -> Consumer:
            return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                             "socket.timeout.ms": 60000, **extra,
                             "on_commit": lambda err, parts: results.append((group, err, [p.offset for p in parts]))})

        first = [consumer(g, c.bootstrap()) for g in groups]
        for k, cons in enumerate(first):
            cons.commit(offsets=[TopicPartition("committed", 0, 10 + k)], asynchronous=False)
        wait_until(lambda: full_isr(adm, "__consumer_offsets", [1, 2, 3]), 30, "__consumer_offsets fully in sync")
        leader = partitions(adm, "__consumer_offsets")[0][0]
        controller = c.node(leader).leader()
        follower = next(n for n in c.nodes if n.node_id not in (leader, controller))
        to_leader = c.node(leader).bootstrap
        committers = [consumer(g, to_leader) for g in groups]
        unstable = consumer(groups[0], to_leader, **{"isolation.level": "read_uncommitted"})
        stable = consumer(groups[0], to_leader)
        log = segment_files(c.node(leader).data_dir / "__consumer_offsets-0")[-1]
        def last_offset() -> int:
            found = read_batches(log)[0]
            return found[-1].last_offset if found else -1

        before = last_offset()
        results.clear()
        stable_read: list = []
        follower.proc.send_signal(signal.SIGSTOP)
        try:
            for k, cons in enumerate(committers):
                cons.commit(offsets=[TopicPartition("committed", 0, 100 + k)], asynchronous=True)
            wait_until(lambda: last_offset() >= before + 4, 30,
                       "all four commits appended to the leader's log while the follower is stopped")
            seen = [p.offset for p in unstable.committed(tp, timeout=30)]
            assert seen == [10], (
                "a non-stable OffsetFetch answers at once, without the commit the ISR lacks; "
                f"leader {leader}, controller {controller}, stopped follower {follower.node_id} "
                f"({follower.proc.pid}, {open(f'/proc/{follower.proc.pid}/stat').read().split()[2]}), "
                f"__consumer_offsets now {describe(lambda: partitions(adm, '__consumer_offsets'))}, "
                f"log end {last_offset()} (before the commits {before})")
            reader = threading.Thread(target=lambda: stable_read.extend(stable.committed(tp, timeout=60)))
            reader.start()
            for cons in committers:
                cons.poll(0.1)
            assert results == [], "no commit is acknowledged before the ISR has it"
        finally:
            follower.proc.send_signal(signal.SIGCONT)
        reader.join(90)
        assert [p.offset for p in stable_read] == [100], "the stable OffsetFetch shows the commit in flight"
        wait_until(lambda: [x.poll(0.1) for x in committers] and len(results) == 4, 60, "every commit answered")
        assert sorted(results) == [(g, None, [100 + k]) for k, g in enumerate(groups)]
        assert [first[k].committed(tp, timeout=30)[0].offset for k in range(4)] == [100, 101, 102, 103]
        for x in first + committers + [unstable, stable]:
            x.close()
    finally:
        c.close()
