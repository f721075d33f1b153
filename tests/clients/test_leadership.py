"""Leaders moving back and forth under idempotent producers, on three combined nodes.

An idempotent acks=all producer of each kind (librdkafka and Kafka's Java client) runs the whole
time on a replication factor 3, min.insync.replicas 2 topic of six partitions, while every
partition's leadership moves round the three brokers again and again: Kafka's
`kafka-reassign-partitions` reorders the replicas and `kafka-leader-election` elects the
preferred (first) one, round after round; in one round a broker is SIGKILLed, in another the
active controller is, each started again. Every leadership change races requests in flight:
produce requests routed by the broker's view from before the change, and followers' fetches
sent to the old leader. Then everything is read back: no acknowledged record lost, no send
refused (an idempotent producer's epoch must never fall behind its own writes, which is what
InvalidProducerEpochException would say), and in every leader's log each producer epoch's
sequences run on without a gap or a repeat: the broker never accepted a retry twice.
The Java producer duplicates nothing. librdkafka may: when one partition answers
OUT_OF_ORDER_SEQUENCE_NUMBER (a later batch reached the new leader before an earlier one's
retry, which Kafka answers the same way) it bumps its epoch for every partition and renumbers
batches whose fate it does not know, and those already written are written again (librdkafka
issue 4953, reported against Apache Kafka). Such copies are allowed only under a newer epoch,
and counted.

The same test runs against Apache Kafka 4.1.1:
    OXBOW_BROKER_BIN=tests/clients/reference/kafka_as_oxbow.py python -m pytest tests/clients/test_leadership.py
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from oxbow_cluster import Cluster
from oxbow_harness import ProducerBatch, consume_all, producer_batches, require_broker_binary, wait_until
from test_quorum import kafka_clients_classpath
from test_reassignment import REFERENCE, TOPIC, JavaLoad, RdkafkaLoad, active_controller, layout, tool

ROUNDS = 9
NODES = (1, 2, 3)


@pytest.fixture
def cluster(request, tmp_path):
    c = Cluster(require_broker_binary(), tmp_path, controllers=3, brokers=0,
                overrides={"replica.lag.time.max.ms": "10000", "offsets.topic.replication.factor": "3"})
    request.node._oxbow_brokers = c.nodes
    c.start(timeout=180 if REFERENCE else 60)
    yield c
    c.close()


def rotated(r: int) -> dict[int, list[int]]:
    """Round r's replica order of each partition: partition p led by broker (p + r) % 3 + 1."""
    return {p: [NODES[(p + r + k) % 3] for k in range(3)] for p in range(6)}


def led_as(adm: AdminClient, want: dict[int, list[int]]) -> bool:
    try:
        now = layout(adm)
    except Exception:  # noqa: BLE001 - retried until the deadline
        return False
    return all(now[p][1] == r and now[p][0] == r[0] and now[p][2] == sorted(r) for p, r in want.items())


def elect_preferred(cp: str, bootstrap: str) -> str:
    """Kafka's kafka-leader-election (its tools jar, unchanged)."""
    r = subprocess.run(["java", "-cp", cp, "org.apache.kafka.tools.LeaderElectionCommand",
                        "--bootstrap-server", bootstrap, "--election-type", "PREFERRED", "--all-topic-partitions"],
                       capture_output=True, text=True, timeout=180)
    # Exit status 1 when some partition needed no election (its preferred replica led already,
    # or was not in sync yet): the next round elects again.
    if r.returncode not in (0, 1):
        pytest.fail(f"kafka-leader-election failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-3000:]}", pytrace=False)
    return r.stdout + r.stderr


def leaders_batches(cluster: Cluster, adm: AdminClient) -> dict[int, list[ProducerBatch]]:
    """Each partition's batches as its leader's log holds them."""
    lay = layout(adm)
    return {p: producer_batches(cluster.node(lay[p][0]).data_dir / f"{TOPIC}-{p}") for p in range(6)}


def sequence_breaks(batches: dict[int, list[ProducerBatch]]) -> list[str]:
    """The broker's side of idempotence: in each partition, each producer epoch's batches carry
    consecutive sequences in offset order, with no gap and none twice (a retry the broker
    accepted twice would repeat its sequences). Its first batch there may start anywhere: a
    leader with no state for a producer accepts any sequence (Kafka's rule), and a producer's
    first batch can reach a new leader after its earlier ones went to the old one."""
    breaks = []
    for p, bs in batches.items():
        expected: dict[tuple[int, int], int] = {}
        for b in bs:
            if b.producer_id < 0 or b.control:
                continue
            key = (b.producer_id, b.producer_epoch)
            if key in expected and b.base_sequence != expected[key]:
                breaks.append(f"partition {p}, offset {b.base_offset}: producer {key[0]} epoch {key[1]} "
                              f"sequence {b.base_sequence}, expected {expected[key]}")
            expected[key] = b.base_sequence + b.count
    return breaks


def copies_of(batches: dict[int, list[ProducerBatch]]) -> dict[str, list[tuple[int, int, int, int]]]:
    """Every record value: its copies as (partition, offset, producer id, producer epoch)."""
    where: dict[str, list[tuple[int, int, int, int]]] = {}
    for p, bs in batches.items():
        for b in bs:
            assert b.values is not None, f"partition {p}: a compressed batch at {b.base_offset}"
            for k, v in enumerate(b.values):
                where.setdefault(v.decode(), []).append((p, b.base_offset + k, b.producer_id, b.producer_epoch))
    return where


def test_leaders_move_back_and_forth_under_idempotent_producers(cluster, tmp_path):
    cp = kafka_clients_classpath(tmp_path)
    bootstrap = cluster.bootstrap()
    adm = AdminClient({"bootstrap.servers": bootstrap})
    start = rotated(0)
    fut = adm.create_topics([NewTopic(TOPIC, num_partitions=6, replica_assignment=[start[p] for p in range(6)],
                                      config={"min.insync.replicas": "2"})])
    fut[TOPIC].result(timeout=60)
    wait_until(lambda: led_as(adm, start), 60, "every partition led by its first replica, all in sync")

    rdkafka = RdkafkaLoad(bootstrap)
    rdkafka.t.start()
    jload = JavaLoad(cp, bootstrap, tmp_path)
    wait_until(lambda: len(rdkafka.acked) >= 2000, 90, "the librdkafka producer is acknowledged")

    plan = tmp_path / "reorder.json"
    for r in range(1, ROUNDS + 1):
        want = rotated(r)
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": p, "replicas": want[p], "log_dirs": ["any"] * 3} for p in range(6)]}))
        tool(cp, bootstrap, "--reassignment-json-file", str(plan), "--execute")
        if r == 3:
            # A broker dies while the leaders move to it and away from it.
            victim = cluster.node(NODES[r % 3])
            victim.kill()
            time.sleep(2)
            victim.start(timeout=180 if REFERENCE else 60)
            # Until the restarted node serves (once registered and unfenced, as Kafka's broker)
            # and every node lists all three: its previous incarnation's session must expire
            # first (DUPLICATE_BROKER_REGISTRATION, as in Kafka), and meanwhile the next round's
            # reassignment would name a broker the cluster does not list.
            cluster.wait_ready(timeout=120)
        if r == 6:
            victim = cluster.node(active_controller(cp, bootstrap))
            victim.kill()
            time.sleep(2)
            victim.start(timeout=180 if REFERENCE else 60)
            cluster.wait_ready(timeout=120)  # as above
        t0 = time.monotonic()
        deadline = t0 + 180
        while not led_as(adm, want):
            assert time.monotonic() < deadline, f"round {r}: never led as {want}: {layout(adm)}"
            elect_preferred(cp, bootstrap)
            time.sleep(0.5)
        print(f"round {r}: leaders {[want[p][0] for p in range(6)]} after {time.monotonic() - t0:.1f}s; "
              f"librdkafka acknowledged {len(rdkafka.acked)} so far")

    at_end = len(rdkafka.acked)
    wait_until(lambda: len(rdkafka.acked) >= at_end + 1000, 90, "records acknowledged after the last round")
    rdkafka.stop.set()
    rdkafka.t.join(360)
    jstats, jacked = jload.finish()

    got = consume_all(cluster.brokers[0], TOPIC, partitions=range(6))
    values = [r.value.decode() for recs in got.values() for r in recs]
    batches = leaders_batches(cluster, adm)
    breaks = sequence_breaks(batches)
    assert not breaks, f"{len(breaks)} sequence breaks: {breaks[:10]}"
    copies = copies_of(batches)
    for name, acked, prefix in (("librdkafka", rdkafka.acked, "c"), ("java", jacked, "j")):
        mine = [v for v in values if v.startswith(prefix)]
        lost = set(acked) - set(mine)
        dup = len(mine) - len(set(mine))
        twice = {v: w for v, w in copies.items() if v.startswith(prefix) and len(w) > 1}
        resent = [v for v, w in twice.items() if len({(pid, epoch) for _, _, pid, epoch in w}) == len(w)]
        print(f"{name}: acknowledged {len(acked)} / lost {len(lost)} / duplicated {dup}"
              f" ({len(resent)} re-sent by the client under a new producer epoch)")
        assert acked, f"{name}: nothing acknowledged"
        assert not lost, f"{name}: {len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
        assert dup == sum(len(w) - 1 for w in twice.values()), "the leaders' logs and the consumer disagree"
        assert len(resent) == len(twice), \
            f"{name}: written twice under one producer epoch: {sorted(set(twice) - set(resent))[:5]}"
        if name == "java":
            assert dup == 0, f"java: {dup} duplicates, e.g. {sorted(twice.items())[:5]}"
        elif dup:
            # Re-sent under a bumped epoch (see the module's docstring): not the broker's to
            # recognise, as no broker can.
            print(f"librdkafka: re-sent under a new epoch (partition, offset, producer, epoch): "
                  f"{sorted(twice.items())[:5]}")
    print(f"java: {jstats}; librdkafka longest stall {rdkafka.longest_stall:.2f}s")
    assert not rdkafka.failed, rdkafka.failed[:5]
    assert jstats["failed"] == 0, jstats
